"""Parakeet GGUF weights kept compressed (transcribe/parakeet/gguf_int8.py): quantized layers made straight
from the file's bytes. A Q8_0 file keeps its encoder as Q8_0 blocks by default (Q8Linear, and HalfLinear for
the matrix products it stores in float; tests/test_gguf_q8_mode.py has their fidelity); dtype int8 quantizes
every layer a .nemo's int8 does (Int8Linear). Both are compared exactly with the float path they stand for."""
from __future__ import annotations

import pytest
import torch

import transcribe
from transcribe.gguf import quants
from transcribe.gguf.file import GGUFFile
from transcribe.parakeet.gguf_int8 import INT8_WEIGHTS
from transcribe.parakeet.gguf_names import to_nemo
from transcribe.quant import HalfLinear, FloatComputeLinear, Int8Linear, Q8Linear

from .conftest import AUDIO, SHARED, TINY

GGUF = SHARED / "models" / "gguf"
JFK = AUDIO / "jfk.wav"


def _ids(asr, **kw):
    return [t.id for t in asr.transcribe(JFK, **kw).tokens]


def _int8_layers(asr) -> dict[str, Int8Linear]:
    return {n: m for n, m in asr.model.named_modules() if isinstance(m, Int8Linear)}


def _compressed_layers(asr) -> dict[str, FloatComputeLinear]:
    return {n: m for n, m in asr.model.named_modules() if isinstance(m, FloatComputeLinear)}


def _encoder_weights(path, schema_to_nemo) -> dict[str, int]:
    """Module path -> stored type of the int8-able encoder weights of a file (those a Q8_0 file keeps
    compressed by default)."""
    with GGUFFile(path) as f:
        names = {schema_to_nemo(n): i.qtype for n, i in f.tensors.items()}
    return {n[: -len(".weight")]: t for n, t in names.items()
            if n and n.startswith("encoder.") and INT8_WEIGHTS.match(n)}


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
def test_a_q8_0_file_keeps_its_encoder_as_q8_0_blocks(rel, joint_index):
    """By default: a Q8Linear for each Q8_0 weight of the encoder, a HalfLinear for each other matrix
    product of the encoder (the pointwise convolutions stored in F32 / F16), nothing compressed and no
    int8 product outside the encoder (the joint and the LSTM dequantized to float32, even where the file
    stores them as Q8_0); the model computes what the exactly dequantized float model with those layers
    swapped in computes."""
    path = GGUF / rel
    schema = (lambda n: n) if rel.startswith("parakeet-cpp") else (lambda n: to_nemo(n, joint_index))
    auto = transcribe.load_model(str(path))
    layers = _compressed_layers(auto)
    stored = _encoder_weights(path, schema)
    assert set(layers) == set(stored) and layers
    assert {n for n, m in layers.items() if isinstance(m, Q8Linear)} == {n for n, t in stored.items() if t == quants.Q8_0}
    assert {n for n, m in layers.items() if isinstance(m, HalfLinear)} == {n for n, t in stored.items() if t != quants.Q8_0}
    assert not _int8_layers(auto)
    if auto.model.decoder is not None:
        assert not auto.model.decoder.int8
    assert {p.dtype for p in auto.model.parameters()} == {torch.float32}
    flt = transcribe.load_model(str(path), dtype="float32")
    assert not _compressed_layers(flt)
    for name, layer in layers.items():
        ref = flt.model.get_submodule(name)
        w = ref.weight.detach().reshape(ref.weight.shape[0], -1)
        assert torch.equal(layer.dequantized(), w if isinstance(layer, Q8Linear) else w.to(torch.float16).float()), name
        assert (layer.bias is None and ref.bias is None) or torch.equal(layer.bias, ref.bias), name
    # the float model with the same layers swapped in gives the same ids as the loaded one
    for name, layer in layers.items():
        parent, _, attr = name.rpartition(".")
        setattr(flt.model.get_submodule(parent), attr, layer)
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


def test_compressed_layers_hold_no_float_copy_of_their_weights():
    """The compressed layers' weights exist only as int8 (and fp16 scales) or float16, for a Q8_0 file's
    default and dtype int8 alike (no float32 weight kept beside them, no stand-in left)."""
    path = str(GGUF / "transcribe-cpp" / "tiny-rnnt-fit-Q8_0.gguf")
    for asr in (transcribe.load_model(path), transcribe.load_model(path, dtype="int8")):
        layers = {**_int8_layers(asr), **_compressed_layers(asr)}
        assert layers
        for name, layer in layers.items():
            assert [n for n, _ in layer.named_parameters()] == []
            if isinstance(layer, Q8Linear):
                assert layer.weight_q.dtype == torch.int8 and layer.weight_scale.dtype == torch.float16
            elif isinstance(layer, HalfLinear):
                assert layer.weight_f16.dtype == torch.float16
            else:
                assert layer.weight_t.dtype == torch.int8
        assert not [n for n, p in asr.model.named_parameters() if 0 in p.stride() and p.numel() > 1]
