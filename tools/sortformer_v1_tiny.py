#!/usr/bin/env python
"""Make a tiny OFFLINE Sortformer in the layout of nvidia/diar_sortformer_4spk-v1 and write NeMo's references.

Run from anywhere with the Python of NeMo's virtual environment (tools/setup_nemo_venv.sh), one thread:

    .venv-nemo/bin/python tools/sortformer_v1_tiny.py --stage build    # trains <= --max-minutes (default 7)
    .venv-nemo/bin/python tools/sortformer_v1_tiny.py --stage refs
    .venv-nemo/bin/python tools/sortformer_v1_tiny.py --stage verify   # fresh restore_from, must print VERIFY OK

Writes tests/models/sortformer/sortformer-v1-tiny.nemo and tests/references/sortformer/v1_offline.json +
v1_offline.safetensors. The training mixtures, the 80 ms VAD targets and the three test mixtures
(../shared/models/sortformer-tiny/mix0-2.wav, read from there) come from the shared folder's
make_sortformer_tiny.py (imported, not copied).

Layout (NeMo's examples/speaker_tasks/diarization/conf/neural_diarizer/sortformer_diarizer_hybrid_loss_4spk-v1.yaml;
the example configs are not in the installed package): no `streaming_mode` key (so NeMo's default False: offline
forward()), `sortformer_modules` with only num_spks / dropout_rate / fc_d_model / tf_d_model (every streaming
parameter at SortformerModules' class defaults), 80 mel features (v2/v2.1: 128), `model_defaults.fc_d_model` /
`model_defaults.tf_d_model`, `model.sample_rate`; everything else as v2 (per_feature normalisation, dw_striding x8,
rel_pos, xscaling, untie_biases, batch-norm conv, post-LN Transformer, ReLU head). Tiny sizes as the shared model:
d_model 64, 2 conformer layers, Transformer hidden 32 x 2 layers.
"""
import argparse
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sortformer_nemo_common as C  # noqa: E402

NAME = "sortformer-v1-tiny"
NEMO_PATH = os.path.join(C.MODELS_OUT, f"{NAME}.nemo")
JSON_PATH = os.path.join(C.REFS_OUT, "v1_offline.json")
ST_PATH = os.path.join(C.REFS_OUT, "v1_offline.safetensors")
TRAIN_INFO = os.path.join(C.MODELS_OUT, f"{NAME}.train.json")
SEED = 2025
FEATURES = 80


def make_cfg():
    fc, tf = 64, 32
    return {
        "sample_rate": 16000,
        "pil_weight": 0.5,
        "ats_weight": 0.5,
        "max_num_of_spks": 4,
        "model_defaults": {"fc_d_model": fc, "tf_d_model": tf},
        "preprocessor": {
            "_target_": "nemo.collections.asr.modules.AudioToMelSpectrogramPreprocessor",
            "normalize": "per_feature", "window_size": 0.025, "sample_rate": 16000, "window_stride": 0.01,
            "window": "hann", "features": FEATURES, "n_fft": 512, "frame_splicing": 1, "dither": 1e-05,
        },
        "sortformer_modules": {
            "_target_": "nemo.collections.asr.modules.sortformer_modules.SortformerModules",
            "num_spks": 4, "dropout_rate": 0.5, "fc_d_model": fc, "tf_d_model": tf,
        },
        "encoder": {
            "_target_": "nemo.collections.asr.modules.ConformerEncoder",
            "feat_in": FEATURES, "feat_out": -1, "n_layers": 2, "d_model": fc,
            "subsampling": "dw_striding", "subsampling_factor": 8, "subsampling_conv_channels": 32,
            "causal_downsampling": False, "ff_expansion_factor": 4, "self_attention_model": "rel_pos",
            "n_heads": 4, "att_context_size": [-1, -1], "att_context_style": "regular",
            "xscaling": True, "untie_biases": True, "pos_emb_max_len": 5000, "conv_kernel_size": 9,
            "conv_norm_type": "batch_norm", "conv_context_size": None, "dropout": 0.1, "dropout_pre_encoder": 0.1,
            "dropout_emb": 0.0, "dropout_att": 0.1, "stochastic_depth_drop_prob": 0.0,
            "stochastic_depth_mode": "linear", "stochastic_depth_start_layer": 1,
        },
        "transformer_encoder": {
            "_target_": "nemo.collections.asr.modules.transformer.transformer_encoders.TransformerEncoder",
            "num_layers": 2, "hidden_size": tf, "inner_size": 128, "num_attention_heads": 4,
            "attn_score_dropout": 0.5, "attn_layer_dropout": 0.5, "ffn_dropout": 0.5, "hidden_act": "relu",
            "pre_ln": False, "pre_ln_final_layer_norm": True,
        },
        "loss": {"_target_": "nemo.collections.asr.losses.bce_loss.BCELoss", "weight": None, "reduction": "mean"},
        "lr": 0.0001,
        "optim": {"name": "adamw", "lr": 0.0001, "betas": [0.9, 0.98], "weight_decay": 1e-3},
    }


def stage_build(args):
    import numpy as np
    import torch
    from omegaconf import OmegaConf

    torch.set_num_threads(1)
    random.seed(SEED)
    np.random.seed(SEED)
    torch.manual_seed(SEED)
    from nemo.collections.asr.models import SortformerEncLabelModel

    mk = C.shared_maker()
    v = dict(mk.VARIANTS["visible"])  # the shared model's mixture recipe (seed 2024 -> the same 96 mixtures)
    model = SortformerEncLabelModel(cfg=OmegaConf.create(make_cfg()))
    assert model.streaming_mode is False
    print("params", sum(p.numel() for p in model.parameters()), flush=True)
    mixes = mk.training_mixtures(v)
    model.eval()
    feats = []
    with torch.no_grad():
        for y, act in mixes:
            sig = torch.from_numpy(y)[None]
            sig = sig / (sig.max() + model.eps)  # what offline forward() does
            m, ml = model.preprocessor(input_signal=sig, length=torch.tensor([sig.shape[1]]))
            feats.append(m[0, :, : ml[0]].clone())
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.98), weight_decay=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 30))
    rng = random.Random(SEED)
    t0 = time.time()
    step, ema, log = 0, None, []
    idx = list(range(len(mixes)))
    while step < args.steps and time.time() - t0 < args.max_minutes * 60:
        anchor = rng.choice(idx)
        pool = sorted(idx, key=lambda i: (abs(feats[i].shape[1] - feats[anchor].shape[1]), rng.random()))
        b = pool[: args.batch]
        T = max(feats[i].shape[1] for i in b)
        fx = torch.zeros(len(b), FEATURES, T)
        fl = torch.zeros(len(b), dtype=torch.long)
        for j, i in enumerate(b):
            fx[j, :, : feats[i].shape[1]] = feats[i]
            fl[j] = feats[i].shape[1]
        emb, emb_len = model.frontend_encoder(processed_signal=fx, processed_signal_length=fl)
        preds = model.forward_infer(emb, emb_len)
        tgt = torch.zeros_like(preds)
        msk = torch.zeros(preds.shape[:2])
        for j, i in enumerate(b):
            n = int(emb_len[j])
            t = torch.from_numpy(mk.frames_from_10ms(mixes[i][1], n))
            tgt[j, :n, : t.shape[1]] = t
            msk[j, :n] = 1
        p = preds.clamp(1e-6, 1 - 1e-6)
        bce = -(tgt * torch.log(p) + (1 - tgt) * torch.log(1 - p)).mean(-1)
        loss = (bce * msk).sum() / msk.sum()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        step += 1
        ema = loss.item() if ema is None else 0.95 * ema + 0.05 * loss.item()
        if step % 25 == 0:
            print(f"step {step} loss {loss.item():.4f} ema {ema:.4f} {time.time() - t0:.0f}s", flush=True)
            log.append((step, round(ema, 4)))
    model.eval()
    info = dict(steps=step, seconds=round(time.time() - t0), final_loss_ema=round(ema, 4), batch=args.batch,
                lr=args.lr, seed=SEED, n_training_mixtures=len(mixes),
                mixtures="make_sortformer_tiny.training_mixtures(VARIANTS['visible']) (seed 2024)", loss_log=log)
    os.makedirs(C.MODELS_OUT, exist_ok=True)
    json.dump(info, open(TRAIN_INFO, "w"), indent=1)
    model.save_to(NEMO_PATH)
    print("saved", NEMO_PATH, info["steps"], info["final_loss_ema"], flush=True)


def old_layout_probe():
    """Does NeMo 3.0.0 accept the first v1 layout (fc_d_model / tf_d_model at model level, no model_defaults)?"""
    from omegaconf import OmegaConf
    from nemo.collections.asr.models import SortformerEncLabelModel

    cfg = make_cfg()
    md = cfg.pop("model_defaults")
    cfg.update(md)
    try:
        SortformerEncLabelModel(cfg=OmegaConf.create(cfg))
        return "instantiates"
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {str(e).splitlines()[0]}"


def generate():
    import soundfile as sf
    import torch

    torch.set_num_threads(1)
    from nemo.collections.asr.models import SortformerEncLabelModel

    model = SortformerEncLabelModel.restore_from(NEMO_PATH, map_location="cpu")
    model.eval()
    assert model.streaming_mode is False and model.cfg.get("streaming_mode") is None
    res = {"mixtures": {}, "streaming_params_class_defaults": C.streaming_params(model)}
    tensors = {}
    for mix in C.MIXES:
        wav = os.path.join(C.SHARED_TINY, f"{mix}.wav")
        segs, p = C.run_diarize(model, wav, "offline")
        res["mixtures"][mix] = {"offline": dict(n_frames=int(p.shape[0]), segments=segs, probs=C.probs_json(p))}
        tensors[f"{mix}.offline.probs"] = p
        print(mix, p.shape[0], segs, flush=True)
    # stage tensors for mix0, through the calls forward() makes (dither 0 and pad_to 0 as diarize() sets them)
    x, sr = sf.read(os.path.join(C.SHARED_TINY, "mix0.wav"), dtype="float32")
    audio = torch.from_numpy(x)[None]
    length = torch.tensor([audio.shape[1]])
    model.preprocessor.featurizer.dither = 0.0
    model.preprocessor.featurizer.pad_to = 0
    with torch.no_grad():
        sig_n = (1 / (audio.max() + model.eps)) * audio
        mel, mel_len = model.preprocessor(input_signal=sig_n, length=length)
        mel = mel[:, :, : mel_len.max()]
        pre, pre_len = model.encoder.pre_encode(x=mel.transpose(1, 2), lengths=mel_len)
        enc, enc_len = model.encoder(audio_signal=mel, length=mel_len)
        proj = model.sortformer_modules.encoder_proj(enc.transpose(1, 2))
        mask = model.sortformer_modules.length_to_mask(enc_len, proj.shape[1])
        tf = model.transformer_encoder(encoder_states=proj, encoder_mask=mask)
        preds = model.sortformer_modules.forward_speaker_sigmoids(tf) * mask.unsqueeze(-1)
    assert torch.equal(preds[0], tensors["mix0.offline.probs"]), "stage path != diarize()"
    # the normalised audio itself (x / (max + 1e-3)) is not stored: 700 kB for one division
    tensors.update({"stages.audio_scale": (1 / (audio.max() + model.eps)).reshape(1), "stages.mel": mel, "stages.mel_len": mel_len.to(torch.int64),
                    "stages.pre_encode_out": pre, "stages.fc_encoder_out": enc,
                    "stages.fc_encoder_len": enc_len.to(torch.int64), "stages.encoder_proj_out": proj,
                    "stages.transformer_encoder_out": tf, "stages.preds": preds})
    tensors = {k: t.detach().contiguous() for k, t in tensors.items()}
    return res, tensors, model


def stage_refs(args):
    from safetensors.torch import save_file

    res, tensors, model = generate()
    from omegaconf import OmegaConf

    out = dict(
        made_by=f"tools/sortformer_v1_tiny.py --stage refs ({C.versions()}, CPU, 1 thread)",
        model=C.rel(NEMO_PATH), audio_dir=C.rel(C.SHARED_TINY),
        call=("model = SortformerEncLabelModel.restore_from(nemo, map_location='cpu'); model.eval(); "
              "segments, probs = model.diarize(audio=[wav], batch_size=1, include_tensor_outputs=True, "
              "verbose=False, num_workers=0)  # default PostProcessingParams"),
        model_config=OmegaConf.to_container(model.cfg, resolve=True),
        old_v1_layout_in_nemo_3=old_layout_probe(),
        training=json.load(open(TRAIN_INFO)) if os.path.exists(TRAIN_INFO) else None,
        **res,
    )
    os.makedirs(C.REFS_OUT, exist_ok=True)
    json.dump(out, open(JSON_PATH, "w"), indent=1)
    save_file(tensors, ST_PATH)
    print("wrote", JSON_PATH, ST_PATH, flush=True)


def stage_verify(args):
    import torch
    from safetensors.torch import load_file

    saved = json.load(open(JSON_PATH))
    res, tensors, _ = generate()
    errs = []
    for mix, modes in res["mixtures"].items():
        a, b = saved["mixtures"][mix]["offline"], modes["offline"]
        if a["segments"] != b["segments"] or a["n_frames"] != b["n_frames"]:
            errs.append(f"{mix}: segments/frames differ")
    st = load_file(ST_PATH)
    for k, t in tensors.items():
        if not torch.equal(st[k], t):
            errs.append(f"{k}: max diff {float((st[k].double() - t.double()).abs().max())}")
    print("VERIFY", "OK" if not errs else errs, flush=True)
    sys.exit(1 if errs else 0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stage", choices=["build", "refs", "verify"], required=True)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--max-minutes", type=float, default=7.0)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=2e-3)
    args = ap.parse_args()
    {"build": stage_build, "refs": stage_refs, "verify": stage_verify}[args.stage](args)


if __name__ == "__main__":
    main()
