#!/usr/bin/env python
"""Moonshine (full-size moonshine-base architecture) on the CPU: speed (RTFx) and peak memory, ours against
transformers.

Run from the repository root with the project's Python (torch, this package importable):

    python3 benchmarks/moonshine_speed.py --json benchmarks/results/moonshine_speed.json

    options: --model DIR       the transformers-format folder (default local-models/moonshine-base-random, made by
                               benchmarks/make_moonshine_model.py)
             --hf-python P     Python of a virtual environment with transformers 5.25 (default .venv-nemo/bin/python,
                               made by tools/setup_nemo_venv.sh)
             --threads N       torch threads and OMP_NUM_THREADS in every child (default 2)
             --rounds N        timed calls of each engine after one warm-up (default 3)
             --seconds S       clip length (default 60)
             --precisions L    comma list of fp32, bf16, int8 (default fp32,bf16,int8; int8 is ours only:
                               transformers has no int8 CPU path, so its row runs transformers in fp32)
             --impls L         comma list of hf, ours (default hf,ours)

The clip: `S` seconds of real speech, the dev utterances of ../shared/audio/dev joined end to end
(benchmarks/speech_clip.py), float32 PCM at 16 kHz.

Long input: transformers has no long-input path for Moonshine (the models are trained on clips under ~30 s), so
the parent cuts the clip once, as ours cuts it (`transcribe.long_input.cut_spans`, max_piece_s 30 at pauses, on the
encoder's 384-sample grid), and both engines decode the same pieces under the model card's bound
(max_length = int(samples * 6.5 / 16000) per piece, the start token included): the same work, so the token ids are
compared.

One child process per engine and precision, both loaded at the same time, their calls alternating (the order flips
every round), one call at a time:
  hf    transformers (in the --hf-python environment): Wav2Vec2FeatureExtractor and
        MoonshineForConditionalGeneration.from_pretrained(model, dtype=torch.float32 | torch.bfloat16), eval(); a
        call runs each piece as the model card does: feature_extractor(piece, return_tensors="pt"),
        model.generate(**inputs, max_length=the card's, do_sample=False, num_beams=1) under torch.inference_mode(),
        tokenizer decode (skip_special_tokens) of each, the texts joined with a space.
  ours  this package: transcribe.runtime.tune_malloc(), transcribe.load_model(model, threads=N, dtype=None |
        "bfloat16"), then model.transcribe(pcm) (greedy, max_piece_s 30: the same pieces, decoded as one batch).
Each child: one warm-up call, then one timed call per round. Reported per engine: load time, best and median call,
RTFx = audio seconds / best (and / median), peak RSS (getrusage ru_maxrss, which includes the model load), the
tokens emitted and whether both emitted the same ids. Ratios ours/transformers: of the best calls, of the medians,
and the median of the per-round ratios. The CPU model and the load average before and after are recorded.

Timing on a shared machine is noisy: check `uptime` first and run when the load average is low.
"""
from __future__ import annotations

import sys
from pathlib import Path

from side_by_side import SAMPLE_RATE, Bench, load_ours, load_transformers, main

MAX_PIECE_S = 30.0  # ours: its default
GRAIN = 384  # samples per encoder frame


def load_hf(model_path: str, precision: str, opts):
    import torch
    from transformers import PreTrainedTokenizerFast, Wav2Vec2FeatureExtractor

    def processor(path):
        return (Wav2Vec2FeatureExtractor.from_pretrained(path),
                PreTrainedTokenizerFast(tokenizer_file=str(Path(path) / "tokenizer.json")))

    spans = opts.context
    rss_import, load_s, (fe, tok), model, _ = load_transformers(model_path, precision,
                                                                "MoonshineForConditionalGeneration", processor)
    eos = model.generation_config.eos_token_id

    def run(pcm):
        texts, ids = [], []
        for a, b in spans:
            inputs = fe(pcm[a:b], sampling_rate=SAMPLE_RATE, return_tensors="pt")
            max_length = int((inputs.attention_mask.sum(dim=-1) * (6.5 / SAMPLE_RATE)).max().item())
            if max_length <= 1:
                continue
            inputs["input_values"] = inputs["input_values"].to(model.dtype)
            with torch.inference_mode():
                seq = model.generate(**inputs, max_length=max_length, do_sample=False, num_beams=1)[0].tolist()
            gen = seq[1:]
            texts.append(tok.decode(gen, skip_special_tokens=True).strip())
            ids += gen[:gen.index(eos)] if eos in gen else gen
        return " ".join(t for t in texts if t), ids

    return rss_import, load_s, run


def load_mine(model_path: str, precision: str, opts):
    def call(model, pcm):
        t = model.transcribe(pcm, sample_rate=SAMPLE_RATE, max_piece_s=MAX_PIECE_S)
        return t.text, [tok.id for tok in t.tokens]

    return load_ours(model_path, precision, opts, call)


def prepare(args, pcm) -> list:
    """The pieces both engines decode: ours's own cut of the clip."""
    from transcribe.long_input import cut_spans

    return [[int(a), int(b)] for a, b in cut_spans(pcm, SAMPLE_RATE, MAX_PIECE_S, "auto", grain=GRAIN)]


BENCH = Bench(
    family="Moonshine", script=__file__, ref="hf", ref_label="transformers", ref_python_option="--hf-python",
    ref_python_default=".venv-nemo/bin/python", ref_setup="tools/setup_nemo_venv.sh",
    load_ref=load_hf, load_ours=load_mine,
    default_model="local-models/moonshine-base-random", make_hint="benchmarks/make_moonshine_model.py",
    precisions=("fp32", "bf16", "int8"), default_precisions="fp32,bf16,int8", ref_runs_fp32=("int8",),
    prepare=prepare,
    json_extra=lambda args, spans: dict(piece_samples=[b - a for a, b in spans]),
    summary_extra=lambda args, spans: f" in {len(spans)} pieces",
    title=lambda args, model: "Moonshine (full-size base architecture, random weights)")

if __name__ == "__main__":
    sys.exit(main(BENCH, __doc__))
