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

import argparse
import hashlib
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO / ".." / "shared"
MODELS = REPO / "tests" / "models" / "granite_speech"
OUT = REPO / "tests" / "models" / "gguf" / "granite_speech"
# each tiny model and the published variant it has the shape of (the converter's --variant)
TINY = {"g40": "granite-4.0-1b-speech", "g33": "granite-4.0-1b-speech", "g41": "granite-speech-4.1-2b",
        "plus": "granite-speech-4.1-2b-plus"}
QUANTS = {"g40": ["F16", "Q8_0"], "g33": ["Q8_0"], "g41": ["Q8_0"], "plus": ["Q8_0"]}
CLIPS = ["audio/jfk.wav", "audio/dev/ls_61-70968-0002.wav", "audio/dev/ls_1089-134691-0001.wav"]  # under shared/


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# ------------------------------------------------------------------------------------------------
# 1. convert
# ------------------------------------------------------------------------------------------------


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


def convert(upstream: Path) -> int:
    import importlib.util

    import torch

    torch.set_num_threads(1)
    script = upstream.resolve() / "scripts" / "convert-granite.py"
    spec = importlib.util.spec_from_file_location("convert_granite", script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # inserts upstream/scripts into sys.path itself (for lib.*)

    OUT.mkdir(parents=True, exist_ok=True)
    for name, variant in TINY.items():
        out = OUT / f"{name}-BF16.gguf"
        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp) / name
            bf16_copy(MODELS / name, src)
            argv = ["convert-granite.py", str(src), str(out), "--variant", variant]
            print("run:", " ".join(argv[:1] + [f"<bf16 copy of {name}>"] + argv[2:]), flush=True)
            rc = mod.main(argv)
            if rc:
                return rc
        print(out.relative_to(REPO), out.stat().st_size, sha256(out))
    return 0


# ------------------------------------------------------------------------------------------------
# 2. quantize
# ------------------------------------------------------------------------------------------------


def quantize(quantizer: Path) -> int:
    for name in TINY:
        src = OUT / f"{name}-BF16.gguf"
        for q in QUANTS[name]:
            dst = OUT / f"{name}-{q}.gguf"
            cmd = [str(quantizer), str(src), str(dst), "--quant", q]
            print(" ".join([quantizer.name, src.name, dst.name, "--quant", q]), flush=True)
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            print(dst.relative_to(REPO), dst.stat().st_size, sha256(dst))
    return 0


# ------------------------------------------------------------------------------------------------
# 3. refs (transcribe.cpp venv)
# ------------------------------------------------------------------------------------------------


def run_file(path: Path) -> dict:
    import numpy as np
    import soundfile
    import transcribe_cpp as T

    runs = []
    info = None
    try:
        model = T.Model(str(path), backend="cpu")
    except T.TranscribeError as e:
        # the message names the file by its absolute path: keep the repo-relative one
        msg = str(e).replace(str(path), path.relative_to(REPO).as_posix())
        return {"load_error": f"{type(e).__name__}: {msg}", "runs": []}
    with model:
        info = {"arch": model.arch, "variant": model.variant}
        with model.session(n_threads=1) as session:
            for rel in CLIPS:
                audio = SHARED / rel
                pcm, sr = soundfile.read(str(audio), dtype="float32")
                assert sr == 16000 and pcm.ndim == 1, (rel, sr, pcm.shape)
                try:
                    r = session.run(np.ascontiguousarray(pcm), timestamps="none")
                    result, rc = {"text": r.text, "raw_text": r.raw_text, "n_samples": int(pcm.shape[0]),
                                  "token_ids": [int(t.id) for t in r.tokens],
                                  "tokens": [t.text for t in r.tokens]}, 0
                except T.TranscribeError as e:
                    result, rc = {"error": f"{type(e).__name__}: {e}"}, 1
                runs.append({"audio": rel, "audio_sha256": sha256(audio), "rc": rc, "result": result})
                print(f"{path.name} {rel}: {result.get('text', result.get('error'))!r}", flush=True)
    return {"model": info, "runs": runs}


def refs(files: list[Path]) -> int:
    import transcribe_cpp as T

    for path in files:
        doc = {
            "runtime": f"transcribe-cpp {T.__version__} (Python package; native {T.native_version()} "
                       f"{T.native_commit()}, provider {T.native_provider()})",
            "how": "tools/make_granite_speech_gguf_refs.py refs: transcribe_cpp.Model(gguf, backend='cpu') -> "
                   "session(n_threads=1) -> run(pcm float32 16 kHz mono, timestamps='none') -> text, raw_text, "
                   "tokens (id, text)",
            "gguf": path.relative_to(REPO).as_posix(), "gguf_sha256": sha256(path), "gguf_bytes": path.stat().st_size,
        }
        doc.update(run_file(path))
        if "load_error" in doc:
            print(f"{path.name}: {doc['load_error']}", flush=True)
        out = path.with_suffix(".ref.json")
        out.write_text(json.dumps(doc, indent=1) + "\n")
        print("wrote", out.relative_to(REPO), flush=True)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="step", required=True)
    c = sub.add_parser("convert")
    c.add_argument("--upstream", type=Path, required=True, help="transcribe.cpp checkout (scripts/ is used)")
    q = sub.add_parser("quantize")
    q.add_argument("--quantizer", type=Path, required=True, help="transcribe-quantize binary")
    sub.add_parser("refs")
    args = ap.parse_args(argv)
    if args.step == "convert":
        return convert(args.upstream)
    if args.step == "quantize":
        return quantize(args.quantizer)
    return refs([OUT / f"{n}-{q}.gguf" for n in TINY for q in ["BF16"] + QUANTS[n]])


if __name__ == "__main__":
    raise SystemExit(main())
