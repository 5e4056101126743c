#!/usr/bin/env python
"""Cohere Transcribe (full-size architecture) on the CPU: speed (RTFx) and peak memory, ours against transformers.

Run from the repository root with the project's Python (torch, this package importable):

    python3 benchmarks/cohere_speed.py --json bench-out/cohere_speed.json

    options: --model DIR       the transformers-format folder (default local-models/cohere-transcribe-random,
                               made by benchmarks/make_cohere_model.py)
             --hf-python P     Python of a virtual environment with transformers 5.24 (default
                               .venv-nemo/bin/python, made by tools/setup_nemo_venv.sh)
             --threads N       torch threads and OMP_NUM_THREADS in every child (default 2)
             --rounds N        timed calls of each engine after one warm-up (default 3)
             --seconds S       clip length (default 60)
             --max-new-tokens N  generated tokens per piece, both engines (default 100)
             --precisions L    comma list of fp32, bf16 (default fp32,bf16)
             --impls L         comma list of hf, ours (default hf,ours)
             --one-at-a-time   load and time one engine, then the other (rounds not interleaved; for
                               machines without the memory for both models at once)

Default paths are relative to the repository root (git-ignored folders); paths given on the command
line are relative to the working directory.

The clip: `S` seconds of real speech, the dev utterances of ../shared/audio/dev joined end to end
(benchmarks/speech_clip.py), as float32 PCM at 16 kHz handed to both engines as an array.

Long input: both engines cut a clip over 30 s as users get it, each its own way, into pieces decoded as
one batch: transformers' CohereAsrFeatureExtractor cuts at the quietest 0.1 s window of the last 5 s
before 35 s (60 s -> 31.20 + 28.80 s), ours (`max_piece_s` 35, its default) at a pause (60 s -> 31.12 +
28.88 s: the same pause, 80 ms earlier). The same work to within 0.13 % of the audio, but not the same
samples, so the token ids of the two engines are compared and reported, not required to be equal.

For each precision, one child process per engine, both with the same thread count, both loaded at the
same time (unless --one-at-a-time); their calls then alternate (the order flips every round), one call at
a time:
  hf    transformers (in the --hf-python environment): AutoProcessor.from_pretrained(model),
        CohereAsrForConditionalGeneration.from_pretrained(model, dtype=torch.float32 | torch.bfloat16)
        (bf16: the weights in bfloat16, as transformers' users run it), eval(); a call is
        processor(pcm, sampling_rate=16000, language="en", punctuation=True, return_tensors="pt"), the
        features cast to the model's dtype, model.generate(**inputs, max_new_tokens=N, do_sample=False,
        num_beams=1) under torch.inference_mode(), then processor.decode(generated ids (the prompt cut off),
        skip_special_tokens=True, audio_chunk_index=..., language="en").
  ours  this package: transcribe.runtime.tune_malloc(), transcribe.load_model(model, threads=N,
        dtype=None | "bfloat16"), then model.transcribe(pcm, language="en", max_new_tokens=N) (greedy,
        max_piece_s 35). bf16: encoder, projection, decoder and head weights in bfloat16 (front end float32).
A random model never emits EOS: both generate N tokens per piece (the counts are recorded and compared).
Each child: one warm-up transcription, then one timed call (time.perf_counter) per round. Reported per
engine: load time, best and median call, RTFx = audio seconds / best (and / median), peak RSS (getrusage
ru_maxrss, which includes the model load), the pieces' lengths, the tokens emitted and whether both
engines emitted the same ids. Ratios ours/transformers: of the best calls, of the medians, and the median
of the per-round ratios. The CPU model and the load average before and after are recorded.

Timing on a shared machine is noisy: check `uptime` first and run when the load average is low.
"""
from __future__ import annotations

import sys

from side_by_side import SAMPLE_RATE, Bench, load_ours, load_transformers, main

MAX_PIECE_S = 35.0  # ours: its default, transformers' max_audio_clip_s


def load_hf(model_path: str, precision: str, opts):
    import torch

    rss_import, load_s, processor, model, _ = load_transformers(model_path, precision,
                                                                "CohereAsrForConditionalGeneration")
    eos, pad = model.generation_config.eos_token_id, model.generation_config.pad_token_id

    def run(pcm):
        inputs = processor(pcm, sampling_rate=SAMPLE_RATE, language="en", punctuation=True, return_tensors="pt")
        chunk_index = inputs.pop("audio_chunk_index")
        n_prompt = inputs["decoder_input_ids"].shape[1]
        pieces = [int(x) * 160 for x in inputs["attention_mask"].sum(dim=1)]  # feature frames x hop
        inputs = inputs.to(model.dtype)  # floating tensors only
        with torch.inference_mode():
            seq = model.generate(**inputs, max_new_tokens=opts.max_new_tokens, do_sample=False, num_beams=1)
        gen = seq[:, n_prompt:]  # generate() returns the prompt too, whose <|...|> pieces decode as text
        text = processor.decode(gen, skip_special_tokens=True, audio_chunk_index=chunk_index, language="en")[0]
        ids = []
        for row in gen.tolist():
            for i in row:
                if i == eos:
                    break
                if i != pad:
                    ids.append(int(i))
        return text, ids, pieces

    return rss_import, load_s, run


def load_mine(model_path: str, precision: str, opts):
    from transcribe import long_input

    def call(model, pcm):
        t = model.transcribe(pcm, language="en", max_new_tokens=opts.max_new_tokens, max_piece_s=MAX_PIECE_S)
        # the pieces it cut (the same call its long-input path makes; a few ms, outside the timing's concern)
        spans = long_input.cut_spans(pcm, SAMPLE_RATE, MAX_PIECE_S, "auto", grain=model.model.frame_stride)
        return t.text, [tok.id for tok in t.tokens], [b - a for a, b in spans]

    return load_ours(model_path, precision, opts, call)


def add_args(ap):
    ap.add_argument("--max-new-tokens", type=int, default=100)


BENCH = Bench(
    family="Cohere Transcribe", script=__file__, ref="hf", ref_label="transformers", ref_python_option="--hf-python",
    ref_python_default=".venv-nemo/bin/python", ref_setup="tools/setup_nemo_venv.sh",
    load_ref=load_hf, load_ours=load_mine, default_model="local-models/cohere-transcribe-random",
    make_hint="benchmarks/make_cohere_model.py", precisions=("fp32", "bf16"), default_precisions="fp32,bf16",
    one_at_a_time=True, add_args=add_args,
    json_extra=lambda args, _: dict(max_new_tokens_per_piece=args.max_new_tokens),
    summary_extra=lambda args, _: f", {args.max_new_tokens} new tokens a piece",
    title=lambda args, model: "Cohere Transcribe (full-size architecture, random weights)")

if __name__ == "__main__":
    sys.exit(main(BENCH, __doc__))
