"""The training and reference speech of the tiny models (imported by the tools/*_tiny.py scripts): jfk.wav and the
37 dev utterances of <repo>/../shared/audio/dev (manifest.jsonl), with their transcripts."""
from __future__ import annotations

import json
from pathlib import Path

AUDIO = Path(__file__).resolve().parents[1].parent / "shared" / "audio"
JFK_TEXT = "And so, my fellow Americans, ask not what your country can do for you, ask what you can do for your country."


def clips() -> list:
    """(name, float32 16 kHz mono waveform, transcript) for jfk.wav, then the dev set in manifest order."""
    import soundfile as sf

    out = []
    wav, sr = sf.read(AUDIO / "jfk.wav", dtype="float32")
    assert sr == 16000
    out.append(("jfk.wav", wav, JFK_TEXT))
    for line in (AUDIO / "dev" / "manifest.jsonl").read_text().splitlines():
        row = json.loads(line)
        wav, sr = sf.read(AUDIO / "dev" / row["audio"], dtype="float32")
        assert sr == 16000 and wav.ndim == 1, row["audio"]
        out.append(("dev/" + row["audio"], wav, row["text"]))
    return out
