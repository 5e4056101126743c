#!/usr/bin/env python
"""Canary-flash (180m, 1b) on the CPU: speed (RTFx) and peak memory, ours against NeMo, in one run.

Run from the repository root with the project's Python (torch, this package importable):

    python3 benchmarks/canary_speed.py --json bench-out/canary_speed.json

    options: --models L        comma list of 180m, 1b (default 180m,1b): local-models/canary-<m>-flash-random.nemo,
                               made by benchmarks/make_canary_model.py (--model-dir DIR to look elsewhere)
             --nemo-python P   Python of a NeMo virtual environment (default .venv-nemo/bin/python,
                               made by tools/setup_nemo_venv.sh)
             --threads N       torch threads and OMP_NUM_THREADS in every child (default 2)
             --rounds N        timed calls of each engine after one warm-up (default 3)
             --seconds S       clip length (default 60)
             --precisions L    comma list of fp32, bf16 (default fp32,bf16)
             --impls L         comma list of nemo, ours (default nemo,ours)

Default paths are relative to the repository root (git-ignored folders); paths given on the command
line are relative to the working directory.

The clip: `S` seconds of real speech, the dev utterances of ../shared/audio/dev joined end to end
(benchmarks/speech_clip.py), written once to a temporary WAV (float32).

For each model and precision, one child process per engine, both with the same thread count, both
loaded at the same time; their calls then alternate (the order flips every round), one call at a time:
  nemo  NeMo's Python: EncDecMultiTaskModel.restore_from(model, map_location="cpu"), eval(), then
        model.transcribe([wav], batch_size=1, source_lang="en", target_lang="en", pnc="yes",
        return_hypotheses=True, verbose=False) with the model's own decoding config (beam, beam_size 1,
        max_generation_delta 50). It is given the WAV's path, as its users do (lhotse reads it: a few ms).
        bf16: the call runs under torch.autocast("cpu", dtype=torch.bfloat16) with float32 weights
        (NeMo's own mixed-precision path; its preprocessor turns autocast off for the mel front end).
        NeMo's transcribe() cuts long audio only when the model carries a timestamps ASR model, which
        these do not: the 60 s go through in one piece.
  ours  this package: transcribe.runtime.tune_malloc(), transcribe.load_model(model, threads=N,
        dtype=None | "bfloat16"), then model.transcribe(pcm, max_piece_s=max(40, S + 1), beam_size=1):
        one piece, as NeMo (our default cuts inputs over 40 s at pauses, which would decode the clip as
        two pieces), and NeMo's beam search with one beam, NeMo's default decoding for these models (our
        default is greedy, which at the length limit emits one token fewer than NeMo's beam: NeMo's beam
        takes a first token from the prompt and then runs its full loop). bf16: the weights in bfloat16
        (front end float32).
Both models stop generating at the same limit (the decoder's max_sequence_length, see
make_canary_model.py): a random model never says EOS; the token counts are recorded and compared.
Each child: one warm-up transcription, then one timed call (time.perf_counter) per round. Reported
per engine: load time, best and median call, RTFx = audio seconds / best (and / median), peak RSS
(getrusage ru_maxrss, which includes the model load), the tokens emitted and whether both engines
emitted the same ids. Ratios ours/NeMo: of the best calls, of the medians, and the median of the
per-round ratios. The CPU model and the load average before and after are recorded.

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

from machine import cpu_info, cpu_line, package_commit  # benchmarks/machine.py (this script's folder is on sys.path)
from parakeet_rtfx import RESULT_TAG, serve_calls, ChildProcess, _peak_rss_mb, _rss_mb, shown, summarize

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_MODEL_DIR = "local-models"  # benchmarks/make_canary_model.py writes canary-<m>-flash-random.nemo there
DEFAULT_NEMO_PYTHON = ".venv-nemo/bin/python"  # tools/setup_nemo_venv.sh
SAMPLE_RATE = 16000
MODELS = {"180m": "canary-180m-flash-random.nemo", "1b": "canary-1b-flash-random.nemo"}


# --------------------------------------------------------------------------------------
# children (fresh interpreters; only the standard library at module level)
# --------------------------------------------------------------------------------------


def _nemo_child(model_path: str, precision: str):
    import contextlib
    import logging

    import torch
    from nemo.utils import logging as nemo_logging

    nemo_logging.setLevel(logging.ERROR)
    from nemo.collections.asr.models import EncDecMultiTaskModel

    rss_import = _rss_mb()
    t0 = time.perf_counter()
    model = EncDecMultiTaskModel.restore_from(model_path, map_location="cpu")
    model.eval()
    load_s = time.perf_counter() - t0

    def run(wav, pcm):
        ctx = torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16" else contextlib.nullcontext()
        with ctx:
            out = model.transcribe([wav], batch_size=1, source_lang="en", target_lang="en", pnc="yes",
                                   return_hypotheses=True, verbose=False)
        model.eval()  # transcribe() leaves encoder and decoder in train mode (see canary-tiny's README)
        h = out[0]
        return h.text, [int(i) for i in h.y_sequence]

    return rss_import, load_s, run


def _ours_child(model_path: str, precision: str, threads: int, max_piece_s: float):
    import transcribe
    import transcribe.runtime

    transcribe.runtime.tune_malloc()  # the CLI does the same before it loads a model
    rss_import = _rss_mb()
    t0 = time.perf_counter()
    model = transcribe.load_model(model_path, threads=threads, dtype={"fp32": None, "bf16": "bfloat16"}[precision])
    load_s = time.perf_counter() - t0

    def run(wav, pcm):
        t = model.transcribe(pcm, max_piece_s=max_piece_s, beam_size=1)
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
    if args.child == "nemo":
        rss_import, load_s, run = _nemo_child(args.model, args.precision)
    else:
        rss_import, load_s, run = _ours_child(args.model, args.precision, args.threads,
                                              max(40.0, len(pcm) / SAMPLE_RATE + 1))
    rss_loaded = _rss_mb()
    warmup_s, times, (text, ids) = serve_calls(lambda p: run(args.clip, p), pcm, load_s)
    result = dict(
        impl=args.child, precision=args.precision, threads=torch.get_num_threads(), audio_s=len(pcm) / SAMPLE_RATE,
        load_s=round(load_s, 2), warmup_s=round(warmup_s, 2), times_s=[round(t, 3) for t in times],
        peak_rss_mb=round(_peak_rss_mb()), rss_after_import_mb=round(rss_import), rss_after_load_mb=round(rss_loaded),
        tokens=len(ids), token_ids=ids, text80=text[:80], torch=torch.__version__,
    )
    print(RESULT_TAG + json.dumps(result), flush=True)
    return 0


# --------------------------------------------------------------------------------------
# parent
# --------------------------------------------------------------------------------------


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


def table(rows: list[dict]) -> str:
    head = ["model", "precision", "NeMo RTFx best / median", "ours RTFx best / median", "ours/NeMo best", "median",
            "per round", "NeMo peak RSS", "ours peak RSS", "tokens NeMo / ours", "same tokens"]
    lines = [head]
    for r in rows:
        n, o = r.get("nemo"), r.get("ours")
        rt = lambda d: f"{d['rtfx_best']:.2f} / {d['rtfx_median']:.2f}" if d else "-"  # noqa: E731
        rss = lambda d: f"{d['peak_rss_mb']} MB" if d else "-"  # noqa: E731
        both = n and o
        lines.append([
            r["model"], r["precision"], rt(n), rt(o),
            f"{n['best_s'] / o['best_s']:.2f}x" if both else "-",
            f"{n['median_s'] / o['median_s']:.2f}x" if both else "-",
            f"{r['round_ratio_median']:.2f}x" if both else "-",
            rss(n), rss(o),
            f"{n['tokens'] if n else '-'} / {o['tokens'] if o else '-'}",
            ("yes" if n["token_ids"] == o["token_ids"] else "no") if both else "-"])
    w = [max(len(str(l[i])) for l in lines) for i in range(len(head))]
    out = [" | ".join(str(c).ljust(w[i]) for i, c in enumerate(l)) for l in lines]
    out.insert(1, "-+-".join("-" * x for x in w))
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="180m,1b")
    ap.add_argument("--model-dir", help=f"where the .nemo files are (default {DEFAULT_MODEL_DIR} in the repository)")
    ap.add_argument("--nemo-python", help=f"NeMo's Python (default {DEFAULT_NEMO_PYTHON} in the repository)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--impls", default="nemo,ours")
    ap.add_argument("--json", metavar="PATH", help="write the results as JSON here")
    ap.add_argument("--child", choices=["nemo", "ours"], help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--precision", choices=["fp32", "bf16"], help=argparse.SUPPRESS)
    ap.add_argument("--clip", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child_main(args)
    # os.path.abspath, not resolve(): a venv's python is a symlink that must stay one
    model_dir = Path(os.path.abspath(args.model_dir)) if args.model_dir else REPO / DEFAULT_MODEL_DIR
    args.nemo_python = os.path.abspath(args.nemo_python) if args.nemo_python else str(REPO / DEFAULT_NEMO_PYTHON)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    precisions = [p.strip() for p in args.precisions.split(",") if p.strip()]
    impls = [i.strip() for i in args.impls.split(",") if i.strip()]
    if not set(models) <= set(MODELS) or not set(precisions) <= {"fp32", "bf16"} or not set(impls) <= {"nemo", "ours"}:
        ap.error("models: 180m, 1b; precisions: fp32, bf16; impls: nemo, ours")
    for m in models:
        if not (model_dir / MODELS[m]).exists():
            ap.error(f"{model_dir / MODELS[m]}: no such model (make it with benchmarks/make_canary_model.py --variant {m})")
    if "nemo" in impls and not Path(args.nemo_python).exists():
        ap.error(f"{args.nemo_python}: no such Python (make NeMo's venv with tools/setup_nemo_venv.sh, "
                 "or pass --nemo-python)")
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
            out = dict(started=started, complete=complete, package_commit=commit,
                       models={m: shown(str(model_dir / MODELS[m])) for m in models}, clip_seconds=args.seconds,
                       clip_utterances=used, threads=args.threads, rounds=args.rounds, **cpu_info(),
                       loadavg_start=[round(x, 2) for x in load_start],
                       loadavg_end=[round(x, 2) for x in os.getloadavg()], results=rows, table=text)
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
        return text

    with tempfile.TemporaryDirectory() as tmp:
        clip = Path(tmp) / "clip.wav"
        sf.write(clip, pcm, SAMPLE_RATE, subtype="FLOAT")
        for m in models:
            path = str(model_dir / MODELS[m])
            for prec in precisions:
                row = {"model": f"canary-{m}-flash", "precision": prec}
                kids = {i: Child(args.nemo_python if i == "nemo" else sys.executable, i, path, prec, clip, args)
                        for i in impls}
                ratios = []
                for k in range(args.rounds):
                    order = impls if k % 2 == 0 else impls[::-1]
                    got = {i: kids[i].call() for i in order}
                    if len(got) == 2:
                        ratios.append(got["nemo"] / got["ours"])
                    print(f"    round {k + 1}: " + ", ".join(f"{i} {got[i]:.2f} s" for i in impls)
                          + f" (load average {os.getloadavg()[0]:.2f})", file=sys.stderr, flush=True)
                for i in impls:
                    row[i] = summarize({**kids[i].finish(), **{"load_s": kids[i].ready["load_s"],
                                                               "warmup_s": kids[i].ready["warmup_s"]}})
                if ratios:
                    row["round_ratios"] = [round(x, 3) for x in ratios]
                    row["round_ratio_median"] = round(statistics.median(ratios), 3)
                row["loadavg_after"] = round(os.getloadavg()[0], 2)
                rows.append(row)
                print(table([row]), file=sys.stderr, flush=True)
                write(rows, complete=False)  # a long run keeps what it has measured
    text = write(rows, complete=True)
    print(f"\nCanary flash (random weights), ours at {commit}, {args.seconds:g} s clip, {args.threads} threads, "
          f"{args.rounds} alternating rounds after 1 warm-up; {cpu_line()}; load average at start {load_start[0]:.2f}, "
          f"at end {os.getloadavg()[0]:.2f}\n")
    print(text)
    if args.json:
        print(f"\nwritten {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
