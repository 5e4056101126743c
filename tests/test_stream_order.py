"""What a stream hands out is in time order, in every session type (issue 26, items 3 and 10).

- `drain()`: words and events sorted by time (a word's start, an event's time), an event after every
  word that ends before it, word times non-overlapping (start >= the previous word's end), every
  word of the committed text drained: for cache-aware Parakeet (TDT, CTC), the EOU model (a
  cache-aware RNN-T with <EOU>/<EOB>), buffered Parakeet (TDT, RNN-T, CTC heads) and buffered
  Whisper, on real clips;
- `transcribe --stream --format jsonl`: every word line after a partial that has that word at its
  place, an utterance's whole text shown before its end-of-utterance event, and the word and event
  lines exactly what `drain()` gives for other feed sizes;
- the README's streaming example, run as written (a tiny cache-aware model for "streaming.nemo",
  `microphone()` the pieces of a real clip): it prints the whole stream's text and drains every word.
"""
from __future__ import annotations

import contextlib
import io
import json
import random
import re

import numpy as np
import pytest

import transcribe
from transcribe import cli
from transcribe.audio import load_audio
from transcribe.results import Word
from transcribe.streaming import CommitToken, StreamEvent, StreamingSession
from transcribe.text.sentencepiece import SentencePieceTokenizer
from transcribe.nemo.checkpoint import read_nemo

from .conftest import AUDIO, MODELS, REPO, TINY, two_utterances_wav

JFK = AUDIO / "jfk.wav"
DEV = AUDIO / "dev"
EOU = MODELS / "tiny-eou-streaming.nemo"
WHISPER = "default"  # the package's default model (Whisper tiny.en)

# Session type -> (model, clips). The clips are those where the old code broke an order rule for
# that type, where it did (see the report of issue 26); every type's jsonl broke the partial rule.
CASES = {
    "cache-aware-tdt": (TINY / "tiny-tdt-streaming-random.nemo", [JFK, DEV / "ls_1089-134691-0001.wav"]),
    "cache-aware-ctc": (TINY / "tiny-ctc-streaming-random.nemo", [JFK, DEV / "ls_1089-134691-0001.wav"]),
    "eou": (EOU, [JFK, "two-utterances", DEV / "cv_17767698.wav", DEV / "picovoice_diarization_3spk.wav"]),
    "buffered-tdt": (TINY / "tiny-tdt-fit.nemo", [JFK, DEV / "cv_19733184.wav", DEV / "fleurs_en_001.wav"]),
    "buffered-rnnt": (TINY / "tiny-rnnt-fit.nemo", [JFK, DEV / "cv_17767698.wav"]),
    "buffered-ctc": (TINY / "tiny-ctc-fit.nemo", [JFK, "two-utterances"]),
    "buffered-whisper": (WHISPER, [JFK]),
}


def _clip(c):
    return two_utterances_wav() if c == "two-utterances" else c


_MODELS: dict = {}


def _model(name):
    if name not in _MODELS:
        if name == WHISPER:
            _MODELS[name] = transcribe.load_model()
        else:
            _MODELS[name] = transcribe.load_model(str(name))
    return _MODELS[name]


def _time(item) -> float:
    return item.start if isinstance(item, Word) else item.time


def check_time_order(items: list) -> None:
    """Words and events in time order, word times monotonic and non-overlapping."""
    times = [_time(x) for x in items]
    assert times == sorted(times), [(getattr(x, "word", None) or x.type, _time(x)) for x in items]
    words = [x for x in items if isinstance(x, Word)]
    assert all(w.start <= w.end for w in words)
    for a, b in zip(words, words[1:]):
        assert b.start >= a.end, (a, b)  # no overlap
    for i, e in enumerate(items):
        if isinstance(e, StreamEvent):
            assert all(not (isinstance(x, Word) and x.end < e.time) for x in items[i + 1:]), e


def drained(model, pcm, seed):
    """drain() after every piece (random sizes) and after finalize: the items, and the committed text."""
    rng = random.Random(seed)
    s = model.stream()
    items, text = [], []
    i = 0
    while i < len(pcm):
        n = rng.choice([160, 1000, 1600, 4000, 16000])
        s.feed(pcm[i:i + n])
        i += n
        items += s.drain()
        text.append(s.take_new_text())
    s.finalize()
    items += s.drain()
    text.append(s.take_new_text())
    return items, "".join(text)


def _item(d: dict):
    if d["type"] == "word":
        return Word(d["word"], d["start"], d["end"], d["confidence"])
    return StreamEvent(d["type"], d["token"], d["frame"], d["time"])


def check_jsonl(lines: list[dict]) -> list:
    """Each word line comes after a partial that has the word at its place (the k-th word of the
    utterance is the partial's k-th word), and an utterance's whole text is the last partial before
    its end-of-utterance event. -> the word and event lines as items."""
    partial, k, items = None, 0, []
    for d in lines[:-1]:
        if d["type"] == "partial":
            partial = d["text"]
        elif d["type"] == "word":
            assert partial is not None and partial.split()[k:k + 1] == [d["word"]], (d, partial, k)
            k += 1
            items.append(_item(d))
        else:
            if d["type"] == "eou":
                assert partial is not None and len(partial.split()) == k, (d, partial)  # the whole utterance
                k = 0
            items.append(_item(d))
    return items


@pytest.mark.parametrize("case", list(CASES))
def test_drain_and_jsonl_are_in_time_order(case, capsys):
    name, clips = CASES[case]
    model = _model(name)
    runs = {}
    for k, c in enumerate(clips):  # drain() first, on every clip
        clip = _clip(c)
        items, text = runs[clip] = drained(model, load_audio(clip, sample_rate=16000), seed=k)
        check_time_order(items)
        # Every word of the committed text is drained, in order.
        assert [w.word for w in items if isinstance(w, Word)] == text.split(), clip
    for clip, (items, _) in runs.items():  # then the command's jsonl
        argv = ["--stream", str(clip), "--format", "jsonl"] + ([] if name == WHISPER else ["--model", str(name)])
        assert cli.main(argv) == 0
        out = capsys.readouterr().out
        lines = [json.loads(x) for x in out.splitlines()]
        assert lines[-1]["type"] == "final"
        printed = check_jsonl(lines)
        # The lines are drain()'s items: the same for other feed sizes (the same chunks or windows).
        assert printed == items, clip


# ---------------------------------------------------------------- scripted sessions (the rules alone)
@pytest.fixture(scope="module")
def sp():
    return SentencePieceTokenizer(read_nemo(TINY / "tiny-tdt-fit.nemo").tokenizer)


class Scripted(StreamingSession):
    """Commits scripted tokens (id, start frame, end frame) at finalize; `events` maps ids to event types."""

    def __init__(self, sp, script, events):
        super().__init__(decode=sp.decode, piece=sp.piece, punctuation=set(), frame_seconds=lambda f: 0.08 * f,
                         chunk_ms=80, lookahead_ms=0, special=events)
        self.script = script

    def _accept(self, samples):
        pass

    def _flush(self):
        self._commit([CommitToken(i, a, b, a) for i, a, b in self.script])

    def _restart(self):
        pass


def test_an_eob_comes_after_the_word_before_it(sp):
    """The word open when <EOB> came was said before it: it is drained before the event, not
    after (the old session kept it until the next word started)."""
    eob = sp.encode("a")[0]
    hello, world, good = (sp.encode(w) for w in ("hello", "world", "good"))
    script = [(i, 2 * k, 2 * k + 1) for k, i in enumerate(hello + world)]
    n = len(script)
    script += [(eob, 2 * n, 2 * n)] + [(i, 2 * (n + 1 + k), 2 * (n + 1 + k) + 1) for k, i in enumerate(good)]
    s = Scripted(sp, script, {eob: "eob"})
    s.finalize()
    items = s.drain()
    assert [getattr(x, "word", None) or x.type for x in items] == ["hello", "world", "eob", "good"]
    check_time_order(items)


def test_rnnt_words_on_one_frame_do_not_overlap(sp):
    """RNN-T gives each token one frame, and several tokens may come on the same frame: the
    words' spans would overlap; a word ends where the next starts at the latest."""
    script = [(sp.encode(w)[0], f, f + 1) for w, f in (("and", 3), ("so", 3), ("my", 3), ("fellow", 5))]
    s = Scripted(sp, script, {})
    s.finalize()
    words = s.drain_words()
    assert [(w.start, w.end) for w in words] == [(0.24, 0.24), (0.24, 0.24), (0.24, 0.32), (0.4, 0.48)]
    assert [t.end for t in s.tokens()] == [0.32, 0.32, 0.32, 0.48]  # the tokens keep the model's times
    check_time_order(words)


# ---------------------------------------------------------------- the end of a stream (item 3)
def readme_example() -> str:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    m = re.search(r"```python\n(import transcribe\nmodel = transcribe\.load_model\(\"streaming\.nemo\"\).*?)```",
                  readme, re.S)
    assert m, "README's streaming example"
    return m.group(1)


@pytest.mark.parametrize("name,clip,seconds", [
    (EOU, "two-utterances", None),  # two utterances, each ended by <EOU>
    (EOU, "two-utterances", 5.0),  # stopped in the middle of the second: "...even h" comes at the end
    (TINY / "tiny-ctc-streaming-random.nemo", JFK, None),  # CTC: the last frames' text comes at the end
    (TINY / "tiny-tdt-streaming-random.nemo", JFK, None),  # the last word is finished at the end
], ids=["eou-two-utterances", "eou-cut", "ctc-jfk", "tdt-jfk"])
def test_readme_streaming_example_prints_the_whole_text_and_drains_every_word(name, clip, seconds):
    code = readme_example()
    assert code.count('"streaming.nemo"') == 1 and "microphone()" in code
    code = code.replace('"streaming.nemo"', repr(str(name)))
    pcm = (load_audio(_clip(clip), sample_rate=16000) * 32767).astype(np.int16)
    if seconds is not None:
        pcm = pcm[: int(seconds * 16000)]

    def microphone():  # 100 ms pieces of a real clip, as int16 samples and as s16le bytes
        for i in range(0, len(pcm), 1600):
            piece = pcm[i:i + 1600]
            yield piece.tobytes() if i % 3200 else piece

    ns = {"microphone": microphone}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), ns)
    printed, latency = out.getvalue().rsplit("Latency(", 1)
    assert latency.endswith(")\n") and "\n" not in latency[:-1]  # print(live.latency): the last line
    # The session's final text for the whole clip: the audio fed at once, finalized, all text taken.
    ref = _model(name).stream(att_context_size=[70, 1])
    ref.feed(pcm)
    final = ref.finalize()
    whole = ref.take_new_text()
    assert printed == whole + "\n" and whole.strip()  # all of it, then the newline of the last print
    live, items = ns["live"], ns["items"]
    assert final == live.text() == whole.split("\n")[-1]  # finalize(): the last utterance's final text
    words = [x.word for x in items if isinstance(x, Word)]
    assert words == printed.split() == [w.word for w in ref.drain_words()]  # every word drained
    assert live.drain() == [] and live.take_new_text() == ""  # nothing left behind
    check_time_order(items)


def test_the_end_of_a_with_block_leaves_the_rest_to_take():
    """finalize() by the end of a `with` block (or called twice) takes nothing: the last text and
    words are still there after the block, and finalize() returns the final text."""
    model = _model(TINY / "tiny-tdt-streaming-random.nemo")
    pcm = load_audio(JFK, sample_rate=16000)
    text, words = [], []
    with model.stream() as live:
        for i in range(0, len(pcm), 1600):
            live.feed(pcm[i:i + 1600])
            text.append(live.take_new_text())
            words += live.drain_words()
        inside = "".join(text)
    rest = live.take_new_text()
    last = live.drain_words()
    assert rest and last  # the end came only with the block's end
    ref = model.stream()
    ref.feed(pcm)
    assert ref.finalize() == ref.text() == ref.finalize()
    assert inside + rest == ref.take_new_text()
    assert [w.word for w in words + last] == [w.word for w in ref.drain_words()]
    assert live.finalize() == live.text() and live.take_new_text() == "" and live.drain() == []
