"""transcribe.cpp's names of NeMo's FastConformer encoder tensors (the same in its Parakeet and Canary
schemas), and the small pattern machinery the families' tables share: a table of (NeMo pattern,
transcribe.cpp pattern) pairs, `{i}`-style fields matching layer indices, read either way."""
from __future__ import annotations

import re
from typing import Optional

# (NeMo pattern, transcribe.cpp pattern): `{i}` an encoder layer.
ENCODER_TABLE = (
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
)
FIELDS = ("i", "n", "j")


def _regex(pattern: str) -> re.Pattern:
    out = re.escape(pattern)
    for name in FIELDS:
        out = out.replace(re.escape("{" + name + "}"), rf"(?P<{name}>\d+)")
    return re.compile("^" + out)


def rules(table, to_transcribe_cpp: bool) -> list:
    """A table's patterns compiled for one direction."""
    return [(_regex(n), t) if to_transcribe_cpp else (_regex(t), n) for n, t in table]


def apply(name: str, compiled, fill: Optional[dict] = None) -> Optional[str]:
    """`name` renamed by the first rule whose pattern starts it (the rest of the name kept); None when
    none does, or a field of the target is left unfilled."""
    for regex, target in compiled:
        m = regex.match(name)
        if m:
            groups = {**(fill or {}), **{k: v for k, v in m.groupdict().items() if v is not None}}
            out = target
            for k, v in groups.items():
                out = out.replace("{" + k + "}", str(v))
            if "{" in out:
                return None
            return out + name[m.end():]
    return None
