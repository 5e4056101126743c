"""Make a tiny Voxtral in the `mistralai/Voxtral-Mini-3B-2507` transformers layout (`VoxtralForConditionalGeneration`).

Run from the repository root with the venv that holds transformers and mistral-common (transformers 5.25.0,
mistral-common 1.13.1):

    OMP_NUM_THREADS=1 .venv-nemo/bin/python tools/voxtral_tiny.py --steps 600 --max-seconds 420

What it writes into --out (default tests/models/voxtral/tiny): config.json, generation_config.json,
model.safetensors (float32), tekken.json, preprocessor_config.json (what `save_pretrained` of the model and the
processor write) and train_log.json (the recipe and the loss curve).

Steps:
 1. a tekken tokenizer (tools/tekken_tiny.py: 400 merges trained on the dev transcripts + JFK, the published
    special-token ranks, 1000 special tokens, the offline `audio` section);
 2. VoxtralProcessor(WhisperFeatureExtractor(feature_size=128), MistralCommonBackend(tekken.json));
 3. VoxtralConfig scaled down from Voxtral-Mini-3B-2507 (every structural switch kept: the Whisper encoder with
    30 s chunks of 1500 positions, k_proj without bias, GELU; the 4-frame stacking (`intermediate_size` =
    4 * d_model) into the bias-free GELU projector; a Llama LM with GQA, head_dim * heads != hidden, RoPE theta
    1e8, an untied head, RMSNorm eps 1e-5);
 4. a short teacher-forced training run (AdamW, torch threads 1) on the 37 dev clips + jfk.wav, each with the
    transcription prompt of `apply_transcription_request` with language "en" and without a language
    (target: the transcript + </s>); the first transcript tokens are weighted up so that the LM reads the audio;
 5. save_pretrained (float32) and a greedy check on three clips.
"""
from __future__ import annotations

import argparse
import io
import json
import math
import os
import random
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
import soundfile as sf
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))
from speech_clips import clips  # noqa: E402
from tekken_tiny import AUDIO_OFFLINE, make_tekken  # noqa: E402

AUDIO = REPO.parent / "shared" / "audio"
MODEL_ID = "mistralai/Voxtral-Mini-3B-2507"




def build_config(n_vocab: int):
    from transformers import VoxtralConfig

    audio_config = dict(
        hidden_size=64, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4, num_mel_bins=128,
        max_source_positions=1500, scale_embedding=False, activation_function="gelu", dropout=0.0,
        attention_dropout=0.0, activation_dropout=0.0, layerdrop=0.0, initializer_range=0.02, vocab_size=51866,
    )
    text_config = dict(
        model_type="llama", vocab_size=n_vocab, hidden_size=64, intermediate_size=192, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, hidden_act="silu", max_position_embeddings=131072,
        rms_norm_eps=1e-5, rope_parameters={"rope_type": "default", "rope_theta": 100000000.0}, attention_bias=False,
        mlp_bias=False, tie_word_embeddings=False, use_cache=True, bos_token_id=1, eos_token_id=2, pad_token_id=11,
        initializer_range=0.02,
    )
    return VoxtralConfig(audio_config=audio_config, text_config=text_config, audio_token_id=24,
                         projector_hidden_act="gelu")


def wav_bytes(wav: np.ndarray) -> io.BytesIO:
    buf = io.BytesIO()
    sf.write(buf, wav, 16000, format="WAV", subtype="FLOAT")
    buf.seek(0)
    return buf


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(REPO / "tests" / "models" / "voxtral" / "tiny"))
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-seconds", type=float, default=420)
    ap.add_argument("--stop-at", type=int, default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    np.random.seed(args.seed)

    import transformers
    from transformers import GenerationConfig, VoxtralForConditionalGeneration, VoxtralProcessor, WhisperFeatureExtractor
    from transformers.tokenization_mistral_common import MistralCommonBackend

    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    data = clips()
    tekken = make_tekken([t for _, _, t in data] + ["lang:en"] * 4, 400, AUDIO_OFFLINE)
    (out_dir / "tekken.json").write_text(json.dumps(tekken, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
    tok = MistralCommonBackend(tokenizer_path=out_dir / "tekken.json")
    fe = WhisperFeatureExtractor(feature_size=128, sampling_rate=16000, hop_length=160, chunk_length=30, n_fft=400,
                                 padding_value=0.0, return_attention_mask=False)
    proc = VoxtralProcessor(feature_extractor=fe, tokenizer=tok)
    n_vocab = tekken["config"]["default_vocab_size"]
    config = build_config(n_vocab)
    model = VoxtralForConditionalGeneration(config)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"tokenizer {n_vocab} tokens, params {n_params}")

    tek = tok.tokenizer.instruct_tokenizer.tokenizer
    eos = tek.eos_id
    examples = []
    for name, wav, text in data:
        for lang in ("en", None):
            enc = proc.apply_transcription_request(audio=[wav], format=["wav"], language=lang, model_id=MODEL_ID,
                                                   sampling_rate=16000)
            prompt = enc["input_ids"][0].tolist()
            tgt = tek.encode(text, bos=False, eos=False) + [eos]
            w = [1.0] * len(tgt)
            for k in range(min(4, len(tgt))):
                w[k] = 4.0
            for _ in range(3 if name == "jfk.wav" else 1):
                examples.append((prompt + tgt, [-100] * len(prompt) + tgt, [0.0] * len(prompt) + w,
                                 enc["input_features"]))
    print(f"{len(examples)} training examples")

    def collate(batch):
        L = max(len(b[0]) for b in batch)
        ids = torch.full((len(batch), L), tek.pad_id, dtype=torch.long)
        lab = torch.full((len(batch), L), -100, dtype=torch.long)
        wt = torch.zeros((len(batch), L))
        att = torch.zeros((len(batch), L), dtype=torch.long)
        for i, (x, y, w, _) in enumerate(batch):  # right padding: positions start at 0 in every row
            ids[i, :len(x)] = torch.tensor(x)
            lab[i, :len(y)] = torch.tensor(y)
            wt[i, :len(w)] = torch.tensor(w)
            att[i, :len(x)] = 1
        feats = torch.cat([b[3] for b in batch])
        return ids, lab, wt, att, feats

    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01, betas=(0.9, 0.98))
    warm = 40
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(s, args.steps) / args.steps))))
    model.train()
    log = []
    t0 = time.time()
    order: list[int] = []
    step = 0
    for step in range(args.steps):
        if len(order) < args.batch:
            order += random.sample(range(len(examples)), len(examples))
        idx, order = order[:args.batch], order[args.batch:]
        ids, lab, wt, att, feats = collate([examples[i] for i in idx])
        out = model(input_ids=ids, attention_mask=att, input_features=feats)
        logits = out.logits[:, :-1].float()
        tgt = lab[:, 1:]
        w = wt[:, 1:]
        nll = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1).clamp(min=0),
                                                reduction="none").view_as(w)
        loss = (nll * w).sum() / w.sum()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        plain = (nll * (tgt >= 0)).sum() / (tgt >= 0).sum()
        if step % 25 == 0 or step == args.steps - 1:
            log.append({"step": step, "weighted_loss": round(loss.item(), 4), "token_nll": round(plain.item(), 4),
                        "seconds": round(time.time() - t0, 1)})
            print(log[-1], flush=True)
        if args.stop_at is not None and step + 1 >= args.stop_at:
            break
        if time.time() - t0 > args.max_seconds:
            print("time cap reached")
            break

    model.eval()
    model.generation_config = GenerationConfig(bos_token_id=1, eos_token_id=2, pad_token_id=11, max_new_tokens=500,
                                               do_sample=False)
    model.save_pretrained(out_dir)
    fe.save_pretrained(out_dir)
    (out_dir / "train_log.json").write_text(json.dumps({
        "tool": "tools/voxtral_tiny.py", "transformers": transformers.__version__, "torch": torch.__version__,
        "args": vars(args) | {"out": "tests/models/voxtral/tiny"}, "steps_done": step + 1,
        "examples": len(examples), "params": n_params, "log": log,
    }, indent=1) + "\n")
    for name, wav, text in data[:3]:
        for lang in ("en", None):
            enc = proc.apply_transcription_request(audio=[wav], format=["wav"], language=lang, model_id=MODEL_ID,
                                                   sampling_rate=16000)
            with torch.no_grad():
                g = model.generate(**enc, max_new_tokens=60, do_sample=False)
            print(name, lang, "|", tek.decode(g[0, enc["input_ids"].shape[1]:].tolist()))
            print("   ref:", text)


if __name__ == "__main__":
    main()
