"""OpenAI Whisper: checkpoints (CTranslate2, openai .pt, transformers), front end, model, tokenizer,
decoding (logit rules, greedy, beam), long-form transcription, word timing, language detection and
the recognizer. `detect` and `load` are this family's entry in `transcribe.loading.FAMILIES`."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

__all__ = ["KIND", "Options", "StreamOptions", "PIECE_S", "TASK_INPUTS", "FASTEST_CPU_DTYPE", "detect", "load"]

# The family contract (loading.Family): its name in messages and the keyword options transcribe() takes.
KIND = "Whisper"
from .options import WhisperOptions as Options, WhisperStreamOptions as StreamOptions  # noqa: E402
# Batch jobs cut inputs longer than this into pieces at pauses (Whisper's window).
PIECE_S = 30.0
# Inputs per batch-job task (one model call): Whisper's decoding loop gains from larger batches on a CPU
# (benchmarks/README.md, "Batch jobs").
TASK_INPUTS = 16
# transcribe(list) runs the inputs one by one unless batch_size is given: batch jobs give the list's length.
LIST_ONE_BY_ONE = True


def detect(path: Path) -> Optional[str]:
    """Which Whisper checkpoint format a path holds, or None (see `checkpoints.detect`)."""
    from .checkpoints import detect as detect_format

    return detect_format(path)


# dtype="auto" on a CPU (loading.Family.fastest_cpu_dtype, by transcribe.cpu.family): the fastest precision
# for tiny.en on each kind of CPU (the figures: benchmarks/README.md, "Precision per CPU").
FASTEST_CPU_DTYPE = {"amx": "int8", "avx512_bf16": "int8", "avx512": "int8", "avx2": "int8"}



def load(path: Path, name: str, device, dtype, kind: str):
    """The recognizer of a Whisper checkpoint (see `WhisperASR.load`)."""
    from .recognizer import WhisperASR

    return WhisperASR.load(path, name, device, dtype, kind)
