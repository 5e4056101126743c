"""A SenseVoice model directory in the published layout (`FunAudioLLM/SenseVoiceSmall`, `iic/SenseVoiceSmall`):
config.yaml (funasr's: model SenseVoiceSmall, encoder SenseVoiceEncoderSmall, frontend WavFrontend), model.pt
(a state dict, read with `torch.load(weights_only=True)`), am.mvn (CMVN) and the SentencePiece model
(chn_jpn_yue_eng_ko_spectok.bpe.model, or the `tokenizer_conf.bpemodel` of configuration.json). Every
setting this implementation does not run is refused with a ModelError naming it."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import yaml

from ..config_yaml import YAMLBoundError, load_yaml
from ..errors import ModelError
from .model import EncoderConfig

BPE_NAME = "chn_jpn_yue_eng_ko_spectok.bpe.model"
MODEL_NAMES = ("SenseVoiceSmall",)
ENCODER_NAMES = ("SenseVoiceEncoderSmall",)


@dataclass(frozen=True)
class ModelFiles:
    config: dict
    weights: Path
    cmvn: Path
    bpe: Path
    frontend: dict


def read_yaml(path: Path) -> dict:
    try:
        cfg = load_yaml(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise ModelError(f"{path}: unreadable ({e})") from None
    except YAMLBoundError as e:
        raise ModelError(f"{path}: not a model config ({e})") from None
    except yaml.YAMLError as e:
        raise ModelError(f"{path}: not YAML ({str(e)[:200]})") from None
    if not isinstance(cfg, dict):
        raise ModelError(f"{path}: not a model config (a mapping)")
    return cfg


def _metas(path: Path) -> dict:
    """configuration.json's file_path_metas, or {} (the file is optional)."""
    f = path / "configuration.json"
    if not f.is_file():
        return {}
    try:
        metas = json.loads(f.read_text(encoding="utf-8")).get("file_path_metas", {})
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        raise ModelError(f"{f}: not funasr's configuration.json") from None
    return metas if isinstance(metas, dict) else {}


def _inside(path: Path, name, default: str) -> Path:
    name = default if not isinstance(name, str) or not name else name
    p = (path / name).resolve()
    if path.resolve() not in p.parents:
        raise ModelError(f"{path}: configuration.json names a file outside the model directory ({name!r})")
    if not p.is_file():
        raise ModelError(f"{path}: missing {name}")
    return p


def model_files(path: Path) -> ModelFiles:
    cfg = read_yaml(path / "config.yaml")
    metas = _metas(path)
    fe = cfg.get("frontend_conf") or {}
    return ModelFiles(
        config=cfg,
        weights=_inside(path, metas.get("init_param"), "model.pt"),
        cmvn=_inside(path, (metas.get("frontend_conf") or {}).get("cmvn_file"), "am.mvn"),
        bpe=_inside(path, (metas.get("tokenizer_conf") or {}).get("bpemodel"), BPE_NAME),
        frontend=fe if isinstance(fe, dict) else {},
    )


def _int(d: dict, key: str, default=None) -> int:
    v = d.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ModelError(f"config.yaml: {key} must be a non-negative integer, got {v!r}")
    return v


def check_frontend(fe: dict) -> tuple[int, int, int]:
    """(n_mels, lfr_m, lfr_n) of a frontend_conf this implementation runs (funasr's WavFrontend at 16 kHz,
    25 ms Hamming windows every 10 ms)."""
    fixed = {"fs": 16000, "window": "hamming", "frame_length": 25, "frame_shift": 10}
    for k, v in fixed.items():
        if fe.get(k, v) != v:
            raise ModelError(f"config.yaml: frontend_conf.{k} {fe.get(k)!r} is not implemented (only {v!r})")
    for k, v in (("snip_edges", True), ("upsacle_samples", True)):
        if fe.get(k, v) is not v:
            raise ModelError(f"config.yaml: frontend_conf.{k} {fe.get(k)!r} is not implemented (only {v!r})")
    n_mels, lfr_m, lfr_n = _int(fe, "n_mels", 80), _int(fe, "lfr_m", 1), _int(fe, "lfr_n", 1)
    if not (1 <= n_mels <= 256 and 1 <= lfr_m <= 32 and 1 <= lfr_n <= 32):
        raise ModelError(f"config.yaml: frontend_conf n_mels {n_mels}, lfr_m {lfr_m}, lfr_n {lfr_n} out of range")
    return n_mels, lfr_m, lfr_n


def encoder_config(cfg: dict, d_input: int, vocab_size: int) -> EncoderConfig:
    """The encoder's shape from config.yaml; structural switches other than the published ones are refused."""
    if cfg.get("model") not in MODEL_NAMES:
        raise ModelError(f"config.yaml: model {cfg.get('model')!r} is not SenseVoiceSmall")
    if cfg.get("encoder") not in ENCODER_NAMES:
        raise ModelError(f"config.yaml: encoder {cfg.get('encoder')!r} is not implemented (only "
                         f"{', '.join(ENCODER_NAMES)})")
    enc = cfg.get("encoder_conf")
    if not isinstance(enc, dict):
        raise ModelError("config.yaml: no encoder_conf")
    for k, v in (("selfattention_layer_type", "sanm"), ("normalize_before", True), ("concat_after", False),
                 ("positionwise_layer_type", "linear")):
        if enc.get(k, v) != v:
            raise ModelError(f"config.yaml: encoder_conf.{k} {enc.get(k)!r} is not implemented (only {v!r})")
    d, heads = _int(enc, "output_size", 256), _int(enc, "attention_heads", 4)
    if d == 0 or heads == 0 or d % heads:
        raise ModelError(f"config.yaml: output_size {d} is not a multiple of attention_heads {heads}")
    kernel = _int(enc, "kernel_size", 11)
    shift = _int(enc, "sanm_shfit", 0)
    if kernel == 0 or (kernel - 1) // 2 + shift > kernel - 1:
        raise ModelError(f"config.yaml: kernel_size {kernel} / sanm_shfit {shift} out of range")
    blocks = _int(enc, "num_blocks", 6)
    if blocks < 1:
        raise ModelError("config.yaml: num_blocks must be at least 1")
    return EncoderConfig(d_input=d_input, d_model=d, heads=heads, d_ff=_int(enc, "linear_units", 2048),
                         blocks=blocks, tp_blocks=_int(enc, "tp_blocks", 0), kernel_size=kernel, sanm_shift=shift,
                         vocab_size=vocab_size)
