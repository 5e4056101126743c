"""Tiny GigaAM v3 models for the tests, built and briefly trained with the `gigaam` package itself.

    .venv-gigaam/bin/python tools/gigaam_tiny.py [--out tests/models/gigaam] [--seconds 150]

Run in the reference's venv (tools/setup_gigaam_venv.sh). The four published variants scaled down, every
structural switch kept as published (conv1d subsampling by 4 with kernel 5, rotary attention with
pos_emb_max_len 5000 as the rotary base, layer-norm convolution module with kernel 5, feed-forward
expansion 4, the 64-mel front end: n_fft 320, hop 160, htk mel, center=False, natural log), only the sizes
small (2 layers, d_model 48, 4 heads; predictor and joint 32):

  ctc/       CTCHead, a character vocabulary inline in the config (space + letters, lower case, no
             punctuation: the Russian pipeline's shape; here English letters and the apostrophe)
  rnnt/      RNNTHead (1-layer LSTM predictor, ReLU joint), the same characters
  e2e-ctc/   CTCHead, a small SentencePiece tokenizer with case and punctuation (tokenizer.model)
  e2e-rnnt/  RNNTHead, the same SentencePiece tokenizer

Each folder is the Hugging Face layout of ai-sage/GigaAM-v3 (one branch per variant): config.json
(model_type "gigaam", the package's Hydra config under cfg.model.cfg), pytorch_model.bin (the GigaAMASR
state dict, keys under "model.") and, for the e2e variants, tokenizer.model. Russian speech is not on this
machine: the models learn English speech (jfk.wav and the shared dev clips) through the Russian-style
pipeline. Training: CTC loss for the CTC models; the transducer loss (written here in plain PyTorch, since
torchaudio's compiled rnnt_loss cannot load against torch 2.13) for the RNN-T models, whose encoder starts
from the CTC model's of the same vocabulary. Each run is capped at --seconds.
"""
from __future__ import annotations

import argparse
import io
import json
import random
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from speech_clips import clips  # noqa: E402

CHARS = [" "] + [chr(c) for c in range(ord("a"), ord("z") + 1)] + ["'"]
D_MODEL, HEADS, LAYERS, PRED = 48, 4, 2, 32
SP_VOCAB = 96
TRAIN_DEV_CLIPS = 7


def base_cfg(name: str) -> dict:
    return {
        "model_name": name,
        "sample_rate": 16000,
        "preprocessor": {"_target_": "gigaam.preprocess.FeatureExtractor", "sample_rate": 16000, "features": 64,
                         "win_length": 320, "hop_length": 160, "n_fft": 320, "center": False, "mel_scale": "htk",
                         "mel_norm": None},
        "encoder": {"_target_": "gigaam.encoder.ConformerEncoder", "feat_in": 64, "n_layers": LAYERS,
                    "d_model": D_MODEL, "subsampling": "conv1d", "subs_kernel_size": 5, "subsampling_factor": 4,
                    "ff_expansion_factor": 4, "self_attention_model": "rotary", "pos_emb_max_len": 5000,
                    "n_heads": HEADS, "conv_norm_type": "layer_norm", "conv_kernel_size": 5, "flash_attn": False},
    }


def make_cfg(variant: str, n_tokens: int, vocab: list, sp: bool) -> dict:
    cfg = base_cfg({"ctc": "v3_ctc", "rnnt": "v3_rnnt", "e2e-ctc": "v3_e2e_ctc", "e2e-rnnt": "v3_e2e_rnnt"}[variant])
    classes = n_tokens + 1
    if variant.endswith("ctc"):
        cfg["head"] = {"_target_": "gigaam.decoder.CTCHead", "feat_in": D_MODEL, "num_classes": classes}
        cfg["decoding"] = {"_target_": "gigaam.decoding.CTCGreedyDecoding", "vocabulary": vocab}
    else:
        cfg["head"] = {"_target_": "gigaam.decoder.RNNTHead",
                       "decoder": {"pred_hidden": PRED, "pred_rnn_layers": 1, "num_classes": classes},
                       "joint": {"enc_hidden": D_MODEL, "pred_hidden": PRED, "joint_hidden": PRED,
                                 "num_classes": classes}}
        cfg["decoding"] = {"_target_": "gigaam.decoding.RNNTGreedyDecoding", "vocabulary": vocab,
                           "max_symbols_per_step": 10}
    if sp:
        cfg["decoding"]["model_path"] = "tokenizer.model"
    return cfg


def build(cfg: dict, folder: Path):
    from omegaconf import OmegaConf

    from gigaam.model import GigaAMASR

    c = json.loads(json.dumps(cfg))
    if "model_path" in c["decoding"]:
        c["decoding"]["model_path"] = str(folder / c["decoding"]["model_path"])
    return GigaAMASR(OmegaConf.create(c))


def train_sp(texts: list[str], out: Path) -> None:
    import sentencepiece as spm

    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(texts * 4), model_writer=buf, vocab_size=SP_VOCAB,
                                   model_type="unigram", character_coverage=1.0, normalization_rule_name="identity", bos_id=-1, eos_id=-1,
                                   unk_id=0, hard_vocab_limit=False)
    out.write_bytes(buf.getvalue())


def rnnt_loss(logp: torch.Tensor, target: list[int], blank: int) -> torch.Tensor:
    """-log P(target | audio) of one utterance; logp [T, U+1, V] log-softmaxed joint outputs. alpha[t, u]
    along u is a linear recurrence in the log domain, so each row is a logcumsumexp (no loop over u)."""
    t_max, u1, _ = logp.shape
    y = torch.tensor(target, dtype=torch.long)
    blank_lp = logp[:, :, blank]                                   # [T, U+1]
    emit = logp[:, :-1, :].gather(2, y[None, :, None].expand(t_max, -1, 1))[..., 0]  # [T, U]
    zero = logp.new_zeros(1)
    alpha = None
    for t in range(t_max):
        e = torch.cat([zero, emit[t].cumsum(0)])                   # E[u] = sum_{j<u} emit[t, j]
        if alpha is None:
            a = torch.full((u1,), -1e30, dtype=logp.dtype)
            a = torch.cat([zero, a[1:]])
        else:
            a = alpha + blank_lp[t - 1]
        alpha = e + torch.logcumsumexp(a - e, dim=0)
    return -(alpha[-1] + blank_lp[-1, -1])


def features(model, wav: torch.Tensor):
    return model.preprocessor(wav[None], torch.tensor([wav.shape[0]]))


def train(model, data, kind: str, blank: int, seconds: float, lr: float = 5e-3) -> None:
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-3)
    model.train()
    start, step, n = time.time(), 0, len(data)
    order = list(range(n))
    while time.time() - start < seconds:
        random.shuffle(order)
        total = 0.0
        for i in order:
            wav, ids = data[i]
            if kind == "rnnt" and time.time() - start > seconds:
                break
            f, fl = features(model, wav)
            enc, el = model.encoder(f, fl)
            if kind == "ctc":
                lp = model.head(enc)[0]                            # [T, V+1]
                loss = torch.nn.functional.ctc_loss(lp[:, None], torch.tensor([ids]), el, torch.tensor([len(ids)]),
                                                    blank=blank, zero_infinity=True)
            else:
                g, state = model.head.decoder.predict(None, None, 1)  # the start: a zero input, as decoding
                if ids:
                    g2, _ = model.head.decoder.predict(torch.tensor([ids]), state, 1)
                    g = torch.cat([g, g2], dim=1)                  # [1, U+1, P]
                lp = model.head.joint.joint(enc.transpose(1, 2), g)[0]  # [T, U+1, V+1]
                loss = rnnt_loss(lp, ids, blank) / max(1, len(ids))
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            opt.step()
            total += float(loss)
            step += 1
        print(f"  {kind} step {step} loss {total / n:.3f} ({time.time() - start:.0f} s)", flush=True)
    model.eval()


def save(model, cfg: dict, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    config = {"model_type": "gigaam", "architectures": ["GigaAMModel"], "cfg": {"model": {"cfg": cfg}}}
    (folder / "config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")
    sd = {"model." + k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    torch.save(sd, folder / "pytorch_model.bin")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("tests/models/gigaam"))
    ap.add_argument("--seconds", type=float, default=150.0, help="training time cap of each model")
    ap.add_argument("--only", nargs="*", choices=["ctc", "e2e-ctc", "rnnt", "e2e-rnnt"],
                    help="remake only these (an RNN-T model's encoder then starts from the saved CTC model's)")
    args = ap.parse_args()
    torch.manual_seed(0)
    random.seed(0)
    torch.set_num_threads(1)
    speech = clips()
    # jfk.wav and the shortest dev clips (the reference clips among them): a small set the tiny models learn
    # within minutes on two shared cores (on all 38 clips they sit at the all-blank plateau that long)
    speech = speech[:1] + sorted(speech[1:], key=lambda c: len(c[1]))[:TRAIN_DEV_CLIPS]
    args.out.mkdir(parents=True, exist_ok=True)

    import sentencepiece as spm

    sp_path = args.out / "e2e-ctc" / "tokenizer.model"
    sp_path.parent.mkdir(parents=True, exist_ok=True)
    if not args.only or "e2e-ctc" in args.only:
        train_sp([t for _, _, t in speech], sp_path)
    (args.out / "e2e-rnnt").mkdir(parents=True, exist_ok=True)
    (args.out / "e2e-rnnt" / "tokenizer.model").write_bytes(sp_path.read_bytes())
    sp = spm.SentencePieceProcessor(model_file=str(sp_path))

    def char_ids(text: str) -> list[int]:
        text = " ".join(text.lower().replace("-", " ").split())
        return [CHARS.index(c) for c in text if c in CHARS]

    encoders = {}
    for variant in ("ctc", "e2e-ctc", "rnnt", "e2e-rnnt"):
        if args.only and variant not in args.only:
            if variant.endswith("ctc"):
                saved = torch.load(args.out / variant / "pytorch_model.bin", weights_only=True)
                encoders["sp" if variant.startswith("e2e") else "char"] = {
                    k[len("model.encoder."):]: v for k, v in saved.items() if k.startswith("model.encoder.")}
            continue
        sp_variant = variant.startswith("e2e")
        n_tokens = sp.get_piece_size() if sp_variant else len(CHARS)
        cfg = make_cfg(variant, n_tokens, [] if sp_variant else CHARS, sp_variant)
        folder = args.out / variant
        model = build(cfg, folder)
        data = [(torch.from_numpy(w), sp.encode(t) if sp_variant else char_ids(t)) for _, w, t in speech]
        kind = "ctc" if variant.endswith("ctc") else "rnnt"
        if kind == "rnnt":  # the encoder of the CTC model of the same vocabulary, then the whole model trained
            model.encoder.load_state_dict(encoders["sp" if sp_variant else "char"])
        print(f"{variant}: {sum(p.numel() for p in model.parameters())} parameters", flush=True)
        train(model, data, kind, n_tokens, args.seconds)
        if kind == "ctc":
            encoders["sp" if sp_variant else "char"] = model.encoder.state_dict()
        save(model, cfg, folder)
        with torch.inference_mode():
            wav = data[0][0] if kind == "ctc" else torch.from_numpy(speech[0][1])
            f, fl = features(model, wav)
            enc, el = model.encoder(f, fl)
            print("  jfk:", model.decoding.decode(model.head, enc, el)[0][0] if kind == "rnnt" else
                  model.decoding.decode(model.head, enc, el)[0][0], flush=True)


if __name__ == "__main__":
    main()
