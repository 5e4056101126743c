"""Input edges a new user hit (issue 26): a hub GGUF id offline, a truncated audio file, a container
piped to `--stream -`. Each test fails on the code before its fix."""
from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf

from transcribe import cli, stream_cli
from transcribe.audio import load_audio
from transcribe.errors import AudioError

from .conftest import AUDIO, REPO, TINY

JFK = AUDIO / "jfk.wav"
FIT = TINY / "tiny-tdt-fit.nemo"  # fitted to jfk.wav: its text on jfk is the clip's text
JFK_TEXT = "and so my fellow americans ask not what your country can do for you ask what you can do for your country"


def _run(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


# ---------------------------------------------------------------------------------------------- 7: hub offline


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _offline_env(tmp_path) -> dict:
    """A hub that refuses connections and an empty Hugging Face cache."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_HOME=str(tmp_path / "hf"), HF_ENDPOINT=f"http://127.0.0.1:{_closed_port()}", HF_HUB_OFFLINE="0")
    return env


@pytest.mark.parametrize("name", ["someone/parakeet-gguf:tiny-q8_0.gguf", "someone/parakeet"])
def test_a_hub_id_offline_fails_in_one_line_without_retries(tmp_path, name):
    """Both hub forms: one request, exit 2, one line saying not cached and hub unreachable. (The
    one-file form used to retry five times over 23 s, printing each retry.)"""
    r = subprocess.run([sys.executable, "-m", "transcribe", str(JFK), "--model", name], cwd=REPO,
                       env=_offline_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr
    assert r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert "Retry" not in r.stderr and "retry" not in r.stderr.lower()
    assert lines[0].startswith("transcribe: error: ")
    assert "not in the Hugging Face cache" in lines[0] and "the hub is unreachable" in lines[0]


def test_load_model_of_a_hub_gguf_offline_raises_without_retries(tmp_path):
    code = ("import transcribe\n"
            "try:\n"
            "    transcribe.load_model('someone/parakeet-gguf:tiny-q8_0.gguf')\n"
            "except transcribe.TranscribeError as e:\n"
            "    print(type(e).__name__, e)\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=_offline_env(tmp_path),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""  # no retry lines from the hub client
    assert r.stdout.startswith("ModelError someone/parakeet-gguf's tiny-q8_0.gguf is not in the Hugging Face "
                               "cache and the hub is unreachable")
