"""Canary-Qwen (nvidia/canary-qwen-2.5b; NeMo's speechlm2 `SALM`): a FastConformer encoder and a projection feeding a
Qwen3 LM with LoRA adapters through a chat prompt; English speech recognition, greedy or beam search, token ids
equal to NeMo's `SALM.generate`. `detect` and `load` are this family's entry in `transcribe.loading.FAMILIES`."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

__all__ = ["KIND", "Options", "StreamOptions", "PIECE_S", "FASTEST_CPU_DTYPE", "detect", "load"]

# The family contract (loading.Family): the name in messages and the options of transcribe().
KIND = "Canary-Qwen"
from .options import DEFAULT_PIECE_S, CanaryQwenOptions as Options  # noqa: E402
from .options import CanaryQwenStreamOptions as StreamOptions  # noqa: E402  (a session cut at pauses)
# Batch jobs cut inputs longer than this into pieces at pauses (the default max_piece_s: the longest audio the model
# was trained on).
PIECE_S = DEFAULT_PIECE_S


def detect(path: Path) -> Optional[str]:
    """"gguf" for a transcribe.cpp GGUF file of the `canary_qwen` architecture; "salm" for a directory whose
    config.json is a NeMo SALM's (a `perception` section, `audio_locator_tag`, `pretrained_llm`); else None."""
    if path.is_file():
        from ..gguf import architecture, is_gguf

        return "gguf" if is_gguf(path) and architecture(path) == "canary_qwen" else None
    from ..json_files import config_of
    from .config import is_salm_config

    cfg = config_of(path)
    return "salm" if cfg is not None and is_salm_config(cfg) else None


def load(path: Path, name: str, device, dtype, kind: str):
    if kind == "gguf":
        from .gguf import load_gguf

        return load_gguf(path, name, device, dtype)
    from .recognizer import CanaryQwen

    return CanaryQwen.load(path, name, device, dtype)


# dtype="auto" on a CPU (loading.Family.fastest_cpu_dtype, by transcribe.cpu.family): the fastest precision measured
# on the full-size architecture (benchmarks/README.md, "Voxtral-Mini-3B and Canary-Qwen-2.5B"), for the kinds of
# CPU measured (the others keep float32): on AVX-512 without bfloat16 arithmetic bf16 is emulated, int8 about 5x it.
FASTEST_CPU_DTYPE = {"avx512": "int8"}
