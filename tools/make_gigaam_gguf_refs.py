#!/usr/bin/env python
"""GigaAM GGUF files written by transcribe.cpp's own converter from the tiny models (tests/models/gigaam), and
what transcribe.cpp's runtime transcribes from them (tests/models/gguf/gigaam/). Two steps, each in its own
Python:

    # 1. F32 files: upstream scripts/convert-gigaam.py on each tiny model. UPSTREAM: a checkout (or
    #    `git archive`) of handy-computer/transcribe.cpp. Run in the gigaam venv (tools/setup_gigaam_venv.sh;
    #    the converter imports gigaam, omegaconf, numpy and gguf, which the venv has from the system)
    OMP_NUM_THREADS=1 .venv-gigaam/bin/python tools/make_gigaam_gguf_refs.py convert --upstream UPSTREAM
    # 2. references: the transcribe-cpp Python package (0.4.1 + transcribe-cpp-native) in its own venv
    OMP_NUM_THREADS=1 .venv-peers/bin/python tools/make_gigaam_gguf_refs.py refs

The converter loads a model with `gigaam.load_model(variant_key)` (a download); step 1 replaces that function,
for the converter's run only, with one returning the tiny model built by tools/gigaam_reference.py's `load`
(GigaAMASR from its config, the tokenizer path set, the weights loaded strictly), and clears the converter's
expected_num_classes of the variant (the published 34 / 257 / 1025: the tiny models have fewer classes; the
converter skips the check when it is None). Nothing else of the converter is changed.

Step 2 writes `<gguf stem>.ref.json` next to each file: for jfk.wav and two dev clips,
`transcribe_cpp.Model(gguf, backend="cpu").session(n_threads=1).run(pcm, timestamps="none")` -> text and the
tokens (id, text)."""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import hashlib
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO / ".." / "shared"
TINY = REPO / "tests" / "models" / "gigaam"
OUT = REPO / "tests" / "models" / "gguf" / "gigaam"
VARIANTS = {"ctc": ("gigaam-v3-ctc", "v3_ctc"), "rnnt": ("gigaam-v3-rnnt", "v3_rnnt"),
            "e2e-ctc": ("gigaam-v3-e2e-ctc", "v3_e2e_ctc"), "e2e-rnnt": ("gigaam-v3-e2e-rnnt", "v3_e2e_rnnt")}
CLIPS = ["audio/jfk.wav", "audio/dev/cv_17767698.wav", "audio/dev/ls_61-70968-0002.wav"]


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def convert(upstream: Path, only=None) -> int:
    import importlib.util

    import torch

    import gigaam

    sys.path.insert(0, str(REPO / "tools"))
    from gigaam_reference import load

    torch.set_num_threads(1)
    script = upstream.resolve() / "scripts" / "convert-gigaam.py"
    spec = importlib.util.spec_from_file_location("convert_gigaam", script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    OUT.mkdir(parents=True, exist_ok=True)
    for folder, (slug, key) in VARIANTS.items():
        if only and folder not in only:
            continue

        def tiny(name, *args, _folder=folder, _key=key, **kw):
            assert name == _key, name
            model = load(TINY / _folder)
            model.cfg.model_name = _key
            return model

        gigaam.load_model = tiny
        mod.VARIANT_PROFILES[slug]["expected_num_classes"] = None
        out = OUT / f"{slug}-tiny-F32.gguf"
        mod.convert(key, slug, out, repo_id="ai-sage/GigaAM-v3")
        print(out.relative_to(REPO), out.stat().st_size, sha256(out), flush=True)
    return 0


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
            for rel in CLIPS:
                pcm, sr = soundfile.read(str(SHARED / rel), dtype="float32")
                assert sr == 16000 and pcm.ndim == 1, (rel, sr, pcm.shape)
                try:
                    r = session.run(np.ascontiguousarray(pcm), timestamps="none")
                    result = {"text": r.text, "raw_text": r.raw_text, "token_ids": [int(t.id) for t in r.tokens],
                              "tokens": [t.text for t in r.tokens]}
                except (T.TranscribeError, TypeError, ValueError) as e:
                    result = {"error": f"{type(e).__name__}: {e}"}
                runs.append({"audio": rel, "audio_sha256": sha256(SHARED / rel), "result": result})
                print(f"{path.name} {rel}: {result.get('text', result.get('error'))!r}", flush=True)
    return {"model": info, "runs": runs}


def refs() -> int:
    import transcribe_cpp as T

    for path in sorted(OUT.glob("*.gguf")):
        doc = {
            "runtime": f"transcribe-cpp {T.__version__} (Python package; native {T.native_version()} "
                       f"{T.native_commit()}, provider {T.native_provider()})",
            "how": "tools/make_gigaam_gguf_refs.py refs: transcribe_cpp.Model(gguf, backend='cpu') -> "
                   "session(n_threads=1) -> run(pcm float32 16 kHz mono, timestamps='none') -> text, tokens",
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
    c.add_argument("--variants", nargs="*", choices=sorted(VARIANTS), help="only these tiny models (default: all)")
    sub.add_parser("refs")
    args = ap.parse_args(argv)
    if args.step == "convert":
        return convert(args.upstream, args.variants)
    return refs()


if __name__ == "__main__":
    raise SystemExit(main())
