#!/usr/bin/env python
"""Parakeet CTC 1.1B in transformers' layout (full-size architecture) on the CPU: speed (RTFx) and peak memory,
ours against transformers' ParakeetForCTC.

Run from the repository root with the project's Python (torch, this package importable):

    python3 benchmarks/parakeet_hf_speed.py --json benchmarks/results/parakeet_hf_speed.json

    options: --model DIR       the transformers folder (default local-models/parakeet-ctc-1.1b-hf-random, made by
                               benchmarks/make_parakeet_hf_model.py)
             --hf-python P     Python of a virtual environment with transformers 5.25 (default
                               .venv-nemo/bin/python, made by tools/setup_nemo_venv.sh)
             --threads N       torch threads and OMP_NUM_THREADS in every child (default 2)
             --rounds N        timed calls of each engine after one warm-up (default 3)
             --seconds S       clip length (default 60)
             --precisions L    comma list of fp32, bf16, int8 (default fp32,bf16,int8; transformers has no int8:
                               its int8 row runs fp32, ours int8 weights)
             --impls L         comma list of hf, ours (default hf,ours)

Default paths are relative to the repository root (git-ignored folders); paths given on the command line are
relative to the working directory.

The clip: `S` seconds of real speech, the dev utterances of ../shared/audio/dev joined end to end
(benchmarks/speech_clip.py), float32 PCM at 16 kHz handed to both engines as an array; both run it whole (one
input, full attention: ours switches to local attention only past 20 minutes).

For each precision, one child process per engine, both with the same thread count, both loaded at the same
time; their calls alternate (the order flips every round), one call at a time:
  hf    transformers (in the --hf-python environment): AutoProcessor.from_pretrained(model),
        ParakeetForCTC.from_pretrained(model, dtype=torch.float32 | torch.bfloat16), eval(); a call is
        processor(pcm, sampling_rate=16000, return_tensors="pt") (features cast to the model's dtype),
        model.generate(**inputs) under torch.inference_mode(), processor.decode(ids, skip_special_tokens=True).
  ours  this package: transcribe.runtime.tune_malloc(), transcribe.load_model(model, threads=N, dtype=None |
        "bfloat16" | "int8"), then model.transcribe(pcm) (CTC greedy, with timestamps: what users get).
Each child: one warm-up transcription, then one timed call (time.perf_counter) per round. Reported per engine:
load time, best and median call, RTFx = audio seconds / best (and / median), peak RSS, the tokens emitted and
whether both engines emitted the same ids (a random model's CTC argmax: fp32 against fp32 should agree).

Timing on a shared machine is noisy: check `uptime` first and run when the load average is low.
"""
from __future__ import annotations

import sys

from side_by_side import SAMPLE_RATE, Bench, collapse, load_ours, load_transformers, main, shown


def load_hf(model_path: str, precision: str, opts):
    import torch

    rss_import, load_s, processor, model, _ = load_transformers(model_path, precision, "ParakeetForCTC")
    blank = model.config.pad_token_id

    def run(pcm):
        inputs = processor(pcm, sampling_rate=SAMPLE_RATE, return_tensors="pt").to(model.dtype)
        with torch.inference_mode():
            seq = model.generate(**inputs)
        text = processor.decode(seq[0], skip_special_tokens=True)
        return text, collapse(seq[0].tolist(), blank)

    return rss_import, load_s, run


BENCH = Bench(
    family="Parakeet CTC (transformers)", script=__file__, ref="hf", ref_label="transformers",
    ref_python_option="--hf-python", ref_python_default=".venv-nemo/bin/python", ref_setup="tools/setup_nemo_venv.sh",
    load_ref=load_hf, load_ours=load_ours, default_model="local-models/parakeet-ctc-1.1b-hf-random",
    make_hint="benchmarks/make_parakeet_hf_model.py", precisions=("fp32", "bf16", "int8"),
    default_precisions="fp32,bf16,int8", ref_runs_fp32=("int8",),
    title=lambda args, model: f"Parakeet CTC in transformers' layout ({shown(model)}, random weights)")

if __name__ == "__main__":
    sys.exit(main(BENCH, __doc__))
