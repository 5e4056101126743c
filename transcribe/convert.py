"""`transcribe convert`: a checkpoint to a GGUF file for the C++ engines (parakeet.cpp, transcribe.cpp).

    transcribe convert MODEL OUT.gguf [--schema parakeet.cpp|transcribe.cpp] [--type f32|f16|q8_0|q4_0]
                       [--meta KEY=VALUE]... [--force]

MODEL is a `.nemo` file or NeMo directory (Parakeet: both schemas; parakeet.cpp by default) or a Granite
Speech NAR checkpoint directory (transcribe.cpp's schema; `--type bf16` by default, as its converter).
The files match the upstream converters' (and quantizers') output key by key and tensor by tensor
(see transcribe/parakeet/gguf_export.py). `--meta` replaces a metadata value (typed as the key it
replaces; arrays comma-separated), e.g. transcribe.cpp's identity block: `--meta general.version=v2`.

The file is written beside OUT under a temporary name and renamed at the end: a failed or interrupted
conversion leaves nothing. An existing OUT is refused unless --force.

Exit status: 0 written; 2 a usage error, a model that cannot be read or that the schema cannot express,
an OUT in the way or that is the model itself (also through a link), or a file that cannot be read or
written (a full disk) (one line on stderr: `transcribe: error: ...`); 1 an internal error; 130 interrupted.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Optional

from .errors import TranscribeError

PROG = "transcribe convert"
SCHEMAS = ("parakeet.cpp", "transcribe.cpp")
TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0")


class _Usage(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, our prefix, exit 2 (not argparse's usage + message)
        raise _Usage(message)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=PROG,
        description="Write a model as a GGUF file for parakeet.cpp or transcribe.cpp, as their own converters "
                    "and quantizers write it.",
        epilog="Exit status: 0 written, 2 usage error / unreadable or inexpressible model / OUT exists, "
               "1 internal error, 130 interrupted. TRANSCRIBE_DEBUG=1 shows tracebacks.")
    p.add_argument("model", metavar="MODEL", help=".nemo file, NeMo directory, or a transformers directory of a family with GGUF export (Granite Speech, Qwen3-ASR)")
    p.add_argument("out", metavar="OUT.gguf", help="the GGUF file to write")
    p.add_argument("--schema", choices=SCHEMAS,
                   help="whose file layout: parakeet.cpp (NeMo names, parakeet.* keys; the default for Parakeet) or "
                        "transcribe.cpp (renamed tensors, stt.* keys; the only one for Granite)")
    p.add_argument("--type", dest="qtype", choices=TYPES, type=str.lower,
                   help="weight type: f32 (default for Parakeet), f16, q8_0, q4_0 (the tensors the schema's "
                        "quantizer touches; the rest stays F32/F16), bf16 (Granite's default)")
    p.add_argument("--meta", action="append", default=[], metavar="KEY=VALUE",
                   help="replace a metadata value (repeatable), e.g. general.name='My model'")
    p.add_argument("--force", action="store_true", help="replace OUT if it exists")
    return p


def _say(msg: str) -> None:
    print(f"transcribe: {msg}", file=sys.stderr)


def _one_line(text: str) -> str:
    lines = [s.strip() for s in str(text).splitlines() if s.strip()]
    return lines[0] if lines else ""


def _meta(items: list[str]) -> dict:
    out = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise _Usage(f"--meta {item!r}: expected KEY=VALUE")
        out[key.strip()] = value
    return out


def _source(path: Path) -> None:
    from .errors import ModelError

    if not path.exists():
        raise ModelError(f"{path}: no such model file or directory")
    if path.is_file():
        from .gguf import is_gguf

        if is_gguf(path):
            raise ModelError(f"{path}: already a GGUF file (convert takes a .nemo file, a NeMo directory or a "
                             "transformers directory: Granite Speech, Qwen3-ASR)")


def _same_file(a: Path, b: Path) -> bool:
    """Whether `a` and `b` name one file (through symbolic or hard links: same device and inode)."""
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them is not there (or cannot be read): not the same file
        return False


def _not_the_source(src: Path, dest: Path) -> None:
    """Refuses an OUT that is the model itself (also through a link): --force would replace the model
    with its own conversion."""
    from .errors import ModelError

    if _same_file(src, dest):
        raise ModelError(f"{dest}: is the model being converted ({src}); write the GGUF file elsewhere")


def convert(model: str, out: str, schema: Optional[str] = None, qtype: Optional[str] = None,
            meta: Optional[dict] = None, force: bool = False, progress: bool = False) -> Path:
    """The work of `transcribe convert` (raises TranscribeError for the user's errors)."""
    from .errors import ModelError

    src = Path(model)
    dest = Path(out)
    if dest.is_dir():
        raise ModelError(f"{dest}: is a directory (OUT is the GGUF file to write)")
    if (dest.exists() or dest.is_symlink()) and not force:
        raise ModelError(f"{dest}: already exists (--force replaces it)")
    if not dest.parent.is_dir():
        raise ModelError(f"{dest.parent}: no such directory")
    _source(src)
    _not_the_source(src, dest)
    if progress:
        print(f"{PROG}: {src} -> {dest}", file=sys.stderr, flush=True)
    t0 = time.monotonic()
    # Written under OUT's own name in a hidden folder beside it (the converters derive names from
    # the file name), then renamed into place: nothing is left at OUT if anything fails.
    tmpdir = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent))
    try:
        tmp = tmpdir / dest.name
        from .loading import export_gguf

        schema, qtype = export_gguf(src, tmp, schema, qtype, meta or None)  # general.name: the model's name
        if not tmp.is_file():
            raise RuntimeError(f"the exporter wrote no file at {tmp}")
        if (dest.exists() or dest.is_symlink()) and not force:
            raise ModelError(f"{dest}: appeared while converting (--force replaces it)")
        os.replace(tmp, dest)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
    if progress:
        size = dest.stat().st_size
        print(f"{PROG}: wrote {dest} ({schema}, {qtype}, {size / 1e6:.1f} MB) in {time.monotonic() - t0:.1f} s",
              file=sys.stderr, flush=True)
    return dest


def main(argv: Optional[list[str]] = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    parser = _parser()
    try:
        args = parser.parse_args(argv)
        meta = _meta(args.meta)
    except SystemExit as e:  # --help
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    except _Usage as e:
        _say(f"error: {_one_line(str(e))}")
        return 2
    try:
        convert(args.model, args.out, args.schema, args.qtype, meta, args.force,
                progress=_isatty(sys.stderr))
        return 0
    except TranscribeError as e:
        _say(f"error: {_one_line(str(e))}")
        return 2
    except KeyboardInterrupt:
        _say("interrupted")
        return 130
    except OSError as e:  # a full disk, a file that cannot be read or written: the temporary is gone
        from .writers import no_room

        where = args.out if no_room(e) else (e.filename or args.out)  # not the temporary's name
        _say(f"error: {where}: {'cannot write: ' if no_room(e) else ''}{e.strerror or _one_line(str(e))}")
        return 2
    except Exception as e:  # noqa: BLE001 - the one place that turns anything left into one line
        _say(f"internal error: {type(e).__name__}: {_one_line(str(e))}")
        if os.environ.get("TRANSCRIBE_DEBUG") == "1":
            traceback.print_exc()
        return 1


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
