#!/usr/bin/env python
"""MedASR GGUF files written by transcribe.cpp's own converter from the tiny model, and what transcribe.cpp's
runtime transcribes from them (tests/models/gguf/medasr/). Two steps, each in its own Python:

    # 1. F32 file: upstream scripts/convert-medasr.py, unmodified, on tests/models/medasr/tiny (the published
    #    layout: config.json, preprocessor_config.json, spiece.model, model.safetensors). UPSTREAM: a checkout (or
    #    `git archive HEAD scripts`) of handy-computer/transcribe.cpp. The Python needs torch, safetensors, numpy,
    #    gguf and sentencepiece (a venv with the system site packages and gguf)
    OMP_NUM_THREADS=1 <python> tools/make_medasr_gguf_refs.py convert --upstream UPSTREAM
    # 2. references: the transcribe-cpp Python package (0.4.1 + transcribe-cpp-native) in its own venv
    OMP_NUM_THREADS=1 .venv-peers/bin/python tools/make_medasr_gguf_refs.py refs

Step 2 writes `<gguf stem>.ref.json` next to the file: for jfk.wav and two dev clips,
`transcribe_cpp.Model(gguf, backend="cpu").session(n_threads=1).run(pcm, timestamps="none")` -> text, raw_text
and the tokens (id, text)."""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tcpp_refs as R  # noqa: E402

TINY = R.REPO / "tests" / "models" / "medasr" / "tiny"
HOME = R.GGUF / "medasr"
STEM = "medasr-tiny"
CLIPS = ["audio/jfk.wav", "audio/dev/ls_61-70968-0002.wav", "audio/dev/ls_1089-134691-0001.wav"]
HOW = ("tools/make_medasr_gguf_refs.py refs: transcribe_cpp.Model(gguf, backend='cpu') -> session(n_threads=1) -> "
       "run(pcm float32 16 kHz mono, timestamps='none') -> text, raw_text, tokens (id, text)")


def convert(args) -> int:
    mod = R.load_converter(args.upstream, "convert-medasr.py", "convert_medasr", scripts_on_path=True)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        argv = [str(TINY), "--repo-id", "google/medasr", "--outdir", tmp]
        print("run: convert-medasr.py tests/models/medasr/tiny --repo-id google/medasr --outdir <tmp>", flush=True)
        rc = mod.main(argv)
        made = sorted(Path(tmp).glob("*.gguf"))
        assert len(made) == 1, made
        out = args.out / f"{STEM}-F32.gguf"
        out.write_bytes(made[0].read_bytes())
    R.report(out)
    return rc or 0


def run_file(path: Path, label: str) -> dict:
    def body(T, session):
        runs = []
        for rel in CLIPS:
            pcm, digest = R.clip(rel)
            result = R.result_of(session.run(pcm, timestamps="none"), n_samples=pcm.shape[0])
            runs.append({"audio": rel, "audio_sha256": digest, "result": result})
            R.said(path.name, rel, result)
        return runs

    return R.session_runs(path, label, body, catch_load=False)


def main(argv=None) -> int:
    return R.main(__doc__, HOME, {"convert": (convert, []), "refs": (R.refs_step(HOME, HOW, run_file), [])}, argv)


if __name__ == "__main__":
    raise SystemExit(main())
