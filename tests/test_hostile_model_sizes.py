"""Hostile model files (issue 36): a structural size in a model's config (layers, widths, vocabulary)
far beyond what the file's own tensors hold. Each loader checks the sizes against stated maxima and,
where the file holds its tensors, the layer counts against the layers whose tensors exist, before a
module is built. Each hostile file runs through the CLI in a subprocess under a memory and time limit
(as tests/test_hostile_model_files.py does) and must be refused with exit 2 and a message naming the
key; before these checks, `encoder.n_layers = 2**30` built modules for minutes."""
from __future__ import annotations

import json
import os
import resource
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO, SHARED
from .test_model_settings import _nemo_with, _set

JFK = SHARED / "audio" / "jfk.wav"
GGUF = SHARED / "models" / "gguf"
NEMO = SHARED / "models" / "parakeet-tiny" / "tiny-ctc-fit.nemo"
GRANITE = SHARED / "models" / "granite-nar-tiny"
HUGE = 1 << 30
MEMORY_LIMIT = 3 << 30  # bytes of address space: the CLI with torch loaded needs about 1 GB of it
TIME_LIMIT = 60  # seconds: a loaded CLI refusing a model takes a few


def _limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def _run(args: list[str]) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=TIME_LIMIT, preexec_fn=_limit_memory)


def _refused(model: Path, *words: str) -> str:
    r = _run(["-m", "transcribe", str(JFK), "-m", str(model)])
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr, r.stderr[-2000:]
    for w in words:
        assert w in r.stderr, (w, r.stderr[-2000:])
    return r.stderr


def _gguf_with(tmp_path: Path, src: Path, key: str, value: int) -> Path:
    """A copy of GGUF file `src` whose UINT32 metadata `key` holds `value` (patched in place: a
    GGUF string is a uint64 length and the bytes, then the value's uint32 type, 4, and the value)."""
    data = bytearray(src.read_bytes())
    name = key.encode()
    at = data.find(struct.pack("<Q", len(name)) + name)
    assert at > 0, key
    at += 8 + len(name)
    assert struct.unpack_from("<I", data, at)[0] == 4, "not a UINT32 value"
    struct.pack_into("<I", data, at + 4, value)
    out = tmp_path / src.name
    out.write_bytes(bytes(data))
    return out


# ------------------------------------------------------------------------------------------
# Parakeet GGUF (both schemas) and .nemo


@pytest.mark.parametrize("src,key", [
    ("parakeet-cpp/tiny-ctc-fit-f32.gguf", "parakeet.encoder.n_layers"),
    ("transcribe-cpp/tiny-ctc-fit-F32.gguf", "stt.parakeet.encoder.n_layers"),
])
def test_parakeet_gguf_layer_count_beyond_its_tensors(tmp_path, src, key):
    model = _gguf_with(tmp_path, GGUF / src, key, HUGE)
    _refused(model, key, str(HUGE), "tensors for 2 encoder layers", ".2.* are missing")


def test_parakeet_gguf_one_layer_more_names_the_missing_tensors(tmp_path):
    model = _gguf_with(tmp_path, GGUF / "transcribe-cpp/tiny-ctc-fit-F32.gguf", "stt.parakeet.encoder.n_layers", 3)
    _refused(model, "stt.parakeet.encoder.n_layers = 3", "enc.blocks.2.* are missing")


def test_parakeet_gguf_huge_width(tmp_path):
    model = _gguf_with(tmp_path, GGUF / "parakeet-cpp/tiny-ctc-fit-f32.gguf", "parakeet.encoder.d_model", HUGE)
    _refused(model, "d_model")


@pytest.mark.parametrize("key", ["encoder.n_layers", "encoder.d_model", "encoder.pos_emb_max_len"])
def test_nemo_huge_size(tmp_path, key):
    model = _nemo_with(tmp_path, NEMO, _set(key, HUGE))
    _refused(model, str(model), f"{key} = {HUGE}")


def test_nemo_one_layer_more_names_a_missing_tensor(tmp_path):
    model = _nemo_with(tmp_path, NEMO, _set("encoder.n_layers", 3))
    _refused(model, "encoder.layers.2.")


# ------------------------------------------------------------------------------------------
# Granite: a checkpoint directory's config.json, and a GGUF file


def _granite_with(tmp_path: Path, section: str, key: str, value: int) -> Path:
    d = tmp_path / "granite"
    d.mkdir()
    for f in ("model.safetensors", "tokenizer.json"):
        (d / f).symlink_to(GRANITE / f)
    cfg = json.loads((GRANITE / "config.json").read_text())
    cfg[section][key] = value
    (d / "config.json").write_text(json.dumps(cfg))
    return d


@pytest.mark.parametrize("section,key", [("encoder_config", "num_layers"), ("text_config", "num_hidden_layers"),
                                         ("text_config", "vocab_size")])
def test_granite_config_huge_size(tmp_path, section, key):
    cfg = json.loads((GRANITE / "config.json").read_text())
    assert key in cfg[section], "the tiny model's config spells it so"
    model = _granite_with(tmp_path, section, key, HUGE)
    _refused(model, str(model), f"{section}.{key}", str(HUGE))


@pytest.mark.parametrize("key", ["stt.granite_nar.encoder.n_layers", "stt.granite_nar.text.n_layers"])
def test_granite_gguf_layer_count_beyond_its_tensors(tmp_path, key):
    model = _gguf_with(tmp_path, GGUF / "transcribe-cpp/granite-nar-tiny-Q8_0.gguf", key, HUGE)
    _refused(model, f"{key} = {HUGE}", "are missing")


# ------------------------------------------------------------------------------------------
# Whisper: the dims every checkpoint reader checks against the weights (`state_dict_fits`)

_WHISPER = """
import torch
from transcribe.errors import ModelError
from transcribe.whisper.checkpoints.common import state_dict_fits
dims = dict(n_mels=80, n_audio_ctx=1500, n_audio_state=64, n_audio_head=1, n_audio_layer=1, n_vocab=100,
            n_text_ctx=448, n_text_state=64, n_text_head=1, n_text_layer=1)
dims[{key!r}] = {value}
m = lambda *s: torch.empty(*s, device="meta")
sd = {{"encoder.conv1.weight": m(64, 80, 3), "encoder.conv2.weight": m(64, 64, 3),
      "decoder.token_embedding.weight": m(100, 64), "decoder.positional_embedding": m(448, 64),
      "encoder.blocks.0.mlp_ln.weight": m(64), "decoder.blocks.0.mlp_ln.weight": m(64)}}
try:
    state_dict_fits(sd, dims, "w.pt")
except ModelError as e:
    print(e)
"""


@pytest.mark.parametrize("key,value", [("n_text_layer", HUGE), ("n_audio_layer", HUGE), ("n_text_layer", 2)])
def test_whisper_dims_beyond_the_weights(key, value):
    r = _run(["-c", _WHISPER.format(key=key, value=value)])
    assert r.returncode == 0, r.stderr[-2000:]
    if value == HUGE:
        assert f"dims {key} = {HUGE} is out of the range" in r.stdout, r.stdout
    else:  # within the bounds, more layers than the weights hold: named against the weights
        assert "the weights hold decoder blocks [0], but the dims ask for 2" in r.stdout, r.stdout
