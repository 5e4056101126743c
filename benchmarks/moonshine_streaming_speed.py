#!/usr/bin/env python
"""Moonshine Streaming (medium architecture, random weights) offline on the CPU: speed (RTFx) and peak memory,
ours against transformers.

Run from the repository root with the project's Python (torch, this package importable):

    .venv-nemo/bin/python benchmarks/make_moonshine_streaming_model.py          # once: the random model
    python3 benchmarks/moonshine_streaming_speed.py --json bench-out/moonshine_streaming_speed.json

    options: --model DIR       the transformers-format folder (default local-models/moonshine-streaming-medium-random)
             --hf-python P     Python of a virtual environment with transformers 5.25 (default .venv-nemo/bin/python)
             --threads N       torch threads and OMP_NUM_THREADS in every child (default 2)
             --rounds N        timed calls of each engine after one warm-up (default 3)
             --seconds S       clip length (default 60; at most 80: the adapter's 4,096 positions hold 82 s)
             --max-new-tokens N  generated tokens, both engines (default 200: a random model never emits EOS)
             --precisions L    comma list of fp32, bf16 (default fp32,bf16)

The clip: `S` seconds of real speech (benchmarks/speech_clip.py), float32 PCM at 16 kHz given to both as an array,
decoded whole by both (ours with max_piece_s 80: one piece, the same work as transformers' one call).

One child process per engine, both loaded at once, their calls alternating (the order flips every round):
  hf    transformers: AutoProcessor + MoonshineStreamingForConditionalGeneration.from_pretrained(model, dtype),
        processor(pcm, return_attention_mask=True), generate(max_new_tokens=N, num_beams=1, do_sample=False)
        under torch.inference_mode(), then batch_decode(skip_special_tokens=True);
  ours  transcribe.load_model(model, threads=N, dtype=None | "bfloat16"), transcribe(pcm, max_new_tokens=N,
        max_piece_s=80) (greedy).
Reported per engine: load time, best and median call, RTFx = audio seconds / best (and / median), peak RSS, the
tokens emitted and whether both emitted the same ids; the ratios ours/transformers. Timing on a shared machine is
noisy: run it alone (`uptime` first).
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
from parakeet_rtfx import RESULT_TAG, ChildProcess, _peak_rss_mb, _rss_mb, serve_calls, shown, summarize

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_MODEL = "local-models/moonshine-streaming-medium-random"  # benchmarks/make_moonshine_streaming_model.py
DEFAULT_HF_PYTHON = ".venv-nemo/bin/python"


def _hf_child(model_path: str, precision: str, max_new_tokens: int):
    import torch
    from transformers import AutoProcessor, MoonshineStreamingForConditionalGeneration
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    rss_import = _rss_mb()
    t0 = time.perf_counter()
    processor = AutoProcessor.from_pretrained(model_path)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[precision]
    model = MoonshineStreamingForConditionalGeneration.from_pretrained(model_path, dtype=dtype).eval()
    load_s = time.perf_counter() - t0

    def run(pcm):
        inputs = processor(pcm, sampling_rate=SAMPLE_RATE, return_tensors="pt", return_attention_mask=True)
        inputs["input_values"] = inputs["input_values"].to(dtype)
        with torch.inference_mode():
            seq = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False, num_beams=1)
        ids = [int(i) for i in seq[0, 1:].tolist() if i not in (0, 2)]
        return processor.batch_decode(seq, skip_special_tokens=True)[0], ids

    return rss_import, load_s, run


def _ours_child(model_path: str, precision: str, threads: int, max_new_tokens: int):
    import transcribe
    import transcribe.runtime

    transcribe.runtime.tune_malloc()
    rss_import = _rss_mb()
    t0 = time.perf_counter()
    model = transcribe.load_model(model_path, threads=threads, dtype={"fp32": None, "bf16": "bfloat16"}[precision])
    load_s = time.perf_counter() - t0

    def run(pcm):
        t = model.transcribe(pcm, sample_rate=SAMPLE_RATE, max_new_tokens=max_new_tokens, max_piece_s=80.0)
        return t.text, [tok.id for tok in t.tokens]

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
    if args.child == "hf":
        rss_import, load_s, run = _hf_child(args.model, args.precision, args.max_new_tokens)
    else:
        rss_import, load_s, run = _ours_child(args.model, args.precision, args.threads, args.max_new_tokens)
    rss_loaded = _rss_mb()
    warmup_s, times, (text, ids) = serve_calls(run, pcm, load_s)
    print(RESULT_TAG + json.dumps(dict(
        impl=args.child, precision=args.precision, threads=torch.get_num_threads(), audio_s=len(pcm) / SAMPLE_RATE,
        load_s=round(load_s, 2), warmup_s=round(warmup_s, 2), times_s=[round(t, 3) for t in times],
        peak_rss_mb=round(_peak_rss_mb()), rss_after_import_mb=round(rss_import), rss_after_load_mb=round(rss_loaded),
        tokens=len(ids), token_ids=ids, text80=text[:80], torch=torch.__version__)), flush=True)
    return 0


class Child(ChildProcess):
    def __init__(self, python: str, impl: str, model: str, precision: str, clip: Path, args):
        env = dict(os.environ)
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(args.threads)
        env["TOKENIZERS_PARALLELISM"] = "false"
        if impl == "ours":
            env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        cmd = [python, str(Path(__file__).resolve()), "--child", impl, "--precision", precision, "--clip", str(clip),
               "--model", model, "--threads", str(args.threads), "--max-new-tokens", str(args.max_new_tokens)]
        super().__init__(f"{impl} {Path(model).name} {precision}", cmd, env)


def table(rows: list[dict]) -> str:
    head = ["precision", "transformers RTFx best / median", "ours RTFx best / median", "ours/transformers best",
            "median", "per round", "transformers peak RSS", "ours peak RSS", "tokens", "same ids"]
    lines = [head]
    for r in rows:
        h, o = r.get("hf"), r.get("ours")
        rt = lambda d: f"{d['rtfx_best']:.2f} / {d['rtfx_median']:.2f}" if d else "-"  # noqa: E731
        both = h and o
        lines.append([r["precision"], rt(h), rt(o), f"{h['best_s'] / o['best_s']:.2f}x" if both else "-",
                      f"{h['median_s'] / o['median_s']:.2f}x" if both else "-",
                      f"{r['round_ratio_median']:.2f}x" if r.get("round_ratio_median") else "-",
                      f"{h['peak_rss_mb']} MB" if h else "-", f"{o['peak_rss_mb']} MB" if o else "-",
                      f"{h['tokens'] if h else '-'} / {o['tokens'] if o else '-'}",
                      ("yes" if h["token_ids"] == o["token_ids"] else "no") if both else "-"])
    w = [max(len(str(row[i])) for row in lines) for i in range(len(head))]
    out = [" | ".join(str(c).ljust(w[i]) for i, c in enumerate(row)) for row in lines]
    out.insert(1, "-+-".join("-" * x for x in w))
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model")
    ap.add_argument("--hf-python")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--max-new-tokens", type=int, default=200)
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--child", choices=["hf", "ours"], help=argparse.SUPPRESS)
    ap.add_argument("--precision", choices=["fp32", "bf16"], help=argparse.SUPPRESS)
    ap.add_argument("--clip", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child_main(args)
    model = os.path.abspath(args.model) if args.model else str(REPO / DEFAULT_MODEL)
    hf_python = os.path.abspath(args.hf_python) if args.hf_python else str(REPO / DEFAULT_HF_PYTHON)
    if not (Path(model) / "config.json").exists():
        ap.error(f"{model}: no model (make it with benchmarks/make_moonshine_streaming_model.py)")
    if not 1 <= args.seconds <= 80:
        ap.error("--seconds: 1 to 80 (the adapter's position table holds 82 s)")
    from speech_clip import speech_clip

    import soundfile as sf

    pcm, used = speech_clip(args.seconds)
    started, commit, load_start = time.strftime("%Y-%m-%d %H:%M:%S"), package_commit(), os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        clip = Path(tmp) / "clip.wav"
        sf.write(clip, pcm, SAMPLE_RATE, subtype="FLOAT")
        for prec in [p.strip() for p in args.precisions.split(",") if p.strip()]:
            kids = {"hf": Child(hf_python, "hf", model, prec, clip, args),
                    "ours": Child(sys.executable, "ours", model, prec, clip, args)}
            ratios = []
            for k in range(args.rounds):
                order = ["hf", "ours"] if k % 2 == 0 else ["ours", "hf"]
                got = {i: kids[i].call() for i in order}
                ratios.append(got["hf"] / got["ours"])
                print(f"    round {k + 1}: hf {got['hf']:.2f} s, ours {got['ours']:.2f} s", file=sys.stderr, flush=True)
            row = {"precision": prec, "round_ratios": [round(x, 3) for x in ratios],
                   "round_ratio_median": round(statistics.median(ratios), 3)}
            for i in ("hf", "ours"):
                row[i] = summarize({**kids[i].finish(), "load_s": kids[i].ready["load_s"],
                                    "warmup_s": kids[i].ready["warmup_s"]})
            rows.append(row)
    text = table(rows)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(dict(
            started=started, package_commit=commit, model=shown(model), clip_seconds=args.seconds,
            clip_utterances=used, threads=args.threads, rounds=args.rounds, max_new_tokens=args.max_new_tokens,
            **cpu_info(), loadavg_start=[round(x, 2) for x in load_start],
            loadavg_end=[round(x, 2) for x in os.getloadavg()], results=rows, table=text), indent=2) + "\n")
    print(f"\nMoonshine Streaming ({Path(model).name}), ours at {commit}, {args.seconds:g} s clip, {args.threads} "
          f"threads, {args.rounds} alternating rounds after 1 warm-up, {args.max_new_tokens} new tokens; "
          f"{cpu_line()}; load average at start {load_start[0]:.2f}, at end {os.getloadavg()[0]:.2f}\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
