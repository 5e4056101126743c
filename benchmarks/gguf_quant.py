#!/usr/bin/env python
"""Parakeet TDT 0.6B from GGUF files (Q8_0, Q4_0) against the .nemo in float32 and bfloat16: speed and peak memory.

Run from the repository root with the project's Python:

    python3 benchmarks/gguf_quant.py --json benchmarks/results/gguf_quant.json

    options: --model PATH    the .nemo (default local-models/parakeet-tdt-0.6b-v2-random.nemo, made by
                             benchmarks/make_parakeet_model.py: the full-size architecture, random weights)
             --threads N     torch threads (default 2)
             --rounds N      timed calls of each variant after one warm-up (default 5)
             --seconds S     clip length (default 60)
             --variants L    comma list (default nemo-fp32,nemo-bf16,q8_0,q4_0,q4_0-int8):
                               nemo-fp32   the .nemo, load_model(dtype=None): float32
                               nemo-bf16   the .nemo, dtype="bfloat16" (the encoder in bfloat16)
                               nemo-int8   the .nemo, dtype="int8" (float32 weights quantized at load)
                               q8_0        the Q8_0 GGUF, load_model(dtype=None): a Q8_0 file keeps its
                                           encoder compressed (Q8Linear: the file's Q8_0 blocks,
                                           dequantized at each call and multiplied in bfloat16 where
                                           the CPU has it, else float32; transcribe/quant.py)
                               q8_0-f32c   the same layers all computing in float32
                               q8_0-bf16c  the same layers all computing in bfloat16 (the pointwise
                                           convolutions, float16 weights, too)
                               q8_0-pwq8   the same, with the encoder's pointwise convolutions
                                           (stored F32, kept in float16 by default) quantized to
                                           Q8_0 blocks at load too (ggml's rule)
                               q8_0-int8   the Q8_0 GGUF, dtype="int8" (int8 rows, activations
                                           quantized per row: Int8Linear)
                               q8_0-fp32   the Q8_0 GGUF dequantized to float32 at load
                               q4_0        the Q4_0 GGUF, dequantized to float32 at load (its default)
                               q4_0-int8   the Q4_0 GGUF, dtype="int8"
                               f32         the F32 GGUF (float32)

The GGUF files are made from the .nemo first when they are missing, with this package's own converter
(`transcribe convert MODEL OUT --schema parakeet.cpp --type q8_0|q4_0|f32`, the layout parakeet.cpp's
converter writes), next to the .nemo in its git-ignored folder.

The clip: S seconds of real speech (the dev utterances of ../shared/audio/dev joined, speech_clip.py).
Each variant runs in its own process (`--child`), all loaded at once; their calls alternate round by round
(the order rotates), one call at a time. Each child reports: load time, each call's time, peak RSS
(getrusage ru_maxrss: it includes the load), RSS after the imports and after the load, the token ids.
The parent prints a table with RTFx (audio seconds / best call) and peak RSS, and each variant's ratios
against nemo-fp32 (speed: fp32 best / variant best; memory: variant peak / fp32 peak).
Random weights make the transcript meaningless; token agreement with fp32 is printed only as a check that
the variants compute the same network.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import cpu_info, cpu_line, package_commit  # benchmarks/machine.py
from parakeet_rtfx import RESULT_TAG, SAMPLE_RATE, ChildProcess, _peak_rss_mb, _rss_mb, shown, summarize

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_MODEL = "local-models/parakeet-tdt-0.6b-v2-random.nemo"
VARIANTS = {
    # name: (file kind, dtype)
    "nemo-fp32": ("nemo", None), "nemo-bf16": ("nemo", "bfloat16"), "nemo-int8": ("nemo", "int8"),
    "q8_0": ("q8_0", None), "q8_0-f32c": ("q8_0", None), "q8_0-bf16c": ("q8_0", None), "q8_0-pwq8": ("q8_0", None),
    "q8_0-int8": ("q8_0", "int8"), "q8_0-fp32": ("q8_0", "float32"), "q4_0": ("q4_0", None),
    "q4_0-int8": ("q4_0", "int8"), "f32": ("f32", None),
}


def adjust(variant: str, model) -> None:
    """The variants that change the Q8_0 default after the load (measurement only, not options)."""
    if variant not in ("q8_0-f32c", "q8_0-bf16c", "q8_0-pwq8"):
        return
    import torch

    from transcribe.gguf import quants
    from transcribe.quant import FloatComputeLinear, HalfLinear, Q8Linear

    if variant in ("q8_0-f32c", "q8_0-bf16c"):
        for m in model.model.modules():
            if isinstance(m, FloatComputeLinear):
                m.compute = torch.float32 if variant == "q8_0-f32c" else torch.bfloat16
    elif variant == "q8_0-pwq8":
        for name, m in list(model.model.named_modules()):
            if isinstance(m, HalfLinear):
                w = m.dequantized()
                q, scale = quants.q8_0_blocks(quants.quantize(w, quants.Q8_0), quants.Q8_0, tuple(w.shape))
                parent, _, attr = name.rpartition(".")
                setattr(model.model.get_submodule(parent), attr, Q8Linear(q, scale, m.bias))


def gguf_path(model: Path, kind: str) -> Path:
    return model.with_name(model.stem + f"-{kind}.gguf")


def child_main(args) -> int:
    import numpy as np
    import soundfile as sf
    import torch

    import transcribe
    import transcribe.runtime

    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    pcm, sr = sf.read(args.clip, dtype="float32")
    assert sr == SAMPLE_RATE and pcm.ndim == 1
    pcm = np.ascontiguousarray(pcm)
    transcribe.runtime.tune_malloc()  # as the command line does before it loads a model
    kind, dtype = VARIANTS[args.child]
    path = Path(args.model) if kind == "nemo" else gguf_path(Path(args.model), kind)
    rss_import = _rss_mb()
    t0 = time.perf_counter()
    model = transcribe.load_model(str(path), threads=args.threads, dtype=dtype)
    adjust(args.child, model)
    load_s = time.perf_counter() - t0
    rss_loaded = _rss_mb()

    def run():
        t = model.transcribe(pcm)
        return t.text, [tok.id for tok in t.tokens]

    t0 = time.perf_counter()
    text, ids = run()
    print(RESULT_TAG + json.dumps(dict(ready=True, load_s=round(load_s, 2),
                                       warmup_s=round(time.perf_counter() - t0, 2))), flush=True)
    times = []
    for line in sys.stdin:
        if line.strip() == "run":
            t0 = time.perf_counter()
            text, ids = run()
            times.append(time.perf_counter() - t0)
            print(RESULT_TAG + json.dumps(dict(call_s=round(times[-1], 4))), flush=True)
        elif line.strip() == "quit":
            break
    print(RESULT_TAG + json.dumps(dict(
        variant=args.child, file=shown(str(path)), file_mb=round(path.stat().st_size / 2**20),
        threads=torch.get_num_threads(), audio_s=len(pcm) / SAMPLE_RATE, load_s=round(load_s, 2),
        times_s=[round(t, 3) for t in times], peak_rss_mb=round(_peak_rss_mb()), rss_after_import_mb=round(rss_import),
        rss_after_load_mb=round(rss_loaded), tokens=len(ids), token_ids=ids, torch=torch.__version__)), flush=True)
    return 0


def start_child(variant: str, clip: Path, args) -> ChildProcess:
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", variant, "--clip", str(clip),
           "--model", args.model, "--threads", str(args.threads)]
    return ChildProcess(variant, cmd, env)


def agreement(ref: list[int], ids: list[int]) -> float:
    from whisper_wer import word_edits

    return 1.0 - word_edits(ref, ids) / max(1, len(ref))


def table(rows: dict[str, dict], base: str) -> str:
    head = ["variant", "file MB", "RTFx best/median", "speed vs fp32", "peak RSS", "RSS vs fp32", "load", "token agreement"]
    lines = [head]
    b = rows.get(base)
    for name, r in rows.items():
        lines.append([
            name, str(r["file_mb"]), f"{r['rtfx_best']:.2f} / {r['rtfx_median']:.2f}",
            f"{b['best_s'] / r['best_s']:.2f}x" if b else "-", f"{r['peak_rss_mb']} MB",
            f"{r['peak_rss_mb'] / b['peak_rss_mb']:.2f}" if b else "-", f"{r['load_s']:.1f} s",
            f"{agreement(b['token_ids'], r['token_ids']):.3f}" if b else "-"])
    w = [max(len(str(l[i])) for l in lines) for i in range(len(head))]
    out = [" | ".join(str(c).ljust(w[i]) for i, c in enumerate(l)) for l in lines]
    out.insert(1, "-+-".join("-" * x for x in w))
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--variants", default="nemo-fp32,nemo-bf16,q8_0,q4_0,q4_0-int8")
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--child", choices=list(VARIANTS), help=argparse.SUPPRESS)
    ap.add_argument("--clip", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.model = os.path.abspath(args.model) if args.model else str(REPO / DEFAULT_MODEL)
    if args.child:
        return child_main(args)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        ap.error(f"unknown variants {unknown} ({', '.join(VARIANTS)})")
    model = Path(args.model)
    if not model.exists():
        ap.error(f"{model}: no such model (make it with benchmarks/make_parakeet_model.py)")
    for kind in sorted({VARIANTS[v][0] for v in variants} - {"nemo"}):
        out = gguf_path(model, kind)
        if not out.exists():
            print(f"[{time.strftime('%H:%M:%S')}] converting to {out.name} ...", file=sys.stderr, flush=True)
            subprocess.run([sys.executable, "-m", "transcribe", "convert", str(model), str(out), "--schema", "parakeet.cpp",
                            "--type", kind], cwd=REPO, check=True,
                           env=dict(os.environ, PYTHONPATH=str(REPO)))
    from speech_clip import speech_clip

    import soundfile as sf

    pcm, used = speech_clip(args.seconds)
    started, commit, load_start = time.strftime("%Y-%m-%d %H:%M:%S"), package_commit(), os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        clip = Path(tmp) / "clip.wav"
        sf.write(clip, pcm, SAMPLE_RATE, subtype="FLOAT")
        kids = {v: start_child(v, clip, args) for v in variants}
        for k in range(args.rounds):
            order = variants[k % len(variants):] + variants[:k % len(variants)]
            got = {v: kids[v].call() for v in order}
            print(f"    round {k + 1}: " + ", ".join(f"{v} {got[v]:.2f} s" for v in variants)
                  + f" (load average {os.getloadavg()[0]:.2f})", file=sys.stderr, flush=True)
        rows = {v: summarize({**kids[v].finish(), "load_s": kids[v].ready["load_s"]}) for v in variants}
    base = "nemo-fp32" if "nemo-fp32" in rows else variants[0]
    text = table(rows, base)
    print(f"\nParakeet TDT 0.6B ({model.name}) from GGUF, ours at {commit}, {args.seconds:g} s clip, {args.threads} threads, "
          f"{args.rounds} rounds after 1 warm-up; {cpu_line()}; load average at start {load_start[0]:.2f}, "
          f"at end {os.getloadavg()[0]:.2f}\n")
    print(text)
    if args.json:
        out = dict(started=started, package_commit=commit, model=shown(args.model), clip_seconds=args.seconds,
                   clip_utterances=used, threads=args.threads, rounds=args.rounds,
                   **cpu_info(), loadavg_start=[round(x, 2) for x in load_start],
                   loadavg_end=[round(x, 2) for x in os.getloadavg()], results=rows, table=text)
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
        print(f"\nwritten {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
