"""The `gigaam` package's outputs on the tiny GigaAM models (tests/models/gigaam/*), for tests/test_gigaam.py.

    .venv-gigaam/bin/python tools/gigaam_reference.py [--models tests/models/gigaam] [--out tests/references/gigaam]

Run in the reference's venv (tools/setup_gigaam_venv.sh). Each model folder (the Hugging Face layout) is
built as gigaam.load_model builds a checkpoint: GigaAMASR(cfg) from its config, the SentencePiece model's path
set in decoding.model_path, the state dict loaded strictly. For each clip the steps of GigaAMASR.transcribe
run after its audio loading (which needs the ffmpeg program, absent here): the clip read as float32
(16-bit PCM / 32768, the values gigaam's ffmpeg pipe gives), forward(), then _decode(word_timestamps=True)
for the text and word times and decoding.decode() for the token ids and frames. The clips also run as one
padded batch (as transcribe_longform batches its segments) for the batch ids. A few encoder outputs are
kept for a float comparison.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from speech_clips import AUDIO  # noqa: E402

CLIPS = ["jfk.wav", "dev/cv_17767698.wav", "dev/ls_61-70968-0002.wav"]


def load(folder: Path):
    from omegaconf import OmegaConf

    from gigaam.model import GigaAMASR

    cfg = json.loads((folder / "config.json").read_text())["cfg"]["model"]["cfg"]
    if "model_path" in cfg["decoding"]:
        cfg["decoding"]["model_path"] = str(folder / "tokenizer.model")
    model = GigaAMASR(OmegaConf.create(cfg))
    sd = torch.load(folder / "pytorch_model.bin", map_location="cpu", weights_only=True)
    model.load_state_dict({k[len("model."):]: v for k, v in sd.items()})
    return model.eval()


@torch.inference_mode()
def run(model, wavs: list) -> dict:
    out = []
    for name, wav in wavs:
        x = wav[None]
        length = torch.tensor([wav.shape[0]])
        enc, enc_len = model.forward(x, length)
        (text, words), = model._decode(enc, enc_len, length, word_timestamps=True)
        (text2, ids, frames), = model.decoding.decode(model.head, enc, enc_len)
        assert text == text2
        out.append({"clip": name, "text": text, "ids": ids, "frames": frames, "encoded_len": int(enc_len[0]),
                    "words": [{"word": w.text, "start": w.start, "end": w.end} for w in words],
                    "enc_sample": enc[0, :4, :6].tolist(), "enc_mean_abs": float(enc.abs().mean())})
    n = max(w.shape[0] for _, w in wavs)
    batch = torch.zeros(len(wavs), n)
    for j, (_, w) in enumerate(wavs):
        batch[j, : w.shape[0]] = w
    lengths = torch.tensor([w.shape[0] for _, w in wavs])
    enc, enc_len = model.forward(batch, lengths)
    for row, (_, ids, frames) in zip(out, model.decoding.decode(model.head, enc, enc_len)):
        row["batch_ids"], row["batch_frames"] = ids, frames
    return {"clips": out}


def main() -> None:
    import soundfile as sf

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", type=Path, default=Path("tests/models/gigaam"))
    ap.add_argument("--out", type=Path, default=Path("tests/references/gigaam"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    wavs = []
    for c in CLIPS:
        w, sr = sf.read(AUDIO / c, dtype="float32")
        assert sr == 16000
        wavs.append((c, torch.from_numpy(w)))
    args.out.mkdir(parents=True, exist_ok=True)
    for variant in ("ctc", "rnnt", "e2e-ctc", "e2e-rnnt"):
        ref = run(load(args.models / variant), wavs)
        (args.out / f"{variant}.json").write_text(json.dumps(ref, indent=1, ensure_ascii=False) + "\n")
        print(variant, [r["text"][:60] for r in ref["clips"]])


if __name__ == "__main__":
    main()
