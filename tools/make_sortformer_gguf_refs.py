#!/usr/bin/env python
"""Sortformer GGUF files written by transcribe.cpp's own converter and quantizer, and what transcribe.cpp's
runtime diarizes from them (tests/models/gguf/sortformer/, README there). Three steps, each in its own Python:

    # 1. F32 file: upstream scripts/convert-sortformer.py (needs NeMo), unmodified, on
    #    ../shared/models/sortformer-tiny/sortformer-tiny.nemo. UPSTREAM: a checkout (or `git archive`) of
    #    handy-computer/transcribe.cpp; GGUF_SITE: a site-packages folder holding the `gguf` package (the NeMo
    #    venv has none; it is appended to sys.path, so the NeMo venv's own packages win)
    OMP_NUM_THREADS=1 .venv-nemo/bin/python tools/make_sortformer_gguf_refs.py convert --upstream UPSTREAM \
        --gguf-site GGUF_SITE
    # 2. F16 and Q8_0 files: upstream tools/transcribe-quantize (built from UPSTREAM: cmake
    #    -DTRANSCRIBE_BUILD_TOOLS=ON, target transcribe-quantize); the converter writes F32 only
    python3 tools/make_sortformer_gguf_refs.py quantize --quantizer PATH/transcribe-quantize
    # 3. references: the transcribe-cpp Python package (0.4.1 + transcribe-cpp-native) in its own venv
    OMP_NUM_THREADS=1 <tcpp-venv>/bin/python tools/make_sortformer_gguf_refs.py refs

Step 1 runs the converter's `main()` with `--out <scratch>/sortformer-tiny/sortformer-tiny-F32.gguf` from
`../shared/models` (the converter names the variant `stt.variant` after the output's parent folder), then
moves the file here. Nothing of the converter is changed.

Step 3 writes `<gguf stem>.ref.json` next to each file: for every mixture of ../shared/models/sortformer-tiny,
`transcribe_cpp.Model(gguf, backend="cpu").diarize_session(n_threads=1).run(pcm)` (speaker segments) in a
fresh process per run, once as is (the runtime's own streaming geometry) and once with
TRANSCRIBE_SORTFORMER_STREAM_RC=2 (the .nemo's chunk_right_context, which the GGUF does not carry), each with
TRANSCRIBE_DUMP_DIR + TRANSCRIBE_SORTFORMER_OFFLINE_DUMP set so the runtime also writes its per-frame streaming
probabilities (`diar.probs`) and its offline full-context ones (`diar.preds_offline`); a run without the dump
checks the segments do not depend on it. Probabilities are compared with NeMo's references.json.
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tcpp_refs as R  # noqa: E402

SHARED = R.SHARED
HOME = R.GGUF / "sortformer"
SOURCE = "models/sortformer-tiny/sortformer-tiny.nemo"  # relative to shared/
VARIANT = "sortformer-tiny"
MIXES = ["mix0", "mix1", "mix2"]
QUANTS = ["F16", "Q8_0"]
HOW = ("tools/make_sortformer_gguf_refs.py refs: in a fresh process per run, "
       "transcribe_cpp.Model(gguf, backend='cpu') -> diarize_session(n_threads=1) -> run(pcm float32 "
       "16 kHz mono) -> speaker segments (t0_ms, t1_ms, 1-based speaker_id); with TRANSCRIBE_DUMP_DIR and "
       "TRANSCRIBE_SORTFORMER_OFFLINE_DUMP=1 set the runtime also writes diar.probs (its streaming "
       "per-frame probabilities, from which the segments are cut at > 0.5) and diar.preds_offline (a "
       "full-context forward it runs only for that dump); probs in JSON with 7 significant digits. "
       "geometry runtime_default: no override; right_context_2: TRANSCRIBE_SORTFORMER_STREAM_RC=2 "
       "(the .nemo's chunk_right_context).")


def convert(args) -> int:
    if args.gguf_site is not None:
        sys.path.append(str(args.gguf_site.resolve()))
    # the converter inserts upstream/scripts into sys.path itself (for lib.gguf_common)
    mod = R.load_converter(args.upstream, "convert-sortformer.py", "convert_sortformer")
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / f"{VARIANT}-F32.gguf"
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp) / VARIANT / out.name  # parent folder name -> stt.variant
        cwd, argv = os.getcwd(), sys.argv
        os.chdir(SHARED / "models")
        try:
            sys.argv = ["convert-sortformer.py", os.path.relpath(SHARED / SOURCE, SHARED / "models"),
                        "--out", str(scratch)]
            print("run:", " ".join(sys.argv), flush=True)
            rc = mod.main()
        finally:
            os.chdir(cwd)
            sys.argv = argv
        shutil.move(str(scratch), out)
    R.report(out)
    return rc


# ------------------------------------------------------------------------------------------------
# 2. quantize
# ------------------------------------------------------------------------------------------------


def quantize(args) -> int:
    src = args.out / f"{VARIANT}-F32.gguf"
    return R.quantize(args.quantizer, [(src, args.out / f"{VARIANT}-{q}.gguf", q) for q in args.quants.split(",")])


# ------------------------------------------------------------------------------------------------
# 3. refs (transcribe.cpp venv)
# ------------------------------------------------------------------------------------------------


def _one(gguf: str, wav: str, out_json: str) -> int:
    """One diarization run in this (fresh) process; the environment says what to dump."""
    import numpy as np
    import soundfile as sf
    import transcribe_cpp as T

    data, sr = sf.read(wav, dtype="float32", always_2d=True)
    if sr != 16000:
        raise SystemExit(f"{wav}: {sr} Hz")
    pcm = np.ascontiguousarray(data.mean(axis=1), dtype=np.float32)
    with T.Model(gguf, backend="cpu") as model:
        info = {"arch": model.arch, "variant": model.variant, "roles": sorted(r.name for r in model.roles),
                "diarize_info": vars(model.diarize_info)}
        with model.diarize_session(n_threads=1) as s:
            rows = s.run(pcm)
    segs = [{"t0_ms": r.t0_ms, "t1_ms": r.t1_ms, "speaker_id": r.speaker_id} for r in rows]
    Path(out_json).write_text(json.dumps({"model": info, "n_samples": int(pcm.shape[0]), "segments": segs}))
    return 0


def _read_dump(folder: Path, name: str):
    import numpy as np

    meta = json.loads((folder / f"{name}.json").read_text())
    arr = np.fromfile(folder / f"{name}.f32", dtype="<f4").reshape(meta["shape"])
    return arr


def _run(gguf: Path, wav: Path, env_extra: dict, dump: bool) -> dict:
    import numpy as np

    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRANSCRIBE_")}
        env.update(env_extra)
        if dump:
            env["TRANSCRIBE_DUMP_DIR"] = str(Path(tmp) / "dump")
            env["TRANSCRIBE_SORTFORMER_OFFLINE_DUMP"] = "1"
            (Path(tmp) / "dump").mkdir()
        out = Path(tmp) / "out.json"
        subprocess.run([sys.executable, __file__, "_one", str(gguf), str(wav), str(out)], env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        res = json.loads(out.read_text())
        if dump:
            probs = _read_dump(Path(tmp) / "dump", "diar.probs")
            off = _read_dump(Path(tmp) / "dump", "diar.preds_offline")
            res["probs"] = np.asarray(probs, dtype=np.float32).reshape(-1, probs.shape[-1])
            res["offline_probs"] = np.asarray(off, dtype=np.float32).reshape(-1, off.shape[-1])
    return res


def _segments_as_nemo(segs: list[dict]) -> list[str]:
    """The runtime's rows as NeMo's "start end speaker_k" strings (seconds, 3 decimals, 0-based speaker)."""
    return [f"{s['t0_ms'] / 1000:.3f} {s['t1_ms'] / 1000:.3f} speaker_{s['speaker_id'] - 1}" for s in segs]


def _cmp(a, b) -> dict:
    import numpy as np

    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return {"shape": [list(a.shape), list(b.shape)]}
    d = np.abs(a - b)
    return {"max_abs_diff": float(d.max()), "mean_abs_diff": float(d.mean()),
            "first_frame_over_1e-4": int(np.argmax(d.max(axis=1) > 1e-4)) if (d > 1e-4).any() else None,
            "same_side_of_0.5": bool(((a > 0.5) == (b > 0.5)).all())}


def _rounded(arr) -> list:
    return [[float(f"{v:.7g}") for v in row] for row in arr.tolist()]


def run_file(path: Path, label: str) -> dict:
    nemo = json.loads((SHARED / "models" / "sortformer-tiny" / "references.json").read_text())["mixtures"]
    runs = []
    info = None
    for mix in MIXES:
        wav = SHARED / "models" / "sortformer-tiny" / f"{mix}.wav"
        plain = _run(path, wav, {}, dump=False)
        info = plain["model"]
        for geometry, env in (("runtime_default", {}), ("right_context_2", {"TRANSCRIBE_SORTFORMER_STREAM_RC": "2"})):
            r = _run(path, wav, env, dump=True)
            if geometry == "runtime_default" and r["segments"] != plain["segments"]:
                raise SystemExit(f"{path.name} {mix}: segments differ with the tensor dump on")
            entry = {
                "audio": f"models/sortformer-tiny/{mix}.wav", "audio_sha256": R.sha256(wav), "mix": mix,
                "geometry": geometry, "env": env, "n_samples": r["n_samples"],
                "segments": r["segments"], "segments_nemo_style": _segments_as_nemo(r["segments"]),
                "n_frames": int(r["probs"].shape[0]), "probs": _rounded(r["probs"]),
                "offline_probs": _rounded(r["offline_probs"]),
                "vs_nemo": {
                    "offline_probs_vs_nemo_offline": _cmp(r["offline_probs"], nemo[mix]["offline"]["probs"]),
                    "probs_vs_nemo_streaming_sync": _cmp(r["probs"], nemo[mix]["streaming_sync"]["probs"]),
                    "probs_vs_nemo_streaming_async": _cmp(r["probs"], nemo[mix]["streaming_async"]["probs"]),
                },
            }
            runs.append(entry)
            print(path.name, mix, geometry, r["segments"], entry["vs_nemo"], flush=True)
    return {"model": info, "runs": runs}


def refs(args) -> int:
    files = [args.out / f"{VARIANT}-{q}.gguf" for q in args.files.split(",")]
    return R.write_refs(files, HOME, HOW, run_file, ensure_ascii=True)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "_one":
        return _one(*argv[1:4])
    return R.main(__doc__, HOME, {
        "convert": (convert, [(["--gguf-site"], dict(type=Path, help="folder holding the `gguf` package, appended "
                                                                     "to sys.path"))]),
        "quantize": (quantize, [(["--quants"], dict(default=",".join(QUANTS)))]),
        "refs": (refs, [(["--files"], dict(default="F32," + ",".join(QUANTS),
                                           help="type labels of sortformer-tiny-*.gguf"))])}, argv)


if __name__ == "__main__":
    raise SystemExit(main())
