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

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO / ".." / "shared"
TINY = REPO / "tests" / "models" / "moonshine_streaming" / "tiny"
OUT = REPO / "tests" / "models" / "gguf" / "moonshine_streaming"
STEM = "moonshine-streaming-tiny"
CLIPS = ["audio/jfk.wav", "audio/dev/ls_61-70968-0002.wav"]


def convert(upstream: Path) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "tiny"
        shutil.copytree(TINY, src)
        proc = json.loads((src / "processor_config.json").read_text())
        (src / "preprocessor_config.json").write_text(json.dumps(proc["feature_extractor"], indent=1) + "\n")
        out = OUT / f"{STEM}-F32.gguf"
        subprocess.run([sys.executable, str(upstream / "scripts" / "convert-moonshine_streaming.py"), str(src),
                        str(out), "--variant", STEM], check=True, stdout=subprocess.DEVNULL)
    print(out, out.stat().st_size, hashlib.sha256(out.read_bytes()).hexdigest())


def refs() -> None:
    import numpy as np
    import soundfile as sf
    import transcribe_cpp as T

    for path in sorted(OUT.glob("*.gguf")):
        model = T.Model(str(path), backend="cpu")
        rows = []
        with model.session(n_threads=1) as session:
            for clip in CLIPS:
                pcm, sr = sf.read(str(SHARED / clip), dtype="float32")
                assert sr == 16000
                r = session.run(np.ascontiguousarray(pcm), timestamps="none")
                with session.stream() as stream:
                    for i in range(0, len(pcm), 8000):
                        stream.feed(np.ascontiguousarray(pcm[i:i + 8000]))
                    stream.finalize()
                    live = stream.text()
                rows.append({"clip": clip, "offline_text": r.text, "offline_ids": [t.id for t in r.tokens],
                             "stream_text": live.full})
        doc = {"how": "tools/make_moonshine_streaming_gguf_refs.py refs: transcribe_cpp.Model(gguf, backend='cpu') "
                      "-> session(n_threads=1) -> run(pcm, timestamps='none') and stream() fed 8000-sample pieces",
               "transcribe_cpp": T.__version__, "sha256": hashlib.sha256(path.read_bytes()).hexdigest(), "runs": rows}
        out = path.with_suffix(".ref.json")
        out.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("step", choices=["convert", "refs"])
    ap.add_argument("--upstream", type=Path)
    args = ap.parse_args()
    if args.step == "convert":
        if args.upstream is None:
            ap.error("convert needs --upstream")
        convert(args.upstream)
    else:
        refs()


if __name__ == "__main__":
    main()
