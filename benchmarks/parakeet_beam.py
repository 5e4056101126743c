#!/usr/bin/env python
"""Parakeet beam search speed: decode time of each beam against greedy, on the full-size TDT 0.6B.

Run from the repository root with the project's Python:

    python3 benchmarks/parakeet_beam.py --json bench-out/parakeet_beam.json

    options: --model PATH    the .nemo (default local-models/parakeet-tdt-0.6b-v2-random.nemo, made
                             by benchmarks/make_parakeet_model.py: the published architecture with
                             random weights and a joint tuned to emit tokens at a speech-like rate)
             --threads N     torch threads (default 2)
             --rounds N      timed rounds; the best counts (default 3)
             --seconds S     clip length (default 60)
             --beam-size K   (default 4)
             --nemo-python P Python of a NeMo virtual environment (default .venv-nemo/bin/python;
                             "none" or a missing file skips the peer)

What it measures: decode time only. The clip (S seconds of real speech, benchmarks/speech_clip.py)
is encoded once; every search then runs on the same encoder output, projected for the joint:
  greedy    search.transducer.greedy_batch (label looping, what transcribe() runs by default)
  malsd     search.malsd.malsd_batch, beam K (batched over hypotheses; the recommended beam)
  default   search.transducer_beam.tdt_beam, beam K (NeMo's default TDT beam, one hypothesis at a time)
  maes      search.maes.maes, beam K (NeMo's mAES defaults: 2 steps, alpha 1, beta 2, gamma 2.3)
Each round runs every search once, in that order; a search's time is its best round. Ratios are to
greedy's best. The "+conf" rows do what transcribe() does: they also give the result's token
log-probs and entropy confidences (greedy and malsd record them as they go, default and maes
recompute them along the best path); their ratios are to "greedy+conf". Then N-best over 8 utterances (the clip cut in 8 equal parts, encoded as one batch):
malsd on the batch of 8 at once against malsd on each utterance alone, one after the other.

The peer, in the same run (after ours, never at the same time): NeMo's own greedy_batch and
malsd_batch (beam K) decode times on the same model and clip (benchmarks/nemo_beam_child.py, in
NeMo's virtual environment, same thread count), with the ratio of ours to NeMo's.

Timing on a shared machine is noisy: check `uptime` first and run when the load average is low.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=str(REPO / "local-models" / "parakeet-tdt-0.6b-v2-random.nemo"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--beam-size", type=int, default=4)
    ap.add_argument("--json", default=None)
    ap.add_argument("--nemo-python", default=str(REPO / ".venv-nemo" / "bin" / "python"))
    args = ap.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))

    import torch

    import transcribe
    from machine import cpu_info, cpu_line
    from speech_clip import speech_clip
    from transcribe.runtime import model_call, tune_malloc
    from transcribe.parakeet import beams
    from transcribe.search import maes, malsd, transducer, transducer_beam

    tune_malloc()
    if not Path(args.model).is_file():
        print(f"no model at {args.model}: make it with benchmarks/make_parakeet_model.py", file=sys.stderr)
        return 2
    model = transcribe.load_model(args.model, threads=args.threads)
    pcm, used = speech_clip(args.seconds)
    k = args.beam_size
    m = model.model

    with model_call(args.threads), torch.inference_mode():
        audio = torch.from_numpy(pcm)[None]
        enc, enc_len = m.encode(audio, torch.tensor([audio.shape[1]]))
        enc_proj = model.project_encoder(enc.float())
        steps = model.transducer_steps()
        T = int(enc_len[0])

        def with_details(nb):
            beams.path_details(enc_proj[0], steps, nb[0], "entropy")
            return nb[0].ids

        searches = {
            "greedy": lambda: transducer.greedy_batch(enc_proj, enc_len, steps, None)[0].ids,
            "malsd": lambda: malsd.malsd_batch(enc_proj, enc_len, steps, beam_size=k)[0][0].ids,
            "default": lambda: transducer_beam.tdt_beam(enc_proj[0], T, steps, beam_size=k)[0].ids,
            "maes": lambda: maes.maes(enc_proj[0], T, steps, beam_size=k)[0].ids,
            # as transcribe() runs them: token log-probs and entropy confidences of the result
            "greedy+conf": lambda: transducer.greedy_batch(enc_proj, enc_len, steps, "entropy")[0].ids,
            "malsd+conf": lambda: malsd.malsd_batch(enc_proj, enc_len, steps, beam_size=k, confidence="entropy")[0][0].ids,
            "default+conf": lambda: with_details(transducer_beam.tdt_beam(enc_proj[0], T, steps, beam_size=k)),
            "maes+conf": lambda: with_details(maes.maes(enc_proj[0], T, steps, beam_size=k)),
        }
        best = {name: float("inf") for name in searches}
        tokens = {}
        for _ in range(args.rounds):
            for name, fn in searches.items():
                t0 = time.perf_counter()
                tokens[name] = fn()
                best[name] = min(best[name], time.perf_counter() - t0)

        # N-best over 8 utterances: the clip in 8 parts, encoded together.
        n = 8
        part = pcm.shape[0] // n
        batch = torch.from_numpy(pcm[: part * n].reshape(n, part).copy())
        enc8, len8 = m.encode(batch, torch.full((n,), part))
        proj8 = model.project_encoder(enc8.float())
        batched = alone = float("inf")
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            together = malsd.malsd_batch(proj8, len8, steps, beam_size=k)
            batched = min(batched, time.perf_counter() - t0)
            t0 = time.perf_counter()
            single = [malsd.malsd_batch(proj8[i : i + 1, : int(len8[i])], len8[i : i + 1], steps, beam_size=k)[0]
                      for i in range(n)]
            alone = min(alone, time.perf_counter() - t0)
        same = all([d.ids for d in a] == [d.ids for d in b] for a, b in zip(together, single))

    g, gc = best["greedy"], best["greedy+conf"]
    nemo = _nemo(args, pcm)
    print(cpu_line())
    print(f"model {Path(args.model).name}, {args.seconds:.0f} s of speech ({T} encoder frames), "
          f"{args.threads} threads, best of {args.rounds} rounds, beam {k}")
    print(f"{'search':13s} {'seconds':>8s} {'x greedy':>9s} {'tokens':>7s}")
    for name in searches:
        base = gc if name.endswith("+conf") else g
        print(f"{name:13s} {best[name]:8.3f} {best[name] / base:9.2f} {len(tokens[name]):7d}")
    print(f"N-best over {n} utterances of {part / 16000:.1f} s: batched {batched:.3f} s, one at a time {alone:.3f} s, "
          f"ratio {alone / batched:.2f}x; same lists: {same}")
    if nemo:
        print(f"NeMo on the same encoder output: greedy_batch {nemo['greedy']:.3f} s, malsd_batch {nemo['malsd']:.3f} s "
              f"({nemo['malsd'] / nemo['greedy']:.2f}x its greedy); ours/NeMo: greedy {g / nemo['greedy']:.2f}, "
              f"malsd {best['malsd'] / nemo['malsd']:.2f}; tokens NeMo {nemo['tokens']}, ours "
              f"{ {'greedy': len(tokens['greedy']), 'malsd': len(tokens['malsd'])} }")
    if args.json:
        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(dict(
            model=Path(args.model).name, seconds=args.seconds, frames=T, threads=args.threads, rounds=args.rounds,
            **cpu_info(), beam_size=k, decode_s=best,
            over_greedy={n_: best[n_] / (gc if n_.endswith("+conf") else g) for n_ in best},
            tokens={n_: len(t) for n_, t in tokens.items()}, clip=used,
            nbest8=dict(batched_s=batched, one_at_a_time_s=alone, same_lists=same),
            nemo=nemo, load=os.getloadavg()), indent=1) + "\n")
    return 0


def _nemo(args, pcm):
    """NeMo's decode times in a child process of its own virtual environment, or None."""
    import subprocess
    import tempfile

    import soundfile as sf

    py = args.nemo_python
    if py == "none" or not Path(py).is_file():
        print(f"(no NeMo at {py}: the peer is skipped)")
        return None
    with tempfile.TemporaryDirectory() as tmp:
        clip = Path(tmp) / "clip.wav"
        sf.write(str(clip), pcm, 16000, subtype="FLOAT")
        out = subprocess.run([py, str(HERE / "nemo_beam_child.py"), args.model, str(clip), str(args.threads),
                              str(args.rounds), str(args.beam_size)], capture_output=True, text=True,
                             env=dict(os.environ, OMP_NUM_THREADS=str(args.threads)))
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        print(f"NeMo child failed ({out.returncode}): {out.stderr[-500:]}")
        return None
    return json.loads(lines[-1])


if __name__ == "__main__":
    sys.exit(main())
