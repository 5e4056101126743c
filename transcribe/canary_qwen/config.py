"""A Canary-Qwen checkpoint's settings: NeMo's speechlm2 SALM `config.json` (what `SALM.save_pretrained` writes and
`nvidia/canary-qwen-2.5b` publishes) and its LM's config and tokenizer, read and checked.

The published repo holds `config.json` (SALM's training config: `perception` with NeMo's `preprocessor`, `encoder`
and `modality_adapter` sections and `output_dim`, `audio_locator_tag`, `prompt_format`, `lora`, `pretrained_llm`
naming the LM's hub repo, training settings) and `model.safetensors` only: the LM's config (`config.json`) and
tokenizer (`tokenizer.json`, `tokenizer_config.json`) are the `pretrained_llm` repo's (`Qwen/Qwen3-1.7B`), as NeMo's
`SALM.from_pretrained` reads them. Where the checkpoint directory has them beside it (NeMo's `from_pretrained` looks
for `tokenizer_config.json` at the root and `llm_backbone/config.json`) those are read instead, as NeMo does.

Every key is implemented, known to change nothing at inference, or refused with a ModelError naming it."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

from ..config_yaml import excerpt
from ..errors import ModelError
from ..json_files import read_object
from ..llm.config import LMConfig
from ..nemo.config import EncoderConfig, FrontEndConfig, check_sizes, encoder_config, frontend_config

LLM_BACKBONE = "llm_backbone"
# NeMo's `qwen` prompt format: the user turn and the prefix generation starts from (`QwenPromptFormatter`).
PROMPT_FORMATS = ("qwen",)
# SALM's keys that change nothing at inference: training, initialisation, bookkeeping. (`pretrained_weights` and
# `pretrained_asr` name what training started from; `from_pretrained` loads neither.)
_TOP_HARMLESS = {
    "pretrained_asr", "pretrained_weights", "freeze_params", "prevent_freeze_params", "optimizer", "lr_scheduler",
    "torch_dtype", "dtype", "model_type", "architectures", "trust_remote_code", "init_configure_model",
    "activation_checkpointing", "log_prediction", "validation_metrics", "loss_scale", "token_equivalent_duration",
    "use_nemo_automodel", "encoder_chunk_size_seconds", "tokenizer_path", "max_audio_seconds", "max_total_tokens",
}
_TOP_USED = {"audio_locator_tag", "prompt_format", "pretrained_llm", "lora", "perception"}
_PERCEPTION_HARMLESS = {"target", "_target_", "spec_augment"}
_LORA_HARMLESS = {"task_type", "lora_dropout", "bias", "inference_mode", "init_lora_weights", "fan_in_fan_out",
                  "base_model_name_or_path", "revision", "peft_type", "modules_to_save"}
_LORA_MAX_RANK = 1 << 16


@dataclass(frozen=True)
class LoraConfig:
    """PEFT's LoRA as SALM installs it on the LM (`maybe_install_lora`): each target linear layer's output gains
    lora_B(lora_A(x)) * scale (dropout is training only), scale = alpha / r (alpha / sqrt(r) with use_rslora)."""

    r: int
    alpha: float
    targets: tuple[str, ...]
    rslora: bool = False

    @property
    def scale(self) -> float:
        return self.alpha / (self.r ** 0.5 if self.rslora else self.r)


@dataclass(frozen=True)
class CanaryQwenConfig:
    frontend: FrontEndConfig
    encoder: EncoderConfig
    output_dim: int            # the projection's width (the LM's hidden size)
    lm: LMConfig
    lora: Optional[LoraConfig]
    audio_locator_tag: str
    prompt_format: str
    llm_source: str            # where the LM's config and tokenizer were read (a hub id or a folder's name)


def _short(value: Any) -> str:
    return excerpt(value, 80)


def _lora(cfg: Any, where: str) -> Optional[LoraConfig]:
    if cfg is None:
        return None
    if not isinstance(cfg, dict):
        raise ModelError(f"{where}: lora = {_short(cfg)} is not an object")
    for key, value in cfg.items():
        if key in _LORA_HARMLESS or key in ("r", "lora_alpha", "target_modules", "use_rslora"):
            continue
        if key in ("use_dora", "layers_to_transform", "rank_pattern", "alpha_pattern", "target_parameters") \
                and not value:
            continue
        raise ModelError(f"{where}: the LoRA setting lora.{key} = {_short(value)} is not implemented")
    if cfg.get("bias", "none") != "none":
        raise ModelError(f"{where}: lora.bias = {_short(cfg.get('bias'))} is not implemented (only none)")
    r = cfg.get("r", 8)
    alpha = cfg.get("lora_alpha", 8)
    targets = cfg.get("target_modules")
    if isinstance(r, bool) or not isinstance(r, int) or not 0 < r <= _LORA_MAX_RANK:
        raise ModelError(f"{where}: lora.r = {_short(r)} is not a rank (1 to {_LORA_MAX_RANK})")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
        raise ModelError(f"{where}: lora.lora_alpha = {_short(alpha)} is not a number")
    if isinstance(targets, str):
        targets = [targets]
    allowed = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    if not isinstance(targets, list) or not targets or any(t not in allowed for t in targets):
        raise ModelError(f"{where}: lora.target_modules = {_short(targets)} is not implemented (names among "
                         f"{', '.join(allowed)})")
    return LoraConfig(int(r), float(alpha), tuple(targets), bool(cfg.get("use_rslora", False)))


def _perception(cfg: Any, where: str) -> tuple[FrontEndConfig, EncoderConfig, int]:
    if not isinstance(cfg, dict):
        raise ModelError(f"{where}: perception = {_short(cfg)} is not an object")
    for key in cfg:
        if key not in _PERCEPTION_HARMLESS | {"preprocessor", "encoder", "modality_adapter", "output_dim"}:
            raise ModelError(f"{where}: perception.{str(key)[:80]} is a setting this code does not implement")
    adapter = cfg.get("modality_adapter")
    if not isinstance(adapter, dict) or str(adapter.get("_target_", "")).rsplit(".", 1)[-1] != "IdentityConnector":
        kind = adapter.get("_target_") if isinstance(adapter, dict) else adapter
        raise ModelError(f"{where}: perception.modality_adapter {_short(kind)} is not implemented (only "
                         "IdentityConnector, canary-qwen-2.5b's)")
    unknown = set(adapter) - {"_target_", "d_model"}
    if unknown:
        raise ModelError(f"{where}: perception.modality_adapter.{sorted(unknown)[0]} is not implemented")
    if "d_model" not in adapter:  # NeMo's AudioPerceptionModule: no d_model, no projection
        raise ModelError(f"{where}: a modality adapter without d_model (no projection to the LM) is not implemented")
    try:
        frontend = frontend_config(cfg)
        encoder = encoder_config(cfg, frontend.features)
        check_sizes(SimpleNamespace(preprocessor=frontend, encoder=encoder))
    except (ValueError, KeyError, TypeError) as e:
        raise ModelError(f"{where}: perception: {e}") from None
    if adapter["d_model"] != encoder.d_model:
        raise ModelError(f"{where}: perception.modality_adapter.d_model {_short(adapter['d_model'])} is not the "
                         f"encoder's d_model {encoder.d_model}")
    dim = cfg.get("output_dim")
    if isinstance(dim, bool) or not isinstance(dim, int) or not 0 < dim <= 1 << 16:
        raise ModelError(f"{where}: perception.output_dim = {_short(dim)} is not a width")
    return frontend, encoder, dim


def is_salm_config(cfg: Any) -> bool:
    """Whether a config.json object is a SALM's (detection: its perception section and audio locator tag)."""
    return (isinstance(cfg, dict) and isinstance(cfg.get("perception"), dict)
            and isinstance(cfg.get("audio_locator_tag"), str) and "pretrained_llm" in cfg)


def llm_files(path: Path, cfg: dict) -> tuple[Path, Path, str]:
    """(the LM's config.json, the folder of its tokenizer files, a name for messages), as NeMo's
    `SALM.from_pretrained` finds them: beside the checkpoint (`llm_backbone/config.json`, tokenizer files at its
    root) or the `pretrained_llm` repo's (a local folder, else the hub: its cache first)."""
    where = str(path)
    local_tok = (path / "tokenizer_config.json").is_file()
    local_cfg = (path / LLM_BACKBONE / "config.json").is_file()
    source = cfg.get("pretrained_llm")
    if local_tok and local_cfg:
        return path / LLM_BACKBONE / "config.json", path, path.name
    if not isinstance(source, str) or not source:
        raise ModelError(f"{where}: pretrained_llm = {_short(source)} names no language model, and the folder has "
                         f"no {LLM_BACKBONE}/config.json and tokenizer files beside it")
    # A published config names its LM by hub id; a path is read only when it is a folder on this machine.
    folder = Path(source).expanduser()
    if folder.is_dir():
        lm_cfg = path / LLM_BACKBONE / "config.json" if local_cfg else folder / "config.json"
        return lm_cfg, path if local_tok else folder, source
    from ..hub import _HUB_ID, hub_file

    if not _HUB_ID.match(source):
        raise ModelError(f"{where}: pretrained_llm = {_short(source)} is neither a folder here nor a hub id")
    lm_cfg = path / LLM_BACKBONE / "config.json" if local_cfg else Path(hub_file(source, "config.json"))
    if local_tok:
        return lm_cfg, path, source
    tok = Path(hub_file(source, "tokenizer.json")).parent
    hub_file(source, "tokenizer_config.json")
    return lm_cfg, tok, source


def read_config(path: Path) -> tuple[CanaryQwenConfig, Path, dict]:
    """The checkpoint directory's settings, the folder of its LM's tokenizer and that tokenizer's config object."""
    where = str(path)
    cfg = read_object(path / "config.json")
    if not is_salm_config(cfg):
        raise ModelError(f"{where}/config.json: not a NeMo SALM config (perception, audio_locator_tag, "
                         "pretrained_llm)")
    for key, value in cfg.items():
        if key in _TOP_USED:
            continue
        if key not in _TOP_HARMLESS:
            raise ModelError(f"{where}: the SALM setting {str(key)[:80]} = {_short(value)} is not implemented")
    if cfg.get("encoder_chunk_size_seconds") is not None:
        raise ModelError(f"{where}: encoder_chunk_size_seconds = {_short(cfg['encoder_chunk_size_seconds'])} "
                         "(the encoder run on chunks) is not implemented (only null)")
    for key in ("trust_remote_code", "use_nemo_automodel"):
        if cfg.get(key):
            raise ModelError(f"{where}: {key} = {_short(cfg[key])} is not implemented")
    fmt = cfg.get("prompt_format")
    if fmt not in PROMPT_FORMATS:
        raise ModelError(f"{where}: prompt_format = {_short(fmt)} is not implemented ({', '.join(PROMPT_FORMATS)})")
    tag = cfg["audio_locator_tag"]
    if not 0 < len(tag) <= 64:
        raise ModelError(f"{where}: audio_locator_tag = {_short(tag)} is not a token")
    frontend, encoder, dim = _perception(cfg["perception"], where)
    lora = _lora(cfg.get("lora"), where)
    lm_cfg_path, tok_dir, source = llm_files(path, cfg)
    lm = LMConfig.from_hf(read_object(lm_cfg_path), str(lm_cfg_path))
    if lm.model_type != "qwen3":
        raise ModelError(f"{where}: a {lm.model_type} language model is not implemented for Canary-Qwen (qwen3)")
    if dim != lm.hidden_size:
        raise ModelError(f"{where}: perception.output_dim {dim} is not the language model's hidden_size "
                         f"{lm.hidden_size}")
    tok_cfg = read_object(tok_dir / "tokenizer_config.json")
    return (CanaryQwenConfig(frontend, encoder, dim, lm, lora, tag, fmt, source), tok_dir, tok_cfg)


def named_token(tok_cfg: dict, key: str) -> Optional[str]:
    """tokenizer_config.json's named token (eos_token, pad_token, ...) as text, or None."""
    value = tok_cfg.get(key)
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) and value else None
