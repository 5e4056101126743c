"""openai-whisper's long-form `transcribe` on a 75 s concatenation of dev clips (own venv, repo root).

    .venv-whisper/bin/python tools/whisper_longform_reference.py local-models/tiny.en.pt

(.venv-whisper: made as in tools/whisper_mel_reference.py; local-models/tiny.en.pt: the default model
converted by tools/ct2_to_openai_pt.py; both git-ignored.)

The clip: the utterances of ../shared/audio/dev/manifest.jsonl in order, each followed by 0.5 s of
silence, until 75 s (cut there). temperature=0 only (no fallback), language en, fp16 off,
condition_on_previous_text on. Writes tests/references/whisper/longform.json.
"""
import json
import sys
import wave

import numpy as np
import torch
import whisper

SECONDS = 75.0


def read_wav(path):
    with wave.open(path) as w:
        assert w.getframerate() == 16000 and w.getnchannels() == 1 and w.getsampwidth() == 2
        return np.frombuffer(w.readframes(w.getnframes()), np.int16).astype(np.float32) / 32768.0


def longform_clip(root="../shared/audio/dev"):
    parts, total = [], 0
    for line in open(f"{root}/manifest.jsonl"):
        a = read_wav(f"{root}/{json.loads(line)['audio']}")
        parts += [a, np.zeros(8000, np.float32)]
        total += len(a) + 8000
        if total >= SECONDS * 16000:
            break
    return np.concatenate(parts)[: int(SECONDS * 16000)]


def main(pt):
    torch.set_num_threads(1)
    model = whisper.load_model(pt, device="cpu")
    audio = longform_clip()
    r = model.transcribe(audio, language="en", temperature=0.0, fp16=False, condition_on_previous_text=True)
    out = {
        "clip": "dev manifest utterances in order, 0.5 s silence after each, cut at 75 s",
        "num_samples": len(audio),
        "text": r["text"],
        "segments": [
            {k: s[k] for k in ("seek", "start", "end", "text", "tokens", "avg_logprob", "compression_ratio", "no_speech_prob", "temperature")}
            for s in r["segments"]
        ],
    }
    with open("tests/references/whisper/longform.json", "w") as f:
        json.dump(out, f, indent=1)
    print(len(out["segments"]), "segments")


if __name__ == "__main__":
    main(sys.argv[1])
