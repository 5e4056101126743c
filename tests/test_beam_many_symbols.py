"""The default RNN-T beam, mAES and malsd where a hypothesis emits many tokens on one frame: NeMo's
default beam and mAES put no bound on them (greedy's max_symbols is not theirs), and neither do ours by
default; NeMo's malsd_batch bounds them by its beam.max_symbols (default 10), as ours does.

Parity: NeMo 3.0.0's N-best lists (tests/references/nemo_beam/, made by
tools/nemo_beam_many_symbols_reference.py) on two fitted models run on dev clips they were not trained
on, where NeMo's best hypothesis puts up to 23 tokens on one frame: built-rnnt-padto16-nonorm (plain
RNN-T, 128 mels, pad_to 16, no normalisation) and tiny-eou-many-symbols (cache-aware streaming RNN-T
with <EOU>/<EOB>, tools/train_tiny_eou.py --variant many-symbols). Our searches replay them on NeMo's
own encoder frames, through the recognizer's beam path (parakeet/beams.py) for the default knobs.

Then the work guard that replaces the cap (search/transducer_beam.py's module docstring): it raises on
a frame that never ends, and stays far from the parity models' frames.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
import torch

import transcribe.search.transducer_beam as tb
from transcribe.parakeet import beams
from transcribe.search.maes import MaesOptions, maes
from transcribe.search.malsd import malsd_batch

from . import beam_refs as br
from .table_steps import table_steps, uniform_table

STEMS = ["built-rnnt-padto16-nonorm", "tiny-eou-many-symbols"]
# Scores: an RNN-T score is a float64 sum of ~100-150 float32 log-probabilities (a blank or a token
# per step); our joint runs the same float32 arithmetic in another order (batched predictor, other
# matrix blocking), which moves each log-prob by ~1e-7, so the sums agree within 1e-4 (measured:
# <= 1.8e-5 over these references, while their neighbouring hypotheses differ by far more).
SCORE_TOL = 1e-4


@pytest.fixture(autouse=True)
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _cases(strategy: str):
    return [pytest.param(stem, i, id=f"{stem}-{r['clip']}-b{r['beam_size']}-{'norm' if r['score_norm'] else 'raw'}"
                         f"-steps{r['options'].get('maes_num_steps', '')}-cap{r['options'].get('max_symbols', '')}")
            for stem in STEMS for i, r in enumerate(br.runs(stem, "rnnt", strategy))]


def _per_frame(timestamps) -> int:
    return max(Counter(timestamps).values()) if timestamps else 0


def _via_recognizer(stem: str, run: dict, beam: str):
    """The recognizer's beam path (parakeet/beams.search_transducer) on NeMo's frames."""
    enc = br.projected(stem, run["clip"])
    opts = beams.BeamOptions(beam_size=run["beam_size"], nbest=run["beam_size"], beam=beam,
                             score_norm=run["score_norm"], hotwords=None, lm=None, lm_weight=0.0)
    return beams.search_transducer(br.recognizer(stem), enc[None], torch.tensor([enc.shape[0]]), opts, None)[0]


def _assert_same(got, want):
    assert [g.ids for g in got] == [w["tokens"] for w in want]
    for g, w in zip(got, want):
        assert g.score == pytest.approx(w["score"], abs=SCORE_TOL)
        # NeMo's RNN-T timestamps (default beam and mAES) are the emission frames.
        assert g.frames == w["timestamp"] and g.durations == [1] * len(g.ids)


@pytest.mark.parametrize("stem", STEMS)
def test_the_references_cover_many_tokens_on_one_frame(stem):
    """On each model, NeMo's best hypothesis puts more than 10 tokens on one frame in some default-beam
    run and in some mAES run, on clips the model was not trained on (the stored count is checked
    against the stored timestamps)."""
    ref = br.reference(stem)
    assert not {c["path"] for c in ref["clips"]} & set(ref["trained_on"])
    for strategy in ("beam", "maes"):
        counts = []
        for r in br.runs(stem, "rnnt", strategy):
            best = r["hypotheses"][0]
            assert _per_frame(best["timestamp"]) == r["best_max_tokens_per_frame"]
            counts.append(r["best_max_tokens_per_frame"])
        assert max(counts) > 10, (strategy, counts)


@pytest.mark.parametrize("stem,index", _cases("beam"))
def test_default_beam_matches_nemo(stem, index):
    run = br.runs(stem, "rnnt", "beam")[index]
    _assert_same(_via_recognizer(stem, run, "default"), run["hypotheses"])


@pytest.mark.parametrize("stem,index", _cases("maes"))
def test_maes_matches_nemo(stem, index):
    run = br.runs(stem, "rnnt", "maes")[index]
    o = run["options"]
    if o == {"maes_num_steps": 2, "maes_prefix_alpha": 1, "maes_expansion_beta": 2, "maes_expansion_gamma": 2.3}:
        got = _via_recognizer(stem, run, "maes")  # NeMo's default knobs: the recognizer's own path
    else:
        enc = br.projected(stem, run["clip"])
        knobs = MaesOptions(o["maes_num_steps"], o["maes_prefix_alpha"], o["maes_expansion_beta"],
                            o["maes_expansion_gamma"])
        got = maes(enc, enc.shape[0], br.steps(stem), beam_size=run["beam_size"], options=knobs,
                   score_norm=run["score_norm"])
    _assert_same(got, run["hypotheses"])


@pytest.mark.parametrize("stem,index", _cases("malsd_batch"))
def test_malsd_matches_nemo(stem, index):
    """NeMo's malsd_batch with its default bound (10 tokens a frame, the recognizer's path) and with a
    bound of 32 (the search itself), under which its best puts up to 23 tokens on one frame."""
    run = br.runs(stem, "rnnt", "malsd_batch")[index]
    cap = run["options"]["max_symbols"]
    if cap == 10:
        got = _via_recognizer(stem, run, "malsd")
    else:
        enc = br.projected(stem, run["clip"])
        got = malsd_batch(enc[None], torch.tensor([enc.shape[0]]), replace(br.steps(stem), max_symbols=cap),
                          beam_size=run["beam_size"], score_norm=run["score_norm"])[0]
    assert run["hypotheses"][0]["token_duration"] is None
    _assert_same(got, run["hypotheses"])


def test_the_malsd_references_go_past_10_tokens_a_frame_only_with_the_bound_raised():
    for stem in STEMS:
        counts = {}
        for r in br.runs(stem, "rnnt", "malsd_batch"):
            assert _per_frame(r["hypotheses"][0]["timestamp"]) == r["best_max_tokens_per_frame"]
            cap = r["options"]["max_symbols"]
            counts[cap] = max(counts.get(cap, 0), r["best_max_tokens_per_frame"])
        assert counts[10] <= 10 < counts[32], (stem, counts)


def test_an_explicit_cap_is_an_opt_in_that_departs_from_nemo():
    """The model's steps carry greedy's max_symbols (10); given to the default beam it caps the tokens
    per frame, and NeMo's best (23 tokens on one frame) is lost: the recognizer clears it."""
    stem = "built-rnnt-padto16-nonorm"
    run = next(r for r in br.runs(stem, "rnnt", "beam") if r["best_max_tokens_per_frame"] > 20)
    enc = br.projected(stem, run["clip"])
    steps = br.steps(stem)
    assert steps.max_symbols == 10
    capped = tb.rnnt_beam(enc, enc.shape[0], steps, beam_size=run["beam_size"], score_norm=run["score_norm"])
    assert all(_per_frame(h.frames) <= 10 for h in capped)
    assert capped[0].ids != run["hypotheses"][0]["tokens"]
    free = tb.rnnt_beam(enc, enc.shape[0], replace(steps, max_symbols=None), beam_size=run["beam_size"],
                        score_norm=run["score_norm"])
    _assert_same(free, run["hypotheses"])


# -- the work guard ----------------------------------------------------------------------------------
def _saturated(tdt: bool, vocab: int = 4, frames: int = 3):
    """Token 0 certain on every frame (TDT: with duration 0 certain), no cap: no frame ever ends."""
    tab = uniform_table(frames, vocab, 2 if tdt else 0, fill=-200.0)
    tab[:, :, 0] = 200.0
    if tdt:
        tab[:, :, vocab + 1] = 200.0
    enc, steps = table_steps(tab, vocab, [0, 1] if tdt else None)
    return enc, replace(steps, max_symbols=None)


def _count_expansions(monkeypatch) -> Counter:
    """Counts the predictor calls of the default beam by frame (one per expansion)."""
    calls = Counter()
    logits = tb._Predictor.logits

    def counting(self, h, frame, t):
        calls[t] += 1
        return logits(self, h, frame, t)

    monkeypatch.setattr(tb._Predictor, "logits", counting)
    return calls


@pytest.mark.parametrize("tdt", [False, True], ids=["rnnt", "tdt"])
@pytest.mark.parametrize("beam", [1, 3])
def test_the_guard_raises_on_a_frame_that_never_ends(tdt, beam, monkeypatch):
    """The saturated model makes NeMo's loop run forever; ours raises a clear error once the frame has
    taken MAX_POPS_PER_BEAM * beam expansions (lowered here to keep the test short), not a list."""
    calls = _count_expansions(monkeypatch)
    monkeypatch.setattr(tb, "MAX_POPS_PER_BEAM", 40)
    enc, steps = _saturated(tdt)
    fn = tb.tdt_beam if tdt else tb.rnnt_beam
    msg = rf"took {40 * beam} expansions .* on encoder frame 0 without the frame ending"
    with pytest.raises(ValueError, match=msg):
        fn(enc, 3, steps, beam_size=beam)
    assert calls == {0: 40 * beam}


@pytest.mark.parametrize("tdt", [False, True], ids=["rnnt", "tdt"])
def test_the_guard_at_its_real_size_ends_the_search(tdt):
    """At its real size (beam 1: 2,048 expansions, each token sequence 1 longer than the last), the
    guard is reached and raises."""
    enc, steps = _saturated(tdt)
    fn = tb.tdt_beam if tdt else tb.rnnt_beam
    with pytest.raises(ValueError, match=f"took {tb.MAX_POPS_PER_BEAM} expansions"):
        fn(enc, 3, steps, beam_size=1)


def test_an_explicit_cap_still_ends_a_saturated_frame():
    """With a cap the saturated frames end (no error): the opt-in bounds tokens per frame."""
    for tdt in (False, True):
        enc, steps = _saturated(tdt)
        fn = tb.tdt_beam if tdt else tb.rnnt_beam
        got = fn(enc, 3, replace(steps, max_symbols=4), beam_size=2)
        assert got and all(_per_frame(h.frames) <= 4 for h in got)


@pytest.mark.parametrize("stem", STEMS)
def test_the_guard_is_far_from_the_parity_models(stem, monkeypatch):
    """The expansions a frame takes on the parity models, at their largest beam: at most a few per beam
    slot, a hundredth of the guard or less."""
    calls = _count_expansions(monkeypatch)
    worst = 0
    for r in br.runs(stem, "rnnt", "beam"):
        if r["beam_size"] != 8 or not r["score_norm"]:
            continue
        calls.clear()
        enc = br.projected(stem, r["clip"])
        tb.rnnt_beam(enc, enc.shape[0], replace(br.steps(stem), max_symbols=None), beam_size=8)
        worst = max(worst, max(calls.values()) / 8)
    assert 1 <= worst <= tb.MAX_POPS_PER_BEAM / 100


def test_maes_needs_no_guard():
    """mAES (NeMo's too) expands a frame for at most num_steps rounds: on the saturated model, which
    never lets the default beam leave a frame, it ends with at most num_steps tokens per frame."""
    enc, steps = _saturated(False)
    for rounds in (2, 5):
        got = maes(enc, 3, steps, beam_size=2, options=MaesOptions(num_steps=rounds, expansion_beta=1))
        assert got and max(_per_frame(h.frames) for h in got) == rounds
