"""TDT models whose duration tables are not 0, 1, ..., D-1: our greedy search, default beam and
batched mALSD against NeMo 3.0.0's lists (tests/references/nemo_beam/, made by
tools/nemo_tdt_durations_reference.py), replayed on NeMo's own encoder frames.

Models (tests/models/, tests/models/BUILD_LOG_DURATIONS.json): durations [0, 1, 2, 4, 8] random and
fitted (built-tdt-80mel-lstm2-sub4), [0, 2, 4] random, [0, 1, 3] fitted. On these tables NeMo's
malsd_batch moves a hypothesis by a duration's index in the table, while its greedy and default beam
move by the table's value (search.malsd docstring); each of our searches matches its NeMo twin.

Scores: NeMo sums float32 log-probabilities, one or two per step, over up to ~280 steps (the random
[0, 2, 4] model on jfk reaches -675); our joint gives the same values to ~1e-6 each (matrix products
block differently) and the running float32 sum rounds at each step, one ulp being 6e-5 at 675. So:
1e-4 plus 8 float32 ulps of the score (measured differences: <= 6.1e-5). The order is compared
exactly: neighbours in every reference list lie at least 13 times further apart in the ranking key
than the sum of their two measured differences from NeMo (closest: the random [0, 2, 4] model, jfk,
malsd beam 8, normalized keys 5.7e-6 apart).
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from transcribe.search import transducer
from transcribe.search import transducer_beam as tb
from transcribe.search.malsd import malsd_batch, malsd_durations

from . import beam_refs as br
from .test_malsd import decode_tables, tdt_row
from .conftest import AUDIO

STEMS = ["built-tdt-random-d01248", "built-tdt-80mel-lstm2-sub4", "built-tdt-random-d024", "built-tdt-fit-d013"]
MAX_SYMBOLS = 10  # the references' max_symbols (malsd options, NeMo's greedy max_symbols_per_step)


def score_tol(score: float) -> float:
    return 1e-4 + 8 * float(np.spacing(np.float32(abs(score))))


def cases(strategy: str) -> list:
    return [pytest.param(stem, i, id=f"{stem}-{r['clip']}-b{r['beam_size']}-{'norm' if r['score_norm'] else 'raw'}")
            for stem in STEMS for i, r in enumerate(br.runs(stem, "tdt", strategy))]


def steps(stem: str):
    return replace(br.steps(stem), max_symbols=MAX_SYMBOLS)


def test_references_cover_two_non_contiguous_tables():
    tables = {tuple(br.reference(stem)["durations"]) for stem in STEMS}
    assert tables == {(0, 1, 2, 4, 8), (0, 2, 4), (0, 1, 3)}
    for stem in STEMS:
        settings = {(r["beam_size"], r["score_norm"]) for r in br.runs(stem, "tdt", "malsd_batch")}
        assert settings == {(1, True), (2, True), (4, True), (8, True), (2, False), (4, False)}
        assert all(r["options"] == {"max_symbols": MAX_SYMBOLS} for r in br.runs(stem, "tdt", "malsd_batch"))
        assert len(br.runs(stem, "tdt", "beam")) == 8 and len(br.runs(stem, "tdt", "greedy_batch")) == 2


@pytest.mark.parametrize("stem", STEMS)
def test_load_model_reads_the_duration_table(stem):
    """transcribe.load_model (beam_refs.recognizer) on a .nemo whose table is not 0..D-1: the steps
    carry the table as the config gives it, the joint has one output per duration."""
    ref = br.reference(stem)
    st = br.steps(stem)
    assert st.durations == tuple(ref["durations"])
    assert st.blank == ref["blank"] and st.max_symbols == MAX_SYMBOLS
    enc = br.projected(stem, ref["clips"][0]["name"])
    pred, _ = st.predict(torch.tensor([st.blank]), st.init_state(1))
    assert st.joint(enc[:1], pred).shape[-1] == st.blank + 1 + len(ref["durations"])


@pytest.mark.parametrize("stem,i", cases("malsd_batch"))
def test_malsd_equals_nemo(stem, i):
    run = br.runs(stem, "tdt", "malsd_batch")[i]
    enc = br.projected(stem, run["clip"])[None]
    got = malsd_batch(enc, torch.tensor([enc.shape[1]]), steps(stem), beam_size=run["beam_size"],
                      score_norm=run["score_norm"])[0]
    want = run["hypotheses"]
    assert [h.ids for h in got] == [w["tokens"] for w in want]
    for h, w in zip(got, want):
        assert h.score == pytest.approx(w["score"], abs=score_tol(w["score"]))
        assert h.frames == w["timestamp"]
        assert h.durations == w["token_duration"]  # NeMo's: the index in the table
        assert h.normalized_score == pytest.approx(h.score / (len(h.ids) + 1), rel=1e-6)
    key = [h.normalized_score if run["score_norm"] else h.score for h in got]
    assert key == sorted(key, reverse=True)


@pytest.mark.parametrize("stem", STEMS)
def test_malsd_moves_by_the_index_not_the_value(stem):
    """What sets NeMo's malsd apart on these tables: in its lists a token reports its duration's
    index, which is how far the hypothesis moved. The references exercise it: some token of each
    model's lists has an index whose table value differs (there, moving by the value would be
    another search)."""
    table = br.reference(stem)["durations"]
    assert malsd_durations(table) == tuple(range(len(table)))
    differing = 0
    for run in br.runs(stem, "tdt", "malsd_batch"):
        for w in run["hypotheses"]:
            assert all(0 <= d < len(table) for d in w["token_duration"])
            assert all(f + d <= g for f, d, g in zip(w["timestamp"], w["token_duration"], w["timestamp"][1:]))
            differing += sum(table[d] != d for d in w["token_duration"])
    assert differing > 0


@pytest.mark.parametrize("stem", STEMS)
def test_malsd_batch_of_both_clips_equals_nemo(stem):
    """Both clips as one batch (the shorter padded): each utterance gets NeMo's list for it alone."""
    clips = [c["name"] for c in br.reference(stem)["clips"]]
    encs = [br.projected(stem, c) for c in clips]
    t_max = max(e.shape[0] for e in encs)
    batch = torch.stack([torch.cat([e, torch.full((t_max - e.shape[0], e.shape[1]), 3.0)]) for e in encs])
    lengths = torch.tensor([e.shape[0] for e in encs])
    for beam, norm in ((4, True), (2, False)):
        together = malsd_batch(batch, lengths, steps(stem), beam_size=beam, score_norm=norm)
        for clip, got in zip(clips, together):
            run = next(r for r in br.runs(stem, "tdt", "malsd_batch")
                       if r["clip"] == clip and (r["beam_size"], r["score_norm"]) == (beam, norm))
            assert [(h.ids, h.frames, h.durations) for h in got] == \
                [(w["tokens"], w["timestamp"], w["token_duration"]) for w in run["hypotheses"]]


@pytest.mark.parametrize("stem,i", cases("greedy_batch"))
def test_greedy_equals_nemo(stem, i):
    """Greedy moves by the table's value. NeMo's greedy score on a CPU sums, over the tokens, the
    token's log-softmax over the joint's whole output (tokens, blank and durations together);
    ours sums token log-probs. NeMo's is recomputed here along our tokens and frames."""
    run = br.runs(stem, "tdt", "greedy_batch")[i]
    (want,) = run["hypotheses"]
    enc = br.projected(stem, run["clip"])
    st = steps(stem)
    (got,) = transducer.greedy_batch(enc[None], torch.tensor([enc.shape[0]]), st, confidence=None)
    assert got.ids == want["tokens"]
    assert got.frames == want["timestamp"]
    assert got.durations == want["token_duration"]
    table = br.reference(stem)["durations"]
    assert all(d in table for d in got.durations)
    one = transducer.greedy_one(enc, enc.shape[0], st, confidence=None)
    assert (one.ids, one.frames, one.durations) == (got.ids, got.frames, got.durations)
    pred, state = st.predict(torch.tensor([st.blank]), st.init_state(1))
    nemo_score = 0.0
    for tok, frame in zip(got.ids, got.frames):
        nemo_score += float(torch.log_softmax(st.joint(enc[frame:frame + 1], pred)[0], dim=-1)[tok])
        pred, state = st.predict(torch.tensor([tok]), state)
    assert nemo_score == pytest.approx(want["score"], abs=score_tol(want["score"]))
    assert got.score == pytest.approx(sum(got.logprobs), abs=1e-9)


@pytest.mark.parametrize("stem,i", cases("beam"))
def test_default_beam_equals_nemo(stem, i):
    """The default TDT beam moves by the table's value. NeMo records time + duration as a token's
    timestamp; at beam 1 its blank falls back to the smallest positive duration (our option
    blank_fallback="smallest", see tests/test_transducer_beam.py)."""
    run = br.runs(stem, "tdt", "beam")[i]
    enc = br.projected(stem, run["clip"])
    got = tb.tdt_beam(enc, enc.shape[0], steps(stem), beam_size=run["beam_size"], score_norm=run["score_norm"],
                      blank_fallback="smallest")
    want = run["hypotheses"]
    assert [h.ids for h in got] == [w["tokens"] for w in want]
    table = br.reference(stem)["durations"]
    for h, w in zip(got, want):
        assert h.score == pytest.approx(w["score"], abs=score_tol(w["score"]))
        assert [f + d for f, d in zip(h.frames, h.durations)] == w["timestamp"]
        assert all(d in table for d in h.durations)


FITTED = ["built-tdt-80mel-lstm2-sub4", "built-tdt-fit-d013"]
# From audio our encoder's frames differ from NeMo's by ~1e-5 (tests/test_nemo_parity.py); over jfk's
# tokens and frames that moves a score by well under 1e-3 (as in tests/test_parakeet_beam.py).
AUDIO_SCORE_TOL = 1e-3


@pytest.mark.parametrize("stem", FITTED)
def test_transcribe_from_audio_with_malsd_and_greedy(stem):
    """The whole path (load_model, our encoder, the recognizer's malsd) on jfk: NeMo's malsd N-best
    list at beam 4 and NeMo's greedy transcript."""
    model = br.recognizer(stem)
    run = next(r for r in br.runs(stem, "tdt", "malsd_batch")
               if r["clip"] == "jfk" and r["beam_size"] == 4 and r["score_norm"])
    t = model.transcribe(str(AUDIO / "jfk.wav"), beam_size=4, nbest=4, beam="malsd")
    seen, want = set(), []
    for w in run["hypotheses"]:  # a token sequence listed once, at its best rank
        if tuple(w["tokens"]) not in seen:
            seen.add(tuple(w["tokens"]))
            want.append(w)
    got = t.nbest.hypotheses
    assert [[tok.id for tok in h.tokens] for h in got] == [w["tokens"] for w in want]
    assert [h.score for h in got] == pytest.approx([w["score"] for w in want], abs=AUDIO_SCORE_TOL)
    greedy = next(r for r in br.runs(stem, "tdt", "greedy_batch") if r["clip"] == "jfk")
    assert [tok.id for tok in model.transcribe(str(AUDIO / "jfk.wav")).tokens] == greedy["hypotheses"][0]["tokens"]
    assert math.isfinite(got[0].score)


def test_hand_written_table_moves_by_the_index():
    """a = 0, blank = 1, durations (0, 2, 4), six frames, beam 1. a on frame 0 with the third
    duration (index 2, value 4) moves to frame 2, where a with index 1 moves to frame 3; blank with
    index 2 to frame 5, blank with index 1 past the end. Moving by the values would reach frame 4
    after the first a and never see the second."""
    blank_next = tdt_row(dict(a=.1, blank=.9), dict(d0=.05, d1=.9, d2=.05))
    table = torch.tensor([
        [tdt_row(dict(a=.9, blank=.1), dict(d0=.05, d1=.05, d2=.9))] * 2,   # frame 0 (context a, start)
        [blank_next] * 2,
        [tdt_row(dict(a=.9, blank=.1), dict(d0=.05, d1=.9, d2=.05))] * 2,   # frame 2
        [tdt_row(dict(a=.1, blank=.9), dict(d0=.05, d1=.05, d2=.9))] * 2,   # frame 3
        [blank_next] * 2,
        [blank_next] * 2,
    ])
    got = decode_tables([table], 1, (0, 2, 4), beam_size=1)[0]
    assert [(h.ids, h.frames, h.durations) for h in got] == [([0, 0], [0, 2], [2, 1])]
    assert got[0].score == pytest.approx(4 * math.log(.81), abs=1e-6)
