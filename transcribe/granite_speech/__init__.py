"""IBM Granite Speech, the autoregressive audio-LLMs (transformers' `GraniteSpeechForConditionalGeneration` and
`GraniteSpeechPlusForConditionalGeneration`: granite-speech-3.3-2b/8b, granite-4.0-1b-speech,
granite-speech-4.1-2b, granite-speech-4.1-2b-plus): the shared conformer encoder (`ibm.conformer`), a BLIP-2
Q-Former projector, a Granite LM (`llm/`) with its LoRA adapter merged at load, prompted through its chat format;
greedy and beam search exact against transformers. `detect` and `load` are this family's entry in
`transcribe.loading.FAMILIES`."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

__all__ = ["KIND", "Options", "StreamOptions", "PIECE_S", "FASTEST_CPU_DTYPE", "detect", "load", "export_gguf"]

# The family contract (loading.Family): the name in messages and the options of transcribe().
KIND = "Granite Speech"
from .options import GraniteSpeechOptions as Options  # noqa: E402
from .options import GraniteSpeechStreamOptions as StreamOptions  # noqa: E402  (a session cut at pauses)
# Batch jobs cut inputs longer than this into pieces at pauses (the default max_piece_s).
PIECE_S = 30.0


def detect(path: Path) -> Optional[str]:
    """"gguf" for a transcribe.cpp GGUF file of the `granite_speech` architecture; "transformers" for a
    directory whose config.json has model_type granite_speech or granite_speech_plus; else None."""
    from .config import MODEL_TYPES

    if path.is_file():
        from ..gguf import architecture, is_gguf

        return "gguf" if is_gguf(path) and architecture(path) == "granite_speech" else None
    cfg_path = path / "config.json"
    if not path.is_dir() or not cfg_path.is_file():
        return None
    try:
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return "transformers" if isinstance(cfg, dict) and cfg.get("model_type") in MODEL_TYPES else None


def load(path: Path, name: str, device, dtype, kind: str):
    if kind == "gguf":
        from .gguf import load_gguf

        return load_gguf(path, name, device, dtype)
    from .recognizer import GraniteSpeechASR

    return GraniteSpeechASR.load(path, name, device, dtype)


def export_gguf(path: Path, out: Path, schema: Optional[str], qtype: Optional[str], meta: Optional[dict],
                name: str) -> tuple[str, str]:
    """`transcribe convert` for a Granite Speech directory (`gguf_export.export_gguf`: transcribe.cpp's schema,
    bf16 by default, or f32): writes `out`, returns the schema and type used."""
    from ..errors import ModelError
    from .gguf_export import export_gguf as export

    if schema not in (None, "transcribe.cpp"):
        raise ModelError(f"{path}: a Granite Speech model has only transcribe.cpp's schema (--schema {schema})")
    if path.is_file():
        raise ModelError(f"{path}: already a GGUF file; convert writes GGUF files from checkpoint directories")
    qtype = qtype or "bf16"
    export(path, out, qtype, meta or None)
    return "transcribe.cpp", qtype


# dtype="auto" on a CPU (loading.Family.fastest_cpu_dtype, by transcribe.cpu.family): the fastest precision
# measured for the granite-4.0-1b-speech architecture (benchmarks/README.md, "Audio-LLMs"), listed only for the kinds of
# CPU measured (the others keep float32): on AVX-512 without bfloat16 arithmetic bf16 is emulated, int8 3-4x it.
FASTEST_CPU_DTYPE = {"avx512": "int8"}
