"""Parakeet GGUF weights kept compressed (transcribe/parakeet/gguf_int8.py): int8 layers made straight from
the file's bytes. A Q8_0 file keeps its Q8_0 weights int8 by default; dtype int8 quantizes every layer a
.nemo's int8 does. Both are compared exactly with the float path they stand for."""
from __future__ import annotations

import pytest
import torch

import transcribe
from transcribe.gguf import quants
from transcribe.gguf.file import GGUFFile
from transcribe.parakeet.gguf_int8 import INT8_WEIGHTS
from transcribe.parakeet.gguf_names import to_nemo
from transcribe.quant import Int8Linear

from .conftest import AUDIO, SHARED, TINY

GGUF = SHARED / "models" / "gguf"
JFK = AUDIO / "jfk.wav"


def _ids(asr, **kw):
    return [t.id for t in asr.transcribe(JFK, **kw).tokens]


def _int8_layers(asr) -> dict[str, Int8Linear]:
    return {n: m for n, m in asr.model.named_modules() if isinstance(m, Int8Linear)}


def _q8_0_weights(path, schema_to_nemo) -> set[str]:
    """Module paths of the int8-able weights a Q8_0 file keeps int8 by default: those it stores as Q8_0,
    and every one of the encoder."""
    with GGUFFile(path) as f:
        names = {schema_to_nemo(n) for n, i in f.tensors.items()
                 if i.qtype == quants.Q8_0 or (schema_to_nemo(n) or "").startswith("encoder.")}
    return {n[: -len(".weight")] for n in names if n and INT8_WEIGHTS.match(n)}


@pytest.mark.parametrize("stem", ["tiny-tdt-fit", "tiny-ctc-fit", "tiny-hybrid-tdt-ctc-fit"])
def test_int8_from_an_f32_file_is_the_nemo_int8_model(stem):
    """dtype int8 from an F32 GGUF: the same int8 weights and scales as the .nemo quantized at load (the
    same formula on the same float32 values), so the same ids."""
    nemo = transcribe.load_model(str(TINY / f"{stem}.nemo"), dtype="int8")
    gguf = transcribe.load_model(str(GGUF / "parakeet-cpp" / f"{stem}-f32.gguf"), dtype="int8")
    a, b = nemo.model.state_dict(), gguf.model.state_dict()
    assert set(a) == set(b)
    for k in a:
        assert torch.equal(a[k], b[k]), k
    assert set(_int8_layers(nemo)) == set(_int8_layers(gguf)) and _int8_layers(gguf)
    for head in nemo.heads:
        assert _ids(nemo, head=head) == _ids(gguf, head=head)


@pytest.mark.parametrize("rel,joint_index", [("parakeet-cpp/tiny-tdt-fit-q8_0.gguf", 1),
                                             ("transcribe-cpp/tiny-tdt-fit-Q8_0.gguf", 1),
                                             ("parakeet-cpp/tiny-ctc-fit-q8_0.gguf", 1)])
def test_a_q8_0_file_keeps_its_q8_0_weights_int8(rel, joint_index):
    """By default: an int8 layer for each Q8_0 weight of the file and each matrix product of the encoder
    (pointwise convolutions stored in F32 / F16 too), none for what the file stores in float outside the
    encoder (parakeet.cpp: the joint's output layer, the LSTM); each layer's int8 weights are those
    Int8Linear makes from the exactly dequantized weight, so the model computes what the dequantized float
    model with those layers quantized computes."""
    path = GGUF / rel
    schema = (lambda n: n) if rel.startswith("parakeet-cpp") else (lambda n: to_nemo(n, joint_index))
    auto = transcribe.load_model(str(path))
    layers = _int8_layers(auto)
    assert set(layers) == _q8_0_weights(path, schema) and layers
    if auto.model.decoder is not None:
        assert not auto.model.decoder.int8  # the LSTM is stored F32: it stays float
    flt = transcribe.load_model(str(path), dtype="float32")
    assert not _int8_layers(flt)
    for name, layer in layers.items():
        ref = flt.model.get_submodule(name)
        w = ref.weight.detach().reshape(ref.weight.shape[0], -1)
        want = Int8Linear(w, ref.bias)
        assert torch.equal(layer.weight_t, want.weight_t), name
        assert torch.equal(layer.weight_scale, want.weight_scale), name
        assert (layer.bias is None and want.bias is None) or torch.equal(layer.bias, want.bias), name
    # the float model with the same layers swapped in gives the same ids as the int8-loaded one
    for name in layers:
        parent, _, attr = name.rpartition(".")
        ref = flt.model.get_submodule(name)
        setattr(flt.model.get_submodule(parent), attr, Int8Linear(ref.weight.detach().reshape(ref.weight.shape[0], -1),
                                                                  ref.bias))
    for head in auto.heads:
        assert _ids(auto, head=head) == _ids(flt, head=head)


def test_dtype_int8_quantizes_every_layer_of_a_q4_0_file_and_float_dequantizes_a_q8_0_one():
    q4 = GGUF / "parakeet-cpp" / "tiny-tdt-fit-q4_0.gguf"
    default = transcribe.load_model(str(q4))
    assert not _int8_layers(default)  # Q4_0: dequantized to float32 unless int8 is asked for
    int8 = transcribe.load_model(str(q4), dtype="int8")
    nemo8 = transcribe.load_model(str(TINY / "tiny-tdt-fit.nemo"), dtype="int8")
    assert set(_int8_layers(int8)) == set(_int8_layers(nemo8))
    assert int8.model.decoder.int8
    text = int8.transcribe(JFK).text
    assert "ask not what your country can do for you" in text
    bf16 = transcribe.load_model(str(GGUF / "parakeet-cpp" / "tiny-tdt-fit-q8_0.gguf"), dtype="bfloat16")
    assert not _int8_layers(bf16)
    assert next(bf16.model.encoder.parameters()).dtype == torch.bfloat16


def test_int8_layers_hold_no_float_copy_of_their_weights():
    """The int8 layers' weights exist only as int8 (no float32 weight kept beside them)."""
    asr = transcribe.load_model(str(GGUF / "transcribe-cpp" / "tiny-rnnt-fit-Q8_0.gguf"))
    layers = _int8_layers(asr)
    assert layers
    for name, layer in layers.items():
        assert layer.weight_t.dtype == torch.int8
        assert [n for n, _ in layer.named_parameters()] == []
    assert not [n for n, p in asr.model.named_parameters() if 0 in p.stride() and p.numel() > 1]
