"""Voxtral Realtime's compute per 80 ms step on the full-size architecture (Voxtral-Mini-4B-Realtime-2602: encoder
32 x 1280, LM 26 x 3072, GQA 32/8, vocabulary 131072) with random weights: does a live session keep up with real
time on this CPU? Not run by the tests.

    python3 benchmarks/voxtral_realtime_chunk.py --threads 2 --dtype int8 --steps 100 [--json bench-out/vr.json]

It builds the model with random weights (bfloat16 normal(0, 0.02), no file: `VoxtralRealtimeModel.build`; int8 as
`load_model(dtype="int8")` makes it; about 9 GB while it is built, 4.5 GB after for int8), then runs a session's
work without the front end's waiting: the prompt's step (39 positions: 312 mel frames through the stem, 156
encoder frames, the LM's prefill), then `--steps` single steps (8 mel frames -> 4 encoder frames -> one audio
embedding -> one LM position, as `decode.LiveDecoder` runs each 80 ms of a stream), timing each. Prints and
records: the prompt's time, each step's best / median / p90 in ms, and the real-time factor of a step (80 ms / the
median step: above 1 keeps up), the encoder's and the LM's shares of a step, peak RSS. `--tiny` runs the committed
tiny model's dimensions instead (a smoke test of the script, seconds)."""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))


def published_config(tiny: bool):
    from transcribe.llm.config import LMConfig
    from transcribe.voxtral_realtime.config import (EncoderConfig, FeatureConfig, StreamLayout,
                                                    VoxtralRealtimeConfig, read_config)

    if tiny:
        return read_config(REPO / "tests" / "models" / "voxtral_realtime" / "tiny")
    enc = EncoderConfig(hidden=1280, ffn=5120, layers=32, heads=32, head_dim=64, n_mels=128, eps=1e-5,
                        rope_theta=1e6, window=750)
    lm = LMConfig(model_type="mistral", vocab_size=131072, hidden_size=3072, intermediate_size=9216, num_layers=26,
                  num_heads=32, num_kv_heads=8, head_dim=128, rms_norm_eps=1e-5, rope_theta=1e6,
                  max_position_embeddings=131072, tie_word_embeddings=True)
    layout = StreamLayout(sample_rate=16000, frame_rate=12.5, hop=160, window=400, n_mels=128, delay_ms=480.0,
                          left_pad_tokens=32)
    return VoxtralRealtimeConfig(encoder=enc, lm=lm, lm_window=8192, features=FeatureConfig(), layout=layout,
                                 downsample=4, frames_per_token=8, default_delay_tokens=6, bos_id=1, eos_ids=(2,),
                                 pad_id=32)


def random_model(cfg, dtype: str):
    from transcribe.llm.model import int8_compute
    from transcribe.voxtral_realtime.decoder import TextModel
    from transcribe.voxtral_realtime.encoder import AudioEncoder, Projector
    from transcribe.voxtral_realtime.model import VoxtralRealtimeModel

    g = torch.Generator().manual_seed(0)
    with torch.device("meta"):
        parts = {"encoder": AudioEncoder(cfg.encoder),
                 "projector": Projector(cfg.encoder, cfg.downsample, cfg.lm.hidden_size),
                 "lm": TextModel(cfg.lm, cfg.lm_window)}
    tensors = {}
    for part, module in parts.items():
        tensors[part] = {}
        for name, p in module.named_parameters():
            t = torch.empty(p.shape, dtype=torch.bfloat16)
            if name.endswith("norm.weight") or "layernorm" in name:
                t.fill_(1.0)
            else:
                t.normal_(0.0, 0.02, generator=g)
            tensors[part][name] = t
    int8 = int8_compute("cpu") if dtype == "int8" else None
    work = {"int8": torch.float32, "bfloat16": torch.bfloat16, "float32": torch.float32}[dtype]
    model = VoxtralRealtimeModel.build(cfg, tensors, "<random>", work, int8)
    return model.eval()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", choices=["int8", "bfloat16", "float32"], default="int8")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from machine import cpu_info, cpu_line
    from transcribe.voxtral_realtime.decode import Run

    cfg = published_config(args.tiny)
    t0 = time.perf_counter()
    model = random_model(cfg, args.dtype)
    built_s = time.perf_counter() - t0
    prompt = [cfg.bos_id] + [32] * (cfg.layout.left_pad_tokens + cfg.default_delay_tokens)
    run = Run(model, prompt, cfg.default_delay_tokens, ())
    mel = torch.randn(cfg.features.n_mels, 8 * (len(prompt) + args.steps)) * 0.3
    with torch.inference_mode():
        t = time.perf_counter()
        rows = run.audio_rows(mel[:, :8 * len(prompt)])
        run.prefill(rows)
        prompt_ms = 1000 * (time.perf_counter() - t)
        steps, enc, lm = [], [], []
        for i in range(args.steps):
            a = 8 * (len(prompt) + i)
            t = time.perf_counter()
            row = run.audio_rows(mel[:, a:a + 8])[0]
            t1 = time.perf_counter()
            run.step(row)
            t2 = time.perf_counter()
            steps.append(1000 * (t2 - t))
            enc.append(1000 * (t1 - t))
            lm.append(1000 * (t2 - t1))
    med = statistics.median(steps)
    rec = {"cpu": cpu_info(), "threads": args.threads, "dtype": args.dtype, "tiny": args.tiny, "built_s": built_s,
           "prompt_ms": prompt_ms, "step_ms": {"best": min(steps), "median": med,
                                               "p90": sorted(steps)[int(0.9 * (len(steps) - 1))]},
           "encoder_ms_median": statistics.median(enc), "lm_ms_median": statistics.median(lm),
           "realtime_factor": 80.0 / med,
           "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    print(cpu_line())
    print(json.dumps(rec["step_ms"]), f"encoder {rec['encoder_ms_median']:.1f} ms, LM {rec['lm_ms_median']:.1f} ms,",
          f"prompt {prompt_ms:.0f} ms, real-time factor {rec['realtime_factor']:.2f} (>1 keeps up),",
          f"peak RSS {rec['peak_rss_mb']:.0f} MB")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(rec, indent=1) + "\n")


if __name__ == "__main__":
    main()
