"""Reference outputs of transformers' GraniteSpeech5ForCTC on the tiny model -> tests/references/granite_speech5/.

Run from the repository root with the transformers venv, after tools/granite_speech5_tiny.py:

    OMP_NUM_THREADS=1 nice .venv-nemo/bin/python tools/granite_speech5_reference.py

The processor is the model directory's (GraniteSpeech5FeatureExtractor with the pure-torch stand-ins of
torchaudio's MelSpectrogram and compute_deltas, tools/granite_speech5_common.py; ParakeetTokenizer). For jfk.wav
and a few dev utterances, one at a time: `generate` (the argmax of every frame: greedy CTC), the text of
`batch_decode(skip_special_tokens=True)` (repeats grouped, the blank dropped), the features' first and last
frames and per-frame sums, and the log-softmax of the first frames. Then the same inputs as one padded batch
(attention_mask): the frames (padding frames are the pad id) and texts.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import granite_speech5_common as C  # noqa: E402
from speech_clips import clips  # noqa: E402

DEV = ["dev/ls_61-70968-0002.wav", "dev/ls_1089-134691-0001.wav", "dev/cv_17767698.wav"]
N_LOGP = 4  # frames of log-probabilities kept


def rounded(t) -> list:
    """A tensor as nested lists of floats to 6 decimals (the tests' tolerances are 1e-4 and coarser)."""
    return [rounded(x) for x in t] if t.dim() > 1 else [round(float(x), 6) for x in t]


def main():
    import torch
    from transformers import GraniteSpeech5ForCTC

    torch.set_num_threads(1)
    processor = C.load_processor(C.MODEL)
    model = GraniteSpeech5ForCTC.from_pretrained(str(C.MODEL)).eval()
    by_name = {n: w for n, w, _ in clips()}
    names = ["jfk.wav"] + DEV
    out = {"model": "tests/models/granite_speech5/tiny", "published": C.PUBLISHED, "single": [], "batch": {}}
    with torch.no_grad():
        for name in names:
            wav = by_name[name]
            inputs = processor(wav, sampling_rate=16000, return_tensors="pt")
            feats = inputs["input_features"][0]
            frames = model.generate(**inputs)[0]
            logits = model(**inputs).logits[0]
            text = processor.batch_decode(frames[None], skip_special_tokens=True)[0]
            out["single"].append(dict(
                name=name, samples=len(wav), mel_frames=len(wav) // 160, feature_frames=feats.shape[0],
                frames=frames.tolist(), text=text,
                features_head=rounded(feats[:2]), features_tail=rounded(feats[-2:]),
                feature_sums=[round(float(x), 5) for x in feats.sum(-1)],
                logp_head=rounded(torch.log_softmax(logits[:N_LOGP], -1))))
            print(f"{name}: {len(wav)} samples, {feats.shape[0]} feature frames, {frames.shape[0]} frames: {text!r}")
        wavs = [by_name[n] for n in names]
        inputs = processor(wavs, sampling_rate=16000, return_tensors="pt")
        frames = model.generate(**inputs)
        texts = processor.batch_decode(frames, skip_special_tokens=True)
        out["batch"] = dict(names=names, frames=frames.tolist(), texts=texts)
        for n, t in zip(names, texts):
            print(f"batch {n}: {t!r}")
    C.REFS.mkdir(parents=True, exist_ok=True)
    (C.REFS / "reference.json").write_text(json.dumps(out) + "\n")
    print("wrote", C.REFS / "reference.json")


if __name__ == "__main__":
    main()
