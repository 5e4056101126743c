"""Reading `.nemo` archives (and unpacked NeMo directories) without importing NeMo.

A `.nemo` file is a tar archive holding `model_config.yaml`, `model_weights.ckpt` (a torch state
dict) and the tokenizer files the config names with a `nemo:` prefix. Nothing in it is executed:
the config is parsed with `yaml.safe_load` within bounds (`config_yaml.load_yaml`) and the weights
with `torch.load(weights_only=True)`.
Nothing is extracted to disk: members are read from the archive in memory, each within bounds (a
declared size inside the archive; the config and the tokenizer at most `MAX_SMALL_MEMBER` bytes); the weights of
a plain (uncompressed) archive are mapped where they lie, storage by storage (`mapped_ckpt`), nothing read until
it is used.
"""
from __future__ import annotations

import os
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import yaml

from ..config_yaml import YAMLBoundError, excerpt, load_yaml
from ..errors import RAW_PICKLE, ModelError, load_failure, raw_pickle, weights_only_refusal

CONFIG = "model_config.yaml"
WEIGHTS = "model_weights.ckpt"
# The config and the tokenizer are small files (kilobytes to a few megabytes): a larger one is not
# read, whatever its header says.
MAX_SMALL_MEMBER = 64 << 20
# The largest ratio of a gzip member's size to the compressed archive's (deflate's limit is 1032:1);
# NeMo writes plain tar archives (older versions gzip ones).
_MAX_INFLATE = 1032


@dataclass
class NemoCheckpoint:
    config: dict
    state_dict: dict
    tokenizer: Optional[bytes]  # the SentencePiece model of tokenizer.model_path (None for an aggregate)
    source: str
    files: dict = field(default_factory=dict)  # name -> bytes of every tokenizer model the config names


def check_bpe_tokenizer(config: dict, path) -> None:
    """A ModelError unless the config's tokenizer is one SentencePiece model (Parakeet's kind)."""
    tok = config.get("tokenizer")
    if isinstance(tok, dict) and tok.get("type") not in (None, "bpe"):
        raise ModelError(f"{path}: tokenizer.type = {excerpt(tok['type'])} is not implemented "
                         "(bpe: a SentencePiece model)")


def read_nemo(path: str | os.PathLike) -> NemoCheckpoint:
    """Read a `.nemo` archive or a directory with the same files."""
    path = Path(path)
    if not path.exists():
        raise ModelError(f"{path}: no such model file or directory")
    if path.is_dir():
        return _read_dir(path)
    try:
        tar = tarfile.open(path, "r:*")
    except (tarfile.TarError, OSError, EOFError):
        raise ModelError(f"{path}: not a .nemo archive (not a tar file, or a corrupt one)") from None
    with tar:
        archive_size = path.stat().st_size
        # A plain tar member's data lies inside the file; a compressed one cannot inflate beyond
        # deflate's limit. A header declaring more is corrupt (or hostile): an error as soon as it
        # is read, before the archive is read on past it.
        end = archive_size * _MAX_INFLATE if _compressed(path) else archive_size
        members = {}
        try:
            for m in tar:
                if not m.isfile():
                    continue
                if (m.size if end > archive_size else m.offset_data + m.size) > end:
                    raise ModelError(f"{path}: corrupt or truncated .nemo archive ({Path(m.name).name} declares "
                                     f"{m.size} bytes, more than the archive of {archive_size} bytes holds)")
                members[Path(m.name).name] = m
        except (tarfile.TarError, OSError, EOFError) as e:
            raise ModelError(f"{path}: corrupt or truncated .nemo archive ({e})") from None
        if CONFIG not in members:
            raise ModelError(f"{path}: not a .nemo archive ({CONFIG} is missing)")
        if WEIGHTS not in members:
            raise ModelError(f"{path}: incomplete .nemo archive ({WEIGHTS} is missing)")

        def read(name: str, what: str) -> bytes:
            _check_small(path, name, members[name].size, what)
            f = tar.extractfile(members[name])
            data = f.read(members[name].size) if f is not None else b""
            if len(data) != members[name].size:
                raise ModelError(f"{path}: truncated .nemo archive ({name} is cut short)")
            return data

        try:
            config = _parse_config(read(CONFIG, "config"), path)
            state = None
            if end == archive_size:  # a plain archive: the checkpoint's storages mapped where they lie
                state = _mapped_weights(path, members[WEIGHTS].offset_data, members[WEIGHTS].size)
            if state is None:
                state = _load_weights(tar.extractfile(members[WEIGHTS]), path, members[WEIGHTS].size)
            files = {}
            for tok_name in _tokenizer_members(config):
                if tok_name not in members:
                    raise ModelError(f"{path}: tokenizer file {tok_name} named in the config is missing")
                files[tok_name] = read(tok_name, "tokenizer")
        except (tarfile.TarError, OSError, EOFError) as e:
            raise ModelError(f"{path}: corrupt or truncated .nemo archive ({e})") from None
    main = _tokenizer_member(config)
    return NemoCheckpoint(config, state, files.get(main) if main else None, str(path), files)


def read_config(path: str | os.PathLike) -> Optional[dict]:
    """The config of a `.nemo` archive or a NeMo directory, read alone (the weights are not read), or None
    when `path` is neither or its config cannot be read: how a family tells its models from others'."""
    path = Path(path)
    try:
        if path.is_dir():
            if (path / CONFIG).is_file():
                if (path / CONFIG).stat().st_size > MAX_SMALL_MEMBER:
                    return None
                return _parse_config((path / CONFIG).read_bytes(), path)
            nemos = sorted(path.glob("*.nemo"))
            return read_config(nemos[0]) if len(nemos) == 1 else None
        with tarfile.open(path, "r:*") as tar:
            for m in tar:
                if m.isfile() and Path(m.name).name == CONFIG:
                    if m.size > MAX_SMALL_MEMBER:
                        return None
                    f = tar.extractfile(m)
                    return _parse_config(f.read(m.size), path) if f is not None else None
    except (tarfile.TarError, OSError, EOFError, ModelError):
        return None
    return None


def _read_dir(path: Path) -> NemoCheckpoint:
    cfg_path = path / CONFIG
    w_path = path / WEIGHTS
    if not cfg_path.is_file():
        nemos = sorted(path.glob("*.nemo"))
        if len(nemos) == 1:
            return read_nemo(nemos[0])
        raise ModelError(f"{path}: no {CONFIG} (and not exactly one .nemo file) in this directory")
    if not w_path.is_file():
        raise ModelError(f"{path}: {WEIGHTS} is missing")
    _check_small(path, CONFIG, cfg_path.stat().st_size, "config")
    config = _parse_config(cfg_path.read_bytes(), path)
    state = _mapped_weights(w_path, 0, w_path.stat().st_size)
    if state is None:
        with open(w_path, "rb") as f:
            state = _load_weights(f, path, w_path.stat().st_size)
    files = {}
    for tok_name in _tokenizer_members(config):
        cands = [path / tok_name] + sorted(path.glob("*" + tok_name))
        found = next((c for c in cands if c.is_file()), None)
        if found is None:
            raise ModelError(f"{path}: tokenizer file {tok_name} named in the config is missing")
        _check_small(path, found.name, found.stat().st_size, "tokenizer")
        files[tok_name] = found.read_bytes()
    main = _tokenizer_member(config)
    return NemoCheckpoint(config, state, files.get(main) if main else None, str(path), files)


def _load_config_yaml(data: bytes, path):
    """The config's YAML, loaded within `config_yaml`'s bounds (nesting, values with aliases expanded)."""
    try:
        return load_yaml(data.decode("utf-8"))
    except YAMLBoundError as e:
        raise ModelError(f"{path}: {CONFIG} {e}; not read") from None
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise ModelError(f"{path}: {CONFIG} is not valid YAML ({str(e).splitlines()[0][:200]})") from None


def _parse_config(data: bytes, path) -> dict:
    cfg = _load_config_yaml(data, path)
    if not isinstance(cfg, dict) or "encoder" not in cfg:
        raise ModelError(f"{path}: {CONFIG} has no encoder section; not a NeMo ASR model")
    return cfg


def _compressed(path: Path) -> bool:
    with open(path, "rb") as f:
        head = f.read(6)
    return head[:2] == b"\x1f\x8b" or head[:3] == b"BZh" or head == b"\xfd7zXZ\x00"


def _check_small(path, name: str, size: int, what: str) -> None:
    if size > MAX_SMALL_MEMBER:
        raise ModelError(f"{path}: the {what} file {name} is {size} bytes, more than a {what} may have "
                         f"({MAX_SMALL_MEMBER >> 20} MiB); not read")


def _head(f) -> bytes:
    """The first bytes of the archive member `f` (b"" when it cannot be read again)."""
    try:
        f.seek(0)
        return f.read(16)
    except (OSError, ValueError):
        return b""


def _mapped_weights(path: Path, start: int, size: int) -> Optional[dict]:
    """The state dict with each storage mapped from the file (`mapped_ckpt`), or None where it is not stored
    so or is not a plain state dict of tensors (then `_load_weights` reads it, and says what is wrong)."""
    from .mapped_ckpt import read_mapped

    try:
        return _tensor_state(read_mapped(path, start, size))
    except (OSError, ValueError):
        return None


def _tensor_state(sd) -> Optional[dict]:
    """A loaded checkpoint's state dict of tensors (under "state_dict" or at the top), or None when it holds
    anything else."""
    import torch

    if isinstance(sd, dict) and "state_dict" in sd and isinstance(sd["state_dict"], dict):
        sd = sd["state_dict"]
    if not isinstance(sd, dict) or not all(isinstance(v, torch.Tensor) for v in sd.values()):
        return None
    return sd


def _load_weights(f, path, size: int) -> dict:
    import torch  # (here: reading a config alone, to tell families apart, imports no torch)

    try:
        sd = torch.load(f, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises RuntimeError / UnpicklingError / EOFError with long texts
        if raw_pickle(_head(f)):  # neither of torch's formats: said as such, not as corrupt
            raise ModelError(f"{path}: {WEIGHTS} is {RAW_PICKLE}") from None
        what = weights_only_refusal(e)
        if what is not None:
            raise ModelError(f"{path}: {WEIGHTS} holds Python objects other than tensors{' (' + what + ')' if what else ''}, "
                             "which are not loaded (weights_only); not a plain checkpoint") from None
        raise ModelError(f"{path}: {WEIGHTS} is corrupt or truncated ({load_failure(e)})") from None
    state = _tensor_state(sd)
    if state is None:
        raise ModelError(f"{path}: {WEIGHTS} does not hold a state dict of tensors")
    return state


def _tokenizer_member(cfg: dict) -> Optional[str]:
    tok = cfg.get("tokenizer")
    return _member_name(tok.get("model_path")) if isinstance(tok, dict) else None


def _tokenizer_members(cfg: dict) -> list[str]:
    """The file names of the SentencePiece models the tokenizer section names: its own model_path, and
    each sub-tokenizer's of an aggregate (`langs`)."""
    tok = cfg.get("tokenizer")
    if not isinstance(tok, dict):
        return []
    names = [_member_name(tok.get("model_path"))]
    langs = tok.get("langs")
    if isinstance(langs, dict):
        names += [_member_name(sub.get("model_path")) for sub in langs.values() if isinstance(sub, dict)]
    return list(dict.fromkeys(n for n in names if n))


def _member_name(mp) -> Optional[str]:
    if not mp:
        return None
    mp = str(mp)
    if mp.startswith("nemo:"):
        mp = mp[len("nemo:"):]
    return Path(mp).name


def own_names(sd: dict) -> dict:
    """A NeMo state dict under the names of this package's modules: the front end's `preprocessor.featurizer.*`
    as `preprocessor.*`; batch norm's `num_batches_tracked` counters (training only) left out."""
    own = {}
    for k, v in sd.items():
        if k.startswith("preprocessor.featurizer."):
            own["preprocessor." + k[len("preprocessor.featurizer."):]] = v
        elif not k.endswith("num_batches_tracked"):
            own[k] = v
    return own


def adopt(model, own: dict, front_end, ignore: tuple = ("preprocessor.",)) -> None:
    """Give `model` (built on the meta device, with `.preprocessor` a NeMo mel front end and `.encoder` a
    FastConformer) the tensors `own` under its own names: KeyError naming what is missing (but the names
    starting with `ignore`: a checkpoint may leave the front end's filterbank out), unexpected or of another
    shape; the tensors are adopted as they are (no copy); what is left on the meta device is made: the front
    end's window and filterbank from `front_end` (its settings), the encoder's position table."""
    expected = {k: v for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked")}
    missing = [k for k in expected if k not in own and not k.startswith(ignore)]
    unexpected = [k for k in own if k not in expected]
    if missing or unexpected:
        raise KeyError("checkpoint does not match the config: "
                       + (f"missing {missing[:5]}{'...' if len(missing) > 5 else ''} " if missing else "")
                       + (f"unexpected {unexpected[:5]}{'...' if len(unexpected) > 5 else ''}" if unexpected else ""))
    for k, v in own.items():
        if expected[k].shape != v.shape:
            raise KeyError(f"checkpoint tensor {k} has shape {tuple(v.shape)}, config expects {tuple(expected[k].shape)}")
    model.load_state_dict(own, strict=False, assign=True)
    pre = model.preprocessor
    for name in ("window", "fb"):
        if getattr(pre, name).is_meta:
            setattr(pre, name, getattr(front_end(), name))
    model.encoder.pos_enc.reset()
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        if t.is_meta and not name.endswith("num_batches_tracked"):
            raise KeyError(f"checkpoint lacks {name}")
