#!/usr/bin/env python
"""Parakeet TDT 0.6B on the CPU: speed (RTFx) and peak memory, ours against NeMo, in one run.

Run from the repository root with the project's Python (torch, this package importable):

    python3 benchmarks/parakeet_rtfx.py --json bench-out/parakeet_rtfx.json

    options: --model PATH      the .nemo (default local-models/parakeet-tdt-0.6b-v2-random.nemo,
                               made by benchmarks/make_parakeet_model.py)
             --nemo-python P   Python of a NeMo virtual environment (default .venv-nemo/bin/python,
                               made by tools/setup_nemo_venv.sh)
             --threads N       torch threads and OMP_NUM_THREADS in every child (default 2)
             --rounds N        timed calls of each implementation after one warm-up (default 6)
             --seconds S       clip length (default 60)
             --precisions L    comma list of fp32, bf16, int8 (default fp32,bf16,int8)
             --impls L         comma list of nemo, ours (default nemo,ours)

Default paths are relative to the repository root (git-ignored folders); paths given on the command
line are relative to the working directory.

The clip: `S` seconds of real speech, the dev utterances of ../shared/audio/dev joined end to end
(benchmarks/speech_clip.py), written once to a temporary WAV; each child reads it into a float32
array before anything is timed.

For each precision, one child process per implementation, both with the same thread count, both
loaded at the same time; their calls then alternate (nemo, ours, ours, nemo, ...: the order flips
every round so neither always runs first), one call at a time, never together:
  nemo  NeMo's Python: ASRModel.restore_from(model, map_location="cpu"), eval(), decoding set to
        greedy_batch TDT (max_symbols 10), then model.transcribe([pcm], batch_size=1, verbose=False)
        (NeMo's default: no timestamps).  bf16: the call runs under
        torch.autocast("cpu", dtype=torch.bfloat16) with float32 weights, which is NeMo's own
        mixed-precision path (its inference wrappers default to compute_dtype bfloat16 with
        use_amp=True, i.e. autocast); NeMo's preprocessor turns autocast off for the mel front end.
        int8: NeMo has no int8 CPU path; ours runs alone.
  ours  this package: transcribe.runtime.tune_malloc() (glibc's malloc thresholds, as the command
        line sets them), transcribe.load_model(model, threads=N, dtype=None | "bfloat16" | "int8"),
        then model.transcribe(pcm) with its defaults (word timestamps and segments included).
        bf16: the encoder's weights are cast to bfloat16; front end, predictor and joint stay
        float32.  int8: transcribe/quant.py's int8 products, the rest float32.
Each child: one warm-up transcription, then one timed call (time.perf_counter) per round. Reported
per implementation: load time, best and median call, RTFx = audio seconds / best (and / median),
peak RSS (getrusage ru_maxrss, which includes the model load), RSS after the imports, the token ids
and the first 80 characters of the transcript. Ratios ours/NeMo: of the best calls, of the
medians, and the median of the per-round ratios (the two calls of a round ran a few seconds
apart, so a slow spell of the machine hits both). The CPU model and the load average before and
after are recorded.

The parent prints a table and, with --json, writes everything to a file.

Timing on a shared machine is noisy: check `uptime` first and run when the load average is low.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

# The persistent-child protocol lives in side_by_side.py; canary_speed, sortformer_speed, peers, contention,
# gguf_quant, audio_llm_speed import it from here, as before.
from side_by_side import (  # noqa: F401  (re-exported)
    REPO, RESULT_TAG, SAMPLE_RATE, Bench, ChildProcess, _peak_rss_mb, _rss_mb, load_ours, main, serve_calls, shown,
    summarize)

HERE = Path(__file__).resolve().parent
# relative to REPO, in git-ignored folders
DEFAULT_MODEL = "local-models/parakeet-tdt-0.6b-v2-random.nemo"  # benchmarks/make_parakeet_model.py
DEFAULT_NEMO_PYTHON = ".venv-nemo/bin/python"  # tools/setup_nemo_venv.sh


# --------------------------------------------------------------------------------------
# children (each runs in a fresh interpreter; only the standard library at module level,
# so this file also runs under NeMo's Python without our package)
# --------------------------------------------------------------------------------------


def load_nemo(model_path: str, precision: str, opts):
    import contextlib
    import copy
    import logging

    import torch
    from nemo.utils import logging as nemo_logging

    nemo_logging.setLevel(logging.ERROR)
    from nemo.collections.asr.models import ASRModel
    from omegaconf import open_dict

    rss_import = _rss_mb()
    t0 = time.perf_counter()
    model = ASRModel.restore_from(model_path, map_location="cpu")
    model.eval()
    dec = copy.deepcopy(model.cfg.decoding)
    with open_dict(dec):
        dec.strategy = "greedy_batch"
        dec.model_type = "tdt"
        dec.greedy.max_symbols = 10
    model.change_decoding_strategy(dec, verbose=False)
    load_s = time.perf_counter() - t0

    def run(pcm):
        bf16 = precision == "bf16"
        ctx = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
        with ctx:
            out = model.transcribe([pcm], batch_size=1, verbose=False, return_hypotheses=True)
        if isinstance(out, tuple):  # older NeMo: (best, all)
            out = out[0]
        h = out[0]
        return h.text, [int(i) for i in h.y_sequence]

    return rss_import, load_s, run


BENCH = Bench(
    family="Parakeet TDT", script=__file__, ref="nemo", ref_label="NeMo", ref_python_option="--nemo-python",
    ref_python_default=DEFAULT_NEMO_PYTHON, ref_setup="tools/setup_nemo_venv.sh",
    load_ref=load_nemo, load_ours=load_ours, default_model=DEFAULT_MODEL, model_file="",
    make_hint="benchmarks/make_parakeet_model.py", precisions=("fp32", "bf16", "int8"),
    default_precisions="fp32,bf16,int8", ref_lacks=("int8",), load_columns=True, defaults={"rounds": 6},
    title=lambda args, model: f"Parakeet TDT 0.6B ({Path(model).name})")

if __name__ == "__main__":
    sys.exit(main(BENCH, __doc__))
