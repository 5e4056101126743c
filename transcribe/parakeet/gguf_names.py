"""Tensor names of the two Parakeet GGUF schemas, both ways.

parakeet.cpp stores NeMo's state-dict names verbatim. transcribe.cpp renames them (`enc.blocks.{i}.*`,
`pred.*`, `joint.out.*`, `head.ctc.*`), sums the LSTM's two biases into one and stores neither the
filterbank nor the window, nor the auxiliary CTC head of a hybrid. One table serves reading (transcribe.cpp
name -> NeMo name) and writing (NeMo name -> transcribe.cpp name).
"""
from __future__ import annotations

import re
from typing import Optional

from ..nemo.gguf_names import ENCODER_TABLE, apply, rules

# (NeMo pattern, transcribe.cpp pattern): the encoder's (nemo/gguf_names.py), then the heads': `{n}` an
# LSTM layer, `{j}` the joint output layer's Sequential index (1 or 2, found by role).
_TABLE = ENCODER_TABLE + (
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


_TO_TCPP = rules(_TABLE, True)
_TO_NEMO = rules(_TABLE, False)


def to_transcribe_cpp(nemo_name: str) -> Optional[str]:
    """The transcribe.cpp name of a NeMo tensor; None for one it does not store (the filterbank, the
    window, a hybrid's CTC head, BatchNorm's counter) or one it stores merged (the LSTM biases:
    `pred.lstm.{n}.bias` is their sum)."""
    if nemo_name.startswith(NOT_STORED) or nemo_name.endswith("num_batches_tracked") or NEMO_LSTM_BIAS.match(nemo_name):
        return None
    return apply(nemo_name, _TO_TCPP)


def to_nemo(tcpp_name: str, joint_index: int = 1) -> Optional[str]:
    """The NeMo name of a transcribe.cpp tensor (the joint output layer at Sequential index
    `joint_index`); None for the summed LSTM bias (see `LSTM_BIAS`) and for names not in the table."""
    if LSTM_BIAS.match(tcpp_name):
        return None
    return apply(tcpp_name, _TO_NEMO, {"j": joint_index})
