#!/usr/bin/env python
"""Granite Speech 5 CTC (full-size architecture) on the CPU: speed (RTFx) and peak memory, ours against transformers.

Run from the repository root with the project's Python (torch, this package importable):

    python3 benchmarks/granite_speech5_speed.py --json benchmarks/results/granite_speech5_speed.json

    options: --model DIR       the transformers-format folder (default local-models/granite-speech5-random,
                               made by benchmarks/make_granite_speech5_model.py)
             --hf-python P     Python of a virtual environment with transformers 5.25 (default
                               .venv-nemo/bin/python, made by tools/setup_nemo_venv.sh)
             --threads N       torch threads and OMP_NUM_THREADS in every child (default 2)
             --rounds N        timed calls of each engine after one warm-up (default 3)
             --seconds S       clip length (default 60)
             --precisions L    comma list of fp32, bf16, int8 (default fp32,bf16,int8; int8 is ours only:
                               transformers runs float32 beside it)
             --impls L         comma list of hf, ours (default hf,ours)
             --one-at-a-time   load and time one engine, then the other

The clip: `S` seconds of real speech, the dev utterances of ../shared/audio/dev joined end to end
(benchmarks/speech_clip.py), float32 PCM at 16 kHz handed to both engines as an array. Both run it whole
(transformers' processor does not cut; ours cuts over `max_piece_s`, 120 s by default, so 60 s is one piece):
the same work, and the frame-wise greedy ids are compared.

One child process per engine and precision, the same thread count, both loaded at once (unless
--one-at-a-time); their calls alternate (the order flips every round):
  hf    transformers (in the --hf-python environment): the model folder's processor (GraniteSpeech5FeatureExtractor
        with tools/granite_speech5_common.py's pure-torch stand-ins for torchaudio's MelSpectrogram and
        compute_deltas; ParakeetTokenizer), GraniteSpeech5ForCTC.from_pretrained(model, dtype=float32 | bfloat16),
        eval(); a call is processor(pcm, sampling_rate=16000, return_tensors="pt"), the features cast to the
        model's dtype, model.generate(**inputs) under torch.inference_mode(), processor.batch_decode(ids,
        skip_special_tokens=True).
  ours  this package: transcribe.runtime.tune_malloc(), transcribe.load_model(model, threads=N,
        dtype=None | "bfloat16" | "int8"), then model.transcribe(pcm) (greedy, timestamps on). int8: the
        conformer's matrix products as int8 (the heads float32); the int8 row's transformers is float32.
Each child: one warm-up call, then one timed call per round. Reported per engine: load time, best and median
call, RTFx = audio seconds / best (and / median), peak RSS, the CTC tokens emitted and whether both engines
emitted the same ids. Ratios transformers/ours of the best calls, the medians and the per-round ratios.

Timing on a shared machine is noisy: check `uptime` first and run when the load average is low.
"""
from __future__ import annotations

import sys

from side_by_side import REPO, SAMPLE_RATE, Bench, collapse, load_ours, load_transformers, main, shown


def load_hf(model_path: str, precision: str, opts):
    import torch

    sys.path.insert(0, str(REPO / "tools"))
    import granite_speech5_common as C

    rss_import, load_s, processor, model, dtype = load_transformers(model_path, precision, "GraniteSpeech5ForCTC",
                                                                    C.load_processor)
    blank = model.config.pad_token_id

    def run(pcm):
        inputs = processor(pcm, sampling_rate=SAMPLE_RATE, return_tensors="pt")
        inputs["input_features"] = inputs["input_features"].to(dtype)
        with torch.inference_mode():
            frames = model.generate(**inputs)
        text = processor.batch_decode(frames, skip_special_tokens=True)[0]
        return text, collapse(frames[0].tolist(), blank)

    return rss_import, load_s, run


BENCH = Bench(
    family="Granite Speech 5", script=__file__, ref="hf", ref_label="transformers", ref_python_option="--hf-python",
    ref_python_default=".venv-nemo/bin/python", ref_setup="tools/setup_nemo_venv.sh",
    load_ref=load_hf, load_ours=load_ours, default_model="local-models/granite-speech5-random",
    make_hint="benchmarks/make_granite_speech5_model.py", precisions=("fp32", "bf16", "int8"),
    default_precisions="fp32,bf16,int8", ref_runs_fp32=("int8",), one_at_a_time=True,
    title=lambda args, model: f"Granite Speech 5 CTC ({shown(model)})")

if __name__ == "__main__":
    sys.exit(main(BENCH, __doc__))
