#!/usr/bin/env python
"""`transcribe batch` throughput: audio seconds per wall second and peak memory of the whole job, by mode.

Run from the repository root with the project's Python (this package installed, `ray[data]` for --ray):

    python3 benchmarks/batch_throughput.py

    options: --models L       comma list: "default" (no --model: Whisper tiny.en) and model paths or names
                              (default: default,../shared/models/parakeet-tiny/tiny-tdt-fit.nemo, the
                              shared folder next to the repository)
             --datasets L     comma list of dev, 30min (default dev,30min)
             --long-models L  which models also run the 30min set: all, none, or a comma list of model
                              labels, e.g. tiny-tdt-fit (default: every model but the default Whisper:
                              at the rates measured on the dev set, Whisper tiny.en's 30min set is about
                              40 min a round of 4 modes here, bs1 alone 1.3-4 audio s/s, 8-25 min)
             --modes L        comma list of bs1, batched, workers2, ray (default: all four)
             --rounds N       runs of every mode (default 2); the modes alternate within a round
             --run-timeout S  a run still going after S s is killed and the benchmark stops (default 3600)
             --json PATH      results (default benchmarks/results/batch_throughput.json; "" for none)

A default run (dev for both models, 30min for the tiny Parakeet, 2 rounds) takes about 10-20 min on
the 2-core machine, most of it Whisper's bs1 runs; `--long-models all` adds Whisper on 30min, roughly
an hour more.

The datasets: "dev", the 37 clips of ../shared/audio/dev (about 331 s of speech, 2-33 s each);
"30min", the same clips repeated (ids r0-<stem>, r1-<stem>, ...) until they add up to 1800 s. Each
is a manifest written to a temporary folder with absolute paths.

The modes, each a fresh `python -m transcribe batch --manifest M -o <fresh folder> -q` process:
  bs1       --workers 1 --batch-size 1   (one process, one input a model call)
  batched   --workers 1                  (one process, the model's own batch size)
  workers2  --workers 2                  (two worker processes, 1 thread each)
  ray       --ray                        (a Ray instance started on this machine: actors by default)
Measured per run: the wall time from spawn to exit (imports, model loading and Ray's start
included: what a user waits), peak RSS of the whole process tree (VmRSS summed over every process
of the job, sampled every 0.15 s: shared pages such as torch's libraries count once per process,
so several processes look heavier than they are), audio seconds (sum of "duration" in
results.jsonl) and model time (sum of "seconds"). A run must exit 0 with one "ok" line per input,
or the benchmark stops. The transcripts ("text" of every <id>.json) are compared across modes and
rounds for the same model and dataset; a difference is reported, not fatal.

Which processes belong to a run: the command is started in a session of its own
(start_new_session), and a sample takes every process whose session id is that run's, plus any
descendant of the command. With --ray the driver starts gcs_server, raylet and the Ray workers
itself; they are its descendants (raylet's workers are its children) and stay in its session (Ray
gives workers process groups of their own, not sessions), so both rules find them; the session
rule would still find a daemon reparented to init. After the run, any process left in the session
is reported and killed by its pid (never `ray stop`, which would stop other Ray instances of this
user too).

Reported per dataset x model x mode: audio s per wall s, best and median over the rounds; the best
against bs1's best ("x bs1"); peak RSS (the largest over the rounds); model time (median). And per
dataset x model: the best mode against bs1 (the issue's target: at least 1.8x on 2 cores) and ray
against the best local mode (target: within 15%). Only printed and recorded, never asserted.

Timing on a shared machine is noisy: check `uptime` first and run when the load average is low.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from importlib import metadata
from pathlib import Path

from machine import cpu_info, cpu_line, package_commit  # benchmarks/machine.py (this script's folder is on sys.path)

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SHARED = REPO.parent / "shared"  # the shared data folder next to the repository (../shared)
DEV_DIR = SHARED / "audio" / "dev"
PARAKEET_TINY = SHARED / "models" / "parakeet-tiny" / "tiny-tdt-fit.nemo"
DEFAULT_JSON = HERE / "results" / "batch_throughput.json"
LONG_S = 1800.0
SAMPLE_S = 0.15

MODES = {
    "bs1": ["--workers", "1", "--batch-size", "1"],
    "batched": ["--workers", "1"],
    "workers2": ["--workers", "2"],
    "ray": ["--ray"],
}
LOCAL_MODES = ("bs1", "batched", "workers2")
TARGET_X_BS1 = 1.8
TARGET_RAY = 0.85  # ray's best at least 85% of the best local mode's


# --------------------------------------------------------------------------------------
# datasets
# --------------------------------------------------------------------------------------


def wav_seconds(path: Path) -> float:
    import soundfile as sf

    info = sf.info(str(path))
    return info.frames / info.samplerate


def dev_clips() -> list[tuple[str, Path, float]]:
    """(stem, absolute path, seconds) of the dev clips, in the order of their manifest."""
    manifest = DEV_DIR / "manifest.jsonl"
    clips = []
    for line in manifest.read_text(encoding="utf-8").splitlines():
        if line.strip():
            p = (DEV_DIR / json.loads(line)["audio"]).resolve()
            clips.append((p.stem, p, wav_seconds(p)))
    return clips


def write_manifest(path: Path, rows: list[tuple[str, Path]]) -> None:
    # only "audio" and "id": other fields are carried to results.jsonl, and "duration" is refused
    with open(path, "w", encoding="utf-8") as f:
        for ident, audio in rows:
            f.write(json.dumps({"audio": str(audio), "id": ident}) + "\n")


def make_datasets(names: list[str], tmp: Path) -> dict[str, dict]:
    clips = dev_clips()
    out = {}
    if "dev" in names:
        m = tmp / "dev.jsonl"
        write_manifest(m, [(stem, p) for stem, p, _ in clips])
        out["dev"] = dict(manifest=m, inputs=len(clips), audio_s=sum(s for _, _, s in clips))
    if "30min" in names:
        rows, total, k = [], 0.0, 0
        while total < LONG_S:
            for stem, p, s in clips:
                if total >= LONG_S:
                    break
                rows.append((f"r{k}-{stem}", p))
                total += s
            k += 1
        m = tmp / "30min.jsonl"
        write_manifest(m, rows)
        out["30min"] = dict(manifest=m, inputs=len(rows), audio_s=total)
    return out


# --------------------------------------------------------------------------------------
# one run: a process tree, its wall time and peak memory
# --------------------------------------------------------------------------------------


def _stat(pid: str):
    """(ppid, session id) of a process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            s = f.read()
    except OSError:
        return None
    fields = s[s.rfind(b")") + 2:].split()  # after "pid (comm) ": state ppid pgrp session ...
    return int(fields[1]), int(fields[3])


def job_processes(root: int) -> list[int]:
    """The pids of `root`'s session (root leads it: start_new_session) and of its descendants."""
    parent, members = {}, set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        st = _stat(name)
        if st is None:
            continue
        pid = int(name)
        parent[pid] = st[0]
        if st[1] == root:
            members.add(pid)
    for pid in parent:  # descendants, in case one left the session
        p, seen = pid, 0
        while p > 1 and seen < 64:
            if p == root:
                members.add(pid)
                break
            p, seen = parent.get(p, 0), seen + 1
    return sorted(members)


def rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0  # gone, or a zombie


class Sampler(threading.Thread):
    """Samples the summed RSS of a job's processes until stopped; keeps the peak."""

    def __init__(self, root: int, results: Path = None):
        super().__init__(daemon=True)
        self.root = root
        self.results = results  # its first line's time: what start-up (processes, Ray, model loads) costs
        self.t0 = time.perf_counter()
        self.first_s = None
        self.stop = threading.Event()
        self.peak_kb = 0
        self.peak_procs = 0
        self.max_procs = 0
        self.samples = 0

    def run(self):
        while True:
            pids = job_processes(self.root)
            total = sum(rss_kb(p) for p in pids)
            self.samples += 1
            self.max_procs = max(self.max_procs, len(pids))
            if total > self.peak_kb:
                self.peak_kb, self.peak_procs = total, len(pids)
            if self.first_s is None and self.results is not None:
                try:
                    if self.results.stat().st_size > 0:
                        self.first_s = time.perf_counter() - self.t0
                except OSError:
                    pass
            if self.stop.wait(SAMPLE_S):
                return


def kill_leftovers(root: int) -> list[int]:
    """Kill (by pid) whatever is still in the run's session; the pids killed."""
    left = [p for p in job_processes(root) if p != os.getpid()]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in left:
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass
        if sig == signal.SIGTERM and left:
            time.sleep(2.0)
            left = [p for p in left if _stat(str(p)) is not None]
    return left


def run_once(model: str | None, mode: str, data: dict, work: Path, label: str, timeout: float) -> dict:
    out_dir = work / label
    err_path = work / f"{label}.stderr"
    cmd = [sys.executable, "-m", "transcribe", "batch", "--manifest", str(data["manifest"]), "-o", str(out_dir),
           "-q", *MODES[mode], *(["--model", model] if model else [])]
    with open(err_path, "wb") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=REPO, stdin=subprocess.DEVNULL, stdout=err, stderr=subprocess.STDOUT,
                                start_new_session=True)
        sampler = Sampler(proc.pid, out_dir / "results.jsonl")
        sampler.start()
        try:
            rc = proc.wait(timeout=timeout or None)
            wall = time.perf_counter() - t0
        except subprocess.TimeoutExpired:
            kill_leftovers(proc.pid)
            proc.wait()
            raise SystemExit(f"{label}: `{' '.join(cmd)}` still running after {timeout:g} s (--run-timeout): killed\n"
                             + err_path.read_text(encoding="utf-8", errors="replace")[-3000:]) from None
        except BaseException:  # Ctrl-C: the job and its Ray instance go too
            kill_leftovers(proc.pid)
            proc.wait()
            raise
        finally:
            sampler.stop.set()
            sampler.join()
    left = kill_leftovers(proc.pid)
    stderr = err_path.read_text(encoding="utf-8", errors="replace").splitlines()
    if rc != 0:
        raise SystemExit(f"{label}: `{' '.join(cmd)}` exited {rc}:\n" + "\n".join(stderr[-30:]))
    lines = [json.loads(l) for l in (out_dir / "results.jsonl").read_text(encoding="utf-8").splitlines() if l.strip()]
    bad = [l for l in lines if l.get("status") != "ok"]
    ids = [l["id"] for l in lines]
    if bad or len(lines) != data["inputs"] or len(set(ids)) != data["inputs"]:
        raise SystemExit(f"{label}: results.jsonl has {len(lines)} lines ({len(set(ids))} ids, {len(bad)} not ok) "
                         f"for {data['inputs']} inputs; first problem: {bad[:1]}")
    texts = {i: json.loads((out_dir / f"{i}.json").read_text(encoding="utf-8"))["text"] for i in ids}
    audio = sum(l["duration"] or 0.0 for l in lines)
    return dict(mode=mode, wall_s=round(wall, 3), audio_s=round(audio, 3),
                model_s=round(sum(l["seconds"] or 0.0 for l in lines), 3), speed=round(audio / wall, 3),
                peak_rss_mb=round(sampler.peak_kb / 1024), peak_procs=sampler.peak_procs, max_procs=sampler.max_procs,
                samples=sampler.samples, first_result_s=None if sampler.first_s is None else round(sampler.first_s, 2),
                stderr=stderr[:20], left_behind=left, texts=texts)


# --------------------------------------------------------------------------------------
# the benchmark
# --------------------------------------------------------------------------------------


def model_label(spec: str) -> str:
    return "whisper-tiny.en (default)" if spec == "default" else Path(spec).stem


def shown(path: str) -> str:
    """A path as results record it: relative to the repository's parent when inside it (../shared/...)."""
    p = Path(path).resolve()
    return os.path.relpath(p, REPO) if p.is_relative_to(REPO.parent) else path


def version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def compare_texts(runs: list[dict]) -> dict:
    """Are the transcripts the same in every run (and for every repeat of a clip within a run)?"""
    ref = runs[0]
    diffs = []
    for r in runs[1:]:
        for i, t in ref["texts"].items():
            if r["texts"].get(i) != t:
                diffs.append(dict(id=i, mode=r["mode"], round=r["round"], ref_mode=ref["mode"],
                                  ref=t[:120], got=(r["texts"].get(i) or "")[:120]))
    repeats = []  # the 30min set: one clip under several ids
    for r in runs:
        by_stem: dict = {}
        for i, t in r["texts"].items():
            stem = i.split("-", 1)[1] if i[:1] == "r" and "-" in i and i.split("-", 1)[0][1:].isdigit() else i
            by_stem.setdefault(stem, set()).add(t)
        repeats += [dict(mode=r["mode"], round=r["round"], clip=s, variants=len(v)) for s, v in by_stem.items()
                    if len(v) > 1]
    return dict(identical=not diffs, differences=len(diffs), examples=diffs[:5],
                repeats_identical=not repeats, repeat_differences=repeats[:10])


def summarize(runs: list[dict], modes: list[str]) -> dict:
    by = {m: [r for r in runs if r["mode"] == m] for m in modes}
    s = {}
    for m, rs in by.items():
        sp = [r["speed"] for r in rs]
        s[m] = dict(best=round(max(sp), 3), median=round(statistics.median(sp), 3),
                    best_wall_s=round(min(r["wall_s"] for r in rs), 2),
                    peak_rss_mb=max(r["peak_rss_mb"] for r in rs),
                    model_s=round(statistics.median(r["model_s"] for r in rs), 2),
                    first_result_s=round(min(r.get("first_result_s") or 0.0 for r in rs), 2))
    if "bs1" in s:
        for m in s:
            s[m]["x_bs1"] = round(s[m]["best"] / s["bs1"]["best"], 3)
    out = dict(modes=s)
    local = [m for m in modes if m in LOCAL_MODES]
    if "bs1" in s and len(s) > 1:
        best = max(s, key=lambda m: s[m]["best"])
        out["best_mode"] = best
        out["best_x_bs1"] = s[best]["x_bs1"]
        out["target_best_x_bs1_met"] = s[best]["x_bs1"] >= TARGET_X_BS1
    if "ray" in s and local:
        best_local = max(local, key=lambda m: s[m]["best"])
        ratio = s["ray"]["best"] / s[best_local]["best"]
        out["best_local_mode"] = best_local
        out["ray_vs_best_local"] = round(ratio, 3)
        out["target_ray_within_15pct_met"] = ratio >= TARGET_RAY
    return out


def table(summary: dict, modes: list[str]) -> str:
    head = ["mode", "audio s/s best", "median", "x bs1", "peak RSS MB", "model time s", "best wall s",
            "first result s"]
    lines = [head]
    for m in modes:
        d = summary["modes"][m]
        lines.append([m, f"{d['best']:.1f}", f"{d['median']:.1f}", f"{d['x_bs1']:.2f}x" if "x_bs1" in d else "-",
                      str(d["peak_rss_mb"]), f"{d['model_s']:.1f}", f"{d['best_wall_s']:.1f}",
                      f"{d['first_result_s']:.1f}"])
    w = [max(len(l[i]) for l in lines) for i in range(len(head))]
    out = ["| " + " | ".join(c.ljust(w[i]) for i, c in enumerate(l)) + " |" for l in lines]
    out.insert(1, "|" + "|".join("-" * (x + 2) for x in w) + "|")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=f"default,{PARAKEET_TINY}",
                    help='comma list: "default" (Whisper tiny.en) and model paths or names '
                         "(default: default and ../shared/models/parakeet-tiny/tiny-tdt-fit.nemo)")
    ap.add_argument("--datasets", default="dev,30min", help="comma list of dev, 30min")
    ap.add_argument("--long-models", default=None,
                    help="models that also run the 30min set: all, none, or model labels "
                         "(default: all but the default Whisper)")
    ap.add_argument("--modes", default=",".join(MODES), help=f"comma list of {', '.join(MODES)}")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--run-timeout", type=float, default=3600.0, metavar="S",
                    help="a run still going after S seconds is killed and the benchmark stops (default 3600; 0: none)")
    ap.add_argument("--json", default=str(DEFAULT_JSON), metavar="PATH", help='results file ("" for none)')
    args = ap.parse_args(argv)

    split = lambda s: [x.strip() for x in s.split(",") if x.strip()]  # noqa: E731
    models = [m if m == "default" else (os.path.abspath(m) if os.path.exists(m) else m) for m in split(args.models)]
    datasets, modes = split(args.datasets), split(args.modes)
    if not set(datasets) <= {"dev", "30min"} or not datasets:
        ap.error("--datasets: dev, 30min")
    if not set(modes) <= set(MODES) or not modes:
        ap.error(f"--modes: {', '.join(MODES)}")
    if args.rounds < 1:
        ap.error("--rounds: at least 1")
    if not DEV_DIR.is_dir():
        ap.error(f"{DEV_DIR}: no dev clips (the shared folder next to the repository)")
    labels = {m: model_label(m) for m in models}
    if args.long_models is None:
        long_models = [m for m in models if m != "default"]
    elif args.long_models == "all":
        long_models = list(models)
    elif args.long_models == "none":
        long_models = []
    else:
        want = split(args.long_models)
        long_models = [m for m in models if labels[m] in want or m in want or Path(m).name in want
                       or (m == "default" and "default" in want)]
    if "ray" in modes:
        if importlib.util.find_spec("ray") is None:
            ap.error('--modes ray needs Ray Data: pip install "transcribe[ray]"')
    probe = subprocess.run([sys.executable, "-m", "transcribe", "batch", "--help"], cwd=REPO, capture_output=True,
                           text=True)
    if probe.returncode != 0:
        ap.error(f"`{sys.executable} -m transcribe batch --help` fails: {probe.stderr.strip()[-300:]}")

    started = time.strftime("%Y-%m-%d %H:%M:%S")
    commit = package_commit()
    load_start = os.getloadavg()
    cores = len(os.sched_getaffinity(0))
    results, tables = [], []
    t_all = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="batch-throughput-") as tmp:
        tmp = Path(tmp)
        data = make_datasets(datasets, tmp)
        for ds in datasets:
            for model in models:
                if ds == "30min" and model not in long_models:
                    continue
                d = data[ds]
                print(f"== {ds} ({d['inputs']} inputs, {d['audio_s']:.0f} s of audio), {labels[model]}",
                      file=sys.stderr, flush=True)
                runs = []
                for k in range(args.rounds):
                    order = modes if k % 2 == 0 else modes[::-1]  # no mode always first or last
                    for mode in order:
                        label = f"{ds}-{len(results)}-{mode}-r{k + 1}"
                        r = run_once(None if model == "default" else model, mode, d, tmp, label, args.run_timeout)
                        r["round"] = k + 1
                        runs.append(r)
                        note = f"; {len(r['left_behind'])} processes left behind, killed" if r["left_behind"] else ""
                        print(f"    round {k + 1} {mode:9s} {r['wall_s']:7.1f} s wall, {r['speed']:6.1f} audio s/s, "
                              f"peak RSS {r['peak_rss_mb']} MB ({r['peak_procs']} processes), model "
                              f"{r['model_s']:.1f} s (load average {os.getloadavg()[0]:.2f}){note}",
                              file=sys.stderr, flush=True)
                        for line in r["stderr"][:3]:
                            print(f"      stderr: {line[:160]}", file=sys.stderr, flush=True)
                summary = summarize(runs, modes)
                texts = compare_texts(runs)
                if not texts["identical"]:
                    e = texts["examples"][0]
                    print(f"WARNING: {ds}, {labels[model]}: {texts['differences']} transcripts differ between "
                          f"modes/rounds; e.g. {e['id']}: {e['ref_mode']} {e['ref']!r} vs {e['mode']} round "
                          f"{e['round']} {e['got']!r}", file=sys.stderr, flush=True)
                if not texts["repeats_identical"]:
                    print(f"WARNING: {ds}, {labels[model]}: the same clip came out differently under different ids "
                          f"({len(texts['repeat_differences'])}+ cases)", file=sys.stderr, flush=True)
                for r in runs:
                    del r["texts"]
                title = (f"{ds} ({d['inputs']} inputs, {d['audio_s']:.0f} s of audio), {labels[model]}, "
                         f"{args.rounds} round{'s' * (args.rounds > 1)}")
                text = table(summary, modes)
                notes = []
                if "best_mode" in summary:
                    notes.append(f"best {summary['best_mode']} {summary['best_x_bs1']:.2f}x bs1 (target >= "
                                 f"{TARGET_X_BS1}x: {'met' if summary['target_best_x_bs1_met'] else 'not met'})")
                if "ray_vs_best_local" in summary:
                    notes.append(f"ray {summary['ray_vs_best_local']:.2f}x the best local mode "
                                 f"({summary['best_local_mode']}; target >= {TARGET_RAY}: "
                                 f"{'met' if summary['target_ray_within_15pct_met'] else 'not met'})")
                notes.append("texts identical across modes and rounds" if texts["identical"]
                             else f"texts DIFFER ({texts['differences']} cases)")
                tables.append(f"### {title}\n\n{text}\n\n" + "; ".join(notes))
                results.append(dict(dataset=ds, inputs=d["inputs"], audio_s=round(d["audio_s"], 3),
                                    model=labels[model], model_path="default" if model == "default" else shown(model),
                                    summary=summary, texts=texts, runs=runs))
    total_s = time.perf_counter() - t_all
    header = (f"`transcribe batch` throughput at {commit}; {cpu_line()}, {cores} usable; "
              f"load average at start {load_start[0]:.2f}, at end {os.getloadavg()[0]:.2f}; {total_s / 60:.1f} min")
    print("\n" + header + "\n")
    print("\n\n".join(tables))
    if args.json:
        out = dict(started=started, package_commit=commit, **cpu_info(), cores=cores,
                   python=sys.version.split()[0], torch=version("torch"), ray=version("ray"),
                   rounds=args.rounds, modes={m: MODES[m] for m in modes}, total_s=round(total_s, 1),
                   loadavg_start=[round(x, 2) for x in load_start], loadavg_end=[round(x, 2) for x in os.getloadavg()],
                   targets=dict(best_x_bs1=TARGET_X_BS1, ray_vs_best_local=TARGET_RAY),
                   results=results, tables=tables)
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
        print(f"\nwritten {args.json}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # the run going on was killed with its Ray instance (run_once)
        print("\ninterrupted", file=sys.stderr)
        sys.exit(130)
