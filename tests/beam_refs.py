"""NeMo's N-best references (tests/references/nemo_beam/, made by tools/nemo_beam_reference.py) and
the inputs our searches need to replay them: NeMo's own encoder frames, projected by our joint, and
our model's steps (search.steps.TransducerSteps) or CTC log-probabilities."""
from __future__ import annotations

import functools
import json
from pathlib import Path

import torch

import transcribe

REPO = Path(__file__).resolve().parent.parent
BEAM_REFS = REPO / "tests" / "references" / "nemo_beam"
STEMS = ["tiny-tdt-fit", "tiny-rnnt-fit", "tiny-ctc-fit", "tiny-hybrid-tdt-ctc-fit", "tiny-tdt-random"]


@functools.lru_cache(maxsize=None)
def reference(stem: str) -> dict:
    return json.loads((BEAM_REFS / f"{stem}.json").read_text())


@functools.lru_cache(maxsize=None)
def recognizer(stem: str):
    return transcribe.load_model(str((REPO / reference(stem)["model"]).resolve()))


def runs(stem: str, head: str, strategy: str) -> list[dict]:
    return [r for r in reference(stem)["runs"] if r["head"] == head and r["strategy"] == strategy]


@functools.lru_cache(maxsize=None)
def encoder(stem: str, clip: str) -> torch.Tensor:
    """NeMo's encoder output for the clip, [1, d_model, T] float32."""
    c = next(c for c in reference(stem)["clips"] if c["name"] == clip)
    return torch.tensor(c["encoder"], dtype=torch.float32).t()[None].contiguous()


@torch.inference_mode()
def projected(stem: str, clip: str) -> torch.Tensor:
    """The clip's encoder frames projected for the joint, [T, H]."""
    return recognizer(stem).project_encoder(encoder(stem, clip))[0]


def steps(stem: str):
    return recognizer(stem).transducer_steps()


@torch.inference_mode()
def ctc_logp(stem: str, clip: str) -> torch.Tensor:
    """Our CTC head on NeMo's encoder frames: log-probs [T, V+1]."""
    return recognizer(stem).model.ctc_decoder(encoder(stem, clip))[0]


def distinct(hyps: list[dict]) -> list[dict]:
    """A reference N-best list with each token sequence once, at its first (best) place."""
    seen, out = set(), []
    for h in hyps:
        if tuple(h["tokens"]) not in seen:
            seen.add(tuple(h["tokens"]))
            out.append(h)
    return out
