"""Qwen3-ASR (Qwen/Qwen3-ASR-0.6B-hf, Qwen/Qwen3-ASR-1.7B-hf; transformers' `Qwen3ASRForConditionalGeneration`,
model type `qwen3_asr`): an audio encoder (convolutions over 1 s chunks, windowed attention) and a projector feeding
a Qwen3 decoder-only LM through a chat prompt; speech recognition in 30 languages, the language detected or forced,
greedy or beam search, token ids equal to transformers'. `detect` and `load` are this family's entry in
`transcribe.loading.FAMILIES`."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

__all__ = ["KIND", "Options", "StreamOptions", "PIECE_S", "FASTEST_CPU_DTYPE", "detect", "load"]

# The family contract (loading.Family): the name in messages and the options of transcribe().
KIND = "Qwen3-ASR"
from .options import DEFAULT_PIECE_S, Qwen3ASROptions as Options  # noqa: E402
from .options import Qwen3ASRStreamOptions as StreamOptions  # noqa: E402  (a session cut at pauses)
# Batch jobs cut inputs longer than this into pieces at pauses (the default max_piece_s: one piece's text must fit
# the generation config's 512 new tokens).
PIECE_S = DEFAULT_PIECE_S


def detect(path: Path) -> Optional[str]:
    """"gguf" for a transcribe.cpp GGUF file of the `qwen3_asr` architecture; "transformers" for a directory whose
    config.json has model_type "qwen3_asr" (Qwen's original layout too: its loading says why it is refused); else
    None."""
    if path.is_file():
        from ..gguf import architecture, is_gguf

        return "gguf" if is_gguf(path) and architecture(path) == "qwen3_asr" else None
    from ..json_files import config_of

    cfg = config_of(path)
    return "transformers" if cfg is not None and cfg.get("model_type") == "qwen3_asr" else None


def load(path: Path, name: str, device, dtype, kind: str):
    if kind == "gguf":
        from .gguf import load_gguf

        return load_gguf(path, name, device, dtype)
    from .recognizer import Qwen3ASR

    return Qwen3ASR.load(path, name, device, dtype)


def export_gguf(path: Path, out: Path, schema: Optional[str], qtype: Optional[str], meta: Optional[dict],
                name: str) -> tuple[str, str]:
    """`transcribe convert` for a Qwen3-ASR -hf directory (`gguf_export.export_gguf`: transcribe.cpp's schema, bf16
    by default, or f32): writes `out`, returns the schema and type used."""
    from ..errors import ModelError
    from .gguf_export import export_gguf as export

    if schema not in (None, "transcribe.cpp"):
        raise ModelError(f"{path}: a Qwen3-ASR model has only transcribe.cpp's schema (--schema {schema})")
    if path.is_file():
        raise ModelError(f"{path}: already a GGUF file; convert writes GGUF files from checkpoint directories")
    qtype = qtype or "bf16"
    export(path, out, qtype, meta or None)
    return "transcribe.cpp", qtype


# dtype="auto" on a CPU (loading.Family.fastest_cpu_dtype, by transcribe.cpu.family): the fastest precision
# measured for the Qwen3-ASR-0.6B architecture (benchmarks/README.md, "Audio-LLMs"), listed only for the kinds of
# CPU measured (the others keep float32): on AVX-512 without bfloat16 arithmetic bf16 is emulated, int8 3-4x it.
FASTEST_CPU_DTYPE = {"avx512": "int8"}
