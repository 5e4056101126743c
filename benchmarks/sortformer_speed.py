#!/usr/bin/env python
"""Streaming Sortformer (diar_streaming_sortformer_4spk-v2.1, random weights) on the CPU: ours against NeMo in one run.

Run from the repository root with the project's Python (torch, this package importable):

    python3 benchmarks/sortformer_speed.py --json bench-out/sortformer_speed.json
    python3 benchmarks/sortformer_speed.py --stages            # where our time goes (and NeMo's), per stage

    options: --model PATH       the .nemo (default local-models/diar_streaming_sortformer_4spk-v2.1-random.nemo,
                                made by benchmarks/make_sortformer_model.py)
             --nemo-python P    Python of a NeMo virtual environment (default .venv-nemo/bin/python)
             --threads N        torch threads and OMP_NUM_THREADS in every child (default 2)
             --rounds N         timed calls of each engine after one warm-up (default 3)
             --seconds S        audio length (default 600: 10 minutes)
             --precisions L     comma list of fp32, bf16 (default fp32,bf16)
             --impls L          comma list of nemo, ours (default nemo,ours)
             --max-load X       warn when the 1-minute load average is above X before starting (default 1.0);
                                with --refuse-busy, exit 3 instead
             --stages           instead of the timed rounds: one call of each engine with each stage timed

Default paths are relative to the repository root (git-ignored folders); paths given on the command line are
relative to the working directory.

The audio: S seconds of real speech, the dev utterances of ../shared/audio/dev joined end to end, 0.25 s of
silence after each, the list starting over when it runs out (benchmarks/speech_clip.py), written once to a
temporary WAV (float32) that both read before any timing.

For each precision, one child process per engine, both with the same thread count, both loaded at the same
time; their calls then alternate (the order flips every round), one call at a time:
  nemo  NeMo's Python: SortformerEncLabelModel.restore_from(model, map_location="cpu"), eval(), the model's own
        streaming_mode (true) and synchronous cache update (async_streaming false, NeMo's default), then
        model.diarize(audio=[wav], batch_size=1, include_tensor_outputs=True, verbose=False, num_workers=0):
        its front end over the whole file, then forward_streaming's chunk loop, then its post-processing to
        segments. bf16: the call under torch.autocast("cpu", dtype=torch.bfloat16) with float32 weights
        (NeMo's own mixed-precision path; its preprocessor turns autocast off for the mel front end).
  ours  this package: transcribe.runtime.tune_malloc(), transcribe.load_model(model, threads=N,
        dtype=None | "bfloat16"), then model.diarize(pcm, sample_rate=16000) (the model's streaming path, sync
        update: the front end block by block, the chunk loop, NeMo's post-processing to turns). bf16: the
        encoder, projection, Transformer and head weights in bfloat16 (front end and cache float32).
Each child: one warm-up call, then one timed call (time.perf_counter) per round; the last call's per-frame
probabilities are saved and compared: ours float32 against NeMo float32 (max abs difference; frames whose most
likely speaker differs), ours bf16 against NeMo float32 and NeMo bf16 (the same two); then, in this process,
ours fp32 and bf16 against NeMo's float32 streaming references of the shared tiny Sortformer's three mixtures
(../shared/models/sortformer-tiny, trained briefly: bf16's effect where outputs mean something).
Reported per engine: load time, best and median call, RTFx (audio seconds / call), peak RSS (getrusage ru_maxrss, includes the model
load); ratios ours/NeMo speed: of the best calls, of the medians, and the median of the per-round ratios; and
ours bf16 against NeMo fp32. The CPU (machine.cpu_info) and the load average before and after are recorded.

--stages: each engine in its own fresh process, one warm-up and one call with timers wrapped around its stages:
front end (mel features), pre-encode (the subsampling), the conformer layers, projection + Transformer + head,
the cache update (and what is left: slicing, concatenation, post-processing).
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
from parakeet_rtfx import RESULT_TAG, ChildProcess, _peak_rss_mb, _rss_mb, shown, summarize

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_MODEL = "local-models/diar_streaming_sortformer_4spk-v2.1-random.nemo"  # make_sortformer_model.py
DEFAULT_NEMO_PYTHON = ".venv-nemo/bin/python"  # tools/setup_nemo_venv.sh
SAMPLE_RATE = 16000


# --------------------------------------------------------------------------------------
# children (fresh interpreters; only the standard library at module level)
# --------------------------------------------------------------------------------------


class Stages:
    """Wall time per named stage, summed over calls (a stage inside another is subtracted from it by the
    caller of `report`)."""

    def __init__(self):
        self.t: dict = {}
        self.n: dict = {}

    def wrap(self, obj, attr: str, name: str):
        fn = getattr(obj, attr)

        def timed(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                self.t[name] = self.t.get(name, 0.0) + time.perf_counter() - t0
                self.n[name] = self.n.get(name, 0) + 1

        setattr(obj, attr, timed)

    def reset(self):
        self.t.clear()
        self.n.clear()

    def report(self) -> dict:
        return {k: dict(s=round(v, 3), calls=self.n[k]) for k, v in self.t.items()}


def _nemo_child(model_path: str, precision: str, stages: "Stages | None"):
    import contextlib
    import logging

    import torch
    from nemo.utils import logging as nemo_logging

    nemo_logging.setLevel(logging.ERROR)
    from nemo.collections.asr.models import SortformerEncLabelModel

    rss_import = _rss_mb()
    t0 = time.perf_counter()
    model = SortformerEncLabelModel.restore_from(model_path, map_location="cpu")
    model.eval()
    load_s = time.perf_counter() - t0
    assert model.streaming_mode and not model.async_streaming
    if stages is not None:
        # nested: forward_streaming_step contains pre_encode, frontend_encoder (conformer layers + projection),
        # forward_infer (Transformer + head) and the cache update
        stages.wrap(model, "process_signal", "front end")
        stages.wrap(model.encoder.pre_encode, "forward", "pre-encode")
        stages.wrap(model, "frontend_encoder", "conformer layers + projection")
        stages.wrap(model, "forward_infer", "Transformer + head")
        stages.wrap(model.sortformer_modules, "streaming_update", "cache update")
        stages.wrap(model, "forward_streaming_step", "chunk step (all)")
        stages.wrap(model, "forward", "forward (all)")

    def run(wav, pcm):
        ctx = torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16" else contextlib.nullcontext()
        with ctx:
            _, probs = model.diarize(audio=[wav], batch_size=1, include_tensor_outputs=True, verbose=False,
                                     num_workers=0)
        return probs[0][0].float().numpy()

    return rss_import, load_s, run


def _ours_child(model_path: str, precision: str, threads: int, stages: "Stages | None"):
    import transcribe
    import transcribe.runtime

    transcribe.runtime.tune_malloc()  # the CLI does the same before it loads a model
    rss_import = _rss_mb()
    t0 = time.perf_counter()
    model = transcribe.load_model(model_path, threads=threads, dtype={"fp32": None, "bf16": "bfloat16"}[precision])
    load_s = time.perf_counter() - t0
    if stages is not None:
        from transcribe.sortformer import cache, recognizer, stream

        m = model.model
        stages.wrap(stream.Features, "push", "front end")
        stages.wrap(stream.Features, "finish", "front end")
        stages.wrap(recognizer, "file_stats", "front end (statistics pass)")
        stages.wrap(m, "pre_encode", "pre-encode")
        stages.wrap(m.encoder, "layers_forward", "conformer layers")
        stages.wrap(m.sortformer_modules.encoder_proj, "forward", "projection")
        stages.wrap(m.transformer_encoder, "forward", "Transformer")
        stages.wrap(m.sortformer_modules, "head", "head")
        stages.wrap(cache.SyncCache, "update", "cache update")
        stages.wrap(cache.SyncCache, "context", "cache context")
        stages.wrap(stream.ChunkLoop, "_chunk", "chunk step (all)")
        stages.wrap(model, "turns", "post-processing")
        stages.wrap(model, "probabilities", "probabilities (all)")

    def run(wav, pcm):
        return model.diarize(pcm, sample_rate=SAMPLE_RATE).probs

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
    stages = Stages() if args.stages else None
    if args.child == "nemo":
        rss_import, load_s, run = _nemo_child(args.model, args.precision, stages)
    else:
        rss_import, load_s, run = _ours_child(args.model, args.precision, args.threads, stages)
    rss_loaded = _rss_mb()
    t0 = time.perf_counter()
    probs = run(args.clip, pcm)  # warm-up
    warmup_s = time.perf_counter() - t0
    if stages is not None:
        stages.reset()
    print(RESULT_TAG + json.dumps(dict(ready=True, load_s=round(load_s, 2), warmup_s=round(warmup_s, 2))), flush=True)
    times = []
    for line in sys.stdin:
        if line.strip() == "run":
            t0 = time.perf_counter()
            probs = run(args.clip, pcm)
            times.append(time.perf_counter() - t0)
            print(RESULT_TAG + json.dumps(dict(call_s=round(times[-1], 4))), flush=True)
        elif line.strip() == "quit":
            break
    np.save(args.probs_out, np.asarray(probs, dtype=np.float32))
    result = dict(
        impl=args.child, precision=args.precision, threads=torch.get_num_threads(), audio_s=len(pcm) / SAMPLE_RATE,
        load_s=round(load_s, 2), warmup_s=round(warmup_s, 2), times_s=[round(t, 3) for t in times],
        peak_rss_mb=round(_peak_rss_mb()), rss_after_import_mb=round(rss_import), rss_after_load_mb=round(rss_loaded),
        frames=int(probs.shape[0]), torch=torch.__version__,
    )
    if stages is not None:
        result["stages"] = stages.report()
    print(RESULT_TAG + json.dumps(result), flush=True)
    return 0


# --------------------------------------------------------------------------------------
# parent
# --------------------------------------------------------------------------------------


class Child(ChildProcess):
    def __init__(self, python: str, impl: str, precision: str, clip: Path, probs_out: Path, args):
        env = dict(os.environ)
        env["OMP_NUM_THREADS"] = str(args.threads)
        env["MKL_NUM_THREADS"] = str(args.threads)
        if impl == "ours":
            env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        cmd = [python, str(Path(__file__).resolve()), "--child", impl, "--precision", precision, "--clip", str(clip),
               "--model", args.model, "--threads", str(args.threads), "--probs-out", str(probs_out)]
        if args.stages:
            cmd.append("--stages")
        super().__init__(f"{impl} {precision}", cmd, env)


def compare(a, b) -> dict:
    """Per-frame probabilities a against b ([frames, speakers])."""
    import numpy as np

    n = min(len(a), len(b))
    d = np.abs(a[:n] - b[:n])
    return dict(frames=[int(len(a)), int(len(b))], max_abs_diff=float(d.max()) if n else 0.0,
                mean_abs_diff=float(d.mean()) if n else 0.0,
                argmax_differs=int((a[:n].argmax(1) != b[:n].argmax(1)).sum()),
                active_differs=int(((a[:n] > 0.5) != (b[:n] > 0.5)).sum()))


def tiny_agreement(threads: int) -> dict:
    """Ours bf16 and fp32 against NeMo's float32 streaming (sync) probabilities on the shared tiny Sortformer,
    which was trained briefly on two-speaker mixtures (../shared/models/sortformer-tiny): bf16's effect on a
    model whose outputs mean something, beside the random model's."""
    import numpy as np
    import soundfile as sf
    import torch

    sys.path.insert(0, str(REPO))
    import transcribe

    torch.set_num_threads(threads)
    tiny = REPO / ".." / "shared" / "models" / "sortformer-tiny"
    if not (tiny / "references.json").exists():
        return {}
    refs = json.loads((tiny / "references.json").read_text())["mixtures"]
    out = {}
    for prec, dtype in (("fp32", None), ("bf16", "bfloat16")):
        model = transcribe.load_model(str(tiny / "sortformer-tiny.nemo"), threads=threads, dtype=dtype)
        frames = argmax = active = 0
        worst = 0.0
        for name in sorted(refs):
            ref = np.asarray(refs[name]["streaming_sync"]["probs"], dtype=np.float32).reshape(-1, 4)
            pcm, _ = sf.read(tiny / f"{name}.wav", dtype="float32")
            got = model.probabilities(pcm, model.options(mode="streaming"))
            c = compare(got, ref)
            frames += c["frames"][1]
            argmax += c["argmax_differs"]
            active += c["active_differs"]
            worst = max(worst, c["max_abs_diff"])
        out[f"tiny ours {prec} vs nemo fp32"] = dict(mixtures=len(refs), frames=frames, max_abs_diff=worst,
                                                      argmax_differs=argmax, active_differs=active)
    return out


def table(rows: list[dict]) -> str:
    head = ["precision", "NeMo RTFx best / median", "ours RTFx best / median", "ours/NeMo best", "median",
            "per round", "NeMo peak RSS", "ours peak RSS", "NeMo load", "ours load"]
    lines = [head]
    for r in rows:
        n, o = r.get("nemo"), r.get("ours")
        rt = lambda d: f"{d['rtfx_best']:.2f} / {d['rtfx_median']:.2f}" if d else "-"  # noqa: E731
        both = n and o
        lines.append([
            r["precision"], rt(n), rt(o),
            f"{n['best_s'] / o['best_s']:.2f}x" if both else "-",
            f"{n['median_s'] / o['median_s']:.2f}x" if both else "-",
            f"{r['round_ratio_median']:.2f}x" if both else "-",
            f"{n['peak_rss_mb']} MB" if n else "-", f"{o['peak_rss_mb']} MB" if o else "-",
            f"{n['load_s']:.1f} s" if n else "-", f"{o['load_s']:.1f} s" if o else "-"])
    w = [max(len(str(l[i])) for l in lines) for i in range(len(head))]
    out = [" | ".join(str(c).ljust(w[i]) for i, c in enumerate(l)) for l in lines]
    out.insert(1, "-+-".join("-" * x for x in w))
    return "\n".join(out)


def stage_table(rows: list[dict]) -> str:
    lines = []
    for r in rows:
        for impl in ("nemo", "ours"):
            d = r.get(impl)
            if not d or "stages" not in d:
                continue
            total = d["times_s"][0]
            lines.append(f"{impl} {r['precision']}: call {total:.2f} s")
            for k, v in sorted(d["stages"].items(), key=lambda kv: -kv[1]["s"]):
                lines.append(f"    {k:34s} {v['s']:8.2f} s  {100 * v['s'] / total:5.1f} %  ({v['calls']} calls)")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model")
    ap.add_argument("--nemo-python")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=600.0)
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--impls", default="nemo,ours")
    ap.add_argument("--max-load", type=float, default=1.0)
    ap.add_argument("--refuse-busy", action="store_true")
    ap.add_argument("--stages", action="store_true")
    ap.add_argument("--json", metavar="PATH", help="write the results as JSON here")
    ap.add_argument("--child", choices=["nemo", "ours"], help=argparse.SUPPRESS)
    ap.add_argument("--precision", choices=["fp32", "bf16"], help=argparse.SUPPRESS)
    ap.add_argument("--clip", help=argparse.SUPPRESS)
    ap.add_argument("--probs-out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    # os.path.abspath, not resolve(): a venv's python is a symlink that must stay one
    args.model = os.path.abspath(args.model) if args.model else str(REPO / DEFAULT_MODEL)
    if args.child:
        return child_main(args)
    args.nemo_python = os.path.abspath(args.nemo_python) if args.nemo_python else str(REPO / DEFAULT_NEMO_PYTHON)
    precisions = [p.strip() for p in args.precisions.split(",") if p.strip()]
    impls = [i.strip() for i in args.impls.split(",") if i.strip()]
    if not set(precisions) <= {"fp32", "bf16"} or not set(impls) <= {"nemo", "ours"}:
        ap.error("precisions: fp32, bf16; impls: nemo, ours")
    if not Path(args.model).exists():
        ap.error(f"{args.model}: no such model (make it with benchmarks/make_sortformer_model.py)")
    if "nemo" in impls and not Path(args.nemo_python).exists():
        ap.error(f"{args.nemo_python}: no such Python (make NeMo's venv with tools/setup_nemo_venv.sh, "
                 "or pass --nemo-python)")
    load_start = os.getloadavg()
    if load_start[0] > args.max_load:
        msg = (f"load average {load_start[0]:.2f} is above {args.max_load:g}: other work shares the CPU and the "
               "figures will be slower and noisier")
        if args.refuse_busy:
            print(f"sortformer_speed: {msg}; not starting (--refuse-busy)", file=sys.stderr)
            return 3
        print(f"WARNING: {msg}", file=sys.stderr, flush=True)
    import numpy as np
    import soundfile as sf
    from speech_clip import speech_clip

    pcm, used = speech_clip(args.seconds)
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    commit = package_commit()
    rows, agreement = [], {}
    probs = {}
    if args.stages:
        args.rounds = 1

    def write(complete: bool) -> str:
        text = stage_table(rows) if args.stages else table(rows)
        if args.json:
            out = dict(started=started, complete=complete, package_commit=commit, model=shown(args.model),
                       seconds=args.seconds, clip_utterances=len(used), threads=args.threads, rounds=args.rounds,
                       mode="stages" if args.stages else "rounds", **cpu_info(),
                       loadavg_start=[round(x, 2) for x in load_start],
                       loadavg_end=[round(x, 2) for x in os.getloadavg()], results=rows, agreement=agreement,
                       table=text)
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
        return text

    with tempfile.TemporaryDirectory() as tmp:
        clip = Path(tmp) / "clip.wav"
        sf.write(clip, pcm, SAMPLE_RATE, subtype="FLOAT")
        for prec in precisions:
            row = {"precision": prec}
            if args.stages:  # one engine at a time: a stage's time is its own
                for i in impls:
                    kid = Child(args.nemo_python if i == "nemo" else sys.executable, i, prec, clip,
                                Path(tmp) / f"{i}-{prec}.npy", args)
                    kid.call()
                    row[i] = {**kid.finish(), "load_s": kid.ready["load_s"], "warmup_s": kid.ready["warmup_s"]}
                    probs[(i, prec)] = np.load(Path(tmp) / f"{i}-{prec}.npy")
                rows.append(row)
                print(stage_table([row]), file=sys.stderr, flush=True)
                continue
            kids = {i: Child(args.nemo_python if i == "nemo" else sys.executable, i, prec, clip,
                             Path(tmp) / f"{i}-{prec}.npy", args) for i in impls}
            ratios = []
            for k in range(args.rounds):
                order = impls if k % 2 == 0 else impls[::-1]
                got = {i: kids[i].call() for i in order}
                if len(got) == 2:
                    ratios.append(got["nemo"] / got["ours"])
                print(f"    {prec} round {k + 1}: " + ", ".join(f"{i} {got[i]:.2f} s" for i in impls)
                      + f" (load average {os.getloadavg()[0]:.2f})", file=sys.stderr, flush=True)
            for i in impls:
                row[i] = summarize({**kids[i].finish(), "load_s": kids[i].ready["load_s"],
                                    "warmup_s": kids[i].ready["warmup_s"]})
                probs[(i, prec)] = np.load(Path(tmp) / f"{i}-{prec}.npy")
            if ratios:
                row["round_ratios"] = [round(x, 3) for x in ratios]
                row["round_ratio_median"] = round(statistics.median(ratios), 3)
            row["loadavg_after"] = round(os.getloadavg()[0], 2)
            rows.append(row)
            print(table([row]), file=sys.stderr, flush=True)
            write(complete=False)  # a long run keeps what it has measured
    for a, b in [(("ours", "fp32"), ("nemo", "fp32")), (("ours", "bf16"), ("nemo", "fp32")),
                 (("ours", "bf16"), ("nemo", "bf16")), (("nemo", "bf16"), ("nemo", "fp32")),
                 (("ours", "bf16"), ("ours", "fp32"))]:
        if a in probs and b in probs:
            agreement[f"{a[0]} {a[1]} vs {b[0]} {b[1]}"] = compare(probs[a], probs[b])
    if not args.stages and "ours" in impls:
        agreement.update(tiny_agreement(args.threads))
    extra = ""
    by = {r["precision"]: r for r in rows}
    if not args.stages and "bf16" in by and "fp32" in by and by["bf16"].get("ours") and by["fp32"].get("nemo"):
        o, n = by["bf16"]["ours"], by["fp32"]["nemo"]
        extra = (f"\nours bf16 / NeMo fp32: {n['best_s'] / o['best_s']:.2f}x best, "
                 f"{n['median_s'] / o['median_s']:.2f}x median")
        agreement["speed ours bf16 / nemo fp32"] = dict(best=round(n["best_s"] / o["best_s"], 3),
                                                        median=round(n["median_s"] / o["median_s"], 3))
    text = write(complete=True)
    print(f"\nStreaming Sortformer v2.1 (random weights), ours at {commit}, {args.seconds:g} s of speech, "
          f"{args.threads} threads, {args.rounds} alternating round(s) after 1 warm-up; {cpu_line()}; load average "
          f"at start {load_start[0]:.2f}, at end {os.getloadavg()[0]:.2f}\n")
    print(text + extra)
    if agreement:
        print("\nprobabilities (last call of each):")
        for k, v in agreement.items():
            print(f"    {k}: " + ", ".join(f"{kk} {vv:.3g}" if isinstance(vv, float) else f"{kk} {vv}"
                                          for kk, vv in v.items()))
    if args.json:
        print(f"\nwritten {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
