"""A NeMo Sortformer diarizer config (`model_config.yaml` of a `SortformerEncLabelModel`, as a dict) parsed and
checked.

The front end and the FastConformer encoder are the shared NeMo sections (`transcribe.nemo.config`); this
module reads what Sortformer adds: `sortformer_modules` (the projection, the head and the streaming geometry
of the Arrival-Order Speaker Cache and FIFO), `transformer_encoder` (NeMo's `TransformerEncoder`), the number
of speakers and `streaming_mode`. As everywhere, a key of a section this code builds from is a setting it
implements, one `HARMLESS_KEYS` lists (no effect at inference), or an error naming it.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Optional

from ..nemo.config import EncoderConfig, FrontEndConfig, check_sizes, encoder_config, frontend_config, settings, short

# The model class (the config's `target`) this family builds.
MODEL_CLASSES = ("SortformerEncLabelModel",)
_TRAINING = "training only"
HARMLESS_KEYS = {
    "sortformer_modules": {
        "dropout_rate": _TRAINING,
        "causal_attn_rate": "training only: how often training runs with limited right context",
        "causal_attn_rc": "training only: that right context",
        "scores_add_rnd": "training only: noise added to the speaker-cache scores",
    },
    "transformer_encoder": {
        "attn_score_dropout": _TRAINING, "attn_layer_dropout": _TRAINING, "ffn_dropout": _TRAINING,
        "mask_future": "an encoder over a whole sequence: NeMo's TransformerEncoder masks no future (must be false)",
    },
}
ACTIVATIONS = ("relu", "gelu", "swish", "silu")
# The largest sizes a config may give (far above the published models: 18 layers of 192, 8 heads, 4
# speakers; caches of a few hundred frames), so a hostile file's sizes are refused before a module is built.
SIZE_MAXIMA = {"num_layers": 256, "hidden_size": 16384, "inner_size": 65536, "num_attention_heads": 256,
               "num_spks": 64, "fc_d_model": 16384, "tf_d_model": 16384, "spkcache_len": 1 << 16,
               "fifo_len": 1 << 16, "chunk_len": 1 << 16, "spkcache_update_period": 1 << 16,
               "chunk_left_context": 1 << 16, "chunk_right_context": 1 << 16, "spkcache_sil_frames_per_spk": 1 << 12}


@dataclass(frozen=True)
class StreamingConfig:
    """`sortformer_modules`' streaming geometry (in 80 ms frames) and speaker-cache rules, NeMo's names and
    NeMo's defaults (`SortformerModules.__init__`)."""

    spkcache_len: int = 188
    fifo_len: int = 0
    chunk_len: int = 188
    spkcache_update_period: int = 188
    chunk_left_context: int = 1
    chunk_right_context: int = 1
    spkcache_sil_frames_per_spk: int = 3
    pred_score_threshold: float = 0.25
    max_index: int = 99999
    scores_boost_latest: float = 0.05
    sil_threshold: float = 0.2
    strong_boost_rate: float = 0.75
    weak_boost_rate: float = 1.5
    min_pos_scores_rate: float = 0.5

    def check(self, n_spk: int) -> None:
        """NeMo's `_check_streaming_parameters`: whole numbers with its lower bounds."""
        least = {"spkcache_len": (1 + self.spkcache_sil_frames_per_spk) * n_spk, "fifo_len": 0, "chunk_len": 1,
                 "spkcache_update_period": 1, "chunk_left_context": 0, "chunk_right_context": 0,
                 "spkcache_sil_frames_per_spk": 0}
        for name, low in least.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"sortformer_modules.{name} = {short(value)} must be a whole number")
            if value < low:
                raise ValueError(f"sortformer_modules.{name} = {value} must be at least {low}")
            if value > SIZE_MAXIMA[name]:
                raise ValueError(f"sortformer_modules.{name} = {value} is out of the range this code accepts "
                                 f"(at most {SIZE_MAXIMA[name]})")
        if self.max_index < self.spkcache_len * n_spk + n_spk * self.spkcache_sil_frames_per_spk:
            # NeMo marks the cache's unused slots with max_index; a smaller one would collide with real frames
            raise ValueError(f"sortformer_modules.max_index = {self.max_index} is too small for the speaker cache")


@dataclass(frozen=True)
class TransformerConfig:
    """`transformer_encoder` (NeMo's `TransformerEncoder`)."""

    num_layers: int
    hidden_size: int
    inner_size: int
    num_attention_heads: int = 1
    hidden_act: str = "relu"
    pre_ln: bool = False
    pre_ln_final_layer_norm: bool = True


@dataclass(frozen=True)
class SortformerConfig:
    target: str
    sample_rate: int
    preprocessor: FrontEndConfig
    encoder: EncoderConfig
    transformer: TransformerConfig
    streaming: StreamingConfig
    n_spk: int
    fc_d_model: int
    tf_d_model: int
    streaming_mode: bool  # the config's mode: NeMo's diarize() runs the streaming path when true
    async_streaming: bool = False  # the config's streaming update: NeMo's asynchronous one when true
    eps: float = 1e-3  # the offline input scaling's 1 / (max + eps)
    projection: bool = True  # NeMo builds encoder_proj only when encoder.d_model != model_defaults.tf_d_model

    @property
    def subsampling_factor(self) -> int:
        return self.encoder.subsampling_factor


def is_sortformer(cfg: dict) -> bool:
    """Whether a NeMo config is a Sortformer diarizer's (read alone, no torch)."""
    target = str(cfg.get("target") or "")
    if target.rsplit(".", 1)[-1] in MODEL_CLASSES:
        return True
    return isinstance(cfg.get("sortformer_modules"), dict) and "transformer_encoder" in cfg and "encoder" in cfg


def _section(cfg: dict, name: str) -> dict:
    sec = cfg.get(name)
    if not isinstance(sec, dict):
        raise ValueError(f"the config has no {name} section")
    return dict(sec)


def parse_config(cfg: dict) -> SortformerConfig:
    """NeMo's config -> SortformerConfig; ValueError naming a setting this code does not implement."""
    target = str(cfg.get("target") or "SortformerEncLabelModel")
    if target.rsplit(".", 1)[-1] not in MODEL_CLASSES:
        raise ValueError(f"target = {short(target)} is not a Sortformer diarizer ({', '.join(MODEL_CLASSES)})")
    pre = frontend_config(cfg)
    enc = encoder_config(cfg, pre.features)
    check_sizes(_Sized(pre, enc))

    mods = _section(cfg, "sortformer_modules")
    mod_target = mods.pop("_target_", None)
    if mod_target is not None and str(mod_target).rsplit(".", 1)[-1] != "SortformerModules":
        raise ValueError(f"sortformer_modules._target_ = {short(mod_target)} is not implemented (SortformerModules)")
    known = {f.name for f in fields(StreamingConfig)} | {"num_spks", "fc_d_model", "tf_d_model", "subsampling_factor"}
    mods = settings("sortformer_modules", mods, known, harmless_keys=HARMLESS_KEYS)
    n_spk = _size(mods.pop("num_spks", 4), "sortformer_modules.num_spks", SIZE_MAXIMA["num_spks"])
    fc = _size(mods.pop("fc_d_model", 512), "sortformer_modules.fc_d_model", SIZE_MAXIMA["fc_d_model"])
    tf = _size(mods.pop("tf_d_model", 192), "sortformer_modules.tf_d_model", SIZE_MAXIMA["tf_d_model"])
    sub = mods.pop("subsampling_factor", 8)
    if sub != enc.subsampling_factor:
        # NeMo's streaming loader cuts feature chunks by sortformer_modules' factor and the encoder by its own
        raise ValueError(f"sortformer_modules.subsampling_factor = {short(sub)} differs from the encoder's "
                         f"{enc.subsampling_factor}")
    streaming = StreamingConfig(**mods)
    streaming.check(n_spk)
    if fc != enc.d_model:
        raise ValueError(f"sortformer_modules.fc_d_model = {fc} differs from encoder.d_model = {enc.d_model}")
    spks = cfg.get("max_num_of_spks", n_spk)
    if spks != n_spk:
        raise ValueError(f"max_num_of_spks = {short(spks)} differs from sortformer_modules.num_spks = {n_spk}")

    tr = _section(cfg, "transformer_encoder")
    tr_target = tr.pop("_target_", None)
    if tr_target is not None and str(tr_target).rsplit(".", 1)[-1] != "TransformerEncoder":
        raise ValueError(f"transformer_encoder._target_ = {short(tr_target)} is not implemented (TransformerEncoder)")
    if tr.get("mask_future", False):
        raise ValueError("transformer_encoder.mask_future = true is not implemented (a full-context encoder)")
    tr = settings("transformer_encoder", tr, {f.name for f in fields(TransformerConfig)}, harmless_keys=HARMLESS_KEYS)
    for key in ("num_layers", "hidden_size", "inner_size", "num_attention_heads"):
        if key in tr:
            _size(tr[key], f"transformer_encoder.{key}", SIZE_MAXIMA[key], least=1)
    try:
        transformer = TransformerConfig(**tr)
    except TypeError as e:
        raise ValueError(f"transformer_encoder: {e}") from None
    if transformer.hidden_act not in ACTIVATIONS:
        raise ValueError(f"transformer_encoder.hidden_act = {short(transformer.hidden_act)} is not implemented "
                         f"({', '.join(ACTIVATIONS)})")
    if transformer.hidden_size != tf:
        raise ValueError(f"transformer_encoder.hidden_size = {transformer.hidden_size} differs from "
                         f"sortformer_modules.tf_d_model = {tf}")
    if transformer.hidden_size % transformer.num_attention_heads:
        raise ValueError(f"transformer_encoder.num_attention_heads = {transformer.num_attention_heads} does not "
                         f"divide hidden_size {transformer.hidden_size}")
    mode = cfg.get("streaming_mode", False)
    asynchronous = cfg.get("async_streaming", False)
    for key, value in (("streaming_mode", mode), ("async_streaming", asynchronous)):
        if not isinstance(value, bool):
            raise ValueError(f"{key} = {short(value)} must be true or false")
    eps = cfg.get("eps", 1e-3)
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 <= eps < 1:
        raise ValueError(f"eps = {short(eps)} is not implemented (the input scaling's small positive constant)")
    defaults = cfg.get("model_defaults") if isinstance(cfg.get("model_defaults"), dict) else {}
    # NeMo's __init__ compares encoder.d_model with model_defaults.tf_d_model (older archives put the widths in
    # sortformer_modules alone: the same values)
    projection = enc.d_model != defaults.get("tf_d_model", tf)
    rate = cfg.get("sample_rate", pre.sample_rate)
    if rate != pre.sample_rate:
        raise ValueError(f"sample_rate = {short(rate)} differs from preprocessor.sample_rate = {pre.sample_rate}")
    if not projection and tf != enc.d_model:
        raise ValueError(f"model_defaults.tf_d_model = {defaults.get('tf_d_model')} equals encoder.d_model (no "
                         f"projection) but the Transformer is {tf} wide")
    return SortformerConfig(target, pre.sample_rate, pre, enc, transformer, streaming, n_spk, fc, tf, mode,
                            asynchronous, float(eps), projection)


class _Sized:
    def __init__(self, pre, enc):
        self.preprocessor, self.encoder = pre, enc


def _size(value, name: str, most: int, least: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
        raise ValueError(f"{name} = {short(value)} is out of the range this code accepts ({least} to {most})")
    return value
