#!/usr/bin/env python
"""The ONNX peers' own int8 files: ONNX Runtime's dynamic quantization of the float32 export.

Run with the peers' Python (benchmarks/setup_peers.sh does; needs onnxruntime and onnx):

    .venv-peers/bin/python benchmarks/peers_quantize_onnx.py ONNX_DIR

ONNX_DIR is peers_export_onnx.py's output folder. For each float32 file of its layouts it writes the
int8 file beside it, as the two peers look for them: onnx-asr/encoder-model.int8.onnx and
decoder_joint-model.int8.onnx (onnx_asr.load_model(..., quantization="int8")), sherpa-onnx/encoder.int8.onnx,
decoder.int8.onnx and joiner.int8.onnx (the encoder's metadata is kept). The quantization is
onnxruntime.quantization.quantize_dynamic with int8 weights (QuantType.QInt8, ONNX Runtime's advice for
x86), per-tensor scales, every MatMul / Gemm quantizable by it; what it leaves alone stays float32.
A file that exists is kept.
"""
from __future__ import annotations

import sys
from pathlib import Path

PARTS = {"onnx-asr": ["encoder-model", "decoder_joint-model"], "sherpa-onnx": ["encoder", "decoder", "joiner"]}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: peers_quantize_onnx.py ONNX_DIR", file=sys.stderr)
        return 2
    root = Path(argv[0])
    if not root.is_dir():
        print(f"error: {root}: no such folder (run peers_export_onnx.py first)", file=sys.stderr)
        return 2
    from onnxruntime.quantization import QuantType, quantize_dynamic

    for layout, parts in PARTS.items():
        for part in parts:
            src, dst = root / layout / f"{part}.onnx", root / layout / f"{part}.int8.onnx"
            if not src.exists():
                print(f"{src}: missing, skipped")
                continue
            if dst.exists():
                print(f"{dst}: exists, kept")
                continue
            # the float32 encoder's weights are in a side file and the quantizer's working copy of it is past
            # protobuf's 2 GB: its result then keeps the weights in a side file too (<name>.int8.onnx.data)
            data = root / layout / f"{part}.onnx.data"
            big = data.exists() and data.stat().st_size > 2**30
            try:
                quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, use_external_data_format=big)
            except BaseException:
                for f in (dst, dst.with_name(dst.name + ".data")):  # no half-written file that looks done
                    f.unlink(missing_ok=True)
                raise
            print(f"{dst}: written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
