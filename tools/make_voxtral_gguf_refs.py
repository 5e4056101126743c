#!/usr/bin/env python
"""Voxtral GGUF files written by transcribe.cpp's own converter from the tiny model, and what transcribe.cpp's
runtime transcribes from them (tests/models/gguf/voxtral/). Two steps, each in its own Python:

    # 1. BF16 file: upstream scripts/convert-voxtral.py, unmodified, on a copy of tests/models/voxtral/tiny whose
    #    config.json is spelled as the published one (transformers 4.54's: text_config `rope_theta`, audio_config
    #    `head_dim`, which the converter reads; the values are the tiny model's). UPSTREAM: a checkout (or
    #    `git archive`) of handy-computer/transcribe.cpp. The Python needs torch, safetensors, numpy, gguf,
    #    librosa (the converter computes its mel filterbank with it) and mistral-common (it reads tekken.json)
    OMP_NUM_THREADS=1 <python> tools/make_voxtral_gguf_refs.py convert --upstream UPSTREAM
    # 2. references: the transcribe-cpp Python package (0.4.1 + transcribe-cpp-native) in its own venv
    OMP_NUM_THREADS=1 .venv-peers/bin/python tools/make_voxtral_gguf_refs.py refs

Step 2 writes `<gguf stem>.ref.json` next to the file: for jfk.wav and two dev clips,
`transcribe_cpp.Model(gguf, backend="cpu").session(n_threads=1).run(pcm, language=..., timestamps="none")` with
language None (the model detects it: no `lang:` in the prompt) and "en" -> text, raw_text and the tokens (id,
text); and jfk.wav translated (`task="translate", target_language=...`) when the runtime takes it."""
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

TINY = R.REPO / "tests" / "models" / "voxtral" / "tiny"
HOME = R.GGUF / "voxtral"
STEM = "voxtral-tiny"
VARIANT = "voxtral-mini-3b-2507"
CLIPS = ["audio/jfk.wav", "audio/dev/ls_61-70968-0002.wav", "audio/dev/fleurs_en_004.wav"]
LANGS = [None, "en"]
TRANSLATE = [("audio/jfk.wav", "fr"), ("audio/jfk.wav", "en")]
HOW = ("tools/make_voxtral_gguf_refs.py refs: transcribe_cpp.Model(gguf, backend='cpu') -> session(n_threads=1) -> "
       "run(pcm float32 16 kHz mono, language=None or 'en' | task='translate', target_language=..., "
       "timestamps='none') -> text, raw_text, tokens (id, text)")


def published_copy(src: Path, dst: Path) -> None:
    """The tiny model with config.json spelled as the published repo's (rope_theta in text_config, head_dim and
    num_key_value_heads in audio_config); every other file as it is."""
    shutil.copytree(src, dst)
    cfg = json.loads((src / "config.json").read_text())
    text = cfg["text_config"]
    rope = text.pop("rope_parameters")
    text.update({"rope_theta": rope["rope_theta"], "rope_scaling": None})
    audio = cfg["audio_config"]
    audio.update({"head_dim": audio["hidden_size"] // audio["num_attention_heads"],
                  "num_key_value_heads": audio["num_attention_heads"]})
    (dst / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")


def convert(args) -> int:
    mod = R.load_converter(args.upstream, "convert-voxtral.py", "convert_voxtral")
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / f"{STEM}-BF16.gguf"
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / STEM
        published_copy(TINY, src)
        rc = R.convert_main(mod, "convert-voxtral.py", src, out, VARIANT, "<published-config copy of tiny>")
    R.report(out)
    return rc


def run_file(path: Path, label: str) -> dict:
    def body(T, session):
        runs = []

        def one(rel, **kw):
            pcm, digest = R.clip(rel)
            result, rc = R.attempt(T, lambda: R.result_of(session.run(pcm, timestamps="none", **kw), language=True,
                                                          n_samples=pcm.shape[0]))
            runs.append({"audio": rel, "audio_sha256": digest, "asked": kw, "rc": rc, "result": result})
            R.said(path.name, f"{rel} {kw}", result)

        for rel in CLIPS:
            for lang in LANGS:
                one(rel, language=lang)
        for rel, target in TRANSLATE:
            one(rel, task="translate", target_language=target)
        return runs

    return R.session_runs(path, label, body)


def main(argv=None) -> int:
    return R.main(__doc__, HOME, {"convert": (convert, []), "refs": (R.refs_step(HOME, HOW, run_file), [])}, argv)


if __name__ == "__main__":
    raise SystemExit(main())
