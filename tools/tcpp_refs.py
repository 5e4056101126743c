"""What the tools/make_<family>_gguf_refs.py scripts share: transcribe.cpp's converter scripts loaded or run from a
checkout (or `git archive HEAD scripts`) of handy-computer/transcribe.cpp, its quantizer run, the transcribe-cpp
Python package run on the shared clips, and the `<gguf stem>.ref.json` files written from what it returns.

A family's script keeps its own part: the converter's arguments (and any copy of the tiny model the converter needs),
the clips and options it runs, and what each run records. Every step takes `--out DIR` (default: the committed
folder tests/models/gguf/<family>/) so that a re-run can go to a scratch folder and be compared with the committed
files; the `gguf` field of a .ref.json names the file as the committed folder would hold it, wherever it was run.

Imported by scripts that run in different Pythons (the converter's, the transcribe-cpp one): the module imports
nothing beyond the standard library at the top.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO / ".." / "shared"
GGUF = REPO / "tests" / "models" / "gguf"
RUN_ERRORS = ("TranscribeError", "TypeError", "ValueError")


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def repo_name(path: Path, home: Path) -> str:
    """`path` as the committed folder `home` would hold it (repo-relative, posix)."""
    return (home.relative_to(REPO) / Path(path).name).as_posix()


def shown(path: Path) -> str:
    """A path for the log: repo-relative where it is inside the repo."""
    path = Path(path).resolve()
    return path.relative_to(REPO).as_posix() if path.is_relative_to(REPO) else str(path)


def report(path: Path) -> None:
    """The line a convert/quantize step prints for a file it wrote: name, size, sha256."""
    print(shown(path), Path(path).stat().st_size, sha256(path), flush=True)


# --- transcribe.cpp's scripts -------------------------------------------------------------------------------------


def load_converter(upstream: Path, script: str, name: str, *, scripts_on_path: bool = False, threads: int = 1):
    """Import UPSTREAM/scripts/`script` as module `name` (to call its `main(argv)` or functions in this Python);
    torch is set to `threads` threads first. `scripts_on_path` puts UPSTREAM/scripts on sys.path for converters
    that import their `lib` package without doing it themselves."""
    import torch

    torch.set_num_threads(threads)
    scripts = Path(upstream).resolve() / "scripts"
    if scripts_on_path:
        sys.path.insert(0, str(scripts))
    spec = importlib.util.spec_from_file_location(name, scripts / script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def convert_main(mod, script: str, src: Path, out: Path, variant: str, shown_src: str | None = None) -> int:
    """The converter's `main([script, SRC, OUT, "--variant", VARIANT])` (0 for None), the command printed first
    (with `shown_src` in place of SRC when given: a scratch copy's path says nothing)."""
    argv = [script, str(src), str(out), "--variant", variant]
    print("run:", " ".join(argv[:1] + [shown_src or argv[1]] + argv[2:]), flush=True)
    return mod.main(argv) or 0


def run_converter(upstream: Path, script: str, args: list[str], *, env: dict | None = None, quiet: bool = True):
    """Run UPSTREAM/scripts/`script` with this Python as a child process (check=True)."""
    cmd = [sys.executable, str(Path(upstream) / "scripts" / script), *map(str, args)]
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL if quiet else None)


def quantize(quantizer: Path, jobs: list[tuple[Path, Path, str]]) -> int:
    """transcribe.cpp's `transcribe-quantize SRC DST --quant Q` for each (src, dst, q)."""
    for src, dst, q in jobs:
        print(" ".join([Path(quantizer).name, src.name, dst.name, "--quant", q]), flush=True)
        subprocess.run([str(quantizer), str(src), str(dst), "--quant", q], check=True, stdout=subprocess.DEVNULL)
        report(dst)
    return 0


# --- the transcribe-cpp runtime -------------------------------------------------------------------------------------


def runtime_line(T) -> str:
    """The `runtime` field: the package's and the native engine's versions."""
    return (f"transcribe-cpp {T.__version__} (Python package; native {T.native_version()} "
            f"{T.native_commit()}, provider {T.native_provider()})")


def clip(rel: str, samples: int | None = None):
    """(pcm float32 16 kHz mono, contiguous; the clip's sha256) of shared/`rel`, cut to `samples` if given."""
    import numpy as np
    import soundfile

    pcm, sr = soundfile.read(str(SHARED / rel), dtype="float32")
    assert sr == 16000 and pcm.ndim == 1, (rel, sr, pcm.shape)
    pcm = pcm[:samples] if samples else pcm
    return np.ascontiguousarray(pcm), sha256(SHARED / rel)


def result_of(r, *, language: bool = False, n_samples: int | None = None, tokens: bool = True) -> dict:
    """A run's result: text, raw_text, [language], [n_samples], token_ids, [tokens (their texts)]."""
    out = {"text": r.text, "raw_text": r.raw_text}
    if language:
        out["language"] = getattr(r, "language", None)
    if n_samples is not None:
        out["n_samples"] = int(n_samples)
    out["token_ids"] = [int(t.id) for t in r.tokens]
    if tokens:
        out["tokens"] = [t.text for t in r.tokens]
    return out


def attempt(T, run, errors=RUN_ERRORS) -> tuple[dict, int]:
    """(run(), 0), or ({"error": "<Type>: <message>"}, 1) when it raises one of `errors` (names: TranscribeError is
    the package's, the others builtins)."""
    import builtins

    caught = tuple(getattr(T if n == "TranscribeError" else builtins, n) for n in errors)
    try:
        return run(), 0
    except caught as e:
        return {"error": f"{type(e).__name__}: {e}"}, 1


def said(name: str, what: str, result: dict) -> None:
    print(f"{name} {what}: {result.get('text', result.get('error'))!r}", flush=True)


def session_runs(path: Path, label: str, body, *, catch_load: bool = True) -> dict:
    """Open `path` in transcribe-cpp (cpu), one session of 1 thread, and `body(T, session) -> runs`:
    {"model": {arch, variant}, "runs": runs}; a file the runtime refuses to load gives {"load_error", "runs": []}
    when `catch_load` (its message names the file by `label`), else the error is raised."""
    import transcribe_cpp as T

    try:
        model = T.Model(str(path), backend="cpu")
    except T.TranscribeError as e:
        if not catch_load:
            raise
        msg = str(e).replace(str(path), label)
        return {"load_error": f"{type(e).__name__}: {msg}", "runs": []}
    with model:
        info = {"arch": model.arch, "variant": model.variant}
        with model.session(n_threads=1) as session:
            runs = body(T, session)
    return {"model": info, "runs": runs}


def streamed(session, pcm, piece: int = 8000):
    """transcribe.cpp's streaming path: a `stream()` fed `piece`-sample pieces, finalized; its text()."""
    import numpy as np

    with session.stream() as stream:
        for i in range(0, len(pcm), piece):
            stream.feed(np.ascontiguousarray(pcm[i:i + piece]))
        stream.finalize()
        return stream.text()


def write_json(path: Path, doc: dict, *, ensure_ascii: bool = False, default=None) -> None:
    Path(path).write_text(json.dumps(doc, indent=1, ensure_ascii=ensure_ascii, default=default) + "\n",
                          encoding="utf-8")


def write_refs(files, home: Path, how: str, run_file, *, ensure_ascii: bool = False) -> int:
    """For each GGUF file: `<stem>.ref.json` next to it with runtime, how, gguf (its name in `home`), gguf_sha256,
    gguf_bytes, then what `run_file(path, label)` returns."""
    import transcribe_cpp as T

    for path in files:
        label = repo_name(path, home)
        doc = {"runtime": runtime_line(T), "how": how, "gguf": label, "gguf_sha256": sha256(path),
               "gguf_bytes": path.stat().st_size}
        doc.update(run_file(path, label))
        if "load_error" in doc:
            print(f"{path.name}: {doc['load_error']}", flush=True)
        out = path.with_suffix(".ref.json")
        write_json(out, doc, ensure_ascii=ensure_ascii)
        print("wrote", shown(out), flush=True)
    return 0


def refs_step(home: Path, how: str, run_file, *, ensure_ascii: bool = False):
    """The `refs` step of a family whose files are every *.gguf of --out: write_refs on them."""
    return lambda args: write_refs(sorted(args.out.glob("*.gguf")), home, how, run_file, ensure_ascii=ensure_ascii)


def stream_refs(files, how: str, clips: list[str], row) -> int:
    """The live-session families' `<stem>.ref.json` ({how, transcribe_cpp version, sha256, runs}): for each file
    and clip, `row(session, rel, pcm) -> dict` (the offline run and/or `streamed`) in one session of 1 thread."""
    import transcribe_cpp as T

    for path in files:
        model = T.Model(str(path), backend="cpu")
        rows = []
        with model.session(n_threads=1) as session:
            for rel in clips:
                pcm, _ = clip(rel)
                rows.append(row(session, rel, pcm))
        doc = {"how": how, "transcribe_cpp": T.__version__, "sha256": sha256(path), "runs": rows}
        out = path.with_suffix(".ref.json")
        write_json(out, doc)
        print(shown(out))
    return 0


# --- the command line -----------------------------------------------------------------------------------------------


def main(doc: str, home: Path, steps: dict, argv=None) -> int:
    """`<script> STEP [--out DIR] ...`: steps maps a step's name to (function(args) -> rc, [(flags, kwargs) of its
    own arguments]); `convert` gets `--upstream` (required) and `quantize` `--quantizer` (required) here."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="step", required=True)
    for name, (_, extra) in steps.items():
        p = sub.add_parser(name)
        if name == "convert":
            p.add_argument("--upstream", type=Path, required=True, help="transcribe.cpp checkout (scripts/ is used)")
        if name == "quantize":
            p.add_argument("--quantizer", type=Path, required=True, help="transcribe-quantize binary")
        for flags, kw in extra:
            p.add_argument(*flags, **kw)
        p.add_argument("--out", type=Path, default=home,
                       help=f"folder of the GGUF files (default {home.relative_to(REPO).as_posix()})")
    args = ap.parse_args(argv)
    return steps[args.step][0](args) or 0
