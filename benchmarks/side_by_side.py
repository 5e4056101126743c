"""Ours against a reference engine, side by side on one clip of speech: the machinery the `<family>_speed.py`
scripts share (standard library only at module level: the children import it under the reference's Python).

A family's script describes itself in a `Bench` (its reference's name and Python, its model folder, its
precisions, how each engine loads and what one call does) and hands it to `main(bench, __doc__)`. Then:

  parent   makes S seconds of real speech (benchmarks/speech_clip.py), lets the family prepare what both engines
           need (`prepare`: the pieces to cut, ...), and for each precision starts one child process per engine
           (the same script, `--child <impl>`), both with the same thread count (torch threads, OMP_NUM_THREADS,
           MKL_NUM_THREADS), both loaded at the same time; their calls then alternate, the order flipping every
           round, one call at a time (`--one-at-a-time`, where the family offers it: load and time one engine,
           then the other). It collects per engine the load time, best and median call, RTFx = audio seconds /
           best (and / median), peak RSS (getrusage ru_maxrss, model load included), the ids emitted, and
           whether both engines emitted the same ids; the ratios reference/ours of the best calls, the medians
           and the median of the per-round ratios; the CPU and the load average. It prints a table per precision
           as it goes and writes the JSON (--json) after each precision (`complete` false until the end).
  child    loads its engine once (`load_ref` / `load_ours`: (rss_after_import_mb, load_s, run)), makes one
           warm-up call of run(pcm), then one timed call (time.perf_counter) per "run" line from the parent
           (serve_calls, below), and reports. run(pcm) returns (text, ids) or (text, ids, piece_samples).

The JSON of every script has the same layout: `family`, `reference` (its name), `ref_impl` (the key of its rows),
the run's settings, the CPU (machine.cpu_info), `results` (one row per precision: `precision`, `<ref_impl>` and
`ours` with their figures, `round_ratios`, `round_ratio_median`, `loadavg_rounds`, `loadavg_after`) and `table`.
benchmarks/compact_speed.py reads it.
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from machine import cpu_info, cpu_line, package_commit

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SAMPLE_RATE = 16000
RESULT_TAG = "RTFX-RESULT "  # a child's lines for the parent start with it
OURS_DTYPE = {"fp32": None, "bf16": "bfloat16", "int8": "int8"}  # load_model's dtype for a precision


# --------------------------------------------------------------------------------------
# the persistent-child protocol (also used by parakeet_rtfx.py's importers: canary, sortformer, peers, ...)
# --------------------------------------------------------------------------------------


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


rss_mb = _rss_mb


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


def summarize(r: dict) -> dict:
    """A child's report with best_s, median_s, rtfx_best and rtfx_median added."""
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


# --------------------------------------------------------------------------------------
# one family's script
# --------------------------------------------------------------------------------------


@dataclass
class Bench:
    """One family's side-by-side speed script."""
    family: str  # "Moonshine": the family's name in the JSON and in compact_speed's table
    script: str  # the script's __file__ (the children run it)
    title: Callable  # (args, model) -> the first words of the summary line, e.g. "Moonshine (full-size ...)"
    ref: str  # the reference's key in options, rows and JSON: "hf", "funasr", "ref"
    ref_label: str  # its name in tables: "transformers", "funasr", "gigaam"
    ref_python_option: str  # "--hf-python"
    ref_python_default: str  # relative to the repository, e.g. ".venv-nemo/bin/python"
    ref_setup: str  # what makes that venv, e.g. "tools/setup_nemo_venv.sh"
    load_ref: Callable  # (model, precision, opts) -> (rss_after_import_mb, load_s, run), in the reference's Python
    load_ours: Callable  # the same, in the project's Python
    default_model: str | Callable = ""  # relative to the repository; or (args) -> that
    model_file: str = "config.json"  # what a model folder holds ("": the model is one file, e.g. a .nemo)
    make_hint: str = ""  # how to make a missing model, e.g. "benchmarks/make_moonshine_model.py"
    precisions: tuple = ("fp32", "bf16")  # those it knows
    default_precisions: str = "fp32,bf16"
    ref_runs_fp32: tuple = ()  # precisions the reference lacks: its row runs it in float32 beside ours
    ref_lacks: tuple = ()  # precisions the reference lacks: ours runs alone in their rows
    load_columns: bool = False  # the table shows both engines' load times too
    repo_on_ref_path: bool = False  # the reference's child gets the repository on PYTHONPATH too (ours always does)
    one_at_a_time: bool = False  # offer --one-at-a-time
    add_args: Callable | None = None  # (argparse parser) -> None: the family's own options
    early: Callable | None = None  # (args) -> exit status, or None to go on: a family's own mode (gigaam's --make)
    check: Callable | None = None  # (args, model, ap) -> None: checks / makes the model, ap.error on bad input
    prepare: Callable | None = None  # (args, pcm) -> JSON-able context for both children (opts.context)
    json_extra: Callable | None = None  # (args, context) -> fields added to the JSON
    summary_extra: Callable | None = None  # (args, context) -> words added to the summary line
    defaults: dict = field(default_factory=dict)  # argparse defaults to override (e.g. {"seconds": 60.0})


def collapse(frames, blank: int) -> list[int]:
    """CTC's greedy collapse of frame-wise argmax ids: repeats merged, blanks dropped."""
    out, prev = [], None
    for k in frames:
        if k != prev and k != blank:
            out.append(int(k))
        prev = k
    return out


def load_ours(model_path: str, precision: str, opts, call: Callable | None = None):
    """This package: transcribe.runtime.tune_malloc() (as the CLI does), transcribe.load_model(model,
    threads=N, dtype=OURS_DTYPE[precision]); a call is call(model, pcm) -> (text, ids[, pieces]), by default
    model.transcribe(pcm) and its tokens' ids."""
    import transcribe
    import transcribe.runtime

    transcribe.runtime.tune_malloc()
    rss_import = _rss_mb()
    t0 = time.perf_counter()
    model = transcribe.load_model(model_path, threads=opts.threads, dtype=OURS_DTYPE[precision])
    load_s = time.perf_counter() - t0

    def run(pcm):
        if call is not None:
            return call(model, pcm)
        t = model.transcribe(pcm)
        return t.text, [tok.id for tok in t.tokens]

    return rss_import, load_s, run


def load_transformers(model_path: str, precision: str, model_class: str, processor: Callable | None = None):
    """transformers' side (in the reference's Python): its logging held to errors, then, timed as the load,
    processor(model_path) (default AutoProcessor.from_pretrained) and
    transformers.<model_class>.from_pretrained(model_path, dtype=float32 | bfloat16).eval() (int8, which
    transformers lacks, loads float32). Returns (rss_after_import_mb, load_s, processor, model, dtype)."""
    import torch
    import transformers
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    cls = getattr(transformers, model_class)
    rss_import = _rss_mb()
    t0 = time.perf_counter()
    proc = processor(model_path) if processor else transformers.AutoProcessor.from_pretrained(model_path)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "int8": torch.float32}[precision]
    model = cls.from_pretrained(model_path, dtype=dtype).eval()
    return rss_import, time.perf_counter() - t0, proc, model, dtype


# --------------------------------------------------------------------------------------
# child
# --------------------------------------------------------------------------------------


def child_main(bench: Bench, args) -> int:
    import numpy as np
    import soundfile as sf
    import torch

    job = json.loads(Path(args.job).read_text())
    opts = argparse.Namespace(**job["args"], context=job["context"])
    torch.set_num_threads(opts.threads)
    torch.set_flush_denormal(True)
    pcm, sr = sf.read(args.clip, dtype="float32")
    assert sr == SAMPLE_RATE and pcm.ndim == 1
    pcm = np.ascontiguousarray(pcm)
    load = bench.load_ref if args.child == bench.ref else bench.load_ours
    rss_import, load_s, run = load(job["model"], args.precision, opts)
    rss_loaded = _rss_mb()
    warmup_s, times, out = serve_calls(run, pcm, load_s)
    text, ids = out[0], out[1]
    result = dict(
        impl=args.child, precision=args.precision, threads=torch.get_num_threads(), audio_s=len(pcm) / SAMPLE_RATE,
        load_s=round(load_s, 2), warmup_s=round(warmup_s, 2), times_s=[round(t, 3) for t in times],
        peak_rss_mb=round(_peak_rss_mb()), rss_after_import_mb=round(rss_import), rss_after_load_mb=round(rss_loaded),
    )
    if len(out) > 2:
        result["piece_samples"] = out[2]
    result.update(tokens=len(ids), token_ids=ids, text80=text[:80], torch=torch.__version__)
    print(RESULT_TAG + json.dumps(result), flush=True)
    return 0


# --------------------------------------------------------------------------------------
# parent
# --------------------------------------------------------------------------------------


class Child(ChildProcess):
    def __init__(self, bench: Bench, python: str, impl: str, model: str, precision: str, clip: Path, job: Path,
                 threads: int):
        env = dict(os.environ)
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
        env["TOKENIZERS_PARALLELISM"] = "false"
        if impl == "ours" or bench.repo_on_ref_path:
            env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        cmd = [python, str(Path(bench.script).resolve()), "--child", impl, "--precision", precision,
               "--clip", str(clip), "--job", str(job)]
        super().__init__(f"{impl} {Path(model).name} {precision}", cmd, env)


def same_ids(a: dict, b: dict) -> str:
    if a["token_ids"] == b["token_ids"]:
        return "yes"
    n = min(len(a["token_ids"]), len(b["token_ids"]))
    k = next((i for i in range(n) if a["token_ids"][i] != b["token_ids"][i]), n)
    return f"no (from token {k})"


def table(bench: Bench, rows: list[dict]) -> str:
    R = bench.ref_label
    head = ["precision", f"{R} RTFx best / median", "ours RTFx best / median", f"ours/{R} best", "median",
            "per round", f"{R} peak RSS", "ours peak RSS", f"tokens {R} / ours", "same ids"]
    if bench.load_columns:
        head[8:8] = [f"{R} load", "ours load"]
    lines = [head]
    for r in rows:
        h, o = r.get(bench.ref), r.get("ours")
        rt = lambda d: f"{d['rtfx_best']:.2f} / {d['rtfx_median']:.2f}" if d else "-"  # noqa: E731
        rss = lambda d: f"{d['peak_rss_mb']} MB" if d else "-"  # noqa: E731
        load = lambda d: f"{d['load_s']:.1f} s" if d else "-"  # noqa: E731
        both = h and o
        line = [
            r["precision"] + (f" ({R} fp32)" if r["precision"] in bench.ref_runs_fp32 and h else ""), rt(h), rt(o),
            f"{h['best_s'] / o['best_s']:.2f}x" if both else "-",
            f"{h['median_s'] / o['median_s']:.2f}x" if both else "-",
            f"{r['round_ratio_median']:.2f}x" if r.get("round_ratio_median") else "-",
            rss(h), rss(o), f"{h['tokens'] if h else '-'} / {o['tokens'] if o else '-'}",
            same_ids(h, o) if both else "-"]
        if bench.load_columns:
            line[8:8] = [load(h), load(o)]
        lines.append(line)
    w = [max(len(str(line[i])) for line in lines) for i in range(len(head))]
    out = [" | ".join(str(c).ljust(w[i]) for i, c in enumerate(line)) for line in lines]
    out.insert(1, "-+-".join("-" * x for x in w))
    return "\n".join(out)


def parser(bench: Bench, doc: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=doc.strip().splitlines()[0])
    dm = bench.default_model if isinstance(bench.default_model, str) else "see the description"
    ap.add_argument("--model", help=f"the model folder (default {dm} in the repository)")
    ap.add_argument(bench.ref_python_option, dest="ref_python", metavar="PYTHON",
                    help=f"{bench.ref_label}'s Python (default {bench.ref_python_default} in the repository)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--precisions", default=bench.default_precisions)
    ap.add_argument("--impls", default=f"{bench.ref},ours")
    if bench.one_at_a_time:
        ap.add_argument("--one-at-a-time", action="store_true")
    ap.add_argument("--json", metavar="PATH", help="write the results as JSON here")
    if bench.add_args:
        bench.add_args(ap)
    ap.add_argument("--child", choices=[bench.ref, "ours"], help=argparse.SUPPRESS)
    ap.add_argument("--precision", choices=list(bench.precisions), help=argparse.SUPPRESS)
    ap.add_argument("--clip", help=argparse.SUPPRESS)
    ap.add_argument("--job", help=argparse.SUPPRESS)
    ap.set_defaults(**bench.defaults)
    return ap


def main(bench: Bench, doc: str, argv=None) -> int:
    ap = parser(bench, doc)
    args = ap.parse_args(argv)
    if args.child:
        return child_main(bench, args)
    if bench.early and (status := bench.early(args)) is not None:
        return status
    # os.path.abspath, not resolve(): a venv's python is a symlink that must stay one
    default = bench.default_model if isinstance(bench.default_model, str) else bench.default_model(args)
    model = os.path.abspath(args.model) if args.model else str(REPO / default)
    args.ref_python = os.path.abspath(args.ref_python) if args.ref_python else str(REPO / bench.ref_python_default)
    precisions = [p.strip() for p in args.precisions.split(",") if p.strip()]
    impls = [i.strip() for i in args.impls.split(",") if i.strip()]
    if not precisions or not set(precisions) <= set(bench.precisions) or not impls \
            or not set(impls) <= {bench.ref, "ours"}:
        ap.error(f"precisions: {', '.join(bench.precisions)}; impls: {bench.ref}, ours")
    if bench.ref in impls and not Path(args.ref_python).exists():
        ap.error(f"{args.ref_python}: no such Python (make the venv with {bench.ref_setup}, "
                 f"or pass {bench.ref_python_option})")
    if bench.check:
        bench.check(args, model, ap)
    if not (Path(model) / bench.model_file if bench.model_file else Path(model)).exists():
        ap.error(f"{model}: no model (make it with {bench.make_hint})")
    import soundfile as sf

    from speech_clip import speech_clip

    sys.path.insert(0, str(REPO))
    pcm, used = speech_clip(args.seconds)
    context = bench.prepare(args, pcm) if bench.prepare else None
    one_at_a_time = getattr(args, "one_at_a_time", False)
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    commit = package_commit()
    load_start = os.getloadavg()
    rows: list[dict] = []
    extra = bench.json_extra(args, context) if bench.json_extra else {}

    def write(complete: bool) -> str:
        text = table(bench, rows)
        if args.json:
            out = dict(family=bench.family, reference=bench.ref_label, ref_impl=bench.ref, started=started,
                       complete=complete, package_commit=commit, model=shown(model), clip_seconds=args.seconds,
                       clip_utterances=used, threads=args.threads, rounds=args.rounds, precisions=precisions,
                       one_at_a_time=one_at_a_time, **extra, **cpu_info(),
                       loadavg_start=[round(x, 2) for x in load_start],
                       loadavg_end=[round(x, 2) for x in os.getloadavg()], results=rows, table=text)
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
        return text

    def python(impl):
        return args.ref_python if impl == bench.ref else sys.executable

    with tempfile.TemporaryDirectory() as tmp:
        clip, job = Path(tmp) / "clip.wav", Path(tmp) / "job.json"
        sf.write(clip, pcm, SAMPLE_RATE, subtype="FLOAT")
        shared = {k: v for k, v in vars(args).items() if k not in ("child", "precision", "clip", "job")}
        job.write_text(json.dumps(dict(model=model, args=shared, context=context)))

        def start(impl, prec):
            return Child(bench, python(impl), impl, model, prec, clip, job, args.threads)

        def done(kid):
            return summarize({**kid.finish(), "load_s": kid.ready["load_s"], "warmup_s": kid.ready["warmup_s"]})

        for prec in precisions:
            row: dict = {"precision": prec}
            ratios, loads = [], []
            names = [i for i in impls if not (i == bench.ref and prec in bench.ref_lacks)]
            if one_at_a_time:
                for i in names:
                    kid = start(i, prec)
                    for k in range(args.rounds):
                        s = kid.call()
                        loads.append(round(os.getloadavg()[0], 2))
                        print(f"    {prec} {i} round {k + 1}: {s:.2f} s (load average {loads[-1]:.2f})",
                              file=sys.stderr, flush=True)
                    row[i] = done(kid)
            else:
                kids = {i: start(i, prec) for i in names}
                for k in range(args.rounds):
                    order = names if k % 2 == 0 else names[::-1]
                    got = {i: kids[i].call() for i in order}
                    if len(got) == 2:
                        ratios.append(got[bench.ref] / got["ours"])
                    loads.append(round(os.getloadavg()[0], 2))
                    print(f"    {prec} round {k + 1}: " + ", ".join(f"{i} {got[i]:.2f} s" for i in names)
                          + f" (load average {loads[-1]:.2f})", file=sys.stderr, flush=True)
                for i in names:
                    row[i] = done(kids[i])
            if ratios:
                row["round_ratios"] = [round(x, 3) for x in ratios]
                row["round_ratio_median"] = round(statistics.median(ratios), 3)
            row["loadavg_rounds"] = loads
            row["loadavg_after"] = round(os.getloadavg()[0], 2)
            rows.append(row)
            print(table(bench, [row]), file=sys.stderr, flush=True)
            write(complete=False)  # a long run keeps what it has measured
    text = write(complete=True)
    more = bench.summary_extra(args, context) if bench.summary_extra else ""
    print(f"\n{bench.title(args, model)}, ours at {commit}, {args.seconds:g} s clip{more}, {args.threads} threads, "
          f"{args.rounds} {'rounds each' if one_at_a_time else 'alternating rounds'} after 1 warm-up; "
          f"{cpu_line()}; load average at start {load_start[0]:.2f}, at end {os.getloadavg()[0]:.2f}\n")
    print(text)
    if args.json:
        print(f"\nwritten {args.json}")
    return 0
