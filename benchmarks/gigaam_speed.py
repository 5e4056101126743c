#!/usr/bin/env python
"""GigaAM v3 (full-size architecture, random weights) on the CPU: speed (RTFx) and peak memory, ours against the
`gigaam` package.

Run from the repository root with the project's Python (torch, this package importable):

    python3 benchmarks/gigaam_speed.py --json bench-out/gigaam_speed.json

    options: --variant V     e2e_rnnt (default: the largest head, 1025 classes), rnnt, e2e_ctc or ctc
             --model DIR     the model folder (default local-models/gigaam-v3-<variant>-random, made by this script
                             with --make if absent)
             --ref-python P  Python of the gigaam venv (default .venv-gigaam/bin/python, tools/setup_gigaam_venv.sh)
             --threads N     torch threads and OMP_NUM_THREADS in every child (default 2)
             --rounds N      timed calls of each engine after one warm-up (default 3)
             --seconds S     clip length (default 60)
             --scale K       divide d_model, heads and layers by K (a smoke test at a tiny scale; default 1)
             --impls L       comma list of ref, ours (default ref,ours)

The model: the published v3 config (16 conformer layers, d_model 768, 16 heads, FF x4, conv1d subsampling by 4,
rotary attention, kernel 5, layer norm; RNN-T predictor and joint 320; 34 or 1025 / 257 classes) built by the
gigaam package (GigaAMASR(cfg), its random initialisation, seeded) in the reference venv and saved in the
Hugging Face layout ours loads (config.json, pytorch_model.bin). The e2e variants get a character vocabulary
of as many entries as their SentencePiece model has pieces: the same network and search, only the
detokenization differs (negligible). Only the weights differ from the published checkpoint, so the compute is
the same.

The clip: S seconds of the shared dev utterances joined (benchmarks/speech_clip.py). gigaam transcribes at most
25 s a call (longer audio goes through its pyannote VAD, not installed here), so the clip is cut at pauses into
pieces of at most 25 s by this package's cutter (`long_input.cut_spans`, the cut ours makes itself) and both
engines get the same pieces: the reference as one padded batch through forward() and _decode() (what its
transcribe_longform does with its segments), ours as `model.transcribe(pcm)` on the whole clip (max_piece_s
25, its default: it cuts the same pieces and runs them in batches of 4). Each child: one warm-up, then one
timed call per round (the engines alternate); RTFx = audio seconds / best call; peak RSS (ru_maxrss).
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
MAX_PIECE_S = 25.0
CLASSES = {"ctc": 34, "rnnt": 34, "e2e_ctc": 257, "e2e_rnnt": 1025}
DEFAULT_REF_PYTHON = ".venv-gigaam/bin/python"


def published_cfg(variant: str, scale: int) -> dict:
    d, heads, layers = 768 // scale, max(1, 16 // scale), max(1, 16 // scale)
    n = CLASSES[variant]
    vocab = [chr(0x400 + i) for i in range(n - 1)]  # distinct characters, as many as the published tokens
    cfg = {"model_name": "v3_" + variant, "sample_rate": 16000,
           "preprocessor": {"_target_": "gigaam.preprocess.FeatureExtractor", "sample_rate": 16000, "features": 64,
                            "win_length": 320, "hop_length": 160, "n_fft": 320, "center": False,
                            "mel_scale": "htk", "mel_norm": None},
           "encoder": {"_target_": "gigaam.encoder.ConformerEncoder", "feat_in": 64, "n_layers": layers,
                       "d_model": d, "subsampling": "conv1d", "subs_kernel_size": 5, "subsampling_factor": 4,
                       "ff_expansion_factor": 4, "self_attention_model": "rotary", "pos_emb_max_len": 5000,
                       "n_heads": heads, "conv_norm_type": "layer_norm", "conv_kernel_size": 5, "flash_attn": False}}
    if variant.endswith("ctc"):
        cfg["head"] = {"_target_": "gigaam.decoder.CTCHead", "feat_in": d, "num_classes": n}
        cfg["decoding"] = {"_target_": "gigaam.decoding.CTCGreedyDecoding", "vocabulary": vocab}
    else:
        p = 320 // scale
        cfg["head"] = {"_target_": "gigaam.decoder.RNNTHead",
                       "decoder": {"pred_hidden": p, "pred_rnn_layers": 1, "num_classes": n},
                       "joint": {"enc_hidden": d, "pred_hidden": p, "joint_hidden": p, "num_classes": n}}
        cfg["decoding"] = {"_target_": "gigaam.decoding.RNNTGreedyDecoding", "vocabulary": vocab,
                           "max_symbols_per_step": 10}
    return cfg


def make_model(out: str, variant: str, scale: int) -> int:
    """(In the gigaam venv) the model with gigaam's random initialisation, saved in the Hugging Face layout."""
    import torch
    from omegaconf import OmegaConf

    from gigaam.model import GigaAMASR

    torch.manual_seed(0)
    cfg = published_cfg(variant, scale)
    model = GigaAMASR(OmegaConf.create(cfg)).eval()
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / "config.json").write_text(json.dumps({"model_type": "gigaam", "cfg": {"model": {"cfg": cfg}}},
                                                      ensure_ascii=False, indent=1))
    torch.save({"model." + k: v for k, v in model.state_dict().items()}, Path(out) / "pytorch_model.bin")
    print(f"{out}: {sum(p.numel() for p in model.parameters()):,} parameters", file=sys.stderr)
    return 0


# ----------------------------------------------------------------------------------------- children

def _ref_child(model_path: str, spans: list):
    import torch
    from omegaconf import OmegaConf

    from gigaam.model import GigaAMASR

    rss_import = _rss_mb()
    t0 = time.perf_counter()
    cfg = json.loads((Path(model_path) / "config.json").read_text())["cfg"]["model"]["cfg"]
    model = GigaAMASR(OmegaConf.create(cfg))
    sd = torch.load(Path(model_path) / "pytorch_model.bin", map_location="cpu", weights_only=True)
    model.load_state_dict({k[len("model."):]: v for k, v in sd.items()})
    model.eval()
    load_s = time.perf_counter() - t0

    @torch.inference_mode()
    def run(pcm):
        x = torch.from_numpy(pcm)
        pieces = [x[a:b] for a, b in spans]
        n = max(len(p) for p in pieces)
        batch = torch.zeros(len(pieces), n)
        for j, p in enumerate(pieces):
            batch[j, : len(p)] = p
        lengths = torch.tensor([len(p) for p in pieces])
        enc, enc_len = model.forward(batch, lengths)
        out = model.decoding.decode(model.head, enc, enc_len)
        return " ".join(t for t, _, _ in out), [i for _, ids, _ in out for i in ids], [b - a for a, b in spans]

    return rss_import, load_s, run


def _ours_child(model_path: str, threads: int):
    import transcribe
    import transcribe.runtime
    from transcribe import long_input

    transcribe.runtime.tune_malloc()
    rss_import = _rss_mb()
    t0 = time.perf_counter()
    model = transcribe.load_model(model_path, threads=threads)
    load_s = time.perf_counter() - t0

    def run(pcm):
        t = model.transcribe(pcm, max_piece_s=MAX_PIECE_S)
        spans = long_input.cut_spans(pcm, SAMPLE_RATE, MAX_PIECE_S, "auto", grain=model.model.cfg.frame_samples)
        return t.text, [tok.id for tok in t.tokens], [b - a for a, b in spans]

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
    if args.child == "ref":
        rss_import, load_s, run = _ref_child(args.model, json.loads(Path(args.spans).read_text()))
    else:
        rss_import, load_s, run = _ours_child(args.model, args.threads)
    rss_loaded = _rss_mb()
    warmup_s, times, (text, ids, pieces) = serve_calls(run, pcm, load_s)
    print(RESULT_TAG + json.dumps(dict(
        impl=args.child, threads=torch.get_num_threads(), audio_s=len(pcm) / SAMPLE_RATE, load_s=round(load_s, 2),
        warmup_s=round(warmup_s, 2), times_s=[round(t, 3) for t in times], peak_rss_mb=round(_peak_rss_mb()),
        rss_after_import_mb=round(rss_import), rss_after_load_mb=round(rss_loaded), piece_samples=pieces,
        tokens=len(ids), token_ids=ids, text80=text[:80], torch=torch.__version__)), flush=True)
    return 0


class Child(ChildProcess):
    def __init__(self, python: str, impl: str, model: str, clip: Path, spans: Path, args):
        env = dict(os.environ)
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(args.threads)
        if impl == "ours":
            env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        cmd = [python, str(Path(__file__).resolve()), "--child", impl, "--clip", str(clip), "--spans", str(spans),
               "--model", model, "--threads", str(args.threads)]
        super().__init__(f"{impl} {Path(model).name}", cmd, env)


def table(row: dict) -> str:
    r, o = row.get("ref"), row.get("ours")
    rt = lambda d: f"{d['rtfx_best']:.2f} / {d['rtfx_median']:.2f}" if d else "-"  # noqa: E731
    head = ["gigaam RTFx best / median", "ours RTFx best / median", "ours/gigaam best", "per round",
            "gigaam peak RSS", "ours peak RSS", "same ids"]
    cells = [rt(r), rt(o), f"{r['best_s'] / o['best_s']:.2f}x" if r and o else "-",
             f"{row['round_ratio_median']:.2f}x" if row.get("round_ratio_median") else "-",
             f"{r['peak_rss_mb']} MB" if r else "-", f"{o['peak_rss_mb']} MB" if o else "-",
             ("yes" if r["token_ids"] == o["token_ids"] else "no") if r and o else "-"]
    w = [max(len(a), len(b)) for a, b in zip(head, cells)]
    return "\n".join([" | ".join(x.ljust(n) for x, n in zip(head, w)), "-+-".join("-" * n for n in w),
                      " | ".join(x.ljust(n) for x, n in zip(cells, w))])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variant", default="e2e_rnnt", choices=sorted(CLASSES))
    ap.add_argument("--model")
    ap.add_argument("--ref-python")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--scale", type=int, default=1)
    ap.add_argument("--impls", default="ref,ours")
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--make", metavar="DIR", help=argparse.SUPPRESS)
    ap.add_argument("--child", choices=["ref", "ours"], help=argparse.SUPPRESS)
    ap.add_argument("--clip", help=argparse.SUPPRESS)
    ap.add_argument("--spans", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.make:
        return make_model(args.make, args.variant, args.scale)
    if args.child:
        return child_main(args)
    import subprocess

    import soundfile as sf

    from speech_clip import speech_clip

    sys.path.insert(0, str(REPO))
    from transcribe import long_input

    suffix = f"-scale{args.scale}" if args.scale != 1 else ""
    model = os.path.abspath(args.model) if args.model else \
        str(REPO / "local-models" / f"gigaam-v3-{args.variant.replace('_', '-')}-random{suffix}")
    ref_python = os.path.abspath(args.ref_python) if args.ref_python else str(REPO / DEFAULT_REF_PYTHON)
    impls = [i.strip() for i in args.impls.split(",") if i.strip()]
    if not set(impls) <= {"ref", "ours"}:
        ap.error("impls: ref, ours")
    if not Path(ref_python).exists():
        ap.error(f"{ref_python}: no such Python (tools/setup_gigaam_venv.sh, or --ref-python)")
    if not (Path(model) / "config.json").exists():
        subprocess.run([ref_python, str(Path(__file__).resolve()), "--make", model, "--variant", args.variant,
                        "--scale", str(args.scale)], check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    pcm, used = speech_clip(args.seconds)
    spans = long_input.cut_spans(pcm, SAMPLE_RATE, MAX_PIECE_S, "auto", grain=640)
    started, commit, load_start = time.strftime("%Y-%m-%d %H:%M:%S"), package_commit(), os.getloadavg()
    row: dict = {"variant": args.variant, "scale": args.scale}
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        clip, span_file = Path(tmp) / "clip.wav", Path(tmp) / "spans.json"
        sf.write(clip, pcm, SAMPLE_RATE, subtype="FLOAT")
        span_file.write_text(json.dumps(spans))
        kids = {i: Child(ref_python if i == "ref" else sys.executable, i, model, clip, span_file, args) for i in impls}
        for k in range(args.rounds):
            order = impls if k % 2 == 0 else impls[::-1]
            got = {i: kids[i].call() for i in order}
            if len(got) == 2:
                ratios.append(got["ref"] / got["ours"])
            print(f"    round {k + 1}: " + ", ".join(f"{i} {got[i]:.2f} s" for i in impls), file=sys.stderr, flush=True)
        for i in impls:
            row[i] = summarize({**kids[i].finish(), "load_s": kids[i].ready["load_s"],
                                "warmup_s": kids[i].ready["warmup_s"]})
    if ratios:
        row["round_ratios"] = [round(x, 3) for x in ratios]
        row["round_ratio_median"] = round(statistics.median(ratios), 3)
    text = table(row)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(dict(
            started=started, package_commit=commit, model=shown(model), clip_seconds=args.seconds,
            clip_utterances=used, pieces=spans, threads=args.threads, rounds=args.rounds, **cpu_info(),
            loadavg_start=[round(x, 2) for x in load_start], loadavg_end=[round(x, 2) for x in os.getloadavg()],
            results=row, table=text), indent=2) + "\n")
    print(f"\nGigaAM v3 {args.variant} (full-size architecture{'' if args.scale == 1 else f' / {args.scale}'}, random "
          f"weights), ours at {commit}, {args.seconds:g} s clip, {args.threads} threads, {args.rounds} rounds; "
          f"{cpu_line()}\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
