"""Hostile files and disks (issue 36, items 1, 2, 13 and parts of 15): an output that is the input, a full
disk, non-regular inputs (FIFOs, symbolic-link loops, devices, pipes), raw-pickle checkpoints, `--lm DIR`
and `--stream -` inputs that are not audio. Each case runs with a time limit (a hang is a failure)."""
from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import pickle
import resource
import shutil
import signal
import struct
import subprocess
import sys
import tarfile
import threading

import numpy as np
import pytest

from .conftest import REPO, SHARED, TINY
from transcribe.convert import main as convert_main


def _digest(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


# -- 1: convert refuses an OUT that is the model itself ----------------------------------------------


@pytest.mark.parametrize("how", ["same", "symlink", "hardlink"])
def test_convert_refuses_to_replace_its_source(how, tmp_path, capsys):
    model = tmp_path / "M.nemo"
    shutil.copyfile(TINY / "tiny-ctc-fit.nemo", model)
    before = _digest(model)
    out = model
    if how == "symlink":
        out = tmp_path / "link.gguf"
        out.symlink_to(model)
    elif how == "hardlink":
        out = tmp_path / "hard.gguf"
        os.link(model, out)
    assert convert_main([str(model), str(out), "--force"]) == 2
    err = capsys.readouterr().err
    assert "is the model being converted" in err and len(err.strip().splitlines()) == 1
    assert _digest(model) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted({model.name, out.name})  # no temporary left


# -- 2: a full disk: atomic outputs, no temporaries left, a clear error --------------------------------

JFK = SHARED / "audio" / "jfk.wav"
TDT = TINY / "tiny-tdt-fit.nemo"


def _file_size_limit(limit: int):
    """A child's preexec: writes past `limit` bytes fail with EFBIG (SIGXFSZ ignored), as on a full disk."""
    def set_limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return set_limit


def _run(args, limit=None, timeout=300, text=True, **kw):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    kw.setdefault("capture_output", "stdout" not in kw)
    return subprocess.run([sys.executable, "-m", "transcribe", *map(str, args)], text=text,
                          timeout=timeout, env=env, preexec_fn=None if limit is None else _file_size_limit(limit),
                          **kw)


def _leftovers(folder) -> list[str]:
    """Temporaries and empty files under `folder` (what a failed write must not leave)."""
    return sorted(p.name for p in folder.rglob("*") if p.is_file() and (p.name.endswith(".tmp")
                                                                        or p.stat().st_size == 0))


def test_write_transcript_on_a_full_disk_leaves_nothing(tmp_path, monkeypatch):
    from transcribe.results import Transcript
    from transcribe.writers import no_room, write_transcript

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError) as e:
        write_transcript(Transcript(text="hello", duration=1.0), "txt", tmp_path / "a.txt")
    assert no_room(e.value) and e.value.filename == str(tmp_path / "a.txt")
    assert list(tmp_path.iterdir()) == []


def test_the_command_on_a_full_disk_says_so_and_leaves_no_file(tmp_path):
    out = tmp_path / "out"
    r = _run([JFK, "-m", TDT, "-f", "json", "-o", out], limit=64)
    assert r.returncode == 2, r.stderr
    assert "cannot write: File too large" in r.stderr and "internal error" not in r.stderr
    assert _leftovers(out) == [] and not (out / "jfk.json").exists()
    r = _run([JFK, "-m", TDT, "-f", "json", "-o", out])  # nothing in the way of the next run
    assert r.returncode == 0, r.stderr and (out / "jfk.json").stat().st_size > 0


def test_a_batch_job_on_a_full_disk_stops_clearly_and_resume_leaves_no_temporary(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    for name in ("a", "b"):
        os.symlink(JFK, src / f"{name}.wav")
    out = tmp_path / "out"
    r = _run(["batch", src, "-o", out, "--model", TDT, "-f", "json", "--workers", "1", "-q"], limit=600)
    assert r.returncode == 2, r.stderr
    assert "cannot write: File too large; the job stopped" in r.stderr and "--resume" in r.stderr
    assert "internal error" not in r.stderr
    assert [p.name for p in out.rglob("*.tmp")] == []
    r = _run(["batch", src, "-o", out, "--model", TDT, "-f", "json", "--workers", "1", "-q", "--resume"])
    assert r.returncode == 0, r.stderr
    assert _leftovers(out) == [] and sorted(p.name for p in out.glob("*.json")) == ["a.json", "b.json"]


def test_convert_on_a_full_disk_says_so_and_leaves_nothing(tmp_path):
    r = _run(["convert", TINY / "tiny-ctc-fit.nemo", tmp_path / "m.gguf"], limit=4096)
    assert r.returncode == 2, r.stderr
    assert f"error: {tmp_path / 'm.gguf'}: cannot write: File too large" in r.stderr
    assert "internal error" not in r.stderr and list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="/dev/full is Linux's always-full device")
def test_the_command_writing_to_a_full_stdout_says_so(tmp_path):
    with open("/dev/full", "w") as full:
        r = _run([JFK, "-m", TDT], stdout=full, stderr=subprocess.PIPE)
    assert r.returncode == 2 and "standard output: cannot write: No space left on device" in r.stderr, r.stderr


# -- 13: non-regular inputs: named pipes, <(...) pipes, symbolic-link loops, devices ----------------------


def _writer(path_or_fd, data: bytes) -> threading.Thread:
    """A thread writing `data` to a named pipe (opening it waits for the reader) or a pipe's write end."""
    def write():
        fd = os.open(path_or_fd, os.O_WRONLY) if isinstance(path_or_fd, (str, os.PathLike)) else path_or_fd
        try:
            os.write(fd, data) if len(data) < 65536 else _write_all(fd, data)
        finally:
            os.close(fd)
    t = threading.Thread(target=write, daemon=True)
    t.start()
    return t


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _within(seconds: float, fn):
    """fn()'s value (or its exception), run in a thread; a failure when it takes over `seconds` (a hang)."""
    box = {}

    def call():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - raised again in the test's thread
            box["error"] = e
    t = threading.Thread(target=call, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"still running after {seconds} s (a hang)"
    if "error" in box:
        raise box["error"]
    return box["value"]


def test_a_named_pipe_is_read_as_a_stream(tmp_path):
    from transcribe.audio import load_audio

    fifo = tmp_path / "talk.wav"
    os.mkfifo(fifo)
    t = _writer(fifo, JFK.read_bytes())
    got = _within(60, lambda: load_audio(str(fifo)))
    t.join(timeout=30)
    assert np.array_equal(got, load_audio(str(JFK)))  # the same bytes, the same decoder: the same samples


def test_a_named_pipe_no_one_writes_to_is_an_error_not_a_hang(tmp_path, monkeypatch):
    import transcribe.audio as audio
    import transcribe.audio_source as audio_source

    fifo = tmp_path / "idle.wav"
    os.mkfifo(fifo)
    monkeypatch.setattr(audio_source, "STREAM_WAIT_S", 0.2)
    with pytest.raises(audio.AudioError, match="nothing was written to this pipe"):
        _within(30, lambda: audio.load_audio(str(fifo)))


def test_the_command_names_the_real_reason(tmp_path):
    loop = tmp_path / "loop.wav"
    loop.symlink_to(loop)
    dangling = tmp_path / "gone.wav"
    dangling.symlink_to(tmp_path / "nothing.wav")
    r = _run([loop, dangling, "/dev/null", tmp_path, "-m", TDT], timeout=120)
    assert r.returncode == 2
    assert f"{loop}: too many levels of symbolic links" in r.stderr
    assert f"{dangling}: a symbolic link to a file that does not exist" in r.stderr
    assert "/dev/null: not a regular file (a character device)" in r.stderr
    assert f"{tmp_path}: is a directory" in r.stderr
    assert "no such file" not in r.stderr and "internal error" not in r.stderr


def test_the_command_reads_a_pipe_given_as_dev_fd(tmp_path):
    """`transcribe <(cat jfk.wav)`: the shell passes /dev/fd/N, a pipe."""
    expected = _run([JFK, "-m", TDT])
    assert expected.returncode == 0 and expected.stdout.strip(), expected.stderr
    r_fd, w_fd = os.pipe()
    t = _writer(w_fd, JFK.read_bytes())
    try:
        r = _run([f"/dev/fd/{r_fd}", "-m", TDT], pass_fds=(r_fd,))
    finally:
        os.close(r_fd)
        t.join(timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout == expected.stdout and "Illegal seek" not in r.stderr


def test_a_named_pipe_in_a_manifest_does_not_hang_the_job(tmp_path):
    fifo = tmp_path / "idle.wav"
    os.mkfifo(fifo)
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(json.dumps({"audio": str(fifo), "id": "fifo"}) + "\n"
                        + json.dumps({"audio": str(JFK), "id": "jfk"}) + "\n")
    out = tmp_path / "out"
    r = _run(["batch", "--manifest", manifest, "-o", out, "--model", TDT, "--workers", "1", "-q"], timeout=120)
    assert r.returncode == 3, r.stderr  # the job ran to its end; the pipe no one wrote to failed
    lines = {d["id"]: d for d in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    assert lines["jfk"]["status"] == "ok"
    assert lines["fifo"]["status"] == "error" and "nothing was written to this pipe" in lines["fifo"]["error"]


def test_batch_names_the_real_reason(tmp_path):
    loop = tmp_path / "loop.wav"
    loop.symlink_to(loop)
    r = _run(["batch", loop, "-o", tmp_path / "out", "--model", TDT, "-q"], timeout=120)
    assert r.returncode == 2 and f"{loop}: too many levels of symbolic links" in r.stderr, r.stderr


# -- 15: raw-pickle checkpoints, --lm DIR, --stream - inputs that are not audio ------------------------


def _raw_pickle() -> bytes:
    import collections

    import torch

    return pickle.dumps(collections.OrderedDict(w=torch.zeros(2)), protocol=4)  # pickle.dump(state_dict)


def _nemo_with_weights(tmp_path, weights: bytes):
    """tiny-ctc-fit.nemo with its model_weights.ckpt replaced by `weights`."""
    out = tmp_path / "bad.nemo"
    with tarfile.open(TINY / "tiny-ctc-fit.nemo") as src, tarfile.open(out, "w") as dst:
        for m in src.getmembers():
            data = weights if m.name.endswith("model_weights.ckpt") else src.extractfile(m).read() if m.isfile() else None
            if data is not None:
                m.size = len(data)
            dst.addfile(m, io.BytesIO(data) if data is not None else None)
    return out


def test_a_raw_pickle_nemo_is_told_as_such(tmp_path, capsys):
    from transcribe.errors import ModelError
    from transcribe.nemo.checkpoint import read_nemo

    with pytest.raises(ModelError) as e:
        read_nemo(_nemo_with_weights(tmp_path, _raw_pickle()))
    assert "model_weights.ckpt is a raw pickle checkpoint, which this package does not load: it could run code" \
        in str(e.value)
    assert "corrupt" not in str(e.value) and "weights_only" not in str(e.value)


def test_a_cut_short_torch_checkpoint_is_still_corrupt_not_a_raw_pickle(tmp_path):
    import torch

    from transcribe.errors import ModelError, raw_pickle
    from transcribe.nemo.checkpoint import read_nemo

    legacy = io.BytesIO()
    torch.save({"w": torch.zeros(4)}, legacy, _use_new_zipfile_serialization=False)  # torch < 1.6's format
    assert not raw_pickle(legacy.getvalue()[:16]) and raw_pickle(_raw_pickle()[:16])
    with pytest.raises(ModelError, match="corrupt or truncated"):
        read_nemo(_nemo_with_weights(tmp_path, legacy.getvalue()[:40]))


def test_a_raw_pickle_whisper_checkpoint_is_told_as_such(tmp_path):
    from transcribe.errors import ModelError
    from transcribe.whisper.checkpoints.common import torch_load

    pt = tmp_path / "tiny.pt"
    pt.write_bytes(_raw_pickle())
    with pytest.raises(ModelError, match="a raw pickle checkpoint, which this package does not load: it could run"):
        torch_load(pt)


def test_a_corrupt_checkpoint_gets_no_advice_to_load_it_unsafely(tmp_path):
    from transcribe.errors import ModelError
    from transcribe.nemo.checkpoint import read_nemo

    with pytest.raises(ModelError, match="corrupt or truncated") as e:
        read_nemo(_nemo_with_weights(tmp_path, b"(garbage that is no pickle" * 4))  # protocol-0 looking, not one
    assert "weights_only" not in str(e.value) and "False" not in str(e.value)


@pytest.mark.parametrize("command", [[], ["batch", "-o", "OUT"]])
def test_lm_naming_a_directory_is_one_clear_line(command, tmp_path):
    command = [str(tmp_path / "out") if c == "OUT" else c for c in command]
    r = _run([*command, JFK, "-m", TINY / "tiny-ctc-fit.nemo", "--beam-size", "4", "--lm", tmp_path], timeout=120)
    assert r.returncode == 2
    assert r.stderr.splitlines() == [f"transcribe{' batch' if command else ''}: error: --lm {tmp_path}: is a "
                                     "directory, not a language model file"]


def _wav_header(rate: int, channels: int, data_size: int = 0) -> bytes:
    fmt = struct.pack("<HHIIHH", 1, channels, rate, (rate * channels * 2) & 0xFFFFFFFF, (channels * 2) & 0xFFFF, 16)
    return (b"RIFF" + struct.pack("<I", 36 + data_size) + b"WAVE" + b"fmt " + struct.pack("<I", 16) + fmt
            + b"data" + struct.pack("<I", data_size))


@pytest.mark.parametrize("stdin, message", [
    (b"", "<stdin>: the input is empty"),
    (b"\x01", "<stdin>: no audio (1 byte, less than one sample of 1 channel)"),
    (_wav_header(16000, 1), "<stdin>: no audio after its WAV header"),
    (_wav_header(4_000_000_000, 1) + bytes(3200), "says 4000000000 Hz and 1 channels; a stream takes"),
    (_wav_header(16000, 65535) + bytes(3200), "says 16000 Hz and 65535 channels; a stream takes"),
], ids=["empty", "one-byte", "header-only", "4GHz", "65535-channels"])
def test_stream_stdin_without_audio_is_an_error(stdin, message):
    r = _run(["--stream", "-", "-m", TINY / "tiny-tdt-streaming-random.nemo"], input=stdin, timeout=120,
             text=False)
    err = r.stderr.decode()
    assert r.returncode == 2, err
    assert message in err and "internal error" not in err
