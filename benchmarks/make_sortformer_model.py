#!/usr/bin/env python
"""Build a random-weight model with the full nvidia/diar_streaming_sortformer_4spk-v2.1 architecture, as a .nemo.

Run from the repository root with the Python of the NeMo virtual environment (made by
tools/setup_nemo_venv.sh):

    .venv-nemo/bin/python benchmarks/make_sortformer_model.py [OUT.nemo] [--preset default|very_high_latency]

The output (about 0.47 GB; default local-models/diar_streaming_sortformer_4spk-v2.1-random.nemo, or
...-random-vhl.nemo for --preset very_high_latency, relative to the repository root; a path given is relative
to the working directory) goes to a git-ignored folder and is never committed. It stands in for the published
checkpoint (which cannot be downloaded here) with the same shapes, so the same compute: only the weights
differ. Used by benchmarks/sortformer_speed.py, sortformer_memory.py and diarize_cost.py.

What it builds: NeMo's `SortformerEncLabelModel(cfg)` with NeMo's own initialisation under a fixed seed
(`--seed`, default 1234), then `save_to()`. The config is written out below from the published model's
`model_config.yaml` as transcribe.cpp's intake report records it (benchmarks/README.md, "Sortformer"):
  - preprocessor: 128 mels, n_fft 512, window 0.025 s / stride 0.01 s (hann), normalize NA, dither 1e-5
  - encoder: FastConformer (NEST), 17 layers of d_model 512, 8 heads, ff_expansion 4, conv kernel 9 (batch
    norm), dw_striding x8 with 256 channels, rel_pos, xscaling true
  - sortformer_modules: encoder_proj Linear(512, 192), head 192 -> 192 -> 4 speakers
  - transformer_encoder: 18 layers, hidden 192, inner 768, 8 heads, ReLU, post-LN
  - streaming_mode true; streaming values (80 ms frames):
      default            spkcache_len 188, fifo_len 0, chunk_len 188, spkcache_update_period 188,
                         chunk_left_context 1, chunk_right_context 1, spkcache_sil_frames_per_spk 3
                         (the published checkpoint's own)
      very_high_latency  chunk_len 340, chunk_right_context 40, fifo_len 40, spkcache_update_period 300,
                         spkcache_len 188 (the 30.4 s latency preset of the model card's second DER column)

Weights: NeMo's own initialisation, with one change to the last layer's *weights* (not its shapes). With
NeMo's initialisation alone the probabilities are neither saturated nor informative: on 60 s of speech every
speaker's probability is nearly constant (mean 0.47-0.57, standard deviation over frames 0.001-0.004, the most
likely speaker the same on every frame), because the random network's last hidden state barely moves. So the
head's output layer (`sortformer_modules.single_hidden_to_spks`) is re-centred on the mean hidden state of
60 s of the benchmark speech (NeMo's `diarize()`, streaming, sync update) and each speaker's row scaled so its
logit has standard deviation `--head-spread` (default 2.0; 0 keeps NeMo's initialisation): probabilities
spread over (0, 1) and follow the audio, speakers take turns, the speaker cache's scores differ between
frames. Compute is unchanged.

After saving, the script restores the file and runs NeMo's `diarize()` on the same 60 s and prints the spread of
the probabilities (mean, standard deviation, the share of values below 0.01 or above 0.99, how many frames
change their most likely speaker): `--check-seconds 0` skips it.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NAME = "diar_streaming_sortformer_4spk-v2.1"
SR = 16000

PRESETS = {
    # the published checkpoint's streaming values (transcribe.cpp's intake report of its model_config.yaml;
    # the left/right context and silence frames are also NeMo's SortformerModules defaults)
    "default": dict(spkcache_len=188, fifo_len=0, chunk_len=188, spkcache_update_period=188, chunk_left_context=1,
                    chunk_right_context=1, spkcache_sil_frames_per_spk=3),
    # the model card's 30.4 s latency operating point
    "very_high_latency": dict(spkcache_len=188, fifo_len=40, chunk_len=340, spkcache_update_period=300,
                              chunk_left_context=1, chunk_right_context=40, spkcache_sil_frames_per_spk=3),
}
SUFFIX = {"default": "", "very_high_latency": "-vhl"}
FC_D, TF_D = 512, 192

log = logging.getLogger("make_sortformer_model")


def model_config(streaming: dict) -> dict:
    return {
        "sample_rate": SR, "pil_weight": 0.5, "ats_weight": 0.5, "max_num_of_spks": 4, "streaming_mode": True,
        "model_defaults": {"fc_d_model": FC_D, "tf_d_model": TF_D},
        "preprocessor": {
            "_target_": "nemo.collections.asr.modules.AudioToMelSpectrogramPreprocessor",
            "normalize": "NA", "window_size": 0.025, "sample_rate": SR, "window_stride": 0.01, "window": "hann",
            "features": 128, "n_fft": 512, "frame_splicing": 1, "dither": 1e-05,
        },
        "sortformer_modules": {
            "_target_": "nemo.collections.asr.modules.sortformer_modules.SortformerModules",
            "num_spks": 4, "dropout_rate": 0.5, "fc_d_model": FC_D, "tf_d_model": TF_D, **streaming,
            "scores_add_rnd": 0, "pred_score_threshold": 0.25, "max_index": 99999, "scores_boost_latest": 0.05,
            "sil_threshold": 0.2, "strong_boost_rate": 0.75, "weak_boost_rate": 1.5, "min_pos_scores_rate": 0.5,
            "causal_attn_rate": 0.5, "causal_attn_rc": 7,
        },
        "encoder": {
            "_target_": "nemo.collections.asr.modules.ConformerEncoder",
            "feat_in": 128, "feat_out": -1, "n_layers": 17, "d_model": FC_D,
            "subsampling": "dw_striding", "subsampling_factor": 8, "subsampling_conv_channels": 256,
            "causal_downsampling": False, "ff_expansion_factor": 4, "self_attention_model": "rel_pos",
            "n_heads": 8, "att_context_size": [-1, -1], "att_context_style": "regular",
            "xscaling": True, "untie_biases": True, "pos_emb_max_len": 5000, "conv_kernel_size": 9,
            "conv_norm_type": "batch_norm", "conv_context_size": None, "dropout": 0.1, "dropout_pre_encoder": 0.1,
            "dropout_emb": 0.0, "dropout_att": 0.1, "stochastic_depth_drop_prob": 0.0,
            "stochastic_depth_mode": "linear", "stochastic_depth_start_layer": 1,
        },
        "transformer_encoder": {
            "_target_": "nemo.collections.asr.modules.transformer.transformer_encoders.TransformerEncoder",
            "num_layers": 18, "hidden_size": TF_D, "inner_size": 768, "num_attention_heads": 8,
            "attn_score_dropout": 0.5, "attn_layer_dropout": 0.5, "ffn_dropout": 0.5, "hidden_act": "relu",
            "pre_ln": False, "pre_ln_final_layer_norm": True,
        },
        "loss": {"_target_": "nemo.collections.asr.losses.bce_loss.BCELoss", "weight": None, "reduction": "mean"},
        "lr": 0.0001,
        "optim": {"name": "adamw", "lr": 0.0001, "betas": [0.9, 0.98], "weight_decay": 1e-3},
    }


def spread(model, seconds: float) -> dict:
    """NeMo's diarize() on `seconds` of the benchmark speech: how spread out the probabilities are."""
    import numpy as np
    import soundfile as sf

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from speech_clip import speech_clip

    pcm, _ = speech_clip(seconds)
    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "clip.wav"
        sf.write(wav, pcm, SR, subtype="FLOAT")
        _, probs = model.diarize(audio=[str(wav)], batch_size=1, include_tensor_outputs=True, verbose=False,
                                 num_workers=0)
    p = probs[0][0].float().numpy()
    top = p.argmax(1)
    return dict(frames=int(p.shape[0]), mean=round(float(p.mean()), 4), std=round(float(p.std()), 4),
                per_speaker_mean=[round(float(x), 4) for x in p.mean(0)],
                per_speaker_std=[round(float(x), 4) for x in p.std(0)],
                share_below_0_01=round(float((p < 0.01).mean()), 4), share_above_0_99=round(float((p > 0.99).mean()), 4),
                share_above_0_5=round(float((p > 0.5).mean()), 4),
                argmax_changes=int((top[1:] != top[:-1]).sum()),
                frame_to_frame_abs_diff=round(float(np.abs(np.diff(p, axis=0)).mean()), 4))


def fit_head(model, seconds: float, spread_std: float) -> dict:
    """Re-centre and scale the head's output layer on the hidden states of `seconds` of speech (see the
    docstring): logits = W' (h - mean h), each row's logit standard deviation `spread_std`."""
    import torch

    layer = model.sortformer_modules.single_hidden_to_spks
    seen = []
    hook = layer.register_forward_hook(lambda mod, inp, out: seen.append(inp[0].detach().reshape(-1, inp[0].shape[-1])))
    try:
        before = spread(model, seconds)
    finally:
        hook.remove()
    h = torch.cat(seen).double()
    mu = h.mean(0)
    z = (h - mu) @ layer.weight.double().T  # [N, n_spk]
    scale = spread_std / z.std(0).clamp_min(1e-12)
    with torch.no_grad():
        w = layer.weight.double() * scale[:, None]
        layer.weight.copy_(w.float())
        layer.bias.copy_((-(w @ mu)).float())
    return dict(hidden_frames=int(h.shape[0]), logit_std_before=[round(float(x), 5) for x in z.std(0)],
                scale=[round(float(x), 2) for x in scale], spread_before=before)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", default=None,
                    help=f"output .nemo (default local-models/{NAME}-random[-vhl].nemo in the repository)")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="default")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--head-spread", type=float, default=2.0,
                    help="standard deviation of each speaker's logit after re-centring the head (0: NeMo's init)")
    ap.add_argument("--check-seconds", type=float, default=60.0,
                    help="seconds of speech for the probability-spread check (0: skip)")
    args = ap.parse_args(argv)

    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    import numpy as np
    import torch

    torch.set_num_threads(args.threads)
    from nemo.utils import logging as nemo_logging

    nemo_logging.setLevel(logging.ERROR)
    from nemo.collections.asr.models import SortformerEncLabelModel
    from omegaconf import OmegaConf

    out = Path(args.out).resolve() if args.out else REPO / f"local-models/{NAME}-random{SUFFIX[args.preset]}.nemo"
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    t0 = time.time()
    model = SortformerEncLabelModel(cfg=OmegaConf.create(model_config(PRESETS[args.preset]))).cpu().eval()
    n_params = sum(p.numel() for p in model.parameters())
    log.info("built in %.1f s: %.2f M parameters (preset %s)", time.time() - t0, n_params / 1e6, args.preset)
    if args.head_spread > 0:
        t0 = time.time()
        fit = fit_head(model, 60.0, args.head_spread)
        log.info("head re-centred in %.1f s: %s", time.time() - t0, fit)
    t0 = time.time()
    model.save_to(str(out))
    log.info("saved %s (%.3f GB) in %.1f s", out, out.stat().st_size / 1e9, time.time() - t0)
    if args.check_seconds > 0:
        model = SortformerEncLabelModel.restore_from(str(out), map_location="cpu").eval()
        t0 = time.time()
        s = spread(model, args.check_seconds)
        log.info("NeMo diarize() on %g s of speech (%.1f s): %s", args.check_seconds, time.time() - t0, s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
