#!/usr/bin/env python
"""Time NeMo's default beam search on frames that take many expansions: the figures behind the work
guard of transcribe/search/transducer_beam.py (MAX_POPS_PER_BEAM). Prints; writes nothing.

Run from the repository root with the Python of a NeMo virtual environment:

    .venv-nemo/bin/python tools/nemo_beam_work_timing.py saturated tiny-rnnt-fit rnnt 4 512,1024,2048,4096
    .venv-nemo/bin/python tools/nemo_beam_work_timing.py saturated tiny-tdt-fit tdt 4 512,1024,2048,4096
    .venv-nemo/bin/python tools/nemo_beam_work_timing.py random

saturated: the tiny model's joint is replaced by one that makes token 0 certain (TDT: with duration 0
certain), so no frame ever ends; prints the seconds NeMo took to reach each count of expansions (joint
calls) on the first frame, then stops it. random: NeMo's default TDT beam (beam 4) on the random tiny
TDT model and the clip where its list grows to 2,159 hypotheses (1,336 expansions on one frame), timed.
One CPU thread.
"""
from __future__ import annotations

import os

os.environ["OMP_NUM_THREADS"] = "1"

import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import nemo_beam_reference as nbr  # noqa: E402
import nemo_reference as nr  # noqa: E402

torch.set_num_threads(1)


class _Stop(Exception):
    pass


def saturated(stem: str, head: str, beam: int, stops: list[int]) -> None:
    ref = json.loads(nr.repo_path(f"{nbr.OUT_DIR_REL}/{stem}.json").read_text())
    model = nr.ASRModel.restore_from(str(nr.repo_path(ref["model"])), map_location="cpu")
    model.eval()
    enc = torch.tensor(ref["clips"][0]["encoder"]).t()
    model.change_decoding_strategy(nbr.beam_cfg(model, head, dict(strategy="beam", beam_size=beam, score_norm=True)),
                                   verbose=False)
    real = model.joint.joint
    n_dur = len(ref["durations"])
    seen = dict(n=0, t0=time.time())

    def joint(f, g):
        out = torch.full_like(real(f, g), -200.0)
        out[..., 0] = 200.0  # token 0 certain ...
        if head == "tdt":
            out[..., out.shape[-1] - n_dur + ref["durations"].index(0)] = 200.0  # ... with duration 0
        seen["n"] += 1
        if seen["n"] in stops:
            print(f"{stem} {head} beam {beam}: {seen['n']} expansions in {time.time() - seen['t0']:.1f} s", flush=True)
            if seen["n"] == stops[-1]:
                raise _Stop()
        return out

    model.joint.joint = joint
    seen["t0"] = time.time()
    try:
        with torch.no_grad():
            model.decoding.rnnt_decoder_predictions_tensor(encoder_output=enc[None, :, :5],
                                                           encoded_lengths=torch.tensor([5]), return_hypotheses=True)
    except _Stop:
        pass


def random_case() -> None:
    ref = json.loads(nr.repo_path(f"{nbr.OUT_DIR_REL}/tiny-tdt-random.json").read_text())
    model = nr.ASRModel.restore_from(str(nr.repo_path(ref["model"])), map_location="cpu")
    model.eval()
    clip = next(c for c in ref["clips"] if c["name"] == "cv_17767698")
    t0 = time.time()
    hyps = nbr.decode(model, "tdt", dict(strategy="beam", beam_size=4, score_norm=True),
                      torch.tensor(clip["encoder"]).t(), clip["length"])
    print(f"tiny-tdt-random cv_17767698 beam 4: {len(hyps)} hypotheses in {time.time() - t0:.1f} s")


def main() -> int:
    nr.nemo_imports()
    if sys.argv[1:2] == ["random"]:
        random_case()
    else:
        _, stem, head, beam, stops = sys.argv[1:6]
        saturated(stem, head, int(beam), [int(x) for x in stops.split(",")])
    return 0


if __name__ == "__main__":
    sys.exit(main())
