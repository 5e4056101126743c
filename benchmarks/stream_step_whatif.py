#!/usr/bin/env python
"""What a cache-aware chunk step could cost: the package's step against the cost of reading the weights.

Run from the repository root with the project's Python:

    python3 benchmarks/stream_step_whatif.py [--model parakeet_realtime_eou_120m-v1] [--chunk-ms 160] [--threads 1] [--rounds 5]

The model is built with random weights from `tests/configs/published/<model>.yaml` as in
`stream_chunk_cost.py` (a chunk size the config does not list is added to its lookaheads). Real
speech features (`speech_clip.py`, `--seconds`) are cut into the session's chunks; only steady
chunks (attention cache full) are timed: CPU time of the calling thread, median per round, best
round reported. Encoder only (the decoder costs about 1 ms a chunk, see stream_chunk_cost.py).

1. `cache_aware.stream_step` as it is, float32;
2. the same with the encoder's weights in bfloat16 (what `load_model(..., dtype="bfloat16")` gives);
3. floors, nothing but the matrices of the layers' linear layers and pointwise convolutions applied
   once to the chunk's rows: float32, bfloat16, and int8 dynamic quantization
   (`torch.ao.quantization.quantize_dynamic`). At one or two rows a step is bound by reading the
   weights from memory, so this is about the least a step of this model can cost with PyTorch's
   CPU kernels at that precision.
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="parakeet_realtime_eou_120m-v1")
    ap.add_argument("--chunk-ms", type=int, default=160)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=16.0)
    a = ap.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    import torch

    import stream_chunk_cost as scc
    import transcribe.runtime
    from machine import cpu_line
    from speech_clip import speech_clip
    from transcribe.parakeet import cache_aware
    from transcribe.nemo.live_features import LiveMelFeatures
    from transcribe.parakeet.model import ParakeetModel
    from transcribe.runtime import model_call

    torch.set_num_threads(a.threads)
    transcribe.runtime.tune_malloc()
    cfg, want, _ = scc.load_config(a.model, [a.chunk_ms])
    pcm, _ = speech_clip(a.seconds)
    print(cpu_line(), flush=True)
    print(f"{a.model}, {a.chunk_ms} ms chunks {want[a.chunk_ms]}, {a.threads} thread(s), best of {a.rounds}; "
          f"load {os.getloadavg()[0]:.2f}; package at {scc.git_state()}", flush=True)

    def step_ms(m) -> tuple[float, int]:
        sched = cache_aware.schedule(m.encoder, want[a.chunk_ms])
        chunks = cache_aware.Chunker(sched, m.preprocessor.n_mels).push(LiveMelFeatures(m.preprocessor).push(pcm))
        start = scc.steady_from(sched)
        best = math.inf
        dtype = next(m.encoder.parameters()).dtype
        for _ in range(a.rounds):
            cache = cache_aware.EncoderCache(m.encoder, sched, None, dtype)
            cpu = []
            with model_call(a.threads):
                for i, (f, d) in enumerate(chunks):
                    c0 = time.thread_time()
                    cache_aware.stream_step(m.encoder, f, cache, sched, drop_extra_pre_encoded=d)
                    if i >= start:
                        cpu.append(time.thread_time() - c0)
            best = min(best, 1000 * statistics.median(cpu))
        return best, len(chunks) - start

    m = ParakeetModel.random(cfg, seed=0)
    m.encoder.fold_batch_norm()
    f32_step, n = step_ms(m)
    print(f"  package step, float32                {f32_step:8.2f} ms CPU per chunk ({n} steady chunks)", flush=True)
    mb = ParakeetModel.random(cfg, seed=0, dtype=torch.bfloat16)
    mb.encoder.fold_batch_norm()
    bf_step, _ = step_ms(mb)
    del mb
    print(f"  package step, bfloat16 encoder       {bf_step:8.2f} ms CPU per chunk", flush=True)

    rows = cache_aware.schedule(m.encoder, want[a.chunk_ms]).valid_out_len
    mats = []
    for mod in m.encoder.layers.modules():
        if isinstance(mod, torch.nn.Linear):
            mats.append(mod)
        elif isinstance(mod, torch.nn.Conv1d) and mod.kernel_size == (1,):
            lin = torch.nn.Linear(mod.in_channels, mod.out_channels, bias=mod.bias is not None)
            with torch.no_grad():
                lin.weight.copy_(mod.weight[:, :, 0])
                if mod.bias is not None:
                    lin.bias.copy_(mod.bias)
            mats.append(lin)
    mbytes = sum(x.weight.numel() for x in mats) * 4 / 1e6

    def floor(mods, dtype=torch.float32) -> float:
        xs = {mm.in_features: torch.randn(1, rows, mm.in_features).to(dtype) for mm in mods}
        times = []
        with torch.inference_mode(), model_call(a.threads):
            for _ in range(max(3, a.rounds)):
                c0 = time.thread_time()
                for mm in mods:
                    mm(xs[mm.in_features])
                times.append(time.thread_time() - c0)
        return 1000 * min(times)

    f32 = floor(mats)
    bf = [torch.nn.Linear(x.in_features, x.out_features, bias=x.bias is not None).to(torch.bfloat16) for x in mats]
    fb16 = floor(bf, torch.bfloat16)
    del bf
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        q = torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(*mats), {torch.nn.Linear}, dtype=torch.qint8)
    fq = floor(list(q))
    print(f"  floor: the layers' {len(mats)} matrices ({mbytes:.0f} MB in float32) once on {rows} row(s):")
    print(f"    float32                            {f32:8.2f} ms CPU ({mbytes / f32:.1f} GB/s)")
    print(f"    bfloat16                           {fb16:8.2f} ms CPU")
    print(f"    int8 dynamic quantization          {fq:8.2f} ms CPU")
    print(f"  load average at the end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
