#!/usr/bin/env python
"""Kyutai STT (the stt-2.6b-en architecture, random weights) on the CPU: speed (RTFx) and peak memory, ours against
transformers, offline transcription of one clip.

Run from the repository root with the project's Python (torch, this package importable):

    python3 benchmarks/kyutai_speed.py --json bench-out/kyutai_speed.json

    options: --model DIR       the transformers-format folder (default local-models/kyutai-stt-2.6b-random, made by
                               benchmarks/make_kyutai_model.py)
             --hf-python P     Python of a virtual environment with transformers 5.25 (default .venv-nemo/bin/python)
             --threads N       torch threads and OMP_NUM_THREADS in every child (default 2)
             --rounds N        timed calls of each engine after one warm-up (default 3)
             --seconds S       clip length (default 60)
             --dtype D         ours: float32 (default), bfloat16 or int8 (the LM's; the codec stays float32);
                               transformers runs float32 (its codec is kept float32 whatever the dtype)

The clip: `S` seconds of real speech, the dev utterances of ../shared/audio/dev joined end to end
(benchmarks/speech_clip.py), resampled to 24 kHz once (`transcribe.audio.load_audio`) and handed to both engines as
the same float32 array. Both decode it whole and greedily: transformers' processor(audio, sampling_rate=24000) then
generate(**inputs) (one token per 80 ms frame of the padded input, the codec encoding the whole input at once);
ours model.transcribe(pcm, sample_rate=24000) (the same positions; the codec in blocks of 60 s). Both emit exactly one
token per frame, so the work is the same; the token ids are compared (equal on a random model unless a near-tie
flips a step). One child process per engine, both loaded at once, their calls alternating (the order flips every
round); per engine: load time, best and median call, RTFx, peak RSS; ratios ours / transformers. Timing on a shared
machine is noisy: check `uptime` first.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from machine import cpu_info, cpu_line, package_commit
from parakeet_rtfx import RESULT_TAG, ChildProcess, _peak_rss_mb, _rss_mb, serve_calls, shown, summarize

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_MODEL = "local-models/kyutai-stt-2.6b-random"  # benchmarks/make_kyutai_model.py
DEFAULT_HF_PYTHON = ".venv-nemo/bin/python"
RATE = 24000


def _hf_child(model_path: str):
    import torch
    from transformers import KyutaiSpeechToTextForConditionalGeneration, KyutaiSpeechToTextProcessor
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    rss_import = _rss_mb()
    t0 = time.perf_counter()
    proc = KyutaiSpeechToTextProcessor.from_pretrained(model_path)
    model = KyutaiSpeechToTextForConditionalGeneration.from_pretrained(model_path, dtype=torch.float32).eval()
    load_s = time.perf_counter() - t0

    def run(pcm):
        inputs = proc(audio=pcm, sampling_rate=RATE, return_tensors="pt")
        with torch.inference_mode():
            gen = model.generate(**inputs)
        return proc.batch_decode(gen, skip_special_tokens=True)[0], gen[0, 1:].tolist()

    return rss_import, load_s, run


def _ours_child(model_path: str, threads: int, dtype: str):
    import transcribe
    import transcribe.runtime

    transcribe.runtime.tune_malloc()
    rss_import = _rss_mb()
    t0 = time.perf_counter()
    model = transcribe.load_model(model_path, threads=threads, dtype=None if dtype == "float32" else dtype)
    load_s = time.perf_counter() - t0

    def run(pcm):
        from transcribe.runtime import model_call

        with model_call(model.threads):
            run_ = model.decode_pcm(pcm)
        ids = [s.id for s in run_.steps]
        return model.decode_ids(ids), ids

    return rss_import, load_s, run


def child_main(args) -> int:
    import numpy as np
    import soundfile as sf
    import torch

    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    pcm, sr = sf.read(args.clip, dtype="float32")
    assert sr == RATE and pcm.ndim == 1
    pcm = np.ascontiguousarray(pcm)
    rss_import, load_s, run = _hf_child(args.model) if args.child == "hf" else _ours_child(args.model, args.threads, args.dtype)
    rss_loaded = _rss_mb()
    warmup_s, times, (text, ids) = serve_calls(run, pcm, load_s)
    print(RESULT_TAG + json.dumps(dict(
        impl=args.child, threads=torch.get_num_threads(), audio_s=len(pcm) / RATE, load_s=round(load_s, 2),
        warmup_s=round(warmup_s, 2), times_s=[round(t, 3) for t in times], peak_rss_mb=round(_peak_rss_mb()),
        rss_after_import_mb=round(rss_import), rss_after_load_mb=round(rss_loaded), tokens=len(ids), token_ids=ids,
        text80=text[:80], torch=torch.__version__)), flush=True)
    return 0


class Child(ChildProcess):
    def __init__(self, python: str, impl: str, model: str, clip: Path, args):
        env = dict(os.environ)
        env["OMP_NUM_THREADS"] = str(args.threads)
        env["MKL_NUM_THREADS"] = str(args.threads)
        env["TOKENIZERS_PARALLELISM"] = "false"
        if impl == "ours":
            env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        cmd = [python, str(Path(__file__).resolve()), "--child", impl, "--clip", str(clip), "--model", model,
               "--threads", str(args.threads), "--dtype", args.dtype]
        super().__init__(f"{impl} {Path(model).name}", cmd, env)


def table(row: dict) -> str:
    h, o = row.get("hf"), row.get("ours")
    lines = [f"transformers RTFx best / median: {h['rtfx_best']:.2f} / {h['rtfx_median']:.2f}, peak RSS "
             f"{h['peak_rss_mb']} MB" if h else "transformers: -",
             f"ours RTFx best / median: {o['rtfx_best']:.2f} / {o['rtfx_median']:.2f}, peak RSS {o['peak_rss_mb']} MB"
             if o else "ours: -"]
    if h and o:
        same = h["token_ids"] == o["token_ids"]
        lines.append(f"ours/transformers: best {h['best_s'] / o['best_s']:.2f}x, median "
                     f"{h['median_s'] / o['median_s']:.2f}x, per round {row.get('round_ratio_median', 0):.2f}x; "
                     f"tokens {h['tokens']} / {o['tokens']}, same ids: {'yes' if same else 'no'}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model")
    ap.add_argument("--hf-python")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--impls", default="hf,ours")
    ap.add_argument("--dtype", choices=["float32", "bfloat16", "int8"], default="float32")
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--child", choices=["hf", "ours"], help=argparse.SUPPRESS)
    ap.add_argument("--clip", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child_main(args)
    model = os.path.abspath(args.model) if args.model else str(REPO / DEFAULT_MODEL)
    args.hf_python = os.path.abspath(args.hf_python) if args.hf_python else str(REPO / DEFAULT_HF_PYTHON)
    impls = [i.strip() for i in args.impls.split(",") if i.strip()]
    if not set(impls) <= {"hf", "ours"}:
        ap.error("impls: hf, ours")
    if not (Path(model) / "config.json").exists():
        ap.error(f"{model}: no model (make it with benchmarks/make_kyutai_model.py)")
    import soundfile as sf
    from speech_clip import speech_clip

    sys.path.insert(0, str(REPO))
    from transcribe.audio import load_audio

    pcm16, used = speech_clip(args.seconds)
    pcm = load_audio(pcm16, RATE, source_rate=16000)
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    load_start = os.getloadavg()
    row: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        clip = Path(tmp) / "clip.wav"
        sf.write(clip, pcm, RATE, subtype="FLOAT")
        kids = {i: Child(args.hf_python if i == "hf" else sys.executable, i, model, clip, args) for i in impls}
        ratios = []
        for k in range(args.rounds):
            order = impls if k % 2 == 0 else impls[::-1]
            got = {i: kids[i].call() for i in order}
            if len(got) == 2:
                ratios.append(got["hf"] / got["ours"])
            print(f"    round {k + 1}: " + ", ".join(f"{i} {got[i]:.2f} s" for i in impls)
                  + f" (load average {os.getloadavg()[0]:.2f})", file=sys.stderr, flush=True)
        for i in impls:
            row[i] = summarize({**kids[i].finish(), "load_s": kids[i].ready["load_s"],
                                "warmup_s": kids[i].ready["warmup_s"]})
        if ratios:
            row["round_ratios"] = [round(x, 3) for x in ratios]
            row["round_ratio_median"] = round(statistics.median(ratios), 3)
    text = table(row)
    if args.json:
        out = dict(started=started, package_commit=package_commit(), model=shown(model), ours_dtype=args.dtype,
                   clip_seconds=args.seconds,
                   clip_utterances=used, threads=args.threads, rounds=args.rounds, **cpu_info(),
                   loadavg_start=[round(x, 2) for x in load_start],
                   loadavg_end=[round(x, 2) for x in os.getloadavg()], results=row, table=text)
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    print(f"\nKyutai STT ({shown(model)}, random weights), ours at {package_commit()}, {args.seconds:g} s clip, "
          f"ours {args.dtype}, {args.threads} threads, {args.rounds} alternating rounds after 1 warm-up; {cpu_line()}; load average at "
          f"start {load_start[0]:.2f}, at end {os.getloadavg()[0]:.2f}\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
