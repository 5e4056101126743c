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

import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tcpp_refs as R  # noqa: E402

TINY = R.REPO / "tests" / "models" / "moonshine" / "tiny"
HOME = R.GGUF / "moonshine"
STEM = "moonshine-tiny-test"
VARIANT = "moonshine-tiny"
# (clip, samples: None for the whole clip)
CLIPS = [("audio/jfk.wav", None), ("audio/jfk.wav", 32000), ("audio/dev/ls_61-70968-0002.wav", None),
         ("audio/dev/ls_1272-128104-0004_8k.wav", None)]
HOW = ("tools/make_moonshine_gguf_refs.py refs: transcribe_cpp.Model(gguf, backend='cpu') -> session(n_threads=1) "
       "-> run(pcm float32 16 kHz mono, timestamps='none') -> text, raw_text, tokens (id, text)")


def published_copy(src: Path, dst: Path) -> None:
    """The tiny model with config.json spelled as the published repo's (rope fields at the top level); every other
    file as it is."""
    shutil.copytree(src, dst)
    cfg = json.loads((src / "config.json").read_text())
    rope = cfg.pop("rope_parameters")
    cfg.update({"rope_theta": rope["rope_theta"], "partial_rotary_factor": rope["partial_rotary_factor"],
                "rope_scaling": None})
    (dst / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")


def convert(args) -> int:
    mod = R.load_converter(args.upstream, "convert-moonshine.py", "convert_moonshine")
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / f"{STEM}-F32.gguf"
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / STEM
        published_copy(TINY, src)
        rc = R.convert_main(mod, "convert-moonshine.py", src, out, VARIANT, "<published-config copy of tiny>")
    R.report(out)
    return rc


def run_file(path: Path, label: str) -> dict:
    def body(T, session):
        runs = []
        for rel, samples in CLIPS:
            pcm, digest = R.clip(rel, samples)
            result, rc = R.attempt(T, lambda: R.result_of(session.run(pcm, timestamps="none"),
                                                          n_samples=pcm.shape[0]))
            runs.append({"audio": rel, "samples": samples, "audio_sha256": digest, "rc": rc, "result": result})
            R.said(path.name, f"{rel} {samples}", result)
        return runs

    return R.session_runs(path, label, body)


def main(argv=None) -> int:
    return R.main(__doc__, HOME, {"convert": (convert, []), "refs": (R.refs_step(HOME, HOW, run_file), [])}, argv)


if __name__ == "__main__":
    raise SystemExit(main())
