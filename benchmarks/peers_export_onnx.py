#!/usr/bin/env python
"""A Parakeet TDT .nemo as ONNX files for the ONNX Runtime peers, written by NeMo's own export.

Run with the Python of the NeMo virtual environment (benchmarks/setup_peers.sh does):

    .venv-nemo/bin/python benchmarks/peers_export_onnx.py MODEL.nemo OUT_DIR [--layout onnx-asr|sherpa-onnx|both]

Layouts (each in its own folder under OUT_DIR; a folder that already holds its files is left alone):
  onnx-asr/     model.export("model.onnx") (NeMo writes its two parts, encoder-model.onnx and
                decoder_joint-model.onnx), each weight stored in one side file (<name>.data) since the
                float32 encoder is past protobuf's 2 GB; vocab.txt ("piece id" per line, "<blk>" last);
                config.json {"model_type": "nemo-conformer-tdt", "features_size", "subsampling_factor"}:
                what onnx_asr.load_model("nemo-conformer-tdt", path) reads.
  sherpa-onnx/  model.encoder.export("encoder.onnx"), model.decoder.export("decoder.onnx"),
                model.joint.export("joiner.onnx") (weights again in one side file per part);
                tokens.txt (as vocab.txt); the encoder's metadata: vocab_size (without the blank),
                subsampling_factor, normalize_type, pred_rnn_layers, pred_hidden, feat_dim,
                model_type EncDecRNNTBPEModel, and a url holding "tdt" (sherpa-onnx decides TDT
                against RNN-T from it): what sherpa_onnx.OfflineRecognizer.from_transducer(...,
                model_type="nemo_transducer") reads.
Weights are float32 as the .nemo holds them; no quantization here.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path


def _resave(src: Path, dst: Path, metadata: dict | None = None) -> None:
    """An exported ONNX file (its weights maybe in many loose files beside it) saved as `dst` with
    every weight in one side file `dst.name + ".data"`, metadata added."""
    import onnx

    model = onnx.load(str(src), load_external_data=True)
    if metadata:
        keep = {p.key: p.value for p in model.metadata_props}
        keep.update({k: str(v) for k, v in metadata.items()})
        del model.metadata_props[:]
        for k, v in keep.items():
            model.metadata_props.add(key=k, value=v)
    onnx.save(model, str(dst), save_as_external_data=True, all_tensors_to_one_file=True,
              location=dst.name + ".data", size_threshold=1024)


def _vocab_lines(model) -> list[str]:
    tok = model.tokenizer
    n = tok.vocab_size
    return [f"{tok.ids_to_tokens([i])[0]} {i}" for i in range(n)] + [f"<blk> {n}"]


WANT = {"onnx-asr": ["encoder-model.onnx", "decoder_joint-model.onnx", "vocab.txt", "config.json"],
        "sherpa-onnx": ["encoder.onnx", "decoder.onnx", "joiner.onnx", "tokens.txt"]}


def export(nemo: Path, out: Path, layouts: list[str]) -> int:
    import logging

    for layout in list(layouts):
        if all((out / layout / w).exists() for w in WANT[layout]):
            print(f"{out / layout}: exists, kept")
            layouts.remove(layout)
    if not layouts:
        return 0

    import torch
    from nemo.utils import logging as nemo_logging

    nemo_logging.setLevel(logging.ERROR)
    from nemo.collections.asr.models import ASRModel

    torch.set_grad_enabled(False)
    model = ASRModel.restore_from(str(nemo), map_location="cpu")
    model.eval()
    cfg = model.cfg
    feat = int(cfg.preprocessor.features)
    sub = int(cfg.encoder.subsampling_factor)
    vocab = "\n".join(_vocab_lines(model)) + "\n"
    for layout in layouts:
        dest = out / layout
        dest.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=out) as tmp:
            tmp = Path(tmp)
            if layout == "onnx-asr":
                model.export(str(tmp / "model.onnx"))  # NeMo writes encoder-model.onnx, decoder_joint-model.onnx
                for part in ("encoder-model.onnx", "decoder_joint-model.onnx"):
                    if not (tmp / part).exists():
                        raise SystemExit(f"NeMo's export wrote {sorted(p.name for p in tmp.iterdir())}, no {part}")
                    _resave(tmp / part, dest / part)
                (dest / "vocab.txt").write_text(vocab)
                (dest / "config.json").write_text(json.dumps(
                    {"model_type": "nemo-conformer-tdt", "features_size": feat, "subsampling_factor": sub}) + "\n")
            else:
                model.encoder.export(str(tmp / "encoder.onnx"))
                model.decoder.export(str(tmp / "decoder.onnx"))
                model.joint.export(str(tmp / "joiner.onnx"))
                meta = {
                    "vocab_size": model.tokenizer.vocab_size, "subsampling_factor": sub,
                    "normalize_type": str(cfg.preprocessor.get("normalize", "per_feature")),
                    "pred_rnn_layers": int(cfg.decoder.prednet.pred_rnn_layers),
                    "pred_hidden": int(cfg.decoder.prednet.pred_hidden), "feat_dim": feat,
                    "model_type": "EncDecRNNTBPEModel", "version": "1",
                    "url": f"local {nemo.name} (parakeet tdt architecture)",
                    "comment": "written by benchmarks/peers_export_onnx.py (NeMo's export)",
                }
                _resave(tmp / "encoder.onnx", dest / "encoder.onnx", meta)
                _resave(tmp / "decoder.onnx", dest / "decoder.onnx")
                _resave(tmp / "joiner.onnx", dest / "joiner.onnx")
                (dest / "tokens.txt").write_text(vocab)
        print(f"{dest}: written ({', '.join(sorted(p.name for p in dest.iterdir()))})")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="the .nemo")
    ap.add_argument("out", help="folder for the layouts' folders")
    ap.add_argument("--layout", choices=["onnx-asr", "sherpa-onnx", "both"], default="both")
    a = ap.parse_args(argv)
    nemo = Path(a.model)
    if not nemo.is_file():
        print(f"error: {nemo}: no such .nemo file", file=sys.stderr)
        return 2
    layouts = ["onnx-asr", "sherpa-onnx"] if a.layout == "both" else [a.layout]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    return export(nemo, out, layouts)


if __name__ == "__main__":
    sys.exit(main())
