#!/usr/bin/env python
"""Moonshine GGUF files written by transcribe.cpp's own converter from the tiny model, and what transcribe.cpp's
runtime transcribes from them (tests/models/gguf/moonshine/). Two steps, each in its own Python:

    # 1. F32 file (the converter keeps the source dtype): upstream scripts/convert-moonshine.py, unmodified, on a
    #    copy of tests/models/moonshine/tiny whose config.json is spelled as the published one (transformers 4.48's
    #    top-level `partial_rotary_factor`, `rope_theta`, `rope_scaling` null, which the converter reads; the values
    #    are the tiny model's). UPSTREAM: a checkout (or `git archive`) of handy-computer/transcribe.cpp. The Python
    #    needs torch, safetensors, numpy and gguf
    OMP_NUM_THREADS=1 <python> tools/make_moonshine_gguf_refs.py convert --upstream UPSTREAM
    # 2. references: the transcribe-cpp Python package (0.4.1 + transcribe-cpp-native) in its own venv
    OMP_NUM_THREADS=1 .venv-peers/bin/python tools/make_moonshine_gguf_refs.py refs

Step 2 writes `<gguf stem>.ref.json` next to the file: for jfk.wav, its first 2 s and two dev clips,
`transcribe_cpp.Model(gguf, backend="cpu").session(n_threads=1).run(pcm, timestamps="none")` -> text, raw_text and
the tokens (id, text)."""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import hashlib
import json
import shutil
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO / ".." / "shared"
TINY = REPO / "tests" / "models" / "moonshine" / "tiny"
OUT = REPO / "tests" / "models" / "gguf" / "moonshine"
STEM = "moonshine-tiny-test"
VARIANT = "moonshine-tiny"
# (clip, samples: None for the whole clip)
CLIPS = [("audio/jfk.wav", None), ("audio/jfk.wav", 32000), ("audio/dev/ls_61-70968-0002.wav", None),
         ("audio/dev/ls_1272-128104-0004_8k.wav", None)]


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def published_copy(src: Path, dst: Path) -> None:
    """The tiny model with config.json spelled as the published repo's (rope fields at the top level); every other
    file as it is."""
    shutil.copytree(src, dst)
    cfg = json.loads((src / "config.json").read_text())
    rope = cfg.pop("rope_parameters")
    cfg.update({"rope_theta": rope["rope_theta"], "partial_rotary_factor": rope["partial_rotary_factor"],
                "rope_scaling": None})
    (dst / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")


def convert(upstream: Path) -> int:
    import importlib.util

    import torch

    torch.set_num_threads(1)
    script = upstream.resolve() / "scripts" / "convert-moonshine.py"
    spec = importlib.util.spec_from_file_location("convert_moonshine", script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    OUT.mkdir(parents=True, exist_ok=True)
    out = OUT / f"{STEM}-F32.gguf"
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / STEM
        published_copy(TINY, src)
        argv = ["convert-moonshine.py", str(src), str(out), "--variant", VARIANT]
        print("run:", " ".join(argv[:1] + ["<published-config copy of tiny>"] + argv[2:]), flush=True)
        rc = mod.main(argv)
    print(out.relative_to(REPO), out.stat().st_size, sha256(out))
    return rc or 0


def run_file(path: Path) -> dict:
    import numpy as np
    import soundfile
    import transcribe_cpp as T

    runs = []
    try:
        model = T.Model(str(path), backend="cpu")
    except T.TranscribeError as e:
        msg = str(e).replace(str(path), path.relative_to(REPO).as_posix())
        return {"load_error": f"{type(e).__name__}: {msg}", "runs": []}
    with model:
        info = {"arch": model.arch, "variant": model.variant}
        with model.session(n_threads=1) as session:
            for rel, samples in CLIPS:
                pcm, sr = soundfile.read(str(SHARED / rel), dtype="float32")
                assert sr == 16000 and pcm.ndim == 1, (rel, sr, pcm.shape)
                pcm = pcm[:samples] if samples else pcm
                try:
                    r = session.run(np.ascontiguousarray(pcm), timestamps="none")
                    result, rc = {"text": r.text, "raw_text": r.raw_text, "n_samples": int(pcm.shape[0]),
                                  "token_ids": [int(t.id) for t in r.tokens], "tokens": [t.text for t in r.tokens]}, 0
                except (T.TranscribeError, TypeError, ValueError) as e:
                    result, rc = {"error": f"{type(e).__name__}: {e}"}, 1
                runs.append({"audio": rel, "samples": samples, "audio_sha256": sha256(SHARED / rel), "rc": rc,
                             "result": result})
                print(f"{path.name} {rel} {samples}: {result.get('text', result.get('error'))!r}", flush=True)
    return {"model": info, "runs": runs}


def refs() -> int:
    import transcribe_cpp as T

    for path in sorted(OUT.glob("*.gguf")):
        doc = {
            "runtime": f"transcribe-cpp {T.__version__} (Python package; native {T.native_version()} "
                       f"{T.native_commit()}, provider {T.native_provider()})",
            "how": "tools/make_moonshine_gguf_refs.py refs: transcribe_cpp.Model(gguf, backend='cpu') -> "
                   "session(n_threads=1) -> run(pcm float32 16 kHz mono, timestamps='none') -> text, raw_text, "
                   "tokens (id, text)",
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
