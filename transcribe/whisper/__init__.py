"""OpenAI Whisper: checkpoints (CTranslate2, openai .pt, transformers), front end, model, tokenizer,
decoding (logit rules, greedy, beam), long-form transcription, word timing, language detection and
the recognizer. `detect` and `load` are this family's entry in `transcribe.loading.FAMILIES`."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

# The family contract (loading.Family): its name in messages and the keyword options transcribe() takes.
KIND = "Whisper"
OPTIONS = frozenset({
    "batch_size", "batched", "timestamps", "language", "task", "condition_on_previous_text", "initial_prompt",
    "prefix", "no_speech_threshold", "logprob_threshold", "beam_size", "patience", "length_penalty", "temperature",
    "best_of", "compression_ratio_threshold", "seed", "word_timestamps", "prepend_punctuations",
    "append_punctuations", "sample_rate",
})


def detect(path: Path) -> Optional[str]:
    """Which Whisper checkpoint format a path holds, or None (see `checkpoints.detect`)."""
    from .checkpoints import detect as detect_format

    return detect_format(path)


# dtype="auto" on a CPU (loading.Family.fastest_cpu_dtype, by transcribe.cpu.family): the fastest precision
# measured for tiny.en, 60 s, greedy, 2 threads (benchmarks/README.md, "Precision per CPU"; speed against
# float32): AMX int8 2.01x (1 thread); AVX512-BF16 int8 1.83x; AVX-512 without BF16/VNNI int8 2.01x; AVX2 int8 1.90x.
FASTEST_CPU_DTYPE = {"amx": "int8", "avx512_bf16": "int8", "avx512": "int8", "avx2": "int8"}



def load(path: Path, name: str, device, dtype, kind: str):
    """The recognizer of a Whisper checkpoint (see `WhisperASR.load`)."""
    from .recognizer import WhisperASR

    return WhisperASR.load(path, name, device, dtype, kind)
