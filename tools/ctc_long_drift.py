#!/usr/bin/env python
"""Measure how our CTC beam scores on long inputs differ from NeMo's, and where from (issue 28).

Run from the repository root with the project's Python, after the NeMo side has dumped its arrays:

    .venv-nemo/bin/python tools/nemo_ctc_long_reference.py --dump /tmp/ctc_long
    OMP_NUM_THREADS=1 PYTHONPATH=. python3 tools/ctc_long_drift.py /tmp/ctc_long

Our side's kernels can be narrowed to imitate another CPU, e.g. AVX2 only:

    ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 OMP_NUM_THREADS=1 \
        PYTHONPATH=. python3 tools/ctc_long_drift.py /tmp/ctc_long

(avx512 / AVX512_CORE_AMX / AVX512 for AVX-512, default / SSE41 / SSE4_2 for no vector kernels).

Per model, input and beam run of tests/references/nemo_ctc_long.json it prints: `on_nemo`, the
largest |score difference| of our search run on NeMo's own log-probs (0: the search is exact);
`audio`, the same for our whole path from audio (encoder numerics); `spread`, how much that
difference varies between the hypotheses of one list; `gap`, the smallest gap between NeMo's
neighbouring scores; per input, the largest |log-prob difference| over all frames and labels and the
sum over frames of the best label's log-prob differences (does it accumulate?).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests import test_ctc_beam_long as long_refs  # noqa: E402  (the references, the inputs, our log-probs)
from transcribe.search.ctc_beam import CtcBeamOptions, beam_search  # noqa: E402


def main(dump: Path) -> int:
    torch.set_num_threads(1)
    for stem, model in long_refs.MODELS.items():
        for clip in model["clips"]:
            s = clip["seconds"]
            logp, length = long_refs.our_logp(stem, s)
            nemo = torch.from_numpy(np.load(dump / f"{stem}_{s}_logp.npy"))
            best = logp[:length].max(dim=-1).values.double().numpy()
            d = best - np.asarray(clip["greedy"]["logp"], dtype=np.float64)
            print(f"{stem} {s:g}s T'={clip['frames']} L={length}: max |dlogp| {float((logp[:length] - nemo[:length]).abs().max()):.1e}, "
                  f"best-label sum of d {d.sum():+.1e}")
            for run in clip["runs"]:
                opts = CtcBeamOptions(beam_size=run["beam_size"], beam_beta=run["beam_beta"], beam_threshold=run["beam_threshold"])
                want = [h["score"] for h in run["hypotheses"]]
                on_nemo = [h.score for h in beam_search(nemo, length, model["blank"], opts)]
                audio = [h.score - w for h, w in zip(beam_search(logp, length, model["blank"], opts), want)]
                gap = min((a - b for a, b in zip(want, want[1:])), default=float("inf"))
                print(f"   k={run['beam_size']}: on_nemo {max(abs(a - b) for a, b in zip(on_nemo, want)):.1e} "
                      f"audio {max(map(abs, audio)):.1e} spread {max(audio) - min(audio):.1e} gap {gap:.1e}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(Path(sys.argv[1])))
