#!/usr/bin/env python
"""Granite Speech (autoregressive) GGUF files written by transcribe.cpp's own converter and quantizer, and what
transcribe.cpp's runtime transcribes from them (tests/models/gguf/granite_speech/, README there). Three steps,
each in its own Python:

    # 1. BF16 files: upstream scripts/convert-granite.py, unmodified, on a BF16 copy of each tiny model of
    #    tests/models/granite_speech/ (the converter refuses any tensor that is not bfloat16: the published
    #    checkpoints are). UPSTREAM: a checkout (or `git archive`) of handy-computer/transcribe.cpp. The Python
    #    needs torch, safetensors, numpy, gguf and librosa (the converter computes its mel filterbank with it)
    OMP_NUM_THREADS=1 <python> tools/make_granite_speech_gguf_refs.py convert --upstream UPSTREAM
    # 2. F16 and Q8_0 files: upstream tools/transcribe-quantize (cmake -DTRANSCRIBE_BUILD_TOOLS=ON)
    python3 tools/make_granite_speech_gguf_refs.py quantize --quantizer PATH/transcribe-quantize
    # 3. references: the transcribe-cpp Python package (0.4.1 + transcribe-cpp-native) in its own venv
    OMP_NUM_THREADS=1 <tcpp-venv>/bin/python tools/make_granite_speech_gguf_refs.py refs

Step 1 writes the BF16 copy (config and tokenizer files as they are, every floating tensor of
model.safetensors cast to bfloat16, the int64 BatchNorm counters kept; adapter files copied too) to a scratch
folder and runs the converter's `main()` on it with `--variant` the published variant the tiny model has the
shape of (TINY: g40 and g33 granite-4.0-1b-speech, g41 granite-speech-4.1-2b, plus granite-speech-4.1-2b-plus;
the converter knows only these three and names the file's `general.name` from a table of them; the variant also
sets its pre-tokenizer, capabilities and, in the runtime, the prompt). Nothing of the converter is changed.

Step 3 writes `<gguf stem>.ref.json` next to each file: for jfk.wav and the two dev utterances the transformers
references of tests/references/granite_speech/ use, `transcribe_cpp.Model(gguf, backend="cpu")
.session(n_threads=1).run(pcm, timestamps="none")` -> text, raw_text and the tokens (id, text); a file the
runtime refuses to load records the error.
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

MODELS = R.REPO / "tests" / "models" / "granite_speech"
HOME = R.GGUF / "granite_speech"
TINY = {"g40": "granite-4.0-1b-speech", "g33": "granite-4.0-1b-speech", "g41": "granite-speech-4.1-2b",
        "plus": "granite-speech-4.1-2b-plus"}
QUANTS = {"g40": ["F16", "Q8_0"], "g33": ["Q8_0"], "g41": ["Q8_0"], "plus": ["Q8_0"]}
CLIPS = ["audio/jfk.wav", "audio/dev/ls_61-70968-0002.wav", "audio/dev/ls_1089-134691-0001.wav"]  # under shared/
HOW = ("tools/make_granite_speech_gguf_refs.py refs: transcribe_cpp.Model(gguf, backend='cpu') -> "
       "session(n_threads=1) -> run(pcm float32 16 kHz mono, timestamps='none') -> text, raw_text, tokens (id, text)")


def bf16_copy(src: Path, dst: Path) -> None:
    """`src` with every floating tensor of model.safetensors cast to bfloat16 (the other files as they are)."""
    import torch
    from safetensors.torch import load_file, save_file

    dst.mkdir(parents=True)
    for f in src.iterdir():
        if f.name != "model.safetensors":
            shutil.copy(f, dst / f.name)
    state = load_file(str(src / "model.safetensors"))
    save_file({k: (v.to(torch.bfloat16) if v.is_floating_point() else v).contiguous() for k, v in state.items()},
              str(dst / "model.safetensors"))


def convert(args) -> int:
    # the converter inserts upstream/scripts into sys.path itself (for lib.*)
    mod = R.load_converter(args.upstream, "convert-granite.py", "convert_granite")
    args.out.mkdir(parents=True, exist_ok=True)
    for name, variant in TINY.items():
        out = args.out / f"{name}-BF16.gguf"
        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp) / name
            bf16_copy(MODELS / name, src)
            rc = R.convert_main(mod, "convert-granite.py", src, out, variant, f"<bf16 copy of {name}>")
            if rc:
                return rc
        R.report(out)
    return 0


def quantize(args) -> int:
    return R.quantize(args.quantizer, [(args.out / f"{name}-BF16.gguf", args.out / f"{name}-{q}.gguf", q)
                                      for name in TINY for q in QUANTS[name]])


def run_file(path: Path, label: str) -> dict:
    def body(T, session):
        runs = []
        for rel in CLIPS:
            pcm, digest = R.clip(rel)
            result, rc = R.attempt(T, lambda: R.result_of(session.run(pcm, timestamps="none"),
                                                          n_samples=pcm.shape[0]), errors=("TranscribeError",))
            runs.append({"audio": rel, "audio_sha256": digest, "rc": rc, "result": result})
            R.said(path.name, rel, result)
        return runs

    return R.session_runs(path, label, body)


def refs(args) -> int:
    files = [args.out / f"{n}-{q}.gguf" for n in TINY for q in ["BF16"] + QUANTS[n]]
    return R.write_refs(files, HOME, HOW, run_file, ensure_ascii=True)


def main(argv=None) -> int:
    return R.main(__doc__, HOME, {"convert": (convert, []), "quantize": (quantize, []), "refs": (refs, [])}, argv)


if __name__ == "__main__":
    raise SystemExit(main())
