"""Parakeet beam search through the API and the command line: N-best lists from audio, the best
hypothesis as the transcript (with word times), option errors, and the JSON `nbest` block."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

import transcribe
from transcribe.errors import TranscribeError
from transcribe.results import Transcript

from . import beam_refs
from .conftest import AUDIO, REPO, TINY
from .beam_refs import distinct as _distinct

JFK = str(AUDIO / "jfk.wav")
TDT = str(TINY / "tiny-tdt-fit.nemo")
LM = str(REPO / "tests" / "fixtures" / "lm" / "tiny3.arpa")


# From audio, our encoder's frames differ from NeMo's by ~1e-5 (tests/test_nemo_parity.py); over the
# 55 tokens and ~140 frames of jfk that moves a hypothesis score by well under 1e-3.
AUDIO_SCORE_TOL = 1e-3


@pytest.mark.parametrize("stem,head,strategy,beam", [
    ("tiny-tdt-fit", "tdt", "beam", "default"),
    ("tiny-tdt-fit", "tdt", "malsd_batch", "malsd"),
    ("tiny-tdt-fit", "tdt", "maes", "maes"),
    ("tiny-rnnt-fit", "rnnt", "beam", "default"),
    ("tiny-rnnt-fit", "rnnt", "malsd_batch", "malsd"),
    ("tiny-ctc-fit", "ctc", "beam_batch", None),
])
def test_nbest_from_audio_is_nemos(stem, head, strategy, beam):
    """transcribe(beam_size=4, nbest=4) on jfk: NeMo's N-best list (a token sequence listed once,
    at its best rank), its scores, and the best hypothesis as the transcript."""
    run = next(r for r in beam_refs.runs(stem, head, strategy)
               if r["clip"] == "jfk" and r["beam_size"] == 4 and r["score_norm"] and r["options"].get("beam_beta", 1.0) == 1.0)
    model = beam_refs.recognizer(stem)
    t = model.transcribe(JFK, beam_size=4, nbest=4, beam=beam)
    want = _distinct(run["hypotheses"])[:4]
    got = t.nbest.hypotheses
    assert [[tok.id for tok in h.tokens] for h in got] == [w["tokens"] for w in want]
    assert [h.score for h in got] == pytest.approx([w["score"] for w in want], abs=AUDIO_SCORE_TOL)
    assert t.nbest.beam == (beam or "ctc") and t.nbest.beam_size == 4
    best = got[0]
    assert t.text == best.text and [tok.id for tok in t.tokens] == [tok.id for tok in best.tokens]
    # the best hypothesis keeps its timestamps: words timed, in order, inside the audio
    assert [w.word for w in t.words] == t.text.split()
    assert all(0 <= w.start <= w.end <= t.duration + 0.08 for w in t.words)
    assert [w.start for w in t.words] == sorted(w.start for w in t.words)
    assert all(w.confidence is not None and 0 <= w.confidence <= 1 for w in t.words)
    for h in got:
        assert h.normalized_score == pytest.approx(h.score / (len(h.tokens) + 1))
        assert [tok.frame for tok in h.tokens] == sorted(tok.frame for tok in h.tokens)


def test_best_hypothesis_matches_greedy_words_when_the_text_agrees():
    """On the fitted model the beam's best is greedy's text; its word times are greedy's too."""
    model = beam_refs.recognizer("tiny-tdt-fit")
    greedy = model.transcribe(JFK)
    beam = model.transcribe(JFK, beam_size=4, beam="default")
    assert beam.text == greedy.text
    assert [(w.word, w.start, w.end) for w in beam.words] == [(w.word, w.start, w.end) for w in greedy.words]
    assert [w.confidence for w in beam.words] == pytest.approx([w.confidence for w in greedy.words], abs=1e-5)
    assert greedy.nbest is None and len(beam.nbest.hypotheses) == 1


def test_hotwords_add_their_weight_per_matched_token():
    """'ask not' occurs once in jfk's best hypothesis: boosting it raises that hypothesis's score by
    the weight times the phrase's tokens. (The score sums the hypothesis's alignments that the beam
    kept and merged; a stronger boost can keep a slightly different set of them, which moves the
    sum by ~5e-4 at weight 1.5.)"""
    model = beam_refs.recognizer("tiny-tdt-fit")
    plain = model.transcribe(JFK, beam_size=2, beam="default", score_norm=False)
    n_tok = len(model.tokenizer.encode("ask not"))
    boosted = model.transcribe(JFK, beam_size=2, beam="default", score_norm=False, hotwords=["ask not"], hotword_weight=0.5)
    assert boosted.text == plain.text and plain.text.count("ask not") == 1
    assert boosted.nbest.hypotheses[0].score - plain.nbest.hypotheses[0].score == pytest.approx(0.5 * n_tok, abs=1e-4)
    same = model.transcribe(JFK, beam_size=2, beam="default", score_norm=False, hotwords="ask not")
    assert same.nbest.hypotheses[0].score - plain.nbest.hypotheses[0].score == pytest.approx(1.5 * n_tok, abs=2e-3)


def test_ctc_language_model_enters_the_scores():
    model = beam_refs.recognizer("tiny-ctc-fit")
    plain = model.transcribe(JFK, beam_size=2, nbest=2)
    lm = model.transcribe(JFK, beam_size=2, nbest=2, lm=LM, lm_weight=0.5)
    assert lm.nbest.hypotheses[0].score != plain.nbest.hypotheses[0].score
    assert math.isfinite(lm.nbest.hypotheses[0].score)


@pytest.mark.parametrize("kwargs,msg", [
    (dict(beam_size=2, nbest=3), "nbest"),
    (dict(beam_size=0), "beam_size"),
    (dict(beam_size=2, beam="wide"), "unknown beam"),
    (dict(beam_size=2, lm=LM), "language model"),
    (dict(beam_size=2, hotword_weight=2.0), "hotword_weight needs hotwords"),
    (dict(beam_size=2, hotwords=["ask", " "]), "hotword"),
    (dict(beam_size=2, lm_weight=1.0), "lm_weight needs lm"),
])
def test_bad_beam_options_are_refused(kwargs, msg):
    with pytest.raises(TranscribeError, match=msg):
        beam_refs.recognizer("tiny-tdt-fit").transcribe(JFK, **kwargs)


def test_ctc_refuses_a_transducer_beam_and_a_bad_language_model(tmp_path):
    model = beam_refs.recognizer("tiny-ctc-fit")
    with pytest.raises(TranscribeError, match="transducer search"):
        model.transcribe(JFK, beam_size=2, beam="maes")
    bad = tmp_path / "bad.arpa"
    bad.write_text("not an arpa file\n")
    with pytest.raises(TranscribeError, match="language model"):
        model.transcribe(JFK, beam_size=2, lm=str(bad))
    with pytest.raises(TranscribeError, match="language model"):
        model.transcribe(JFK, beam_size=2, lm=str(tmp_path / "missing.arpa"))


def test_nbest_survives_a_json_round_trip():
    t = beam_refs.recognizer("tiny-tdt-fit").transcribe(JFK, beam_size=4, nbest=4)
    d = json.loads(json.dumps(t.to_dict()))
    assert list(d["nbest"]) == ["beam", "beam_size", "score_norm", "hypotheses"]
    assert list(d["nbest"]["hypotheses"][0]) == ["text", "score", "normalized_score", "tokens"]
    assert list(d["nbest"]["hypotheses"][0]["tokens"][0]) == ["id", "frame", "duration_frames", "start", "end"]
    assert Transcript.from_dict(d).to_dict() == d


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "transcribe", *args], capture_output=True, text=True, cwd=REPO,
                          env=dict(os.environ), timeout=300)


def test_cli_prints_the_nbest_block_with_word_times():
    """The issue's command: --beam-size 4 --nbest 4 --format json."""
    out = _cli(JFK, "--model", TDT, "--beam-size", "4", "--nbest", "4", "--format", "json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    nb = doc["nbest"]
    assert nb["beam"] == "malsd" and nb["beam_size"] == 4 and nb["score_norm"] is True
    assert 1 <= len(nb["hypotheses"]) <= 4 and nb["hypotheses"][0]["text"] == doc["text"]
    assert [w["word"] for w in doc["words"]] == doc["text"].split() and all("start" in w for w in doc["words"])
    scores = [h["normalized_score"] for h in nb["hypotheses"]]
    assert scores == sorted(scores, reverse=True)


@pytest.mark.parametrize("args,msg", [
    (["--model", TDT, "--nbest", "2"], "--nbest 2 needs --beam-size"),
    (["--model", TDT, "--beam-size", "2", "--lm", LM], "language model"),
    (["--model", TDT, "--hotword-weight", "2"], "--hotword-weight needs --hotwords"),
    (["--model", TDT, "--beam-size", "2", "--lm", "missing.arpa"], "no such file"),
    (["--beam-size", "2", "--hotwords", "a,b"], "tiny.en is a Whisper model and does not take --hotwords"),
    (["--beam-size", "2", "--beam", "maes"], "tiny.en is a Whisper model and does not take --beam"),
])
def test_cli_refuses_bad_beam_options_with_exit_2(args, msg):
    out = _cli(JFK, *args)
    assert out.returncode == 2 and msg in out.stderr, out.stderr
    assert out.stdout == ""


@pytest.mark.parametrize("stem", ["tiny-tdt-fit", "tiny-rnnt-fit"])
def test_malsd_records_each_tokens_logprob_and_confidence_as_the_path_gives_them(stem):
    """malsd keeps each survivor's token log-prob and confidence as it goes; they equal what the
    predictor and joint give along the finished path (beams.path_details, which the other beams
    use), within float32 noise of batched against one-row products."""
    import copy

    from transcribe.parakeet import beams
    from transcribe.search import malsd

    model = beam_refs.recognizer(stem)
    enc = beam_refs.projected(stem, "jfk")
    steps = model.transducer_steps()
    nb = malsd.malsd_batch(enc[None], [enc.shape[0]], steps, beam_size=4, confidence="entropy")[0]
    for h in nb:
        ref = copy.deepcopy(h)
        beams.path_details(enc, steps, ref, "entropy")
        assert len(h.logprobs) == len(h.confidences) == len(h.ids)
        assert h.logprobs == pytest.approx(ref.logprobs, abs=1e-5)
        assert h.confidences == pytest.approx(ref.confidences, abs=1e-5)


def test_whisper_refuses_parakeets_beam_options(default_whisper_dir):
    model = transcribe.load_model(str(default_whisper_dir))
    with pytest.raises(TranscribeError, match="is a Whisper model and does not take hotwords or nbest$"):
        model.transcribe(JFK, beam_size=2, nbest=2, hotwords=["a"])
    with pytest.raises(TranscribeError, match="does not take nbset"):
        model.transcribe(JFK, nbset=2)


def test_parakeet_names_whisper_options_and_unknown_ones():
    model = beam_refs.recognizer("tiny-tdt-fit")
    with pytest.raises(TranscribeError, match="tiny-tdt-fit.nemo is a Parakeet model and does not take patience$"):
        model.transcribe(JFK, patience=2.0)
    with pytest.raises(TranscribeError, match="does not take nbset"):
        model.transcribe(JFK, nbset=2)
