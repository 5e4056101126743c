"""Word n-gram LM (search.ngram): hand-computed backoff probabilities on tests/fixtures/lm/tiny3.arpa,
strict parsing errors, and the LM in the CTC beam (search.ctc_beam)."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from transcribe.search.ctc_beam import CtcBeamOptions, beam_search
from transcribe.search.ngram import LN10, NGramLM, load_arpa

ARPA = Path(__file__).resolve().parent / "fixtures" / "lm" / "tiny3.arpa"


@pytest.fixture(scope="module")
def lm() -> NGramLM:
    return load_arpa(ARPA)


# log10 probabilities of the fixture's sentences, worked out by hand from its entries.
HAND = [
    # the|<s> = -0.3 (2-gram); cat|<s> the = -0.1 (3-gram); sat|the cat = -0.05 (3-gram);
    # </s>|cat sat: no 3-gram -> bo(cat sat) -0.15 + </s>|sat -0.2.
    ("the cat sat", -0.3 - 0.1 - 0.05 + (-0.15 - 0.2)),
    # cat|<s>: no 2-gram -> bo(<s>) -0.5 + cat -1.2; the|<s> cat: "<s> cat" is no 2-gram (backoff 0)
    # -> the|cat: no 2-gram -> bo(cat) -0.2 + the -0.7; </s>|cat the: "cat the" unlisted (0)
    # -> </s>|the: bo(the) -0.3 + </s> -0.6.
    ("cat the", (-0.5 - 1.2) + (-0.2 - 0.7) + (-0.3 - 0.6)),
    # dog is <unk>: <unk>|<s> the: no 3-gram -> bo(<s> the) -0.4 + (<unk>|the: bo(the) -0.3 + <unk> -1.0);
    # </s>|the <unk>: unlisted context (0) -> </s>|<unk>: bo(<unk>) 0 + </s> -0.6.
    ("the dog", -0.3 + (-0.4 - 0.3 - 1.0) + (0.0 - 0.6)),
    # </s>|<s>: no 2-gram -> bo(<s>) -0.5 + </s> -0.6.
    ("", -0.5 - 0.6),
    # sat|<s> -> -0.5 - 1.0; sat|<s> sat: "<s> sat" unlisted -> sat|sat: bo(sat) -0.1 + sat -1.0;
    # </s>|sat sat: "sat sat" unlisted -> </s>|sat = -0.2 (2-gram).
    ("sat sat", (-0.5 - 1.0) + (-0.1 - 1.0) - 0.2),
]


@pytest.mark.parametrize("sentence,log10p", HAND)
def test_hand_computed_sentence_probabilities(lm, sentence, log10p):
    words = sentence.split()
    assert lm.sentence_log10(words) == pytest.approx(log10p, abs=1e-9)
    assert lm.sentence_logprob(words) == pytest.approx(log10p * LN10, abs=1e-9)
    # The incremental interface (what the beam uses) adds up to the same.
    state, total = lm.begin(), 0.0
    for w in words:
        lp, state = lm.score(state, w)
        total += lp
    assert total + lm.end_score(state) == pytest.approx(log10p * LN10, abs=1e-9)


def test_single_probabilities_and_states(lm):
    assert lm.order == 3 and lm.counts == [6, 5, 2] and lm.has_unk
    assert lm.log10_prob(["the", "cat"], "sat") == pytest.approx(-0.05)
    assert lm.log10_prob(["x", "y", "the", "cat"], "sat") == pytest.approx(-0.05)  # only order-1 words count
    assert lm.log10_prob([], "cat") == pytest.approx(-1.2)
    assert lm.log10_prob(["zebra"], "the") == pytest.approx(0.0 - 0.7)  # <unk> context, backoff 0
    _, state = lm.score(("<s>", "the"), "zebra")
    assert state == ("the", "<unk>")
    no_sentence = lm.sentence_log10(["the"], bos=False, eos=False)
    assert no_sentence == pytest.approx(-0.7)


def test_oov_without_unk_uses_oov_log10():
    text = ARPA.read_text().replace("ngram 1=6", "ngram 1=5")
    text = "\n".join(line for line in text.splitlines() if "<unk>" not in line)
    lm = NGramLM.from_arpa_text(text)
    assert not lm.has_unk
    # dog|<s> the: bo(<s> the) -0.4 + bo(the) -0.3 + OOV -100.
    assert lm.log10_prob(["<s>", "the"], "dog") == pytest.approx(-0.4 - 0.3 - 100.0)
    assert NGramLM.from_arpa_text(text, oov_log10=-7.0).log10_prob([], "dog") == pytest.approx(-7.0)


def test_kenlm_cross_check(lm):
    """KenLM (when installed: it builds from source, absent here) scores the fixture the same."""
    kenlm = pytest.importorskip("kenlm", reason="kenlm is not installed (optional cross-check)")
    model = kenlm.Model(str(ARPA))
    for sentence, _ in HAND:
        assert lm.sentence_log10(sentence.split()) == pytest.approx(model.score(sentence, bos=True, eos=True), abs=1e-4)


GOOD = ARPA.read_text()


def _bad(old, new, count=1):
    assert old in GOOD
    return GOOD.replace(old, new, count)


@pytest.mark.parametrize("text,match", [
    ("", r"no \\data\\"),
    (GOOD.replace("\\data\\", "\\dada\\"), r"no \\data\\"),
    (_bad("ngram 2=5", "ngram 2=6"), "5 found"),
    (_bad("ngram 2=5", "ngram 2=4"), "more 2-grams"),
    (_bad("ngram 3=2", "ngram three=2"), "bad count line"),
    (_bad("ngram 2=5\n", ""), "order 3 where order 2"),
    (_bad("-0.7\tthe", "-0.x7\tthe"), "bad log10 probability"),
    (_bad("-0.7\tthe", "nan\tthe"), "non-finite"),
    (_bad("the\t-0.3", "the\tinf"), "non-finite backoff"),
    (_bad("-0.7\tthe", "0.5\tthe"), "above 0"),
    (_bad("-0.4\tthe cat\t-0.25", "-0.4\tthe"), "needs a probability"),
    (_bad("-0.05\tthe cat sat", "-0.05\tthe cat sat\t-0.1"), "highest-order"),
    (_bad("-0.9\tcat </s>", "-0.9\tthe cat"), "duplicate"),
    (_bad("\\3-grams:", "\\4-grams:"), r"expected the \\3-grams"),
    (_bad("\\end\\", ""), r"expected \\end\\"),
    (_bad("-99\t<s>\t-0.5", "-99\t<S>\t-0.5"), "no <s> unigram"),
], ids=["empty", "no-data", "fewer", "more", "count-line", "order-gap", "bad-number", "nan", "inf-backoff",
        "prob-above-1", "field-count", "top-backoff", "duplicate", "section", "no-end", "no-bos"])
def test_malformed_files(text, match):
    with pytest.raises(ValueError, match=match):
        NGramLM.from_arpa_text(text)


def test_order_limit_and_file_errors(tmp_path):
    with pytest.raises(ValueError, match="above the limit"):
        NGramLM.from_arpa_text(GOOD, max_order=2)
    bad = tmp_path / "bad.arpa"
    bad.write_bytes(b"\\data\\\nngram 1=1\n\n\\1-grams:\n-1\t\xff\n\\end\\\n")
    with pytest.raises(ValueError, match="UTF-8"):
        load_arpa(bad)
    with pytest.raises(ValueError, match="bad.arpa:6"):
        (tmp_path / "bad.arpa").write_text("\\data\\\nngram 1=2\n\n\\1-grams:\n-1\t<s>\n-1\n\\end\\\n")
        load_arpa(bad)


# CTC beam with the LM. Pieces (token ids): 0 "▁the", 1 "▁cat", 2 "▁hat", 3 "▁sat", blank 4.
# Frames: "▁the", then "▁hat" (0.45) slightly above "▁cat" (0.40), then "▁sat". Acoustically
# "the hat sat" wins by ln(0.45 / 0.40); the LM prefers "the cat sat" (log10 -0.8) over
# "the <unk> sat" (-0.3 - 1.7 - 1.0 - 0.2 = -3.2) by 2.4 log10 = 2.4 ln 10 nats, times lm_weight.
PIECES = ["\u2581the", "\u2581cat", "\u2581hat", "\u2581sat", "<blank>"]
LM_TABLE = [[0.9, 0.02, 0.02, 0.02, 0.04],
            [0.02, 0.40, 0.45, 0.02, 0.11],
            [0.02, 0.02, 0.02, 0.9, 0.04]]
GAP = math.log(0.45 / 0.40)
LM_GAP = 2.4 * LN10
W_STAR = GAP / LM_GAP


def _lm_beam(lm, **kw):
    logp = torch.tensor(LM_TABLE, dtype=torch.float64).log().float()
    return logp, beam_search(logp, 3, 4, CtcBeamOptions(beam_size=4, lm=lm, pieces=PIECES, **kw))


def test_lm_changes_the_ctc_winner(lm):
    logp, plain = _lm_beam(None)
    assert plain[0].ids == [0, 2, 3]
    assert lm.sentence_log10(["the", "hat", "sat"]) == pytest.approx(-3.2)
    _, below = _lm_beam(lm, lm_weight=W_STAR * 0.9)
    assert below[0].ids == [0, 2, 3]
    _, above = _lm_beam(lm, lm_weight=W_STAR * 1.1)
    assert above[0].ids == [0, 1, 3]
    _, default = _lm_beam(lm)
    best = default[0]
    assert best.ids == [0, 1, 3]
    # score = acoustic + beam_beta * tokens + lm_weight * ln P(sentence) + word_bonus * words
    acoustic = float(logp[0, 0] + logp[1, 1] + logp[2, 3])
    assert best.score == pytest.approx(acoustic + 3 * 1.0 + 0.5 * (-0.8 * LN10) + 1.0 * 3, abs=1e-5)
    _, bonus = _lm_beam(lm, word_bonus=0.0, beam_beta=0.0)
    assert bonus[0].score == pytest.approx(acoustic + 0.5 * (-0.8 * LN10), abs=1e-5)


def test_lm_words_span_tokens(lm):
    """A word made of several pieces is scored once, when the next word starts (or at the end)."""
    pieces = ["\u2581the", "\u2581c", "at", "\u2581sat", "<blank>"]
    logp = torch.tensor([[0.9, 0.02, 0.02, 0.02, 0.04], [0.02, 0.9, 0.02, 0.02, 0.04],
                         [0.02, 0.02, 0.9, 0.02, 0.04], [0.02, 0.02, 0.02, 0.9, 0.04]]).log()
    (best, *_) = beam_search(logp, 4, 4, CtcBeamOptions(beam_size=4, lm=lm, pieces=pieces, lm_weight=1.0, word_bonus=0.0,
                                                        beam_beta=0.0))
    assert best.ids == [0, 1, 2, 3]
    assert best.score == pytest.approx(float(sum(logp[t, t] for t in range(4))) - 0.8 * LN10, abs=1e-5)


def test_lm_argument_errors(lm):
    logp = torch.tensor(LM_TABLE).log()
    with pytest.raises(ValueError, match="pieces"):
        beam_search(logp, 3, 4, CtcBeamOptions(lm=lm))
    with pytest.raises(ValueError, match="pieces"):
        beam_search(logp, 3, 4, CtcBeamOptions(lm=lm, pieces=PIECES[:3]))
    with pytest.raises(ValueError, match="lm_weight"):
        beam_search(logp, 3, 4, CtcBeamOptions(lm=lm, pieces=PIECES, lm_weight=math.inf))
