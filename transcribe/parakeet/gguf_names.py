"""Tensor names of the two Parakeet GGUF schemas, both ways.

parakeet.cpp stores NeMo's state-dict names verbatim. transcribe.cpp renames them (`enc.blocks.{i}.*`,
`pred.*`, `joint.out.*`, `head.ctc.*`), sums the LSTM's two biases into one and stores neither the
filterbank nor the window, nor the auxiliary CTC head of a hybrid. One table serves reading (transcribe.cpp
name -> NeMo name) and writing (NeMo name -> transcribe.cpp name).
"""
from __future__ import annotations

import re
from typing import Optional

# (NeMo pattern, transcribe.cpp pattern): `{i}` a layer index, `{n}` an LSTM layer, `{j}` the joint
# output layer's Sequential index (1 or 2, found by role).
_TABLE = (
    ("encoder.pre_encode.", "enc.pre_encode."),
    ("encoder.layers.{i}.norm_feed_forward1.", "enc.blocks.{i}.norm_ff1."),
    ("encoder.layers.{i}.feed_forward1.", "enc.blocks.{i}.ff1."),
    ("encoder.layers.{i}.norm_feed_forward2.", "enc.blocks.{i}.norm_ff2."),
    ("encoder.layers.{i}.feed_forward2.", "enc.blocks.{i}.ff2."),
    ("encoder.layers.{i}.norm_self_att.", "enc.blocks.{i}.norm_attn."),
    ("encoder.layers.{i}.self_attn.", "enc.blocks.{i}.attn."),
    ("encoder.layers.{i}.norm_conv.", "enc.blocks.{i}.norm_conv."),
    ("encoder.layers.{i}.conv.pointwise_conv1.", "enc.blocks.{i}.conv.pointwise1."),
    ("encoder.layers.{i}.conv.depthwise_conv.", "enc.blocks.{i}.conv.depthwise."),
    ("encoder.layers.{i}.conv.pointwise_conv2.", "enc.blocks.{i}.conv.pointwise2."),
    ("encoder.layers.{i}.conv.batch_norm.", "enc.blocks.{i}.conv.bn."),
    ("encoder.layers.{i}.norm_out.", "enc.blocks.{i}.norm_out."),
    ("decoder.prediction.embed.", "pred.embed."),
    ("decoder.prediction.dec_rnn.lstm.weight_ih_l{n}", "pred.lstm.{n}.Wx"),
    ("decoder.prediction.dec_rnn.lstm.weight_hh_l{n}", "pred.lstm.{n}.Wh"),
    ("joint.enc.", "joint.enc."),
    ("joint.pred.", "joint.pred."),
    ("joint.joint_net.{j}.", "joint.out."),
    ("decoder.decoder_layers.0.", "head.ctc."),
)
LSTM_BIAS = re.compile(r"^pred\.lstm\.(\d+)\.bias$")
NEMO_LSTM_BIAS = re.compile(r"^decoder\.prediction\.dec_rnn\.lstm\.bias_(ih|hh)_l(\d+)$")
# What transcribe.cpp leaves out of its files.
NOT_STORED = ("preprocessor.", "ctc_decoder.")


def _regex(pattern: str) -> re.Pattern:
    out = re.escape(pattern)
    for name in ("i", "n", "j"):
        out = out.replace(re.escape("{" + name + "}"), rf"(?P<{name}>\d+)")
    return re.compile("^" + out)


_TO_TCPP = [(_regex(n), t) for n, t in _TABLE]
_TO_NEMO = [(_regex(t), n) for n, t in _TABLE]


def _apply(name: str, rules, fill: dict) -> Optional[str]:
    for regex, target in rules:
        m = regex.match(name)
        if m:
            groups = {**fill, **{k: v for k, v in m.groupdict().items() if v is not None}}
            out = target
            for k, v in groups.items():
                out = out.replace("{" + k + "}", str(v))
            if "{" in out:
                return None
            return out + name[m.end():]
    return None


def to_transcribe_cpp(nemo_name: str) -> Optional[str]:
    """The transcribe.cpp name of a NeMo tensor; None for one it does not store (the filterbank, the
    window, a hybrid's CTC head, BatchNorm's counter) or one it stores merged (the LSTM biases:
    `pred.lstm.{n}.bias` is their sum)."""
    if nemo_name.startswith(NOT_STORED) or nemo_name.endswith("num_batches_tracked") or NEMO_LSTM_BIAS.match(nemo_name):
        return None
    return _apply(nemo_name, _TO_TCPP, {})


def to_nemo(tcpp_name: str, joint_index: int = 1) -> Optional[str]:
    """The NeMo name of a transcribe.cpp tensor (the joint output layer at Sequential index
    `joint_index`); None for the summed LSTM bias (see `LSTM_BIAS`) and for names not in the table."""
    if LSTM_BIAS.match(tcpp_name):
        return None
    return _apply(tcpp_name, _TO_NEMO, {"j": joint_index})
