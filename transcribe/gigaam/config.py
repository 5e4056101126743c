"""A GigaAM model's configuration: the `gigaam` package's Hydra config (preprocessor, encoder, head,
decoding) read from a plain dict, every setting this implementation does not run refused by name."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..errors import ModelError

_FRONTEND = "gigaam.preprocess.FeatureExtractor"
_ENCODER = "gigaam.encoder.ConformerEncoder"
_HEADS = {"gigaam.decoder.CTCHead": "ctc", "gigaam.decoder.RNNTHead": "rnnt"}
# The keyword arguments the package's classes take (Hydra passes every key of a section: any other fails there);
# flash_attn and activation_checkpointing change kernels and training memory, not what is computed.
_KEYS = {
    "encoder": {"_target_", "feat_in", "n_layers", "d_model", "subsampling", "subs_kernel_size", "subsampling_factor",
                "ff_expansion_factor", "self_attention_model", "n_heads", "pos_emb_max_len", "conv_norm_type",
                "conv_kernel_size", "flash_attn", "activation_checkpointing"},
    "ctc": {"_target_", "feat_in", "num_classes"},
    "rnnt": {"_target_", "decoder", "joint"},
    "head.decoder": {"pred_hidden", "pred_rnn_layers", "num_classes"},
    "head.joint": {"enc_hidden", "pred_hidden", "joint_hidden", "num_classes"},
    "decoding": {"_target_", "vocabulary", "model_path", "max_symbols_per_step"},
}
_DECODINGS = {"gigaam.decoding.CTCGreedyDecoding": "ctc", "gigaam.decoding.RNNTGreedyDecoding": "rnnt"}


@dataclass(frozen=True)
class GigaAMConfig:
    model_name: str
    sample_rate: int
    n_mels: int
    n_fft: int
    win_length: int
    hop_length: int
    feat_in: int
    n_layers: int
    d_model: int
    n_heads: int
    ff_expansion_factor: int
    subs_kernel_size: int
    subsampling_factor: int
    pos_emb_max_len: int
    conv_kernel_size: int
    head: str                   # "ctc" or "rnnt"
    classes: int                # tokens + blank (the last)
    vocabulary: tuple           # the characters of a character model; () with a SentencePiece tokenizer
    tokenizer: Optional[str]    # the SentencePiece model's file name (decoding.model_path), or None
    pred_hidden: int = 0
    pred_layers: int = 0
    joint_hidden: int = 0
    max_symbols: int = 10

    @property
    def frame_samples(self) -> int:
        """Input samples per encoder frame (hop times the subsampling)."""
        return self.hop_length * self.subsampling_factor


def find_cfg(config: dict) -> dict:
    """The package's config inside a config.json: under cfg.model.cfg (the Hugging Face layout of
    ai-sage/GigaAM-v3), under cfg, or the file itself."""
    for path in (("cfg", "model", "cfg"), ("cfg",), ()):
        node = config
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict) and "encoder" in node and "head" in node:
            return node
    raise ModelError("config.json holds no GigaAM model config (no encoder and head under cfg.model.cfg)")


def _only(section: dict, allowed: str, where: str) -> None:
    extra = sorted(set(section) - _KEYS[allowed])
    if extra:
        raise ModelError(f"{where} has settings this implementation does not know: {', '.join(extra)}")


def _need(section: dict, key: str, where: str, kind=int):
    if key not in section:
        raise ModelError(f"the {where} config has no {key}")
    value = section[key]
    if kind is int and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ModelError(f"{where}.{key} must be a positive integer, got {value!r}")
    return value


def _expect(section: dict, key: str, where: str, default, allowed) -> None:
    value = section.get(key, default)
    if value not in allowed:
        raise ModelError(f"{where}.{key} = {value!r} is not supported (this implementation runs "
                         f"{' or '.join(repr(a) for a in allowed)})")


def parse(cfg: dict) -> GigaAMConfig:
    pre, enc, head, dec = (cfg.get(k) for k in ("preprocessor", "encoder", "head", "decoding"))
    for name, sec in (("preprocessor", pre), ("encoder", enc), ("head", head), ("decoding", dec)):
        if not isinstance(sec, dict):
            raise ModelError(f"the model config has no {name} section")
    _expect(pre, "_target_", "preprocessor", _FRONTEND, (_FRONTEND,))
    _expect(pre, "center", "preprocessor", True, (False,))
    _expect(pre, "mel_scale", "preprocessor", "htk", ("htk",))
    _expect(pre, "mel_norm", "preprocessor", None, (None,))
    _expect(enc, "_target_", "encoder", _ENCODER, (_ENCODER,))
    _expect(enc, "subsampling", "encoder", "conv2d", ("conv1d",))
    _expect(enc, "self_attention_model", "encoder", "rotary", ("rotary",))
    _expect(enc, "conv_norm_type", "encoder", "batch_norm", ("layer_norm",))
    rate = _need(pre, "sample_rate", "preprocessor")
    if rate != 16000:
        raise ModelError(f"preprocessor.sample_rate = {rate} is not supported (GigaAM runs at 16000 Hz)")
    kind = _HEADS.get(head.get("_target_"))
    if kind is None:
        raise ModelError(f"head {head.get('_target_')!r} is not supported (a CTC or RNN-T head: "
                         f"{', '.join(_HEADS)})")
    if _DECODINGS.get(dec.get("_target_")) != kind:
        raise ModelError(f"decoding {dec.get('_target_')!r} does not decode a {kind} head")
    _only(enc, "encoder", "encoder")
    _only(head, kind, "head")
    _only(dec, "decoding", "decoding")
    if kind == "rnnt":
        _only(head.get("decoder") or {}, "head.decoder", "head.decoder")
        _only(head.get("joint") or {}, "head.joint", "head.joint")
    d_model, heads = _need(enc, "d_model", "encoder"), _need(enc, "n_heads", "encoder")
    factor = _need(enc, "subsampling_factor", "encoder")
    if d_model % heads or (d_model // heads) % 2:
        raise ModelError(f"encoder.d_model {d_model} is not n_heads {heads} times an even head size")
    if factor & (factor - 1) or factor < 2:
        raise ModelError(f"encoder.subsampling_factor must be a power of 2, got {factor}")
    if _need(enc, "conv_kernel_size", "encoder") % 2 == 0:
        raise ModelError("encoder.conv_kernel_size must be odd")
    vocab = dec.get("vocabulary") or []
    tokenizer = dec.get("model_path")
    if not isinstance(vocab, list) or not all(isinstance(v, str) for v in vocab):
        raise ModelError("decoding.vocabulary must be a list of strings")
    if tokenizer is None and not vocab:
        raise ModelError("decoding has neither a vocabulary nor a SentencePiece model (model_path)")
    common = dict(
        model_name=str(cfg.get("model_name", "")), sample_rate=rate, n_mels=_need(pre, "features", "preprocessor"),
        n_fft=pre.get("n_fft", rate // 40), win_length=pre.get("win_length", rate // 40),
        hop_length=pre.get("hop_length", rate // 100), feat_in=_need(enc, "feat_in", "encoder"),
        n_layers=_need(enc, "n_layers", "encoder"), d_model=d_model, n_heads=heads,
        ff_expansion_factor=_need(enc, "ff_expansion_factor", "encoder"),
        subs_kernel_size=_need(enc, "subs_kernel_size", "encoder"), subsampling_factor=factor,
        pos_emb_max_len=_need(enc, "pos_emb_max_len", "encoder"), conv_kernel_size=enc["conv_kernel_size"],
        head=kind, vocabulary=tuple(vocab) if tokenizer is None else (),
        tokenizer=None if tokenizer is None else str(tokenizer))
    if common["feat_in"] != common["n_mels"]:
        raise ModelError(f"encoder.feat_in {common['feat_in']} != preprocessor.features {common['n_mels']}")
    if kind == "ctc":
        return GigaAMConfig(classes=_need(head, "num_classes", "head"), **common)
    pred, joint = head.get("decoder") or {}, head.get("joint") or {}
    classes = _need(pred, "num_classes", "head.decoder")
    if _need(joint, "num_classes", "head.joint") != classes:
        raise ModelError("head.joint.num_classes differs from head.decoder.num_classes")
    if _need(joint, "enc_hidden", "head.joint") != d_model or \
            _need(joint, "pred_hidden", "head.joint") != _need(pred, "pred_hidden", "head.decoder"):
        raise ModelError("head.joint's enc_hidden/pred_hidden do not match the encoder and predictor")
    return GigaAMConfig(classes=classes, pred_hidden=pred["pred_hidden"],
                        pred_layers=_need(pred, "pred_rnn_layers", "head.decoder"),
                        joint_hidden=_need(joint, "joint_hidden", "head.joint"),
                        max_symbols=_need(dec, "max_symbols_per_step", "decoding") if "max_symbols_per_step" in dec
                        else 10, **common)
