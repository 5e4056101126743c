#!/usr/bin/env python
"""Moonshine (full-size moonshine-base architecture) on the CPU: speed (RTFx) and peak memory, ours against
transformers.

Run from the repository root with the project's Python (torch, this package importable):

    python3 benchmarks/moonshine_speed.py --json benchmarks/results/moonshine_speed.json

    options: --model DIR       the transformers-format folder (default local-models/moonshine-base-random, made by
                               benchmarks/make_moonshine_model.py)
             --hf-python P     Python of a virtual environment with transformers 5.25 (default .venv-nemo/bin/python,
                               made by tools/setup_nemo_venv.sh)
             --threads N       torch threads and OMP_NUM_THREADS in every child (default 2)
             --rounds N        timed calls of each engine after one warm-up (default 3)
             --seconds S       clip length (default 60)
             --precisions L    comma list of fp32, bf16 (default fp32,bf16)
             --impls L         comma list of hf, ours (default hf,ours)

The clip: `S` seconds of real speech, the dev utterances of ../shared/audio/dev joined end to end
(benchmarks/speech_clip.py), float32 PCM at 16 kHz.

Long input: transformers has no long-input path for Moonshine (the models are trained on clips under ~30 s), so
the parent cuts the clip once, as ours cuts it (`transcribe.long_input.cut_spans`, max_piece_s 30 at pauses, on the
encoder's 384-sample grid), and both engines decode the same pieces under the model card's bound
(max_length = int(samples * 6.5 / 16000) per piece, the start token included): the same work, so the token ids are
compared.

One child process per engine and precision, both loaded at the same time, their calls alternating (the order flips
every round), one call at a time:
  hf    transformers (in the --hf-python environment): Wav2Vec2FeatureExtractor and
        MoonshineForConditionalGeneration.from_pretrained(model, dtype=torch.float32 | torch.bfloat16), eval(); a
        call runs each piece as the model card does: feature_extractor(piece, return_tensors="pt"),
        model.generate(**inputs, max_length=the card's, do_sample=False, num_beams=1) under torch.inference_mode(),
        tokenizer decode (skip_special_tokens) of each, the texts joined with a space.
  ours  this package: transcribe.runtime.tune_malloc(), transcribe.load_model(model, threads=N, dtype=None |
        "bfloat16"), then model.transcribe(pcm) (greedy, max_piece_s 30: the same pieces, decoded as one batch).
Each child: one warm-up call, then one timed call per round. Reported per engine: load time, best and median call,
RTFx = audio seconds / best (and / median), peak RSS (getrusage ru_maxrss, which includes the model load), the
tokens emitted and whether both emitted the same ids. Ratios ours/transformers: of the best calls, of the medians,
and the median of the per-round ratios. The CPU model and the load average before and after are recorded.

Timing on a shared machine is noisy: check `uptime` first and run when the load average is low.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from machine import cpu_info, cpu_line, package_commit
from parakeet_rtfx import RESULT_TAG, ChildProcess, _peak_rss_mb, _rss_mb, serve_calls, shown, summarize

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SAMPLE_RATE = 16000
DEFAULT_MODEL = "local-models/moonshine-base-random"  # benchmarks/make_moonshine_model.py
DEFAULT_HF_PYTHON = ".venv-nemo/bin/python"  # tools/setup_nemo_venv.sh
MAX_PIECE_S = 30.0  # ours: its default
GRAIN = 384  # samples per encoder frame


# --------------------------------------------------------------------------------------
# children (fresh interpreters; only the standard library at module level)
# --------------------------------------------------------------------------------------


def _hf_child(model_path: str, precision: str, spans: list):
    import torch
    from transformers import MoonshineForConditionalGeneration, PreTrainedTokenizerFast, Wav2Vec2FeatureExtractor
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    rss_import = _rss_mb()
    t0 = time.perf_counter()
    fe = Wav2Vec2FeatureExtractor.from_pretrained(model_path)
    tok = PreTrainedTokenizerFast(tokenizer_file=str(Path(model_path) / "tokenizer.json"))
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[precision]
    model = MoonshineForConditionalGeneration.from_pretrained(model_path, dtype=dtype).eval()
    load_s = time.perf_counter() - t0
    eos = model.generation_config.eos_token_id

    def run(pcm):
        texts, ids = [], []
        for a, b in spans:
            inputs = fe(pcm[a:b], sampling_rate=SAMPLE_RATE, return_tensors="pt")
            max_length = int((inputs.attention_mask.sum(dim=-1) * (6.5 / SAMPLE_RATE)).max().item())
            if max_length <= 1:
                continue
            inputs["input_values"] = inputs["input_values"].to(model.dtype)
            with torch.inference_mode():
                seq = model.generate(**inputs, max_length=max_length, do_sample=False, num_beams=1)[0].tolist()
            gen = seq[1:]
            texts.append(tok.decode(gen, skip_special_tokens=True).strip())
            ids += gen[:gen.index(eos)] if eos in gen else gen
        return " ".join(t for t in texts if t), ids

    return rss_import, load_s, run


def _ours_child(model_path: str, precision: str, threads: int):
    import transcribe
    import transcribe.runtime

    transcribe.runtime.tune_malloc()  # the CLI does the same before it loads a model
    rss_import = _rss_mb()
    t0 = time.perf_counter()
    model = transcribe.load_model(model_path, threads=threads, dtype={"fp32": None, "bf16": "bfloat16"}[precision])
    load_s = time.perf_counter() - t0

    def run(pcm):
        t = model.transcribe(pcm, sample_rate=SAMPLE_RATE, max_piece_s=MAX_PIECE_S)
        return t.text, [tok.id for tok in t.tokens]

    return rss_import, load_s, run


def child_main(args) -> int:
    import numpy as np
    import soundfile as sf
    import torch

    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    pcm, sr = sf.read(args.clip, dtype="float32")
    assert sr == SAMPLE_RATE and pcm.ndim == 1
    pcm = np.ascontiguousarray(pcm)
    if args.child == "hf":
        rss_import, load_s, run = _hf_child(args.model, args.precision, json.loads(args.spans))
    else:
        rss_import, load_s, run = _ours_child(args.model, args.precision, args.threads)
    rss_loaded = _rss_mb()
    warmup_s, times, (text, ids) = serve_calls(run, pcm, load_s)
    result = dict(
        impl=args.child, precision=args.precision, threads=torch.get_num_threads(), audio_s=len(pcm) / SAMPLE_RATE,
        load_s=round(load_s, 2), warmup_s=round(warmup_s, 2), times_s=[round(t, 3) for t in times],
        peak_rss_mb=round(_peak_rss_mb()), rss_after_import_mb=round(rss_import), rss_after_load_mb=round(rss_loaded),
        tokens=len(ids), token_ids=ids, text80=text[:80], torch=torch.__version__,
    )
    print(RESULT_TAG + json.dumps(result), flush=True)
    return 0


# --------------------------------------------------------------------------------------
# parent
# --------------------------------------------------------------------------------------


class Child(ChildProcess):
    def __init__(self, python: str, impl: str, model: str, precision: str, clip: Path, spans: list, args):
        env = dict(os.environ)
        env["OMP_NUM_THREADS"] = str(args.threads)
        env["MKL_NUM_THREADS"] = str(args.threads)
        env["TOKENIZERS_PARALLELISM"] = "false"
        if impl == "ours":
            env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        cmd = [python, str(Path(__file__).resolve()), "--child", impl, "--precision", precision, "--clip", str(clip),
               "--model", model, "--threads", str(args.threads), "--spans", json.dumps(spans)]
        super().__init__(f"{impl} {Path(model).name} {precision}", cmd, env)


def same_ids(h: dict, o: dict) -> str:
    if h["token_ids"] == o["token_ids"]:
        return "yes"
    n = min(len(h["token_ids"]), len(o["token_ids"]))
    k = next((i for i in range(n) if h["token_ids"][i] != o["token_ids"][i]), n)
    return f"no (from token {k})"


def table(rows: list[dict]) -> str:
    head = ["precision", "transformers RTFx best / median", "ours RTFx best / median", "ours/transformers best",
            "median", "per round", "transformers peak RSS", "ours peak RSS", "tokens transformers / ours",
            "same ids"]
    lines = [head]
    for r in rows:
        h, o = r.get("hf"), r.get("ours")
        rt = lambda d: f"{d['rtfx_best']:.2f} / {d['rtfx_median']:.2f}" if d else "-"  # noqa: E731
        rss = lambda d: f"{d['peak_rss_mb']} MB" if d else "-"  # noqa: E731
        both = h and o
        lines.append([
            r["precision"], rt(h), rt(o),
            f"{h['best_s'] / o['best_s']:.2f}x" if both else "-",
            f"{h['median_s'] / o['median_s']:.2f}x" if both else "-",
            f"{r['round_ratio_median']:.2f}x" if r.get("round_ratio_median") else "-",
            rss(h), rss(o), f"{h['tokens'] if h else '-'} / {o['tokens'] if o else '-'}",
            same_ids(h, o) if both else "-"])
    w = [max(len(str(line[i])) for line in lines) for i in range(len(head))]
    out = [" | ".join(str(c).ljust(w[i]) for i, c in enumerate(line)) for line in lines]
    out.insert(1, "-+-".join("-" * x for x in w))
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help=f"the model folder (default {DEFAULT_MODEL} in the repository)")
    ap.add_argument("--hf-python", help=f"transformers' Python (default {DEFAULT_HF_PYTHON} in the repository)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--impls", default="hf,ours")
    ap.add_argument("--json", metavar="PATH", help="write the results as JSON here")
    ap.add_argument("--child", choices=["hf", "ours"], help=argparse.SUPPRESS)
    ap.add_argument("--precision", choices=["fp32", "bf16"], help=argparse.SUPPRESS)
    ap.add_argument("--clip", help=argparse.SUPPRESS)
    ap.add_argument("--spans", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child_main(args)
    model = os.path.abspath(args.model) if args.model else str(REPO / DEFAULT_MODEL)
    args.hf_python = os.path.abspath(args.hf_python) if args.hf_python else str(REPO / DEFAULT_HF_PYTHON)
    precisions = [p.strip() for p in args.precisions.split(",") if p.strip()]
    impls = [i.strip() for i in args.impls.split(",") if i.strip()]
    if not set(precisions) <= {"fp32", "bf16"} or not set(impls) <= {"hf", "ours"}:
        ap.error("precisions: fp32, bf16; impls: hf, ours")
    if not (Path(model) / "config.json").exists():
        ap.error(f"{model}: no model (make it with benchmarks/make_moonshine_model.py)")
    if "hf" in impls and not Path(args.hf_python).exists():
        ap.error(f"{args.hf_python}: no such Python (make the venv with tools/setup_nemo_venv.sh, or pass --hf-python)")
    import soundfile as sf

    from speech_clip import speech_clip

    sys.path.insert(0, str(REPO))
    from transcribe.long_input import cut_spans

    pcm, used = speech_clip(args.seconds)
    spans = [[int(a), int(b)] for a, b in cut_spans(pcm, SAMPLE_RATE, MAX_PIECE_S, "auto", grain=GRAIN)]
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    commit = package_commit()
    load_start = os.getloadavg()
    rows = []

    def write(rows: list[dict], complete: bool) -> str:
        text = table(rows)
        if args.json:
            out = dict(started=started, complete=complete, package_commit=commit, model=shown(model),
                       clip_seconds=args.seconds, clip_utterances=used, piece_samples=[b - a for a, b in spans],
                       threads=args.threads, rounds=args.rounds, **cpu_info(),
                       loadavg_start=[round(x, 2) for x in load_start],
                       loadavg_end=[round(x, 2) for x in os.getloadavg()], results=rows, table=text)
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
        return text

    def python(impl):
        return args.hf_python if impl == "hf" else sys.executable

    with tempfile.TemporaryDirectory() as tmp:
        clip = Path(tmp) / "clip.wav"
        sf.write(clip, pcm, SAMPLE_RATE, subtype="FLOAT")
        for prec in precisions:
            row = {"precision": prec}
            ratios, loads = [], []
            kids = {i: Child(python(i), i, model, prec, clip, spans, args) for i in impls}
            for k in range(args.rounds):
                order = impls if k % 2 == 0 else impls[::-1]
                got = {i: kids[i].call() for i in order}
                if len(got) == 2:
                    ratios.append(got["hf"] / got["ours"])
                loads.append(round(os.getloadavg()[0], 2))
                print(f"    round {k + 1}: " + ", ".join(f"{i} {got[i]:.2f} s" for i in impls)
                      + f" (load average {loads[-1]:.2f})", file=sys.stderr, flush=True)
            for i in impls:
                row[i] = summarize({**kids[i].finish(), "load_s": kids[i].ready["load_s"],
                                    "warmup_s": kids[i].ready["warmup_s"]})
            if ratios:
                row["round_ratios"] = [round(x, 3) for x in ratios]
                row["round_ratio_median"] = round(statistics.median(ratios), 3)
            row["loadavg_rounds"] = loads
            row["loadavg_after"] = round(os.getloadavg()[0], 2)
            rows.append(row)
            print(table([row]), file=sys.stderr, flush=True)
            write(rows, complete=False)  # a long run keeps what it has measured
    text = write(rows, complete=True)
    print(f"\nMoonshine (full-size base architecture, random weights), ours at {commit}, {args.seconds:g} s clip in "
          f"{len(spans)} pieces, {args.threads} threads, {args.rounds} alternating rounds after 1 warm-up; "
          f"{cpu_line()}; load average at start {load_start[0]:.2f}, at end {os.getloadavg()[0]:.2f}\n")
    print(text)
    if args.json:
        print(f"\nwritten {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
