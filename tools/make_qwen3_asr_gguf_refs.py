#!/usr/bin/env python
"""Qwen3-ASR GGUF files written by transcribe.cpp's own converter and quantizer from the tiny model, and what
transcribe.cpp's runtime transcribes from them (tests/models/gguf/qwen3_asr/, README there). Three steps, each in
its own Python:

    # 1. BF16 file: upstream scripts/convert-qwen3_asr.py, unmodified, on an ORIGINAL-layout copy of
    #    tests/models/qwen3_asr/tiny (the converter reads Qwen's original layout only, and refuses any tensor that
    #    is not bfloat16: the published checkpoints are). UPSTREAM: a checkout (or `git archive`) of
    #    handy-computer/transcribe.cpp. The Python needs torch, safetensors, numpy, gguf and librosa (the
    #    converter computes its mel filterbank with it)
    OMP_NUM_THREADS=1 <python> tools/make_qwen3_asr_gguf_refs.py convert --upstream UPSTREAM
    # 2. F16 and Q8_0 files: upstream tools/transcribe-quantize (cmake -DTRANSCRIBE_BUILD_TOOLS=ON)
    python3 tools/make_qwen3_asr_gguf_refs.py quantize --quantizer PATH/transcribe-quantize
    # 3. references: the transcribe-cpp Python package (0.4.1 + transcribe-cpp-native) in its own venv
    OMP_NUM_THREADS=1 <tcpp-venv>/bin/python tools/make_qwen3_asr_gguf_refs.py refs

Step 1 writes the tiny model in Qwen's original layout (`original_layout`, as the tiny model's README says the
two layouts differ) to a scratch folder and runs the converter's `main()` on it with `--variant qwen3-asr-0.6b`
(the converter knows only its two published variants and names the file's `general.name` from a table of them).
`--original OUT_DIR` (any step) also leaves that folder at OUT_DIR. Nothing of the converter is changed.

Step 3 writes `<gguf stem>.ref.json` next to each file: for jfk.wav and the two dev utterances of
tests/references/qwen3_asr/, `transcribe_cpp.Model(gguf, backend="cpu").session(n_threads=1)
.run(pcm, timestamps="none")` with language None (auto) and "en" (forced) -> text, raw_text, language and the
tokens (id, text: the runtime gives none for this family); then `EXTRA` runs (`"extra": true`: jfk.wav forced to
French, without and with a `prompt=`); a file the runtime refuses to load records the error.
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

TINY = R.REPO / "tests" / "models" / "qwen3_asr" / "tiny"
HOME = R.GGUF / "qwen3_asr"
STEM = "qwen3-asr-tiny"
VARIANT = "qwen3-asr-0.6b"
QUANTS = ["F16", "Q8_0"]
CLIPS = ["audio/jfk.wav", "audio/dev/ls_61-70968-0002.wav", "audio/dev/fleurs_en_004.wav"]  # under shared/
LANGS = [None, "en"]
# Beyond the training data (the tiny model knows English only): jfk.wav forced to French, alone and with a context
# (the runtime's `prompt=`, our `context`: the system turn's text).
EXTRA = [("audio/jfk.wav", "fr", None), ("audio/jfk.wav", "fr", "Hello there")]
# The original layout's M-RoPE section (Qwen3-ASR-0.6B: [24, 20, 20] for head_dim 128) scaled to the tiny LM's
# head_dim 32 (the three parts sum to head_dim / 2); with text-only positions (t = h = w) any split is plain RoPE.
MROPE_SECTION = [6, 5, 5]
# The original config's support_languages (the converter maps them to codes for general.languages).
SUPPORT_LANGUAGES = ["Chinese", "English", "Cantonese", "Arabic", "German", "French", "Spanish", "Portuguese",
                     "Indonesian", "Italian", "Korean", "Russian", "Thai", "Vietnamese", "Japanese", "Turkish",
                     "Hindi", "Malay", "Dutch", "Swedish", "Danish", "Finnish", "Polish", "Czech", "Filipino",
                     "Persian", "Greek", "Romanian", "Hungarian", "Macedonian"]

HOW = ("tools/make_qwen3_asr_gguf_refs.py refs: transcribe_cpp.Model(gguf, backend='cpu') -> session(n_threads=1) -> "
       "run(pcm float32 16 kHz mono, language=None or 'en', timestamps='none') -> text, raw_text, language, tokens "
       "(id, text)")


# ------------------------------------------------------------------------------------------------
# 1. the original layout, and convert
# ------------------------------------------------------------------------------------------------

def original_name(key: str) -> str:
    """A -hf tensor name -> the original layout's (the tiny model's README, "Published layouts")."""
    for hf, orig in (("model.audio_tower.", "thinker.audio_tower."),
                     ("model.multi_modal_projector.linear_1.", "thinker.audio_tower.proj1."),
                     ("model.multi_modal_projector.linear_2.", "thinker.audio_tower.proj2."),
                     ("model.language_model.", "thinker.model."), ("lm_head.", "thinker.lm_head.")):
        if key.startswith(hf):
            return orig + key[len(hf):]
    raise ValueError(f"unexpected tensor {key}")


def original_layout(src: Path, dst: Path, dtype: str = "bfloat16") -> None:
    """The -hf tiny model at `src` written in Qwen's original layout at `dst`: config.json with thinker_config,
    thinker.* tensors (in `dtype`; the tied head stored, as the published original file stores it),
    preprocessor_config.json (WhisperFeatureExtractor), vocab.json + merges.txt + tokenizer_config.json (with
    added_tokens_decoder), chat_template.json (the -hf template: the original repo's text is not available here),
    generation_config.json as it is."""
    import torch
    from safetensors.torch import load_file, save_file

    dst.mkdir(parents=True)
    cfg = json.loads((src / "config.json").read_text())
    audio = dict(cfg["audio_config"])
    audio.pop("max_position_embeddings")  # the -hf conversion's addition (13)
    audio.update({"max_source_positions": 1500, "conv_chunksize": 500})
    text = dict(cfg["text_config"])
    rope = text.pop("rope_parameters")
    text.update({"rope_theta": rope["rope_theta"],
                 "rope_scaling": {"mrope_section": MROPE_SECTION, "mrope_interleaved": True, "interleaved": True,
                                  "rope_type": "default"}})
    thinker = {"audio_config": audio, "text_config": text, "audio_token_id": cfg["audio_token_id"],
               "audio_start_token_id": 643, "audio_end_token_id": 644, "model_type": "qwen3_asr_thinker"}
    orig = {"architectures": ["Qwen3ASRForConditionalGeneration"], "model_type": "qwen3_asr",
            "thinker_config": thinker, "support_languages": SUPPORT_LANGUAGES,
            "transformers_version": cfg["transformers_version"]}
    (dst / "config.json").write_text(json.dumps(orig, indent=2) + "\n")

    fe = json.loads((src / "processor_config.json").read_text())["feature_extractor"]
    pre = {"feature_extractor_type": "WhisperFeatureExtractor", "feature_size": fe["feature_size"],
           "sampling_rate": fe["sampling_rate"], "hop_length": fe["hop_length"], "n_fft": fe["n_fft"],
           "chunk_length": fe["chunk_length"], "n_samples": fe["n_samples"], "nb_max_frames": fe["nb_max_frames"],
           "padding_side": "right", "padding_value": 0.0, "dither": fe["dither"], "return_attention_mask": True}
    (dst / "preprocessor_config.json").write_text(json.dumps(pre, indent=2) + "\n")

    tok = json.loads((src / "tokenizer.json").read_text(encoding="utf-8"))
    (dst / "vocab.json").write_text(json.dumps(tok["model"]["vocab"], ensure_ascii=False), encoding="utf-8")
    merges = [" ".join(m) if isinstance(m, list) else m for m in tok["model"]["merges"]]
    (dst / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n", encoding="utf-8")
    tcfg = json.loads((src / "tokenizer_config.json").read_text())
    tcfg["added_tokens_decoder"] = {str(a["id"]): {k: v for k, v in a.items() if k != "id"}
                                    for a in tok["added_tokens"]}
    tcfg.pop("backend", None)
    (dst / "tokenizer_config.json").write_text(json.dumps(tcfg, indent=2) + "\n")
    template = (src / "chat_template.jinja").read_text(encoding="utf-8")
    (dst / "chat_template.json").write_text(json.dumps({"chat_template": template}, indent=2) + "\n")
    shutil.copy(src / "generation_config.json", dst / "generation_config.json")

    state = load_file(str(src / "model.safetensors"))
    if "lm_head.weight" not in state and cfg.get("tie_word_embeddings", True):
        state["lm_head.weight"] = state["model.language_model.embed_tokens.weight"]
    out = {original_name(k): v.to(getattr(torch, dtype)).contiguous().clone() for k, v in state.items()}
    save_file(out, str(dst / "model.safetensors"))


def convert(args) -> int:
    # the converter inserts upstream/scripts into sys.path itself (for lib.*)
    mod = R.load_converter(args.upstream, "convert-qwen3_asr.py", "convert_qwen3_asr")
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / f"{STEM}-BF16.gguf"
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / STEM
        original_layout(TINY, src)
        rc = R.convert_main(mod, "convert-qwen3_asr.py", src, out, VARIANT, "<original-layout copy of tiny>")
        if args.original is not None:
            shutil.copytree(src, args.original)
    R.report(out)
    return rc


# ------------------------------------------------------------------------------------------------
# 2. quantize
# ------------------------------------------------------------------------------------------------

def quantize(args) -> int:
    src = args.out / f"{STEM}-BF16.gguf"
    return R.quantize(args.quantizer, [(src, args.out / f"{STEM}-{q}.gguf", q) for q in QUANTS])


# ------------------------------------------------------------------------------------------------
# 3. refs (transcribe.cpp venv)
# ------------------------------------------------------------------------------------------------

def run_file(path: Path, label: str) -> dict:
    def body(T, session):
        runs = []
        for rel in CLIPS:
            pcm, digest = R.clip(rel)
            for lang in LANGS:
                result, rc = R.attempt(T, lambda: R.result_of(session.run(pcm, language=lang, timestamps="none"),
                                                              language=True, n_samples=pcm.shape[0]),
                                       errors=("TranscribeError",))
                runs.append({"audio": rel, "audio_sha256": digest, "language_asked": lang, "rc": rc,
                             "result": result})
                print(f"{path.name} {rel} {lang}: {result.get('text', result.get('error'))!r} "
                      f"{result.get('language')!r}", flush=True)
        for rel, lang, prompt in EXTRA:
            pcm, digest = R.clip(rel)
            r = session.run(pcm, language=lang, prompt=prompt, timestamps="none")
            runs.append({"audio": rel, "audio_sha256": digest, "language_asked": lang, "prompt": prompt, "rc": 0,
                         "extra": True, "result": {"text": r.text, "raw_text": r.raw_text,
                                                   "language": getattr(r, "language", None)}})
            print(f"{path.name} {rel} {lang} {prompt!r}: {r.text!r}", flush=True)
        return runs

    return R.session_runs(path, label, body)


def refs(args) -> int:
    return R.write_refs([args.out / f"{STEM}-{q}.gguf" for q in ["BF16"] + QUANTS], HOME, HOW, run_file)


def original(args) -> int:
    original_layout(TINY, args.dir, args.dtype)
    return 0


def main(argv=None) -> int:
    return R.main(__doc__, HOME, {
        "convert": (convert, [(["--original"], dict(type=Path, default=None,
                                                    help="also keep the original-layout folder here"))]),
        "quantize": (quantize, []),
        "original": (original, [(["dir"], dict(type=Path)),
                                (["--dtype"], dict(default="bfloat16", choices=["bfloat16", "float32"]))]),
        "refs": (refs, [])}, argv)


if __name__ == "__main__":
    raise SystemExit(main())
