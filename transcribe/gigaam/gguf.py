"""GigaAM as transcribe.cpp's `gigaam` GGUF files (`scripts/convert-gigaam.py`, which loads a model with the
gigaam package and writes it F32; tests/models/gguf/gigaam/): reading them into the same model as a checkpoint.

The schema:

- tensors `frontend.mel_filterbank` [n_mels, n_fft/2+1] (the model's own filterbank, transposed) and
  `frontend.window`; `enc.pre_encode.conv.{0,2}.*`; per block `enc.blocks.{i}.{norm_ff1, ff1.linear{1,2},
  norm_conv, conv.{pointwise1, depthwise, ln, pointwise2}, norm_attn, attn.linear_{q,k,v,out}, norm_ff2,
  ff2.linear{1,2}, norm_out}`; CTC: `head.ctc.*`; RNN-T: `pred.embed.weight`, `pred.lstm.{i}.{Wx, Wh, bias}` (the
  LSTM's two biases summed: read back as bias_ih with a zero bias_hh, the same sum), `joint.{enc, pred, out}.*`;
- the config as `stt.gigaam.{encoder,predictor,joint,head}.*` and `stt.frontend.*`, rebuilt here into the
  package's config that `config.parse` checks (so a file is held to the same limits as a checkpoint);
- the vocabulary as `tokenizer.ggml.*`: model "char" (the characters, then the blank) or "bpe" (a
  SentencePiece model's pieces and scores, then the blank), rebuilt into a SentencePiece model in memory.

Every metadata key is read and implemented, accepted by name as not changing the computation (`general.*`,
`stt.variant`), or a ModelError names it; so is a missing or unknown tensor. Weights of any type the package
reads are dequantized to float32, then run as a checkpoint's in the dtype asked for (`recognizer.finish`).
"""
from __future__ import annotations

from pathlib import Path

import torch

from ..errors import ModelError

ARCH = "gigaam"
P = "stt.gigaam."

_BLOCK = [("norm_feed_forward1", "norm_ff1"), ("feed_forward1.linear1", "ff1.linear1"),
          ("feed_forward1.linear2", "ff1.linear2"), ("norm_conv", "norm_conv"),
          ("conv.pointwise_conv1", "conv.pointwise1"), ("conv.depthwise_conv", "conv.depthwise"),
          ("conv.batch_norm", "conv.ln"), ("conv.pointwise_conv2", "conv.pointwise2"),
          ("norm_self_att", "norm_attn"), ("self_attn.linear_q", "attn.linear_q"),
          ("self_attn.linear_k", "attn.linear_k"), ("self_attn.linear_v", "attn.linear_v"),
          ("self_attn.linear_out", "attn.linear_out"), ("norm_feed_forward2", "norm_ff2"),
          ("feed_forward2.linear1", "ff2.linear1"), ("feed_forward2.linear2", "ff2.linear2"),
          ("norm_out", "norm_out")]


def is_gigaam_gguf(path: Path) -> bool:
    from ..gguf import architecture

    return architecture(path) == ARCH


def _config(f, keys) -> tuple[dict, list, bool]:
    """The package's config (as config.parse reads it), the vocabulary (without the blank) and whether it
    is a SentencePiece one."""
    head = keys.expect(P + "head_kind", ("ctc", "rnnt"))
    tok_model = keys.expect("tokenizer.ggml.model", ("char", "bpe"))
    tokens = list(keys.require("tokenizer.ggml.tokens"))
    blank = keys.require("tokenizer.ggml.blank_token_id")
    if blank != len(tokens) - 1:
        raise ModelError(f"{f.path}: the blank ({blank}) is not the last of the {len(tokens)} tokens")
    e = {k: keys.require(P + "encoder." + k) for k in
         ("n_layers", "d_model", "n_heads", "d_ff", "conv_kernel", "subsampling_factor", "subs_kernel_size",
          "pos_emb_max_len", "feat_in", "self_attention_model", "conv_norm_type")}
    if e["d_ff"] % e["d_model"]:
        raise ModelError(f"{f.path}: d_ff {e['d_ff']} is not a multiple of d_model {e['d_model']}")
    fe = "stt.frontend."
    keys.expect(fe + "type", ("mel",))
    keys.expect(fe + "window", ("hann_periodic",))
    keys.expect(fe + "normalize", ("none",))
    keys.expect(fe + "mel_norm", ("htk",))
    for k in ("dither", "pre_emphasis", "f_min"):
        keys.expect(fe + k, (0.0,))
    keys.accept([fe + "f_max", fe + "log_clamp_min", fe + "log_clamp_max"])  # the baked filterbank; log's clamp
    rate = keys.require(fe + "sample_rate")
    if abs(keys.require(fe + "log_clamp_min") - 1e-9) > 1e-15 or keys.require(fe + "log_clamp_max") != 1e9:
        raise ModelError(f"{f.path}: a log clamp other than [1e-9, 1e9] is not implemented")
    cfg = {
        "model_name": keys.get("stt.variant", ""),
        "preprocessor": {"_target_": "gigaam.preprocess.FeatureExtractor", "sample_rate": rate,
                         "features": keys.require(fe + "num_mels"), "n_fft": keys.require(fe + "n_fft"),
                         "win_length": keys.require(fe + "win_length"), "hop_length": keys.require(fe + "hop_length"),
                         "center": keys.require(fe + "center")},
        "encoder": {"_target_": "gigaam.encoder.ConformerEncoder", "feat_in": e["feat_in"],
                    "n_layers": e["n_layers"], "d_model": e["d_model"], "subsampling": "conv1d",
                    "subs_kernel_size": e["subs_kernel_size"], "subsampling_factor": e["subsampling_factor"],
                    "ff_expansion_factor": e["d_ff"] // e["d_model"],
                    "self_attention_model": e["self_attention_model"], "pos_emb_max_len": e["pos_emb_max_len"],
                    "n_heads": e["n_heads"], "conv_norm_type": e["conv_norm_type"],
                    "conv_kernel_size": e["conv_kernel"]},
    }
    if "enc.pre_encode.out.weight" in f.tensors:
        raise ModelError(f"{f.path}: conv2d subsampling (enc.pre_encode.out) is not implemented")
    vocab = tokens[:-1]
    dec = {"vocabulary": [] if tok_model == "bpe" else vocab}
    if tok_model == "bpe":
        dec["model_path"] = "tokenizer.ggml"
    if head == "ctc":
        n = keys.require(P + "head.num_classes")
        if keys.require(P + "head.feat_in") != e["d_model"]:
            raise ModelError(f"{f.path}: head.feat_in differs from the encoder's d_model")
        cfg["head"] = {"_target_": "gigaam.decoder.CTCHead", "feat_in": e["d_model"], "num_classes": n}
        cfg["decoding"] = {"_target_": "gigaam.decoding.CTCGreedyDecoding", **dec}
    else:
        n = keys.require(P + "predictor.vocab")
        h = keys.require(P + "predictor.hidden")
        keys.expect(P + "joint.activation", ("relu",))
        if keys.require(P + "joint.num_classes") != n:
            raise ModelError(f"{f.path}: joint.num_classes differs from predictor.vocab")
        cfg["head"] = {"_target_": "gigaam.decoder.RNNTHead",
                       "decoder": {"pred_hidden": h, "pred_rnn_layers": keys.require(P + "predictor.n_layers"),
                                   "num_classes": n},
                       "joint": {"enc_hidden": e["d_model"], "pred_hidden": h,
                                 "joint_hidden": keys.require(P + "joint.hidden"), "num_classes": n}}
        cfg["decoding"] = {"_target_": "gigaam.decoding.RNNTGreedyDecoding", **dec}
    if n != len(tokens):
        raise ModelError(f"{f.path}: the head has {n} classes and the vocabulary {len(tokens)} tokens")
    return cfg, vocab, tok_model == "bpe"


def _state_dict(f, cfg) -> dict:
    sd = {"preprocessor.featurizer.0.mel_scale.fb": f.tensor("frontend.mel_filterbank").t().contiguous(),
          "preprocessor.featurizer.0.spectrogram.window": f.tensor("frontend.window")}
    taken = {"frontend.mel_filterbank", "frontend.window"}

    def put(ours: str, theirs: str):
        sd[ours] = f.tensor(theirs)
        taken.add(theirs)

    for k in (0, 2):
        for w in ("weight", "bias"):
            put(f"encoder.pre_encode.conv.{k}.{w}", f"enc.pre_encode.conv.{k}.{w}")
    for i in range(cfg.n_layers):
        for ours, theirs in _BLOCK:
            for w in ("weight", "bias"):
                put(f"encoder.layers.{i}.{ours}.{w}", f"enc.blocks.{i}.{theirs}.{w}")
    if cfg.head == "ctc":
        for w in ("weight", "bias"):
            put(f"head.decoder_layers.0.{w}", f"head.ctc.{w}")
    else:
        put("head.decoder.embed.weight", "pred.embed.weight")
        for i in range(cfg.pred_layers):
            put(f"head.decoder.lstm.weight_ih_l{i}", f"pred.lstm.{i}.Wx")
            put(f"head.decoder.lstm.weight_hh_l{i}", f"pred.lstm.{i}.Wh")
            put(f"head.decoder.lstm.bias_ih_l{i}", f"pred.lstm.{i}.bias")
            sd[f"head.decoder.lstm.bias_hh_l{i}"] = torch.zeros_like(sd[f"head.decoder.lstm.bias_ih_l{i}"])
        for ours, theirs in (("enc", "enc"), ("pred", "pred"), ("joint_net.1", "out")):
            for w in ("weight", "bias"):
                put(f"head.joint.{ours}.{w}", f"joint.{theirs}.{w}")
    extra = sorted(set(f.tensors) - taken)
    if extra:
        raise ModelError(f"{f.path}: tensors this code does not implement: {', '.join(extra[:6])}")
    return sd


def load(path: Path, name: str, device, dtype=None):
    from ..gguf.file import GGUFFile
    from .config import parse
    from .recognizer import GigaAMASR, Vocabulary, build, finish

    with GGUFFile(path) as f:
        if f.arch != ARCH:
            raise ModelError(f"{path}: a GGUF file of architecture {f.arch!r}, not {ARCH!r}")
        keys = f.keys()
        keys.accept(["general.*", "stt.variant", "tokenizer.ggml.scores", "tokenizer.ggml.token_type",
                     "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"])
        raw, vocab, sp = _config(f, keys)
        try:
            cfg = parse(raw)
        except ModelError as e:
            raise ModelError(f"{path}: {e}") from None
        if sp:
            from ..text.sentencepiece import UNIGRAM, sentencepiece_proto

            scores = list(f.meta.get("tokenizer.ggml.scores", []))[: len(vocab)] or None
            types = list(f.meta.get("tokenizer.ggml.token_type", []))[: len(vocab)] or None
            vocabulary = Vocabulary(sentencepiece=sentencepiece_proto(vocab, scores, types, UNIGRAM))
        else:
            vocabulary = Vocabulary(vocab)
        keys.finish()
        model = build(cfg, _state_dict(f, cfg), str(path))
    return GigaAMASR(finish(model, device, dtype), vocabulary, name, str(device))
