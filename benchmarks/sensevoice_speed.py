#!/usr/bin/env python
"""SenseVoiceSmall (full-size architecture) on the CPU: speed (RTFx) and peak memory, ours against funasr.

Run from the repository root with the project's Python (torch, this package importable):

    python3 benchmarks/sensevoice_speed.py --json benchmarks/results/sensevoice_speed.json

    options: --model DIR       the funasr-layout folder (default local-models/sensevoice-small-random, made by
                               benchmarks/make_sensevoice_model.py)
             --funasr-python P Python of the funasr virtual environment (default .venv-funasr/bin/python, made by
                               tools/setup_funasr_venv.sh)
             --threads N       torch threads and OMP_NUM_THREADS in every child (default 2)
             --rounds N        timed calls of each engine after one warm-up (default 3)
             --seconds S       clip length (default 60)
             --impls L         comma list of funasr, ours (default funasr,ours)

Default paths are relative to the repository root (git-ignored folders); paths given on the command line are
relative to the working directory.

The clip: `S` seconds of real speech, the dev utterances of ../shared/audio/dev joined end to end
(benchmarks/speech_clip.py), as float32 PCM at 16 kHz handed to both engines as an array.

The same work in both: funasr's AutoModel without a VAD model decodes the whole clip in one call (its model card
caps a call at 30 s of audio, but nothing enforces it), and ours runs with max_piece_s 60, so a clip of up to
60 s is one piece too; both then give the same ids (compared and reported).
  funasr  AutoModel(model=DIR, device="cpu", frontend_conf={"dither": 0.0}, disable_update=True), a call is
          generate(input=pcm, language="en", use_itn=False) (batch of one, greedy CTC).
  ours    transcribe.runtime.tune_malloc(), transcribe.load_model(DIR, threads=N), a call is
          model.transcribe(pcm, language="en", max_piece_s=60).
One child process per engine, both loaded at the same time, their calls alternating (the order flips every
round). Each child: one warm-up call, then one timed call (time.perf_counter) per round. Reported per engine:
load time, best and median call, RTFx = audio seconds / best (and / median), peak RSS (getrusage ru_maxrss,
model load included), the ids emitted (the tags' ids left out: ours keeps them out of the tokens) and whether
both engines emitted the same. Ratios ours/funasr: of the
best calls, of the medians, and the median of the per-round ratios.

Timing on a shared machine is noisy: check `uptime` first and run when the load average is low.
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

from canary_speed import SAMPLE_RATE  # benchmarks/ (this script's folder is on sys.path)
from machine import cpu_info, cpu_line, package_commit
from parakeet_rtfx import RESULT_TAG, serve_calls, ChildProcess, _peak_rss_mb, _rss_mb, shown, summarize

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_MODEL = "local-models/sensevoice-small-random"  # benchmarks/make_sensevoice_model.py
DEFAULT_FUNASR_PYTHON = ".venv-funasr/bin/python"  # tools/setup_funasr_venv.sh
MAX_PIECE_S = 60.0


def _funasr_child(model_path: str):
    import logging

    import torch
    from funasr import AutoModel

    logging.disable(logging.WARNING)
    rss_import = _rss_mb()
    t0 = time.perf_counter()
    am = AutoModel(model=model_path, device="cpu", disable_update=True, disable_pbar=True, disable_log=True,
                   frontend_conf={"dither": 0.0})
    load_s = time.perf_counter() - t0
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=am.kwargs["tokenizer_conf"]["bpemodel"])
    tag = {i for i in range(sp.get_piece_size()) if sp.id_to_piece(i).startswith("<|")}
    captured = {}
    am.model.encoder.register_forward_hook(lambda m, i, o: captured.__setitem__("enc", o))

    def run(pcm):
        res = am.generate(input=pcm, language="en", use_itn=False)[0]
        enc, lens = captured["enc"]
        with torch.inference_mode():
            best = am.model.ctc.log_softmax(enc)[0, : int(lens[0])].argmax(-1)
        ids = [int(i) for i in torch.unique_consecutive(best) if int(i) != 0 and int(i) not in tag]
        return res["text"], ids, [len(pcm)]

    return rss_import, load_s, run


def _ours_child(model_path: str, threads: int):
    import transcribe
    import transcribe.runtime

    transcribe.runtime.tune_malloc()  # the CLI does the same before it loads a model
    rss_import = _rss_mb()
    t0 = time.perf_counter()
    model = transcribe.load_model(model_path, threads=threads)
    load_s = time.perf_counter() - t0

    def run(pcm):
        t = model.transcribe(pcm, language="en", max_piece_s=MAX_PIECE_S)
        return t.text, [tok.id for tok in t.tokens], [len(pcm)]

    return rss_import, load_s, run


def child_main(args) -> int:
    import numpy as np
    import soundfile as sf
    import torch

    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    pcm, sr = sf.read(args.clip, dtype="float32")
    assert sr == SAMPLE_RATE and pcm.ndim == 1
    pcm = np.ascontiguousarray(pcm)
    if args.child == "funasr":
        rss_import, load_s, run = _funasr_child(args.model)
    else:
        rss_import, load_s, run = _ours_child(args.model, args.threads)
    rss_loaded = _rss_mb()
    warmup_s, times, (text, ids, pieces) = serve_calls(run, pcm, load_s)
    result = dict(
        impl=args.child, threads=torch.get_num_threads(), audio_s=len(pcm) / SAMPLE_RATE,
        load_s=round(load_s, 2), warmup_s=round(warmup_s, 2), times_s=[round(t, 3) for t in times],
        peak_rss_mb=round(_peak_rss_mb()), rss_after_import_mb=round(rss_import), rss_after_load_mb=round(rss_loaded),
        piece_samples=pieces, tokens=len(ids), token_ids=ids, text80=text[:80], torch=torch.__version__,
    )
    print(RESULT_TAG + json.dumps(result), flush=True)
    return 0


class Child(ChildProcess):
    def __init__(self, python: str, impl: str, model: str, clip: Path, args):
        env = dict(os.environ)
        env["OMP_NUM_THREADS"] = str(args.threads)
        env["MKL_NUM_THREADS"] = str(args.threads)
        env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        cmd = [python, str(Path(__file__).resolve()), "--child", impl, "--clip", str(clip), "--model", model,
               "--threads", str(args.threads)]
        super().__init__(f"{impl} {Path(model).name}", cmd, env)


def table(rows: list[dict]) -> str:
    head = ["funasr RTFx best / median", "ours RTFx best / median", "ours/funasr best", "median", "per round",
            "funasr peak RSS", "ours peak RSS", "ids funasr / ours", "same ids"]
    lines = [head]
    for r in rows:
        f, o = r.get("funasr"), r.get("ours")
        rt = lambda d: f"{d['rtfx_best']:.2f} / {d['rtfx_median']:.2f}" if d else "-"  # noqa: E731
        rss = lambda d: f"{d['peak_rss_mb']} MB" if d else "-"  # noqa: E731
        both = f and o
        lines.append([
            rt(f), rt(o), f"{f['best_s'] / o['best_s']:.2f}x" if both else "-",
            f"{f['median_s'] / o['median_s']:.2f}x" if both else "-",
            f"{r['round_ratio_median']:.2f}x" if r.get("round_ratio_median") else "-", rss(f), rss(o),
            f"{f['tokens'] if f else '-'} / {o['tokens'] if o else '-'}",
            ("yes" if f["token_ids"] == o["token_ids"] else "no") if both else "-"])
    w = [max(len(str(ln[i])) for ln in lines) for i in range(len(head))]
    out = [" | ".join(str(c).ljust(w[i]) for i, c in enumerate(ln)) for ln in lines]
    out.insert(1, "-+-".join("-" * x for x in w))
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help=f"the model folder (default {DEFAULT_MODEL} in the repository)")
    ap.add_argument("--funasr-python", help=f"funasr's Python (default {DEFAULT_FUNASR_PYTHON} in the repository)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--impls", default="funasr,ours")
    ap.add_argument("--json", metavar="PATH", help="write the results as JSON here")
    ap.add_argument("--child", choices=["funasr", "ours"], help=argparse.SUPPRESS)
    ap.add_argument("--clip", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child_main(args)
    model = os.path.abspath(args.model) if args.model else str(REPO / DEFAULT_MODEL)
    args.funasr_python = (os.path.abspath(args.funasr_python) if args.funasr_python
                          else str(REPO / DEFAULT_FUNASR_PYTHON))
    impls = [i.strip() for i in args.impls.split(",") if i.strip()]
    if not set(impls) <= {"funasr", "ours"}:
        ap.error("impls: funasr, ours")
    if not (Path(model) / "model.pt").exists():
        ap.error(f"{model}: no model (make it with benchmarks/make_sensevoice_model.py)")
    if "funasr" in impls and not Path(args.funasr_python).exists():
        ap.error(f"{args.funasr_python}: no such Python (make the venv with tools/setup_funasr_venv.sh, "
                 "or pass --funasr-python)")
    from speech_clip import speech_clip

    import soundfile as sf

    pcm, used = speech_clip(args.seconds)
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    commit = package_commit()
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        clip = Path(tmp) / "clip.wav"
        sf.write(clip, pcm, SAMPLE_RATE, subtype="FLOAT")
        kids = {i: Child(args.funasr_python if i == "funasr" else sys.executable, i, model, clip, args)
                for i in impls}
        row, ratios, loads = {}, [], []
        for k in range(args.rounds):
            order = impls if k % 2 == 0 else impls[::-1]
            got = {i: kids[i].call() for i in order}
            if len(got) == 2:
                ratios.append(got["funasr"] / got["ours"])
            loads.append(round(os.getloadavg()[0], 2))
            print(f"    round {k + 1}: " + ", ".join(f"{i} {got[i]:.2f} s" for i in impls)
                  + f" (load average {loads[-1]:.2f})", file=sys.stderr, flush=True)
        for i in impls:
            row[i] = summarize({**kids[i].finish(), "load_s": kids[i].ready["load_s"],
                                "warmup_s": kids[i].ready["warmup_s"]})
    if ratios:
        row["round_ratios"] = [round(x, 3) for x in ratios]
        row["round_ratio_median"] = round(statistics.median(ratios), 3)
    row["loadavg_rounds"] = loads
    text = table([row])
    if args.json:
        out = dict(started=started, package_commit=commit, model=shown(model), clip_seconds=args.seconds,
                   clip_utterances=used, threads=args.threads, rounds=args.rounds, **cpu_info(),
                   loadavg_start=[round(x, 2) for x in load_start],
                   loadavg_end=[round(x, 2) for x in os.getloadavg()], results=[row], table=text)
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    print(f"\nSenseVoiceSmall ({shown(model)}, random weights), ours at {commit}, {args.seconds:g} s clip, "
          f"{args.threads} threads, {args.rounds} alternating rounds after 1 warm-up; {cpu_line()}; load average "
          f"at start {load_start[0]:.2f}, at end {os.getloadavg()[0]:.2f}\n")
    print(text)
    if args.json:
        print(f"\nwritten {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
