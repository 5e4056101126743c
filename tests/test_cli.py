"""The command line, against a fake model: outputs, files, batching, and every exit code."""
import io
import json
import runpy
import sys

import numpy as np
import pytest
import soundfile as sf

import transcribe
from transcribe import cli
from transcribe.jobs.progress import Progress
from transcribe.errors import ModelError, OptionsNotTaken, TranscribeError
from transcribe.results import Segment, Transcript, Word

SR = 16000


class FakeModel:
    """Stands in for a loaded model: `name`, `sample_rate`, `transcribe(list_of_audio, ...)`."""

    name = "fake-model"
    family = "parakeet"  # takes --head, refuses Whisper's options
    sample_rate = SR

    def __init__(self):
        self.calls = []
        self.refuse_len = None  # raise TranscribeError for an input of this many samples
        self.crash = False

    def check_options(self, **options):
        refused = set(options) - {"head"}
        if refused:
            raise OptionsNotTaken(self.name, "Parakeet", refused)

    def transcribe(self, audios, batch_size=8, timestamps=True, head=None):
        self.calls.append({"n": len(audios), "batch_size": batch_size, "timestamps": timestamps, "head": head})
        if self.crash:
            raise RuntimeError("boom")
        out = []
        for a in audios:
            assert isinstance(a, np.ndarray) and a.dtype == np.float32 and a.ndim == 1
            if len(a) == self.refuse_len:
                raise TranscribeError("input refused by the model")
            out.append(expected_transcript(len(a) / SR))
        return out


def expected_transcript(dur):
    text = f"heard {dur:.2f} seconds"
    words = [Word(w, dur * i / 3, dur * (i + 1) / 3, 0.5) for i, w in enumerate(text.split())]
    return Transcript(
        text=text, duration=dur, segments=[Segment(text=text, start=0.0, end=dur, words=words)],
        words=words, model=FakeModel.name)


@pytest.fixture
def fake(monkeypatch):
    model = FakeModel()
    model.load_kwargs = None

    def load_model(path_or_id, device="cpu", dtype=None, threads=None):
        if path_or_id == "missing-model":
            raise ModelError("missing-model: no such model file or known model id")
        if path_or_id == "bad-option":
            raise TranscribeError("bfloat16 is not supported on this device")
        model.load_kwargs = {"model": path_or_id, "device": device, "dtype": dtype, "threads": threads}
        return model

    monkeypatch.setattr(transcribe, "load_model", load_model, raising=False)
    monkeypatch.setattr(transcribe.loading, "load_model", load_model)  # what a batch worker calls
    return model


@pytest.fixture
def wavs(tmp_path):
    """Good inputs of 1.0, 1.5 and 0.5 s, and the bad ones."""
    d = tmp_path / "in"
    d.mkdir()
    rng = np.random.default_rng(0)
    for name, sec in (("one", 1.0), ("two", 1.5), ("three", 0.5)):
        sf.write(d / f"{name}.wav", (0.1 * rng.standard_normal(int(sec * SR))).astype(np.float32), SR)
    sf.write(d / "empty.wav", np.zeros(0, np.float32), SR)
    (d / "notes.wav").write_text("not audio at all\n")
    (d / "corrupt.mp3").write_bytes(bytes(rng.integers(0, 256, 3000, dtype=np.uint8)))
    return d


def run(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_txt_to_stdout(fake, wavs, capsys):
    code, out, err = run(capsys, wavs / "one.wav", wavs / "two.wav", "--model", "m")
    assert code == 0 and err == ""
    assert out == "heard 1.00 seconds\nheard 1.50 seconds\n"
    assert fake.load_kwargs == {"model": "m", "device": "cpu", "dtype": None, "threads": None}
    assert fake.calls == [{"n": 2, "batch_size": 8, "timestamps": False, "head": None}]


def test_json_lines_are_to_dict(fake, wavs, capsys):
    code, out, err = run(capsys, wavs / "one.wav", wavs / "three.wav", "-m", "m", "--format", "json")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert len(lines) == 2
    assert [json.loads(line) for line in lines] == [expected_transcript(1.0).to_dict(),
                                                    expected_transcript(0.5).to_dict()]
    assert fake.calls[0]["timestamps"] is True


def test_srt_and_vtt_to_stdout(fake, wavs, capsys):
    code, out, _ = run(capsys, wavs / "one.wav", "-m", "m", "--format", "srt")
    assert code == 0
    assert out == "1\n00:00:00,000 --> 00:00:01,000\nheard 1.00 seconds\n"
    code, out, _ = run(capsys, wavs / "one.wav", wavs / "three.wav", "-m", "m", "--format", "vtt")
    assert code == 0
    assert out.count("WEBVTT") == 2 and "\n\nWEBVTT\n" in out


def test_options_reach_the_model(fake, wavs, capsys):
    code, _, _ = run(capsys, wavs / "one.wav", "-m", "m", "--head", "ctc", "--batch-size", "3",
                     "--threads", "2", "--device", "cuda", "--dtype", "bfloat16", "-q")
    assert code == 0
    assert fake.load_kwargs == {"model": "m", "device": "cuda", "dtype": "bfloat16", "threads": 2}
    assert fake.calls == [{"n": 1, "batch_size": 3, "timestamps": False, "head": "ctc"}]


def test_inputs_are_batched(fake, wavs, capsys):
    files = [wavs / "one.wav", wavs / "two.wav", wavs / "three.wav"] * 2
    code, out, _ = run(capsys, *files, "-m", "m", "--batch-size", "2")
    assert code == 0
    assert [c["n"] for c in fake.calls] == [2, 2, 2]
    assert out.splitlines() == ["heard 1.00 seconds", "heard 1.50 seconds", "heard 0.50 seconds"] * 2


def test_output_dir_all_formats(fake, wavs, tmp_path, capsys):
    out_dir = tmp_path / "new" / "dir"
    code, out, err = run(capsys, wavs / "one.wav", wavs / "two.wav", "-m", "m", "--format", "all",
                         "--output-dir", out_dir)
    assert code == 0 and out == "" and err == ""
    assert sorted(p.name for p in out_dir.iterdir()) == sorted(
        f"{stem}.{ext}" for stem in ("one", "two") for ext in ("txt", "json", "srt", "vtt"))
    assert (out_dir / "two.txt").read_text() == "heard 1.50 seconds\n"
    assert json.loads((out_dir / "one.json").read_text()) == expected_transcript(1.0).to_dict()
    assert (out_dir / "one.srt").read_text().startswith("1\n00:00:00,000 --> 00:00:01,000\n")
    assert (out_dir / "one.vtt").read_text().startswith("WEBVTT\n\n00:00:00.000 --> 00:00:01.000\n")


def test_output_dir_same_stem_is_not_overwritten(fake, wavs, tmp_path, capsys):
    other = tmp_path / "other"
    other.mkdir()
    (other / "one.wav").write_bytes((wavs / "two.wav").read_bytes())
    code, _, _ = run(capsys, wavs / "one.wav", other / "one.wav", "-m", "m", "-o", tmp_path / "out")
    assert code == 0
    assert (tmp_path / "out" / "one.txt").read_text() == "heard 1.00 seconds\n"
    assert (tmp_path / "out" / "one-2.txt").read_text() == "heard 1.50 seconds\n"


def test_stdin(fake, wavs, tmp_path, capsys, monkeypatch):
    data = (wavs / "two.wav").read_bytes()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    code, _, _ = run(capsys, "-", "-m", "m", "--format", "json", "-o", tmp_path / "out")
    assert code == 0
    assert json.loads((tmp_path / "out" / "stdin.json").read_text())["duration"] == 1.5


@pytest.mark.parametrize("bad,words", [
    ("missing.wav", "no such file"),
    ("corrupt.mp3", "not a readable audio file"),
    ("empty.wav", "no audio samples"),
    ("notes.wav", "text file"),
])
def test_bad_input_is_one_line_and_exit_2(fake, wavs, capsys, bad, words):
    code, out, err = run(capsys, wavs / "one.wav", wavs / bad, wavs / "three.wav", "-m", "m")
    assert code == 2
    assert out == "heard 1.00 seconds\nheard 0.50 seconds\n"  # the good inputs are still done
    lines = err.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"transcribe: error: {wavs / bad}: ") and words in lines[0]


def test_all_bad_inputs_are_reported(fake, wavs, tmp_path, capsys):
    bad = ["missing.wav", "corrupt.mp3", "empty.wav", "notes.wav"]
    code, out, err = run(capsys, *(wavs / b for b in bad), wavs / "two.wav", tmp_path,
                         "-m", "m", "-o", tmp_path / "out")
    assert code == 2
    lines = err.splitlines()
    assert len(lines) == 5 and all(line.startswith("transcribe: error: ") for line in lines)
    assert "directory" in lines[-1]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["two.txt"]
    assert [c["n"] for c in fake.calls] == [1]


def test_input_the_model_refuses(fake, wavs, capsys):
    fake.refuse_len = int(1.5 * SR)
    code, out, err = run(capsys, wavs / "one.wav", wavs / "two.wav", wavs / "three.wav", "-m", "m")
    assert code == 2
    assert out == "heard 1.00 seconds\nheard 0.50 seconds\n"
    assert err == f"transcribe: error: {wavs / 'two.wav'}: input refused by the model\n"


@pytest.mark.parametrize("model,words", [("missing-model", "no such model"), ("bad-option", "bfloat16")])
def test_bad_model_is_one_line_exit_2(fake, wavs, capsys, model, words):
    code, out, err = run(capsys, wavs / "one.wav", "-m", model)
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith("transcribe: error: ") and words in err


@pytest.mark.parametrize("argv", [
    [],
    ["x.wav", "-m", "m", "--format", "all"],            # all needs --output-dir
    ["x.wav", "-m", "m", "--format", "doc"],
    ["x.wav", "-m", "m", "--batch-size", "0"],
    ["x.wav", "-m", "m", "--threads", "many"],
    ["x.wav", "-m", "m", "--head", "joint"],
    ["x.wav", "-m", "m", "--device", "tpu"],
    ["-", "-", "-m", "m"],
])
def test_usage_errors_exit_2(fake, capsys, argv):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert "transcribe: error: " in err
    assert fake.load_kwargs is None


def test_output_dir_that_is_a_file(fake, wavs, tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("x")
    code, _, err = run(capsys, wavs / "one.wav", "-m", "m", "-o", f)
    assert code == 2 and len(err.splitlines()) == 1 and "output directory" in err


def test_version_and_help(capsys, monkeypatch):
    monkeypatch.setattr(transcribe, "__version__", "9.8.7", raising=False)
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.strip() == "transcribe 9.8.7"
    code, out, _ = run(capsys, "--help")
    assert code == 0 and "--output-dir" in out


def test_internal_error_exit_1(fake, wavs, capsys, monkeypatch):
    fake.crash = True
    monkeypatch.delenv("TRANSCRIBE_DEBUG", raising=False)
    code, out, err = run(capsys, wavs / "one.wav", "-m", "m")
    assert code == 1 and out == ""
    assert err == "transcribe: internal error: RuntimeError: boom\n"
    monkeypatch.setenv("TRANSCRIBE_DEBUG", "1")
    code, _, err = run(capsys, wavs / "one.wav", "-m", "m")
    assert code == 1 and err.startswith("transcribe: internal error: ") and "Traceback" in err


def test_python_dash_m(fake, wavs, capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["transcribe", str(wavs / "one.wav"), "-m", "m"])
    monkeypatch.delitem(sys.modules, "transcribe.__main__", raising=False)
    with pytest.raises(SystemExit) as e:
        runpy.run_module("transcribe", run_name="__main__")
    assert e.value.code == 0
    assert capsys.readouterr().out == "heard 1.00 seconds\n"


def test_no_progress_when_stderr_is_not_a_tty(fake, wavs, capsys):
    code, _, err = run(capsys, *([wavs / "one.wav"] * 3), "-m", "m", "--batch-size", "1")
    assert code == 0 and err == ""


def test_missing_inputs_are_told_before_the_model_loads(fake, wavs, capsys):
    """A missing input is named at once, before the model loads (minutes for a large one); when every
    input is missing, nothing is loaded at all. The inputs that are there are still transcribed."""
    code, out, err = run(capsys, wavs / "nope.wav", "-m", "m")
    assert code == 2 and out == "" and err == f"transcribe: error: {wavs / 'nope.wav'}: no such file\n"
    assert fake.load_kwargs is None
    code, out, err = run(capsys, wavs / "nope.wav", wavs / "one.wav", "-m", "m")
    assert code == 2 and out == "heard 1.00 seconds\n"
    assert err == f"transcribe: error: {wavs / 'nope.wav'}: no such file\n"


def test_an_unknown_model_name_is_told_before_pytorch_loads():
    """`--model nope` is refused from its name alone: PyTorch is never imported for it."""
    import subprocess

    code = ("import sys, transcribe\n"
            "try:\n    transcribe.load_model('nope')\nexcept transcribe.ModelError as e:\n    print(e)\n"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    message, imported = out.stdout.strip().splitlines()
    assert message.startswith("unknown model 'nope'") and imported == "False"


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_progress_display(fake, wavs, capsys, monkeypatch):
    tty = _Tty()
    monkeypatch.setattr(sys, "stderr", tty)
    code = cli.main([str(wavs / "one.wav"), str(wavs / "notes.wav"), "-m", "m", "--batch-size", "1"])
    shown = tty.getvalue()
    assert code == 2
    assert "2/2 files" in shown and "[" + "#" * Progress.WIDTH + "]" in shown
    assert "0:01 audio" in shown
    assert "\r\033[Ktranscribe: error: " in shown  # the bar is cleared before an error line
    assert shown.endswith("\r\033[K")  # and cleared at the end
    assert capsys.readouterr().out == "heard 1.00 seconds\n"
    # -q: nothing but the error line
    tty = _Tty()
    monkeypatch.setattr(sys, "stderr", tty)
    cli.main([str(wavs / "one.wav"), str(wavs / "missing.wav"), "-m", "m", "-q"])
    assert tty.getvalue().count("\n") == 1 and "files" not in tty.getvalue()


@pytest.mark.parametrize("given,want", [
    ("0", (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)),
    ("0.5", (0.5, 0.7, 0.9)),
    ("0,0.5", (0.0, 0.5)),
])
def test_temperature_schedule_follows_openai_whisper(given, want):
    """The command passes --temperature and the step it implies (Surface.implies: 0.2); Whisper's options
    make the schedule of them."""
    from transcribe.cli import _parser, _decoding_options
    from transcribe.whisper import Options

    args = _parser().parse_args(["x.wav", "--temperature", given])
    assert Options(**_decoding_options(args)).temperatures == pytest.approx(want)
    args = _parser().parse_args(["x.wav", "--temperature", given, "--temperature-increment", "0"])
    assert Options(**_decoding_options(args)).temperatures == pytest.approx(tuple(float(x) for x in given.split(",")))


# --- outputs are never overwritten -----------------------------------------------------------


def test_same_stems_from_several_folders_get_distinct_files(fake, wavs, tmp_path, capsys):
    """a/x.wav, b/x.wav and x-2.wav: three files, none written over another."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    (a / "x.wav").write_bytes((wavs / "one.wav").read_bytes())
    (b / "x.wav").write_bytes((wavs / "two.wav").read_bytes())
    (tmp_path / "x-2.wav").write_bytes((wavs / "three.wav").read_bytes())
    out = tmp_path / "out"
    code, _, err = run(capsys, a / "x.wav", b / "x.wav", tmp_path / "x-2.wav", "-m", "m", "-o", out)
    assert code == 0
    assert sorted(p.name for p in out.iterdir()) == ["x-2.txt", "x-3.txt", "x.txt"]
    assert (out / "x.txt").read_text() == "heard 1.00 seconds\n"
    assert (out / "x-3.txt").read_text() == "heard 1.50 seconds\n"
    assert (out / "x-2.txt").read_text() == "heard 0.50 seconds\n"
    assert f"{b / 'x.wav'} is written as x-3.*" in err  # the renaming is said, not silent


def test_existing_outputs_are_refused_before_any_work(fake, wavs, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "one.txt").write_text("earlier work\n")
    code, stdout, err = run(capsys, wavs / "one.wav", wavs / "two.wav", "-m", "m", "-o", out)
    assert code == 2 and stdout == ""
    assert "one.txt already exist" in err and "--overwrite" in err
    assert fake.load_kwargs is None and fake.calls == []  # nothing loaded, nothing decoded
    assert (out / "one.txt").read_text() == "earlier work\n" and not (out / "two.txt").exists()
    code, _, _ = run(capsys, wavs / "one.wav", "-m", "m", "-o", out, "--overwrite")
    assert code == 0 and (out / "one.txt").read_text() == "heard 1.00 seconds\n"


def test_unwritable_output_dir_is_refused_before_any_work(fake, wavs, tmp_path, capsys, monkeypatch):
    import tempfile

    def refuse(*a, **k):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "NamedTemporaryFile", refuse)
    code, _, err = run(capsys, wavs / "one.wav", "-m", "m", "-o", tmp_path / "ro")
    assert code == 2 and err.strip().endswith("cannot write in output directory " + str(tmp_path / "ro") + ": Permission denied")
    assert fake.load_kwargs is None and fake.calls == []


# --- options of another family ---------------------------------------------------------------


@pytest.mark.parametrize("argv, named", [
    (["--patience", "2"], "--patience"),
    (["--language", "de", "--temperature", "0.2"], "--language or --temperature"),
    (["--temperature-increment", "0.1"], "--temperature"),  # the fallback schedule's step: Whisper's temperature
    (["--batched"], "--batched"),
])
def test_whisper_options_with_a_parakeet_model_are_one_usage_error(fake, wavs, capsys, argv, named):
    code, out, err = run(capsys, wavs / "one.wav", wavs / "notes.wav", "-m", "m", *argv)
    assert code == 2 and out == ""
    assert err.splitlines() == [f"transcribe: error: fake-model is a Parakeet model and does not take {named}"]
    assert fake.calls == []  # no audio decoded or transcribed


# --- inputs are streamed in bounded groups ---------------------------------------------------


def test_inputs_are_decoded_one_group_at_a_time(fake, wavs, capsys, monkeypatch):
    """Audio is decoded just before its group runs, and a group holds at most GROUP_AUDIO_S seconds
    (a longer input alone): 8 long files never sit in memory together."""
    from transcribe import audio

    events = []
    real_load = audio.load_audio

    def load(name, sample_rate):
        events.append("load")
        return real_load(name, sample_rate=sample_rate)

    real_transcribe = fake.transcribe

    def transcribe(audios, **kw):
        events.append(f"run {len(audios)} {sum(len(a) for a in audios) / SR:.1f}")
        return real_transcribe(audios, **kw)

    monkeypatch.setattr(audio, "load_audio", load)
    monkeypatch.setattr(audio, "GROUP_AUDIO_S", 2.0)
    monkeypatch.setattr(fake, "transcribe", transcribe)
    files = [wavs / "one.wav", wavs / "three.wav", wavs / "two.wav", wavs / "two.wav", wavs / "three.wav"]
    code, out, _ = run(capsys, *files, "-m", "m", "--batch-size", "8")
    assert code == 0
    assert events == ["load", "load", "load", "run 2 1.5", "load", "run 1 1.5", "load", "run 2 2.0"]
    assert out.splitlines() == ["heard 1.00 seconds", "heard 0.50 seconds", "heard 1.50 seconds",
                                "heard 1.50 seconds", "heard 0.50 seconds"]


def test_help_imports_neither_torch_nor_numpy():
    """`transcribe --help` and usage errors, an option of another family with a local model among
    them, answer without importing the heavy modules (measured: about 0.2 s, against 3.2 s when
    torch came first)."""
    import subprocess

    from .conftest import TINY

    code = ("import sys\nfrom transcribe.cli import main\nrc = main(['--help'])\n"
            "rc2 = main(['x.wav', '--beam-size', '0'])\n"
            f"rc3 = main(['x.wav', '--model', {str(TINY / 'tiny-tdt-fit.nemo')!r}, '--patience', '2'])\n"
            "rc4 = main(['x.wav', '--head', 'ctc'])\n"
            "rc5 = main(['x.wav', '--beam-size', '2', '--hotwords', 'a'])\n"
            "rc6 = main(['x.wav', '--nbest', '3'])\n"
            "assert (rc, rc2, rc3, rc4, rc5, rc6) == (0, 2, 2, 2, 2, 2), (rc, rc2, rc3, rc4, rc5, rc6)\n"
            "heavy = sorted(m for m in ('torch', 'numpy', 'soundfile', 'av') if m in sys.modules)\n"
            "assert not heavy, heavy\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def test_subtitle_line_options_reach_the_writer(fake, wavs, capsys, monkeypatch):
    from transcribe import writers

    seen = []
    real = writers.WRITERS["srt"]
    monkeypatch.setitem(writers.WRITERS, "srt", lambda t, **kw: seen.append(kw) or real(t, **kw))
    code, out, _ = run(capsys, wavs / "one.wav", "-m", "m", "-f", "srt", "--max-line-width", "20",
                       "--max-line-count", "1")
    assert code == 0 and out.startswith("1\n00:00:00,000 --> ")
    assert seen == [{"max_line_width": 20, "max_line_count": 1}]
    code, _, err = run(capsys, wavs / "one.wav", "-m", "m", "-f", "srt", "--max-line-width", "0")
    assert code == 2 and "--max-line-width" in err
