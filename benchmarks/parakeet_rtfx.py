#!/usr/bin/env python
"""Parakeet TDT 0.6B on the CPU: speed (RTFx) and peak memory, ours against NeMo, in one run.

Run from the repository root with the project's Python (torch, this package importable):

    python3 benchmarks/parakeet_rtfx.py --json bench-out/parakeet_rtfx.json

    options: --model PATH      the .nemo (default local-models/parakeet-tdt-0.6b-v2-random.nemo,
                               made by benchmarks/make_parakeet_model.py)
             --nemo-python P   Python of a NeMo virtual environment (default .venv-nemo/bin/python,
                               made by tools/setup_nemo_venv.sh)
             --threads N       torch threads and OMP_NUM_THREADS in every child (default 2)
             --rounds N        timed calls of each implementation after one warm-up (default 6)
             --seconds S       clip length (default 60)
             --precisions L    comma list of fp32, bf16, int8 (default fp32,bf16,int8)
             --impls L         comma list of nemo, ours (default nemo,ours)

Default paths are relative to the repository root (git-ignored folders); paths given on the command
line are relative to the working directory.

The clip: `S` seconds of real speech, the dev utterances of ../shared/audio/dev joined end to end
(benchmarks/speech_clip.py), written once to a temporary WAV; each child reads it into a float32
array before anything is timed.

For each precision, one child process per implementation, both with the same thread count, both
loaded at the same time; their calls then alternate (nemo, ours, ours, nemo, ...: the order flips
every round so neither always runs first), one call at a time, never together:
  nemo  NeMo's Python: ASRModel.restore_from(model, map_location="cpu"), eval(), decoding set to
        greedy_batch TDT (max_symbols 10), then model.transcribe([pcm], batch_size=1, verbose=False)
        (NeMo's default: no timestamps).  bf16: the call runs under
        torch.autocast("cpu", dtype=torch.bfloat16) with float32 weights, which is NeMo's own
        mixed-precision path (its inference wrappers default to compute_dtype bfloat16 with
        use_amp=True, i.e. autocast); NeMo's preprocessor turns autocast off for the mel front end.
        int8: NeMo has no int8 CPU path; ours runs alone.
  ours  this package: transcribe.runtime.tune_malloc() (glibc's malloc thresholds, as the command
        line sets them), transcribe.load_model(model, threads=N, dtype=None | "bfloat16" | "int8"),
        then model.transcribe(pcm) with its defaults (word timestamps and segments included).
        bf16: the encoder's weights are cast to bfloat16; front end, predictor and joint stay
        float32.  int8: transcribe/quant.py's int8 products, the rest float32.
Each child: one warm-up transcription, then one timed call (time.perf_counter) per round. Reported
per implementation: load time, best and median call, RTFx = audio seconds / best (and / median),
peak RSS (getrusage ru_maxrss, which includes the model load), RSS after the imports, the token ids
and the first 80 characters of the transcript. Ratios ours/NeMo: of the best calls, of the
medians, and the median of the per-round ratios (the two calls of a round ran a few seconds
apart, so a slow spell of the machine hits both). The CPU model and the load average before and
after are recorded.

The parent prints a table and, with --json, writes everything to a file.

Timing on a shared machine is noisy: check `uptime` first and run when the load average is low.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import cpu_info, cpu_line, package_commit  # benchmarks/machine.py (this script's folder is on sys.path)

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
# relative to REPO, in git-ignored folders
DEFAULT_MODEL = "local-models/parakeet-tdt-0.6b-v2-random.nemo"  # benchmarks/make_parakeet_model.py
DEFAULT_NEMO_PYTHON = ".venv-nemo/bin/python"  # tools/setup_nemo_venv.sh
SAMPLE_RATE = 16000
RESULT_TAG = "RTFX-RESULT "


# --------------------------------------------------------------------------------------
# children (each runs in a fresh interpreter; only the standard library at module level,
# so this file also runs under NeMo's Python without our package)
# --------------------------------------------------------------------------------------


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _nemo_child(model_path: str, precision: str):
    import contextlib
    import copy
    import logging

    import torch
    from nemo.utils import logging as nemo_logging

    nemo_logging.setLevel(logging.ERROR)
    from nemo.collections.asr.models import ASRModel
    from omegaconf import open_dict

    rss_import = _rss_mb()
    t0 = time.perf_counter()
    model = ASRModel.restore_from(model_path, map_location="cpu")
    model.eval()
    dec = copy.deepcopy(model.cfg.decoding)
    with open_dict(dec):
        dec.strategy = "greedy_batch"
        dec.model_type = "tdt"
        dec.greedy.max_symbols = 10
    model.change_decoding_strategy(dec, verbose=False)
    load_s = time.perf_counter() - t0

    def run(pcm):
        bf16 = precision == "bf16"
        ctx = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
        with ctx:
            out = model.transcribe([pcm], batch_size=1, verbose=False, return_hypotheses=True)
        if isinstance(out, tuple):  # older NeMo: (best, all)
            out = out[0]
        h = out[0]
        return h.text, [int(i) for i in h.y_sequence]

    return rss_import, load_s, run


def _ours_child(model_path: str, precision: str, threads: int):
    import transcribe
    import transcribe.runtime

    transcribe.runtime.tune_malloc()  # the CLI does the same before it loads a model
    rss_import = _rss_mb()
    t0 = time.perf_counter()
    dtype = {"fp32": None, "bf16": "bfloat16", "int8": "int8"}[precision]
    model = transcribe.load_model(model_path, threads=threads, dtype=dtype)
    load_s = time.perf_counter() - t0

    def run(pcm):
        t = model.transcribe(pcm)
        return t.text, [tok.id for tok in t.tokens]

    return rss_import, load_s, run


def serve_calls(run, pcm, load_s: float):
    """A child's side of the protocol: one warm-up call of run(pcm), then "ready" (with the load and warm-up
    times), then one timed call per "run" line on stdin until "quit" or its end, each answered with its time.
    Returns the warm-up time, the call times and the last call's result."""
    t0 = time.perf_counter()
    out = run(pcm)  # warm-up
    warmup_s = time.perf_counter() - t0
    print(RESULT_TAG + json.dumps(dict(ready=True, load_s=round(load_s, 2), warmup_s=round(warmup_s, 2))), flush=True)
    times = []
    for line in sys.stdin:
        if line.strip() == "run":
            t0 = time.perf_counter()
            out = run(pcm)
            times.append(time.perf_counter() - t0)
            print(RESULT_TAG + json.dumps(dict(call_s=round(times[-1], 4))), flush=True)
        elif line.strip() == "quit":
            break
    return warmup_s, times, out


def child_main(args) -> int:
    """Load, warm up, then one timed call per "run" line on stdin; "quit" reports and exits."""
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


# --------------------------------------------------------------------------------------
# parent
# --------------------------------------------------------------------------------------


class ChildProcess:
    """A benchmark child in its own process: it reports RESULT_TAG lines, answers "run" with one timed
    call and "quit" with its result. stderr goes to a file, not a pipe: NeMo's warnings would fill a
    pipe nobody reads and stall it."""

    def __init__(self, name: str, cmd: list[str], env: dict):
        self.name = name
        print(f"[{time.strftime('%H:%M:%S')}] loading {name} (load average {os.getloadavg()[0]:.2f}) ...",
              file=sys.stderr, flush=True)
        self.err = tempfile.TemporaryFile(mode="w+")
        self.p = subprocess.Popen(cmd, cwd=REPO, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=self.err, text=True)
        self.ready = self._read()

    def _read(self) -> dict:
        for line in self.p.stdout:
            if line.startswith(RESULT_TAG):
                return json.loads(line[len(RESULT_TAG):])
        self.p.wait()
        self.err.seek(0)
        tail = "\n".join(self.err.read().splitlines()[-30:])
        raise SystemExit(f"{self.name} child failed (exit {self.p.wait()}):\n{tail}")

    def call(self) -> float:
        self.p.stdin.write("run\n")
        self.p.stdin.flush()
        return self._read()["call_s"]

    def finish(self) -> dict:
        self.p.stdin.write("quit\n")
        self.p.stdin.flush()
        r = self._read()
        self.p.wait()
        return r


class Child(ChildProcess):
    """One loaded implementation in its own process, answering "run" with one timed call."""

    def __init__(self, python: str, impl: str, precision: str, clip: Path, args):
        env = dict(os.environ)
        env["OMP_NUM_THREADS"] = str(args.threads)
        env["MKL_NUM_THREADS"] = str(args.threads)
        env["TOKENIZERS_PARALLELISM"] = "false"
        if impl == "ours":
            env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        cmd = [python, str(Path(__file__).resolve()), "--child", impl, "--precision", precision, "--clip", str(clip),
               "--model", args.model, "--threads", str(args.threads)]
        super().__init__(f"{impl} {precision}", cmd, env)


def summarize(r: dict) -> dict:
    t = sorted(r["times_s"])
    r["best_s"] = t[0]
    r["median_s"] = round(statistics.median(t), 3)
    r["rtfx_best"] = round(r["audio_s"] / t[0], 2)
    r["rtfx_median"] = round(r["audio_s"] / statistics.median(t), 2)
    return r


def shown(path: str) -> str:
    """A path as results record it: relative to the repository when inside it."""
    p = Path(path)
    return str(p.relative_to(REPO)) if p.is_relative_to(REPO) else path


def table(rows: list[dict]) -> str:
    head = ["precision", "NeMo RTFx best/median", "ours RTFx best/median", "ours/NeMo best", "median",
            "per round", "NeMo peak RSS", "ours peak RSS", "NeMo load", "ours load", "same tokens"]
    lines = [head]
    for r in rows:
        n, o = r.get("nemo"), r.get("ours")
        rt = lambda d: f"{d['rtfx_best']:.2f} / {d['rtfx_median']:.2f}" if d else "-"  # noqa: E731
        f = lambda d, k, fmt: fmt.format(d[k]) if d else "-"  # noqa: E731
        both = n and o
        lines.append([
            r["precision"], rt(n), rt(o),
            f"{n['best_s'] / o['best_s']:.2f}x" if both else "-",
            f"{n['median_s'] / o['median_s']:.2f}x" if both else "-",
            f"{r['round_ratio_median']:.2f}x" if both else "-",
            f(n, "peak_rss_mb", "{} MB"), f(o, "peak_rss_mb", "{} MB"),
            f(n, "load_s", "{:.1f} s"), f(o, "load_s", "{:.1f} s"),
            ("yes" if n["token_ids"] == o["token_ids"] else "no") if both else "-"])
    w = [max(len(str(l[i])) for l in lines) for i in range(len(head))]
    out = [" | ".join(str(c).ljust(w[i]) for i, c in enumerate(l)) for l in lines]
    out.insert(1, "-+-".join("-" * x for x in w))
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help=f"the .nemo (default {DEFAULT_MODEL} in the repository)")
    ap.add_argument("--nemo-python", help=f"NeMo's Python (default {DEFAULT_NEMO_PYTHON} in the repository)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--precisions", default="fp32,bf16,int8")
    ap.add_argument("--impls", default="nemo,ours")
    ap.add_argument("--json", metavar="PATH", help="write the results as JSON here")
    ap.add_argument("--child", choices=["nemo", "ours"], help=argparse.SUPPRESS)
    ap.add_argument("--precision", choices=["fp32", "bf16", "int8"], help=argparse.SUPPRESS)
    ap.add_argument("--clip", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    # os.path.abspath, not resolve(): a venv's python is a symlink that must stay one
    args.model = os.path.abspath(args.model) if args.model else str(REPO / DEFAULT_MODEL)
    args.nemo_python = os.path.abspath(args.nemo_python) if args.nemo_python else str(REPO / DEFAULT_NEMO_PYTHON)
    if args.child:
        return child_main(args)

    precisions = [p.strip() for p in args.precisions.split(",") if p.strip()]
    impls = [i.strip() for i in args.impls.split(",") if i.strip()]
    if not set(precisions) <= {"fp32", "bf16", "int8"} or not set(impls) <= {"nemo", "ours"}:
        ap.error("precisions: fp32, bf16, int8; impls: nemo, ours")
    if not Path(args.model).exists():
        ap.error(f"{args.model}: no such model (make it with benchmarks/make_parakeet_model.py)")
    if "nemo" in impls and not Path(args.nemo_python).exists():
        ap.error(f"{args.nemo_python}: no such Python (make NeMo's venv with tools/setup_nemo_venv.sh, "
                 "or pass --nemo-python)")
    sys.path.insert(0, str(HERE))
    from speech_clip import speech_clip

    import soundfile as sf

    pcm, used = speech_clip(args.seconds)
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    commit = package_commit()
    load_start = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        clip = Path(tmp) / "clip.wav"
        sf.write(clip, pcm, SAMPLE_RATE, subtype="FLOAT")
        for prec in precisions:
            row = {"precision": prec}
            names = [i for i in impls if not (i == "nemo" and prec == "int8")]
            kids = {i: Child(args.nemo_python if i == "nemo" else sys.executable, i, prec, clip, args) for i in names}
            ratios = []
            for k in range(args.rounds):
                order = names if k % 2 == 0 else names[::-1]
                got = {i: kids[i].call() for i in order}
                if len(got) == 2:
                    ratios.append(got["nemo"] / got["ours"])
                print(f"    round {k + 1}: " + ", ".join(f"{i} {got[i]:.2f} s" for i in names)
                      + f" (load average {os.getloadavg()[0]:.2f})", file=sys.stderr, flush=True)
            for i in names:
                row[i] = summarize({**kids[i].finish(), **{"load_s": kids[i].ready["load_s"]}})
            if ratios:
                row["round_ratios"] = [round(x, 3) for x in ratios]
                row["round_ratio_median"] = round(statistics.median(ratios), 3)
            rows.append(row)
    text = table(rows)
    print(f"\nParakeet TDT 0.6B ({Path(args.model).name}), ours at {commit}, {args.seconds:g} s clip, {args.threads} threads, "
          f"{args.rounds} alternating rounds after 1 warm-up; {cpu_line()}; load average at start {load_start[0]:.2f}, "
          f"at end {os.getloadavg()[0]:.2f}\n")
    print(text)
    if args.json:
        out = dict(started=started, package_commit=commit, model=shown(args.model), clip_seconds=args.seconds, clip_utterances=used,
                   threads=args.threads, rounds=args.rounds, **cpu_info(),
                   loadavg_start=[round(x, 2) for x in load_start],
                   loadavg_end=[round(x, 2) for x in os.getloadavg()], results=rows, table=text)
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
        print(f"\nwritten {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
