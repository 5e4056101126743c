"""Granite Speech NAR in int8 (`GraniteNAR.quantize_int8`, transcribe/granite/gguf.py's int8 reading):
the linear layers of the encoder, projector and editor as Int8Linear, from a checkpoint directory's float32
weights or straight from a GGUF file's bytes (dtype int8; a Q8_0 file's default keeps Q8_0 blocks instead:
tests/test_gguf_q8_mode.py). Each int8 layer is compared exactly with the Int8Linear built from the float
weight it stands for; the texts on wave_A/B/C with the upstream runtime's and float32's."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

import transcribe
from transcribe.errors import ModelError
from transcribe.gguf import quants
from transcribe.gguf.file import GGUFFile
from transcribe.granite.checkpoint import read_checkpoint
from transcribe.granite.config import parse_config
from transcribe.granite.gguf import read_gguf, tensor_names
from transcribe.granite.gguf_export import converter_type
from transcribe.granite.model import INT8_WEIGHTS, build
from transcribe.granite.recognizer import check_dtype
from transcribe.quant import Int8Linear

from .conftest import SHARED

TINY = SHARED / "models" / "granite-nar-tiny"
UP = SHARED / "models" / "gguf" / "transcribe-cpp"
FILES = {q: UP / f"granite-nar-tiny-{q}.gguf" for q in ("BF16", "Q8_0", "Q4_0")}
WAVES = {c: TINY / f"wave_{c}.wav" for c in "ABC"}
# 4 encoder blocks x 9 (ff1 up/down, q, kv, out, two pointwise convolutions, ff2 up/down) + input_linear;
# projector: layer_projector, out_linear, 2 layers x 6; editor: 2 layers x 7.
N_INT8 = 4 * 9 + 1 + 2 + 2 * 6 + 2 * 7
FLOAT_KEPT = ("encoder.out", "encoder.out_mid", "encoder.out_bpe")


def upstream_text(q: str, audio: Path) -> str:
    ref = json.loads(FILES[q].with_suffix(".ref.json").read_text())
    (run,) = [r for r in ref["runs"] if r["audio"] == audio.relative_to(SHARED).as_posix()]
    return run["result"]["text"]


def int8_layers(asr) -> dict[str, Int8Linear]:
    return {n: m for n, m in asr.model.named_modules() if isinstance(m, Int8Linear)}


def ids_of(asr) -> dict[str, list[int]]:
    return {c: [t.id for t in asr.transcribe(str(w)).tokens] for c, w in WAVES.items()}


def texts_of(asr, ids) -> dict[str, str]:
    return {c: asr.tokenizer.decode(v) for c, v in ids.items()}


def as_matrix(layer: nn.Module) -> torch.Tensor:
    w = layer.weight.detach()
    return w[:, :, 0] if isinstance(layer, nn.Conv1d) else w


def assert_same_int8(got: Int8Linear, want: Int8Linear, name: str) -> None:
    assert torch.equal(got.weight_t, want.weight_t), name
    assert torch.equal(got.weight_scale, want.weight_scale), name
    assert (got.bias is None and want.bias is None) or torch.equal(got.bias, want.bias), name


@pytest.fixture(scope="module")
def float_dir():
    return transcribe.load_model(str(TINY), dtype="float32")


@pytest.fixture(scope="module")
def int8_dir():
    return transcribe.load_model(str(TINY), dtype="int8")


@pytest.fixture(scope="module")
def float_ids(float_dir):
    return ids_of(float_dir)


def test_directory_int8_layers_are_the_checkpoint_weights_quantized(float_dir, int8_dir):
    layers = int8_layers(int8_dir)
    assert len(layers) == N_INT8
    assert set(layers) == {n for n, _ in float_dir.model.named_modules() if INT8_WEIGHTS.match(n + ".weight")}
    for name, layer in layers.items():
        ref = float_dir.model.get_submodule(name)
        assert_same_int8(layer, Int8Linear(as_matrix(ref), ref.bias), name)
    # what stays float: the CTC heads, the embedding (and so the tied head), norms, depthwise convolutions
    for name in FLOAT_KEPT:
        m = int8_dir.model.get_submodule(name)
        assert type(m) is nn.Linear and m.weight.dtype == torch.float32, name
    lm = int8_dir.model.language_model
    assert lm.lm_head is None and lm.head_weight() is lm.model.embed_tokens.weight
    assert lm.model.embed_tokens.weight.dtype == torch.float32
    assert int8_dir.model.encoder.layers[0].conv.depth_conv.conv.weight.dtype == torch.float32
    assert int8_dir.model.dtype == torch.float32 and float_dir.model.dtype == torch.float32


def test_int8_layers_hold_no_float_weight(int8_dir):
    for asr in (int8_dir, transcribe.load_model(str(FILES["Q8_0"]), dtype="int8")):
        layers = int8_layers(asr)
        assert len(layers) == N_INT8
        for name, layer in layers.items():
            assert [n for n, _ in layer.named_parameters()] == [], name
            assert layer.weight_t.dtype == torch.int8 and layer.weight_scale.dtype == torch.float32, name
            assert not hasattr(layer, "weight"), name
        # no stand-in (an expanded zero) is left anywhere, and nothing else is int8 or float16
        assert not [n for n, p in asr.model.named_parameters() if p.numel() > 1 and 0 in p.stride()]
        assert {p.dtype for p in asr.model.parameters()} == {torch.float32}


def test_directory_int8_texts_equal_float32_on_wave_abc(int8_dir, float_dir, float_ids):
    """The int8 model gives float32's ids exactly on the three waves (measured; asserted), which are also
    transcribe.cpp's BF16 text."""
    got = ids_of(int8_dir)
    for c in WAVES:
        print(f"wave_{c}: float32 {texts_of(float_dir, float_ids)[c]!r} int8 {texts_of(int8_dir, got)[c]!r}")
    assert got == float_ids
    assert all(t for t in got.values())
    for c, wav in WAVES.items():
        assert int8_dir.tokenizer.decode(got[c]) == upstream_text("BF16", wav)


def test_gguf_int8_from_bf16_equals_the_directory_int8_model_of_the_bf16_weights(int8_dir, float_ids):
    """dtype int8 from the BF16 file: each int8 layer equals the Int8Linear of the file's weight (exactly
    dequantized: BF16, or F16 for the pointwise convolutions). The checkpoint is float32 and the file holds
    it rounded to BF16 / F16, so the int8 weights equal the directory's int8 model's only where that rounding
    does not move a value across a rounding boundary of w / scale (and the scales, absmax / 127 of rounded
    values, differ in their last bits): the exact equality holds with the directory model built from the
    checkpoint rounded as the converter rounds it (every tensor, state dict and ids the same); with the
    float32 checkpoint the int8 values are compared and the ids are the same (measured)."""
    gguf = transcribe.load_model(str(FILES["BF16"]), dtype="int8")
    flt = transcribe.load_model(str(FILES["BF16"]), dtype="float32")
    assert not int8_layers(flt)
    layers = int8_layers(gguf)
    assert set(layers) == set(int8_layers(int8_dir))
    for name, layer in layers.items():
        ref = flt.model.get_submodule(name)
        assert_same_int8(layer, Int8Linear(as_matrix(ref), ref.bias), name)

    # the directory model of the converter-rounded checkpoint, quantized: the same model exactly
    ckpt = read_checkpoint(TINY, torch.float32)  # the projector's identity LayerNorms dropped, as the model has none
    cfg = parse_config(ckpt.config, ckpt.layout)
    names = tensor_names(cfg.encoder.num_layers, cfg.projector.num_layers, len(cfg.encoder_layer_indices),
                         cfg.text.num_hidden_layers)
    rounding = {quants.BF16: torch.bfloat16, quants.F16: torch.float16, quants.F32: torch.float32}
    state = {ibm: ckpt.state_dict[ibm].to(rounding[converter_type(g)]).float() for ibm, g in names
             if ibm in ckpt.state_dict}
    model = build(cfg, state, tied=True)
    assert model.quantize_int8() == N_INT8
    a, b = model.state_dict(), gguf.model.state_dict()
    assert set(a) == set(b)
    for k in a:
        assert torch.equal(a[k], b[k]), k
    gguf_ids = ids_of(gguf)
    gguf.model = model
    assert ids_of(gguf) == gguf_ids

    # against the float32 checkpoint's int8 model: int8 values mostly equal, ids equal
    same = total = 0
    for name, layer in layers.items():
        other = int8_dir.model.get_submodule(name)
        same += int((layer.weight_t == other.weight_t).sum())
        total += layer.weight_t.numel()
        # BF16 moves a weight by at most 2^-9 of itself, at most 0.25 of a step of 127 / absmax: one step
        assert int((layer.weight_t.int() - other.weight_t.int()).abs().max()) <= 1, name
        torch.testing.assert_close(layer.weight_scale, other.weight_scale, rtol=2 ** -8, atol=0)
    print(f"int8 values equal between the BF16 file's and the float32 checkpoint's int8 models: {same}/{total}"
          f" ({same / total:.4f})")
    assert same / total > 0.9  # measured 561524 / 595968 (0.9422)
    assert gguf_ids == float_ids


def test_a_q8_0_file_in_int8_gives_the_upstream_text(float_ids):
    """dtype int8 from a Q8_0 file: every layer quantize_int8 names, each equal to the Int8Linear of the
    exactly dequantized weight (Q8_0 blocks, or F16 for the pointwise convolutions, made again into rows
    with one scale); its texts are transcribe.cpp's own on wave_A/B/C (and float32's). By default the file
    keeps its Q8_0 blocks instead (Q8Linear, not int8 rows)."""
    auto = transcribe.load_model(str(FILES["Q8_0"]))
    assert not int8_layers(auto)
    int8 = transcribe.load_model(str(FILES["Q8_0"]), dtype="int8")
    flt = transcribe.load_model(str(FILES["Q8_0"]), dtype="float32")
    assert not int8_layers(flt)
    layers = int8_layers(int8)
    assert len(layers) == N_INT8
    with GGUFFile(FILES["Q8_0"]) as f:
        stored = {ibm: f.tensors[g].qtype for ibm, g in tensor_names(4, 2, 4, 2)}
    assert {stored[n + ".weight"] for n in layers} == {quants.Q8_0, quants.F16}
    assert {n for n in layers if stored[n + ".weight"] == quants.F16} == \
        {f"encoder.layers.{i}.conv.{c}_conv" for i in range(4) for c in ("up", "down")}
    for name, layer in layers.items():
        ref = flt.model.get_submodule(name)
        assert_same_int8(layer, Int8Linear(as_matrix(ref), ref.bias), name)
    got, want_float = ids_of(int8), ids_of(flt)
    for c, wav in WAVES.items():
        text = int8.tokenizer.decode(got[c])
        print(f"Q8_0 wave_{c}: int8 {text!r} float32 {int8.tokenizer.decode(want_float[c])!r} "
              f"upstream {upstream_text('Q8_0', wav)!r}")
        assert text == upstream_text("Q8_0", wav), c
    assert got == want_float == float_ids


def test_read_gguf_int8_modes_and_a_q4_0_file():
    """"q8_0" reads only the Q8_0-stored weights as int8 rows (the pointwise convolutions stay float);
    a Q4_0 file has no Q8_0 weights, so by default it is float32, and dtype int8 quantizes its Q4_0 blocks
    (dequantized exactly) per row."""
    cfg, state, _, extra = read_gguf(FILES["Q8_0"], torch.float32, "q8_0")
    rows = extra["int8"]
    assert set(rows.rows) == {n for n in state if INT8_WEIGHTS.match(n)} - \
        {f"encoder.layers.{i}.conv.{c}_conv.weight" for i in range(4) for c in ("up", "down")}
    for n in rows.rows:
        assert 0 in state[n].stride()  # a stand-in: one zero, expanded
    _, state, _, extra = read_gguf(FILES["Q4_0"], torch.float32, "auto")
    assert extra["int8"] is None and not [n for n, t in state.items() if 0 in t.stride() and t.numel() > 1]
    assert not int8_layers(transcribe.load_model(str(FILES["Q4_0"])))
    q4 = transcribe.load_model(str(FILES["Q4_0"]), dtype="int8")
    flt = transcribe.load_model(str(FILES["Q4_0"]), dtype="float32")
    layers = int8_layers(q4)
    assert len(layers) == N_INT8
    for name, layer in layers.items():
        ref = flt.model.get_submodule(name)
        assert_same_int8(layer, Int8Linear(as_matrix(ref), ref.bias), name)
    assert q4.transcribe(str(WAVES["A"])).tokens


def test_dtype_checks_and_quantize_needs_float32():
    cpu = torch.device("cpu")
    assert check_dtype(cpu, torch.int8) == torch.int8
    assert check_dtype(cpu, None) == torch.float32
    with pytest.raises(ModelError, match="float16"):
        check_dtype(cpu, torch.float16)
    bf16 = transcribe.load_model(str(TINY), dtype="bfloat16")
    with pytest.raises(ValueError, match="float32"):
        bf16.model.quantize_int8()
    with pytest.raises(ValueError, match="float32"):
        read_gguf(FILES["BF16"], torch.bfloat16, "all")
