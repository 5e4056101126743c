#!/usr/bin/env python
"""The Moonshine Streaming GGUF file written by transcribe.cpp's own converter from the tiny model, and what
transcribe.cpp's runtime transcribes from it (tests/models/gguf/moonshine_streaming/). Two steps, each in its own
Python:

    # 1. F32 file: upstream scripts/convert-moonshine_streaming.py, unmodified, on a copy of
    #    tests/models/moonshine_streaming/tiny with preprocessor_config.json added (the converter requires that
    #    file; transformers 5 writes the feature extractor's settings into processor_config.json instead).
    #    UPSTREAM: a checkout (or `git archive`) of handy-computer/transcribe.cpp's scripts/. The Python needs
    #    torch, numpy, safetensors and gguf (tools/venv-gguf style: system site packages + gguf).
    OMP_NUM_THREADS=1 python tools/make_moonshine_streaming_gguf_refs.py convert --upstream UPSTREAM
    # 2. references: the transcribe-cpp Python package (0.4.1 + transcribe-cpp-native) in its own venv
    OMP_NUM_THREADS=1 .venv-peers/bin/python tools/make_moonshine_streaming_gguf_refs.py refs

Step 2 writes `<gguf stem>.ref.json`: for jfk.wav and one dev clip, `transcribe_cpp.Model(gguf, backend="cpu")
.session(n_threads=1)`: `run(pcm, timestamps="none")` (the offline path: text and token ids) and a `stream()` fed
0.5 s pieces then finalized (transcribe.cpp's streaming path: its final text).
"""
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

TINY = R.REPO / "tests" / "models" / "moonshine_streaming" / "tiny"
HOME = R.GGUF / "moonshine_streaming"
STEM = "moonshine-streaming-tiny"
CLIPS = ["audio/jfk.wav", "audio/dev/ls_61-70968-0002.wav"]
HOW = ("tools/make_moonshine_streaming_gguf_refs.py refs: transcribe_cpp.Model(gguf, backend='cpu') -> "
       "session(n_threads=1) -> run(pcm, timestamps='none') and stream() fed 8000-sample pieces")


def convert(args) -> int:
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "tiny"
        shutil.copytree(TINY, src)
        proc = json.loads((src / "processor_config.json").read_text())
        (src / "preprocessor_config.json").write_text(json.dumps(proc["feature_extractor"], indent=1) + "\n")
        out = args.out / f"{STEM}-F32.gguf"
        R.run_converter(args.upstream, "convert-moonshine_streaming.py", [src, out, "--variant", STEM])
    R.report(out)
    return 0


def row(session, rel: str, pcm) -> dict:
    r = session.run(pcm, timestamps="none")
    live = R.streamed(session, pcm)
    return {"clip": rel, "offline_text": r.text, "offline_ids": [t.id for t in r.tokens], "stream_text": live.full}


def refs(args) -> int:
    return R.stream_refs(sorted(args.out.glob("*.gguf")), HOW, CLIPS, row)


def main(argv=None) -> int:
    return R.main(__doc__, HOME, {"convert": (convert, []), "refs": (refs, [])}, argv)


if __name__ == "__main__":
    raise SystemExit(main())
