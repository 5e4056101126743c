"""`transcribe --stream FILE|-`: live text on the command line, against the tiny Parakeet models
(a cache-aware streaming one, and an offline one through buffered windows)."""
from __future__ import annotations

import io
import json
import os
import queue
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import soundfile as sf

import transcribe
from transcribe import cli, stream_cli, stream_print
from transcribe.audio import load_audio

from .conftest import AUDIO, REPO, TINY

STREAMING = TINY / "tiny-tdt-streaming-random.nemo"
OFFLINE = TINY / "tiny-tdt-fit.nemo"
JFK = AUDIO / "jfk.wav"


def run(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def jfk():
    return load_audio(JFK, sample_rate=16000)


@pytest.fixture(scope="module")
def streaming_model():
    return transcribe.load_model(str(STREAMING))


def api_stream(model, pcm, piece=1600, **options):
    """What the API gives for the same audio: all committed text (utterances joined by a space),
    the tokens, words and events of the whole stream."""
    s = model.stream(**options)
    text, tokens, words, events = [], [], [], []
    for i in range(0, len(pcm), piece):
        s.feed(pcm[i:i + piece])
        text.append(s.take_new_text())
        tokens += s.take_new_tokens()
        words += s.drain_words()
        events += s.drain_events()
    s.finalize()
    text.append(s.take_new_text())
    tokens += s.take_new_tokens()
    words += s.drain_words()
    events += s.drain_events()
    joined = " ".join(u.strip() for u in "".join(text).split("\n") if u.strip())
    return joined, tokens, words, events, s


def jsonl(out: str) -> list[dict]:
    assert out.endswith("\n")
    return [json.loads(line) for line in out.splitlines()]


def check_lines(lines: list[dict]) -> dict:
    """Every line is one of the documented kinds; the final one is last and alone."""
    kinds = [d["type"] for d in lines]
    assert kinds[-1] == "final" and kinds.count("final") == 1
    for d in lines[:-1]:
        assert d["type"] in ("partial", "word", "eou", "eob"), d
        keys = {"partial": {"type", "text"}, "word": {"type", "word", "start", "end", "confidence", "speaker"}}
        assert set(d) == keys.get(d["type"], {"type", "token", "frame", "time"}), d
    final = lines[-1]
    assert set(final) == {"type", "text", "tokens", "words", "events"}
    for t in final["tokens"]:
        assert set(t) == {"id", "text", "frame", "start", "end", "confidence"}
    # The word lines are the final's words, in order; the same for events.
    assert [{k: v for k, v in d.items() if k != "type"} for d in lines if d["type"] == "word"] == final["words"]
    assert [d for d in lines if d["type"] in ("eou", "eob")] == final["events"]
    return final


def test_jsonl_file_equals_the_api(capsys, jfk, streaming_model):
    code, out, err = run(capsys, "--stream", JFK, "--model", STREAMING, "--format", "jsonl")
    assert code == 0 and err == ""
    lines = jsonl(out)
    final = check_lines(lines)
    text, tokens, words, events, session = api_stream(streaming_model, jfk)
    assert final["text"] == text and text == session.text().strip() and text
    assert [t["id"] for t in final["tokens"]] == [t.id for t in tokens] and tokens
    assert [(t["frame"], t["start"], t["end"]) for t in final["tokens"]] == [(t.frame, t.start, t.end) for t in tokens]
    assert final["words"] == [w.to_dict() for w in words] and words
    assert final["events"] == [e.to_dict() for e in events]
    assert " ".join(w["word"] for w in final["words"]) == text
    partials = [d["text"] for d in lines if d["type"] == "partial"]
    assert len(partials) > 3 and partials[-1] == text  # text grows as the audio goes in
    assert all(a != b for a, b in zip(partials, partials[1:]))


def test_txt_prints_the_committed_text(capsys, jfk, streaming_model):
    code, out, err = run(capsys, "--stream", JFK, "--model", STREAMING)
    assert code == 0 and err == ""
    assert out == api_stream(streaming_model, jfk)[0] + "\n"


def test_att_context_and_eou_reset_reach_the_session(capsys, jfk, streaming_model):
    code, out, err = run(capsys, "--stream", JFK, "--model", STREAMING, "--att-context", "70,1", "--no-eou-reset")
    assert code == 0 and err == ""
    assert out == api_stream(streaming_model, jfk, att_context_size=[70, 1], eou_reset=False)[0] + "\n"
    assert out != api_stream(streaming_model, jfk)[0] + "\n"  # another lookahead: other text


def test_bad_att_context_is_the_models_clean_error(capsys):
    code, out, err = run(capsys, "--stream", JFK, "--model", STREAMING, "--att-context", "71,2")
    assert code == 2 and out == ""
    assert err.startswith("transcribe: error: ") and len(err.splitlines()) == 1
    assert "[71, 2] is not one of this model's lookaheads [[70, 13], [70, 6], [70, 1], [70, 0]]" in err


@pytest.mark.parametrize("argv, words", [
    (["--stream", "x.wav", "--att-context", "x"], "expected two integers LEFT,RIGHT"),
    (["--stream", "x.wav", "--att-context", "70"], "expected two integers LEFT,RIGHT"),
    (["--stream", "x.wav", "--att-context", "70,13,1"], "expected two integers LEFT,RIGHT"),
    (["--stream", "x.wav", "y.wav"], "--stream takes its one input itself"),
    (["--stream", "x.wav", "-f", "srt"], "--stream writes txt or jsonl, not --format srt"),
    (["--stream", "x.wav", "-f", "json"], "--stream writes txt or jsonl, not --format json"),
    (["--stream", "x.wav", "--beam-size", "4"], "--beam-size does not apply to --stream"),
    (["--stream", "-", "-o", "out", "--batch-size", "2"], "--output-dir, --batch-size do not apply to --stream"),
    (["--stream", "x.wav", "--max-line-width", "20"], "--max-line-width does not apply to --stream"),
    (["--stream", "x.wav", "--temperature", "0.2", "--word-timestamps"], "--word-timestamps, --temperature do not"),
    (["x.wav", "--realtime"], "--realtime needs --stream"),
    (["x.wav", "--att-context", "70,13", "--no-eou-reset"], "--att-context, --no-eou-reset need --stream"),
    (["x.wav", "-f", "jsonl"], "--format jsonl needs --stream"),
    ([], "the following arguments are required: AUDIO (or --stream FILE|-)"),
])
def test_usage_errors_exit_2_before_loading(capsys, monkeypatch, argv, words):
    monkeypatch.setattr(transcribe, "load_model", lambda *a, **k: pytest.fail("model loaded"), raising=False)
    code, out, err = run(capsys, "--model", STREAMING, *argv)
    assert code == 2 and out == ""
    assert "transcribe: error: " in err and words in err


def test_stream_usage_errors_import_no_heavy_module():
    """Usage errors of the stream options answer before PyTorch or an audio decoder is imported
    (numpy is left to tests/test_cli.py's check of the whole command)."""
    code = ("import sys\nfrom transcribe.cli import main\n"
            "rcs = [main(a) for a in (['--stream', 'x.wav', '--beam-size', '2'], ['--stream', '-', '-f', 'vtt'],\n"
            "       ['--stream', 'x.wav', '--att-context', 'x'], ['x.wav', '--realtime'], ['--help'])]\n"
            "assert rcs == [2, 2, 2, 2, 0], rcs\n"
            "heavy = sorted(m for m in ('torch', 'soundfile', 'av') if m in sys.modules)\n"
            "assert not heavy, heavy\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "--stream FILE|-" in out.stdout and "--att-context L,R" in out.stdout


def test_missing_file_is_told_before_the_model_loads(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(transcribe, "load_model", lambda *a, **k: pytest.fail("model loaded"), raising=False)
    code, out, err = run(capsys, "--stream", tmp_path / "nothing.wav", "--model", STREAMING)
    assert code == 2 and out == "" and "nothing.wav" in err and len(err.splitlines()) == 1


def test_model_without_stream_and_options_of_another_family(capsys, monkeypatch):
    class NoStream:
        name, family, sample_rate = "old-model", "whisper", 16000

    monkeypatch.setattr(transcribe, "load_model", lambda *a, **k: NoStream(), raising=False)
    code, out, err = run(capsys, "--stream", JFK, "--model", "m")
    assert code == 2 and out == ""
    assert err == "transcribe: error: old-model cannot stream (its model family has no streaming session)\n"
    code, out, err = run(capsys, "--stream", JFK, "--model", "m", "--att-context", "70,13", "--head", "ctc")
    assert code == 2 and out == ""
    assert "old-model is a whisper model and does not take --att-context or --head" in err


def test_whisper_options_with_a_parakeet_stream(capsys):
    code, out, err = run(capsys, "--stream", JFK, "--model", STREAMING, "--language", "en")
    assert code == 2 and out == ""
    assert "tiny-tdt-streaming-random.nemo is a Parakeet model and does not take --language" in err


def test_realtime_feeds_a_file_at_the_speed_of_its_audio(capsys, monkeypatch):
    clock = {"now": 100.0}
    fed = []

    class FakeTime:
        @staticmethod
        def monotonic():
            return clock["now"]

        @staticmethod
        def sleep(s):
            assert s > 0
            clock["now"] += s

    monkeypatch.setattr(stream_cli, "time", FakeTime)
    pieces = stream_cli._file_pieces(np.zeros(16000 * 2 + 800, np.float32), realtime=True)
    for samples, rate in pieces:
        fed.append((round(clock["now"] - 100.0, 6), len(samples), rate))
    assert fed[0] == (0.1, 1600, 16000) and fed[-1] == (2.05, 800, 16000) and len(fed) == 21
    assert all(b[0] > a[0] for a, b in zip(fed, fed[1:]))
    clock["now"] = 100.0
    assert len(list(stream_cli._file_pieces(np.zeros(16000, np.float32), realtime=False))) == 10
    assert clock["now"] == 100.0  # no waiting without --realtime


class ScriptedSession:
    """What a session hands out in one update: an utterance ends and the next starts."""

    def __init__(self):
        from transcribe.results import Token, Word
        from transcribe.streaming import StreamEvent

        self.new = ["hello world\nnext", " one"]
        self.tokens = [[Token(5, " hello", 0.0, 0.5, 0.9, 0)], []]
        # In the order they happened: "world" starts on the frame of the <EOU> token and is
        # finished before the event.
        self.items = [[Word("hello", 0.0, 0.5, 0.9), Word("world", 1.04, 1.04, 0.8),
                       StreamEvent("eou", "<EOU>", 13, 1.04), Word("next", 1.12, 1.5, 0.7)], []]
        self.texts = ["next", "next one"]

    def take_new_text(self):
        return self.new.pop(0) if self.new else ""

    def take_new_tokens(self):
        return self.tokens.pop(0) if self.tokens else []

    def drain(self):
        return self.items.pop(0) if self.items else []

    def text(self):
        return self.texts.pop(0) if self.texts else "next one"


def test_output_order_and_final_over_utterances():
    out = io.StringIO()
    w = stream_print.JsonLines(out)
    s = ScriptedSession()
    w.update(s)
    w.update(s)
    w.update(s)  # nothing new: no line
    w.close(s)
    lines = jsonl(out.getvalue())
    # Each word after a partial that contains it: the ended utterance's whole text before its
    # words and its event (text() no longer has it), then the next utterance's.
    assert [(d["type"], d.get("word") or d.get("text") or d.get("token")) for d in lines] == [
        ("partial", "hello world"), ("word", "hello"), ("word", "world"), ("eou", "<EOU>"), ("partial", "next"),
        ("word", "next"), ("partial", "next one"), ("final", "hello world next one")]
    final = check_lines(lines)
    assert final["tokens"] == [{"id": 5, "text": " hello", "frame": 0, "start": 0.0, "end": 0.5, "confidence": 0.9}]
    assert final["events"] == [{"type": "eou", "token": "<EOU>", "frame": 13, "time": 1.04}]
    out = io.StringIO()
    t = stream_print.Text(out)
    s = ScriptedSession()
    t.update(s)
    t.update(s)
    t.close(s)
    assert out.getvalue() == "hello world\nnext one\n"  # one line per utterance, a newline at the end
    out = io.StringIO()
    t = stream_print.Text(out)
    s.new = ["last\n"]
    t.update(s)
    t.close(s)
    assert out.getvalue() == "last\n"


class ChunkedStdin:
    """A binary stdin whose reads return at most `size` bytes (odd sizes split samples); raises
    KeyboardInterrupt after `interrupt_after` reads when given."""

    def __init__(self, data: bytes, size: int, interrupt_after=None):
        self.data, self.size, self.reads, self.interrupt_after = data, size, 0, interrupt_after

    def read1(self, n):
        self.reads += 1
        if self.interrupt_after is not None and self.reads > self.interrupt_after:
            raise KeyboardInterrupt
        out, self.data = self.data[:min(n, self.size)], self.data[min(n, self.size):]
        return out


def s16le(pcm: np.ndarray) -> bytes:
    return (np.clip(pcm, -1, 1 - 1 / 32768) * 32768).astype("<i2").tobytes()


@pytest.mark.parametrize("size", [1001, 3200])
def test_stdin_raw_pcm_in_odd_pieces(capsys, monkeypatch, jfk, streaming_model, size):
    raw = s16le(jfk)
    monkeypatch.setattr(stream_cli, "_stdin", lambda: ChunkedStdin(raw, size))
    code, out, err = run(capsys, "--stream", "-", "--model", STREAMING, "-f", "jsonl")
    assert code == 0 and err == ""
    quantized = np.frombuffer(raw, "<i2").astype(np.float32) / 32768.0
    assert check_lines(jsonl(out))["text"] == api_stream(streaming_model, quantized)[0]


def test_stdin_wav_header_is_skipped_and_followed(capsys, monkeypatch, jfk, streaming_model):
    """arecord writes a WAV header unless told `-t raw`: it is read, and its channels followed."""
    raw = s16le(jfk)
    quantized = np.frombuffer(raw, "<i2").astype(np.float32) / 32768.0
    want = api_stream(streaming_model, quantized)[0]
    buf = io.BytesIO()
    sf.write(buf, np.stack([quantized, quantized], axis=1), 16000, format="WAV", subtype="PCM_16")
    monkeypatch.setattr(stream_cli, "_stdin", lambda: ChunkedStdin(buf.getvalue(), 777))
    code, out, err = run(capsys, "--stream", "-", "--model", STREAMING)
    assert code == 0 and err == "" and out == want + "\n"
    buf = io.BytesIO()
    sf.write(buf, quantized, 16000, format="WAV", subtype="FLOAT")
    monkeypatch.setattr(stream_cli, "_stdin", lambda: ChunkedStdin(buf.getvalue(), 3200))
    code, out, err = run(capsys, "--stream", "-", "--model", STREAMING)
    assert code == 2 and "a WAV stream must be 16-bit PCM" in err


def test_odd_byte_at_the_end_is_noted(capsys, monkeypatch):
    monkeypatch.setattr(stream_cli, "_stdin", lambda: ChunkedStdin(bytes(16001), 3200))
    code, out, err = run(capsys, "--stream", "-", "--model", STREAMING, "-f", "jsonl")
    assert code == 0 and jsonl(out)[-1]["type"] == "final"
    assert err == "transcribe: note: 1 byte at the end of the input (not a whole sample) ignored\n"


def test_ctrl_c_finalizes_and_prints_the_final_line(capsys, monkeypatch, jfk, streaming_model):
    raw = s16le(jfk)
    monkeypatch.setattr(stream_cli, "_stdin", lambda: ChunkedStdin(raw, 3200, interrupt_after=30))
    code, out, err = run(capsys, "--stream", "-", "--model", STREAMING, "-f", "jsonl")
    assert code == 130 and err == "transcribe: interrupted\n"
    quantized = np.frombuffer(raw[:30 * 3200], "<i2").astype(np.float32) / 32768.0
    final = check_lines(jsonl(out))
    assert final["text"] == api_stream(streaming_model, quantized)[0] and final["text"]


def test_stdin_text_comes_out_before_the_input_ends(jfk):
    """A live pipe: lines are printed while stdin is still open, then the final line at EOF."""
    raw = s16le(jfk)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-m", "transcribe", "--stream", "-", "--model", str(STREAMING),
                             "--format", "jsonl", "--att-context", "70,1"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO, env=env)
    lines: queue.Queue = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout] + [lines.put(None)], daemon=True)
    reader.start()
    try:
        half = len(raw) // 2 // 3200 * 3200
        for i in range(0, half, 3200):  # 100 ms pieces with pauses, as a recorder writes them
            proc.stdin.write(raw[i:i + 3200])
            proc.stdin.flush()
            time.sleep(0.002)
        first = lines.get(timeout=60)  # stdin is still open: this line is live output
        assert first is not None, proc.stderr.read().decode()
        assert json.loads(first)["type"] in ("partial", "word")
        assert proc.poll() is None
        proc.stdin.write(raw[half:])
        proc.stdin.close()
        rest = []
        while (line := lines.get(timeout=120)) is not None:
            rest.append(line)
        assert proc.wait(timeout=60) == 0, proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    final = check_lines([json.loads(x) for x in [first] + rest])
    assert final["text"] and final["words"] and final["tokens"]


def test_offline_model_streams_through_buffered_windows(capsys, jfk):
    code, out, err = run(capsys, "--stream", JFK, "--model", OFFLINE, "-f", "jsonl")
    assert code == 0 and err == ""
    final = check_lines(jsonl(out))
    text = api_stream(transcribe.load_model(str(OFFLINE)), jfk)[0]
    assert final["text"] == text
    assert text == "and so my fellow americans ask not what your country can do for you ask what you can do for your country"
    code, out, err = run(capsys, "--stream", JFK, "--model", OFFLINE, "--att-context", "70,13")
    assert code == 2 and out == "" and "not a cache-aware streaming model" in err
    code, out, err = run(capsys, "--stream", JFK, "--model", OFFLINE, "--no-eou-reset")
    assert code == 2 and out == "" and "eou_reset applies to cache-aware streaming models only" in err


def test_two_utterances_print_two_eou_events_and_both_texts(capsys):
    """The issue's check: the trained EOU model on a two-utterance input (tools/train_tiny_eou.py)."""
    from .conftest import two_utterances_wav

    model = REPO / "tests/models/tiny-eou-streaming.nemo"
    code, out, _ = run(capsys, "--stream", str(two_utterances_wav()), "--model", str(model), "--format", "jsonl")
    assert code == 0
    lines = jsonl(out)
    final = check_lines(lines)
    events = [d for d in lines if d["type"] == "eou"]
    assert [(e["token"], e["frame"]) for e in events] == [("<EOU>", 32), ("<EOU>", 88)]
    assert final["text"] == "a golden fortune and a happy life he might even have been made amiable himself"
    assert [e["type"] for e in final["events"]] == ["eou", "eou"]
    code, out, _ = run(capsys, "--stream", str(two_utterances_wav()), "--model", str(model))
    assert out == "a golden fortune and a happy life\nhe might even have been made amiable himself\n"


class RepeatedUtterance(ScriptedSession):
    """Two utterances with the same words: "yes", its end, then "yes" again."""

    def __init__(self):
        from transcribe.results import Word
        from transcribe.streaming import StreamEvent

        self.new = ["yes\nyes"]  # in one update: the end of one and the next one's word
        self.tokens = [[]]
        self.items = [[Word("yes", 0.0, 0.4, 0.9), StreamEvent("eou", "<EOU>", 10, 0.8), Word("yes", 1.0, 1.4, 0.9)]]
        self.texts = ["yes"]

    def text(self):
        return "yes"


def test_an_utterance_repeating_the_last_ones_text_gets_its_partial():
    out = io.StringIO()
    w = stream_print.JsonLines(out)
    s = RepeatedUtterance()
    w.update(s)
    w.update(s)
    w.close(s)
    lines = jsonl(out.getvalue())
    # before the fix the second "yes" had no partial: the last one sent was "yes" too, an utterance ago
    assert [(d["type"], d["text"] if d["type"] in ("partial", "final") else d.get("word") or d.get("token"))
            for d in lines] == [("partial", "yes"), ("word", "yes"), ("eou", "<EOU>"), ("partial", "yes"),
                                ("word", "yes"), ("final", "yes yes")]
