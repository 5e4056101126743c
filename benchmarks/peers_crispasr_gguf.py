#!/usr/bin/env python
"""A parakeet.cpp-schema GGUF (transcribe convert --schema parakeet.cpp) rewritten under CrispASR's names.

    python3 benchmarks/peers_crispasr_gguf.py IN-pcpp.gguf OUT-crispasr.gguf

CrispASR's Parakeet runtime reads parakeet.cpp's tensors under its own names (encoder.pre.*,
encoder.layers.N.{norm_ff1, ff1, attn.q/k/v/out/pos, conv.pw1/dw/bn/pw2, norm_ff2, ff2, norm_out},
decoder.embed / decoder.lstm.N.{w_ih, w_hh, b_ih, b_hh}, joint.{enc, pred, out}, preprocessor.{window, fb})
and flat parakeet.* hyper-parameters with the vocabulary in tokenizer.ggml.tokens. The tensors' bytes
are copied as they are (Q8_0 stays Q8_0) with two changes CrispASR's loader needs: the depthwise
convolution's weight is stored as F16 (it reads that tensor as F16), and its bias is moved into the batch
norm's running mean (running_mean - bias; the loader folds the batch norm into a zero bias it owns), which
computes the same function. Used by benchmarks/setup_peers.sh; needs the `gguf` package.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

RENAMES = [  # (pattern, replacement) applied in order to parakeet.cpp's names
    (r"^preprocessor\.featurizer\.", "preprocessor."),
    (r"^encoder\.pre_encode\.", "encoder.pre."),
    (r"\.norm_feed_forward1\.", ".norm_ff1."), (r"\.norm_feed_forward2\.", ".norm_ff2."),
    (r"\.feed_forward1\.", ".ff1."), (r"\.feed_forward2\.", ".ff2."),
    (r"\.norm_self_att\.", ".norm_attn."),
    (r"\.self_attn\.linear_(q|k|v|out|pos)\.", r".attn.\1."), (r"\.self_attn\.pos_bias_", ".attn.pos_bias_"),
    (r"\.conv\.pointwise_conv1\.", ".conv.pw1."), (r"\.conv\.pointwise_conv2\.", ".conv.pw2."),
    (r"\.conv\.depthwise_conv\.", ".conv.dw."), (r"\.conv\.batch_norm\.", ".conv.bn."),
    (r"^decoder\.prediction\.embed\.", "decoder.embed."),
    (r"^decoder\.prediction\.dec_rnn\.lstm\.(weight|bias)_(ih|hh)_l(\d+)$", None),  # handled below
    (r"^joint\.joint_net\.2\.", "joint.out."),
]
KEYS = {  # CrispASR's key: parakeet.cpp's key
    "sample_rate": "preprocessor.sample_rate", "n_mels": "preprocessor.n_mels", "n_fft": "preprocessor.n_fft",
    "win_length": "preprocessor.win_length", "hop_length": "preprocessor.hop_length",
    "d_model": "encoder.d_model", "n_layers": "encoder.n_layers", "n_heads": "encoder.n_heads",
    "ff_dim": "encoder.ff_dim", "subsampling_factor": "encoder.subsampling_factor",
    "subsampling_channels": "encoder.subsampling_conv_channels", "conv_kernel": "encoder.conv_kernel",
    "pred_hidden": "decoder.pred_hidden", "pred_layers": "decoder.pred_rnn_layers",
    "joint_hidden": "joint.joint_hidden", "vocab_size": "vocab_size", "blank_id": "blank_id",
}


def rename(name: str) -> str:
    m = re.match(r"^decoder\.prediction\.dec_rnn\.lstm\.(weight|bias)_(ih|hh)_l(\d+)$", name)
    if m:
        return f"decoder.lstm.{m.group(3)}.{'w' if m.group(1) == 'weight' else 'b'}_{m.group(2)}"
    for pat, rep in RENAMES:
        if rep is not None:
            name = re.sub(pat, rep, name)
    return name


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: peers_crispasr_gguf.py IN-pcpp.gguf OUT-crispasr.gguf", file=sys.stderr)
        return 2
    src, dst = Path(argv[0]), Path(argv[1])
    if not src.is_file():
        print(f"error: {src}: no such file", file=sys.stderr)
        return 2
    import numpy as np
    from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter

    r = GGUFReader(str(src))

    def value(key):
        f = r.fields.get(key)
        if f is None:
            return None
        if f.types and f.types[0] == GGUFValueType.ARRAY:
            return [bytes(f.parts[i]).decode("utf-8") if f.types[-1] == GGUFValueType.STRING else f.parts[i][0].item()
                    for i in f.data]
        if f.types[0] == GGUFValueType.STRING:
            return bytes(f.parts[f.data[0]]).decode("utf-8")
        return f.parts[f.data[0]][0].item()

    if value("general.architecture") != "parakeet" or value("parakeet.encoder.d_model") is None:
        print(f"error: {src}: not a parakeet.cpp-schema file (transcribe convert --schema parakeet.cpp)", file=sys.stderr)
        return 2
    w = GGUFWriter(str(dst), "parakeet")
    w.add_name(str(value("general.name") or dst.stem))
    for k, ours in KEYS.items():
        v = value("parakeet." + ours)
        if v is not None:
            w.add_uint32("parakeet." + k, int(v))
    xscaling = value("parakeet.encoder.xscaling")
    if xscaling is not None:
        w.add_bool("parakeet.xscaling", bool(xscaling))
    d, heads = int(value("parakeet.encoder.d_model")), int(value("parakeet.encoder.n_heads"))
    w.add_uint32("parakeet.head_dim", d // heads)
    durations = value("parakeet.tdt.durations") or []
    w.add_uint32("parakeet.n_tdt_durations", len(durations))
    if durations:
        w.add_array("parakeet.tdt_durations", [int(x) for x in durations])
    hop_s = int(value("parakeet.preprocessor.hop_length")) / int(value("parakeet.preprocessor.sample_rate"))
    w.add_uint32("parakeet.frame_dur_cs", round(100 * hop_s * int(value("parakeet.encoder.subsampling_factor"))))
    w.add_array("tokenizer.ggml.tokens", value("parakeet.tokenizer.pieces"))

    tensors = {t.name: t for t in r.tensors}
    for t in r.tensors:
        name, data, dtype = rename(t.name), np.asarray(t.data), t.tensor_type
        if t.name.endswith(".conv.depthwise_conv.weight"):
            data, dtype = data.astype(np.float16), GGMLQuantizationType.F16
        elif t.name.endswith(".conv.depthwise_conv.bias"):
            data = np.zeros_like(data)
        elif t.name.endswith(".conv.batch_norm.running_mean"):
            bias = np.asarray(tensors[t.name.replace("batch_norm.running_mean", "depthwise_conv.bias")].data)
            data = (data - bias).astype(np.float32)
        if dtype in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
            w.add_tensor(name, data)
        else:
            w.add_tensor(name, data, raw_dtype=dtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{dst}: written ({len(r.tensors)} tensors)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
