#!/usr/bin/env python
"""Parakeet CTC 1.1B in transformers' layout (full-size architecture) on the CPU: speed (RTFx) and peak memory,
ours against transformers' ParakeetForCTC.

Run from the repository root with the project's Python (torch, this package importable):

    python3 benchmarks/parakeet_hf_speed.py --json benchmarks/results/parakeet_hf_speed.json

    options: --model DIR       the transformers folder (default local-models/parakeet-ctc-1.1b-hf-random, made by
                               benchmarks/make_parakeet_hf_model.py)
             --hf-python P     Python of a virtual environment with transformers 5.25 (default
                               .venv-nemo/bin/python, made by tools/setup_nemo_venv.sh)
             --threads N       torch threads and OMP_NUM_THREADS in every child (default 2)
             --rounds N        timed calls of each engine after one warm-up (default 3)
             --seconds S       clip length (default 60)
             --precisions L    comma list of fp32, bf16, int8 (default fp32,bf16,int8; transformers has no int8:
                               its int8 row runs fp32, ours int8 weights)
             --impls L         comma list of hf, ours (default hf,ours)

Default paths are relative to the repository root (git-ignored folders); paths given on the command line are
relative to the working directory.

The clip: `S` seconds of real speech, the dev utterances of ../shared/audio/dev joined end to end
(benchmarks/speech_clip.py), float32 PCM at 16 kHz handed to both engines as an array; both run it whole (one
input, full attention: ours switches to local attention only past 20 minutes).

For each precision, one child process per engine, both with the same thread count, both loaded at the same
time; their calls alternate (the order flips every round), one call at a time:
  hf    transformers (in the --hf-python environment): AutoProcessor.from_pretrained(model),
        ParakeetForCTC.from_pretrained(model, dtype=torch.float32 | torch.bfloat16), eval(); a call is
        processor(pcm, sampling_rate=16000, return_tensors="pt") (features cast to the model's dtype),
        model.generate(**inputs) under torch.inference_mode(), processor.decode(ids, skip_special_tokens=True).
  ours  this package: transcribe.runtime.tune_malloc(), transcribe.load_model(model, threads=N, dtype=None |
        "bfloat16" | "int8"), then model.transcribe(pcm) (CTC greedy, with timestamps: what users get).
Each child: one warm-up transcription, then one timed call (time.perf_counter) per round. Reported per engine:
load time, best and median call, RTFx = audio seconds / best (and / median), peak RSS, the tokens emitted and
whether both engines emitted the same ids (a random model's CTC argmax: fp32 against fp32 should agree).

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
DEFAULT_MODEL = "local-models/parakeet-ctc-1.1b-hf-random"  # benchmarks/make_parakeet_hf_model.py
DEFAULT_HF_PYTHON = ".venv-nemo/bin/python"  # tools/setup_nemo_venv.sh


def _hf_child(model_path: str, precision: str):
    import torch
    from transformers import AutoProcessor, ParakeetForCTC
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    rss_import = _rss_mb()
    t0 = time.perf_counter()
    processor = AutoProcessor.from_pretrained(model_path)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "int8": torch.float32}[precision]
    model = ParakeetForCTC.from_pretrained(model_path, dtype=dtype).eval()
    load_s = time.perf_counter() - t0
    blank = model.config.pad_token_id

    def run(pcm):
        inputs = processor(pcm, sampling_rate=SAMPLE_RATE, return_tensors="pt").to(model.dtype)
        with torch.inference_mode():
            seq = model.generate(**inputs)
        text = processor.decode(seq[0], skip_special_tokens=True)
        ids, prev = [], None
        for t in seq[0].tolist():
            if t != prev and t != blank:
                ids.append(int(t))
            prev = t
        return text, ids

    return rss_import, load_s, run


def _ours_child(model_path: str, precision: str, threads: int):
    import transcribe
    import transcribe.runtime

    transcribe.runtime.tune_malloc()  # the CLI does the same before it loads a model
    rss_import = _rss_mb()
    t0 = time.perf_counter()
    model = transcribe.load_model(model_path, threads=threads,
                                  dtype={"fp32": None, "bf16": "bfloat16", "int8": "int8"}[precision])
    load_s = time.perf_counter() - t0

    def run(pcm):
        t = model.transcribe(pcm)
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
        rss_import, load_s, run = _hf_child(args.model, args.precision)
    else:
        rss_import, load_s, run = _ours_child(args.model, args.precision, args.threads)
    rss_loaded = _rss_mb()
    warmup_s, times, (text, ids) = serve_calls(run, pcm, load_s)
    result = dict(
        impl=args.child, precision=args.precision, threads=torch.get_num_threads(), audio_s=len(pcm) / SAMPLE_RATE,
        load_s=round(load_s, 2), warmup_s=round(warmup_s, 2), times_s=[round(t, 3) for t in times],
        peak_rss_mb=round(_peak_rss_mb()), rss_after_import_mb=round(rss_import), rss_after_load_mb=round(rss_loaded),
        tokens=len(ids), token_ids=ids, text80=text[:80], torch=torch.__version__,
    )
    print(RESULT_TAG + json.dumps(result), flush=True)
    return 0


class Child(ChildProcess):
    def __init__(self, python: str, impl: str, model: str, precision: str, clip: Path, args):
        env = dict(os.environ)
        env["OMP_NUM_THREADS"] = str(args.threads)
        env["MKL_NUM_THREADS"] = str(args.threads)
        env["TOKENIZERS_PARALLELISM"] = "false"
        if impl == "ours":
            env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        cmd = [python, str(Path(__file__).resolve()), "--child", impl, "--precision", precision, "--clip", str(clip),
               "--model", model, "--threads", str(args.threads)]
        super().__init__(f"{impl} {Path(model).name} {precision}", cmd, env)


def same_ids(h: dict, o: dict) -> str:
    if h["token_ids"] == o["token_ids"]:
        return "yes"
    n = min(len(h["token_ids"]), len(o["token_ids"]))
    k = next((i for i in range(n) if h["token_ids"][i] != o["token_ids"][i]), n)
    return f"no (from token {k})"


def table(rows: list[dict]) -> str:
    head = ["precision", "transformers RTFx best / median", "ours RTFx best / median", "ours/transformers best",
            "median", "per round", "transformers peak RSS", "ours peak RSS", "tokens transformers / ours", "same ids"]
    lines = [head]
    for r in rows:
        h, o = r.get("hf"), r.get("ours")
        rt = lambda d: f"{d['rtfx_best']:.2f} / {d['rtfx_median']:.2f}" if d else "-"  # noqa: E731
        rss = lambda d: f"{d['peak_rss_mb']} MB" if d else "-"  # noqa: E731
        both = h and o
        lines.append([
            r["precision"] + (" (transformers fp32)" if r["precision"] == "int8" and h else ""), rt(h), rt(o),
            f"{h['best_s'] / o['best_s']:.2f}x" if both else "-",
            f"{h['median_s'] / o['median_s']:.2f}x" if both else "-",
            f"{r['round_ratio_median']:.2f}x" if r.get("round_ratio_median") else "-",
            rss(h), rss(o), f"{h['tokens'] if h else '-'} / {o['tokens'] if o else '-'}",
            same_ids(h, o) if both else "-"])
    w = [max(len(str(line[i])) for line in lines) for i in range(len(head))]
    out = [" | ".join(str(c).ljust(w[i]) for i, c in enumerate(line)) for line in lines]
    out.insert(1, "-+-".join("-" * x for x in w))
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help=f"the model folder (default {DEFAULT_MODEL} in the repository)")
    ap.add_argument("--hf-python", help=f"transformers' Python (default {DEFAULT_HF_PYTHON} in the repository)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--precisions", default="fp32,bf16,int8")
    ap.add_argument("--impls", default="hf,ours")
    ap.add_argument("--json", metavar="PATH", help="write the results as JSON here")
    ap.add_argument("--child", choices=["hf", "ours"], help=argparse.SUPPRESS)
    ap.add_argument("--precision", choices=["fp32", "bf16", "int8"], help=argparse.SUPPRESS)
    ap.add_argument("--clip", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child_main(args)
    model = os.path.abspath(args.model) if args.model else str(REPO / DEFAULT_MODEL)
    args.hf_python = os.path.abspath(args.hf_python) if args.hf_python else str(REPO / DEFAULT_HF_PYTHON)
    precisions = [p.strip() for p in args.precisions.split(",") if p.strip()]
    impls = [i.strip() for i in args.impls.split(",") if i.strip()]
    if not set(precisions) <= {"fp32", "bf16", "int8"} or not set(impls) <= {"hf", "ours"}:
        ap.error("precisions: fp32, bf16, int8; impls: hf, ours")
    if not (Path(model) / "config.json").exists():
        ap.error(f"{model}: no model (make it with benchmarks/make_parakeet_hf_model.py)")
    if "hf" in impls and not Path(args.hf_python).exists():
        ap.error(f"{args.hf_python}: no such Python (make the venv with tools/setup_nemo_venv.sh, or pass --hf-python)")
    from speech_clip import speech_clip

    import soundfile as sf

    pcm, used = speech_clip(args.seconds)
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    commit = package_commit()
    load_start = os.getloadavg()
    rows = []

    def write(rows: list[dict], complete: bool) -> str:
        text = table(rows)
        if args.json:
            out = dict(started=started, complete=complete, package_commit=commit, model=shown(model),
                       clip_seconds=args.seconds, clip_utterances=used, threads=args.threads, rounds=args.rounds,
                       **cpu_info(), loadavg_start=[round(x, 2) for x in load_start],
                       loadavg_end=[round(x, 2) for x in os.getloadavg()], results=rows, table=text)
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
        return text

    with tempfile.TemporaryDirectory() as tmp:
        clip = Path(tmp) / "clip.wav"
        sf.write(clip, pcm, SAMPLE_RATE, subtype="FLOAT")
        for prec in precisions:
            row = {"precision": prec}
            ratios, loads = [], []
            kids = {i: Child(args.hf_python if i == "hf" else sys.executable, i, model, prec, clip, args)
                    for i in impls}
            for k in range(args.rounds):
                order = impls if k % 2 == 0 else impls[::-1]
                got = {i: kids[i].call() for i in order}
                if len(got) == 2:
                    ratios.append(got["hf"] / got["ours"])
                loads.append(round(os.getloadavg()[0], 2))
                print(f"    {prec} round {k + 1}: " + ", ".join(f"{i} {got[i]:.2f} s" for i in impls)
                      + f" (load average {loads[-1]:.2f})", file=sys.stderr, flush=True)
            for i in impls:
                row[i] = summarize({**kids[i].finish(), "load_s": kids[i].ready["load_s"],
                                    "warmup_s": kids[i].ready["warmup_s"]})
            if ratios:
                row["round_ratios"] = [round(x, 3) for x in ratios]
                row["round_ratio_median"] = round(statistics.median(ratios), 3)
            row["loadavg_rounds"] = loads
            rows.append(row)
            print(table([row]), file=sys.stderr, flush=True)
            write(rows, complete=False)  # a long run keeps what it has measured
    text = write(rows, complete=True)
    print(f"\nParakeet CTC in transformers' layout ({shown(model)}, random weights), ours at {commit}, "
          f"{args.seconds:g} s clip, {args.threads} threads, {args.rounds} alternating rounds after 1 warm-up; "
          f"{cpu_line()}; load average at start {load_start[0]:.2f}, at end {os.getloadavg()[0]:.2f}\n")
    print(text)
    if args.json:
        print(f"\nwritten {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
