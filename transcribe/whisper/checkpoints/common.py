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
import re
from pathlib import Path
from typing import Optional

import torch

from ...errors import RAW_PICKLE, ModelError, load_failure, raw_pickle, weights_only_refusal
from ...hub import default_model_path, hub_file

TOKENIZER_JSON = "tokenizer.json"
N_VOCAB_ENGLISH = 51864
# multilingual vocabularies -> the Hugging Face repo whose tokenizer.json has that vocabulary
REFERENCE_TOKENIZER_REPOS = {51865: "openai/whisper-tiny", 51866: "openai/whisper-large-v3"}

# The alignment heads of each released openai-whisper checkpoint, as (decoder layer, head) pairs:
# the published per-model choice (openai-whisper keeps it in its package, not in the .pt files).
OPENAI_ALIGNMENT_HEADS = {
    "tiny.en": ((1, 0), (2, 0), (2, 5), (3, 0), (3, 1), (3, 2), (3, 3), (3, 4)),
    "tiny": ((2, 2), (3, 0), (3, 2), (3, 3), (3, 4), (3, 5)),
    "base.en": ((3, 3), (4, 7), (5, 1), (5, 5), (5, 7)),
    "base": ((3, 1), (4, 2), (4, 3), (4, 7), (5, 1), (5, 2), (5, 4), (5, 6)),
    "small.en": ((6, 6), (7, 0), (7, 3), (7, 8), (8, 2), (8, 5), (8, 7), (9, 0), (9, 4), (9, 8),
        (9, 10), (10, 0), (10, 1), (10, 2), (10, 3), (10, 6), (10, 11), (11, 2), (11, 4)),
    "small": ((5, 3), (5, 9), (8, 0), (8, 4), (8, 7), (8, 8), (9, 0), (9, 7), (9, 9), (10, 5)),
    "medium.en": ((11, 4), (14, 1), (14, 12), (14, 14), (15, 4), (16, 0), (16, 4), (16, 9), (17, 12),
        (17, 14), (18, 7), (18, 10), (18, 15), (20, 0), (20, 3), (20, 9), (20, 14), (21, 12)),
    "medium": ((13, 15), (15, 4), (15, 15), (16, 1), (20, 0), (23, 4)),
    "large-v1": ((9, 19), (11, 2), (11, 4), (11, 17), (22, 7), (22, 11), (22, 17), (23, 2), (23, 15)),
    "large-v2": ((10, 12), (13, 17), (16, 11), (16, 12), (16, 13), (17, 15), (17, 16), (18, 4),
        (18, 11), (18, 19), (19, 11), (21, 2), (21, 3), (22, 3), (22, 9), (22, 12), (23, 5), (23, 7),
        (23, 13), (25, 5), (26, 1), (26, 12), (27, 15)),
    "large-v3": ((7, 0), (10, 17), (12, 18), (13, 12), (16, 1), (17, 14), (19, 11), (21, 4), (24, 1),
        (25, 6)),
    "large": ((7, 0), (10, 17), (12, 18), (13, 12), (16, 1), (17, 14), (19, 11), (21, 4), (24, 1),
        (25, 6)),
    "large-v3-turbo": ((2, 4), (2, 11), (3, 3), (3, 6), (3, 11), (3, 14)),
    "turbo": ((2, 4), (2, 11), (3, 3), (3, 6), (3, 11), (3, 14)),
}


def torch_load(path: Path) -> object:
    """`torch.load(weights_only=True)` of a checkpoint, memory-mapped where its format allows; a
    ModelError naming the file when it cannot be read, says what it holds when that is Python
    objects other than tensors (refused, not run), and calls it truncated or corrupt otherwise."""
    err = ""
    for mmap in (True, False):
        try:
            return torch.load(path, weights_only=True, map_location="cpu", mmap=mmap)
        except OSError as e:
            raise ModelError(f"{path}: cannot read the checkpoint ({e.strerror or e})") from None
        except Exception as e:  # torch raises RuntimeError, UnpicklingError, EOFError, ... on bad files
            if raw_pickle(_head(path)):  # neither of torch's formats: said as such, not as corrupt
                raise ModelError(f"{path}: {RAW_PICKLE}") from None
            what = weights_only_refusal(e)
            if what is not None:
                raise ModelError(f"{path}: holds Python objects other than tensors{' (' + what + ')' if what else ''}, "
                                 "which are not loaded (weights_only); not a plain checkpoint") from None
            err = load_failure(e)
            # mmap needs the zip format; a legacy (torch < 1.6) file is read whole on the second try
    raise ModelError(f"{path}: not a readable PyTorch checkpoint; truncated or corrupt? ({err})")


def _head(path: Path) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(16)
    except OSError:
        return b""


# A bias on the attention keys adds q.b to every score of a query, the same for all keys: the
# softmax (over all keys, or over any subset, as word alignment takes) does not change, so the
# readers drop it (openai-whisper's layout has no key bias) and the model computes the same.
_KEY_BIAS = re.compile(r"\.(attn|cross_attn)\.key\.bias$")


def drop_key_biases(sd: dict) -> dict:
    """The state dict without key biases (any value: see `_KEY_BIAS`)."""
    return {k: v for k, v in sd.items() if not _KEY_BIAS.search(k)}


def check_tied(proj: Optional[torch.Tensor], emb: torch.Tensor, name: str, where: str, tol: float = 0.0) -> None:
    """The output projection must equal the token embedding: openai-whisper's model computes the
    logits with the embedding, so a different (untied) projection would not be the model stored.
    tol: the absolute difference allowed per row as a fraction of the row's largest value (one
    quantization step for int8 weights)."""
    if proj is None:
        return
    if list(proj.shape) != list(emb.shape):
        raise ModelError(f"{where}: the output projection {name} has shape {list(proj.shape)}, the token "
                         f"embedding {list(emb.shape)}; an untied output projection is not implemented")
    if proj is emb:
        return
    for s in range(0, emb.shape[0], 4096):  # in blocks of rows: no float copy of the whole matrices
        p, e = proj[s : s + 4096].float(), emb[s : s + 4096].float()
        bound = tol * torch.maximum(p.abs().amax(-1, keepdim=True), e.abs().amax(-1, keepdim=True))
        if not bool(((p - e).abs() <= bound).all()):
            diff = float((p - e).abs().max())
            raise ModelError(f"{where}: the output projection {name} differs from the token embedding (by up "
                             f"to {diff:.3g}); an untied output projection is not implemented (Whisper ties them)")


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
    from ..tokenizer import WhisperTokenizer

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
    try:
        return read_text_json(Path(hub_file(repo, TOKENIZER_JSON)))
    except ModelError as e:
        raise ModelError(
            f"{where}: no tokenizer.json next to it, and {e} (the tokenizer of this vocabulary); "
            f"put a tokenizer.json beside the checkpoint") from None


# The largest value each dimension may have: far above every published Whisper (large-v3: 128 mels,
# 1500 audio / 448 text positions, width 1280, 20 heads, 32 layers, 51866 tokens), so a real model
# never meets them, and a hostile checkpoint's `n_text_layer = 2**30` is refused before a module (or
# a set of its layer numbers) is made.
DIM_MAXIMA = {"n_mels": 1024, "n_audio_ctx": 65536, "n_audio_state": 16384, "n_audio_head": 256,
              "n_audio_layer": 256, "n_vocab": 1 << 20, "n_text_ctx": 65536, "n_text_state": 16384,
              "n_text_head": 256, "n_text_layer": 256}


def check_dims(dims: dict, where: str) -> None:
    """A ModelError naming the first dimension that is not an integer from 1 to its DIM_MAXIMA bound."""
    for key, top in DIM_MAXIMA.items():
        value = dims.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
            raise ModelError(f"{where}: dims {key} = {value!r:.80} is out of the range this code accepts "
                             f"(1 to {top}, far above any published Whisper)")


def state_dict_fits(sd: dict, dims: dict, where: str) -> None:
    """Check the dims against their bounds (`check_dims`), then the shapes that fix them against the
    weights, so a mismatch names the tensor."""
    check_dims(dims, where)
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
        if len(have) != n or have != set(range(n)):
            raise ModelError(f"{where}: the weights hold {side} blocks {sorted(have)[:8]}, but the dims ask for {n}")
    for key, heads in (("n_audio", dims["n_audio_head"]), ("n_text", dims["n_text_head"])):
        if heads <= 0 or dims[f"{key}_state"] % heads:
            raise ModelError(f"{where}: {heads} heads do not divide the width {dims[f'{key}_state']}")


def tokenizer_beside(path: Path) -> Optional[Path]:
    p = path / TOKENIZER_JSON if path.is_dir() else path.parent / TOKENIZER_JSON
    return p if p.is_file() else None
