"""`owner/repo:file.gguf`: one file of a hub repository of GGUF files, from huggingface_hub's cache
(the hub itself is not reachable here: the cache is made in a temporary folder, the hub offline)."""
from __future__ import annotations

import shutil

import pytest

from transcribe.errors import ModelError
from transcribe.hub import resolve

from .conftest import SHARED, hub_snapshot

GGUF = SHARED / "models" / "gguf"


def test_one_file_of_a_gguf_repo_resolves_from_the_cache(monkeypatch, tmp_path):
    snap = hub_snapshot(monkeypatch, tmp_path, "someone/parakeet-gguf")
    src = GGUF / "parakeet-cpp" / "tiny-tdt-fit-q8_0.gguf"
    shutil.copy(src, snap / "tiny-tdt-fit-q8_0.gguf")
    (snap / "sub").mkdir()
    shutil.copy(GGUF / "parakeet-cpp" / "tiny-ctc-fit-q4_0.gguf", snap / "sub" / "ctc.gguf")
    path, display = resolve("someone/parakeet-gguf:tiny-tdt-fit-q8_0.gguf")
    assert path.read_bytes() == src.read_bytes()
    assert display == "someone/parakeet-gguf:tiny-tdt-fit-q8_0.gguf"
    path, _ = resolve("someone/parakeet-gguf:sub/ctc.gguf")
    assert path.name == "ctc.gguf" and path.stat().st_size == (GGUF / "parakeet-cpp" / "tiny-ctc-fit-q4_0.gguf").stat().st_size


def test_a_missing_file_of_a_gguf_repo_is_a_clear_error(monkeypatch, tmp_path):
    hub_snapshot(monkeypatch, tmp_path, "someone/parakeet-gguf")
    with pytest.raises(ModelError, match=r"someone/parakeet-gguf's missing-q8_0\.gguf is not in the Hugging Face cache"):
        resolve("someone/parakeet-gguf:missing-q8_0.gguf")
    with pytest.raises(ModelError, match="path inside the repo"):
        resolve("someone/parakeet-gguf:../x.gguf")


def test_a_local_gguf_that_does_not_exist_is_not_taken_for_a_short_name(tmp_path):
    with pytest.raises(ModelError, match="no such model file"):
        resolve(str(tmp_path / "nothing-q8_0.gguf"))
    with pytest.raises(ModelError, match="no such model file"):
        resolve("nothing-q8_0.gguf")


def test_a_gguf_of_a_hub_repo_loads_and_transcribes(monkeypatch, tmp_path):
    """load_model and the command line take owner/repo:file.gguf like a local file."""
    import transcribe
    from transcribe.cli import main

    from .conftest import AUDIO

    snap = hub_snapshot(monkeypatch, tmp_path, "someone/parakeet-gguf")
    shutil.copy(GGUF / "transcribe-cpp" / "tiny-ctc-fit-Q8_0.gguf", snap / "tiny-ctc-fit-Q8_0.gguf")
    name = "someone/parakeet-gguf:tiny-ctc-fit-Q8_0.gguf"
    local = transcribe.load_model(str(GGUF / "transcribe-cpp" / "tiny-ctc-fit-Q8_0.gguf"))
    model = transcribe.load_model(name)
    assert model.name == name
    got = model.transcribe(AUDIO / "jfk.wav")
    assert [t.id for t in got.tokens] == [t.id for t in local.transcribe(AUDIO / "jfk.wav").tokens]
    assert "ask not what your country can do for you" in got.text
    out = tmp_path / "out"
    assert main([str(AUDIO / "jfk.wav"), "--model", name, "--output-dir", str(out), "-q"]) == 0
    assert (out / "jfk.txt").read_text().strip() == got.text


def test_a_file_the_hub_repo_does_not_hold_is_told_after_one_request(monkeypatch, tmp_path):
    """Not in the cache: one listing of the repo (no download, so none of its retries) tells that the
    file is not there, with the repo's GGUF files."""
    from types import SimpleNamespace

    import huggingface_hub

    hub_snapshot(monkeypatch, tmp_path, "someone/parakeet-gguf")
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    calls = []

    def model_info(self, repo_id, *args, **kwargs):
        calls.append(("model_info", repo_id))
        return SimpleNamespace(siblings=[SimpleNamespace(rfilename=n) for n in
                                         ("README.md", "tdt-q8_0.gguf", "tdt-q4_0.gguf")])

    real_download = huggingface_hub.hf_hub_download

    def download(repo_id, filename, *args, local_files_only=False, **kwargs):
        calls.append(("download", local_files_only))
        if not local_files_only:
            raise AssertionError("no download of a file the repo does not hold")
        return real_download(repo_id, filename, *args, local_files_only=True, **kwargs)

    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", model_info)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    with pytest.raises(ModelError) as e:
        resolve("someone/parakeet-gguf:tdt-q5_0.gguf")
    assert str(e.value) == ("someone/parakeet-gguf's tdt-q5_0.gguf is not in the Hugging Face cache, and the hub's "
                            "someone/parakeet-gguf has no such file: its GGUF files are tdt-q4_0.gguf, tdt-q8_0.gguf")
    assert calls == [("download", True), ("model_info", "someone/parakeet-gguf")]
