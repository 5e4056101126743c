#!/usr/bin/env python
"""Canary GGUF files written by transcribe.cpp's own converter and quantizer, and what transcribe.cpp's runtime
transcribes from them (tests/models/gguf/canary/, README there). Three steps, each in its own Python:

    # 1. F32 file: upstream scripts/convert-canary.py (needs NeMo) on ../shared/models/canary-tiny/canary-tiny.nemo
    #    UPSTREAM: a checkout of handy-computer/transcribe.cpp (its scripts/ folder is used, not copied);
    #    GGUF_SITE: a site-packages folder holding the `gguf` package (the NeMo venv has none; it is
    #    appended to sys.path, so the NeMo venv's own packages win)
    OMP_NUM_THREADS=1 .venv-nemo/bin/python tools/canary_gguf_reference.py convert --upstream UPSTREAM \
        --gguf-site GGUF_SITE
    # 2. Q8_0 file: upstream tools/transcribe-quantize (built from UPSTREAM: cmake -DTRANSCRIBE_BUILD_TOOLS=ON,
    #    target transcribe-quantize)
    python3 tools/canary_gguf_reference.py quantize --quantizer PATH/transcribe-quantize
    # 3. references: the transcribe-cpp Python package (0.4.1 + transcribe-cpp-native) in its own venv
    OMP_NUM_THREADS=1 <tcpp-venv>/bin/python tools/canary_gguf_reference.py refs

Step 1 runs the unmodified upstream module through a wrapper that changes, in memory only, what its fixed
tables and inputs assume about the published models (each change is printed and listed in the README):
  * VARIANT_PROFILES gets a `canary-tiny` entry, a copy of `canary-180m-flash` (prompt format canary2, CC-BY-4.0)
    with display_name / version / size_label replaced; the variant is chosen with `--repo-id canary-tiny`.
  * languages_from_manifest (reads the upstream tests/golden/canary/<variant>.manifest.json) returns the
    model's four languages [en, de, es, fr] (its sub-tokenizers after spl_tokens).
  * the loaded tokenizer's `vocab_size` (922) is set to the head's row count (928 = 8 * ceil(922 / 8)): the
    converter refuses head.num_classes != tokenizer.vocab_size; the published models' vocabularies are
    multiples of 8. Its own fallback then names ids 922..927 `<unused_N>` (NORMAL).
Step 3 writes `<gguf stem>.ref.json` next to each file: transcribe_cpp.Model(path, backend="cpu") ->
session(n_threads=1) -> run(pcm, **kwargs) for every clip of CLIPS and task of TASKS (text and raw text,
compared with NeMo's references.json and with nemo_xscaling_off.json; the runtime returns no token rows for
Canary), the same runs with an f32 KV cache, the option probes of PROBES on jfk.wav, and input-length edges.
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tcpp_refs as R  # noqa: E402

SHARED = R.SHARED
HOME = R.GGUF / "canary"
SOURCE = "models/canary-tiny/canary-tiny.nemo"  # relative to shared/
VARIANT = "canary-tiny"
LANGUAGES = ["en", "de", "es", "fr"]
CLIPS = ["audio/jfk.wav", "audio/dev/ls_61-70968-0002.wav", "audio/dev/cv_18933160.wav",
         "audio/dev/fleurs_en_004.wav"]
# jfk.wav only, no NeMo reference: which task / language options the runtime accepts
PROBES = [
    ("asr_de", dict(task="transcribe", language="de", timestamps="none")),
    ("ast_en_fr", dict(task="translate", language="en", target_language="fr", timestamps="none")),
    ("ast_de_en", dict(task="translate", language="de", target_language="en", timestamps="none")),
    ("ast_de_fr", dict(task="translate", language="de", target_language="fr", timestamps="none")),
    ("transcribe_with_target_de", dict(task="transcribe", language="en", target_language="de", timestamps="none")),
    ("translate_without_target", dict(task="translate", language="en", timestamps="none")),
    ("asr_no_language", dict(task="transcribe", timestamps="none")),
    ("asr_it", dict(task="transcribe", language="it", timestamps="none")),
    ("asr_en_itn_on", dict(task="transcribe", language="en", itn="on", timestamps="none")),
    ("asr_en_diarize_on", dict(task="transcribe", language="en", diarize="on", timestamps="none")),
    ("asr_en_timestamps_segment", dict(task="transcribe", language="en", timestamps="segment")),
    ("asr_en_keep_special_tags", dict(task="transcribe", language="en", timestamps="none", keep_special_tags=True)),
    ("asr_en_prefix", dict(task="transcribe", language="en", timestamps="none", prefix="The junction")),
]
# (name, run kwargs, the references.json kind of ../shared/models/canary-tiny to compare with or None)
TASKS = [
    ("asr_en_pnc", dict(task="transcribe", language="en", pnc="on", timestamps="none"), "greedy_asr_en_pnc"),
    ("asr_en_nopnc", dict(task="transcribe", language="en", pnc="off", timestamps="none"), "greedy_asr_en_nopnc"),
    ("ast_en_de", dict(task="translate", language="en", target_language="de", pnc="on", timestamps="none"),
     "greedy_ast_en_de"),
    ("asr_en_default", dict(language="en"), "greedy_asr_en_pnc"),
]


# ------------------------------------------------------------------------------------------------
# 1. convert (NeMo venv)
# ------------------------------------------------------------------------------------------------


def convert(args) -> int:
    if args.gguf_site is not None:
        sys.path.append(str(args.gguf_site.resolve()))
    # the converter inserts upstream/scripts into sys.path itself (for lib.gguf_common)
    mod = R.load_converter(args.upstream, "convert-canary.py", "convert_canary")

    profile = dict(mod.VARIANT_PROFILES["canary-180m-flash"])
    profile.update(display_name="canary-tiny (tiny test model)", version="tiny", size_label="tiny")
    mod.VARIANT_PROFILES[VARIANT] = profile
    print(f"wrapper: VARIANT_PROFILES[{VARIANT!r}] = copy of canary-180m-flash with {profile}")
    mod.languages_from_manifest = lambda variant: list(LANGUAGES)
    print(f"wrapper: languages_from_manifest -> {LANGUAGES}")

    load = mod.load_canary_model

    def load_padded(spec_: str):
        model = load(spec_)
        n_head = int(model.cfg.head.num_classes)
        print(f"wrapper: tokenizer.vocab_size {model.tokenizer.vocab_size} -> {n_head} (head rows)")
        model.tokenizer.vocab_size = n_head
        return model

    mod.load_canary_model = load_padded

    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / f"{VARIANT}-F32.gguf"
    # relative source path, as the earlier sessions ran the converters from shared/models
    cwd = os.getcwd()
    os.chdir(SHARED / "models")
    try:
        rc = mod.main(["convert-canary.py", os.path.relpath(SHARED / SOURCE, SHARED / "models"), str(out.resolve()),
                       "--repo-id", VARIANT])
    finally:
        os.chdir(cwd)
    R.report(out)
    return rc


def nemo_xscaling_off(args) -> int:
    """NeMo's greedy decoding of the same clips and tasks with the encoder's xscaling switched off
    (model.encoder.pos_enc.xscale = None; the checkpoint has xscaling: true, sqrt(d_model) = 8), which is what
    transcribe.cpp's Canary encoder computes: it has no xscaling step and the GGUF has no key for it.
    Written to nemo_xscaling_off.json (output ids and text per clip and task)."""
    import copy

    import torch
    from omegaconf import open_dict

    torch.set_num_threads(1)
    from nemo.collections.asr.models import EncDecMultiTaskModel

    model = EncDecMultiTaskModel.restore_from(str(SHARED / SOURCE), map_location="cpu").eval()
    was = model.encoder.pos_enc.xscale
    model.encoder.pos_enc.xscale = None
    model.encoder.xscale = None
    cfg = copy.deepcopy(model.cfg.decoding)
    with open_dict(cfg):
        cfg.strategy = "greedy"
    model.change_decoding_strategy(cfg)
    kinds = {"asr_en_pnc": dict(source_lang="en", target_lang="en", pnc="yes"),
             "asr_en_nopnc": dict(source_lang="en", target_lang="en", pnc="no"),
             "ast_en_de": dict(source_lang="en", target_lang="de", pnc="yes")}
    out = {"how": "tools/canary_gguf_reference.py nemo-xscaling-off: EncDecMultiTaskModel.restore_from(canary-tiny.nemo); "
                  f"encoder.pos_enc.xscale {was} -> None; change_decoding_strategy(strategy=greedy); "
                  "transcribe([wav], batch_size=1, return_hypotheses=True, **kind)",
           "nemo_version": __import__("nemo").__version__, "torch_version": torch.__version__,
           "kinds": {k: {"transcribe_kwargs": kw, "per_clip": []} for k, kw in kinds.items()}}
    for name, kw in kinds.items():
        for rel in CLIPS:
            h = model.transcribe([str(SHARED / rel)], batch_size=1, return_hypotheses=True, verbose=False, **kw)[0]
            model.eval()  # transcribe() leaves encoder / transf_decoder in train mode
            ids = [int(t) for t in h.y_sequence.tolist()]
            out["kinds"][name]["per_clip"].append({"clip": Path(rel).name, "output_ids": ids, "text": h.text})
            print(name, rel, repr(h.text), flush=True)
    path = args.out / "nemo_xscaling_off.json"
    path.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    print("wrote", R.shown(path))
    return 0


# ------------------------------------------------------------------------------------------------
# 2. quantize
# ------------------------------------------------------------------------------------------------


def quantize(args) -> int:
    src = args.out / f"{VARIANT}-F32.gguf"
    return R.quantize(args.quantizer, [(src, args.out / f"{VARIANT}-{q}.gguf", q) for q in args.quants.split(",")])


# ------------------------------------------------------------------------------------------------
# 3. refs (transcribe.cpp venv)
# ------------------------------------------------------------------------------------------------


def load_pcm(rel: str):
    import numpy as np
    import soundfile as sf

    data, sr = sf.read(str(SHARED / rel), dtype="float32", always_2d=True)
    if sr != 16000:
        raise SystemExit(f"{rel}: {sr} Hz (the runtime takes 16 kHz)")
    return np.ascontiguousarray(data.mean(axis=1), dtype=np.float32)


def nemo_refs() -> dict:
    return json.loads((SHARED / "models" / "canary-tiny" / "references.json").read_text())["results"]


def compare(text: str, nemo: dict | None) -> dict | None:
    """The runtime's raw text (leading space kept, as NeMo's Hypothesis.text) against one NeMo record."""
    if nemo is None:
        return None
    return {"nemo": nemo["_where"], "text_equal": text == nemo["text"], "nemo_text": nemo["text"],
            "nemo_output_ids": nemo["output_ids"]}


def nemo_record(results: dict, kind: str, clip: str, where: str) -> dict | None:
    per = results.get(kind, {}).get("per_clip", [])
    return next((dict(r, _where=f"{where}{kind}[{i}]") for i, r in enumerate(per) if r["clip"] == clip), None)


def refs(args) -> int:
    import transcribe_cpp as T

    import numpy as np

    files = [args.out / f"{VARIANT}-{q}.gguf" for q in args.files.split(",")]
    nemo = nemo_refs()
    off_path = HOME / "nemo_xscaling_off.json"  # an input (the nemo-xscaling-off step's, committed)
    nemo_off = json.loads(off_path.read_text())["kinds"] if off_path.exists() else {}
    for path in files:
        runs, probes, edges = [], [], []
        with T.Model(str(path), backend="cpu") as model:
            caps = model.capabilities
            info = {"arch": model.arch, "variant": model.variant,
                    "capabilities": {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(caps).items()}
                    if hasattr(caps, "__dict__") else repr(caps)}
            with model.session(n_threads=1) as session:
                info["limits"] = vars(session.limits) if hasattr(session.limits, "__dict__") else repr(session.limits)
                for rel in CLIPS:
                    pcm = load_pcm(rel)
                    clip = Path(rel).name
                    for name, kw, kind in TASKS:
                        try:
                            r = session.run(pcm, **kw)
                            res = {"rc": 0, "text": r.text, "raw_text": r.raw_text, "language": r.language,
                                   "timestamp_kind": r.timestamp_kind, "n_tokens": len(r.tokens),
                                   "n_segments": len(r.segments),
                                   "vs_nemo": compare(r.raw_text, nemo_record(nemo, kind, clip, "references.json:")),
                                   "vs_nemo_xscaling_off": compare(r.raw_text, nemo_record(
                                       nemo_off, name if name != "asr_en_default" else "asr_en_pnc", clip,
                                       "nemo_xscaling_off.json:"))}
                        except T.TranscribeError as e:
                            res = {"rc": 1, "error": f"{type(e).__name__}: {e}"}
                        runs.append({"audio": rel, "audio_sha256": R.sha256(SHARED / rel), "n_samples": int(pcm.shape[0]),
                                     "task": name, "run_kwargs": kw, **res})
                        print(path.name, rel, name, res.get("text", res.get("error")), flush=True)
            # the same runs with an f32 KV cache (the default "auto" is f16 on CPU)
            with model.session(n_threads=1, kv_type="f32") as s32:
                for run in runs:
                    try:
                        run["kv_f32_raw_text"] = s32.run(load_pcm(run["audio"]), **run["run_kwargs"]).raw_text
                    except T.TranscribeError as e:
                        run["kv_f32_raw_text"] = f"{type(e).__name__}: {e}"
            with model.session(n_threads=1) as session:
                jfk = load_pcm(CLIPS[0])
                for name, kw in PROBES:
                    try:
                        r = session.run(jfk, **kw)
                        res = {"rc": 0, "text": r.text, "raw_text": r.raw_text, "language": r.language,
                               "timestamp_kind": r.timestamp_kind, "n_tokens": len(r.tokens),
                               "n_segments": len(r.segments)}
                    except T.TranscribeError as e:
                        res = {"rc": 1, "error": f"{type(e).__name__}: {e}"}
                    probes.append({"audio": CLIPS[0], "task": name, "run_kwargs": kw, **res})
                    print(path.name, name, res.get("raw_text", res.get("error")), flush=True)
                # input-length edges: jfk.wav tiled past the advertised max_audio_ms, and its first 0.5 s
                limit_s = info["capabilities"]["max_audio_ms"] / 1000.0
                for label, pcm in ((f"jfk.wav tiled to {limit_s + 1:.0f} s", np.resize(jfk, int((limit_s + 1) * 16000))),
                                   (f"jfk.wav tiled to {limit_s - 1:.0f} s", np.resize(jfk, int((limit_s - 1) * 16000))),
                                   ("jfk.wav first 0.5 s", jfk[:8000].copy())):
                    try:
                        r = session.run(np.ascontiguousarray(pcm, dtype=np.float32), language="en", timestamps="none")
                        res = {"rc": 0, "raw_text": r.raw_text}
                    except T.TranscribeError as e:
                        res = {"rc": 1, "error": f"{type(e).__name__}: {e}"}
                    edges.append({"input": label, "n_samples": int(pcm.shape[0]), **res})
                    print(path.name, label, res, flush=True)
            # output-length cap: sessions with a lowered n_ctx (decoder self-KV) on jfk.wav (ASR en: 41 tokens + EOS)
            for n_ctx in (20, 50, 51):
                with model.session(n_threads=1, n_ctx=n_ctx) as s_ctx:
                    try:
                        res = {"rc": 0, "raw_text": s_ctx.run(jfk, language="en", timestamps="none").raw_text}
                    except T.TranscribeError as e:
                        part = getattr(e, "partial_result", None)
                        res = {"rc": 1, "error": f"{type(e).__name__}: {e}",
                               "partial_raw_text": part.raw_text if part is not None else None}
                    edges.append({"input": f"jfk.wav, session n_ctx={n_ctx}", "n_samples": int(jfk.shape[0]), **res})
                    print(path.name, n_ctx, res, flush=True)
        doc = {
            "runtime": R.runtime_line(T),
            "how": "tools/canary_gguf_reference.py refs: transcribe_cpp.Model(gguf, backend='cpu') -> "
                   "model.session(n_threads=1) (kv_type auto = f16 KV on CPU) -> session.run(pcm float32 16 kHz mono, **run_kwargs); "
                   "kv_f32_raw_text: the same run in a session with kv_type='f32'; "
                   "result.text, raw_text; Canary returns no token rows (n_tokens 0), so ids "
                   "are not available from the runtime; raw_text is compared with NeMo's Hypothesis.text",
            "gguf": R.repo_name(path, HOME), "gguf_sha256": R.sha256(path), "gguf_bytes": path.stat().st_size,
            "model": info, "runs": runs, "option_probes": probes, "input_length_edges": edges,
        }
        out = path.with_suffix(".ref.json")
        R.write_json(out, doc, default=repr)
        print("wrote", R.shown(out))
    return 0


def main(argv=None) -> int:
    return R.main(__doc__, HOME, {
        "convert": (convert, [(["--gguf-site"], dict(type=Path, help="folder holding the `gguf` package, appended "
                                                                     "to sys.path"))]),
        "quantize": (quantize, [(["--quants"], dict(default="Q8_0"))]),
        "nemo-xscaling-off": (nemo_xscaling_off, []),
        "refs": (refs, [(["--files"], dict(default="F32,Q8_0",
                                           help="quant labels of tests/models/gguf/canary/canary-tiny-*.gguf"))])},
        argv)


if __name__ == "__main__":
    raise SystemExit(main())
