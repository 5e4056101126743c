#!/usr/bin/env python
"""GigaAM GGUF files written by transcribe.cpp's own converter from the tiny models (tests/models/gigaam), and
what transcribe.cpp's runtime transcribes from them (tests/models/gguf/gigaam/). Two steps, each in its own
Python:

    # 1. F32 files: upstream scripts/convert-gigaam.py on each tiny model. UPSTREAM: a checkout (or
    #    `git archive`) of handy-computer/transcribe.cpp. Run in the gigaam venv (tools/setup_gigaam_venv.sh;
    #    the converter imports gigaam, omegaconf, numpy and gguf, which the venv has from the system)
    OMP_NUM_THREADS=1 .venv-gigaam/bin/python tools/make_gigaam_gguf_refs.py convert --upstream UPSTREAM
    # 2. references: the transcribe-cpp Python package (0.4.1 + transcribe-cpp-native) in its own venv
    OMP_NUM_THREADS=1 .venv-peers/bin/python tools/make_gigaam_gguf_refs.py refs

The converter loads a model with `gigaam.load_model(variant_key)` (a download); step 1 replaces that function,
for the converter's run only, with one returning the tiny model built by tools/gigaam_reference.py's `load`
(GigaAMASR from its config, the tokenizer path set, the weights loaded strictly), and clears the converter's
expected_num_classes of the variant (the published 34 / 257 / 1025: the tiny models have fewer classes; the
converter skips the check when it is None). Nothing else of the converter is changed.

Step 2 writes `<gguf stem>.ref.json` next to each file: for jfk.wav and two dev clips,
`transcribe_cpp.Model(gguf, backend="cpu").session(n_threads=1).run(pcm, timestamps="none")` -> text and the
tokens (id, text)."""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tcpp_refs as R  # noqa: E402

TINY = R.REPO / "tests" / "models" / "gigaam"
HOME = R.GGUF / "gigaam"
VARIANTS = {"ctc": ("gigaam-v3-ctc", "v3_ctc"), "rnnt": ("gigaam-v3-rnnt", "v3_rnnt"),
            "e2e-ctc": ("gigaam-v3-e2e-ctc", "v3_e2e_ctc"), "e2e-rnnt": ("gigaam-v3-e2e-rnnt", "v3_e2e_rnnt")}
CLIPS = ["audio/jfk.wav", "audio/dev/cv_17767698.wav", "audio/dev/ls_61-70968-0002.wav"]
HOW = ("tools/make_gigaam_gguf_refs.py refs: transcribe_cpp.Model(gguf, backend='cpu') -> session(n_threads=1) -> "
       "run(pcm float32 16 kHz mono, timestamps='none') -> text, tokens")


def convert(args) -> int:
    import gigaam

    from gigaam_reference import load

    mod = R.load_converter(args.upstream, "convert-gigaam.py", "convert_gigaam")
    args.out.mkdir(parents=True, exist_ok=True)
    for folder, (slug, key) in VARIANTS.items():
        if args.variants and folder not in args.variants:
            continue

        def tiny(name, *a, _folder=folder, _key=key, **kw):
            assert name == _key, name
            model = load(TINY / _folder)
            model.cfg.model_name = _key
            return model

        gigaam.load_model = tiny
        mod.VARIANT_PROFILES[slug]["expected_num_classes"] = None
        out = args.out / f"{slug}-tiny-F32.gguf"
        mod.convert(key, slug, out, repo_id="ai-sage/GigaAM-v3")
        R.report(out)
    return 0


def run_file(path: Path, label: str) -> dict:
    def body(T, session):
        runs = []
        for rel in CLIPS:
            pcm, digest = R.clip(rel)
            result, _ = R.attempt(T, lambda: R.result_of(session.run(pcm, timestamps="none")))
            runs.append({"audio": rel, "audio_sha256": digest, "result": result})
            R.said(path.name, rel, result)
        return runs

    return R.session_runs(path, label, body)


def main(argv=None) -> int:
    variants = (["--variants"], dict(nargs="*", choices=sorted(VARIANTS), help="only these tiny models (default: all)"))
    return R.main(__doc__, HOME, {"convert": (convert, [variants]), "refs": (R.refs_step(HOME, HOW, run_file), [])}, argv)


if __name__ == "__main__":
    raise SystemExit(main())
