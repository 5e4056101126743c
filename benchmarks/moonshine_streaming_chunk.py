"""Moonshine Streaming's live cost on the tiny architecture (moonshine-streaming-tiny: encoder and decoder 6 x 320,
vocabulary 32768) with random weights, on ONE core by default: does a live session keep up with real time? Not run
by the tests.

    python3 benchmarks/moonshine_streaming_chunk.py [--threads 1] [--seconds 60] [--chunk-ms 80]
                                                     [--size tiny|small|medium] [--dtype float32|int8]
                                                     [--json bench-out/ms_chunk.json]

It builds the model with random weights (no file: the network of transcribe/moonshine_streaming/model.py from the
published shapes, benchmarks/make_moonshine_streaming_model.py's), then runs a live session
(`MoonshineStreamingSession`, the defaults: a partial decode every 240 ms of new audio, segments of 20 s) on
`--seconds` of real speech (benchmarks/speech_clip.py) fed in `--chunk-ms` pieces, timing every feed. A random
model never emits EOS, so its decodes would run to the bound (6.5 tokens a second of audio); here each decode
generates what English speech has instead, `--tokens-per-s` (default 3) a second of the audio it reads. Prints
and records: the feeds' best / median / p90 / max in ms, the compute per second of audio (all feeds plus the
final) and the real-time factor (audio seconds / compute seconds: above 1 keeps up), peak RSS. `--seconds 5` is a
smoke test (seconds)."""
from __future__ import annotations

import argparse
import json
import math
import resource
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))


def random_asr(size: str, dtype: str = "float32"):
    from make_moonshine_streaming_model import SIZES, windows
    from transcribe.moonshine_streaming.config import parse_config
    from transcribe.moonshine_streaming.model import MoonshineStreamingModel
    from transcribe.moonshine_streaming.recognizer import MoonshineStreamingASR, finish
    from transcribe.moonshine_streaming.tokenizer import load_tokenizer

    (el, ew, eh, ed), (dl, dw, dh) = SIZES[size]
    cfg = parse_config({
        "model_type": "moonshine_streaming",
        "encoder_config": dict(hidden_size=ew, intermediate_size=4 * ew, num_hidden_layers=el, num_attention_heads=eh,
                               head_dim=ed, hidden_act="gelu", sliding_windows=windows(el)),
        "vocab_size": 32768, "hidden_size": dw, "intermediate_size": 4 * dw, "num_hidden_layers": dl,
        "num_attention_heads": dh, "head_dim": dw // dh, "hidden_act": "silu", "max_position_embeddings": 4096},
        {}, {})
    torch.manual_seed(0)
    model = MoonshineStreamingModel(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("gamma"):
                p.zero_()
            elif p.dim() > 1:
                p.normal_(0.0, 0.02)
    tok = load_tokenizer(REPO / "tests" / "models" / "moonshine_streaming" / "tiny")
    model = finish(model, f"random-{size}", "cpu", {"float32": None, "int8": torch.int8}[dtype])
    return MoonshineStreamingASR(model, tok, f"random-{size}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--chunk-ms", type=float, default=80.0)
    ap.add_argument("--tokens-per-s", type=float, default=3.0)
    ap.add_argument("--size", default="tiny", choices=["tiny", "small", "medium"])
    ap.add_argument("--dtype", default="float32", choices=["float32", "int8"])
    ap.add_argument("--json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from machine import cpu_info, cpu_line
    from speech_clip import speech_clip
    from transcribe.moonshine_streaming.streaming import MoonshineStreamingSession

    rate = args.tokens_per_s

    class Session(MoonshineStreamingSession):
        def _bound(self, samples: int) -> int:  # as many tokens as speech has (random weights never stop)
            return max(1, math.ceil(rate * samples / 16000))

    asr = random_asr(args.size, args.dtype)
    pcm, _ = speech_clip(args.seconds)
    s = Session(asr)
    chunk = int(round(args.chunk_ms * 16))
    feeds = []
    with torch.inference_mode():
        for a in range(0, len(pcm), chunk):
            t = time.perf_counter()
            s.feed(pcm[a:a + chunk])
            feeds.append(1000 * (time.perf_counter() - t))
            s.take_new_text()
            s.drain()
        t = time.perf_counter()
        s.finalize()
        final_ms = 1000 * (time.perf_counter() - t)
    total_s = (sum(feeds) + final_ms) / 1000
    ordered = sorted(feeds)
    rec = {"cpu": cpu_info(), "threads": args.threads, "size": args.size, "dtype": args.dtype, "seconds": args.seconds,
           "chunk_ms": args.chunk_ms, "tokens_per_s": rate, "partial_decodes": s.decodes,
           "feed_ms": {"best": ordered[0], "median": statistics.median(feeds),
                       "p90": ordered[int(0.9 * (len(ordered) - 1))], "max": ordered[-1]},
           "final_ms": final_ms, "compute_s_per_audio_s": total_s / args.seconds,
           "realtime_factor": args.seconds / total_s,
           "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    print(cpu_line())
    print(json.dumps({k: round(v, 1) for k, v in rec["feed_ms"].items()}), f"final {final_ms:.0f} ms,",
          f"{s.decodes} partial decodes, real-time factor {rec['realtime_factor']:.2f} (>1 keeps up),",
          f"peak RSS {rec['peak_rss_mb']:.0f} MB")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(rec, indent=1) + "\n")


if __name__ == "__main__":
    main()
