#!/usr/bin/env python
"""One matrix product of a decoder's sizes, every way this package can run it on this CPU: float32 and bfloat16
`F.linear`, `quant.Int8Linear` (int8 weights, activations quantized per row, `torch._int_mm`) and
`quant.W8Linear`'s two paths (int8 weights with bfloat16 activations through `torch._weight_int8pack_mm`, and the
bfloat16 copy of the weight it multiplies above `quant.W8_ROWS` rows), at 1 to 64 rows.

    python3 benchmarks/int8_linear_micro.py [--threads 2] [--rounds 30]

Prints best and median microseconds per call. What it is for: choosing `quant.W8_ROWS` and whether an int8 LM
runs W8Linear or Int8Linear on a kind of CPU (`llm.model.int8_compute`). Run it alone (`uptime` first).
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from machine import cpu_line  # benchmarks/

from transcribe.quant import Int8Linear, W8Linear


def timed(f, rounds: int) -> tuple[float, float]:
    for _ in range(3):
        f()
    ts = []
    for _ in range(rounds):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return min(ts) * 1e6, statistics.median(ts) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=30)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(cpu_line(), f"{args.threads} threads, torch {torch.__version__}")
    g = torch.Generator().manual_seed(0)
    for n, k in ((4096, 2048), (2048, 8192)):
        w = torch.randn(n, k, generator=g)
        wb = w.to(torch.bfloat16)
        i8 = Int8Linear(w, None)
        w8 = W8Linear(w, None)
        for m in (1, 4, 8, 16, 64):
            x = torch.randn(m, k, generator=g)
            xb = x.to(torch.bfloat16)
            rounds = args.rounds if m <= 16 else max(3, args.rounds // 5)
            cells = {
                "f32 linear": timed(lambda: F.linear(x, w), rounds),
                "bf16 linear": timed(lambda: F.linear(xb, wb), rounds),
                "Int8Linear": timed(lambda: i8(x), rounds),
                "int8pack (W8, bf16 x)": timed(lambda: torch._weight_int8pack_mm(xb, w8.weight_q, w8.weight_scale),
                                               rounds),
                "W8 bf16 copy": timed(lambda: F.linear(xb, w8.dequantized()), rounds),
            }
            print(f"[{n} x {k}] rows {m:3d}: " + "  ".join(f"{name} {b:.0f}/{md:.0f} us" for name, (b, md) in
                                                           cells.items()), flush=True)


if __name__ == "__main__":
    main()
