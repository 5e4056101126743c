"""Kyutai STT's compute per 80 ms frame of a live session on the stt-1b-en_fr architecture (the smallest published
size) with random weights: does a stream keep up with real time on one core? Not run by the tests.

    python3 benchmarks/kyutai_chunk.py --threads 1 --frames 200 [--dtype float32|int8] [--json bench-out/kyutai_chunk.json]

It builds the model without a file (`KyutaiModel` on the published dimensions as the -trfs config.json spells them:
the LM 16 layers x 2048, 16 heads, gated MLP ffn_dim 11264, text vocabulary 8001, 32 codebooks of 2049 ids; Mimi's
encoder at transformers' MimiConfig defaults: SEANet 64 filters, strides 4 5 6 8, transformer 8 x 512 with a
250-frame window, 32 quantizers of 2048), float32, PyTorch's default initialization (only the shapes matter for
speed), then runs what `decode.Decoder` runs for each 80 ms of a stream, `--frames` times after a warm-up of 40:
one frame of 1920 samples through the codec's encoder (its convolution and attention caches carried) and one LM
position (its window cache). Prints and records each part's best / median / p90 in ms, the frame's median and the
real-time factor (80 ms / the median frame: above 1 keeps up), peak RSS. `--tiny` runs the committed tiny model's
dimensions instead (a smoke test of the script, seconds)."""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def stt_1b_config(tiny: bool):
    from transcribe.kyutai.config import KyutaiConfig, LMConfig, mimi_config, read_config

    if tiny:
        return read_config(REPO / "tests" / "models" / "kyutai" / "tiny")
    mimi = mimi_config({"model_type": "mimi", "frame_rate": 12.5}, "stt-1b")
    vocab, k, cbv = 8001, 32, 2049
    lm = LMConfig(vocab_size=vocab, hidden_size=2048, layers=16, heads=16, kv_heads=16, head_dim=128, ffn_dim=11264,
                  rms_norm_eps=1e-8, rope_theta=100000.0, sliding_window=375, num_codebooks=k,
                  codebook_vocab_size=cbv, audio_bos_token_id=2048, audio_pad_token_id=vocab + k * cbv)
    return KyutaiConfig(mimi=mimi, lm=lm, bos_token_id=vocab - 1, pad_token_id=3, eos_token_ids=(), prefix_s=1.0,
                        delay_s=0.5)


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--frames", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=40)
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--dtype", default="float32", choices=["float32", "int8"],
                    help="the LM's: int8 as load_model(dtype='int8') makes it (KyutaiLM.quantize_int8); the codec float32")
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    from transcribe.kyutai.decode import Decoder
    from transcribe.kyutai.model import KyutaiModel

    cfg = stt_1b_config(args.tiny)
    t0 = time.perf_counter()
    torch.manual_seed(0)
    with torch.no_grad():
        model = KyutaiModel(cfg).eval()
        for rvq in (model.mimi.semantic, model.mimi.acoustic):
            rvq.codebooks.normal_()
    if args.dtype == "int8":
        model.lm.quantize_int8()
    build_s = time.perf_counter() - t0
    dec = Decoder(model)
    rng = np.random.default_rng(0)
    frame = cfg.mimi.frame_size
    codec_ms, lm_ms = [], []
    with torch.inference_mode():
        dec.run(0)  # position 0 reads no audio
        for i in range(args.warmup + args.frames):
            pcm = (0.05 * rng.standard_normal(frame)).astype(np.float32)
            a = time.perf_counter()
            dec.push(pcm)
            b = time.perf_counter()
            dec.run()
            c = time.perf_counter()
            if i >= args.warmup:
                codec_ms.append(1000 * (b - a))
                lm_ms.append(1000 * (c - b))
    total = [x + y for x, y in zip(codec_ms, lm_ms)]
    med = statistics.median(total)

    def stats(xs):
        return {"best_ms": round(min(xs), 2), "median_ms": round(statistics.median(xs), 2),
                "p90_ms": round(pct(xs, 0.9), 2)}

    out = {"model": "tiny" if args.tiny else f"stt-1b-en_fr architecture, random weights, LM {args.dtype}",
           "threads": args.threads, "frames": args.frames, "warmup": args.warmup, "build_s": round(build_s, 1),
           "codec": stats(codec_ms), "lm": stats(lm_ms), "frame": stats(total),
           "realtime_factor": round(1000 * cfg.frame_s / med, 2),
           "lm_cache_positions": [kv[0].shape[2] for kv in dec.cache["kv"]][:1],
           "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
           "torch": torch.__version__}
    print(json.dumps(out, indent=2))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
