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

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tcpp_refs as R  # noqa: E402

TINY = R.REPO / "tests" / "models" / "sensevoice" / "tiny"
HOME = R.GGUF / "sensevoice"
STEM = "sensevoice-tiny"
VARIANT = "sensevoice-small"
CLIPS = ["audio/jfk.wav", "audio/dev/ls_61-70968-0002.wav", "audio/dev/ls_1089-134691-0001.wav"]
ASKS = [dict(language=None, itn="on"), dict(language="en", itn="on"), dict(language="en", itn="off"),
        dict(language=None, itn="off")]
HOW = ("tools/make_sensevoice_gguf_refs.py refs: transcribe_cpp.Model(gguf, backend='cpu') -> session(n_threads=1) "
       "-> run(pcm float32 16 kHz mono, language=None or 'en', itn='on' or 'off', timestamps='none') -> text, "
       "raw_text, language, tokens (id, text)")


def convert(args) -> int:
    mod = R.load_converter(args.upstream, "convert-sensevoice.py", "convert_sensevoice")
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / f"{STEM}-F32.gguf"
    rc = R.convert_main(mod, "convert-sensevoice.py", TINY, out, VARIANT)
    R.report(out)
    return rc


def run_file(path: Path, label: str) -> dict:
    def body(T, session):
        runs = []
        for rel in CLIPS:
            pcm, digest = R.clip(rel)
            for kw in ASKS:
                r = session.run(pcm, timestamps="none", **kw)
                runs.append({"audio": rel, "audio_sha256": digest, "asked": kw,
                             "result": R.result_of(r, language=True)})
                print(f"{path.name} {rel} {kw}: {r.raw_text!r}", flush=True)
        return runs

    return R.session_runs(path, label, body, catch_load=False)


def main(argv=None) -> int:
    return R.main(__doc__, HOME, {"convert": (convert, []), "refs": (R.refs_step(HOME, HOW, run_file), [])}, argv)


if __name__ == "__main__":
    raise SystemExit(main())
