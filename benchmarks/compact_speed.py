#!/usr/bin/env python
"""The compact and edge families (issue 35) side by side with their references, in one command and one table.

Run from the repository root with the project's Python (torch, this package importable):

    python3 benchmarks/compact_speed.py

    options: --families L      comma list of the families below (default all of them)
             --rounds N        timed calls of each engine after one warm-up (default 3)
             --threads N       threads of every engine (default 2)
             --seconds S       clip length (default 60)
             --models DIR      the folder holding the random models (default local-models in the repository)
             --out DIR         where each family's JSON and compact_speed.json go (default benchmarks/results)
             --hf-python P, --funasr-python P, --gigaam-python P
                               the references' Pythons (default .venv-nemo, .venv-funasr, .venv-gigaam in the
                               repository), handed to the scripts
             --precisions L    comma list of fp32, bf16, int8: each family runs those of them it has (default: each
                               family's script's own default)
             --skip-missing    leave out a family whose model is missing, instead of stopping
             --table-only      run nothing: the table from the families' JSON already in --out (each written
                               by its own run, e.g. a family re-run alone)

It runs each family's `benchmarks/<family>_speed.py` in turn (one after the other, never two at once), each with its
own defaults (its precisions, its reference's call, the largest published size with random weights, made by the
family's `make_*` script into the git-ignored local-models/; before it starts, it names every model that is
missing and the command that makes it), 60 s of speech and 2 threads (Kyutai STT: 10 s, one round, one engine
loaded at a time: its 2.6B LM in float32 takes transformers about 12 minutes a call on 60 s), and then prints one
Markdown table:

    family | model size | reference | reference RTFx | ours RTFx fp32 / bf16 / int8 | best ratio | peak RSS ratio |
    ids equal

  reference RTFx   the reference's best call (RTFx = audio seconds / best call) in float32 (its bfloat16 too where
                   it has one)
  ours RTFx        ours's best call in each precision the family's script runs ("-" where it runs none)
  best ratio       ours's best RTFx over all its precisions / the reference's best RTFx over all its precisions
  peak RSS ratio   ours / the reference, peak RSS (model load included) in float32
  ids equal        per precision, whether both engines emitted the same ids (int8 rows: ours int8 against the
                   reference in float32, so a few differing ids are expected)

Each family's own JSON lands in --out as `<family>_speed.json` (the same file its README section names), the
table and the figures it comes from in `compact_speed.json`. A family whose script fails is reported in the table
and the run goes on. The figures are only worth something on a quiet machine: check `uptime` first.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PYTHONS = {"hf": ("--hf-python", ".venv-nemo/bin/python"),
           "funasr": ("--funasr-python", ".venv-funasr/bin/python"),
           "gigaam": ("--ref-python", ".venv-gigaam/bin/python")}

# One entry a family: its speed script (written on benchmarks/side_by_side.py, whose JSON this reads), the size it
# stands in for, the model folder its script uses by default (under --models) and the command that makes it
# (None: the script makes it itself), and which reference Python it takes.
FAMILIES = {
    "moonshine": dict(script="moonshine_speed.py", size="moonshine-base (61.5 M)",
                      model="moonshine-base-random", python="hf", precisions=("fp32", "bf16", "int8"),
                      make=".venv-nemo/bin/python benchmarks/make_moonshine_model.py"),
    "moonshine_streaming": dict(script="moonshine_streaming_speed.py", size="moonshine-streaming-medium",
                                model="moonshine-streaming-medium-random", python="hf",
                                precisions=("fp32", "bf16", "int8"),
                                make=".venv-nemo/bin/python benchmarks/make_moonshine_streaming_model.py"),
    "granite_speech5": dict(script="granite_speech5_speed.py", size="granite-speech-5.0-470m-turboctc",
                            model="granite-speech5-random", python="hf",
                            precisions=("fp32", "bf16", "int8"),
                            make=".venv-nemo/bin/python benchmarks/make_granite_speech5_model.py"),
    "medasr": dict(script="medasr_speed.py", size="google/medasr (105 M)", model="medasr-random", python="hf",
                   precisions=("fp32", "bf16", "int8"),
                   make=".venv-nemo/bin/python benchmarks/make_medasr_model.py"),
    "gigaam": dict(script="gigaam_speed.py", size="GigaAM v3 e2e_rnnt", model="gigaam-v3-e2e-rnnt-random",
                   python="gigaam", make=None, precisions=("fp32", "int8")),  # gigaam_speed.py makes it in .venv-gigaam when absent
    "sensevoice": dict(script="sensevoice_speed.py", size="SenseVoiceSmall", model="sensevoice-small-random",
                       python="funasr", make="python3 benchmarks/make_sensevoice_model.py",
                       precisions=("fp32", "int8")),
    "parakeet_hf": dict(script="parakeet_hf_speed.py", size="parakeet-ctc-1.1b (transformers layout)",
                        model="parakeet-ctc-1.1b-hf-random", python="hf",
                        precisions=("fp32", "bf16", "int8"),
                        make=".venv-nemo/bin/python benchmarks/make_parakeet_hf_model.py"),
    # a 2.6B LM that reads its 10.4 GB of float32 weights for every 80 ms frame: transformers takes about 12 minutes
    # a call on 60 s here, so this family runs a shorter clip, one round, one engine loaded at a time (RAM), and
    # under --precisions only its int8 row (ours int8 beside transformers float32: its fastest CPU mode)
    "kyutai": dict(script="kyutai_speed.py", size="stt-2.6b-en", model="kyutai-stt-2.6b-random", python="hf",
                   make=".venv-nemo/bin/python benchmarks/make_kyutai_model.py", precisions=("int8",),
                   seconds=10.0, rounds=1, extra=["--one-at-a-time"]),
}
PRECISIONS = ("fp32", "bf16", "int8")


def summary(name: str, result: dict | None, error: str | None = None) -> dict:
    """The table's figures for one family from its script's JSON (side_by_side's layout)."""
    fam = FAMILIES[name]
    size = fam["size"]
    secs, rounds = (result.get("clip_seconds"), result.get("rounds")) if result else (None, None)
    if secs is not None and (secs != 60.0 or rounds != 3):  # a run shorter than the table's standard
        size += f" ({secs:g} s clip, {rounds} round(s))"
    row = dict(family=result["family"] if result else name, size=size,
               reference=result["reference"] if result else "-")
    if error or not result:
        return {**row, "error": error or "no results"}
    ref = result["ref_impl"]
    by = {r["precision"]: r for r in result["results"]}
    ref_best = {p: r[ref]["rtfx_best"] for p, r in by.items() if ref in r and p not in ("int8",)}
    if not ref_best and ref in by.get("int8", {}):
        ref_best = {"fp32": by["int8"][ref]["rtfx_best"]}  # an int8 row alone: it runs the reference in float32
    ours_best = {p: r["ours"]["rtfx_best"] for p, r in by.items() if "ours" in r}
    row["reference_rtfx"] = ref_best
    row["ours_rtfx"] = ours_best
    if ref_best and ours_best:
        row["best_ratio"] = round(max(ours_best.values()) / max(ref_best.values()), 2)
    f = by.get("fp32")
    if f and ref in f and "ours" in f:
        row["peak_rss_ratio"] = round(f["ours"]["peak_rss_mb"] / f[ref]["peak_rss_mb"], 2)
    row["ids_equal"] = {}
    for p, r in by.items():
        if ref in r and "ours" in r:
            a, b = r[ref]["token_ids"], r["ours"]["token_ids"]
            n = min(len(a), len(b))
            k = next((i for i in range(n) if a[i] != b[i]), n)
            row["ids_equal"][p] = "yes" if a == b else f"no (from token {k} of {len(b)})"
    return row


def markdown(rows: list[dict]) -> str:
    head = ["family", "model size", "reference", "reference RTFx", "ours RTFx fp32", "bf16", "int8", "best ratio",
            "peak RSS ratio", "ids equal"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for r in rows:
        if "error" in r:
            cells = [r["family"], r["size"], r["reference"], r["error"]] + ["-"] * 6
        else:
            ref = ", ".join(f"{v:.2f} ({p})" for p, v in r["reference_rtfx"].items()) or "-"
            ours = [f"{r['ours_rtfx'][p]:.2f}" if p in r["ours_rtfx"] else "-" for p in PRECISIONS]
            cells = [r["family"], r["size"], r["reference"], ref, *ours,
                     f"{r['best_ratio']:.2f}x" if "best_ratio" in r else "-",
                     f"{r['peak_rss_ratio']:.2f}" if "peak_rss_ratio" in r else "-",
                     "; ".join(f"{p}: {v}" for p, v in r["ids_equal"].items()) or "-"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--models", help="the folder of the random models (default local-models in the repository)")
    ap.add_argument("--out", help="where the JSON goes (default benchmarks/results in the repository)")
    ap.add_argument("--hf-python")
    ap.add_argument("--funasr-python")
    ap.add_argument("--gigaam-python")
    ap.add_argument("--precisions", help="comma list of fp32, bf16, int8: each family runs those it has (default: "
                                         "each family's own default)")
    ap.add_argument("--skip-missing", action="store_true")
    ap.add_argument("--table-only", action="store_true",
                    help="run nothing: the table from the families' JSON already in --out (each from its own run)")
    args = ap.parse_args(argv)
    names = [f.strip() for f in args.families.split(",") if f.strip()]
    if not names or not set(names) <= set(FAMILIES):
        ap.error(f"families: {', '.join(FAMILIES)}")
    models = Path(os.path.abspath(args.models)) if args.models else REPO / "local-models"
    out = Path(os.path.abspath(args.out)) if args.out else HERE / "results"
    given = {"hf": args.hf_python, "funasr": args.funasr_python, "gigaam": args.gigaam_python}
    pythons = {k: os.path.abspath(v) if v else str(REPO / PYTHONS[k][1]) for k, v in given.items()}
    missing = [] if args.table_only else \
        [n for n in names if FAMILIES[n]["make"] and not (models / FAMILIES[n]["model"]).exists()]
    for n in [] if args.table_only else names:
        if not FAMILIES[n]["make"] and not (models / FAMILIES[n]["model"]).exists():
            print(f"{n}: {models / FAMILIES[n]['model']} is missing; {FAMILIES[n]['script']} makes it first "
                  f"(in its reference's venv)", file=sys.stderr)
    if missing:
        print("missing models (make them from the repository root, or pass --models):", file=sys.stderr)
        for n in missing:
            print(f"  {n}: {models / FAMILIES[n]['model']}\n      {FAMILIES[n]['make']} "
                  f"{models / FAMILIES[n]['model']}", file=sys.stderr)
        if not args.skip_missing:
            return 2
        names = [n for n in names if n not in missing]
    out.mkdir(parents=True, exist_ok=True)
    started, rows = time.strftime("%Y-%m-%d %H:%M:%S"), []
    for n in names:
        fam = FAMILIES[n]
        path = out / f"{Path(fam['script']).stem}.json"
        option = PYTHONS[fam["python"]][0]
        seconds = min(args.seconds, fam.get("seconds", args.seconds))
        rounds = min(args.rounds, fam.get("rounds", args.rounds))
        cmd = [sys.executable, str(HERE / fam["script"]), "--model", str(models / fam["model"]),
               option, pythons[fam["python"]], "--rounds", str(rounds), "--threads", str(args.threads),
               "--seconds", str(seconds), "--json", str(path), *fam.get("extra", [])]
        if args.precisions:
            wanted = [p for p in args.precisions.split(",") if p in fam["precisions"]]
            cmd += ["--precisions", ",".join(wanted or fam["precisions"][:1])]
        if args.table_only:
            result = json.loads(path.read_text()) if path.exists() else None
            rows.append(summary(n, result, None if result and result.get("complete") else "no complete results"))
            continue
        print(f"\n[{time.strftime('%H:%M:%S')}] {n}: {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
        if path.exists():
            path.unlink()  # a stale file must not pass for this run's figures
        rc = subprocess.run(cmd, cwd=REPO).returncode
        result = json.loads(path.read_text()) if path.exists() else None
        error = None if rc == 0 and result and result.get("complete") else f"failed (exit {rc})"
        rows.append(summary(n, result, error))
    text = markdown(rows)
    from machine import cpu_info, cpu_line, package_commit

    record = dict(started=started, package_commit=package_commit(), rounds=args.rounds, threads=args.threads,
                  clip_seconds=args.seconds,
                  models=str(models.relative_to(REPO)) if models.is_relative_to(REPO) else models.name, **cpu_info(), families=rows, table=text)
    (out / "compact_speed.json").write_text(json.dumps(record, indent=2) + "\n")
    print(f"\nCompact and edge families against their references, ours at {record['package_commit']}, "
          f"{args.seconds:g} s of speech, {args.threads} threads, {args.rounds} alternating rounds after 1 warm-up; "
          f"{cpu_line()}\n")
    print(text)
    print(f"\nwritten {out / 'compact_speed.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
