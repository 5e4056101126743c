#!/usr/bin/env python
"""The Voxtral Realtime GGUF file written by transcribe.cpp's own converter from the tiny model, and what
transcribe.cpp's runtime transcribes from it (tests/models/gguf/voxtral_realtime/, README there). Two steps, each in
its own Python:

    # 1. BF16 file: upstream scripts/convert-voxtral_realtime.py, unmodified, on a bfloat16 copy of
    #    tests/models/voxtral_realtime/tiny (the converter loads it with transformers and refuses any tensor that is
    #    not bfloat16: the published checkpoint is). UPSTREAM: a checkout (or `git archive`) of
    #    handy-computer/transcribe.cpp. The Python needs transformers >= 5.25, torch, numpy, librosa and gguf
    #    (`--pythonpath DIR` is put on PYTHONPATH for the converter: a folder holding the gguf package)
    OMP_NUM_THREADS=1 .venv-nemo/bin/python tools/make_voxtral_realtime_gguf_refs.py convert --upstream UPSTREAM \
        [--pythonpath DIR]
    # 2. references: the transcribe-cpp Python package (0.4.1 + transcribe-cpp-native) in its own venv
    OMP_NUM_THREADS=1 .venv-peers/bin/python tools/make_voxtral_realtime_gguf_refs.py refs

Step 2 writes `<gguf stem>.ref.json`: for jfk.wav and three dev clips, `transcribe_cpp.Model(gguf,
backend="cpu").session(n_threads=1)`: `run(pcm, timestamps="none")` (the offline path) and a `stream()` fed 0.5 s
pieces then finalized (the streaming path), their texts.
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO / ".." / "shared"
TINY = REPO / "tests" / "models" / "voxtral_realtime" / "tiny"
OUT = REPO / "tests" / "models" / "gguf" / "voxtral_realtime"
STEM = "voxtral-realtime-tiny"
VARIANT = "voxtral-mini-4b-realtime-2602"
CLIPS = ["audio/jfk.wav", "audio/dev/cv_17767698.wav", "audio/dev/cv_18820498.wav",
         "audio/dev/ami_ES2011a_headset0_40-46s.wav"]


def convert(upstream: Path, pythonpath: str | None) -> None:
    import shutil

    import torch
    from transformers import VoxtralRealtimeForConditionalGeneration

    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "bf16"
        model = VoxtralRealtimeForConditionalGeneration.from_pretrained(str(TINY), dtype=torch.bfloat16)
        model.save_pretrained(src)
        for name in ("tekken.json", "processor_config.json", "config.json"):
            # config.json as committed (it spells the encoder's num_key_value_heads out, as the published one does)
            shutil.copy(TINY / name, src / name)
        out = OUT / f"{STEM}-BF16.gguf"
        env = dict(os.environ)
        if pythonpath:
            env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
        subprocess.run([sys.executable, str(upstream / "scripts" / "convert-voxtral_realtime.py"), str(src), str(out),
                        "--variant", VARIANT], check=True, env=env, stdout=subprocess.DEVNULL)
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
                offline = session.run(np.ascontiguousarray(pcm), timestamps="none").text
                with session.stream() as stream:
                    for i in range(0, len(pcm), 8000):
                        stream.feed(np.ascontiguousarray(pcm[i:i + 8000]))
                    stream.finalize()
                    live = stream.text()
                rows.append({"clip": clip, "offline_text": offline, "stream_text": live.full,
                             "stream_committed": live.committed})
        doc = {"how": "tools/make_voxtral_realtime_gguf_refs.py refs: transcribe_cpp.Model(gguf, backend='cpu') -> "
                      "session(n_threads=1) -> run(pcm, timestamps='none') and stream() fed 8000-sample pieces",
               "transcribe_cpp": T.__version__, "sha256": hashlib.sha256(path.read_bytes()).hexdigest(), "runs": rows}
        out = path.with_suffix(".ref.json")
        out.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("step", choices=["convert", "refs"])
    ap.add_argument("--upstream", type=Path)
    ap.add_argument("--pythonpath")
    args = ap.parse_args()
    if args.step == "convert":
        if args.upstream is None:
            ap.error("convert needs --upstream")
        convert(args.upstream, args.pythonpath)
    else:
        refs()


if __name__ == "__main__":
    main()
