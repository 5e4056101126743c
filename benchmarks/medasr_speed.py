#!/usr/bin/env python
"""MedASR (full-size architecture) on the CPU: speed (RTFx) and peak memory, ours against transformers.

Run from the repository root with the project's Python (torch, this package importable):

    python3 benchmarks/medasr_speed.py --json benchmarks/results/medasr_speed.json

    options: --model DIR       the transformers-format folder (default local-models/medasr-random, made by
                               benchmarks/make_medasr_model.py)
             --hf-python P     Python of a virtual environment with transformers 5.25 (default
                               .venv-nemo/bin/python, made by tools/setup_nemo_venv.sh)
             --threads N       torch threads and OMP_NUM_THREADS in every child (default 2)
             --rounds N        timed calls of each engine after one warm-up (default 3)
             --seconds S       clip length (default 60)
             --max-piece-s S   ours: cut inputs longer than this at pauses (default 120: the 60 s clip whole,
                               as transformers' direct call runs it; 20 is ours's default, the pipeline's chunk)
             --precisions L    comma list of fp32, bf16, int8 (default fp32,bf16,int8; int8 is ours only:
                               transformers has no int8 CPU path, so its row runs transformers in fp32)
             --impls L         comma list of hf, ours (default hf,ours)
             --one-at-a-time   load and time one engine, then the other

Default paths are relative to the repository root (git-ignored folders); paths given on the command line are
relative to the working directory.

The clip: `S` seconds of real speech, the dev utterances of ../shared/audio/dev joined end to end
(benchmarks/speech_clip.py), as float32 PCM at 16 kHz handed to both engines as an array.

For each precision, one child process per engine, both with the same thread count, both loaded at the same time
(unless --one-at-a-time); their calls then alternate (the order flips every round), one call at a time:
  hf    transformers (in the --hf-python environment): AutoProcessor.from_pretrained(model),
        LasrForCTC.from_pretrained(model, dtype=torch.float32 | torch.bfloat16), eval(); a call is
        processor(pcm, sampling_rate=16000, return_tensors="pt", padding=True) (the model card's call: the
        whole clip at once), the features cast to the model's dtype, model.generate(**inputs) (greedy CTC)
        under torch.inference_mode(), then processor.batch_decode(ids, skip_special_tokens=True).
  ours  this package: transcribe.runtime.tune_malloc(), transcribe.load_model(model, threads=N,
        dtype=None | "bfloat16" | "int8"), then model.transcribe(pcm, max_piece_s=S) (greedy, timestamps on: word and
        token times are part of its output). bf16: the encoder's weights in bfloat16 (front end float64/32, head
        float32); int8: the encoder's linear layers as int8 matrix products (transcribe/quant.py).
Each child: one warm-up transcription, then one timed call (time.perf_counter) per round. Reported per engine:
load time, best and median call, RTFx = audio seconds / best (and / median), peak RSS (getrusage ru_maxrss, which
includes the model load), the CTC ids after the collapse (special tokens left out, as ours leaves them out) and whether both engines emitted the same ids (random
weights give near-ties, so a few differing frames in float32 are rounding, not a bug; tests/test_medasr.py holds
the parity). Ratios ours/transformers: of the best calls, of the medians, and the median of the per-round ratios.

Timing on a shared machine is noisy: check `uptime` first and run when the load average is low.
"""
from __future__ import annotations

import sys

from side_by_side import SAMPLE_RATE, Bench, collapse, load_ours, load_transformers, main

MAX_PIECE_S = 120.0


def load_hf(model_path: str, precision: str, opts):
    import torch

    rss_import, load_s, processor, model, _ = load_transformers(model_path, precision, "LasrForCTC")
    blank = model.config.pad_token_id
    special = set(processor.tokenizer.all_special_ids)  # ours leaves them out of its tokens, as out of the text

    def run(pcm):
        inputs = processor(pcm, sampling_rate=SAMPLE_RATE, return_tensors="pt", padding=True)
        inputs["input_features"] = inputs["input_features"].to(model.dtype)
        with torch.inference_mode():
            ids = model.generate(**inputs)
        text = processor.batch_decode(ids, skip_special_tokens=True)[0]
        return text, [i for i in collapse(ids[0].tolist(), blank) if i not in special], [len(pcm)]

    return rss_import, load_s, run


def load_mine(model_path: str, precision: str, opts):
    from transcribe import long_input

    def call(model, pcm):
        t = model.transcribe(pcm, max_piece_s=opts.max_piece_s)
        grain = model.config.features.hop * model.config.subsampling
        spans = long_input.cut_spans(pcm, SAMPLE_RATE, opts.max_piece_s, "auto", grain=grain)
        return t.text, [tok.id for tok in t.tokens], [b - a for a, b in spans]

    return load_ours(model_path, precision, opts, call)


def add_args(ap):
    ap.add_argument("--max-piece-s", type=float, default=MAX_PIECE_S)


BENCH = Bench(
    family="MedASR", script=__file__, ref="hf", ref_label="transformers", ref_python_option="--hf-python",
    ref_python_default=".venv-nemo/bin/python", ref_setup="tools/setup_nemo_venv.sh",
    load_ref=load_hf, load_ours=load_mine, default_model="local-models/medasr-random",
    make_hint="benchmarks/make_medasr_model.py", precisions=("fp32", "bf16", "int8"),
    default_precisions="fp32,bf16,int8", ref_runs_fp32=("int8",), one_at_a_time=True, add_args=add_args,
    json_extra=lambda args, _: dict(max_piece_s=args.max_piece_s),
    summary_extra=lambda args, _: f", ours cut at pauses into pieces of <= {args.max_piece_s:g} s",
    title=lambda args, model: "MedASR (full-size architecture, random weights)")

if __name__ == "__main__":
    sys.exit(main(BENCH, __doc__))
