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
             --precisions L  comma list of fp32, int8 (default fp32,int8; int8 is ours only: its row runs
                             gigaam in fp32 beside it)

The model: the published v3 config (16 conformer layers, d_model 768, 16 heads, FF x4, conv1d subsampling by 4,
rotary attention, kernel 5, layer norm; RNN-T predictor and joint 320; 34 or 1025 / 257 classes) built by the
gigaam package (GigaAMASR(cfg), its random initialisation, seeded) in the reference venv and saved in the
Hugging Face layout ours loads (config.json, pytorch_model.bin). A transducer's joint is then made to decide
from frame to frame and emit about 3 labels a second on the clip (benchmarks/blank_bias.py: a random joint
otherwise emits the per-frame cap of 10 labels on every frame, 15000 search steps a minute, which real speech
never gives; the weights change, not the shapes). The e2e variants get a character vocabulary
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
import sys
import time
from pathlib import Path

from side_by_side import SAMPLE_RATE, Bench, load_ours, main, rss_mb

MAX_PIECE_S = 25.0
CLASSES = {"ctc": 34, "rnnt": 34, "e2e_ctc": 257, "e2e_rnnt": 1025}
DEFAULT_REF_PYTHON = ".venv-gigaam/bin/python"
TOKENS_PER_SECOND = 3.0  # the labels a second a transducer model is tuned to emit on the clip (blank_bias.py)


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
    if variant.endswith("rnnt"):
        realistic_decoding(model)
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / "config.json").write_text(json.dumps({"model_type": "gigaam", "cfg": {"model": {"cfg": cfg}}},
                                                      ensure_ascii=False, indent=1))
    torch.save({"model." + k: v for k, v in model.state_dict().items()}, Path(out) / "pytorch_model.bin")
    print(f"{out}: {sum(p.numel() for p in model.parameters()):,} parameters", file=sys.stderr)
    return 0


def realistic_decoding(model, tokens_per_second: float = TOKENS_PER_SECOND) -> None:
    """(In the gigaam venv) a transducer's joint made to decide from frame to frame and emit about
    `tokens_per_second` labels on the benchmark clip with gigaam's own greedy search (benchmarks/blank_bias.py)."""
    import torch

    from blank_bias import bisect_blank_bias, recentre
    from speech_clip import speech_clip

    pcm, _ = speech_clip(60.0)
    step = int(MAX_PIECE_S * SAMPLE_RATE)
    pieces = [torch.from_numpy(pcm[a:a + step]) for a in range(0, len(pcm), step)]
    batch = torch.zeros(len(pieces), max(len(p) for p in pieces))
    for j, p in enumerate(pieces):
        batch[j, : len(p)] = p
    with torch.inference_mode():
        enc, enc_len = model.forward(batch, torch.tensor([len(p) for p in pieces]))
    mu = torch.cat([enc[j, :, : int(n)] for j, n in enumerate(enc_len)], dim=1).mean(1)
    recentre(model.head.joint.enc, mu)
    last = model.head.joint.joint_net[-1]
    blank = last.bias.shape[0] - 1
    base = float(last.bias[blank])

    def count(b: float) -> int:
        with torch.no_grad():
            last.bias[blank] = base + b
        with torch.inference_mode():
            return sum(len(ids) for _, ids, _ in model.decoding.decode(model.head, enc, enc_len))

    b, n = bisect_blank_bias(count, tokens_per_second * len(pcm) / SAMPLE_RATE,
                             lambda m: print(m, file=sys.stderr))
    print(f"blank bias {b:+.4f}: {n} labels on the {len(pcm) / SAMPLE_RATE:.0f} s clip", file=sys.stderr)


# ----------------------------------------------------------------------------------------- children

def load_gigaam(model_path: str, precision: str, opts):
    import torch
    from omegaconf import OmegaConf

    from gigaam.model import GigaAMASR

    spans = opts.context
    rss_import = rss_mb()
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


def load_mine(model_path: str, precision: str, opts):
    from transcribe import long_input

    def call(model, pcm):
        t = model.transcribe(pcm, max_piece_s=MAX_PIECE_S)
        spans = long_input.cut_spans(pcm, SAMPLE_RATE, MAX_PIECE_S, "auto", grain=model.model.cfg.frame_samples)
        return t.text, [tok.id for tok in t.tokens], [b - a for a, b in spans]

    return load_ours(model_path, precision, opts, call)


# ----------------------------------------------------------------------------------------- parent

def add_args(ap):
    ap.add_argument("--variant", default="e2e_rnnt", choices=sorted(CLASSES))
    ap.add_argument("--scale", type=int, default=1)
    ap.add_argument("--make", metavar="DIR", help=argparse.SUPPRESS)


def default_model(args) -> str:
    suffix = f"-scale{args.scale}" if args.scale != 1 else ""
    return f"local-models/gigaam-v3-{args.variant.replace('_', '-')}-random{suffix}"


def make_if_missing(args, model, ap):
    """The model is made by the gigaam package in its venv when absent."""
    if (Path(model) / "config.json").exists():
        return
    if not Path(args.ref_python).exists():
        ap.error(f"{args.ref_python}: no such Python (tools/setup_gigaam_venv.sh, or --ref-python)")
    import subprocess

    subprocess.run([args.ref_python, str(Path(__file__).resolve()), "--make", model, "--variant", args.variant,
                    "--scale", str(args.scale)], check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})


def prepare(args, pcm) -> list:
    """The pieces both engines decode: at most 25 s, cut at pauses by this package's cutter."""
    from transcribe import long_input

    return [[int(a), int(b)] for a, b in long_input.cut_spans(pcm, SAMPLE_RATE, MAX_PIECE_S, "auto", grain=640)]


BENCH = Bench(
    family="GigaAM v3", script=__file__, ref="ref", ref_label="gigaam", ref_python_option="--ref-python",
    ref_python_default=DEFAULT_REF_PYTHON, ref_setup="tools/setup_gigaam_venv.sh",
    load_ref=load_gigaam, load_ours=load_mine, default_model=default_model,
    make_hint="gigaam_speed.py itself (it makes the model when absent)", precisions=("fp32", "int8"),
    default_precisions="fp32,int8", ref_runs_fp32=("int8",), add_args=add_args, check=make_if_missing, prepare=prepare,
    early=lambda args: make_model(args.make, args.variant, args.scale) if args.make else None,
    json_extra=lambda args, spans: dict(variant=args.variant, scale=args.scale, pieces=spans),
    title=lambda args, model: f"GigaAM v3 {args.variant} (full-size architecture"
                              f"{'' if args.scale == 1 else f' / {args.scale}'}, random weights)")

if __name__ == "__main__":
    sys.exit(main(BENCH, __doc__))
