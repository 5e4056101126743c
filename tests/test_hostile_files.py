"""Hostile files and disks (issue 36, items 1, 2, 13 and parts of 15): an output that is the input, a full
disk, non-regular inputs (FIFOs, symbolic-link loops, devices, pipes), raw-pickle checkpoints, `--lm DIR`
and `--stream -` inputs that are not audio. Each case runs with a time limit (a hang is a failure)."""
from __future__ import annotations

import errno
import hashlib
import os
import resource
import shutil
import signal
import subprocess
import sys

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


def _run(args, limit=None, timeout=300, **kw):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "transcribe", *map(str, args)], capture_output=True, text=True,
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
    assert "File too large" in r.stderr and "internal error" not in r.stderr
    assert list(tmp_path.iterdir()) == []
