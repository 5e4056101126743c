#!/usr/bin/env python
"""Long stream: hours of real speech through one cache-aware streaming session; cost per chunk and memory over time.

Run from the repository root with the project's Python:

    python3 benchmarks/stream_long.py [--hours 2] [--att-context 70,13] [--threads 1] [--json bench-out/stream_long.json]

The stream: the utterances of `../shared/audio/dev/manifest.jsonl` in manifest order, each followed
by 0.5 to 2 s of silence (uniform, fixed seed), looped until `--hours` of audio. It is generated
piece by piece (one utterance read from disk at a time), never held whole, and fed in `--piece-ms`
pieces (default 100 ms) to one `asr.stream(att_context_size=...)` session of `--model` (default:
the tiny cache-aware TDT `../shared/models/parakeet-tiny/tiny-tdt-streaming-random.nemo`). After
every feed the client drains as a live client would: `take_new_text()`, `take_new_tokens()`,
`drain_words()`, `drain_events()` (only counts are kept).

Measured:
- per model chunk: the wall time and the calling thread's CPU time (`time.thread_time`) of the
  session's chunk step (`CacheAwareSession._run`, wrapped on the instance: encoder step +
  projection + greedy decoding + committing the tokens, text and words), kept for every chunk in
  two compact arrays (16 bytes a chunk). With 1 thread PyTorch computes in the calling thread, so
  the CPU time is the step's own work, and it does not count the time another process holds the
  core: on a shared machine it shows a trend that the wall time hides in noise;
- per feed: the wall time of `feed()` plus the four drains (the real-time factor is their sum over
  the audio's duration);
- RSS (VmRSS from /proc/self/status, or psutil's where installed) every `--sample-s` seconds of audio;
- at 10 % and at the end (before `finalize()`): the sizes of the session's containers (lists, arrays, deques, strings,
  tensors, one level into its helper objects), to see what grows.

Reported: median time (wall and CPU) per chunk over the first 10 % and the last 10 % of the chunks
and their ratio (target <= 1.1), RSS at 10 % and at the end and the growth (target <= 20 MB), audio hours, chunks,
real-time factor, and a time line (median chunk time and RSS per 5 % of the stream) in the JSON.
`--tracemalloc` also traces Python allocations (slower) and prints the top growths between 10 %
and the end. The default model path is relative to the repository root; paths given on the
command line are relative to the working directory.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from array import array
from pathlib import Path

from machine import cpu_info, cpu_line  # benchmarks/machine.py (this script's folder is on sys.path)

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
DEFAULT_MODEL = "../shared/models/parakeet-tiny/tiny-tdt-streaming-random.nemo"  # relative to the repository
AUDIO_DIR = "../shared/audio"
SAMPLE_RATE = 16000


def rss_mb() -> float:
    """Resident set size of this process in MB (10^6 bytes)."""
    try:
        import psutil

        return psutil.Process().memory_info().rss / 1e6
    except ImportError:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024 / 1e6
    return float("nan")


def rss_source() -> str:
    try:
        import psutil

        return f"psutil {psutil.__version__}"
    except ImportError:
        return "/proc/self/status VmRSS"


class SpeechStream:
    """The looped dev set with pauses, `total` samples in all, handed out in pieces of `piece`
    samples (the last may be shorter). Holds one utterance at a time."""

    def __init__(self, audio_dir: Path, total: int, piece: int, seed: int = 10,
                 pause_s: tuple[float, float] = (0.5, 2.0)):
        import numpy as np

        self.dev = Path(audio_dir) / "dev"
        self.rows = [json.loads(line) for line in (self.dev / "manifest.jsonl").read_text().splitlines()
                     if line.strip()]
        self.total = int(total)
        self.piece = int(piece)
        self.rng = np.random.default_rng(seed)
        self.pause_s = pause_s
        self.utterances = 0
        self.speech_samples = 0

    def _segments(self):
        import numpy as np
        import soundfile as sf

        i = 0
        while True:
            row = self.rows[i % len(self.rows)]
            x, sr = sf.read(self.dev / row["audio"], dtype="float32", always_2d=True)
            if sr != SAMPLE_RATE:
                raise SystemExit(f"{row['audio']}: {sr} Hz, expected {SAMPLE_RATE}")
            self.utterances += 1
            self.speech_samples += x.shape[0]
            yield np.ascontiguousarray(x.mean(axis=1), dtype=np.float32)
            gap = int(round(self.rng.uniform(*self.pause_s) * SAMPLE_RATE))
            yield np.zeros(gap, np.float32)
            i += 1

    def __iter__(self):
        import numpy as np

        left = self.total
        buf = np.zeros(0, np.float32)
        for seg in self._segments():
            buf = np.concatenate([buf, seg]) if buf.size else seg
            while buf.size >= self.piece and left > 0:
                n = min(self.piece, left)
                yield buf[:n].copy()
                buf = buf[n:]
                left -= n
            if left <= 0:
                return
            if left < self.piece and buf.size >= left:
                yield buf[:left].copy()
                return


def short_path(path: str) -> str:
    """A source path without this machine's prefix: relative to the repository, or from site-packages."""
    if path.startswith(str(REPO) + os.sep):
        return path[len(str(REPO)) + 1:]
    i = path.find("site-packages" + os.sep)
    return path[i:] if i >= 0 else os.path.basename(path)


def git_state() -> str:
    """HEAD's short hash, with '+dirty' when the package's files differ from it."""
    import subprocess

    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "transcribe"], cwd=REPO, capture_output=True,
                               text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def p10(values) -> float:
    return statistics.quantiles(values, n=10)[0] if len(values) > 1 else values[0]


def container_sizes(session) -> dict[str, object]:
    """len() of the lists, arrays, deques, dicts and strings in the session and one level into its
    helper objects; shapes of its tensors."""
    import torch

    out: dict[str, object] = {}

    def visit(prefix: str, obj, depth: int) -> None:
        for k, v in sorted(vars(obj).items()):
            name = f"{prefix}{k}"
            if isinstance(v, torch.Tensor):
                out[name] = list(v.shape)
            elif isinstance(v, (list, tuple, array, dict, set, frozenset, str, bytes)) or \
                    type(v).__name__ == "deque":
                out[name] = len(v)
                if isinstance(v, (list, tuple)) and v and all(isinstance(e, torch.Tensor) for e in v):
                    out[name + "[*].numel"] = sum(int(e.numel()) for e in v)
            elif depth > 0 and hasattr(v, "__dict__") and not callable(v) and \
                    type(v).__module__.startswith(("transcribe", "__main__")) and k not in ("_asr",):
                visit(name + ".", v, depth - 1)

    visit("", session, 1)
    return out


def grown(a: dict, b: dict) -> dict[str, list]:
    """Entries whose size differs between two container_sizes() snapshots: name -> [at a, at b]."""
    return {k: [a.get(k), b.get(k)] for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help=f"a cache-aware .nemo (default {DEFAULT_MODEL}, relative to the repository)")
    ap.add_argument("--hours", type=float, default=2.0)
    ap.add_argument("--att-context", default=None,
                    help="left,right: one of the model's lookaheads (default: the model's first)")
    ap.add_argument("--piece-ms", type=float, default=100.0, help="audio per feed() call (default 100)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--sample-s", type=float, default=60.0, help="audio seconds between RSS samples (default 60)")
    ap.add_argument("--probe-every", type=float, default=1.0,
                    help="run the speed probe every this %% of the stream (default 1; 0: never)")
    ap.add_argument("--probe-s", type=float, default=10.0, help="audio seconds of a probe (default 10)")
    ap.add_argument("--tracemalloc", action="store_true", help="trace Python allocations (slower)")
    ap.add_argument("--json", help="write the results here (e.g. bench-out/stream_long.json)")
    a = ap.parse_args()
    a.model = os.path.abspath(a.model) if a.model else str(REPO / DEFAULT_MODEL)
    if not os.path.exists(a.model):
        ap.error(f"{a.model}: no such model")
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    att = [int(v) for v in a.att_context.split(",")] if a.att_context else None

    import torch

    import transcribe
    import transcribe.runtime

    torch.set_num_threads(a.threads)
    transcribe.runtime.tune_malloc()  # as the command line and the other benchmarks do
    asr = transcribe.load_model(a.model, threads=a.threads)
    session = asr.stream(att_context_size=att)
    sched = session.schedule
    chunk_ms = session.latency.chunk_ms
    total = int(round(a.hours * 3600 * SAMPLE_RATE))
    piece = int(round(a.piece_ms * SAMPLE_RATE / 1000))
    expected_chunks = total / SAMPLE_RATE / (chunk_ms / 1000)

    chunk_times = array("d")  # wall seconds per chunk step, every chunk
    chunk_cpu = array("d")  # CPU seconds of this thread per chunk step
    run = session._run

    def timed_run(*args, **kw):
        c0 = time.thread_time()
        t0 = time.perf_counter()
        try:
            return run(*args, **kw)
        finally:
            chunk_times.append(time.perf_counter() - t0)
            chunk_cpu.append(time.thread_time() - c0)

    session._run = timed_run  # the instance only; the package is unchanged

    # The machine's speed now: a fresh session of the same model over the same first seconds of the
    # stream, its median chunk step. Run between feeds every --probe-every % of the stream; the long
    # session's chunk times divided by the probes' of the same stretch cancel what another process
    # does to the machine's speed (SMT siblings, memory bandwidth, frequency), and leave what the
    # long session's own state costs.
    probe_pcm = next(iter(SpeechStream(REPO / AUDIO_DIR, int(a.probe_s * SAMPLE_RATE), int(a.probe_s * SAMPLE_RATE))))

    def probe() -> float:
        ps = asr.stream(att_context_size=att)
        pt = array("d")
        prun = ps._run

        def ptimed(*args, **kw):
            t0 = time.perf_counter()
            try:
                return prun(*args, **kw)
            finally:
                pt.append(time.perf_counter() - t0)

        ps._run = ptimed
        for i in range(0, probe_pcm.size, piece):
            ps.feed(probe_pcm[i:i + piece])
            ps.take_new_text(), ps.take_new_tokens(), ps.drain_words(), ps.drain_events()
        return statistics.median(pt) * 1000

    probes: list[tuple[int, float]] = []  # (chunks of the long session so far, probe ms)
    probe_step = max(1, int(total * a.probe_every / 100))
    next_probe = 0

    if a.tracemalloc:
        import tracemalloc

        tracemalloc.start(8)
    print(cpu_line(), flush=True)
    print(f"model {Path(a.model).name}, att_context_size {list(sched.att_context_size)}, chunk {chunk_ms:.0f} ms, "
          f"{a.hours:g} h in {a.piece_ms:g} ms pieces, {a.threads} thread(s); load {os.getloadavg()[0]:.2f}",
          flush=True)
    load_start = os.getloadavg()
    stream = SpeechStream(REPO / AUDIO_DIR, total, piece)
    fed = 0
    feed_total = 0.0
    next_sample = 0
    rss_line: list[tuple[float, float, int]] = []  # (audio s, RSS MB, chunks so far)
    counts = {"text_chars": 0, "newlines": 0, "tokens": 0, "words": 0, "events": 0}
    mark10 = total // 10
    at10 = None
    snap10 = None
    last_text = ""
    wall0 = time.perf_counter()
    rss_start = rss_mb()
    for pcm in stream:
        t0 = time.perf_counter()
        session.feed(pcm)
        text = session.take_new_text()
        toks = session.take_new_tokens()
        words = session.drain_words()
        events = session.drain_events()
        feed_total += time.perf_counter() - t0
        fed += pcm.size
        if text:
            counts["text_chars"] += len(text)
            counts["newlines"] += text.count("\n")
            last_text = (last_text + text)[-120:]
        counts["tokens"] += len(toks)
        counts["words"] += len(words)
        counts["events"] += len(events)
        if fed >= next_sample:
            rss_line.append((fed / SAMPLE_RATE, rss_mb(), len(chunk_times)))
            next_sample += int(a.sample_s * SAMPLE_RATE)
            if len(rss_line) % 10 == 1:
                print(f"  {fed / SAMPLE_RATE / 3600:6.3f} h  chunks {len(chunk_times):6d}  RSS {rss_line[-1][1]:7.1f} MB  "
                      f"last chunk {1000 * (chunk_times[-1] if chunk_times else 0):6.2f} ms", flush=True)
        if a.probe_every > 0 and fed >= next_probe:
            probes.append((len(chunk_times), probe()))
            next_probe += probe_step
        if at10 is None and fed >= mark10:
            at10 = {"audio_s": fed / SAMPLE_RATE, "rss_mb": rss_mb(), "chunks": len(chunk_times),
                    "sizes": container_sizes(session)}
            if a.tracemalloc:
                snap10 = tracemalloc.take_snapshot()
    if a.probe_every > 0:
        probes.append((len(chunk_times), probe()))
    before_final = container_sizes(session)  # the end of the stream, before finalize() flushes
    rss_before_final = rss_mb()
    t0 = time.perf_counter()
    session.finalize()
    tail = [session.take_new_text(), session.take_new_tokens(), session.drain_words(), session.drain_events()]
    feed_total += time.perf_counter() - t0
    counts["tokens"] += len(tail[1])
    counts["words"] += len(tail[2])
    counts["events"] += len(tail[3])
    wall = time.perf_counter() - wall0
    end = {"audio_s": fed / SAMPLE_RATE, "rss_mb": rss_before_final, "chunks": len(chunk_times),
           "sizes": before_final}
    rss_final = rss_mb()
    rss_line.append((fed / SAMPLE_RATE, end["rss_mb"], len(chunk_times)))
    load_end = os.getloadavg()

    growth_top = []
    if a.tracemalloc and snap10 is not None:
        snap_end = tracemalloc.take_snapshot()
        for st in snap_end.compare_to(snap10, "traceback")[:10]:
            growth_top.append({"size_diff_kb": round(st.size_diff / 1024, 1), "count_diff": st.count_diff,
                               "where": [f"{short_path(fr.filename)}:{fr.lineno}"
                                         for fr in reversed(list(st.traceback))][:5]})  # newest first
        tracemalloc.stop()

    n = len(chunk_times)
    k = max(1, n // 10)
    first = statistics.median(chunk_times[:k]) * 1000
    last = statistics.median(chunk_times[n - k:]) * 1000
    ratio = last / first
    first_cpu = statistics.median(chunk_cpu[:k]) * 1000
    last_cpu = statistics.median(chunk_cpu[n - k:]) * 1000
    ratio_cpu = last_cpu / first_cpu
    # The low tail: another process's load only ever adds time, so the 10th percentile of a window
    # is the step's own cost more closely than its median on a shared machine.
    first_p10 = p10(chunk_times[:k]) * 1000
    last_p10 = p10(chunk_times[n - k:]) * 1000
    probe_first = [ms for c, ms in probes if c <= k]
    probe_last = [ms for c, ms in probes if c >= n - k]
    if probe_first and probe_last:  # (none with --probe-every 0)
        pf, pl = statistics.median(probe_first), statistics.median(probe_last)
        ratio_norm = ratio / (pl / pf)
    else:
        pf = pl = ratio_norm = float("nan")
    audio_s = fed / SAMPLE_RATE
    growth = end["rss_mb"] - at10["rss_mb"]
    # a time line: per 5 % of the chunks, the median chunk time; RSS at the nearest sample
    line = []
    for j in range(20):
        lo, hi = j * n // 20, (j + 1) * n // 20
        if hi <= lo:
            continue
        rss_at = next((r for s, r, c in rss_line if c >= hi), rss_line[-1][1])
        pr = [ms for c, ms in probes if lo <= c <= hi]
        line.append({"chunks": [lo, hi], "audio_h": round(hi * chunk_ms / 1000 / 3600, 4),
                     "median_ms": round(statistics.median(chunk_times[lo:hi]) * 1000, 4),
                     "median_cpu_ms": round(statistics.median(chunk_cpu[lo:hi]) * 1000, 4),
                     "p10_ms": round(p10(chunk_times[lo:hi]) * 1000, 4),
                     "probe_ms": round(statistics.median(pr), 4) if pr else None,
                     "rss_mb": round(rss_at, 1)})
    res = {
        "model": Path(a.model).name,
        "att_context_size": list(sched.att_context_size),
        "chunk_ms": chunk_ms,
        "piece_ms": a.piece_ms,
        "threads": a.threads,
        **cpu_info(),
        "audio_hours": audio_s / 3600,
        "speech_hours": stream.speech_samples / SAMPLE_RATE / 3600,
        "utterances": stream.utterances,
        "chunks": n,
        "expected_chunks": round(expected_chunks, 1),
        "median_chunk_ms_first10": first,
        "median_chunk_ms_last10": last,
        "ratio_last_first": ratio,
        "median_chunk_cpu_ms_first10": first_cpu,
        "median_chunk_cpu_ms_last10": last_cpu,
        "ratio_cpu_last_first": ratio_cpu,
        "probe_seconds": a.probe_s,
        "probe_ms_first10": pf,
        "probe_ms_last10": pl,
        "ratio_probe_last_first": pl / pf,
        "ratio_normalized": ratio_norm,
        "probes": [[c, round(ms, 4)] for c, ms in probes],
        "p10_chunk_ms_first10": first_p10,
        "p10_chunk_ms_last10": last_p10,
        "ratio_p10_last_first": last_p10 / first_p10,
        "p90_chunk_ms_first10": statistics.quantiles(chunk_times[:k], n=10)[-1] * 1000 if k > 1 else first,
        "p90_chunk_ms_last10": statistics.quantiles(chunk_times[n - k:], n=10)[-1] * 1000 if k > 1 else last,
        "rss_mb_start": rss_start,
        "rss_mb_at10": at10["rss_mb"],
        "rss_mb_end": end["rss_mb"],
        "rss_mb_after_finalize": rss_final,
        "rss_growth_mb": growth,
        "rss_source": rss_source(),
        "feed_seconds": feed_total,
        "rtf": feed_total / audio_s,
        "chunk_seconds": sum(chunk_times),
        "wall_seconds": wall,
        "outputs": counts,
        "last_text": last_text,
        "sizes_grown_10_to_end": grown(at10["sizes"], end["sizes"]),
        "sizes_end": end["sizes"],
        "sizes_after_finalize": container_sizes(session),
        "tracemalloc_top_growth": growth_top,
        "timeline": line,
        "loadavg_start": load_start,
        "loadavg_end": load_end,
        "targets": {"ratio_max": 1.1, "rss_growth_mb_max": 20.0},
        "torch": torch.__version__,
        "commit": git_state(),
    }
    print()
    print(f"audio {audio_s / 3600:.3f} h ({stream.utterances} utterances, {res['speech_hours']:.3f} h of speech), "
          f"{n} chunks of {chunk_ms:.0f} ms, {a.threads} thread(s)")
    print(f"median time per chunk: first 10 % {first:.3f} ms, last 10 % {last:.3f} ms, ratio {ratio:.3f} "
          f"(target <= 1.1: {'ok' if ratio <= 1.1 else 'MISSED'})")
    print(f"median CPU time per chunk (this thread): first 10 % {first_cpu:.3f} ms, last 10 % {last_cpu:.3f} ms, "
          f"ratio {ratio_cpu:.3f} (target <= 1.1: {'ok' if ratio_cpu <= 1.1 else 'MISSED'})")
    print(f"10th percentile of the time per chunk: first 10 % {first_p10:.3f} ms, last 10 % {last_p10:.3f} ms, "
          f"ratio {last_p10 / first_p10:.3f}")
    print(f"probe (a fresh session over the first {a.probe_s:g} s, median chunk step): first 10 % {pf:.3f} ms, "
          f"last 10 % {pl:.3f} ms, ratio {pl / pf:.3f}; the long session's ratio over the probes' "
          f"{ratio_norm:.3f} (target <= 1.1: {'ok' if ratio_norm <= 1.1 else 'MISSED'})")
    print(f"RSS: start {rss_start:.1f} MB, at 10 % {at10['rss_mb']:.1f} MB, end {end['rss_mb']:.1f} MB, "
          f"growth {growth:+.1f} MB (target <= 20 MB: {'ok' if growth <= 20 else 'MISSED'})")
    print(f"real-time factor {res['rtf']:.4f} (feed + drains {feed_total:.1f} s, of which chunk steps "
          f"{res['chunk_seconds']:.1f} s; wall {wall:.1f} s)")
    print(f"outputs: {counts}")
    print(f"session containers that changed size from 10 % to the end (before finalize): "
          f"{res['sizes_grown_10_to_end']}")
    for g in growth_top:
        print(f"  tracemalloc {g['size_diff_kb']:+.1f} KiB ({g['count_diff']:+d} blocks) allocated at "
              f"{' <- '.join(g['where'])}")
    print(f"load average: start {load_start[0]:.2f}, end {load_end[0]:.2f}")
    if a.json:
        path = Path(a.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(res, indent=1) + "\n")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
