"""Mistral Voxtral (mistralai/Voxtral-Mini-3B-2507, Voxtral-Small-24B-2507; transformers'
`VoxtralForConditionalGeneration`, model type `voxtral`): a Whisper encoder over 30 s chunks, a projector stacking
four frames into one row, and a Llama LM reading them through mistral-common's transcription prompt; speech
recognition with a language hint or detected, speech translation through the chat prompt, greedy or beam search,
token ids equal to transformers'. The tokenizer is the repos' `tekken.json` (`llm.tekken`). `detect` and `load`
are this family's entry in `transcribe.loading.FAMILIES`."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

__all__ = ["KIND", "Options", "StreamOptions", "PIECE_S", "FASTEST_CPU_DTYPE", "detect", "load"]

KIND = "Voxtral"
from .options import DEFAULT_PIECE_S, VoxtralOptions as Options  # noqa: E402
from .options import VoxtralStreamOptions as StreamOptions  # noqa: E402  (a session cut at pauses)

PIECE_S = DEFAULT_PIECE_S


def detect(path: Path) -> Optional[str]:
    """"gguf" for a transcribe.cpp GGUF file of the `voxtral` architecture; "transformers" for a directory whose
    config.json has model_type "voxtral"; "mistral" for one of Mistral's own layout (params.json and tekken.json,
    no config.json: refused when loaded, with what to use instead); else None."""
    if path.is_file():
        from ..gguf import architecture, is_gguf

        return "gguf" if is_gguf(path) and architecture(path) == "voxtral" else None
    if path.is_dir() and not (path / "config.json").is_file() and (path / "params.json").is_file() and \
            (path / "tekken.json").is_file():
        return "mistral"
    from ..json_files import config_of

    cfg = config_of(path)
    return "transformers" if cfg is not None and cfg.get("model_type") == "voxtral" else None


def load(path: Path, name: str, device, dtype, kind: str):
    from .recognizer import Voxtral

    if kind == "gguf":
        from .gguf import load_gguf

        return load_gguf(path, name, device, dtype)
    if kind == "mistral":
        from ..errors import ModelError
        from .config import MISTRAL_LAYOUT

        raise ModelError(f"{path}: {MISTRAL_LAYOUT}")

    return Voxtral.load(path, name, device, dtype)


# dtype="auto" on a CPU (loading.Family.fastest_cpu_dtype, by transcribe.cpu.family): the fastest precision measured
# on the full-size architecture (benchmarks/README.md, "Voxtral-Mini-3B and Canary-Qwen-2.5B"), for the kinds of
# CPU measured (the others keep float32): on AVX-512 without bfloat16 arithmetic bf16 is emulated, int8 about 5x it.
FASTEST_CPU_DTYPE = {"avx512": "int8"}
