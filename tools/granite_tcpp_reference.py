"""transcribe.cpp's own transcripts of Granite Speech NAR GGUF files, for tests/test_gguf_granite_shapes.py.
Run in the venv holding the `transcribe-cpp` Python package (0.4.1, with `transcribe-cpp-native`), from the
repo root:

    OMP_NUM_THREADS=1 <venv>/bin/python tools/granite_tcpp_reference.py [--out DIR]

(<venv>: a venv with `pip install transcribe-cpp==0.4.1 soundfile`). For each file in FILES it
loads the model with `transcribe_cpp.Model(path, backend="cpu")`, opens a session with n_threads 1 and
runs every clip of CLIPS (`session.run(pcm, timestamps="none")`: the library's transcribe_run, as the shared
references' C helper called it; that helper asked for token timestamps, which 0.4.1 refuses for this family
with "unsupported timestamp granularity", and 0.2.1 answered without tokens), and writes `tests/models/gguf/<file stem>.ref.json` in the
layout of ../shared/models/gguf/transcribe-cpp/*.ref.json (runtime, gguf, gguf_sha256, runs with audio,
audio_sha256, rc, result.text / n_samples). Audio is read with soundfile as float32 (16-bit PCM / 32768,
32-bit float WAV as stored), 16 kHz mono as the clips are.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import transcribe_cpp

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tcpp_refs as R  # noqa: E402

SHARED = R.SHARED
OUT = R.GGUF
# The GGUF files: (path, the path written into the ref: relative to shared/ for the shared files).
FILES = [SHARED / "models/gguf/transcribe-cpp" / f"granite-nar-tiny-{q}.gguf" for q in ("BF16", "Q8_0")] + \
        [OUT / f"granite-nar-other-{q}.gguf" for q in ("BF16", "Q8_0")]
# Clips, relative to shared/: the tiny model's three synthetic waves, the two speech clips, and five short
# dev clips of other corpora.
CLIPS = [f"models/granite-nar-tiny/wave_{c}.wav" for c in "ABC"] + ["audio/jfk.wav", "audio/ls_2086-149220-0033.wav"] + \
        [f"audio/dev/{c}" for c in ("ls_1995-1837-0001.wav", "lj_LJ050-0131.wav", "cv_19172268.wav",
                                    "fleurs_en_002.wav", "ls_1089-134691-0001.wav")]


def run_file(path: Path) -> dict:
    runs = []
    with transcribe_cpp.Model(str(path), backend="cpu") as model:
        with model.session(n_threads=1) as session:
            for rel in CLIPS:
                pcm, digest = R.clip(rel)

                def run(pcm=pcm):
                    r = session.run(pcm, timestamps="none")
                    return {"text": r.text, "raw_text": r.raw_text, "n_samples": int(pcm.shape[0]),
                            "tokens": [t.text for t in r.tokens]}

                result, rc = R.attempt(transcribe_cpp, run, errors=("TranscribeError",))
                runs.append({"audio": rel, "audio_sha256": digest, "rc": rc, "result": result})
                R.said(path.name, rel, result)
    shared = path.resolve().is_relative_to(SHARED.resolve())
    return {
        "runtime": f"transcribe-cpp {transcribe_cpp.__version__} (Python package, native "
                   f"{transcribe_cpp.native_version()} {transcribe_cpp.native_commit()}, provider "
                   f"{transcribe_cpp.native_provider()})",
        "how": "tools/granite_tcpp_reference.py: transcribe_cpp.Model(backend='cpu') -> session(n_threads=1) -> "
               "run(pcm, timestamps='none'); result.text",
        "gguf": path.resolve().relative_to(SHARED.resolve()).as_posix() if shared else R.repo_name(path, OUT),
        "gguf_sha256": R.sha256(path),
        "runs": runs,
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=OUT, help="where the .ref.json files go (default tests/models/gguf)")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for path in FILES:
        ref = run_file(path)
        out = args.out / (path.stem + ".ref.json")
        out.write_text(json.dumps(ref, indent=1, ensure_ascii=False) + "\n")
        print(f"wrote {R.shown(out)}")


if __name__ == "__main__":
    main()
