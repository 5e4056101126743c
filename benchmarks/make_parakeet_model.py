#!/usr/bin/env python
"""Build a random-weight model with the full nvidia/parakeet-tdt-0.6b-v2 architecture, as a .nemo.

Run from the repository root with the Python of the NeMo virtual environment (made by
tools/setup_nemo_venv.sh):

    .venv-nemo/bin/python benchmarks/make_parakeet_model.py \
        [local-models/parakeet-tdt-0.6b-v2-random.nemo] [--seed 1234] [--threads 2]

The output (about 2.4 GB; default local-models/parakeet-tdt-0.6b-v2-random.nemo, relative to the
repository root; a path given is relative to the working directory) goes to a git-ignored folder
and is never committed.  It is a stand-in
for the published checkpoint (which cannot be downloaded here) with the same shapes, so the same
amount of compute: only the weights differ.  Used by benchmarks/parakeet_rtfx.py.

What it builds (the published model_config.yaml of parakeet-tdt-0.6b-v2, written out below):
  - preprocessor: 128 mels, n_fft 512, window 0.025 s / stride 0.01 s (hann), per_feature normalize
  - encoder: FastConformer, d_model 1024, 24 layers, 8 heads, ff_expansion 4, dw_striding 8x with
    256 channels, conv kernel 9, batch_norm, rel_pos, xscaling, untie_biases, pos_emb_max_len 5000
  - decoder: RNNTDecoder, pred_hidden 640, 2 LSTM layers, blank_as_pad
  - joint: RNNTJoint, joint_hidden 640, relu, num_extra_outputs 5 (TDT durations [0, 1, 2, 3, 4])
  - decoding: greedy_batch, max_symbols 10; target EncDecRNNTBPEModel, loss tdt

Weights: NeMo's own initialisation under torch.manual_seed(seed); batch-norm running statistics
stay at their initial values (mean 0, variance 1).

Tokenizer: the published model's tokenizer (a 1024-piece SentencePiece BPE) is not on this
machine, so a 1024-piece SentencePiece BPE is trained here with NeMo's own `create_spt_model`
(cased, like the published one) on English text that is on disk: the license texts in
/usr/share/common-licenses plus the docstrings of the Python standard library of the running
interpreter (modules, classes, functions; test packages left out), files in sorted order.  The
pieces therefore depend on what those directories hold; only the vocabulary size matters for speed.

Decoding realism: with NeMo's random initialisation the encoder's output is nearly the same vector
on every frame (frame-to-frame differences are about 5% of the mean frame), so the joint makes the
same decision on every frame: either blank everywhere (no decoding work at all) or a token on nearly
every frame (far more than real speech).  Two cheap changes to the joint's weights (not its shapes,
so not its cost per step) give a realistic decoding load:
  1. the joint's encoder projection is re-centred on the mean encoder frame of the benchmark clip
     and its weight scaled by ENC_GAIN (30): enc(x) = 30 W (x - mean) + b, so token/blank and
     duration decisions change from frame to frame;
  2. a constant is added to the blank entry of the bias of the joint's last Linear layer, found by
     bisection so that greedy TDT decoding of the benchmark clip (benchmarks/speech_clip.py, 60 s of
     real speech) emits about --tokens-per-second tokens (default 3, about what a real model emits
     for read English speech).
(benchmarks/blank_bias.py, shared with the other transducers' benchmark models.)
The duration outputs are left alone; they vary from frame to frame after step 1.
"""
from __future__ import annotations

import argparse
import ast
import logging
import os
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from blank_bias import ENC_GAIN, bisect_blank_bias, recentre

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = "local-models/parakeet-tdt-0.6b-v2-random.nemo"  # relative to REPO (git-ignored)
VOCAB_SIZE = 1024
DURATIONS = [0, 1, 2, 3, 4]

log = logging.getLogger("make_parakeet_model")


def model_config(tokenizer_dir: str) -> dict:
    """The published parakeet-tdt-0.6b-v2 model config (inference-relevant parts; no datasets, no optimiser)."""
    return {
        "sample_rate": 16000,
        "log_prediction": True,
        "skip_nan_grad": False,
        "model_defaults": {
            "enc_hidden": 1024,
            "pred_hidden": 640,
            "joint_hidden": 640,
            "tdt_durations": list(DURATIONS),
            "num_tdt_durations": len(DURATIONS),
        },
        "tokenizer": {"dir": tokenizer_dir, "type": "bpe"},
        "preprocessor": {
            "_target_": "nemo.collections.asr.modules.AudioToMelSpectrogramPreprocessor",
            "sample_rate": 16000,
            "normalize": "per_feature",
            "window_size": 0.025,
            "window_stride": 0.01,
            "window": "hann",
            "features": 128,
            "n_fft": 512,
            "log": True,
            "frame_splicing": 1,
            "dither": 1.0e-05,
            "pad_to": 0,
            "pad_value": 0.0,
        },
        "spec_augment": {
            "_target_": "nemo.collections.asr.modules.SpectrogramAugmentation",
            "freq_masks": 2,
            "time_masks": 10,
            "freq_width": 27,
            "time_width": 0.05,
        },
        "encoder": {
            "_target_": "nemo.collections.asr.modules.ConformerEncoder",
            "feat_in": 128,
            "feat_out": -1,
            "n_layers": 24,
            "d_model": 1024,
            "subsampling": "dw_striding",
            "subsampling_factor": 8,
            "subsampling_conv_channels": 256,
            "causal_downsampling": False,
            "ff_expansion_factor": 4,
            "self_attention_model": "rel_pos",
            "n_heads": 8,
            "att_context_size": [-1, -1],
            "att_context_style": "regular",
            "xscaling": True,
            "untie_biases": True,
            "pos_emb_max_len": 5000,
            "conv_kernel_size": 9,
            "conv_norm_type": "batch_norm",
            "conv_context_size": None,
            "dropout": 0.1,
            "dropout_pre_encoder": 0.1,
            "dropout_emb": 0.0,
            "dropout_att": 0.1,
            "stochastic_depth_drop_prob": 0.0,
            "stochastic_depth_mode": "linear",
            "stochastic_depth_start_layer": 1,
        },
        "decoder": {
            "_target_": "nemo.collections.asr.modules.RNNTDecoder",
            "normalization_mode": None,
            "random_state_sampling": False,
            "blank_as_pad": True,
            "prednet": {"pred_hidden": 640, "pred_rnn_layers": 2, "t_max": None, "dropout": 0.2},
        },
        "joint": {
            "_target_": "nemo.collections.asr.modules.RNNTJoint",
            "log_softmax": None,
            "preserve_memory": False,
            "fuse_loss_wer": True,
            "fused_batch_size": 4,
            "jointnet": {"joint_hidden": 640, "activation": "relu", "dropout": 0.2},
            "num_extra_outputs": len(DURATIONS),
        },
        "decoding": {
            "strategy": "greedy_batch",
            "model_type": "tdt",
            "durations": list(DURATIONS),
            "greedy": {"max_symbols": 10},
            "beam": {"beam_size": 2, "return_best_hypothesis": False, "score_norm": True,
                     "tsd_max_sym_exp": 50, "alsd_max_target_len": 2.0},
        },
        "loss": {
            "loss_name": "tdt",
            "tdt_kwargs": {"fastemit_lambda": 0.0, "clamp": -1.0, "durations": list(DURATIONS),
                           "sigma": 0.02, "omega": 0.1},
        },
        "train_ds": None,
        "validation_ds": None,
        "test_ds": None,
        "optim": None,
        "target": "nemo.collections.asr.models.rnnt_bpe_models.EncDecRNNTBPEModel",
    }


# --------------------------------------------------------------------------------------
# tokenizer
# --------------------------------------------------------------------------------------


def _docstrings(path: Path) -> list[str]:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return []
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node)
            if doc:
                out.append(doc)
    return out


def english_corpus(path: Path) -> int:
    """Write the training text (one line of prose per line); returns the number of lines."""
    texts: list[str] = []
    for f in sorted(Path("/usr/share/common-licenses").glob("*")):
        if f.is_file() and not f.is_symlink():
            texts.append(f.read_text(encoding="utf-8", errors="ignore"))
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for f in sorted(stdlib.rglob("*.py")):
        rel = f.relative_to(stdlib).parts
        if rel[0] in ("site-packages", "dist-packages", "test", "idlelib", "lib2to3") or "tests" in rel:
            continue
        texts.extend(_docstrings(f))
    n = 0
    with open(path, "w", encoding="utf-8") as out:
        for t in texts:
            for line in t.splitlines():
                line = " ".join(line.split())
                # prose only: lines with at least three words, mostly letters
                if len(line.split()) >= 3 and sum(c.isalpha() or c == " " for c in line) >= 0.8 * len(line):
                    out.write(line + "\n")
                    n += 1
    return n


def train_tokenizer(work: Path, seed: int) -> Path:
    import sentencepiece as spm
    from nemo.collections.common.tokenizers.sentencepiece_tokenizer import create_spt_model

    corpus = work / "corpus.txt"
    n = english_corpus(corpus)
    log.info("tokenizer corpus: %d lines, %.1f MB", n, corpus.stat().st_size / 1e6)
    spm.set_random_generator_seed(seed)
    out = work / "tokenizer"
    create_spt_model(str(corpus), VOCAB_SIZE, sample_size=-1, do_lower_case=False, tokenizer_type="bpe",
                     output_dir=str(out))
    sp = spm.SentencePieceProcessor(model_file=str(out / "tokenizer.model"))
    if sp.get_piece_size() != VOCAB_SIZE:
        raise SystemExit(f"tokenizer has {sp.get_piece_size()} pieces, wanted {VOCAB_SIZE}: not enough text")
    return out


# --------------------------------------------------------------------------------------
# blank bias
# --------------------------------------------------------------------------------------


def count_tokens(model, enc, enc_len) -> int:
    import torch

    with torch.inference_mode():
        hyps = model.decoding.rnnt_decoder_predictions_tensor(encoder_output=enc, encoded_lengths=enc_len)
    return len(hyps[0].y_sequence)


def make_decoding_realistic(model, audio, tokens_per_second: float) -> dict:
    """Make the joint's decisions follow the audio, then bias blank for `tokens_per_second` on `audio`."""
    import torch

    seconds = len(audio) / 16000
    target = tokens_per_second * seconds
    x = torch.from_numpy(audio)[None]
    t0 = time.time()
    with torch.inference_mode():
        feats, feat_len = model.preprocessor(input_signal=x, length=torch.tensor([x.shape[1]]))
        enc, enc_len = model.encoder(audio_signal=feats, length=feat_len)
    frames = enc[0, :, : int(enc_len[0])].T  # (T, d_model)
    mu = frames.mean(0)
    spread = (frames - mu).norm(dim=1).mean() / mu.norm()
    log.info("encoder on the %.0f s clip: %.1f s, %d frames; frame-to-frame spread %.3f of the mean frame",
             seconds, time.time() - t0, int(enc_len[0]), float(spread))
    # 1. Let the joint's encoder projection see each frame's deviation from the mean frame, amplified.
    recentre(model.joint.enc, mu)
    # 2. Bias blank until greedy decoding emits about `target` tokens.
    last = model.joint.joint_net[-1]
    blank = model.decoder.blank_idx
    base = float(last.bias[blank])

    def tokens_at(b: float) -> int:
        with torch.no_grad():
            last.bias[blank] = base + b
        return count_tokens(model, enc, enc_len)

    b, n = bisect_blank_bias(tokens_at, target, log.info)
    return dict(enc_gain=ENC_GAIN, blank_bias_added=round(b, 4), tokens=n,
                tokens_per_second=round(n / seconds, 2), frames=int(enc_len[0]))


# --------------------------------------------------------------------------------------


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", default=None,
                    help=f"output .nemo (default {DEFAULT_OUT} in the repository)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens-per-second", type=float, default=3.0,
                    help="tune the blank bias for this many emitted tokens a second on the benchmark clip (0: no tuning)")
    args = ap.parse_args(argv)

    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    import numpy as np
    import torch

    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    from nemo.utils import logging as nemo_logging

    nemo_logging.setLevel(logging.ERROR)
    from nemo.collections.asr.models import EncDecRNNTBPEModel
    from omegaconf import OmegaConf

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from speech_clip import speech_clip

    out = Path(args.out).resolve() if args.out else REPO / DEFAULT_OUT
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tok = train_tokenizer(Path(tmp), args.seed)
        cfg = OmegaConf.create(model_config(str(tok)))
        torch.manual_seed(args.seed)
        np.random.seed(args.seed)
        t0 = time.time()
        model = EncDecRNNTBPEModel(cfg=cfg).cpu().eval()
        log.info("built in %.1f s: %.1f M parameters, vocabulary %d", time.time() - t0,
                 sum(p.numel() for p in model.parameters()) / 1e6, model.tokenizer.vocab_size)
        if args.tokens_per_second > 0:
            audio, _ = speech_clip(60.0)
            info = make_decoding_realistic(model, audio, args.tokens_per_second)
            log.info("decoding made realistic: %s", info)
        t0 = time.time()
        model.save_to(str(out))
    log.info("saved %s (%.2f GB) in %.1f s", out, out.stat().st_size / 1e9, time.time() - t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
