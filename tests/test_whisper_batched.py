"""Batched Whisper (transcribe/whisper/lockstep.py): `transcribe([...], batch_size=N)` runs the
inputs' window loops in lockstep, and each input's result must be the one it gets alone.

What must be equal is equal: token ids, texts, segment bounds, compression ratios, temperatures,
word and token times. Floats computed from the batched products may differ in their last bits,
since a row of a batched matrix product rounds differently from the same row alone (relative
~1e-7 per operation): an average log-prob sums up to 224 such log-probs of order one, so it may
move by ~1e-6 (measured on the 37 dev clips, jfk, the sample and two long inputs, batch_size 8,
with and without word timestamps, at 1 and 2 threads: at most 1.4e-6, every token, text, segment
and word time equal); the no-speech probability is one softmax (measured: at most 5.5e-7). The tolerances, 1e-5, are
ten times those. Word and token probabilities come from the word alignment, which runs per input
as in the single path, on the input's row of the batched encoder's output (measured: equal to
the last bit); they get the same 1e-5. A token decision would flip only where two logits are within
~1e-6 of each other: none does on this data (every greedy choice of the long-form reference leads
by >= 0.014, see test_whisper_longform); should one ever flip, that input is to be named here,
not the tolerance widened.
"""
from __future__ import annotations

import json
import threading

import numpy as np
import torch
import pytest

from transcribe.errors import TranscribeError
from transcribe.whisper import lockstep

from .conftest import AUDIO, REPO

TOL = 1e-5  # log-probs and probabilities, batched vs alone (see the module's docstring)


@pytest.fixture(scope="module")
def asr():
    import transcribe

    return transcribe.load_model()


_PCM: dict = {}


def pcm(name: str) -> np.ndarray:
    from transcribe.audio import load_audio

    if name not in _PCM:
        path = {"jfk": AUDIO / "jfk.wav", "sample": REPO / "samples" / "sample.wav"}.get(name, AUDIO / "dev" / name)
        _PCM[name] = load_audio(str(path), 16000)
    return _PCM[name]


def dev_names() -> list[str]:
    return [json.loads(line)["audio"] for line in (AUDIO / "dev" / "manifest.jsonl").read_text().splitlines()]


def long_input(first: int, seconds: float) -> np.ndarray:
    """Dev clips from the `first`-th on, 0.5 s of silence after each, cut to `seconds`."""
    parts = []
    for name in dev_names()[first:]:
        parts += [pcm(name), np.zeros(8000, np.float32)]
    x = np.concatenate(parts)
    assert len(x) >= seconds * 16000
    return x[: int(seconds * 16000)]


def assert_same(alone, together):
    """`together` (from a batch) is `alone` (the input by itself), to the tolerances above."""
    assert together.text == alone.text
    assert together.language == alone.language and together.duration == alone.duration
    assert len(together.segments) == len(alone.segments)
    for a, b in zip(alone.segments, together.segments):
        assert (b.text, b.start, b.end, b.compression_ratio, b.temperature) == (
            a.text, a.start, a.end, a.compression_ratio, a.temperature)
        assert b.avg_logprob == pytest.approx(a.avg_logprob, abs=TOL)
        assert b.no_speech_prob == pytest.approx(a.no_speech_prob, abs=TOL)
        assert [(w.word, w.start, w.end) for w in b.words] == [(w.word, w.start, w.end) for w in a.words]
        assert [w.confidence for w in b.words] == pytest.approx([w.confidence for w in a.words], abs=TOL)
    assert [(t.id, t.text, t.start, t.end) for t in together.tokens] == [(t.id, t.text, t.start, t.end) for t in alone.tokens]
    assert [t.confidence for t in together.tokens] == pytest.approx([t.confidence for t in alone.tokens], abs=TOL)


class Spy:
    """Records the batched searches: their row counts and the padding of their merged caches."""

    def __init__(self, monkeypatch):
        self.rows, self.pads = [], []
        greedy, merge = lockstep.batched_greedy, lockstep.merge_caches

        def spy_greedy(asr, initials, sot_indexes, cross):
            self.rows.append(len(initials))
            return greedy(asr, initials, sot_indexes, cross)

        def spy_merge(*args):
            cache = merge(*args)
            self.pads.append(cache.pad)
            return cache

        monkeypatch.setattr(lockstep, "batched_greedy", spy_greedy)
        monkeypatch.setattr(lockstep, "merge_caches", spy_merge)


def test_batch_equals_single(asr, monkeypatch):
    """Short and long inputs together, more inputs than the batch holds: each input's result is
    the one it gets alone. The long ones' later windows carry prompts (their earlier text) of
    different lengths, batched with first windows that have none: left-padded rows."""
    names = ["jfk", "sample", "ls_61-70968-0002.wav", "cv_19105945.wav", "fleurs_en_002.wav", "mfa_thoughts.wav"]
    inputs = [pcm(n) for n in names] + [long_input(0, 75.0), long_input(10, 48.0)]
    alone = [asr.transcribe(x) for x in inputs]
    spy = Spy(monkeypatch)
    together = asr.transcribe(inputs, batch_size=4)
    assert len(together) == len(inputs)
    for a, b in zip(alone, together):
        assert_same(a, b)
    assert max(spy.rows) == 4 and len(spy.rows) >= 3
    assert any(p is not None and len(set(p)) > 1 for p in spy.pads), spy.pads  # rows of different lengths met
    assert sum(len(a.segments) for a in alone[-2:]) >= 8


def test_word_timestamps_batch_equals_single(asr):
    inputs = [pcm("jfk"), long_input(3, 45.0), pcm("cv_18820498.wav")]
    alone = [asr.transcribe(x, word_timestamps=True) for x in inputs]
    together = asr.transcribe(inputs, batch_size=8, word_timestamps=True)
    for a, b in zip(alone, together):
        assert a.words and a.tokens
        assert_same(a, b)


def test_batched_greedy_with_different_prompts_and_prefix(asr):
    """The batched search itself, against decode_window row by row: three windows whose forced
    tokens are 1 (no prompt), 1 + 8 + 1 (a prompt) and 1 + 40 + 1 + 1 (a prompt and a prefix)
    long; the timestamp rules start sampling at a different index in each row."""
    t = asr.tokenizer
    windows = [asr.window_mel(pcm(n)) for n in ("jfk", "cv_19105945.wav", "fleurs_en_002.wav")]
    words = "the quick brown fox jumps over the lazy dog and runs away into the woods " * 3
    prompts = [[], t.encode(" And so my fellow Americans, ask not what")[:8], t.encode(" " + words)[:40]]
    prefixes = [(), (), t.encode(" The")]
    assert [len(p) for p in prompts] == [0, 8, 40] and len(prefixes[2]) == 1
    cross = asr.encode(torch.stack(windows))
    forced = [asr.initial_tokens("en", "transcribe", p, True, f) for p, f in zip(prompts, prefixes)]
    assert [len(f[0]) for f in forced] == [1, 10, 43]
    got = lockstep.batched_greedy(asr, [f[0] for f in forced], [f[1] for f in forced], cross)
    for j, (w, p, f) in enumerate(zip(windows, prompts, prefixes)):
        want = asr.decode_window(w, language="en", prompt=p, prefix=f)
        assert got[j].tokens == want.tokens and len(want.tokens[0]) > 5
        assert got[j].sum_logprobs == pytest.approx(want.sum_logprobs, abs=TOL * len(want.tokens[0]))
        assert got[j].no_speech_probs == pytest.approx(want.no_speech_probs, abs=TOL)


def test_per_input_decodings_in_a_batch(asr):
    """Beam search (per input, on the batched encoder's rows) and the sampling fallback (each input
    with its own generator seeded as when alone) give each input its own result too."""
    inputs = [pcm("jfk"), pcm("cv_19105945.wav"), pcm("mfa_thoughts.wav")]
    for opts in (dict(beam_size=3), dict(logprob_threshold=0.0, temperature=(0.0, 1.0), best_of=2,
                                         no_speech_threshold=None)):
        alone = [asr.transcribe(x, **opts) for x in inputs]
        together = asr.transcribe(inputs, batch_size=3, **opts)
        for a, b in zip(alone, together):
            assert_same(a, b)
    assert all(s.temperature == 1.0 for s in together[0].segments)  # the fallback did sample


def test_random_multilingual_model_in_a_batch():
    """A multilingual model detects each input's language and decodes with its language and task
    tokens (the small random model of tests/whisper_random.py: its text is noise, failing the
    checks, so the sampling fallback runs too; one fallback temperature, two samples, to keep it
    short: openai-whisper's sampling is one multinomial draw per token over the whole vocabulary)."""
    from .test_whisper_multilingual import random_asr

    m = random_asr("51865")
    inputs = [pcm("jfk"), pcm("cv_19105945.wav"), long_input(0, 40.0)]
    for opts in (dict(temperature=(0.0, 1.0), best_of=2), dict(task="translate", language="de", temperature=0.0)):
        alone = [m.transcribe(x, **opts) for x in inputs]
        together = m.transcribe(inputs, batch_size=3, **opts)
        for a, b in zip(alone, together):
            assert_same(a, b)
        if "language" not in opts:
            assert any(s.temperature == 1.0 for a in alone for s in a.segments)  # the fallback sampled


def test_one_input_or_batch_size_one_take_the_single_path(asr, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("batched path taken")

    monkeypatch.setattr(lockstep, "transcribe_batch", refuse)
    x = pcm("cv_17767698.wav")
    one = asr.transcribe(x, batch_size=8)
    assert [r.text for r in asr.transcribe([x, x], batch_size=1)] == [one.text] * 2
    assert asr.transcribe([x], batch_size=8)[0].text == one.text
    for bad in (0, -1, 2.0, True):
        with pytest.raises(TranscribeError, match="batch_size"):
            asr.transcribe(x, batch_size=bad)


def test_batches_from_several_threads(asr):
    """One model, two threads each transcribing a batch: nothing of one call leaks into the other."""
    inputs = [[pcm("jfk"), pcm("mfa_thoughts.wav")], [pcm("cv_19105945.wav"), pcm("sample")]]
    want = [[r.text for r in asr.transcribe(xs, batch_size=2)] for xs in inputs]
    got = [None, None]

    def run(k):
        got[k] = [r.text for r in asr.transcribe(inputs[k], batch_size=2)]

    threads = [threading.Thread(target=run, args=(k,)) for k in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert got == want


def test_batched_tensors_are_made_on_the_model_device(asr, monkeypatch):
    """Every tensor of a batched transcription is made where the weights are (the harness of
    tests/test_whisper_device.py: under the meta device context, a tensor made with no device is a
    meta one, and MixedDevices refuses it), left-padded rows included; the result is the normal
    one. (Word alignment runs per input, as in test_whisper_device's "words" case.)"""
    from transcribe.runtime import model_call

    from .test_whisper_device import MixedDevices

    inputs = [pcm("jfk"), long_input(3, 35.0), long_input(10, 38.0)]
    normal = asr.transcribe(inputs, batch_size=3)
    spy = Spy(monkeypatch)
    with model_call(asr.threads), torch.device("meta"), MixedDevices():
        meta = asr.transcribe(inputs, batch_size=3)
    assert [r.to_dict() for r in meta] == [r.to_dict() for r in normal]
    assert any(p is not None and len(set(p)) > 1 for p in spy.pads), spy.pads
