#!/usr/bin/env python
"""How faithful each Q8_0 compute is on tiny GGUF files: token agreement with our float result and the
encoder's relative error, for the default (`transcribe.quant.Q8Linear`), its two compute dtypes forced,
dtype int8 (int8 rows, activations quantized per row) and ggml's own scheme (emulated: activations
quantized to Q8_0 blocks; tests/test_gguf_q8_mode.py's `GgmlProduct`).

Run from the repository root:

    python3 benchmarks/gguf_q8_fidelity.py [--others DIR] [--json PATH]

Files: every Q8_0 file of ../shared/models/gguf with the float file it was quantized from; with --others,
also the models of tests/models/*.nemo, ../shared/models/parakeet-tiny/tiny-tdt-random.nemo (both
schemas) and ../shared/models/granite-nar-tiny converted by `transcribe convert` to f32 and q8_0 in DIR
(made once). Clips: jfk.wav, the LibriSpeech clip and the first 6 dev clips of ../shared/audio (Granite:
jfk and its wave_A/B/C); every head. Agreement = 1 - token edit distance / float length, averaged over
clips and heads. Encoder error: relative L2 distance of the encoder's output on jfk.wav (Granite: the
last tapped layer) to the float file's ("vs float": weights' Q8_0 error included) and to the same Q8_0
file dequantized to float32 ("compute": the compute's own error).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
SHARED = REPO.parent / "shared"

import transcribe  # noqa: E402
from tests.test_gguf_q8_mode import _stored_types, agreement, encoder_output, ggml_emulation  # noqa: E402
from transcribe.quant import FloatComputeLinear  # noqa: E402

CLIPS = [SHARED / "audio" / "jfk.wav", SHARED / "audio" / "ls_2086-149220-0033.wav"] + \
    sorted((SHARED / "audio" / "dev").glob("*.wav"))[:6]
GRANITE_CLIPS = [SHARED / "audio" / "jfk.wav"] + [SHARED / "models" / "granite-nar-tiny" / f"wave_{c}.wav" for c in "ABC"]


def pairs(others):
    g = SHARED / "models" / "gguf"
    out = [(q, q.with_name(q.name.replace("-q8_0", "-f32"))) for q in sorted((g / "parakeet-cpp").glob("*-q8_0.gguf"))]
    out += [(q, q.with_name(q.name.replace("-Q8_0", "-F32").replace("granite-nar-tiny-F32", "granite-nar-tiny-BF16")))
            for q in sorted((g / "transcribe-cpp").glob("*-Q8_0.gguf"))]
    if others:
        others.mkdir(parents=True, exist_ok=True)
        sources = [(m, s) for m in sorted((REPO / "tests" / "models").glob("*.nemo")) for s in ("parakeet.cpp", "transcribe.cpp")]
        sources += [(SHARED / "models" / "parakeet-tiny" / "tiny-tdt-random.nemo", "parakeet.cpp"),
                    (SHARED / "models" / "granite-nar-tiny", "transcribe.cpp")]
        for src, schema in sources:
            stem = f"{src.name.removesuffix('.nemo')}-{schema}"
            for t in ("f32", "q8_0"):
                dst = others / f"{stem}-{t}.gguf"
                if not dst.exists():
                    subprocess.run([sys.executable, "-m", "transcribe", "convert", str(src), str(dst), "--schema",
                                    schema, "--type", t], check=True, cwd=REPO)
            out.append((others / f"{stem}-q8_0.gguf", others / f"{stem}-f32.gguf"))
    return out


def units(asr, clip, head):
    tr = asr.transcribe(str(clip), **({"head": head} if head else {}))
    return [t.id for t in tr.tokens]


def measure(q8: Path, flt: Path) -> dict:
    ref = transcribe.load_model(str(flt), dtype="float32")
    granite = ref.family == "granite"
    clips, heads = (GRANITE_CLIPS, [None]) if granite else (CLIPS, ref.heads)
    want = {(c, h): units(ref, c, h) for c in clips for h in heads}
    wav = SHARED / "audio" / "jfk.wav"
    enc_float = encoder_output(ref, wav)
    enc_exact = encoder_output(transcribe.load_model(str(q8), dtype="float32"), wav)
    rows = {}

    def row(name, asr):
        agree = [agreement(units(asr, c, h), want[c, h]) for c in clips for h in heads]
        enc = encoder_output(asr, wav)
        rows[name] = dict(agreement=round(sum(agree) / len(agree), 3), per_clip=[round(a, 3) for a in agree],
                          error_vs_float=float((enc - enc_float).norm() / enc_float.norm()),
                          compute_error=float((enc - enc_exact).norm() / enc_exact.norm()))

    for name, compute in (("default", None), ("float32", torch.float32), ("bfloat16", torch.bfloat16)):
        asr = transcribe.load_model(str(q8))
        for m in asr.model.modules():
            if isinstance(m, FloatComputeLinear):
                m.compute = compute
        row(name, asr)
    row("int8-rows", transcribe.load_model(str(q8), dtype="int8"))
    row("ggml-emulated", ggml_emulation(q8, _stored_types(q8)))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--others", type=Path, help="folder for the converted files of other shapes")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(1)
    results = {}
    for q8, flt in pairs(args.others):
        rows = measure(q8, flt)
        results[q8.name] = rows
        print(f"{q8.parent.name}/{q8.name}: " + "; ".join(
            f"{n} {r['agreement']:.3f} ({r['error_vs_float']:.1e} / {r['compute_error']:.1e})" for n, r in rows.items()),
            flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
