#!/usr/bin/env python
"""Tiny Parakeet models in transformers' layout (tests/models/parakeet-hf/{ctc,tdt}/) and what transformers
5.25 computes with them (tests/references/parakeet_hf/{ctc,tdt}.json). Run in .venv-nemo from the repo root:

    OMP_NUM_THREADS=1 .venv-nemo/bin/python tools/parakeet_hf_tiny.py --converter CONVERTER

CONVERTER is transformers' own `src/transformers/models/parakeet/convert_nemo_to_hf.py` from a transformers
source checkout (the 5.25 wheel does not ship it; the committed models were made with the file of
huggingface/transformers at commit 07f6a16d, its functions transcribed to a local file because the repository
could not be fetched whole here). Its functions are called on the tiny NeMo models of
../shared/models/parakeet-tiny/ (tiny-ctc-fit.nemo, tiny-tdt-fit.nemo): `extract_nemo_archive`,
`write_processor` (tokenizer.json through `ParakeetConverter`, processor_config.json) and `write_model`
(config.json, model.safetensors); tiny-rnnt-fit.nemo too, into rnnt/ (`write_rnnt_model`). Four places where
the converter assumes a published checkpoint, and what is done here so that it runs on a tiny one (none changes
a computed value):

- `convert_encoder_config` drops NeMo's `ff_expansion_factor` and leaves intermediate_size at its default 4096
  (1024 x 4, the published encoders'); the encoder config class it calls gets intermediate_size = d_model x
  ff_expansion_factor (256 here);
- CTC: `write_ctc_model` builds `ParakeetCTCConfig(encoder_config=...)` with the default vocab_size 1025 and
  pad_token_id 1024 (parakeet-ctc-1.1b's); the tiny vocabulary is 128 + blank, so the config class it calls
  gets vocab_size = 129 and pad_token_id = 128 (the blank, as 1024 is the published one's);
- TDT: `convert_tdt_config` takes pad_token_id from `labels.index("<pad>")` (published TDT vocabularies have a
  `<pad>`); the tiny vocabulary has none, so `<pad>` reads as the index it gets appended at (128, the blank
  id; `write_processor` appends `<pad>` there, then `<blank>` at 129);
- TDT and RNN-T: the converter maps the joint's output layer from NeMo's `joint.joint_net.2.` (a Sequential of
  activation, dropout, linear); the tiny model was built with joint dropout 0, so NeMo saved it at
  `joint_net.1.`: the state dict given to the converter names it `joint_net.2.` (a dropout is the identity
  at inference).

References (one thread, float32): for jfk.wav and two dev clips, the feature extractor's features (shape,
length, stats, the first frames), then for CTC `generate()` (frame argmax ids, collapsed ids, and
`processor.decode(..., skip_special_tokens=True)`'s text), for TDT and RNN-T `generate()` (sequences with their
durations, and the text) and, as a check, NeMo's own greedy ids on the source .nemo: a crash or a difference
is written down. (transformers 5.24 and 5.25 both decode these TDT folders; both crash in `generate()` with
"`decoder_start_token_id` or `bos_token_id` has to be defined for encoder-decoder generation" on a TDT folder
without the generation_config.json the converter writes, e.g. one saved from `ParakeetForTDT(config)`.)
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import hashlib
import importlib.util
import json
import shutil
import sys
import tempfile
import traceback
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO / ".." / "shared"
SOURCES = {"ctc": SHARED / "models" / "parakeet-tiny" / "tiny-ctc-fit.nemo",
           "tdt": SHARED / "models" / "parakeet-tiny" / "tiny-tdt-fit.nemo",
           "rnnt": SHARED / "models" / "parakeet-tiny" / "tiny-rnnt-fit.nemo"}
OUT = REPO / "tests" / "models" / "parakeet-hf"
REFS = REPO / "tests" / "references" / "parakeet_hf"
CLIPS = ["audio/jfk.wav", "audio/ls_2086-149220-0033.wav", "audio/dev/cv_17767698.wav"]
FIRST_FRAMES = 4


class _Labels(list):
    """The tiny vocabulary: `index("<pad>")` is where `write_processor` appends `<pad>` when it is missing."""

    def index(self, value, *args):
        if value == "<pad>" and value not in self:
            return len(self)
        return super().index(value, *args)


def _converter(path: Path):
    spec = importlib.util.spec_from_file_location("convert_nemo_to_hf", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def convert(conv, kind: str, out: Path) -> None:
    import torch
    import yaml

    with tempfile.TemporaryDirectory() as tmp:
        files = conv.extract_nemo_archive(str(SOURCES[kind]), tmp)
        cfg = yaml.safe_load(Path(files["model_config"]).read_text())
        sd = torch.load(files["model_weights"], map_location="cpu", weights_only=True)
        enc = cfg["encoder"]
        conv.ParakeetEncoderConfig = partial(conv.ParakeetEncoderConfig,
                                             intermediate_size=enc["d_model"] * enc["ff_expansion_factor"])
        if kind in ("tdt", "rnnt"):
            cfg["labels"] = _Labels(cfg["labels"])
            sd = {k.replace("joint.joint_net.1.", "joint.joint_net.2."): v for k, v in sd.items()}
        else:
            vocab = len(cfg["decoder"]["vocabulary"])
            conv.ParakeetCTCConfig = partial(conv.ParakeetCTCConfig, vocab_size=vocab + 1, pad_token_id=vocab)
        files["model_weights"] = str(Path(tmp) / "renamed.ckpt")
        torch.save(sd, files["model_weights"])
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        conv.write_processor(cfg, files, str(out), kind)
        conv.write_model(cfg, files, kind, str(out))


def _stats(x) -> dict:
    return {"mean": float(x.mean()), "std": float(x.std()), "abs_max": float(x.abs().max())}


def references(kind: str, folder: Path) -> dict:
    import numpy as np
    import soundfile as sf
    import torch
    import transformers
    from transformers import AutoProcessor, ParakeetForCTC, ParakeetForRNNT, ParakeetForTDT

    torch.set_num_threads(1)
    proc = AutoProcessor.from_pretrained(folder)
    cls = {"ctc": ParakeetForCTC, "tdt": ParakeetForTDT, "rnnt": ParakeetForRNNT}[kind]
    model = cls.from_pretrained(folder, dtype=torch.float32).eval()
    fe = proc.feature_extractor
    # transformers' filterbank (mel_filter_bank, slaney, float32), to compare with ours in the tests
    fb = fe.mel_filters.numpy()
    out = {"format_version": 1,
           "generator": {"tool": "tools/parakeet_hf_tiny.py", "transformers_version": transformers.__version__,
                         "torch_version": torch.__version__, "threads": 1},
           "model": {"path": f"tests/models/parakeet-hf/{kind}", "source": str(SOURCES[kind].relative_to(REPO / "..")),
                     "class": cls.__name__},
           "filterbank": {"shape": list(fb.shape), "sum": float(np.float64(fb).sum()),
                          "row_sums": [float(v) for v in np.float64(fb).sum(axis=0)]},
           "clips": {}}
    for rel in CLIPS:
        wav, sr = sf.read(SHARED / rel, dtype="float32")
        inputs = proc.feature_extractor(wav, sampling_rate=sr, return_tensors="pt", return_attention_mask=True)
        feats = inputs["input_features"]
        n = int(inputs["attention_mask"].sum())
        entry = {"num_samples": len(wav),
                 "features": {"shape": list(feats.shape), "length": n, **_stats(feats[0, :n]),
                              "channel_mean": [float(v) for v in feats[0, :n].mean(0)],
                              "first_frames": feats[0, :FIRST_FRAMES].tolist()}}
        try:
            with torch.no_grad():
                if kind == "ctc":
                    res = model.generate(inputs["input_features"], attention_mask=inputs["attention_mask"],
                                         return_dict_in_generate=True)
                    frames = res.sequences[0].tolist()
                    logp = res.logits[0].log_softmax(-1)
                    top2 = logp.topk(2, dim=-1).values
                    collapsed, prev = [], None
                    for t in frames:
                        if t != prev and t != model.config.pad_token_id:
                            collapsed.append(t)
                        prev = t
                    entry["ctc"] = {"frame_ids": frames, "ids": collapsed, "blank_id": model.config.pad_token_id,
                                    "min_margin": float((top2[:, 0] - top2[:, 1]).min()),
                                    "text": proc.decode(res.sequences[0], skip_special_tokens=True)}
                else:
                    res = model.generate(inputs["input_features"], attention_mask=inputs["attention_mask"])
                    seq = res.sequences[0].tolist()
                    dur = res.durations[0].tolist()
                    blank = model.config.blank_token_id
                    steps = list(zip(seq, dur))[1:]  # the first is decoder_start_token_id
                    frame, ids, frames = 0, [], []
                    for tok, d in steps:
                        if tok != blank:  # (batch 1: no padding)
                            ids.append(tok)
                            frames.append(frame)
                        frame += d
                    entry[kind] = {"sequences": seq, "durations": dur, "ids": ids, "frames": frames,
                                    "blank_id": blank,
                                    "text": proc.decode([t for t in ids], skip_special_tokens=True)}
        except Exception as e:  # written down: the brief asks where transformers crashes
            entry["error"] = "".join(traceback.format_exception_only(type(e), e)).strip()
            entry["traceback"] = traceback.format_exc().splitlines()[-8:]
        out["clips"][Path(rel).name] = entry
    return out


def nemo_check(kind: str, refs: dict) -> dict:
    """NeMo's greedy ids on the source .nemo for the same clips (the TDT check)."""
    import soundfile as sf
    import torch
    import nemo.collections.asr as nemo_asr

    torch.set_num_threads(1)
    model = nemo_asr.models.ASRModel.restore_from(str(SOURCES[kind]), map_location="cpu").eval()
    model.preprocessor.featurizer.dither = 0.0
    model.preprocessor.featurizer.pad_to = 0
    out = {}
    for rel in CLIPS:
        wav, sr = sf.read(SHARED / rel, dtype="float32")
        with torch.no_grad():
            sig = torch.tensor(wav)[None]
            feats, flen = model.preprocessor(input_signal=sig, length=torch.tensor([len(wav)]))
            enc, elen = model.encoder(audio_signal=feats, length=flen)
            hyps = model.decoding.rnnt_decoder_predictions_tensor(encoder_output=enc, encoded_lengths=elen,
                                                                  return_hypotheses=True)
        h = hyps[0] if not isinstance(hyps, tuple) else hyps[0][0]
        ids = [int(t) for t in (h.y_sequence.tolist() if hasattr(h.y_sequence, "tolist") else h.y_sequence)]
        name = Path(rel).name
        ours = refs["clips"][name].get(kind, {}).get("ids")
        out[name] = {"ids": ids, "text": model.tokenizer.ids_to_text(ids), "transformers_equal": ours == ids}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--converter", type=Path, help="transformers' convert_nemo_to_hf.py (skip: keep the models)")
    ap.add_argument("--kinds", default="ctc,tdt,rnnt")
    args = ap.parse_args()
    conv = _converter(args.converter) if args.converter else None
    REFS.mkdir(parents=True, exist_ok=True)
    for kind in args.kinds.split(","):
        folder = OUT / kind
        if conv is not None:
            convert(conv, kind, folder)
        refs = references(kind, folder)
        refs["model"]["files"] = {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
                                  for p in sorted(folder.iterdir()) if p.is_file()}
        if kind in ("tdt", "rnnt"):
            try:
                refs["nemo"] = nemo_check(kind, refs)
            except Exception as e:
                refs["nemo"] = {"error": repr(e)}
        (REFS / f"{kind}.json").write_text(json.dumps(refs, indent=1) + "\n")
        print(kind, {k: (v.get(kind) or {}).get("text", v.get("error")) for k, v in refs["clips"].items()})
        if "nemo" in refs:
            print("nemo", refs["nemo"])


if __name__ == "__main__":
    sys.exit(main())
