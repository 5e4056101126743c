"""Speed and memory of the full-size Granite Speech NAR (ibm-granite/granite-speech-4.1-2b-nar) on the CPU.

The architecture of the published config (tests/configs/published/granite-speech-4.1-2b-nar.json,
2,254,541,148 parameters) is built with random weights by `GraniteNAR.random(config, dtype=...)`
(meta device, then each tensor made once in that dtype) and runs one 60 s clip of real speech: the
utterances of `<audio-dir>/dev/manifest.jsonl` in file order, each read with
`transcribe.audio.load_audio(path, 16000)` and followed by 0.25 s of silence, cut to `--seconds`
(the recipe of speech_clip.py).

Each dtype runs in its own fresh subprocess, one after the other (so the peak RSS, the child's
`ru_maxrss`, is that dtype's alone; it includes building the model). The child calls
`transcribe.runtime.tune_malloc()` first, as the command line and the other benchmark workers do,
then builds the model and times the whole pass (front end + `model(features, lengths)`) under
`torch.inference_mode()` and `transcribe.runtime.model_call(threads)`: one warm-up, then the best
of `--rounds`. RTFx = audio seconds / best time. One more instrumented pass splits the time
(front end; encoder, of which its conformer blocks; the BPE-CTC head, scanned for its argmax and
log-sum-exp; projector; editor, of which the LM body and the scan of its output head; the rest:
greedy CTC, templates, the editor's inputs). With random weights the first
(CTC) hypothesis has a length real speech would not give (about 3 tokens a second), so each round
also times a "realistic" pass, the same pass with the first hypothesis cut to `--edit-hyp` (180)
tokens (interleaved with the plain one; its RTFx is the realistic RTFx), and the editor is timed
alone on a realistic input: `--edit-audio-rows` (600, what 60 s gives) audio rows plus the
template of a `--edit-hyp` token hypothesis (2 * 180 + 1 rows), best of `--rounds` after a
warm-up.

From the repository root, with the machine otherwise idle (check `uptime`), about 15 minutes on 2
cores with 5 rounds and 9.3 GiB of memory at the most (float32):

    python3 benchmarks/granite_speed.py --threads 2 --rounds 5 --json benchmarks/results/granite_speed.json

Options: --audio-dir (default ../shared/audio, relative to the repository root; a path given on the
command line is relative to the working directory), --config, --dtypes float32,bfloat16,
--threads N (torch threads and OMP_NUM_THREADS in each child), --rounds N, --seconds S, --seed N,
--edit-audio-rows N, --edit-hyp N, --no-tune-malloc, --json PATH. The JSON records the commit and
whether transcribe/ differed from it.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import cpu_info, cpu_line  # benchmarks/machine.py (this script's folder is on sys.path)

REPO = Path(__file__).resolve().parents[1]
AUDIO_DIR = "../shared/audio"  # relative to the repository root
CONFIG = "tests/configs/published/granite-speech-4.1-2b-nar.json"
SAMPLE_RATE = 16000
GAP_S = 0.25


def _option_path(given: str | None, default: str) -> Path:
    """A path given on the command line is relative to the working directory, a default to the repository."""
    return Path(given).resolve() if given else (REPO / default).resolve()


def speech_clip(audio_dir: Path, seconds: float):
    """(float32 PCM of exactly `seconds` at 16 kHz, names of the utterances used)."""
    import numpy as np

    from transcribe.audio import load_audio

    dev = audio_dir / "dev"
    rows = [json.loads(line) for line in (dev / "manifest.jsonl").read_text().splitlines() if line.strip()]
    want = int(round(seconds * SAMPLE_RATE))
    gap = np.zeros(int(GAP_S * SAMPLE_RATE), dtype=np.float32)
    parts, used, have = [], [], 0
    while have < want:
        for row in rows:
            x = load_audio(str(dev / row["audio"]), SAMPLE_RATE)
            parts += [x, gap]
            used.append(row["audio"])
            have += len(x) + len(gap)
            if have >= want:
                break
    return np.concatenate(parts)[:want].astype(np.float32), used


def _rss_now() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _peak_rss() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


# ---------------------------------------------------------------- worker (one dtype)

def worker(a) -> None:
    import torch

    import transcribe.granite.model as granite_model
    from transcribe.granite.frontend import GraniteFrontEnd
    from transcribe.granite.model import GraniteNAR
    from transcribe.runtime import model_call, tune_malloc

    tuned = tune_malloc() if a.tune_malloc else False
    dtype = getattr(torch, a.worker)
    pcm, names = speech_clip(Path(a.audio_dir), a.seconds)
    audio_s = len(pcm) / SAMPLE_RATE
    wave = torch.from_numpy(pcm)
    config = json.loads(Path(a.config).read_text())
    rss_start = _rss_now()

    t0 = time.perf_counter()
    model = GraniteNAR.random(config, seed=a.seed, dtype=dtype)
    build_s = time.perf_counter() - t0
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    n_params = sum(p.numel() for p in model.parameters())
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    peak_after_build = _peak_rss()
    rss_after_build = _rss_now()
    front = GraniteFrontEnd()

    def full_pass():
        with torch.inference_mode(), model_call(a.threads):
            feats = front(wave)
            return model(feats[None], torch.tensor([feats.shape[0]]))

    first_hypotheses = model.hypotheses

    def cut_hypotheses(*args, **kw):
        return [h[:a.edit_hyp] for h in first_hypotheses(*args, **kw)]

    def realistic_pass():
        """The same pass with the first hypothesis cut to --edit-hyp tokens (what real speech gives)."""
        model.hypotheses = cut_hypotheses  # an instance attribute, for this call only
        try:
            return full_pass()
        finally:
            del model.hypotheses

    t0 = time.perf_counter()
    out = full_pass()  # warm-ups
    warmup_s = time.perf_counter() - t0
    realistic_pass()
    rounds, realistic_rounds = [], []
    for _ in range(a.rounds):  # interleaved, so both see the same phases of the machine's speed
        out = None  # the previous pass's result is not kept while the next one runs
        t0 = time.perf_counter()
        out = full_pass()
        rounds.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        short = realistic_pass()
        realistic_rounds.append(time.perf_counter() - t0)
    best = min(rounds)
    realistic_best = min(realistic_rounds)
    short_first = len(short.first[0])
    del short

    # One instrumented pass: hooks time the modules, a wrapper times the editor call.
    marks: dict = {}

    def hook_pair(module, name):
        def pre(_m, _inp):
            marks[name + ".t0"] = time.perf_counter()

        def post(_m, _inp, _out):
            marks[name] = marks.get(name, 0.0) + time.perf_counter() - marks.pop(name + ".t0")
        return [module.register_forward_pre_hook(pre), module.register_forward_hook(post)]

    handles = hook_pair(model.encoder, "encoder") + hook_pair(model.projector, "projector")
    handles += hook_pair(model.language_model.model, "editor.lm_body")
    handles += hook_pair(model.encoder.out_bpe, "bpe_head")  # fires where the head runs as a module
    for layer in model.encoder.layers:
        handles += hook_pair(layer, "encoder.blocks")
    edit = model._edit

    def timed_edit(*args, **kw):
        t = time.perf_counter()
        try:
            return edit(*args, **kw)
        finally:
            marks["editor"] = time.perf_counter() - t
    model._edit = timed_edit  # an instance attribute: the class is left alone
    # The vocabulary-wide heads are scanned by granite.model.scan_head (the BPE-CTC head after the
    # encoder, the editor's output head inside _edit): a timing wrapper in its module, for this pass only.
    scan = getattr(granite_model, "scan_head", None)
    if scan is not None:
        bpe_weight = model.encoder.out_bpe.weight

        def timed_scan(x, weight, *args, **kw):
            t = time.perf_counter()
            try:
                return scan(x, weight, *args, **kw)
            finally:
                key = "bpe_head" if weight is bpe_weight else "editor.head"
                marks[key] = marks.get(key, 0.0) + time.perf_counter() - t
        granite_model.scan_head = timed_scan
    out = None
    try:
        with torch.inference_mode(), model_call(a.threads):
            t0 = time.perf_counter()
            feats = front(wave)
            marks["front_end"] = time.perf_counter() - t0
            out = model(feats[None], torch.tensor([feats.shape[0]]))
            instrumented_total = time.perf_counter() - t0
    finally:
        del model._edit
        if scan is not None:
            granite_model.scan_head = scan
        for h in handles:
            h.remove()
    frames = int(feats.shape[0])
    audio_rows = frames // model.cfg.projector.downsample_rate
    hyp_len = len(out.first[0])
    template_len = len(model.template(out.first[0]))
    parts = {k: marks.get(k, 0.0) for k in ("front_end", "encoder", "encoder.blocks", "bpe_head", "projector",
                                            "editor", "editor.lm_body", "editor.head")}
    if "bpe_head" in marks and not scan:  # the head ran inside the encoder (older code): not counted twice
        parts["encoder"] -= parts["bpe_head"]
    # rest: greedy CTC, templates, the editor's inputs, Python between the stages
    stages = ("front_end", "encoder", "bpe_head", "projector", "editor")
    parts["rest"] = instrumented_total - sum(parts[k] for k in stages)

    # The editor alone on a realistic input (real speech gives ~3 tokens a second).
    gen = torch.Generator().manual_seed(a.seed + 1)
    rows = a.edit_audio_rows
    d = model.cfg.text.hidden_size
    audio_embeds = (torch.randn(1, rows, d, generator=gen) / model.cfg.text.embedding_multiplier).to(dtype)
    hyp = torch.randint(0, model.cfg.blank_token_id, (a.edit_hyp,), generator=gen).tolist()
    template = model.template(hyp)

    def edit_alone():
        with torch.inference_mode(), model_call(a.threads):
            return model._edit(audio_embeds, [rows], [template], False)

    edit_alone()
    edit_rounds = []
    for _ in range(a.rounds):
        t0 = time.perf_counter()
        edit_alone()
        edit_rounds.append(time.perf_counter() - t0)
    edit_best = min(edit_rounds)

    res = {
        "dtype": a.worker, "threads": a.threads, "audio_s": audio_s, "clip": names, "malloc_tuned": tuned,
        "parameters": n_params, "weights_bytes": weights, "buffers_bytes": buffers,
        "build_s": build_s, "rss_before_build_bytes": rss_start, "rss_after_build_bytes": rss_after_build,
        "peak_rss_after_build_bytes": peak_after_build, "peak_rss_bytes": _peak_rss(),
        "warmup_s": warmup_s, "rounds_s": rounds, "best_s": best, "rtfx": audio_s / best,
        "instrumented_s": instrumented_total, "breakdown_s": parts,
        "encoder_frames": frames, "first_hypothesis_tokens": hyp_len, "template_rows": template_len,
        "editor_input_rows": audio_rows + template_len, "audio_rows": audio_rows,
        "edit_realistic": {"audio_rows": rows, "hypothesis_tokens": a.edit_hyp, "template_rows": len(template),
                           "input_rows": rows + len(template), "rounds_s": edit_rounds, "best_s": edit_best},
        "realistic_pass": {"first_hypothesis_tokens": short_first,
                           "editor_input_rows": audio_rows + len(model.template([0] * short_first)),
                           "rounds_s": realistic_rounds, "best_s": realistic_best},
        "realistic_rtfx": audio_s / realistic_best,
    }
    res["peak_rss_over_weights"] = res["peak_rss_bytes"] / weights
    Path(a.out).write_text(json.dumps(res, indent=1))


# ---------------------------------------------------------------- parent

def _git_commit() -> str:
    try:
        return subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _git_dirty() -> bool:
    """Whether the package's files differ from the commit (the figures are then of the working tree)."""
    try:
        return bool(subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--", "transcribe"],
                                   capture_output=True, text=True, check=True).stdout.strip())
    except (OSError, subprocess.CalledProcessError):
        return False


def table(results: list[dict]) -> str:
    mb = 2 ** 20
    lines = [
        "| dtype | build (s) | weights (MiB) | peak RSS (MiB) | peak / weights | pass, best (s) | RTFx | "
        "first hyp. tokens | editor input rows | realistic pass (s) | realistic RTFx | editor alone, realistic (s) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        lines.append(
            f"| {r['dtype']} | {r['build_s']:.1f} | {r['weights_bytes'] / mb:.0f} | {r['peak_rss_bytes'] / mb:.0f} | "
            f"{r['peak_rss_over_weights']:.2f} | {r['best_s']:.2f} | {r['rtfx']:.2f} | "
            f"{r['first_hypothesis_tokens']} | {r['editor_input_rows']} | {r['realistic_pass']['best_s']:.2f} | "
            f"{r['realistic_rtfx']:.2f} | {r['edit_realistic']['best_s']:.2f} |")
    lines += ["", "| dtype | front end | encoder (its blocks) | BPE-CTC head | projector | editor (LM body / head) | "
                  "rest | instrumented total |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in results:
        b = r["breakdown_s"]
        lines.append(
            f"| {r['dtype']} | {b['front_end']:.2f} | {b['encoder']:.2f} ({b['encoder.blocks']:.2f}) | "
            f"{b['bpe_head']:.2f} | {b['projector']:.2f} | {b['editor']:.2f} ({b['editor.lm_body']:.2f} / "
            f"{b['editor.head']:.2f}) | {b['rest']:.2f} | {r['instrumented_s']:.2f} |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--audio-dir", help=f"default {AUDIO_DIR} (relative to the repository root)")
    p.add_argument("--config", help=f"default {CONFIG} (relative to the repository root)")
    p.add_argument("--dtypes", default="float32,bfloat16")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--edit-audio-rows", type=int, default=600)
    p.add_argument("--edit-hyp", type=int, default=180)
    p.add_argument("--no-tune-malloc", dest="tune_malloc", action="store_false",
                   help="leave glibc's malloc thresholds alone in the children")
    p.add_argument("--json")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        worker(a)
        return
    audio_dir = _option_path(a.audio_dir, AUDIO_DIR)
    config = _option_path(a.config, CONFIG)
    if not (audio_dir / "dev" / "manifest.jsonl").is_file():
        sys.exit(f"no dev/manifest.jsonl under the audio directory {a.audio_dir or AUDIO_DIR}")
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), MKL_NUM_THREADS=str(a.threads),
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    tmp = Path(tempfile.mkdtemp(prefix="granite-speed-"))
    commit, dirty = _git_commit(), _git_dirty()
    load_start = os.getloadavg()[0]
    print(cpu_line(), flush=True)
    print(f"load average at start: {load_start:.2f}", flush=True)
    results = []
    for dt in a.dtypes.split(","):
        out = tmp / f"{dt}.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", dt, "--out", str(out),
               "--audio-dir", str(audio_dir), "--config", str(config), "--threads", str(a.threads),
               "--rounds", str(a.rounds), "--seconds", str(a.seconds), "--seed", str(a.seed),
               "--edit-audio-rows", str(a.edit_audio_rows), "--edit-hyp", str(a.edit_hyp)]
        if not a.tune_malloc:
            cmd.append("--no-tune-malloc")
        t0 = time.perf_counter()
        r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
        if r.returncode != 0:
            print(f"{dt} failed:\n{r.stderr[-3000:]}", flush=True)
            continue
        res = json.loads(out.read_text())
        res["child_wall_s"] = time.perf_counter() - t0
        results.append(res)
        print(f"{dt}: build {res['build_s']:.1f} s, pass best {res['best_s']:.2f} s (rounds "
              f"{', '.join(f'{x:.2f}' for x in res['rounds_s'])}), RTFx {res['rtfx']:.2f}, peak RSS "
              f"{res['peak_rss_bytes'] / 2**20:.0f} MiB = {res['peak_rss_over_weights']:.2f} x weights; "
              f"realistic RTFx {res['realistic_rtfx']:.2f}", flush=True)
    load_end = os.getloadavg()[0]
    print(f"load average at end: {load_end:.2f}\n")
    print(table(results))
    if a.json:
        import torch

        doc = {
            "date": datetime.date.today().isoformat(), "commit": commit, "transcribe_modified": dirty,
            "torch": torch.__version__, **cpu_info(), "threads": a.threads,
            "rounds": a.rounds, "seconds": a.seconds, "seed": a.seed, "tune_malloc": a.tune_malloc,
            "config": a.config or CONFIG, "audio_dir": a.audio_dir or AUDIO_DIR,
            "load_average_start": load_start, "load_average_end": load_end,
            "targets": {"bf16_rtfx_min": 3.0, "peak_rss_over_weights_max": 1.2},
            "results": results,
        }
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
