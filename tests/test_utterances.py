"""Live sessions cut at pauses (transcribe/utterances.py) for models without word times, on the tiny Granite
Speech model: an utterance is committed once the pause after it has arrived, decoded exactly as the offline
pipeline decodes the same audio; silence alone commits nothing; memory holds only the open utterance."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import transcribe
from transcribe.audio import load_audio

HERE = Path(__file__).parent
AUDIO = HERE.parent.parent / "shared" / "audio"
MODEL = HERE / "models" / "granite_speech" / "g40"


@pytest.fixture(scope="module")
def asr():
    return transcribe.load_model(str(MODEL))


def _two_utterances():
    a = load_audio(str(AUDIO / "jfk.wav"), 16000)
    b = load_audio(str(AUDIO / "dev" / "ls_1089-134691-0001.wav"), 16000)
    return a, b, np.concatenate([a, np.zeros(32000, np.float32), b])


def test_each_utterance_is_committed_after_its_pause_as_offline_decodes_it(asr):
    a, b, pcm = _two_utterances()
    s = asr.stream(pause_s=1.2)  # jfk's own pauses are shorter: the 2 s of silence is the one cut
    commits = []
    for i in range(0, len(pcm), 8000):
        s.feed(pcm[i:i + 8000])
        new = s.take_new_text()
        if new:
            commits.append(((i + 8000) / 16000, new, [w for w in s.drain_words()]))
    s.finalize()
    commits.append((len(pcm) / 16000, s.take_new_text(), list(s.drain_words())))
    assert len(commits) == 2
    first_at, first_text, first_words = commits[0]
    cut = first_words[0].start  # every word of an utterance is placed at its cut
    assert len(a) / 16000 < cut < len(a) / 16000 + 2.0 and first_at >= cut + 1.2 - 0.5
    assert all(w.start == w.end == cut for w in first_words)
    want = asr.transcribe(pcm[: int(round(cut * 16000))], sample_rate=16000).text
    assert first_text.strip() == want
    rest = asr.transcribe(pcm[int(round(cut * 16000)):], sample_rate=16000).text
    assert commits[1][1].strip() == rest
    assert s.text().strip() == (want + " " + rest).strip()


def test_silence_commits_nothing_and_the_held_audio_stays_bounded(asr):
    s = asr.stream(pause_s=0.5, max_piece_s=10.0)
    for _ in range(40):  # 20 s of silence
        s.feed(np.zeros(8000, np.float32))
        assert s._held_n <= 10.5 * 16000
    assert s.finalize() == "" and s.latency.committed_ms >= 0


def test_stream_options_are_checked(asr):
    from transcribe.errors import OptionValueError

    with pytest.raises(OptionValueError, match="nbest"):
        asr.stream(nbest=2, beam_size=2)
    with pytest.raises(OptionValueError, match="pause_s"):
        asr.stream(pause_s=0.0)
