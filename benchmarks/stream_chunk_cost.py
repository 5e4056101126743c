#!/usr/bin/env python
"""Compute per chunk of cache-aware streaming on full-size architectures (random weights).

Run from the repository root with the project's Python:

    python3 benchmarks/stream_chunk_cost.py [--models parakeet_realtime_eou_120m-v1,nemotron-speech-streaming-en-0.6b]
        [--chunks-ms 80,160,560,1120] [--threads 1] [--rounds 3] [--seconds 20] [--json bench-out/stream_chunk_cost.json]

Each model is built with `ParakeetModel.random` from its reconstructed configuration
`tests/configs/published/<name>.yaml` (same shapes and compute as the published checkpoint, random
weights). A chunk of C ms is the lookahead [left, C / 80 - 1] with the model's own left context
(80, 160, 560, 1120 ms = [70, 0], [70, 1], [70, 6], [70, 13]); a lookahead the configuration does
not list is added to the encoder's list (the parameter count does not depend on it) and the JSON
says so (`lookahead_in_config: false`).

The audio is real speech: `speech_clip.py`'s dev-set concatenation, `--seconds` long. Its live
features (`LiveMelFeatures`) are cut into the session's chunks (`cache_aware.Chunker`); the
partial last chunk is left out. Two measurements per (model, chunk size), `--rounds` times each:

- components: per chunk, the encoder step `cache_aware.stream_step` (timed alone), then the
  decoder: the joint's encoder projection + `stream_greedy.transducer_chunk` (label-looping greedy
  with entropy confidence, as the session runs it), timed together;
- session: a `CacheAwareSession` (`asr.stream(att_context_size=...)`) of a `ParakeetASR` with a
  SentencePiece tokenizer trained in-process (BPE, the model's vocabulary size, on the license
  texts and standard-library docstrings that `make_parakeet_model.py` uses; `<EOU>`/`<EOB>` as
  user symbols where the vocabulary has them): the audio is fed in `--piece-ms` pieces, drained
  after each feed as a client does; its chunk step (`_run`: encoder, decoder, committing tokens,
  text and words) is timed per chunk, and the whole feed time (features and chunking too) per
  chunk at steady state.

Only steady-state chunks count: those that start with the attention cache full (the left
context, 70 frames = 5.6 s, already seen); earlier chunks attend to fewer keys and are cheaper.
Each round's median per chunk is taken; the best (lowest) round is reported.

Realistic decoding work: with random weights the encoder's output is nearly the same vector on
every frame, so the joint decides the same on every frame (blank everywhere, or a token nearly
every frame). As in `make_parakeet_model.py`, before timing each (model, chunk size) the joint's
encoder projection is re-centred on the mean encoder frame of the steady chunks of the clip
(streamed at that chunk size) and scaled by 30, and the blank logit's bias is raised or lowered
(bisection) until greedy decoding of those frames emits about `--tokens-per-second` (3) tokens a
second; the JSON gives the rate reached in the timed rounds.

Concurrent streams per 2 cores: floor(2 / threads x chunk duration / session time per chunk at
steady state), and 0 when one stream's step is longer than its chunk: a stream is real time when
each of its chunks is computed before the next one's audio has arrived; with 1 thread the two cores
run chunk steps of different streams side by side (a step takes one core; with 2 threads both). It assumes two
single-threaded processes (or threads) do not slow each other down; they share the memory
bandwidth and caches that these memory-bound steps depend on, so it is an upper bound.
`--parallel N` measures it: N copies of this benchmark run at once (each `--threads`), and every
copy's figures are reported.

`--profile MODEL:MS` (e.g. parakeet_realtime_eou_120m-v1:160) runs torch.profiler over the steady
chunks of that cell and says where a chunk's time goes: pre-encode (subsampling); in the layers the
feed-forward modules, the attention projections, the relative-position projection, the
convolution module, the layer norms and the rest (scores, softmax, masks, residuals, cache writes);
the decoder; and what no op accounts for (Python, dispatch; the profiler's own cost included).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from array import array
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO))
from machine import cpu_info, cpu_line  # noqa: E402  (benchmarks/machine.py)
from blank_bias import ENC_GAIN, bisect_blank_bias, recentre  # noqa: E402

CONFIGS = "tests/configs/published"  # relative to the repository
DEFAULT_MODELS = "parakeet_realtime_eou_120m-v1,nemotron-speech-streaming-en-0.6b"
SAMPLE_RATE = 16000


# --------------------------------------------------------------------------------------------
# model, tokenizer, realistic decoding
# --------------------------------------------------------------------------------------------


def load_config(name: str, chunk_ms: list[int], frame_ms: float = 80.0) -> tuple[dict, dict[int, list[int]], list]:
    """The yaml config with every wanted lookahead in the encoder's list (the config's own first,
    as its default); chunk ms -> [left, right]; the lookaheads the config lists itself."""
    import yaml

    path = REPO / CONFIGS / f"{name}.yaml"
    if not path.exists():
        raise SystemExit(f"{path.relative_to(REPO)}: no such configuration")
    cfg = yaml.safe_load(path.read_text())
    att = cfg["encoder"]["att_context_size"]
    own = [list(map(int, a)) for a in att] if isinstance(att[0], (list, tuple)) else [list(map(int, att))]
    left = own[0][0]
    want = {}
    for ms in chunk_ms:
        right = int(round(ms / frame_ms)) - 1
        match = [a for a in own if a[1] == right]
        want[ms] = match[0] if match else [left, right]
    lists = own + [a for a in want.values() if a not in own]
    cfg["encoder"]["att_context_size"] = lists
    return cfg, want, own


def english_lines(path: Path) -> None:
    from make_parakeet_model import english_corpus

    english_corpus(path)


def train_tokenizer(work: Path, vocab: int, corpus: Path, seed: int = 1234):
    import sentencepiece as spm

    from transcribe.text.sentencepiece import SentencePieceTokenizer

    user = ["<EOU>", "<EOB>"] if vocab == 1026 else []
    spm.set_random_generator_seed(seed)
    prefix = work / f"tok{vocab}"
    spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(prefix), vocab_size=vocab, model_type="bpe",
                                   character_coverage=1.0, bos_id=-1, eos_id=-1, user_defined_symbols=user,
                                   minloglevel=2, num_threads=1)
    return SentencePieceTokenizer(str(prefix) + ".model")


def streams_per_2_cores(chunk_ms: float, step_ms: float, threads: int) -> int:
    """Streams a 2-core machine keeps in real time: none if one stream's step is longer than its
    chunk (it falls behind even alone); else the cores' time per chunk duration over the step's,
    a stream taking `threads` cores while it runs (2 / threads steps at a time)."""
    if step_ms > chunk_ms:
        return 0
    return math.floor((2 // threads) * chunk_ms / step_ms) if threads <= 2 else 0


def git_state() -> str:
    """HEAD's short hash, with '+dirty' when the package's files differ from it."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "transcribe"], cwd=REPO, capture_output=True,
                               text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


class Pieces:
    """--no-session: what ParakeetASR reads of a tokenizer when no text is made."""

    def __init__(self, n: int):
        self.pieces = [f"p{i}" for i in range(n)]

    def __len__(self) -> int:
        return len(self.pieces)


def realistic_joint(asr, enc_frames, steps, tokens_target: float, original: dict) -> dict:
    """Re-centre the joint's encoder projection on the mean of enc_frames [D, T] (gain ENC_GAIN) and
    bisect the blank bias until greedy decoding of those frames emits about tokens_target tokens."""
    import torch

    from transcribe.search import stream_greedy

    m = asr.model
    proj, last = m.joint.enc, m.joint.joint_net[-1]
    blank = m.blank
    with torch.no_grad():
        proj.weight.copy_(original["w"])
        proj.bias.copy_(original["b"])
        last.bias.copy_(original["out_b"])
    recentre(proj, enc_frames.mean(1), ENC_GAIN)
    m.joint.__dict__.pop("_t", None)  # the joint's cached transposed output weight
    base = float(original["out_b"][blank])
    projected = asr.project_encoder(enc_frames[None])[0]

    def count(b: float) -> int:
        with torch.no_grad():
            last.bias[blank] = base + b
        m.joint.__dict__.pop("_t", None)
        with torch.inference_mode():
            toks, _ = stream_greedy.transducer_chunk(projected, steps, stream_greedy.initial_carry(steps), confidence=None)
        return len(toks)

    b, n = bisect_blank_bias(count, tokens_target)
    spread = float((enc_frames - enc_frames.mean(1, keepdim=True)).norm(dim=0).mean() / enc_frames.mean(1).norm())
    return {"blank_bias_added": round(b, 4), "tokens_on_clip": n, "frame_spread": round(spread, 4)}


# --------------------------------------------------------------------------------------------
# measurements
# --------------------------------------------------------------------------------------------


def chunks_of(asr, sched, pcm) -> list:
    from transcribe.parakeet import cache_aware
    from transcribe.nemo.live_features import LiveMelFeatures

    feats = LiveMelFeatures(asr.model.preprocessor)
    frames = feats.push(pcm)
    chunker = cache_aware.Chunker(sched, asr.model.preprocessor.n_mels)
    return chunker.push(frames)  # complete chunks only


def encode_steady(asr, sched, chunks):
    """The encoder output [D, T] of the steady chunks (the earlier ones are run, not kept)."""
    import torch

    from transcribe.parakeet import cache_aware

    m = asr.model
    cache = cache_aware.EncoderCache(m.encoder, sched, None, next(m.encoder.parameters()).dtype)
    outs = [cache_aware.stream_step(m.encoder, f, cache, sched, drop_extra_pre_encoded=d) for f, d in chunks]
    return torch.cat(outs[steady_from(sched):], dim=1)


def steady_from(sched) -> int:
    """Index of the first chunk that starts with the attention cache full."""
    first = (sched.chunk_size[0] - 1) // 8 + 1  # encoder frames of the first chunk (causal 8x subsampling)
    need = sched.last_channel_cache_size
    k, have = 1, first
    while have < need:
        have += sched.valid_out_len
        k += 1
    return k


def time_components(asr, sched, chunks, steps, reset_ids, threads: int) -> dict:
    """One round: per steady chunk, encoder ms and decoder ms, and tokens."""
    import torch

    from transcribe.parakeet import cache_aware
    from transcribe.runtime import model_call
    from transcribe.search import stream_greedy

    m = asr.model
    enc_t, dec_t, cpu_t, n_tok = array("d"), array("d"), array("d"), 0
    start = steady_from(sched)
    with model_call(threads):
        cache = cache_aware.EncoderCache(m.encoder, sched, None, next(m.encoder.parameters()).dtype)
        with torch.inference_mode():
            carry = stream_greedy.initial_carry(steps)
        for i, (feats, drop) in enumerate(chunks):
            full = cache.length >= sched.last_channel_cache_size
            c0 = time.thread_time()
            t0 = time.perf_counter()
            enc = cache_aware.stream_step(m.encoder, feats, cache, sched, drop_extra_pre_encoded=drop)
            t1 = time.perf_counter()
            with torch.inference_mode():
                proj = asr.project_encoder(enc[None])[0]
                toks, carry = stream_greedy.transducer_chunk(proj, steps, carry, confidence="entropy",
                                                             reset_ids=reset_ids)
            t2 = time.perf_counter()
            c2 = time.thread_time()
            if i >= start:
                assert full
                enc_t.append(t1 - t0)
                dec_t.append(t2 - t1)
                cpu_t.append(c2 - c0)
                n_tok += len(toks)
    tot = [a + b for a, b in zip(enc_t, dec_t)]
    return {"encoder_ms": 1000 * statistics.median(enc_t), "decoder_ms": 1000 * statistics.median(dec_t),
            "total_ms": 1000 * statistics.median(tot), "decoder_mean_ms": 1000 * statistics.fmean(dec_t),
            "total_cpu_ms": 1000 * statistics.median(cpu_t),
            "chunks": len(enc_t), "tokens": n_tok}


def time_session(asr, att, sched, pcm, piece: int) -> dict:
    """One round through a CacheAwareSession: steady chunk steps, and all feed time per steady chunk."""
    sess = asr.stream(att_context_size=att)
    steps_t, steps_cpu = array("d"), array("d")
    run = sess._run

    def timed(*args, **kw):
        c0 = time.thread_time()
        t0 = time.perf_counter()
        try:
            return run(*args, **kw)
        finally:
            steps_t.append(time.perf_counter() - t0)
            steps_cpu.append(time.thread_time() - c0)

    sess._run = timed  # this instance only
    start = steady_from(sched)
    feed_steady, chunks_before = 0.0, None
    n_tok = n_words = 0
    for i in range(0, len(pcm), piece):
        t0 = time.perf_counter()
        sess.feed(pcm[i:i + piece])
        sess.take_new_text()
        toks = sess.take_new_tokens()
        words = sess.drain_words()
        sess.drain_events()
        dt = time.perf_counter() - t0
        if len(steps_t) >= start:
            if chunks_before is None:  # from the feed after the one that ran the last warm-up chunk
                chunks_before = len(steps_t)
            else:
                feed_steady += dt
                n_tok += len(toks)
                n_words += len(words)
    steady = steps_t[start:]
    n_steady = len(steps_t) - (chunks_before or len(steps_t))
    return {"step_ms": 1000 * statistics.median(steady), "step_mean_ms": 1000 * statistics.fmean(steady),
            "step_cpu_ms": 1000 * statistics.median(steps_cpu[start:]),
            "feed_per_chunk_ms": 1000 * feed_steady / max(1, n_steady), "chunks": len(steady),
            "feed_chunks": n_steady, "tokens": n_tok, "words": n_words}


def profile_cell(asr, sched, chunks, steps, reset_ids, threads: int, rows: int) -> dict:
    """torch.profiler over the steady chunks of one cell, with the parts of a chunk marked: the
    encoder's modules (their forward, wrapped on the instances) and the step's helper functions
    where the module has them (replaced in this process only, restored after)."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    from transcribe.parakeet import cache_aware
    from transcribe.runtime import model_call
    from transcribe.search import stream_greedy

    m = asr.model
    L = {"chunk": "## chunk", "dec": "## decoder", "pre": "## pre_encode", "layer": "## layer",
         "ff": "## feed_forward", "qkvo": "## att.linear_q/k/v/out", "pos": "## att.linear_pos",
         "conv": "## conv_module", "norm": "## layer norms"}

    def marked(fn, label):
        def wrapper(*a, **k):
            with record_function(label):
                return fn(*a, **k)
        return wrapper

    saved_fns = {name: getattr(cache_aware, name) for name, lab in (("_layer_step", "layer"), ("_conv_step", "conv"))
                 if hasattr(cache_aware, name)}
    for name, lab in (("_layer_step", "layer"), ("_conv_step", "conv")):
        if name in saved_fns:
            setattr(cache_aware, name, marked(saved_fns[name], L[lab]))
    wrapped = [(m.encoder.pre_encode, "pre")]
    for layer in m.encoder.layers:
        wrapped += [(layer.feed_forward1, "ff"), (layer.feed_forward2, "ff")]
        wrapped += [(getattr(layer.self_attn, n), "qkvo") for n in ("linear_q", "linear_k", "linear_v", "linear_out")]
        wrapped += [(layer.self_attn.linear_pos, "pos")]
        wrapped += [(getattr(layer, n), "norm") for n in ("norm_feed_forward1", "norm_self_att", "norm_conv",
                                                          "norm_feed_forward2", "norm_out")]
    for mod, lab in wrapped:
        mod.forward = marked(mod.forward, L[lab])
    start = steady_from(sched)
    walls = array("d")
    try:
        with model_call(threads):
            cache = cache_aware.EncoderCache(m.encoder, sched, None, next(m.encoder.parameters()).dtype)
            with torch.inference_mode():
                carry = stream_greedy.initial_carry(steps)
            for feats, drop in chunks[:start]:
                enc = cache_aware.stream_step(m.encoder, feats, cache, sched, drop_extra_pre_encoded=drop)
                with torch.inference_mode():
                    _, carry = stream_greedy.transducer_chunk(asr.project_encoder(enc[None])[0], steps, carry,
                                                              confidence="entropy", reset_ids=reset_ids)
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                for feats, drop in chunks[start:]:
                    t0 = time.perf_counter()
                    with record_function(L["chunk"]):
                        enc = cache_aware.stream_step(m.encoder, feats, cache, sched, drop_extra_pre_encoded=drop)
                        with record_function(L["dec"]), torch.inference_mode():
                            _, carry = stream_greedy.transducer_chunk(
                                asr.project_encoder(enc[None])[0], steps, carry, confidence="entropy",
                                reset_ids=reset_ids)
                    walls.append(time.perf_counter() - t0)
    finally:
        for name, fn in saved_fns.items():
            setattr(cache_aware, name, fn)
        for mod, _ in wrapped:
            mod.__dict__.pop("forward", None)
    n = len(walls)
    ev = prof.key_averages()
    by = {e.key: e for e in ev}

    def ms(label):  # inclusive CPU time per chunk
        e = by.get(L[label])
        return e.cpu_time_total / 1000 / n if e else 0.0

    ops_self = sum(e.self_cpu_time_total for e in ev if not e.key.startswith("## ")) / 1000 / n
    in_layer = ms("ff") + ms("qkvo") + ms("conv") + ms("norm")
    parts = {
        "pre_encode (subsampling)": ms("pre"),
        "feed_forward (2 per layer)": ms("ff"),
        "attention linear_q/k/v/out (chunk frames)": ms("qkvo"),
        "attention linear_pos (relative positions)": ms("pos"),
        "conv module": ms("conv"),
        "layer norms (5 per layer)": ms("norm"),
        "layer rest (scores, softmax, masks, residuals, cache writes)": ms("layer") - in_layer if ms("layer") else 0.0,
        "encoder rest (masks, cache bookkeeping, outside the layers)": ms("chunk") - ms("dec") - ms("pre") -
        (ms("layer") if ms("layer") else in_layer) - ms("pos"),
        "decoder (projection + greedy)": ms("dec"),
    }
    chunk_cpu = ms("chunk")
    top = sorted((e for e in ev if not e.key.startswith("## ")), key=lambda e: -e.self_cpu_time_total)[:rows]
    enc_bytes = sum(p.numel() * p.element_size() for p in m.encoder.parameters())
    return {
        "chunks": n,
        "encoder_weight_mb": round(enc_bytes / 1e6, 1),
        "wall_ms_per_chunk_median": 1000 * statistics.median(walls),
        "wall_ms_per_chunk_mean": 1000 * statistics.fmean(walls),
        "profiled_chunk_ms": chunk_cpu,
        "parts_ms_per_chunk": {k: round(v, 3) for k, v in parts.items()},
        "op_self_ms_per_chunk": round(ops_self, 3),
        "not_in_ops_ms_per_chunk (python, dispatch, profiler)": round(chunk_cpu - ops_self, 3),
        "top_ops": [{"op": e.key, "self_ms_per_chunk": round(e.self_cpu_time_total / 1000 / n, 4),
                     "calls_per_chunk": round(e.count / n, 1)} for e in top],
    }


# --------------------------------------------------------------------------------------------


def run_model(name: str, a, corpus: Path, work: Path, pcm) -> dict:
    from transcribe.parakeet import cache_aware
    from transcribe.parakeet.model import ParakeetModel
    from transcribe.parakeet.recognizer import ParakeetASR
    from transcribe.parakeet.streaming import event_tokens

    chunk_list = [int(v) for v in a.chunks_ms.split(",")]
    cfg, want, own = load_config(name, chunk_list)
    t = time.perf_counter()
    model = ParakeetModel.random(cfg, seed=a.seed)
    model.encoder.fold_batch_norm()
    build_s = time.perf_counter() - t
    params = sum(p.numel() for p in model.parameters())
    tok = Pieces(model.vocab_size) if a.no_session else train_tokenizer(work, model.vocab_size, corpus)
    asr = ParakeetASR(model, tok, name)
    asr.threads = a.threads
    steps = asr.transducer_steps()
    reset_ids = frozenset(i for i, k in event_tokens(tok.pieces).items() if k == "eou")
    joint0 = {"w": model.joint.enc.weight.detach().clone(), "b": model.joint.enc.bias.detach().clone(),
              "out_b": model.joint.joint_net[-1].bias.detach().clone()}
    print(f"{name}: {params / 1e6:.1f} M parameters (built in {build_s:.1f} s), own lookaheads {own}, "
          f"vocabulary {model.vocab_size}", flush=True)
    out = {"model": name, "params": params, "own_lookaheads": own, "vocab_size": model.vocab_size,
           "d_model": model.encoder.d_model, "layers": len(model.encoder.layers), "cells": []}
    for ms in chunk_list:
        att = want[ms]
        sched = cache_aware.schedule(model.encoder, att)
        chunk_s = model.frame_seconds(att[1] + 1)
        chunks = chunks_of(asr, sched, pcm)
        from transcribe.runtime import model_call

        with model_call(a.threads):
            enc = encode_steady(asr, sched, chunks)  # also the warm-up
            tuning = realistic_joint(asr, enc, steps, a.tokens_per_second * model.frame_seconds(enc.shape[1]), joint0)
        comp = [time_components(asr, sched, chunks, steps, reset_ids, a.threads) for _ in range(a.rounds)]
        sess = [time_session(asr, att, sched, pcm, int(a.piece_ms * SAMPLE_RATE / 1000))
                for _ in range(a.rounds if not a.no_session else 0)]
        best = min(comp, key=lambda r: r["total_ms"])
        cell = {
            "chunk_ms": round(1000 * chunk_s), "att_context_size": att, "lookahead_in_config": att in own,
            "schedule": sched.to_dict(), "steady_chunks": best["chunks"], "tuning": tuning,
            "tokens_per_second": round(best["tokens"] / (best["chunks"] * chunk_s), 2),
            "encoder_ms": min(r["encoder_ms"] for r in comp),
            "decoder_ms": min(r["decoder_ms"] for r in comp),
            "decoder_mean_ms": min(r["decoder_mean_ms"] for r in comp),
            "total_ms": best["total_ms"],
            "total_cpu_ms": min(r["total_cpu_ms"] for r in comp),
            "rounds_components": comp,
        }
        cell["rtf_components"] = cell["total_ms"] / (1000 * chunk_s)
        if sess:
            sb = min(sess, key=lambda r: r["feed_per_chunk_ms"])
            cell.update({
                "session_step_ms": min(r["step_ms"] for r in sess),
                "session_step_cpu_ms": min(r["step_cpu_ms"] for r in sess),
                "session_tokens_per_second": round(sb["tokens"] / (sb["feed_chunks"] * chunk_s), 2),
                "session_feed_per_chunk_ms": sb["feed_per_chunk_ms"],
                "rounds_session": sess,
            })
            cell["rtf_session"] = cell["session_feed_per_chunk_ms"] / (1000 * chunk_s)
            basis = cell["session_feed_per_chunk_ms"]
        else:
            basis = cell["total_ms"]
        cell["streams_per_2_cores"] = streams_per_2_cores(1000 * chunk_s, basis, a.threads)
        out["cells"].append(cell)
        print(f"  {cell['chunk_ms']:5d} ms {str(att):>9}{'' if cell['lookahead_in_config'] else '*'}: "
              f"encoder {cell['encoder_ms']:8.2f} ms, decoder {cell['decoder_ms']:6.2f} ms "
              f"({cell['tokens_per_second']:.1f} tok/s), total {cell['total_ms']:8.2f} ms, "
              f"RTF {cell['rtf_components']:.3f}"
              + (f"; session step {cell['session_step_ms']:8.2f} ms, feed/chunk {cell['session_feed_per_chunk_ms']:8.2f} ms"
                 if sess else "")
              + f"; streams/2 cores {cell['streams_per_2_cores']}", flush=True)
        if a.profile and a.profile == f"{name}:{ms}":
            # the profile runs on a fresh pass over the same chunks (the joint as tuned above)
            out["profile"] = {"chunk_ms": ms, **profile_cell(asr, sched, chunks, steps, reset_ids, a.threads, a.rows)}
            print_profile(out["profile"])
    del asr, model
    return out


def print_profile(p: dict) -> None:
    print(f"  profile over {p['chunks']} steady chunks of {p['chunk_ms']} ms: wall {p['wall_ms_per_chunk_median']:.2f} ms "
          f"median per chunk ({p['profiled_chunk_ms']:.2f} ms profiled, with the profiler's own cost); "
          f"the encoder's weights are {p['encoder_weight_mb']:.0f} MB, all read once per chunk")
    for k, v in p["parts_ms_per_chunk"].items():
        print(f"    {k:62s} {v:8.3f} ms")
    print(f"    ops' own time {p['op_self_ms_per_chunk']:.3f} ms; outside any op (Python, dispatch, profiler) "
          f"{p['not_in_ops_ms_per_chunk (python, dispatch, profiler)']:.3f} ms")
    print("    top ops by self time per chunk:")
    for r in p["top_ops"]:
        print(f"      {r['op']:40s} {r['self_ms_per_chunk']:8.3f} ms  {r['calls_per_chunk']:7.1f} calls")


def run_parallel(a) -> int:
    """N copies of this benchmark at once; their results side by side."""
    args = [sys.executable, str(Path(__file__).resolve())]
    skip = False
    for x in sys.argv[1:]:
        if skip:
            skip = False
            continue
        if x in ("--parallel", "--json"):
            skip = True
            continue
        if x.startswith(("--parallel=", "--json=")):
            continue
        args.append(x)
    tmp = Path(tempfile.mkdtemp(prefix="chunk_cost_"))
    procs = [subprocess.Popen(args + ["--json", str(tmp / f"copy{i}.json")], stdout=open(tmp / f"copy{i}.log", "w"),
                              stderr=subprocess.STDOUT) for i in range(a.parallel)]
    load_start = os.getloadavg()
    rcs = [p.wait() for p in procs]
    print(cpu_line())
    results = []
    for i, rc in enumerate(rcs):
        print(f"--- copy {i} (exit {rc})")
        print((tmp / f"copy{i}.log").read_text())
        if rc == 0:
            results.append(json.loads((tmp / f"copy{i}.json").read_text()))
    res = {"parallel": a.parallel, **cpu_info(), "copies": results, "loadavg_start": load_start, "loadavg_end": os.getloadavg()}
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(res, indent=1) + "\n")
        print(f"wrote {a.json}")
    return 0 if all(rc == 0 for rc in rcs) else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=DEFAULT_MODELS, help=f"config names under {CONFIGS}/ (default {DEFAULT_MODELS})")
    ap.add_argument("--chunks-ms", default="80,160,560,1120")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=20.0, help="speech clip length (default 20)")
    ap.add_argument("--piece-ms", type=float, default=100.0, help="audio per feed() in the session (default 100)")
    ap.add_argument("--tokens-per-second", type=float, default=3.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-session", action="store_true", help="components only (no tokenizer, no session)")
    ap.add_argument("--profile", help="MODEL:MS, e.g. parakeet_realtime_eou_120m-v1:160")
    ap.add_argument("--rows", type=int, default=15, help="top ops listed by --profile")
    ap.add_argument("--parallel", type=int, default=1, help="run N copies at once (default 1)")
    ap.add_argument("--json", help="write the results here (e.g. bench-out/stream_chunk_cost.json)")
    a = ap.parse_args()
    if a.parallel > 1:
        return run_parallel(a)
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    import torch

    import transcribe.runtime
    from speech_clip import speech_clip

    torch.set_num_threads(a.threads)
    transcribe.runtime.tune_malloc()
    pcm, _ = speech_clip(a.seconds)
    load_start = os.getloadavg()
    print(f"{a.seconds:g} s of speech, {a.threads} thread(s), best of {a.rounds} rounds; "
          f"load {load_start[0]:.2f}; {cpu_line()}", flush=True)
    res = {**cpu_info(), "threads": a.threads, "rounds": a.rounds, "seconds": a.seconds, "piece_ms": a.piece_ms,
           "tokens_per_second_target": a.tokens_per_second, "torch": torch.__version__,
           "loadavg_start": load_start, "commit": git_state(), "models": []}
    with tempfile.TemporaryDirectory(prefix="chunk_cost_") as tmp:
        work = Path(tmp)
        corpus = work / "corpus.txt"
        if not a.no_session:
            english_lines(corpus)
        for name in a.models.split(","):
            res["models"].append(run_model(name, a, corpus, work, pcm))
    res["loadavg_end"] = os.getloadavg()
    print(f"load average: start {load_start[0]:.2f}, end {res['loadavg_end'][0]:.2f}")
    if a.json:
        path = Path(a.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(res, indent=1) + "\n")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
