#!/usr/bin/env python
"""Moonshine Streaming (medium architecture, random weights) offline on the CPU: speed (RTFx) and peak memory,
ours against transformers.

Run from the repository root with the project's Python (torch, this package importable):

    .venv-nemo/bin/python benchmarks/make_moonshine_streaming_model.py          # once: the random model
    python3 benchmarks/moonshine_streaming_speed.py --json bench-out/moonshine_streaming_speed.json

    options: --model DIR       the transformers-format folder (default local-models/moonshine-streaming-medium-random)
             --hf-python P     Python of a virtual environment with transformers 5.25 (default .venv-nemo/bin/python)
             --threads N       torch threads and OMP_NUM_THREADS in every child (default 2)
             --rounds N        timed calls of each engine after one warm-up (default 3)
             --seconds S       clip length (default 60; at most 80: the adapter's 4,096 positions hold 82 s)
             --max-new-tokens N  generated tokens, both engines (default 200: a random model never emits EOS)
             --precisions L    comma list of fp32, bf16, int8 (default fp32,bf16,int8; int8 is ours only:
                               transformers has no int8 CPU path, so its row runs transformers in fp32)

The clip: `S` seconds of real speech (benchmarks/speech_clip.py), float32 PCM at 16 kHz given to both as an array,
decoded whole by both (ours with max_piece_s 80: one piece, the same work as transformers' one call).

One child process per engine, both loaded at once, their calls alternating (the order flips every round):
  hf    transformers: AutoProcessor + MoonshineStreamingForConditionalGeneration.from_pretrained(model, dtype),
        processor(pcm, return_attention_mask=True), generate(max_new_tokens=N, num_beams=1, do_sample=False)
        under torch.inference_mode(), then batch_decode(skip_special_tokens=True);
  ours  transcribe.load_model(model, threads=N, dtype=None | "bfloat16" | "int8"), transcribe(pcm, max_new_tokens=N,
        max_piece_s=80) (greedy).
Reported per engine: load time, best and median call, RTFx = audio seconds / best (and / median), peak RSS, the
tokens emitted and whether both emitted the same ids; the ratios ours/transformers. Timing on a shared machine is
noisy: run it alone (`uptime` first).
"""
from __future__ import annotations

import sys

from side_by_side import SAMPLE_RATE, Bench, load_ours, load_transformers, main


def load_hf(model_path: str, precision: str, opts):
    import torch

    rss_import, load_s, processor, model, dtype = load_transformers(
        model_path, precision, "MoonshineStreamingForConditionalGeneration")

    def run(pcm):
        inputs = processor(pcm, sampling_rate=SAMPLE_RATE, return_tensors="pt", return_attention_mask=True)
        inputs["input_values"] = inputs["input_values"].to(dtype)
        with torch.inference_mode():
            seq = model.generate(**inputs, max_new_tokens=opts.max_new_tokens, do_sample=False, num_beams=1)
        ids = [int(i) for i in seq[0, 1:].tolist() if i not in (0, 2)]
        return processor.batch_decode(seq, skip_special_tokens=True)[0], ids

    return rss_import, load_s, run


def load_mine(model_path: str, precision: str, opts):
    def call(model, pcm):
        t = model.transcribe(pcm, sample_rate=SAMPLE_RATE, max_new_tokens=opts.max_new_tokens, max_piece_s=80.0)
        return t.text, [tok.id for tok in t.tokens]

    return load_ours(model_path, precision, opts, call)


def add_args(ap):
    ap.add_argument("--max-new-tokens", type=int, default=200)


def check(args, model, ap):
    if not 1 <= args.seconds <= 80:
        ap.error("--seconds: 1 to 80 (the adapter's position table holds 82 s)")


BENCH = Bench(
    family="Moonshine Streaming", script=__file__, ref="hf", ref_label="transformers",
    ref_python_option="--hf-python", ref_python_default=".venv-nemo/bin/python", ref_setup="tools/setup_nemo_venv.sh",
    load_ref=load_hf, load_ours=load_mine, default_model="local-models/moonshine-streaming-medium-random",
    make_hint="benchmarks/make_moonshine_streaming_model.py", precisions=("fp32", "bf16", "int8"),
    default_precisions="fp32,bf16,int8", ref_runs_fp32=("int8",), add_args=add_args, check=check,
    json_extra=lambda args, _: dict(max_new_tokens=args.max_new_tokens),
    summary_extra=lambda args, _: f", {args.max_new_tokens} new tokens",
    title=lambda args, model: f"Moonshine Streaming ({model.rstrip('/').split('/')[-1]})")

if __name__ == "__main__":
    sys.exit(main(BENCH, __doc__))
