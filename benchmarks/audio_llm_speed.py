#!/usr/bin/env python
"""Audio-LLM recognizers (Granite Speech, Qwen3-ASR, Voxtral, Canary-Qwen; full-size architectures) on the CPU:
speed (RTFx), peak memory and batched throughput, ours against transformers (Canary-Qwen: NeMo).

Run from the repository root with the project's Python (torch, this package importable):

    python3 benchmarks/audio_llm_speed.py --family granite   --json bench-out/audio_llm_speed_granite.json
    python3 benchmarks/audio_llm_speed.py --family qwen3_asr --json bench-out/audio_llm_speed_qwen3_asr.json
    python3 benchmarks/audio_llm_speed.py --family granite --batch 8 --json bench-out/audio_llm_batch_granite.json
    python3 benchmarks/audio_llm_speed.py --family voxtral --one-at-a-time --json bench-out/audio_llm_speed_voxtral.json
    python3 benchmarks/audio_llm_speed.py --family canary_qwen --one-at-a-time --json bench-out/audio_llm_speed_canary_qwen.json

    options: --family F        granite (granite-4.0-1b-speech), qwen3_asr (Qwen3-ASR-0.6B), voxtral
                               (Voxtral-Mini-3B-2507) or canary_qwen (canary-qwen-2.5b)
             --model DIR       the model folder (default local-models/granite-4.0-1b-speech-random,
                               qwen3-asr-0.6b-random, voxtral-mini-3b-random or canary-qwen-2.5b-random, made by
                               benchmarks/make_audio_llm_model.py)
             --hf-python P     Python of a virtual environment with transformers 5.25 (+ mistral-common for
                               voxtral, NeMo for canary_qwen; default .venv-nemo/bin/python, made by
                               tools/setup_nemo_venv.sh)
             --threads N       torch threads and OMP_NUM_THREADS in every child (default 2)
             --rounds N        timed calls of each engine after one warm-up (default 3)
             --seconds S       clip length (default 60; with --batch: each clip's, default 7.5)
             --max-new-tokens N  tokens generated per input, both engines (default 100)
             --precisions L    comma list of fp32, bf16, int8 (default fp32,bf16,int8; voxtral and canary_qwen
                               bf16,int8; int8: ours alone)
             --impls L         comma list of hf, ours (default hf,ours)
             --batch N         batched throughput instead: N different clips of --seconds as one call, against
                               the same N clips one call at a time (default off; the issue asks for 8)
             --one-at-a-time   load and time one engine, then the other (rounds not interleaved; for
                               machines without the memory for both models at once)

Default paths are relative to the repository root (git-ignored folders); paths given on the command line are
relative to the working directory.

The clip: `S` seconds of real speech, the dev utterances of ../shared/audio/dev joined end to end
(benchmarks/speech_clip.py), float32 PCM at 16 kHz handed to both engines as an array. --batch N: the first
N x S seconds of the same speech cut into N consecutive clips of S seconds (different audio, equal lengths, so
neither engine pads).

The same work in both: transformers does not cut long audio for these models (Granite's feature extractor has no
length limit; Qwen3-ASR's pads to the longest input, `truncation=False`; Voxtral's takes any number of 30 s
chunks in one input; NeMo's SALM encodes the whole clip, its config setting no encoder chunking), so the whole
clip is one input to both; ours is called with max_piece_s=120 (a piece every family accepts: Granite Speech
allows 10-120 s, Qwen3-ASR 10-1200 s, Voxtral 30-1800 s, Canary-Qwen 5-600 s), so it does not cut a clip of up
to 120 s either (the pieces are recorded). A random
model never emits EOS: both generate `max_new_tokens` tokens per input (counted and compared).

For each precision, one child process per engine, both with the same thread count, both loaded at the same
time (unless --one-at-a-time); their calls alternate (the order flips every round), one call at a time:
  hf    transformers (in the --hf-python environment): AutoProcessor.from_pretrained(model),
        GraniteSpeechForConditionalGeneration / Qwen3ASRForConditionalGeneration.from_pretrained(model,
        dtype=torch.float32 | torch.bfloat16) (bf16: the weights in bfloat16, as transformers' users run it),
        eval(). A call: the processor's inputs (granite: the tokenizer's chat template over one user turn
        "<|audio|>can you transcribe the speech into a written format?" with the generation prompt, then
        processor(text=[prompt] * n, audio=[pcm, ...], return_tensors="pt", padding=True); qwen3_asr:
        processor.apply_transcription_request(audio=..., language="English")), floating tensors cast to the
        model's dtype, model.generate(**inputs, max_new_tokens=N, do_sample=False, num_beams=1) under
        torch.inference_mode(), each row's new tokens decoded (granite: tokenizer.decode(skip_special_tokens=True);
        qwen3_asr: processor.decode(return_format="transcription_only")).
        Granite's feature extractor needs torchaudio for its MelSpectrogram, which cannot be installed next to
        this torch build: the child gives it a pure-torch MelSpectrogram instead (`melspectrogram_class`:
        torchaudio's defaults, a centred reflect-padded STFT with a periodic Hann window of win_length zero-padded
        to n_fft, power 2, HTK mel filters from transformers.audio_utils.mel_filter_bank without normalisation);
        the extractor's own code (log10, floor at max - 8, / 4 + 1, frame stacking) runs unchanged. Where
        torchaudio is installed, its own MelSpectrogram runs (the JSON's "mel" says which).
        voxtral (transformers + mistral-common) and canary_qwen (NeMo's SALM): benchmarks/audio_llm_hf.py's
        docstring (the inputs as tools/voxtral_reference.py and tools/canary_qwen_reference.py make them).
  ours  this package: transcribe.runtime.tune_malloc(), transcribe.load_model(model, threads=N, dtype=None |
        "bfloat16" | "int8"), then model.transcribe(pcm or [pcm, ...], max_new_tokens=N, max_piece_s=120,
        batch_size=n) (greedy; qwen3_asr and voxtral also language="en", as their references' prompts). A dtype the family refuses (int8 for Granite
        Speech today) is recorded as not implemented, not an error.
Each child: one warm-up, then one timed call (time.perf_counter) per round. Reported per engine: load time,
best and median call, RTFx = audio seconds / best (and / median), peak RSS (getrusage ru_maxrss, which
includes the model load) and peak RSS over the weights' size on disk (model*.safetensors), the pieces, the
tokens emitted and whether both engines emitted the same ids. Ratios ours/transformers: of the best calls,
of the medians, and the median of the per-round ratios.

--batch N: each round, every engine makes one batched call (the N clips as one call: ours a list with
batch_size=N; transformers one padded batch through the processor and one generate()) and one "one at a time"
call (the N clips as N calls in a row, timed together). Reported: both times (best, median), throughput (audio
seconds per second), the speed-up of batching (one-at-a-time time / batched time: best, median, per round),
and whether each clip's ids are the same batched and alone.

The CPU model and the load average before, during and after are recorded. Timing on a shared machine is
noisy: check `uptime` first and run when the load average is low.
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

from machine import cpu_info, cpu_line, package_commit  # benchmarks/ (this script's folder is on sys.path)
from parakeet_rtfx import RESULT_TAG, ChildProcess, _peak_rss_mb, _rss_mb, shown, summarize

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SAMPLE_RATE = 16000
DEFAULT_MODELS = {  # benchmarks/make_audio_llm_model.py
    "granite": "local-models/granite-4.0-1b-speech-random",
    "qwen3_asr": "local-models/qwen3-asr-0.6b-random",
    "voxtral": "local-models/voxtral-mini-3b-random",
    "canary_qwen": "local-models/canary-qwen-2.5b-random",
}
OUR_FAMILIES = {"granite": "granite_speech", "qwen3_asr": "qwen3_asr", "voxtral": "voxtral",
                "canary_qwen": "canary_qwen"}  # the package's family names
NAMES = {"granite": "Granite Speech (granite-4.0-1b-speech)", "qwen3_asr": "Qwen3-ASR-0.6B",
         "voxtral": "Voxtral-Mini-3B-2507", "canary_qwen": "Canary-Qwen-2.5B"}
REFERENCE = {"canary_qwen": "NeMo"}  # the reference's name in tables (else transformers)
# The precisions run by default: fp32 where both models fit in 24 GB at once (fp32 Voxtral is 18.7 GB of
# weights alone, NeMo loads Canary-Qwen in float32 anyway), bf16 and int8 (ours alone) everywhere.
DEFAULT_PRECISIONS = {"granite": "fp32,bf16,int8", "qwen3_asr": "fp32,bf16,int8", "voxtral": "bf16,int8",
                      "canary_qwen": "bf16,int8"}
DEFAULT_HF_PYTHON = ".venv-nemo/bin/python"  # tools/setup_nemo_venv.sh
MAX_PIECE_S = 120.0  # ours: a piece every family accepts (granite 10-120 s, qwen3_asr 10-1200, voxtral 30-1800,
#                     canary_qwen 5-600), so a clip of up to 120 s is not cut
PRECISIONS = ("fp32", "bf16", "int8")
OURS_DTYPES = {"fp32": None, "bf16": "bfloat16", "int8": "int8"}


# --------------------------------------------------------------------------------------
# children (fresh interpreters; only the standard library at module level)
# --------------------------------------------------------------------------------------


def _ours_child(family: str, model_path: str, precision: str, threads: int, max_new_tokens: int):
    import transcribe
    import transcribe.runtime
    from transcribe import long_input

    transcribe.runtime.tune_malloc()  # the CLI does the same before it loads a model
    rss_import = _rss_mb()
    t0 = time.perf_counter()
    model = transcribe.load_model(model_path, threads=threads, dtype=OURS_DTYPES[precision])
    load_s = time.perf_counter() - t0
    if model.family != OUR_FAMILIES[family]:
        raise SystemExit(f"{model_path} loaded as {model.family}, not {OUR_FAMILIES[family]}")
    opts = dict(max_new_tokens=max_new_tokens, max_piece_s=MAX_PIECE_S)
    if family in ("qwen3_asr", "voxtral"):
        opts["language"] = "en"  # the reference's prompt names English too (canary_qwen's names no language)
    grain = 320 if family == "granite" else 160  # the families' cut grids (a stacked frame, a mel hop)

    def run(pcms):
        got = model.transcribe(list(pcms), batch_size=len(pcms), **opts)
        # the pieces it cut (the same call its long-input path makes; outside the timing's concern)
        pieces = [[b - a for a, b in long_input.cut_spans(p, SAMPLE_RATE, MAX_PIECE_S, "auto", grain=grain)]
                  for p in pcms]
        return [t.text for t in got], [[tok.id for tok in t.tokens] for t in got], pieces

    return rss_import, load_s, run


def child_main(args) -> int:
    import numpy as np
    import soundfile as sf
    import torch

    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    pcm, sr = sf.read(args.clip, dtype="float32")
    assert sr == SAMPLE_RATE and pcm.ndim == 1
    n = args.split
    clips = [np.ascontiguousarray(x) for x in np.split(pcm, n)]
    try:
        if args.child == "hf":
            from audio_llm_hf import hf_child

            rss_import, load_s, run = hf_child(args.family, args.model, args.precision, args.max_new_tokens, _rss_mb)
        else:
            rss_import, load_s, run = _ours_child(args.family, args.model, args.precision, args.threads,
                                                  args.max_new_tokens)
    except Exception as e:  # a precision (or family) ours refuses: recorded, not a failure of the benchmark
        if args.child == "ours" and type(e).__name__ == "ModelError":
            print(RESULT_TAG + json.dumps(dict(unavailable=str(e))), flush=True)
            return 0
        raise
    rss_loaded = _rss_mb()
    modes = ("batched", "singles") if n > 1 else ("whole",)

    def call(mode):
        if mode == "singles":
            outs = [run([c]) for c in clips]
            return ([o[0][0] for o in outs], [o[1][0] for o in outs], [o[2][0] for o in outs])
        return run(clips)

    t0 = time.perf_counter()
    last = {}
    for mode in modes:  # warm-up
        last[mode] = call(mode)
    warmup_s = time.perf_counter() - t0
    print(RESULT_TAG + json.dumps(dict(ready=True, load_s=round(load_s, 2), warmup_s=round(warmup_s, 2))), flush=True)
    times = {m: [] for m in modes}
    for line in sys.stdin:
        words = line.split()
        if words and words[0] == "run":
            mode = words[1] if len(words) > 1 else modes[0]
            t0 = time.perf_counter()
            last[mode] = call(mode)
            times[mode].append(time.perf_counter() - t0)
            print(RESULT_TAG + json.dumps(dict(call_s=round(times[mode][-1], 4))), flush=True)
        elif words == ["quit"]:
            break
    result = dict(
        impl=args.child, precision=args.precision, threads=torch.get_num_threads(), clips=n,
        audio_s=round(len(pcm) / SAMPLE_RATE, 3), load_s=round(load_s, 2), warmup_s=round(warmup_s, 2),
        peak_rss_mb=round(_peak_rss_mb()), rss_after_import_mb=round(rss_import), rss_after_load_mb=round(rss_loaded),
        rss_end_mb=round(_rss_mb()), torch=torch.__version__)
    for mode in modes:
        texts, ids, pieces = last[mode]
        key = "" if mode == "whole" else mode + "_"
        result[key + "times_s"] = [round(t, 3) for t in times[mode]]
        result[key + "piece_samples"] = pieces
        result[key + "tokens"] = [len(x) for x in ids]
        result[key + "token_ids"] = ids
        result[key + "text80"] = [t[:80] for t in texts]
    if args.child == "hf":
        from audio_llm_hf import versions

        result.update(versions(args.family))
    print(RESULT_TAG + json.dumps(result), flush=True)
    return 0


# --------------------------------------------------------------------------------------
# parent
# --------------------------------------------------------------------------------------


class Child(ChildProcess):
    def __init__(self, python: str, impl: str, model: str, precision: str, clip: Path, split: int, args):
        env = dict(os.environ)
        env["OMP_NUM_THREADS"] = str(args.threads)
        env["MKL_NUM_THREADS"] = str(args.threads)
        env["TOKENIZERS_PARALLELISM"] = "false"
        if impl == "ours":
            env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        cmd = [python, str(Path(__file__).resolve()), "--child", impl, "--family", args.family, "--precision",
               precision, "--clip", str(clip), "--split", str(split), "--model", model, "--threads",
               str(args.threads), "--max-new-tokens", str(args.max_new_tokens)]
        super().__init__(f"{impl} {Path(model).name} {precision}", cmd, env)
        self.unavailable = self.ready.get("unavailable")
        if self.unavailable:
            self.p.wait()

    def call(self, mode: str = "whole") -> float:
        self.p.stdin.write(f"run {mode}\n")
        self.p.stdin.flush()
        return self._read()["call_s"]


def weights_mb(model: str) -> float:
    return sum(f.stat().st_size for f in Path(model).glob("model*.safetensors")) / 2**20


def same_ids(a: list, b: list) -> str:
    """Whether two lists of per-input id lists agree; where not, the first input and token that differ."""
    for k, (x, y) in enumerate(zip(a, b)):
        if x != y:
            n = min(len(x), len(y))
            j = next((i for i in range(n) if x[i] != y[i]), n)
            return f"no (input {k + 1}, from token {j})" if len(a) > 1 else f"no (from token {j})"
    return "yes" if len(a) == len(b) else "no (input counts differ)"


def finish(kid: Child, weights: float, batch: bool) -> dict:
    r = {**kid.finish(), "load_s": kid.ready["load_s"], "warmup_s": kid.ready["warmup_s"]}
    r["peak_rss_over_weights"] = round(r["peak_rss_mb"] / weights, 2)
    r["rss_end_over_weights"] = round(r["rss_end_mb"] / weights, 2)
    if not batch:
        return summarize(r)
    for mode in ("batched", "singles"):
        t = sorted(r[mode + "_times_s"])
        r[mode + "_best_s"], r[mode + "_median_s"] = t[0], round(statistics.median(t), 3)
        r[mode + "_throughput_best"] = round(r["audio_s"] / t[0], 2)
        r[mode + "_throughput_median"] = round(r["audio_s"] / statistics.median(t), 2)
    r["batching_speedup_best"] = round(r["singles_best_s"] / r["batched_best_s"], 3)
    r["batching_speedup_median"] = round(r["singles_median_s"] / r["batched_median_s"], 3)
    ratios = [s / b for s, b in zip(r["singles_times_s"], r["batched_times_s"])]
    r["batching_speedup_per_round_median"] = round(statistics.median(ratios), 3)
    r["batched_ids_same_as_singles"] = same_ids(r["batched_token_ids"], r["singles_token_ids"])
    return r


def _grid(head: list, lines: list) -> str:
    lines = [head] + lines
    w = [max(len(str(l[i])) for l in lines) for i in range(len(head))]
    out = [" | ".join(str(c).ljust(w[i]) for i, c in enumerate(l)) for l in lines]
    out.insert(1, "-+-".join("-" * x for x in w))
    return "\n".join(out)


def refused(message: str) -> str:
    """A table's word for an engine that could not run: "not implemented" (a precision the family refuses) or
    "unavailable" (e.g. a package without the family); the message is in the JSON."""
    return "not implemented" if "not implemented" in message else "unavailable"


def table(rows: list[dict], ref: str = "transformers") -> str:
    head = [h.replace("transformers", ref) for h in (
            "precision", "transformers RTFx best / median", "ours RTFx best / median", "ours/transformers best",
            "median", "per round", "transformers peak RSS (x weights)", "ours peak RSS (x weights)",
            "tokens transformers / ours", "same ids")]
    lines = []
    for r in rows:
        h, o = r.get("hf"), r.get("ours")
        h = None if not h or h.get("unavailable") else h
        na = o.get("unavailable") if o else None
        o = None if not o or na else o
        rt = lambda d: f"{d['rtfx_best']:.2f} / {d['rtfx_median']:.2f}" if d else "-"  # noqa: E731
        rss = lambda d: f"{d['peak_rss_mb']} MB ({d['peak_rss_over_weights']:.2f}x)" if d else "-"  # noqa: E731
        both = h and o
        lines.append([
            r["precision"], rt(h), rt(o) if not na else refused(na),
            f"{h['best_s'] / o['best_s']:.2f}x" if both else "-",
            f"{h['median_s'] / o['median_s']:.2f}x" if both else "-",
            f"{r['round_ratio_median']:.2f}x" if r.get("round_ratio_median") else "-",
            rss(h), rss(o),
            f"{sum(h['tokens']) if h else '-'} / {sum(o['tokens']) if o else '-'}",
            same_ids(h["token_ids"], o["token_ids"]) if both else "-"])
    return _grid(head, lines)


def batch_table(rows: list[dict], ref: str = "transformers") -> str:
    head = ["precision", "engine", "batched best / median", "one at a time best / median",
            "throughput batched / one at a time (audio s/s, best)", "batching speed-up best", "median",
            "per round", "ours/transformers best, batched / one at a time", "peak RSS (x weights)",
            "tokens batched / one at a time", "same ids batched and alone", "same ids as transformers (batched)"]
    head = [h.replace("transformers", ref) for h in head]
    lines = []
    for r in rows:
        for impl, label in (("hf", ref), ("ours", "ours")):
            d = r.get(impl)
            if not d:
                continue
            if d.get("unavailable"):
                lines.append([r["precision"], label, refused(d["unavailable"])] + ["-"] * (len(head) - 3))
                continue
            lines.append([
                r["precision"], label, f"{d['batched_best_s']:.2f} / {d['batched_median_s']:.2f} s",
                f"{d['singles_best_s']:.2f} / {d['singles_median_s']:.2f} s",
                f"{d['batched_throughput_best']:.2f} / {d['singles_throughput_best']:.2f}",
                f"{d['batching_speedup_best']:.2f}x", f"{d['batching_speedup_median']:.2f}x",
                f"{d['batching_speedup_per_round_median']:.2f}x",
                f"{r['ours_over_hf_batched_best']:.2f}x / {r['ours_over_hf_singles_best']:.2f}x"
                if impl == "ours" and "ours_over_hf_batched_best" in r else "-",
                f"{d['peak_rss_mb']} MB ({d['peak_rss_over_weights']:.2f}x)",
                f"{sum(d['batched_tokens'])} / {sum(d['singles_tokens'])}", d["batched_ids_same_as_singles"],
                r.get("same_ids_batched", "-") if impl == "ours" else "-"])
    return _grid(head, lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", choices=sorted(DEFAULT_MODELS), required=True)
    ap.add_argument("--model", help="the model folder (default local-models/<the family's> in the repository)")
    ap.add_argument("--hf-python", help=f"transformers' Python (default {DEFAULT_HF_PYTHON} in the repository)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, help="clip length (default 60; with --batch, each clip's: 7.5)")
    ap.add_argument("--max-new-tokens", type=int, default=100)
    ap.add_argument("--precisions", help="comma list (default: the family's, DEFAULT_PRECISIONS)")
    ap.add_argument("--impls", default="hf,ours")
    ap.add_argument("--batch", type=int, default=0, metavar="N")
    ap.add_argument("--one-at-a-time", action="store_true")
    ap.add_argument("--json", metavar="PATH", help="write the results as JSON here")
    ap.add_argument("--child", choices=["hf", "ours"], help=argparse.SUPPRESS)
    ap.add_argument("--precision", choices=PRECISIONS, help=argparse.SUPPRESS)
    ap.add_argument("--clip", help=argparse.SUPPRESS)
    ap.add_argument("--split", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child_main(args)
    # os.path.abspath, not resolve(): a venv's python is a symlink that must stay one
    model = os.path.abspath(args.model) if args.model else str(REPO / DEFAULT_MODELS[args.family])
    args.hf_python = os.path.abspath(args.hf_python) if args.hf_python else str(REPO / DEFAULT_HF_PYTHON)
    precisions = [p.strip() for p in (args.precisions or DEFAULT_PRECISIONS[args.family]).split(",") if p.strip()]
    impls = [i.strip() for i in args.impls.split(",") if i.strip()]
    if not set(precisions) <= set(PRECISIONS) or not set(impls) <= {"hf", "ours"} or not impls:
        ap.error("precisions: fp32, bf16, int8; impls: hf, ours")
    if args.batch < 0 or args.batch == 1:
        ap.error("--batch N needs N >= 2")
    batch = args.batch > 1
    seconds = args.seconds if args.seconds else (7.5 if batch else 60.0)
    n_clips = args.batch if batch else 1
    if seconds > MAX_PIECE_S:
        ap.error(f"--seconds at most {MAX_PIECE_S:g}: ours would cut a longer clip, transformers would not")
    if not (Path(model) / "config.json").exists():
        ap.error(f"{model}: no model (make it with benchmarks/make_audio_llm_model.py --family {args.family})")
    if "hf" in impls and not Path(args.hf_python).exists():
        ap.error(f"{args.hf_python}: no such Python (make the venv with tools/setup_nemo_venv.sh, "
                 "or pass --hf-python)")
    from speech_clip import speech_clip

    import soundfile as sf

    pcm, used = speech_clip(seconds * n_clips)
    weights = weights_mb(model)
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    commit = package_commit()
    load_start = os.getloadavg()
    rows = []
    ref = REFERENCE.get(args.family, "transformers")

    def show(rows: list[dict]) -> str:
        return (batch_table if batch else table)(rows, ref)

    def write(rows: list[dict], complete: bool) -> str:
        text = show(rows)
        if args.json:
            out = dict(started=started, complete=complete, package_commit=commit, family=args.family,
                       model=shown(model), weights_mb=round(weights), clip_seconds=seconds, clips=n_clips,
                       clip_utterances=used, threads=args.threads, rounds=args.rounds,
                       max_new_tokens=args.max_new_tokens, max_piece_s=MAX_PIECE_S, one_at_a_time=args.one_at_a_time,
                       **cpu_info(), loadavg_start=[round(x, 2) for x in load_start],
                       loadavg_end=[round(x, 2) for x in os.getloadavg()], results=rows, table=text)
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
        return text

    def python(impl):
        return args.hf_python if impl == "hf" else sys.executable

    modes = ("batched", "singles") if batch else ("whole",)

    def one_round(kids: dict, k: int) -> dict:
        """Round k: every engine's calls, one at a time; the order of engines and of modes flips every round."""
        order = list(kids) if k % 2 == 0 else list(kids)[::-1]
        got = {}
        for i in order:
            for m in (modes if k % 2 == 0 else modes[::-1]):
                got[(i, m)] = kids[i].call(m)
        return got

    with tempfile.TemporaryDirectory() as tmp:
        clip = Path(tmp) / "clip.wav"
        sf.write(clip, pcm, SAMPLE_RATE, subtype="FLOAT")
        for prec in precisions:
            row = {"precision": prec}
            these = [i for i in impls if not (i == "hf" and prec == "int8")]  # transformers: no comparable int8
            if not these:
                continue
            ratios, loads = [], []
            groups = [[i] for i in these] if args.one_at_a_time else [these]
            for group in groups:
                kids = {}
                for i in group:
                    kid = Child(python(i), i, model, prec, clip, n_clips, args)
                    if kid.unavailable:
                        row[i] = {"unavailable": kid.unavailable}
                        print(f"    {i} {prec}: {refused(kid.unavailable)} ({kid.unavailable})", file=sys.stderr,
                              flush=True)
                    else:
                        kids[i] = kid
                live = [i for i in group if i in kids]
                for k in range(args.rounds if live else 0):
                    got = one_round(kids, k)
                    if not batch and len(live) == 2:
                        ratios.append(got[("hf", "whole")] / got[("ours", "whole")])
                    loads.append(round(os.getloadavg()[0], 2))
                    print(f"    round {k + 1}: " + ", ".join(f"{i} {m} {got[(i, m)]:.2f} s" for i in live
                                                             for m in modes)
                          + f" (load average {loads[-1]:.2f})", file=sys.stderr, flush=True)
                for i in live:
                    row[i] = finish(kids[i], weights, batch)
            h, o = row.get("hf"), row.get("ours")
            if batch and h and o and not h.get("unavailable") and not o.get("unavailable"):
                row["ours_over_hf_batched_best"] = round(h["batched_best_s"] / o["batched_best_s"], 3)
                row["ours_over_hf_singles_best"] = round(h["singles_best_s"] / o["singles_best_s"], 3)
                row["same_ids_batched"] = same_ids(h["batched_token_ids"], o["batched_token_ids"])
            if ratios:
                row["round_ratios"] = [round(x, 3) for x in ratios]
                row["round_ratio_median"] = round(statistics.median(ratios), 3)
            row["loadavg_rounds"] = loads
            row["loadavg_after"] = round(os.getloadavg()[0], 2)
            rows.append(row)
            print(show([row]), file=sys.stderr, flush=True)
            write(rows, complete=False)  # a long run keeps what it has measured
    text = write(rows, complete=True)
    what = (f"{n_clips} clips of {seconds:g} s, batched against one at a time" if batch else f"{seconds:g} s clip")
    print(f"\n{NAMES[args.family]} ({shown(model)}: random weights, {weights / 1024:.2f} GiB of weights), "
          f"ours at {commit}, {what}, {args.threads} threads, {args.rounds} "
          f"{'rounds each' if args.one_at_a_time else 'alternating rounds'} after 1 warm-up, {args.max_new_tokens} "
          f"new tokens an input; {cpu_line()}; load average at start {load_start[0]:.2f}, at end "
          f"{os.getloadavg()[0]:.2f}\n")
    print(text)
    if args.json:
        print(f"\nwritten {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
