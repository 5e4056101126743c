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

import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tcpp_refs as R  # noqa: E402

TINY = R.REPO / "tests" / "models" / "voxtral_realtime" / "tiny"
HOME = R.GGUF / "voxtral_realtime"
STEM = "voxtral-realtime-tiny"
VARIANT = "voxtral-mini-4b-realtime-2602"
CLIPS = ["audio/jfk.wav", "audio/dev/cv_17767698.wav", "audio/dev/cv_18820498.wav",
         "audio/dev/ami_ES2011a_headset0_40-46s.wav"]
HOW = ("tools/make_voxtral_realtime_gguf_refs.py refs: transcribe_cpp.Model(gguf, backend='cpu') -> "
       "session(n_threads=1) -> run(pcm, timestamps='none') and stream() fed 8000-sample pieces")


def convert(args) -> int:
    import torch
    from transformers import VoxtralRealtimeForConditionalGeneration

    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "bf16"
        model = VoxtralRealtimeForConditionalGeneration.from_pretrained(str(TINY), dtype=torch.bfloat16)
        model.save_pretrained(src)
        for name in ("tekken.json", "processor_config.json", "config.json"):
            # config.json as committed (it spells the encoder's num_key_value_heads out, as the published one does)
            shutil.copy(TINY / name, src / name)
        out = args.out / f"{STEM}-BF16.gguf"
        env = dict(os.environ)
        if args.pythonpath:
            env["PYTHONPATH"] = args.pythonpath + os.pathsep + env.get("PYTHONPATH", "")
        R.run_converter(args.upstream, "convert-voxtral_realtime.py", [src, out, "--variant", VARIANT], env=env)
    R.report(out)
    return 0


def row(session, rel: str, pcm) -> dict:
    offline = session.run(pcm, timestamps="none").text
    live = R.streamed(session, pcm)
    return {"clip": rel, "offline_text": offline, "stream_text": live.full, "stream_committed": live.committed}


def refs(args) -> int:
    return R.stream_refs(sorted(args.out.glob("*.gguf")), HOW, CLIPS, row)


def main(argv=None) -> int:
    pythonpath = (["--pythonpath"], dict(help="a folder put on the converter's PYTHONPATH (one holding gguf)"))
    return R.main(__doc__, HOME, {"convert": (convert, [pythonpath]), "refs": (refs, [])}, argv)


if __name__ == "__main__":
    raise SystemExit(main())
