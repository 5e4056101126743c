#!/usr/bin/env python
"""`transcribe serve` under load: throughput and latency of concurrent clients, and what dynamic
batching buys over running requests one at a time.

Run from the repository root, alone on the machine (the clients share its cores with the server):

    python3 benchmarks/server_load.py [--seconds 60] [--model M] [--clients 1 4 8] [--threads N]
                                      [--json benchmarks/results/server_load.json]

Each configuration starts a fresh server (`python -m transcribe serve`, default model unless
--model) and, after a warm-up (every clip once, then one round at full concurrency), runs N client
threads for --seconds: each sends the clips of `../shared/audio/dev/` (the 37-utterance dev set)
one after another, starting at a different clip, as multipart uploads with `response_format=json`
(plain `http.client`, one request in flight per client, a new one when its answer came). A request
started before the end is counted when it completes. Reported per configuration: requests
completed, requests per second, audio seconds per second, p50 / p95 / max latency, the batches the
server ran (from /health) and the latency of `/health` probed every 200 ms meanwhile.

Configurations: `--max-batch 8` (the default) with 1, 4 and 8 clients, and `--max-batch 1` with 8
clients (no batching: the same lane, one request at a time). Figures:
- concurrency speed-up: rps(8 clients, batch 8) / rps(1 client, batch 8): 8 concurrent clients
  against the same 8 requests sent one after another (target: at least 2);
- batching speed-up: rps(8 clients, batch 8) / rps(8 clients, batch 1).
"""
from __future__ import annotations

import argparse
import http.client
import io
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from machine import cpu_info, cpu_line  # benchmarks/machine.py (this script's folder is on sys.path)

REPO = Path(__file__).resolve().parent.parent
DEV = REPO.parent / "shared" / "audio" / "dev"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def multipart(data: bytes, name: str) -> tuple[bytes, dict]:
    boundary = "benchmarkboundary7MA4YWxkTrZu0gW"
    out = io.BytesIO()
    out.write(f"--{boundary}\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper-1\r\n".encode())
    out.write(f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\n"
              f"Content-Type: audio/wav\r\n\r\n".encode())
    out.write(data + b"\r\n")
    out.write(f"--{boundary}--\r\n".encode())
    return out.getvalue(), {"Content-Type": f"multipart/form-data; boundary={boundary}"}


class Server:
    def __init__(self, model, max_batch: int, threads):
        self.port = free_port()
        args = [sys.executable, "-m", "transcribe", "serve", "--port", str(self.port), "--log-level", "warning",
                "--max-batch", str(max_batch)]
        if model:
            args += ["--model", model]
        if threads:
            args += ["--workers-threads", str(threads)]
        self.proc = subprocess.Popen(args, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"the server exited: {self.proc.stderr.read().decode()}")
            try:
                if self.get("/health")[0] == 200:
                    return
            except OSError:
                time.sleep(0.2)
        raise SystemExit("the server did not come up")

    def get(self, path: str):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request("GET", path)
            r = conn.getresponse()
            return r.status, r.read()
        finally:
            conn.close()

    def post(self, body: bytes, headers: dict):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        try:
            conn.request("POST", "/v1/audio/transcriptions", body=body, headers=headers)
            r = conn.getresponse()
            return r.status, r.read()
        finally:
            conn.close()

    def stats(self) -> dict:
        return json.loads(self.get("/health")[1])["stats"]

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def load_clips() -> list[tuple[str, bytes, dict, float]]:
    rows = [json.loads(line) for line in (DEV / "manifest.jsonl").read_text().splitlines() if line.strip()]
    out = []
    for r in rows:
        body, headers = multipart((DEV / r["audio"]).read_bytes(), r["audio"])
        out.append((r["audio"], body, headers, float(r["duration"])))
    return out


def run(server: Server, clips, clients: int, seconds: float) -> dict:
    latencies: list[float] = []
    audio = [0.0]
    failures: list = []
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds

    def client(k: int) -> None:
        i = k * (len(clips) // max(clients, 1))
        while time.monotonic() < stop_at:
            name, body, headers, dur = clips[i % len(clips)]
            i += 1
            t0 = time.monotonic()
            status, data = server.post(body, headers)
            dt = time.monotonic() - t0
            with lock:
                if status != 200:
                    failures.append((name, status, data[:200]))
                else:
                    latencies.append(dt)
                    audio[0] += dur

    health: list[float] = []
    probing = [True]

    def probe() -> None:
        while probing[0]:
            t0 = time.monotonic()
            server.get("/health")
            health.append(time.monotonic() - t0)
            time.sleep(0.2)

    before = server.stats()
    t0 = time.monotonic()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    prober = threading.Thread(target=probe)
    prober.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    probing[0] = False
    prober.join()
    after = server.stats()
    latencies.sort()
    health.sort()

    def pct(xs, q):
        return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")

    batches = after["batches"] - before["batches"]
    done = len(latencies)
    return {
        "clients": clients, "requests": done, "failures": len(failures), "wall_s": round(wall, 2),
        "rps": round(done / wall, 3), "audio_s_per_s": round(audio[0] / wall, 2),
        "p50_s": round(pct(latencies, 0.5), 3), "p95_s": round(pct(latencies, 0.95), 3),
        "max_s": round(latencies[-1], 3) if latencies else None,
        "mean_s": round(statistics.fmean(latencies), 3) if latencies else None,
        "batches": batches, "mean_batch": round(done / batches, 2) if batches else None,
        "largest_batch": after["largest_batch"],
        "health_p50_ms": round(1000 * pct(health, 0.5), 1), "health_p95_ms": round(1000 * pct(health, 0.95), 1),
        "health_max_ms": round(1000 * health[-1], 1) if health else None,
        "rss_mb": round(server.rss_mb(), 1),
    }


def warm(server: Server, clips, clients: int) -> None:
    for _, body, headers, _ in clips:
        server.post(body, headers)
    threads = [threading.Thread(target=lambda k=k: server.post(*clips[k % len(clips)][1:3])) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--model", default=None, help="default: the default model (Whisper tiny.en)")
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 4, 8])
    ap.add_argument("--threads", type=int, default=None, help="--workers-threads of the server")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    clips = load_clips()
    print(f"{len(clips)} clips, {sum(c[3] for c in clips):.0f} s of audio; load {os.getloadavg()[0]:.2f}",
          file=sys.stderr)
    rows = []
    plans = [(8, n) for n in args.clients] + [(1, max(args.clients))]
    for max_batch, clients in plans:
        server = Server(args.model, max_batch, args.threads)
        try:
            warm(server, clips, clients)
            row = {"max_batch": max_batch, **run(server, clips, clients, args.seconds)}
        finally:
            server.stop()
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)

    def rps(mb, n):
        return next((r["rps"] for r in rows if r["max_batch"] == mb and r["clients"] == n), None)

    top = max(args.clients)
    summary = {
        "concurrency_speedup": round(rps(8, top) / rps(8, 1), 2) if rps(8, 1) and rps(8, top) else None,
        "batching_speedup": round(rps(8, top) / rps(1, top), 2) if rps(1, top) and rps(8, top) else None,
    }
    print(cpu_line())
    print("| max batch | clients | requests | req/s | audio s/s | p50 s | p95 s | mean batch | /health p95 ms |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['max_batch']} | {r['clients']} | {r['requests']} | {r['rps']:.2f} | {r['audio_s_per_s']:.1f} | "
              f"{r['p50_s']:.2f} | {r['p95_s']:.2f} | {r['mean_batch']} | {r['health_p95_ms']} |")
    print(f"\n{top} concurrent clients vs one at a time: {summary['concurrency_speedup']}x; "
          f"batching (max batch 8 vs 1, {top} clients): {summary['batching_speedup']}x")
    if args.json:
        git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
        args.json.write_text(json.dumps({
            "command": " ".join(["python3", "benchmarks/server_load.py", *sys.argv[1:]]),
            "commit": git, **cpu_info(),
            "model": args.model or "tiny.en (default)", "seconds": args.seconds, "rows": rows, "summary": summary,
        }, indent=1) + "\n")


if __name__ == "__main__":
    main()
