#!/usr/bin/env python
"""SenseVoiceSmall (full-size architecture) on the CPU: speed (RTFx) and peak memory, ours against funasr.

Run from the repository root with the project's Python (torch, this package importable):

    python3 benchmarks/sensevoice_speed.py --json benchmarks/results/sensevoice_speed.json

    options: --model DIR       the funasr-layout folder (default local-models/sensevoice-small-random, made by
                               benchmarks/make_sensevoice_model.py)
             --funasr-python P Python of the funasr virtual environment (default .venv-funasr/bin/python, made by
                               tools/setup_funasr_venv.sh)
             --threads N       torch threads and OMP_NUM_THREADS in every child (default 2)
             --rounds N        timed calls of each engine after one warm-up (default 3)
             --seconds S       clip length (default 60)
             --impls L         comma list of funasr, ours (default funasr,ours)
             --precisions L    comma list of fp32, int8 (default fp32,int8; int8 is ours only: its row runs
                               funasr in fp32 beside it)

Default paths are relative to the repository root (git-ignored folders); paths given on the command line are
relative to the working directory.

The clip: `S` seconds of real speech, the dev utterances of ../shared/audio/dev joined end to end
(benchmarks/speech_clip.py), as float32 PCM at 16 kHz handed to both engines as an array.

The same work in both: funasr's AutoModel without a VAD model decodes the whole clip in one call (its model card
caps a call at 30 s of audio, but nothing enforces it), and ours runs with max_piece_s 60, so a clip of up to
60 s is one piece too; both then give the same ids (compared and reported).
  funasr  AutoModel(model=DIR, device="cpu", frontend_conf={"dither": 0.0}, disable_update=True, ncpu=N), a call is
          generate(input=pcm, language="en", use_itn=False) (batch of one, greedy CTC).
  ours    transcribe.runtime.tune_malloc(), transcribe.load_model(DIR, threads=N), a call is
          model.transcribe(pcm, language="en", max_piece_s=60).
One child process per engine, both loaded at the same time, their calls alternating (the order flips every
round). Each child: one warm-up call, then one timed call (time.perf_counter) per round. Reported per engine:
load time, best and median call, RTFx = audio seconds / best (and / median), peak RSS (getrusage ru_maxrss,
model load included), the ids emitted (the tags' ids left out: ours keeps them out of the tokens) and whether
both engines emitted the same. Ratios ours/funasr: of the
best calls, of the medians, and the median of the per-round ratios.

Timing on a shared machine is noisy: check `uptime` first and run when the load average is low.
"""
from __future__ import annotations

import sys
import time

from side_by_side import Bench, load_ours, main, rss_mb, shown

MAX_PIECE_S = 60.0


def load_funasr(model_path: str, precision: str, opts):
    import logging

    import torch
    from funasr import AutoModel

    logging.disable(logging.WARNING)
    rss_import = rss_mb()
    t0 = time.perf_counter()
    # ncpu: funasr's AutoModel sets torch's threads to it (default 4, more than this machine's 2 cores: its
    # threads then fight for the cores and a call runs 45x slower); the same thread count as ours
    am = AutoModel(model=model_path, device="cpu", disable_update=True, disable_pbar=True, disable_log=True,
                   frontend_conf={"dither": 0.0}, ncpu=opts.threads)
    load_s = time.perf_counter() - t0
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=am.kwargs["tokenizer_conf"]["bpemodel"])
    tag = {i for i in range(sp.get_piece_size()) if sp.id_to_piece(i).startswith("<|")}
    captured = {}
    am.model.encoder.register_forward_hook(lambda m, i, o: captured.__setitem__("enc", o))

    def run(pcm):
        res = am.generate(input=pcm, language="en", use_itn=False)[0]
        enc, lens = captured["enc"]
        with torch.inference_mode():
            best = am.model.ctc.log_softmax(enc)[0, : int(lens[0])].argmax(-1)
        ids = [int(i) for i in torch.unique_consecutive(best) if int(i) != 0 and int(i) not in tag]
        return res["text"], ids, [len(pcm)]

    return rss_import, load_s, run


def load_mine(model_path: str, precision: str, opts):
    def call(model, pcm):
        t = model.transcribe(pcm, language="en", max_piece_s=MAX_PIECE_S)
        return t.text, [tok.id for tok in t.tokens], [len(pcm)]

    return load_ours(model_path, precision, opts, call)


BENCH = Bench(
    family="SenseVoice", script=__file__, ref="funasr", ref_label="funasr", ref_python_option="--funasr-python",
    ref_python_default=".venv-funasr/bin/python", ref_setup="tools/setup_funasr_venv.sh",
    load_ref=load_funasr, load_ours=load_mine, default_model="local-models/sensevoice-small-random",
    model_file="model.pt", make_hint="benchmarks/make_sensevoice_model.py",
    precisions=("fp32", "int8"), default_precisions="fp32,int8", ref_runs_fp32=("int8",), repo_on_ref_path=True,
    title=lambda args, model: f"SenseVoiceSmall ({shown(model)}, random weights)")

if __name__ == "__main__":
    sys.exit(main(BENCH, __doc__))
