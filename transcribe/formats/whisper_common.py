"""What the Whisper checkpoint readers share: alignment heads in their several spellings, the
non-speech tokens openai-whisper suppresses, and the tokenizer of a checkpoint that has none.

Every reader returns `(config, state_dict, tokenizer_json)` as `read_ctranslate2` does: `config`
holds `dims` (openai-whisper's ModelDimensions as a dict), `alignment_heads` ([layer, head] pairs),
`suppress_ids`, `suppress_ids_begin` and `lang_ids` (CTranslate2's config.json keys).
"""
from __future__ import annotations

import base64
import gzip
import json
import os
from pathlib import Path
from typing import Optional

import torch

from ..errors import ModelError

TOKENIZER_JSON = "tokenizer.json"
N_VOCAB_ENGLISH = 51864
# multilingual vocabularies -> the Hugging Face repo whose tokenizer.json has that vocabulary
REFERENCE_TOKENIZER_REPOS = {51865: "openai/whisper-tiny", 51866: "openai/whisper-large-v3"}

# openai-whisper's alignment heads per released model (whisper/__init__.py, _ALIGNMENT_HEADS):
# base85 text of a gzipped boolean [n_text_layer, n_text_head] array. Data, kept as published.
OPENAI_ALIGNMENT_HEADS = {
    "tiny.en": b"ABzY8J1N>@0{>%R00Bk>$p{7v037`oCl~+#00",
    "tiny": b"ABzY8bu8Lr0{>%RKn9Fp%m@SkK7Kt=7ytkO",
    "base.en": b"ABzY8;40c<0{>%RzzG;p*o+Vo09|#PsxSZm00",
    "base": b"ABzY8KQ!870{>%RzyTQH3`Q^yNP!>##QT-<FaQ7m",
    "small.en": b"ABzY8>?_)10{>%RpeA61k&I|OI3I$65C{;;pbCHh0B{qLQ;+}v00",
    "small": b"ABzY8DmU6=0{>%Rpa?J`kvJ6qF(V^F86#Xh7JUGMK}P<N0000",
    "medium.en": b"ABzY8usPae0{>%R7<zz_OvQ{)4kMa0BMw6u5rT}kRKX;$NfYBv00*Hl@qhsU00",
    "medium": b"ABzY8B0Jh+0{>%R7}kK1fFL7w6%<-Pf*t^=N)Qr&0RR9",
    "large-v1": b"ABzY8r9j$a0{>%R7#4sLmoOs{s)o3~84-RPdcFk!JR<kSfC2yj",
    "large-v2": b"ABzY8zd+h!0{>%R7=D0pU<_bnWW*tkYAhobTNnu$jnkEkXqp)j;w1Tzk)UH3X%SZd&fFZ2fC2yj",
    "large-v3": b"ABzY8gWO1E0{>%R7(9S+Kn!D~%ngiGaR?*L!iJG9p-nab0JQ=-{D1-g00",
    "large": b"ABzY8gWO1E0{>%R7(9S+Kn!D~%ngiGaR?*L!iJG9p-nab0JQ=-{D1-g00",
    "large-v3-turbo": b"ABzY8j^C+e0{>%RARaKHP%t(lGR*)0g!tONPyhe`",
    "turbo": b"ABzY8j^C+e0{>%RARaKHP%t(lGR*)0g!tONPyhe`",
}


def default_alignment_heads(n_layer: int, n_head: int) -> list[list[int]]:
    """openai-whisper's default without a table entry: every head of the last half of the layers."""
    return [[layer, head] for layer in range(n_layer // 2, n_layer) for head in range(n_head)]


def alignment_heads_from(value, n_layer: int, n_head: int, where: str) -> list[list[int]]:
    """Alignment heads as sorted [layer, head] pairs, from any of the spellings checkpoints use:
    a boolean [n_layer, n_head] mask (dense or sparse tensor, or nested lists), openai-whisper's
    gzipped base85 bytes/str, or a list of [layer, head] pairs (Hugging Face, CTranslate2)."""
    try:
        if isinstance(value, (bytes, str)):
            raw = gzip.decompress(base64.b85decode(value))
            mask = torch.tensor(list(raw), dtype=torch.bool)
            if mask.numel() != n_layer * n_head:
                raise ValueError(f"{mask.numel()} flags for {n_layer} x {n_head} heads")
            mask = mask.reshape(n_layer, n_head)
        elif isinstance(value, torch.Tensor):
            mask = value.to_dense() if value.is_sparse else value
            if mask.dtype != torch.bool and mask.dim() == 2 and mask.shape[1] == 2 and list(mask.shape) != [n_layer, n_head]:
                return _check_pairs(mask.tolist(), n_layer, n_head)
            if list(mask.shape) != [n_layer, n_head]:
                raise ValueError(f"a mask of shape {list(mask.shape)}, expected [{n_layer}, {n_head}]")
            mask = mask.bool()
        elif isinstance(value, (list, tuple)):
            flat = [x for p in value for x in (p if isinstance(p, (list, tuple)) else [p])]
            if value and all(isinstance(p, (list, tuple)) and len(p) == 2 for p in value) and not all(
                isinstance(x, bool) for x in flat
            ):
                return _check_pairs(value, n_layer, n_head)
            mask = torch.tensor(value, dtype=torch.bool)
            if list(mask.shape) != [n_layer, n_head]:
                raise ValueError(f"a mask of shape {list(mask.shape)}, expected [{n_layer}, {n_head}]")
        else:
            raise ValueError(f"of type {type(value).__name__}")
    except (ValueError, TypeError, OSError, EOFError, RuntimeError) as e:
        raise ModelError(f"{where}: unreadable alignment_heads ({str(e).splitlines()[0][:200]})") from None
    return [[int(l), int(h)] for l, h in mask.nonzero().tolist()]


def _check_pairs(pairs, n_layer: int, n_head: int) -> list[list[int]]:
    out = []
    for p in pairs:
        layer, head = int(p[0]), int(p[1])
        if not (0 <= layer < n_layer and 0 <= head < n_head):
            raise ValueError(f"head {[layer, head]} outside {n_layer} layers x {n_head} heads")
        out.append([layer, head])
    return sorted(out)


# openai-whisper's non-speech symbols (tokenizer.non_speech_tokens): a symbol is suppressed when it
# is one token alone or after a space; the musical signs always by their first token.
_NON_SPEECH_SYMBOLS = list('"#()*+/:;<=>@[\\]^_`{|}~「」『』') + (
    "<< >> <<< >>> -- --- -( -[ (' (\" (( )) ((( ))) [[ ]] {{ }} ♪♪ ♪♪♪".split()
)
_MUSIC = "♩♪♫♬♭♮♯"


def non_speech_ids(tokenizer) -> list[int]:
    """Token ids of openai-whisper's `suppress_tokens="-1"` set (without the control tokens),
    what CTranslate2 and Hugging Face store as `suppress_ids` / `suppress_tokens`."""
    ids = {tokenizer.encode(" -")[0], tokenizer.encode(" '")[0]}
    for symbol in _NON_SPEECH_SYMBOLS + list(_MUSIC):
        for ids_ in (tokenizer.encode(symbol), tokenizer.encode(" " + symbol)):
            if ids_ and (len(ids_) == 1 or symbol in _MUSIC):
                ids.add(ids_[0])
    return sorted(ids)


def complete_config(config: dict, tokenizer_json: str, where: str) -> dict:
    """Fill in what a checkpoint may lack from its tokenizer: suppress_ids, suppress_ids_begin,
    lang_ids (CTranslate2's config.json keys)."""
    from ..text.tokenizers import WhisperTokenizer

    dims = config["dims"]
    try:
        tok = WhisperTokenizer(tokenizer_json, dims["n_vocab"])
    except ValueError as e:
        raise ModelError(f"{where}: {e}") from None
    if tok.timestamp_begin > dims["n_vocab"]:
        raise ModelError(
            f"{where}: the tokenizer (timestamps from id {tok.timestamp_begin}) does not fit the model's "
            f"vocabulary of {dims['n_vocab']}")
    if not config.get("suppress_ids"):
        control = [tok.sot, tok.translate, tok.transcribe, tok.sot_prev, tok.sot_lm, tok.no_speech]
        config["suppress_ids"] = sorted(set(non_speech_ids(tok)) | {i for i in control if i is not None})
    if not config.get("suppress_ids_begin"):
        config["suppress_ids_begin"] = [tok.encode(" ")[0], tok.eot]
    if not config.get("lang_ids"):
        config["lang_ids"] = sorted(tok.languages.values())
    return config


def read_text_json(path: Path, what: str = "") -> str:
    """A JSON file's text (checked to parse), or a ModelError naming the path."""
    try:
        text = path.read_text(encoding="utf-8")
        json.loads(text)
    except OSError as e:
        raise ModelError(f"{path}: cannot read {what or path.name} ({e.strerror or e})") from None
    except (UnicodeDecodeError, ValueError) as e:
        raise ModelError(f"{path}: {what or path.name} is not valid JSON ({str(e)[:200]})") from None
    return text


def reference_tokenizer_json(n_vocab: int, where: str) -> str:
    """tokenizer.json for a checkpoint that comes without one, by its vocabulary size: English-only
    models (51864) share tiny.en's, shipped in the default model package; multilingual ones get
    openai/whisper-tiny's (51865) or openai/whisper-large-v3's (51866) from the Hugging Face cache,
    else downloaded."""
    if n_vocab == N_VOCAB_ENGLISH:
        from ..loading import default_model_path

        try:
            path = default_model_path() / TOKENIZER_JSON
        except ModelError as e:
            raise ModelError(f"{where}: no tokenizer.json next to it, and {e}") from None
        return read_text_json(path)
    repo = REFERENCE_TOKENIZER_REPOS.get(n_vocab)
    if repo is None:
        raise ModelError(
            f"{where}: no tokenizer.json next to it, and no known Whisper tokenizer has a vocabulary of {n_vocab}; "
            f"put the model's tokenizer.json beside it")
    return read_text_json(Path(_hub_file(repo, TOKENIZER_JSON, where)))


def _hub_file(repo: str, filename: str, where: str) -> str:
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:  # pragma: no cover - a declared dependency
        raise ModelError(f"{where}: needs {repo}'s {filename}, but huggingface_hub is not installed") from None
    errors = []
    offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False")
    for local_only in (True, False):
        if not local_only and offline:
            break
        try:
            return hf_hub_download(repo, filename, local_files_only=local_only)
        except Exception as e:  # hub errors are many types; report the first line
            errors.append(str(e).splitlines()[0][:200] if str(e) else type(e).__name__)
    raise ModelError(
        f"{where}: no tokenizer.json next to it, and {repo}'s {filename} (the tokenizer of this vocabulary) is "
        f"not in the Hugging Face cache and could not be downloaded ({'offline' if offline else errors[-1]}); "
        f"put a tokenizer.json beside the checkpoint")


def state_dict_fits(sd: dict, dims: dict, where: str) -> None:
    """Check the shapes that fix the dims against the weights, so a mismatch names the tensor."""
    expect = {
        "encoder.conv1.weight": [dims["n_audio_state"], dims["n_mels"], 3],
        "encoder.conv2.weight": [dims["n_audio_state"], dims["n_audio_state"], 3],
        "decoder.token_embedding.weight": [dims["n_vocab"], dims["n_text_state"]],
        "decoder.positional_embedding": [dims["n_text_ctx"], dims["n_text_state"]],
    }
    for name, shape in expect.items():
        t = sd.get(name)
        if t is None:
            raise ModelError(f"{where}: the weights lack {name}; not a complete Whisper model")
        if list(t.shape) != shape:
            raise ModelError(f"{where}: {name} has shape {list(t.shape)}, but the dims ask for {shape}")
    for side, n in (("encoder", dims["n_audio_layer"]), ("decoder", dims["n_text_layer"])):
        have = {int(k.split(".")[2]) for k in sd if k.startswith(f"{side}.blocks.")}
        if have != set(range(n)):
            raise ModelError(f"{where}: the weights hold {side} blocks {sorted(have)[:8]}, but the dims ask for {n}")
    for key, heads in (("n_audio", dims["n_audio_head"]), ("n_text", dims["n_text_head"])):
        if heads <= 0 or dims[f"{key}_state"] % heads:
            raise ModelError(f"{where}: {heads} heads do not divide the width {dims[f'{key}_state']}")


def tokenizer_beside(path: Path) -> Optional[Path]:
    p = path / TOKENIZER_JSON if path.is_dir() else path.parent / TOKENIZER_JSON
    return p if p.is_file() else None
