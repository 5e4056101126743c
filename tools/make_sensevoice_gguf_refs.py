#!/usr/bin/env python
"""SenseVoice GGUF file written by transcribe.cpp's own converter from the tiny model, and what transcribe.cpp's
runtime transcribes from it (tests/models/gguf/sensevoice/). Two steps, each in its own Python:

    # 1. F32 file: upstream scripts/convert-sensevoice.py, unmodified, on tests/models/sensevoice/tiny (already in
    #    the published layout). UPSTREAM: a checkout (or `git archive`) of handy-computer/transcribe.cpp; the
    #    Python needs torch, numpy, pyyaml, sentencepiece and gguf
    OMP_NUM_THREADS=1 <python> tools/make_sensevoice_gguf_refs.py convert --upstream UPSTREAM
    # 2. references: the transcribe-cpp Python package (0.4.1 + transcribe-cpp-native) in its own venv
    OMP_NUM_THREADS=1 .venv-peers/bin/python tools/make_sensevoice_gguf_refs.py refs

Step 2 writes `<gguf stem>.ref.json` next to the file: for jfk.wav and two dev clips,
`transcribe_cpp.Model(gguf, backend="cpu").session(n_threads=1).run(pcm, language=..., itn=..., timestamps="none")`
with language None and "en" (the runtime refuses "auto": None is its automatic language) and itn "on" / "off" ->
text, raw_text, language and the tokens (id, text), tags included."""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import hashlib
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO / ".." / "shared"
TINY = REPO / "tests" / "models" / "sensevoice" / "tiny"
OUT = REPO / "tests" / "models" / "gguf" / "sensevoice"
STEM = "sensevoice-tiny"
VARIANT = "sensevoice-small"
CLIPS = ["audio/jfk.wav", "audio/dev/ls_61-70968-0002.wav", "audio/dev/ls_1089-134691-0001.wav"]
ASKS = [dict(language=None, itn="on"), dict(language="en", itn="on"), dict(language="en", itn="off"),
        dict(language=None, itn="off")]


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def convert(upstream: Path) -> int:
    import importlib.util

    import torch

    torch.set_num_threads(1)
    script = upstream.resolve() / "scripts" / "convert-sensevoice.py"
    spec = importlib.util.spec_from_file_location("convert_sensevoice", script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    OUT.mkdir(parents=True, exist_ok=True)
    out = OUT / f"{STEM}-F32.gguf"
    argv = ["convert-sensevoice.py", str(TINY), str(out), "--variant", VARIANT]
    print("run:", " ".join(argv), flush=True)
    rc = mod.main(argv)
    print(out.relative_to(REPO), out.stat().st_size, sha256(out))
    return rc or 0


def run_file(path: Path) -> dict:
    import numpy as np
    import soundfile
    import transcribe_cpp as T

    runs = []
    model = T.Model(str(path), backend="cpu")
    with model:
        info = {"arch": model.arch, "variant": model.variant}
        with model.session(n_threads=1) as session:
            for rel in CLIPS:
                pcm, sr = soundfile.read(str(SHARED / rel), dtype="float32")
                assert sr == 16000 and pcm.ndim == 1, (rel, sr, pcm.shape)
                for kw in ASKS:
                    r = session.run(np.ascontiguousarray(pcm), timestamps="none", **kw)
                    result = {"text": r.text, "raw_text": r.raw_text, "language": getattr(r, "language", None),
                              "token_ids": [int(t.id) for t in r.tokens], "tokens": [t.text for t in r.tokens]}
                    runs.append({"audio": rel, "audio_sha256": sha256(SHARED / rel), "asked": kw, "result": result})
                    print(f"{path.name} {rel} {kw}: {r.raw_text!r}", flush=True)
    return {"model": info, "runs": runs}


def refs() -> int:
    import transcribe_cpp as T

    for path in sorted(OUT.glob("*.gguf")):
        doc = {
            "runtime": f"transcribe-cpp {T.__version__} (Python package; native {T.native_version()} "
                       f"{T.native_commit()}, provider {T.native_provider()})",
            "how": "tools/make_sensevoice_gguf_refs.py refs: transcribe_cpp.Model(gguf, backend='cpu') -> "
                   "session(n_threads=1) -> run(pcm float32 16 kHz mono, language=None or 'en', itn='on' or 'off', "
                   "timestamps='none') -> text, raw_text, language, tokens (id, text)",
            "gguf": path.relative_to(REPO).as_posix(), "gguf_sha256": sha256(path), "gguf_bytes": path.stat().st_size,
        }
        doc.update(run_file(path))
        out = path.with_suffix(".ref.json")
        out.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print("wrote", out.relative_to(REPO), flush=True)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="step", required=True)
    c = sub.add_parser("convert")
    c.add_argument("--upstream", type=Path, required=True, help="transcribe.cpp checkout (scripts/ is used)")
    sub.add_parser("refs")
    args = ap.parse_args(argv)
    if args.step == "convert":
        return convert(args.upstream)
    return refs()


if __name__ == "__main__":
    raise SystemExit(main())
