"""NVIDIA Parakeet (NeMo FastConformer): the `.nemo` checkpoint, NeMo's front end, the conformer
encoder, the heads (TDT, RNN-T, CTC) and the recognizer; Parakeet GGUF files (parakeet.cpp's and
transcribe.cpp's, `gguf.py`) and transformers folders (`ParakeetForCTC` / `ParakeetForTDT` /
`ParakeetForRNNT`, `hf.py`) load as the same models. `detect` and `load` are this family's entry in
`transcribe.loading.FAMILIES`."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

__all__ = ["KIND", "Options", "StreamOptions", "PIECE_S", "FASTEST_CPU_DTYPE", "detect", "load", "export_gguf"]

# The family contract (loading.Family): how the family is named in messages, and the keyword options its
# recognizer's transcribe() takes (every surface refuses any other with errors.OptionsNotTaken; the
# command checks a local model's options with this before PyTorch is imported).
KIND = "Parakeet"
from .options import ParakeetOptions as Options, ParakeetStreamOptions as StreamOptions  # noqa: E402
# Batch jobs cut inputs longer than this into pieces at pauses (two minutes: full attention over much longer inputs costs more than it gives).
PIECE_S = 120.0


def detect(path: Path) -> Optional[str]:
    """"hf" for a transformers folder whose config.json says model_type parakeet_* (`hf.py`; one it does not
    read gets an error naming it); "gguf" for a GGUF file (one whose general.architecture is not "parakeet"
    gets an error naming its architecture); "nemo" for a directory with model_config.yaml or a .nemo file in
    it, and for any other file but a .pt file (a file that is not a .nemo archive gets an error that says
    what it is; .pt files are Whisper's OpenAI checkpoints, asked after this family); else None."""
    if path.is_file():
        from ..gguf import is_gguf

        if is_gguf(path):
            return "gguf"
        return None if path.suffix == ".pt" else "nemo"
    if path.is_dir() and ((path / "model_config.yaml").exists() or any(path.glob("*.nemo"))):
        return "nemo"
    if path.is_dir():
        from .hf import model_type_of

        if model_type_of(path) is not None:
            return "hf"
    return None


def load(path: Path, name: str, device, dtype, kind: str):
    """The recognizer of a NeMo checkpoint, a Parakeet GGUF file or a transformers folder (see
    `ParakeetASR.load`, `gguf.load`, `hf.load`)."""
    if kind == "hf":
        from .hf import load as load_hf

        return load_hf(path, name, device, dtype)
    if kind == "gguf":
        from .gguf import load as load_gguf

        return load_gguf(path, name, device, dtype)
    from .recognizer import ParakeetASR

    return ParakeetASR.load(path, name, device, dtype)


# dtype="auto" on a CPU (loading.Family.fastest_cpu_dtype, by transcribe.cpu.family): the fastest precision
# for the TDT 0.6B on each kind of CPU (the figures: benchmarks/README.md, "Precision per CPU").
FASTEST_CPU_DTYPE = {"amx": "bfloat16", "avx512_bf16": "int8", "avx512": "int8", "avx2": "int8"}



def export_gguf(path: Path, out: Path, schema: Optional[str], qtype: Optional[str], meta: Optional[dict],
                name: str) -> tuple[str, str]:
    """`transcribe convert` for a NeMo checkpoint (`gguf_export.export`; parakeet.cpp and f32 by
    default): writes `out`, returns the schema and type used. `name` is the MODEL argument as given
    (parakeet.cpp stores it)."""
    from ..errors import ModelError
    from .gguf_export import export, variant_of

    schema, qtype = schema or "parakeet.cpp", qtype or "f32"
    if qtype == "bf16":
        raise ModelError("--type bf16 is not one of the Parakeet converters' types (f32, f16, q8_0, q4_0)")
    if detect(path) == "hf":  # a transformers folder: the NeMo checkpoint it stands for (hf.checkpoint)
        from .hf import checkpoint

        export(checkpoint(path), out, schema=schema, qtype=qtype, meta=meta, name=name, variant=variant_of(out))
        return schema, qtype
    if path.is_dir() and not (path / "model_config.yaml").exists():
        found = sorted(path.glob("*.nemo"))  # a directory with exactly one .nemo stands for that file
        if len(found) != 1:
            raise ModelError(f"{path}: {len(found)} .nemo files in the directory; name one")
        path = found[0]
    export(path, out, schema=schema, qtype=qtype, meta=meta, name=name, variant=variant_of(out))
    return schema, qtype

