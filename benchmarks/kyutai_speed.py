#!/usr/bin/env python
"""Kyutai STT (the stt-2.6b-en architecture, random weights) on the CPU: speed (RTFx) and peak memory, ours against
transformers, offline transcription of one clip.

Run from the repository root with the project's Python (torch, this package importable):

    .venv-nemo/bin/python benchmarks/make_kyutai_model.py          # once: the random model (about 10.5 GB)
    python3 benchmarks/kyutai_speed.py --json benchmarks/results/kyutai_speed.json

    options: --model DIR       the transformers-format folder (default local-models/kyutai-stt-2.6b-random, made by
                               benchmarks/make_kyutai_model.py)
             --hf-python P     Python of a virtual environment with transformers 5.25 (default .venv-nemo/bin/python)
             --threads N       torch threads and OMP_NUM_THREADS in every child (default 2)
             --rounds N        timed calls of each engine after one warm-up (default 3)
             --seconds S       clip length (default 60)
             --precisions L    comma list of fp32, bf16, int8 (default fp32,int8): ours's LM in that precision
                               (the codec stays float32); transformers runs bfloat16 in the bf16 row and float32 in
                               the int8 row (it has no int8 CPU path)

The clip: `S` seconds of real speech, the dev utterances of ../shared/audio/dev joined end to end
(benchmarks/speech_clip.py), resampled to 24 kHz once by the parent (`transcribe.audio.load_audio`) and read by both
children as the same float32 array. Both decode it whole and greedily: transformers' processor(audio,
sampling_rate=24000) then generate(**inputs) (one token per 80 ms frame of the padded input, the codec encoding the
whole input at once); ours the recognizer's decode_pcm (the same positions; the codec in blocks of 60 s) and the
ids' text. Both emit exactly one token per frame, so the work is the same; the ids are compared (equal on a random
model unless a near-tie flips a step). The rest (children, alternation, figures, JSON) is benchmarks/side_by_side.py's.
Timing on a shared machine is noisy: check `uptime` first.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from side_by_side import REPO, SAMPLE_RATE, Bench, load_ours, load_transformers, main

RATE = 24000


def _clip24(opts):
    import soundfile as sf

    pcm, sr = sf.read(opts.context["clip24"], dtype="float32")
    assert sr == RATE and pcm.ndim == 1
    return pcm


def load_hf(model_path: str, precision: str, opts):
    import torch

    pcm24 = _clip24(opts)
    rss_import, load_s, proc, model, _ = load_transformers(
        model_path, precision, "KyutaiSpeechToTextForConditionalGeneration")

    def run(_pcm16):
        inputs = proc(audio=pcm24, sampling_rate=RATE, return_tensors="pt")
        with torch.inference_mode():
            gen = model.generate(**inputs)
        return proc.batch_decode(gen, skip_special_tokens=True)[0], gen[0, 1:].tolist()

    return rss_import, load_s, run


def load_mine(model_path: str, precision: str, opts):
    pcm24 = _clip24(opts)

    def call(model, _pcm16):
        from transcribe.runtime import model_call

        with model_call(model.threads):
            steps = model.decode_pcm(pcm24).steps
        ids = [s.id for s in steps]
        return model.decode_ids(ids), ids

    return load_ours(model_path, precision, opts, call)


_TMP = tempfile.TemporaryDirectory()  # the parent's 24 kHz clip, read by both children, removed at exit


def prepare(args, pcm16):
    import soundfile as sf

    sys.path.insert(0, str(REPO))
    from transcribe.audio import load_audio

    path = Path(_TMP.name) / "clip24.wav"
    sf.write(path, load_audio(pcm16, RATE, source_rate=SAMPLE_RATE), RATE, subtype="FLOAT")
    return dict(clip24=str(path))


BENCH = Bench(
    family="Kyutai STT", script=__file__, ref="hf", ref_label="transformers", ref_python_option="--hf-python",
    ref_python_default=".venv-nemo/bin/python", ref_setup="tools/setup_nemo_venv.sh",
    load_ref=load_hf, load_ours=load_mine, default_model="local-models/kyutai-stt-2.6b-random",
    make_hint="benchmarks/make_kyutai_model.py", precisions=("fp32", "bf16", "int8"), default_precisions="fp32,int8",
    ref_runs_fp32=("int8",), one_at_a_time=True, prepare=prepare, summary_extra=lambda args, _: ", 24 kHz, decoded whole",
    title=lambda args, model: "Kyutai STT (stt-2.6b-en architecture, random weights)")

if __name__ == "__main__":
    sys.exit(main(BENCH, __doc__))
