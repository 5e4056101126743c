"""Reading CTranslate2 Whisper model directories (the faster-whisper format) without ctranslate2.

A CTranslate2 model is a directory with `model.bin` (the weights), `config.json` (alignment heads,
suppressed token ids, language ids) and `tokenizer.json` (a Hugging Face tokenizer). `model.bin` is
a little-endian binary file, as written by CTranslate2's `ModelSpec._serialize`:

    u32 binary_version                      (1 .. 6; this reader takes 2 .. 6)
    string spec_name                        (version >= 2; "WhisperSpec" here)
    u32 spec_revision                       (version >= 2)
    u32 num_variables
    num_variables times:
        string name                         ("encoder/layer_0/self_attention/linear_0/weight")
        u8 rank, rank times u32 dim
        version >= 4: u8 dtype id (0 float32, 1 int8, 2 int16, 3 int32, 4 float16, 5 bfloat16),
                      u32 byte count
        version < 4:  u8 item size (4 float32, 2 int16, 1 int8), u32 element count
        the bytes, row-major
    version >= 3: u32 num_aliases, then pairs of strings (alias, variable name)
    string = u16 length (including a trailing NUL), then that many bytes

Every read is checked against the bytes left in the file, so a truncated or corrupt file gives a
ModelError and never a huge allocation from a garbage length field.

Quantized weights (int8 per output row, int16 with one scalar) come with a `<name>_scale` variable;
CTranslate2 quantizes as `q = round(w * scale)`, so `w = q / scale` (dequantized to float32 here).

The variables are renamed to openai-whisper's state-dict layout (`encoder.blocks.0.attn.query.weight`
...), the fused self-attention QKV and cross-attention KV projections split, the key bias dropped
(it does not change the softmax: see `common.drop_key_biases`), and `encoder.positional_embedding`
made exactly as openai-whisper's `sinusoids()`.

Every variable of model.bin is a weight read here, a setting with the one value implemented
(`FIXED_FLAGS`), or one that does not change what the model computes (`HARMLESS_FLAGS`); any other
is an error, as is a config.json key other than those `CONFIG_KEYS` lists.
"""
from __future__ import annotations

import json
import logging
import math
import os
import struct
from pathlib import Path
from typing import BinaryIO, Optional

import torch

from ...errors import ModelError
from ..model import sinusoids
from .common import alignment_heads_from, check_tied

log = logging.getLogger(__name__)

MODEL_BIN = "model.bin"
CONFIG_JSON = "config.json"
TOKENIZER_JSON = "tokenizer.json"

MAX_BINARY_VERSION = 6
MIN_BINARY_VERSION = 2
MAX_RANK = 8

# CTranslate2's DataType enum order (include/ctranslate2/types.h)
_DTYPES = {
    0: ("float32", torch.float32, 4),
    1: ("int8", torch.int8, 1),
    2: ("int16", torch.int16, 2),
    3: ("int32", torch.int32, 4),
    4: ("float16", torch.float16, 2),
    5: ("bfloat16", torch.bfloat16, 2),
}
_LEGACY_ITEM_SIZE = {4: 0, 2: 2, 1: 1}  # binary version < 4: item size -> dtype id

# config.json: the keys read (CTranslate2's WhisperConfig), and settings with one implemented value.
CONFIG_KEYS = {"alignment_heads", "lang_ids", "suppress_ids", "suppress_ids_begin"}
FIXED_CONFIG = {"layer_norm_epsilon": (None, 1e-5)}  # openai-whisper's LayerNorm eps
# model.bin variables that are settings, not weights (CTranslate2's TransformerDecoderSpec), with the
# one value implemented here: what the Whisper converter writes.
FIXED_FLAGS = {
    "decoder/activation": 3,  # GELU (ctranslate2.specs.common_spec.Activation)
    "decoder/pre_norm": 1,
    "decoder/scale_embeddings": 0,  # no sqrt(d_model) factor on the token embeddings
    "decoder/embeddings/multiply_by_sqrt_depth": 0,  # the same, as older converters wrote it
    "decoder/alibi": 0,
    "decoder/start_from_zero_embedding": 0,
}
# Settings that do not change what the model computes here: accepted, not used.
HARMLESS_FLAGS = {
    "decoder/alignment_layer": "CTranslate2's returned attention (word alignment uses config.json's heads)",
    "decoder/alignment_heads": "CTranslate2's returned attention (word alignment uses config.json's heads)",
    "decoder/alibi_use_positive_positions": "only used with alibi (fixed to 0)",
    "decoder/scale_alibi": "only used with alibi (fixed to 0)",
}
HARMLESS_SUFFIXES = ("/keep_in_float32",)  # a precision hint for CTranslate2's own kernels


def read_ctranslate2(path: str | os.PathLike) -> tuple[dict, dict[str, torch.Tensor], str]:
    """Read a CTranslate2 Whisper model directory.

    Returns `(config, state_dict, tokenizer_json)`:
      config: config.json's contents, plus `config["dims"]` (openai-whisper's ModelDimensions as a
              dict), `config["spec"]`, `config["spec_revision"]`, `config["binary_version"]` and
              `config["weight_dtype"]` (the dtype of the weight matrices as stored in model.bin).
      state_dict: openai-whisper parameter names -> tensors. Float weights keep their stored dtype
              (float32, float16 or bfloat16); quantized ones are dequantized to float32.
      tokenizer_json: the text of tokenizer.json.
    """
    path = Path(path)
    if not path.exists():
        raise ModelError(f"{path}: no such model directory")
    if path.is_file():
        if path.name == MODEL_BIN:
            path = path.parent
        else:
            raise ModelError(f"{path}: a CTranslate2 model is a directory holding {MODEL_BIN}")
    bin_path = path / MODEL_BIN
    cfg_path = path / CONFIG_JSON
    tok_path = path / TOKENIZER_JSON
    for p in (bin_path, cfg_path, tok_path):
        if not p.is_file():
            raise ModelError(f"{path}: {p.name} is missing; not a complete CTranslate2 model directory")

    config = _read_config(cfg_path)
    try:
        tokenizer_json = tok_path.read_text(encoding="utf-8")
        json.loads(tokenizer_json)
    except (UnicodeDecodeError, ValueError) as e:
        raise ModelError(f"{tok_path}: {TOKENIZER_JSON} is not valid JSON ({str(e)[:200]})") from None

    header, variables = read_model_bin(bin_path)
    if header["spec"] != "WhisperSpec":
        raise ModelError(f"{bin_path}: a {header['spec'] or 'legacy'} model, not a Whisper model (WhisperSpec)")
    state_dict, dims = _to_openai_whisper(variables, bin_path)
    _check_config(config, dims, cfg_path)
    config = dict(config)
    config["dims"] = dims
    config["spec"] = header["spec"]
    config["spec_revision"] = header["spec_revision"]
    config["binary_version"] = header["binary_version"]
    config["weight_dtype"] = header["weight_dtype"]
    return config, state_dict, tokenizer_json


def _check_config(cfg: dict, dims: dict, cfg_path: Path) -> None:
    """config.json's keys are those read or fixed to their implemented value, and what it says fits
    the weights (alignment heads inside the decoder, token ids inside the vocabulary)."""
    for key, value in cfg.items():
        if key in FIXED_CONFIG:
            if value not in FIXED_CONFIG[key]:
                raise ModelError(f"{cfg_path}: {key} = {value!r} is not implemented (only {FIXED_CONFIG[key][-1]!r})")
        elif key not in CONFIG_KEYS:
            shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
            raise ModelError(f"{cfg_path}: {key} = {shown} is a setting this code does not implement")
    if cfg.get("alignment_heads"):
        alignment_heads_from(cfg["alignment_heads"], dims["n_text_layer"], dims["n_text_head"], str(cfg_path))
    for key in ("suppress_ids", "suppress_ids_begin", "lang_ids"):
        ids = cfg.get(key) or []
        bad = [i for i in ids if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < dims["n_vocab"]
               ] if isinstance(ids, list) else []
        if not isinstance(ids, list) or bad:
            raise ModelError(f"{cfg_path}: {key} holds {bad[:3] if bad else type(ids).__name__}, not token ids "
                             f"of the vocabulary of {dims['n_vocab']}")


def _read_config(cfg_path: Path) -> dict:
    try:
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ModelError(f"{cfg_path}: {CONFIG_JSON} is not valid JSON ({str(e)[:200]})") from None
    if not isinstance(cfg, dict):
        raise ModelError(f"{cfg_path}: {CONFIG_JSON} does not hold a JSON object")
    return cfg


# ---------------------------------------------------------------------------------------------
# model.bin


class _Reader:
    """Reads from a file, checking each read against the bytes that remain."""

    def __init__(self, f: BinaryIO, size: int, path: Path):
        self.f, self.size, self.path, self.pos = f, size, path, 0

    def fail(self, what: str) -> ModelError:
        return ModelError(f"{self.path}: {MODEL_BIN} is truncated/corrupt ({what} at byte {self.pos})")

    def need(self, n: int, what: str) -> None:
        if n < 0 or n > self.size - self.pos:
            raise ModelError(
                f"{self.path}: {MODEL_BIN} is truncated/corrupt ({what} needs {n} bytes at byte "
                f"{self.pos}, {max(self.size - self.pos, 0)} left)")

    def bytes(self, n: int, what: str) -> bytes:
        self.need(n, what)
        data = self.f.read(n)
        if len(data) != n:
            raise ModelError(f"{self.path}: {MODEL_BIN} is truncated/corrupt ({what} cut short at byte {self.pos})")
        self.pos += n
        return data

    def into(self, buf: bytearray, what: str) -> None:
        n = len(buf)
        self.need(n, what)
        got = self.f.readinto(buf) if n else 0
        if got != n:
            raise ModelError(f"{self.path}: {MODEL_BIN} is truncated/corrupt ({what} cut short at byte {self.pos})")
        self.pos += n

    def u8(self, what: str) -> int:
        return self.bytes(1, what)[0]

    def u16(self, what: str) -> int:
        return struct.unpack("<H", self.bytes(2, what))[0]

    def u32(self, what: str) -> int:
        return struct.unpack("<I", self.bytes(4, what))[0]

    def string(self, what: str) -> str:
        n = self.u16(what + " length")
        if n == 0:
            raise self.fail(f"{what} of length 0")
        raw = self.bytes(n, what)
        if raw[-1] != 0:
            raise self.fail(f"{what} not NUL-terminated")
        try:
            s = raw[:-1].decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"{what} is not UTF-8") from None
        if "\x00" in s:
            raise self.fail(f"{what} holds a NUL byte")
        return s


def read_model_bin(bin_path: str | os.PathLike) -> tuple[dict, dict[str, torch.Tensor]]:
    """Parse a CTranslate2 `model.bin` into (header, {CT2 variable name: tensor}).

    Aliases are resolved to the same tensor (and `<alias>_scale` to `<variable>_scale`, as
    CTranslate2 does). Nothing is dequantized or renamed here.
    """
    bin_path = Path(bin_path)
    try:
        size = bin_path.stat().st_size
        f = open(bin_path, "rb")
    except OSError as e:
        raise ModelError(f"{bin_path}: cannot read {MODEL_BIN} ({e.strerror})") from None
    with f:
        r = _Reader(f, size, bin_path)
        try:
            return _parse(r)
        except OSError as e:
            raise ModelError(f"{bin_path}: cannot read {MODEL_BIN} ({e.strerror or e})") from None


def _parse(r: _Reader) -> tuple[dict, dict[str, torch.Tensor]]:
    version = r.u32("binary version")
    if not MIN_BINARY_VERSION <= version <= MAX_BINARY_VERSION:
        raise ModelError(
            f"{r.path}: {MODEL_BIN} is truncated/corrupt or of an unsupported CTranslate2 binary "
            f"version ({version}; this reader takes {MIN_BINARY_VERSION}..{MAX_BINARY_VERSION})")
    spec = r.string("spec name")
    revision = r.u32("spec revision")
    num_vars = r.u32("variable count")
    # a variable takes at least 2 (name length) + 2 (name) + 1 (rank) + 1 (dtype) + 4 (size) bytes
    if num_vars > (r.size - r.pos) // 10:
        raise r.fail(f"variable count {num_vars} larger than the file can hold")

    variables: dict[str, torch.Tensor] = {}
    weight_dtypes: set[str] = set()
    for i in range(num_vars):
        name = r.string(f"name of variable {i}")
        if name in variables:
            raise r.fail(f"variable {name} appears twice")
        rank = r.u8(f"rank of {name}")
        if rank > MAX_RANK:
            raise r.fail(f"rank {rank} of {name}")
        shape = [r.u32(f"shape of {name}") for _ in range(rank)]
        numel = math.prod(shape)
        if version >= 4:
            type_id = r.u8(f"dtype of {name}")
            if type_id not in _DTYPES:
                raise r.fail(f"unknown dtype id {type_id} of {name}")
            num_bytes = r.u32(f"byte count of {name}")
        else:
            item = r.u8(f"item size of {name}")
            if item not in _LEGACY_ITEM_SIZE:
                raise r.fail(f"unknown item size {item} of {name}")
            type_id = _LEGACY_ITEM_SIZE[item]
            num_bytes = r.u32(f"element count of {name}") * item
        dname, dtype, item_size = _DTYPES[type_id]
        if num_bytes != numel * item_size:
            raise r.fail(f"{name}: {num_bytes} bytes for shape {shape} of {dname}")
        r.need(num_bytes, f"data of {name}")
        buf = bytearray(num_bytes)
        r.into(buf, f"data of {name}")
        if num_bytes:
            t = torch.frombuffer(buf, dtype=dtype)
        else:
            t = torch.empty(0, dtype=dtype)
        t = t.reshape(shape)
        if name.endswith("/weight") and rank >= 2:
            weight_dtypes.add(dname)
        variables[name] = t

    if version >= 3:
        num_aliases = r.u32("alias count")
        if num_aliases > (r.size - r.pos) // 8:
            raise r.fail(f"alias count {num_aliases} larger than the file can hold")
        for i in range(num_aliases):
            alias = r.string(f"alias {i}")
            target = r.string(f"target of alias {alias}")
            if target not in variables:
                raise r.fail(f"alias {alias} names an unknown variable {target}")
            variables.setdefault(alias, variables[target])
            if target + "_scale" in variables:
                variables.setdefault(alias + "_scale", variables[target + "_scale"])
    if r.pos != r.size:
        raise r.fail(f"{r.size - r.pos} unexpected bytes after the last record")

    header = {
        "binary_version": version,
        "spec": spec,
        "spec_revision": revision,
        "weight_dtype": "+".join(sorted(weight_dtypes)) or "none",
    }
    return header, variables


# ---------------------------------------------------------------------------------------------
# CTranslate2 names -> openai-whisper names


class _Vars:
    """Takes variables out by CT2 name, dequantizing with `<name>_scale` where present."""

    def __init__(self, variables: dict[str, torch.Tensor], path: Path):
        self.v, self.path, self.used = variables, path, set()

    def has(self, name: str) -> bool:
        return name in self.v

    def get(self, name: str) -> torch.Tensor:
        if name not in self.v:
            raise ModelError(f"{self.path}: {MODEL_BIN} lacks the variable {name}; not a complete Whisper model")
        self.used.add(name)
        t = self.v[name]
        scale_name = name + "_scale"
        if t.dtype in (torch.int8, torch.int16) and not t.is_floating_point():
            if scale_name not in self.v:
                raise ModelError(f"{self.path}: {name} is quantized ({t.dtype}) but {scale_name} is missing")
            self.used.add(scale_name)
            scale = self.v[scale_name].float()
            w = t.float()
            if scale.numel() == 1:
                return w / scale.reshape(())
            if scale.dim() != 1 or scale.shape[0] != w.shape[0]:
                raise ModelError(f"{self.path}: {scale_name} has shape {list(scale.shape)} for {name} of shape {list(w.shape)}")
            return w / scale.reshape([-1] + [1] * (w.dim() - 1))
        if not t.is_floating_point():
            raise ModelError(f"{self.path}: {name} has dtype {t.dtype}, expected a float or quantized weight")
        return t


def _shape_error(path: Path, name: str, t: torch.Tensor, expected) -> ModelError:
    return ModelError(f"{path}: {MODEL_BIN}: {name} has shape {list(t.shape)}, expected {expected}")


def _count_layers(variables: dict, prefix: str) -> int:
    n = 0
    while any(k.startswith(f"{prefix}/layer_{n}/") for k in variables):
        n += 1
    return n


def _scalar(variables: dict, name: str) -> Optional[int]:
    t = variables.get(name)
    if t is None or t.numel() != 1 or t.is_floating_point():
        return None
    return int(t.reshape(()).item())


def _to_openai_whisper(variables: dict[str, torch.Tensor], path: Path) -> tuple[dict, dict]:
    """model.bin's variables -> openai-whisper's state dict and dims (a ModelError for a variable
    missing, of the wrong shape, or one this code does not implement)."""
    n_audio_layer = _count_layers(variables, "encoder")
    n_text_layer = _count_layers(variables, "decoder")
    if n_audio_layer == 0 or n_text_layer == 0:
        raise ModelError(f"{path}: {MODEL_BIN} has no encoder or decoder layers; not a Whisper model")
    c = _Converter(variables, path)
    n_mels, n_audio_state, n_audio_ctx = c.encoder(n_audio_layer)
    n_vocab, n_text_state, n_text_ctx = c.decoder(n_text_layer)
    n_audio_head, n_text_head = c.head_counts()
    if n_audio_head <= 0 or n_audio_state % n_audio_head or n_text_head <= 0 or n_text_state % n_text_head:
        raise ModelError(f"{path}: {MODEL_BIN}: head counts {n_audio_head}/{n_text_head} do not divide "
                         f"the widths {n_audio_state}/{n_text_state}")

    dims = {
        "n_mels": n_mels,
        "n_audio_ctx": n_audio_ctx,
        "n_audio_state": n_audio_state,
        "n_audio_head": n_audio_head,
        "n_audio_layer": n_audio_layer,
        "n_vocab": n_vocab,
        "n_text_ctx": n_text_ctx,
        "n_text_state": n_text_state,
        "n_text_head": n_text_head,
        "n_text_layer": n_text_layer,
    }
    return c.sd, dims


class _Converter:
    """openai-whisper's state dict (`sd`) built from model.bin's variables, part by part."""

    def __init__(self, variables: dict[str, torch.Tensor], path: Path):
        self.variables, self.path = variables, path
        self.V = _Vars(variables, path)
        self.sd: dict[str, torch.Tensor] = {}

    def ln(self, dst: str, src: str) -> None:
        self.sd[dst + ".weight"] = self.V.get(src + "/gamma")
        self.sd[dst + ".bias"] = self.V.get(src + "/beta")

    def linear(self, dst: str, src: str, bias: bool = True) -> None:
        self.sd[dst + ".weight"] = self.V.get(src + "/weight")
        if bias:
            self.sd[dst + ".bias"] = self.V.get(src + "/bias")

    def split_rows(self, name: str, t: torch.Tensor, parts: int, n_state: int) -> list[torch.Tensor]:
        if t.shape[0] != parts * n_state or (t.dim() == 2 and t.shape[1] != n_state):
            raise _shape_error(self.path, name, t, f"[{parts * n_state}{', ' + str(n_state) if t.dim() == 2 else ''}]")
        return [part.clone() for part in t.split(n_state, dim=0)]

    def encoder(self, n_layers: int) -> tuple[int, int, int]:
        """The encoder -> (n_mels, n_audio_state, n_audio_ctx)."""
        V, sd, path = self.V, self.sd, self.path
        conv1 = V.get("encoder/conv1/weight")
        conv2 = V.get("encoder/conv2/weight")
        if conv1.dim() != 3 or conv1.shape[2] != 3:
            raise _shape_error(path, "encoder/conv1/weight", conv1, "[n_state, n_mels, 3]")
        n_audio_state, n_mels = int(conv1.shape[0]), int(conv1.shape[1])
        if list(conv2.shape) != [n_audio_state, n_audio_state, 3]:
            raise _shape_error(path, "encoder/conv2/weight", conv2, f"[{n_audio_state}, {n_audio_state}, 3]")
        sd["encoder.conv1.weight"] = conv1
        sd["encoder.conv1.bias"] = V.get("encoder/conv1/bias")
        sd["encoder.conv2.weight"] = conv2
        sd["encoder.conv2.bias"] = V.get("encoder/conv2/bias")
        n_audio_ctx = self._encoder_positions(n_audio_state)
        for i in range(n_layers):
            src, dst = f"encoder/layer_{i}", f"encoder.blocks.{i}"
            self.self_attention(f"{src}/self_attention", f"{dst}.attn", n_audio_state)
            self.ln(f"{dst}.attn_ln", f"{src}/self_attention/layer_norm")
            self.linear(f"{dst}.mlp.0", f"{src}/ffn/linear_0")
            self.linear(f"{dst}.mlp.2", f"{src}/ffn/linear_1")
            self.ln(f"{dst}.mlp_ln", f"{src}/ffn/layer_norm")
        self.ln("encoder.ln_post", "encoder/layer_norm")
        return n_mels, n_audio_state, n_audio_ctx

    def _encoder_positions(self, n_audio_state: int) -> int:
        """The encoder's positional embedding (openai-whisper's sinusoids unless the file stores
        others) -> n_audio_ctx."""
        path = self.path
        n_audio_ctx = 1500
        stored = self.variables.get("encoder/position_encodings/encodings")
        if stored is not None:
            self.V.used.add("encoder/position_encodings/encodings")
            if stored.dim() != 2 or stored.shape[1] != n_audio_state:
                raise _shape_error(path, "encoder/position_encodings/encodings", stored, f"[n_audio_ctx, {n_audio_state}]")
            n_audio_ctx = int(stored.shape[0])
        pos = sinusoids(n_audio_ctx, n_audio_state)
        if stored is not None and not torch.allclose(stored.float(), pos, atol=2e-3, rtol=0):
            log.warning("%s: the stored encoder position encodings are not openai-whisper's sinusoids; using them", path)
            pos = stored.float()
        self.sd["encoder.positional_embedding"] = pos
        return n_audio_ctx

    def decoder(self, n_layers: int) -> tuple[int, int, int]:
        """The decoder -> (n_vocab, n_text_state, n_text_ctx)."""
        V, sd, path = self.V, self.sd, self.path
        emb = V.get("decoder/embeddings/weight")
        if emb.dim() != 2:
            raise _shape_error(path, "decoder/embeddings/weight", emb, "[n_vocab, n_state]")
        n_vocab, n_text_state = int(emb.shape[0]), int(emb.shape[1])
        sd["decoder.token_embedding.weight"] = emb
        dpos = V.get("decoder/position_encodings/encodings")
        if dpos.dim() != 2 or dpos.shape[1] != n_text_state:
            raise _shape_error(path, "decoder/position_encodings/encodings", dpos, f"[n_text_ctx, {n_text_state}]")
        n_text_ctx = int(dpos.shape[0])
        sd["decoder.positional_embedding"] = dpos
        if V.has("decoder/projection/weight"):
            self._check_projection(emb)
        for i in range(n_layers):
            self._decoder_layer(f"decoder/layer_{i}", f"decoder.blocks.{i}", n_text_state)
        self.ln("decoder.ln", "decoder/layer_norm")
        return n_vocab, n_text_state, n_text_ctx

    def _check_projection(self, emb: torch.Tensor) -> None:
        """The output projection must be the token embedding (tied) with no bias."""
        V, variables, path = self.V, self.variables, self.path
        pw, ew = "decoder/projection/weight", "decoder/embeddings/weight"
        if variables[pw] is variables[ew] and variables.get(pw + "_scale") is variables.get(ew + "_scale"):
            V.used.update(n for n in (pw, pw + "_scale") if n in variables)  # an alias: tied
        else:
            quantized = pw + "_scale" in variables or ew + "_scale" in variables
            # int8 weights quantized apart agree within one step (1/127 of a row's largest value)
            check_tied(V.get(pw), emb, pw, str(path), tol=1.01 / 127 if quantized else 0.0)
        if V.has("decoder/projection/bias"):
            pb = V.get("decoder/projection/bias")
            if bool((pb != 0).any()):
                raise ModelError(f"{path}: decoder/projection/bias is not zero; a bias on the output "
                                 "projection is not implemented (Whisper has none)")

    def _decoder_layer(self, src: str, dst: str, n_text_state: int) -> None:
        self.self_attention(f"{src}/self_attention", f"{dst}.attn", n_text_state)
        self.ln(f"{dst}.attn_ln", f"{src}/self_attention/layer_norm")
        # cross-attention: linear_0 = query, linear_1 = fused key/value, linear_2 = out
        self.linear(f"{dst}.cross_attn.query", f"{src}/attention/linear_0")
        kv_w = self.V.get(f"{src}/attention/linear_1/weight")
        kv_b = self.V.get(f"{src}/attention/linear_1/bias")
        k_w, v_w = self.split_rows(f"{src}/attention/linear_1/weight", kv_w, 2, n_text_state)
        # the key bias (k_b) is dropped: it does not change the softmax (common.drop_key_biases)
        _, v_b = self.split_rows(f"{src}/attention/linear_1/bias", kv_b, 2, n_text_state)
        self.sd[f"{dst}.cross_attn.key.weight"] = k_w
        self.sd[f"{dst}.cross_attn.value.weight"] = v_w
        self.sd[f"{dst}.cross_attn.value.bias"] = v_b
        self.linear(f"{dst}.cross_attn.out", f"{src}/attention/linear_2")
        self.ln(f"{dst}.cross_attn_ln", f"{src}/attention/layer_norm")
        self.linear(f"{dst}.mlp.0", f"{src}/ffn/linear_0")
        self.linear(f"{dst}.mlp.2", f"{src}/ffn/linear_1")
        self.ln(f"{dst}.mlp_ln", f"{src}/ffn/layer_norm")

    def self_attention(self, src: str, dst: str, n_state: int) -> None:
        """Self-attention: linear_0 = fused query/key/value, linear_1 = out."""
        V, sd = self.V, self.sd
        qkv_w = V.get(f"{src}/linear_0/weight")
        qkv_b = V.get(f"{src}/linear_0/bias")
        q_w, k_w, v_w = self.split_rows(f"{src}/linear_0/weight", qkv_w, 3, n_state)
        # the key bias (the middle third) is dropped: it does not change the softmax (common.drop_key_biases)
        q_b, _, v_b = self.split_rows(f"{src}/linear_0/bias", qkv_b, 3, n_state)
        sd[f"{dst}.query.weight"] = q_w
        sd[f"{dst}.query.bias"] = q_b
        sd[f"{dst}.key.weight"] = k_w
        sd[f"{dst}.value.weight"] = v_w
        sd[f"{dst}.value.bias"] = v_b
        sd[f"{dst}.out.weight"] = V.get(f"{src}/linear_1/weight")
        sd[f"{dst}.out.bias"] = V.get(f"{src}/linear_1/bias")

    def head_counts(self) -> tuple[int, int]:
        """encoder/num_heads and decoder/num_heads (never guessed); then the flags are checked and
        every variable must have been read."""
        n_audio_head = _scalar(self.variables, "encoder/num_heads")
        n_text_head = _scalar(self.variables, "decoder/num_heads")
        for name, heads in (("encoder/num_heads", n_audio_head), ("decoder/num_heads", n_text_head)):
            if heads is None:
                raise ModelError(f"{self.path}: has no integer {name}; the head count is not guessed")
            self.V.used.add(name)
        _check_flags(self.variables, self.V.used, self.path)
        return n_audio_head, n_text_head


def _check_flags(variables: dict, used: set, path: Path) -> None:
    """The settings among model.bin's variables hold their implemented values, and every other
    variable was read as a weight; else a ModelError naming it."""
    for name, want in FIXED_FLAGS.items():
        if name in variables:
            used.add(name)
            t = variables[name]
            if t.numel() != 1 or t.is_floating_point() or int(t.reshape(()).item()) != want:
                shown = t.reshape(-1)[:4].tolist()
                raise ModelError(f"{path}: {name} = {shown[0] if len(shown) == 1 else shown} "
                                 f"is not implemented (only {want})")
    unread = sorted(n for n in variables if n not in used and n not in HARMLESS_FLAGS
                    and not n.endswith(HARMLESS_SUFFIXES))
    if unread:
        more = f" and {len(unread) - 4} more" if len(unread) > 4 else ""
        raise ModelError(f"{path}: holds {', '.join(unread[:4])}{more}, which this code does not "
                         "implement (not a variable of the Whisper model it reads)")
