#!/usr/bin/env python
"""Run the upstream C++ runtimes on the GGUF test files of tests/models/gguf/ and write, next to each
file, `<file>.ref.json`: what that runtime transcribes from it (the same format as
../shared/models/gguf/*/*.ref.json; README there and in tests/models/gguf/).

    <transcribe-cpp venv>/bin/python tools/upstream_gguf_reference.py [--out DIR] \
        [--parakeet-cli PATH --parakeet-cpp-src DIR] [--check-shared]

* transcribe-cpp/*.gguf: the transcribe.cpp runtime of the Python package `transcribe-cpp` (its own wheel
  `transcribe-cpp-native` ships libtranscribe), CPU backend, one thread: Model(path, backend="cpu") ->
  session(n_threads=1) -> run(pcm, timestamps="token"); the text and every token row.
* parakeet-cpp/*.gguf: `parakeet-cli transcribe --model F --input WAV --threads 1 --json [--decoder ctc|tdt]`
  of a parakeet.cpp build (--parakeet-cli; --parakeet-cpp-src is its source tree, for the commits
  recorded). Hybrids run twice (ctc, tdt = the transducer), others once with the model's own decoder
  ("default"). parakeet.cpp's joint hard-codes `joint.joint_net.2.*`; a file whose joint output layer is
  `joint.joint_net.1.*` (NeMo's index when the joint's dropout is 0) crashes it, so such a file runs as a
  throw-away copy with only those two tensor names changed (`ran_on_renamed_copy`).

The files run: every Q8_0 file there, and the F32 file of the same model, which is not committed
(tools/make_gguf_test_files.py gguf --f32 writes it; its sha256 is recorded, and the test remakes it with
`transcribe convert` and checks that sha256). Clips: the ones tools/nemo_reference.py picks (jfk, one
LibriSpeech clip, the three shortest dev clips under 6 s). Audio paths are written relative to ../shared.

--check-shared instead reruns the runtimes on ../shared/models/gguf's Parakeet files and prints, per file,
whether the token ids equal the committed reference (the shared references were made by other builds).
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tcpp_refs import REPO, SHARED, sha256, shown  # noqa: E402

OUT = REPO / "tests" / "models" / "gguf"
TRANSDUCER_JOINT_OUT = (b"joint.joint_net.1.", b"joint.joint_net.2.")


def pick_clips(n_dev: int = 3) -> list[str]:
    """Paths relative to ../shared: jfk, one LibriSpeech clip and the n_dev shortest dev clips under 6 s
    (with 3, the choice of tools/nemo_reference.py's pick_clips, which needs NeMo's venv to import)."""
    rows = [json.loads(line) for line in open(SHARED / "audio" / "dev" / "manifest.jsonl") if line.strip()]
    rows = sorted((r for r in rows if r["duration"] < 6.0), key=lambda r: (r["duration"], r["audio"]))
    return ["audio/jfk.wav", "audio/ls_2086-149220-0033.wav"] + [f"audio/dev/{r['audio']}" for r in rows[:n_dev]]


def load_pcm(rel: str) -> np.ndarray:
    data, sr = sf.read(str(SHARED / rel), dtype="float32", always_2d=True)
    if sr != 16000:
        raise SystemExit(f"{rel}: {sr} Hz (the runtimes take 16 kHz)")
    return np.ascontiguousarray(data.mean(axis=1), dtype=np.float32)


# ------------------------------------------------------------------------------------------------
# transcribe.cpp
# ------------------------------------------------------------------------------------------------


def tcpp_runtime() -> str:
    import transcribe_cpp as T

    return (f"transcribe.cpp Python runtime: transcribe-cpp {T.__version__} + transcribe-cpp-native "
            f"{T.native_version()} (PyPI wheels; libtranscribe and ggml from the wheel)")


TCPP_HOW = ("transcribe_cpp.Model(gguf, backend='cpu') -> model.session(n_threads=1) -> "
            "session.run(pcm float32 16 kHz mono, timestamps='token') -> result.text and every "
            "result.tokens row (id, text as piece, p, t0_ms, t1_ms)")


def tcpp_run(path: Path, clips: list[str]) -> list[dict]:
    import transcribe_cpp as T

    runs = []
    with T.Model(str(path), backend="cpu") as model, model.session(n_threads=1) as session:
        for rel in clips:
            pcm = load_pcm(rel)
            r = session.run(pcm, timestamps="token")
            tokens = [{"id": t.id, "piece": t.text, "p": round(float(t.p), 6), "t0_ms": t.t0_ms, "t1_ms": t.t1_ms}
                      for t in r.tokens]
            runs.append({"audio": rel, "audio_sha256": sha256(SHARED / rel), "rc": 0,
                         "result": {"text": r.text, "n_samples": int(pcm.shape[0]), "tokens": tokens}})
    return runs


# ------------------------------------------------------------------------------------------------
# parakeet.cpp
# ------------------------------------------------------------------------------------------------


def git_head(d: Path) -> str:
    return subprocess.run(["git", "-C", str(d), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


def pcpp_runtime(src: Path | None) -> str:
    if src is None:
        return "parakeet.cpp (parakeet-cli; source commit not given)"
    return (f"mudler/parakeet.cpp (snapshot of fork tangfeng2/parakeet.cpp @ {git_head(src)}, ggml-org/ggml @ "
            f"{git_head(src / 'third_party' / 'ggml')} + the repo's 4 ggml patches)")


PCPP_HOW = ("parakeet-cli transcribe --model <gguf> --input <wav> --threads 1 --json [--decoder ctc|tdt]; "
            "CPU build (cmake -DCMAKE_BUILD_TYPE=Release: GGML_NATIVE, LLAMAFILE)")
RENAMED_NOTE = ("parakeet.cpp's C++ joint hard-codes joint.joint_net.2.*; this model stores the joint output "
                "Linear as joint.joint_net.1.* (NeMo index when jointnet.dropout is 0), so the shipped GGUF "
                "crashes parakeet-cli (SIGSEGV). The run used a throw-away copy with only those two tensor "
                "names changed (bytes, types, KV identical).")


def pcpp_arch(cli: Path, path: Path) -> str:
    out = subprocess.run([str(cli), "info", str(path)], capture_output=True, text=True, check=True).stdout
    return next(line.split(":", 1)[1].strip() for line in out.splitlines() if line.strip().startswith("arch "))


def renamed_copy(path: Path, tmp: Path) -> Path | None:
    """A copy with joint.joint_net.1.{weight,bias} named .2 (same length, so only the two names change),
    or None when the file has no such tensor."""
    data = path.read_bytes()
    old, new = TRANSDUCER_JOINT_OUT
    n = data.count(old)
    if n == 0:
        return None
    if n != 2 or data.count(new) != 0:
        raise SystemExit(f"{path.name}: {n} '{old.decode()}' strings, expected the weight and bias names only")
    out = tmp / path.name
    out.write_bytes(data.replace(old, new))
    return out


def pcpp_run(cli: Path, path: Path, clips: list[str], arch: str, tmp: Path) -> tuple[list[dict], bool]:
    copy = renamed_copy(path, tmp)
    run_path = copy or path
    decoders = ["ctc", "tdt"] if arch.startswith("hybrid") else ["default"]
    runs = []
    for rel in clips:
        for dec in decoders:
            cmd = [str(cli), "transcribe", "--model", str(run_path), "--input", str(SHARED / rel), "--threads", "1",
                   "--json"] + ([] if dec == "default" else ["--decoder", dec])
            p = subprocess.run(cmd, capture_output=True, text=True)
            line = next((ln for ln in p.stdout.splitlines() if ln.startswith("{")), None)
            if p.returncode != 0 or line is None:
                raise SystemExit(f"{path.name} {rel} {dec}: rc {p.returncode}\n{p.stderr[-2000:]}")
            runs.append({"audio": rel, "audio_sha256": sha256(SHARED / rel), "decoder": dec, "rc": 0,
                         "result": json.loads(line)})
    if copy is not None:
        copy.unlink()
    return runs, copy is not None


# ------------------------------------------------------------------------------------------------


def write_ref(ref: Path, doc: dict) -> None:
    ref.parent.mkdir(parents=True, exist_ok=True)
    ref.write_text(json.dumps(doc, ensure_ascii=False, separators=(",", ":")) + "\n")
    print(f"{shown(ref)}: " + " | ".join(
        f"{r.get('decoder', '')} {len(r['result']['tokens'])} tokens" for r in doc["runs"][:4]), flush=True)


def targets(schema: str, shared: bool, out: Path = OUT) -> list[tuple[Path, Path]]:
    """(GGUF, its reference) for the Q8_0 and F32 files of one schema: `out`/<schema>/ (default
    tests/models/gguf/) with the reference beside the file, or the shared Parakeet files with the reference
    under `out`/shared/<schema>/."""
    d = (SHARED / "models" / "gguf" if shared else out) / schema
    files = [p for p in sorted(d.glob("*.gguf")) if p.stem.lower().endswith(("-q8_0", "-f32"))
             and not p.name.startswith("granite")]
    return [(p, out / "shared" / schema / f"{p.stem}.ref.json" if shared else p.with_suffix(".ref.json"))
            for p in files]


def _where(path: Path, shared: bool) -> dict:
    return {"gguf": path.name, **({"gguf_dir": f"models/gguf/{path.parent.name}"} if shared else {}),
            "gguf_sha256": sha256(path)}


def make_refs(cli: Path | None, src: Path | None, n_dev: int, shared: bool, out: Path = OUT) -> int:
    clips = pick_clips(n_dev)
    for path, ref in targets("transcribe-cpp", shared, out):
        write_ref(ref, {"runtime": tcpp_runtime(), "how": TCPP_HOW, **_where(path, shared),
                        "runs": tcpp_run(path, clips)})
    if cli is None:
        print("no --parakeet-cli: parakeet-cpp files skipped")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        for path, ref in targets("parakeet-cpp", shared, out):
            arch = pcpp_arch(cli, path)
            runs, renamed = pcpp_run(cli, path, clips, arch, Path(tmp))
            doc = {"runtime": pcpp_runtime(src), "how": PCPP_HOW, "ran_on_renamed_copy": renamed}
            if renamed:
                doc["renamed_note"] = RENAMED_NOTE
            doc.update(**_where(path, shared), arch=arch, runs=runs)
            write_ref(ref, doc)
    return 0


def check_shared(cli: Path | None) -> int:
    """Our builds against the committed shared references (jfk only there)."""
    bad = 0
    gguf = SHARED / "models" / "gguf"
    with tempfile.TemporaryDirectory() as tmp:
        for path in sorted(gguf.glob("*/*.gguf")):
            if path.name.startswith("granite"):
                continue
            want = json.loads(path.with_suffix(".ref.json").read_text())["runs"]
            clips = [r["audio"] for r in want]
            if path.parent.name == "transcribe-cpp":
                got = tcpp_run(path, clips)
            elif cli is not None:
                got, _ = pcpp_run(cli, path, clips[:1], pcpp_arch(cli, path), Path(tmp))
            else:
                continue
            same = [[t["id"] for t in g["result"]["tokens"]] == [t["id"] for t in w["result"]["tokens"]]
                    for g, w in zip(got, want)]
            bad += not all(same)
            print(f"{path.parent.name}/{path.name}: {'same ids' if all(same) else 'DIFFERENT ids'} {same}")
    return 1 if bad else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parakeet-cli", type=Path, help="a built parakeet-cli (else parakeet-cpp files are skipped)")
    ap.add_argument("--parakeet-cpp-src", type=Path, help="its source tree (commits recorded in the references)")
    ap.add_argument("--dev-clips", type=int, default=3, help="how many of the shortest dev clips (default 3)")
    ap.add_argument("--shared", action="store_true",
                    help="run the shared Parakeet Q8_0/F32 files instead (references to tests/models/gguf/shared/)")
    ap.add_argument("--check-shared", action="store_true", help="rerun the shared files, compare ids, write nothing")
    ap.add_argument("--out", type=Path, default=OUT,
                    help="folder holding <schema>/ with the GGUF files (default tests/models/gguf)")
    args = ap.parse_args(argv)
    if not (SHARED / "audio").is_dir():
        print(f"{SHARED} not found (expected next to the repository)", file=sys.stderr)
        return 2
    if args.parakeet_cli is not None and not shutil.which(str(args.parakeet_cli)):
        print(f"{args.parakeet_cli}: not an executable", file=sys.stderr)
        return 2
    if args.check_shared:
        return check_shared(args.parakeet_cli)
    return make_refs(args.parakeet_cli, args.parakeet_cpp_src, args.dev_clips, args.shared, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
