"""Reference log-mel spectrograms from openai-whisper for tests/test_whisper_features.py.

Run from the repository root in the openai-whisper virtual environment:

    python3 -m venv .venv-whisper                  # git-ignored, like every .venv-*/
    .venv-whisper/bin/pip install torch==2.13.0
    .venv-whisper/bin/pip install --no-deps openai-whisper
    .venv-whisper/bin/pip install tiktoken numba more-itertools tqdm
    .venv-whisper/bin/python tools/whisper_mel_reference.py

Writes tests/references/whisper/mel.json. The audio is read with the standard library's `wave`
(16-bit PCM / 32768, as openai-whisper's ffmpeg-based load_audio gives for 16 kHz mono files), so no
ffmpeg is needed. For every file, n_mels in (80, 128) and padding in (0, 480000) it records the shape,
mean, std, per-channel mean and the full columns at frames [0, 1, T//2, T-1]; for each filterbank,
the row sums, the argmax per row and rows [0, n//2, n-1] of openai-whisper's mel_filters.npz.
"""
from __future__ import annotations

import json
import sys
import wave
from pathlib import Path

import numpy as np
import torch
import whisper
from whisper.audio import N_SAMPLES, log_mel_spectrogram, mel_filters

REPO = Path(__file__).resolve().parent.parent
AUDIO = REPO.parent / "shared" / "audio"
FILES = ["jfk.wav", "ls_2086-149220-0033.wav"]
OUT = REPO / "tests" / "references" / "whisper" / "mel.json"


def f32(values) -> list:
    """float32 values as the shortest decimal that reads back to the same float32."""
    # str of a NumPy float32 is its shortest round-trip decimal; json then writes that decimal.
    return [float(str(v)) for v in np.asarray(values, dtype=np.float32).ravel()]


def read_wav(path: Path) -> np.ndarray:
    with wave.open(str(path), "rb") as w:
        if w.getsampwidth() != 2 or w.getnchannels() != 1 or w.getframerate() != 16000:
            sys.exit(f"{path}: expected 16 kHz mono 16-bit PCM")
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    return pcm.astype(np.float32) / 32768.0


def main() -> None:
    torch.set_num_threads(4)
    cases = []
    for name in FILES:
        audio = read_wav(AUDIO / name)
        for n_mels in (80, 128):
            for padding in (0, N_SAMPLES):
                mel = log_mel_spectrogram(torch.from_numpy(audio), n_mels, padding=padding).numpy()
                t = mel.shape[1]
                frames = [0, 1, t // 2, t - 1]
                cases.append({
                    "audio": f"../shared/audio/{name}",
                    "samples": int(audio.shape[0]),
                    "n_mels": n_mels,
                    "padding": padding,
                    "shape": list(mel.shape),
                    "mean": float(mel.astype(np.float64).mean()),
                    "std": float(mel.astype(np.float64).std()),
                    "channel_mean": f32(mel.astype(np.float64).mean(axis=1)),
                    "frames": frames,
                    "columns": [f32(mel[:, i]) for i in frames],
                })
    filters = {}
    for n_mels in (80, 128):
        fb = mel_filters("cpu", n_mels).numpy()
        rows = [0, n_mels // 2, n_mels - 1]
        filters[str(n_mels)] = {
            "shape": list(fb.shape),
            "row_sums": f32(fb.astype(np.float64).sum(axis=1)),
            "row_argmax": [int(i) for i in fb.argmax(axis=1)],
            "rows": rows,
            "row_values": [f32(fb[r]) for r in rows],
        }
    ref = {
        "reference": {
            "package": "openai-whisper",
            "version": whisper.__version__,
            "torch": torch.__version__,
            "function": "whisper.audio.log_mel_spectrogram(audio, n_mels, padding)",
        },
        "cases": cases,
        "filters": filters,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(ref, indent=1) + "\n")
    print(f"wrote {OUT.relative_to(REPO)} ({OUT.stat().st_size} bytes, {len(cases)} cases)")


if __name__ == "__main__":
    main()
