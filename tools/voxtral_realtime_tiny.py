"""Make a tiny Voxtral Realtime model in the transformers layout (`VoxtralRealtimeForConditionalGeneration.save_pretrained`
+ processor_config.json + a tiny trained tekken.json with the realtime audio section).

Run from the repository root with the NeMo/transformers venv (transformers 5.25.0, mistral-common 1.13.1):

    OMP_NUM_THREADS=1 .venv-nemo/bin/python tools/voxtral_realtime_tiny.py --steps 2400 --max-seconds 480

(`.venv-nemo` is the venv that holds transformers.) Audio: <repo>/../shared/audio (jfk.wav, dev/manifest.jsonl).

What it writes into --out (default tests/models/voxtral_realtime/tiny): config.json, generation_config.json,
model.safetensors (float32), tekken.json, processor_config.json, train_log.json.

Steps:
 1. tekken.json from tools/tekken_tiny.py (400 merges on the transcripts, the realtime audio section: 480 ms
    delay, 32 left-pad tokens);
 2. VoxtralRealtimeConfig scaled down from Voxtral-Mini-4B-Realtime-2602, every structural switch kept: the causal
    encoder (RoPE theta 1e6, q/v/o biases, k without, SiLU MLP with a down bias) with a sliding window of 100
    encoder frames (2 s; the published 750 = 15 s) so that jfk.wav's 11 s cross it, GQA in the LM (4 heads, 2 kv),
    its sliding window 64 tokens (5 s; published 8192), tied embeddings, the ada norm, 4x frame stacking;
 3. training targets in the model's streaming layout: one target token per 80 ms position, `[STREAMING_PAD]`
    where nothing is said, each word's tokens (" word") starting `delay` positions after the word starts in the
    audio. Word times are not known (no forced alignment here): the words are spread over the speech (where the
    frame energy is above 5% of the clip's peak) in proportion to their length in characters, a plausible
    alignment that makes the text follow the audio roughly; the delay is drawn from 4, 6 (the default, most often)
    and 8 tokens, so that the delay conditioning is trained;
 4. a short teacher-forced run (AdamW, torch threads 1, the word tokens weighted 4x over the pads) on the 37 dev
    clips + jfk.wav, the features the processor gives an offline request (left pad + audio + right pad);
 5. save_pretrained (float32) + greedy generate on jfk.wav printed at the end.
"""

import argparse
import json
import math
import os
import random
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
AUDIO = REPO.parent / "shared" / "audio"
sys.path.insert(0, str(REPO / "tools"))
from speech_clips import clips  # noqa: E402
from tekken_tiny import AUDIO_REALTIME, corpus, make_tekken  # noqa: E402

BOS, EOS, PAD = 1, 2, 32
LEFT_TOKENS = 32
PER_TOKEN = 1280  # samples per 80 ms position




def speech_span(wav):
    """(start, end) seconds of the frames whose RMS is above 5% of the clip's loudest 20 ms frame."""
    hop = 320
    n = max(1, len(wav) // hop)
    rms = np.sqrt(np.mean(wav[: n * hop].reshape(n, hop) ** 2, axis=1) + 1e-12)
    on = np.nonzero(rms > 0.05 * rms.max())[0]
    if len(on) == 0:
        return 0.0, len(wav) / 16000
    return on[0] * hop / 16000, (on[-1] + 1) * hop / 16000


def targets(wav, text, tok, delay):
    """(input ids, per-position weights) of a clip in the streaming layout (see the module docstring)."""
    n_tokens = LEFT_TOKENS + math.ceil(len(wav) / PER_TOKEN) + delay + 1 + 10
    prompt = LEFT_TOKENS + delay + 1
    seq = [BOS] + [PAD] * (n_tokens - 1)
    weights = [0.0] * prompt + [1.0] * (n_tokens - prompt)
    words = text.split()
    start, end = speech_span(wav)
    lengths = [len(w) + 1 for w in words]
    total = sum(lengths)
    cursor = prompt
    acc = 0
    for w, n in zip(words, lengths):
        t = start + (end - start) * acc / total
        acc += n
        pos = max(prompt, LEFT_TOKENS + int(t / 0.08) + delay, cursor)
        for i in tok.encode(" " + w):
            if pos >= n_tokens:
                break
            seq[pos] = i
            weights[pos] = 4.0
            pos += 1
        cursor = pos
    return seq, weights


def build_config(vocab):
    from transformers import VoxtralRealtimeConfig

    audio_config = dict(hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4, head_dim=16,
                        num_mel_bins=128, rms_norm_eps=1e-5, sliding_window=100, max_position_embeddings=1500,
                        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, hidden_act="silu")
    text_config = dict(vocab_size=vocab, hidden_size=64, intermediate_size=192, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=131072,
                       rms_norm_eps=1e-5, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                       sliding_window=64, tie_word_embeddings=True, bos_token_id=BOS, eos_token_id=EOS)
    return VoxtralRealtimeConfig(audio_config=audio_config, text_config=text_config, downsample_factor=4,
                                 audio_length_per_tok=8, default_num_delay_tokens=6, tie_word_embeddings=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(REPO / "tests" / "models" / "voxtral_realtime" / "tiny"))
    ap.add_argument("--steps", type=int, default=2400)
    ap.add_argument("--lr", type=float, default=4e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-seconds", type=float, default=480)
    ap.add_argument("--stop-at", type=int, default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    np.random.seed(args.seed)

    import transformers
    from transformers import GenerationConfig, VoxtralRealtimeFeatureExtractor, VoxtralRealtimeForConditionalGeneration

    sys.path.insert(0, str(REPO))
    from transcribe.llm.tekken import TekkenTokenizer

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = clips()
    tekken = make_tekken(corpus(), 400, AUDIO_REALTIME)
    (out / "tekken.json").write_text(json.dumps(tekken, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
    tok = TekkenTokenizer.load(out / "tekken.json")
    vocab = len(tok)
    config = build_config(vocab)
    model = VoxtralRealtimeForConditionalGeneration(config)
    fe = VoxtralRealtimeFeatureExtractor()
    print(f"tekken {vocab} tokens, params {sum(p.numel() for p in model.parameters())}")

    feats = {}
    for name, wav, _ in data:
        for delay in (4, 6, 8):
            right = (PER_TOKEN - len(wav) % PER_TOKEN) % PER_TOKEN + PER_TOKEN * (delay + 1 + 10)
            x = np.concatenate([np.zeros(LEFT_TOKENS * PER_TOKEN, np.float32), wav, np.zeros(right, np.float32)])
            feats[name, delay] = fe(x, sampling_rate=16000, return_tensors="pt").input_features
    examples = {(name, d): targets(wav, text, tok, d) for name, wav, text in data for d in (4, 6, 8)}

    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01, betas=(0.9, 0.98))
    warm = 50
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(s, args.steps) / args.steps))))
    model.train()
    names = [name for name, _, _ in data]
    log, t0, step = [], time.time(), 0
    for step in range(args.steps):
        name = "jfk.wav" if random.random() < 0.1 else random.choice(names)
        delay = random.choices((4, 6, 8), weights=(1, 2, 1))[0]
        seq, w = examples[name, delay]
        ids = torch.tensor([seq])
        logits = model(input_ids=ids, input_features=feats[name, delay], num_delay_tokens=delay).logits[0, :-1].float()
        wt = torch.tensor(w[1:])
        nll = torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="none")
        loss = (nll * wt).sum() / wt.sum()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 50 == 0:
            log.append({"step": step, "loss": round(float(loss), 4), "t": round(time.time() - t0, 1)})
            print(log[-1], flush=True)
        if time.time() - t0 > args.max_seconds or (args.stop_at is not None and step + 1 >= args.stop_at):
            break
    model.eval()
    model.generation_config = GenerationConfig(bos_token_id=BOS, eos_token_id=EOS, pad_token_id=11)
    model.save_pretrained(out)
    # the published config.json spells the encoder's key/value heads out (transformers maps the key onto
    # num_attention_heads and does not write it back); transcribe.cpp's converter reads it
    cfg = json.loads((out / "config.json").read_text())
    cfg["audio_config"]["num_key_value_heads"] = cfg["audio_config"]["num_attention_heads"]
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    (out / "processor_config.json").write_text(json.dumps(
        {"feature_extractor": {**fe.to_dict(), "feature_extractor_type": "VoxtralRealtimeFeatureExtractor"},
         "processor_class": "VoxtralRealtimeProcessor"}, indent=2, sort_keys=True) + "\n")
    (out / "train_log.json").write_text(json.dumps({
        "transformers": transformers.__version__, "torch": torch.__version__, "args": vars(args),
        "steps_run": step + 1, "seconds": round(time.time() - t0, 1), "log": log}, indent=1) + "\n")
    with torch.no_grad():
        seq, _ = examples["jfk.wav", 6]
        gen = model.generate(input_ids=torch.tensor([seq[:39]]), input_features=feats["jfk.wav", 6], num_delay_tokens=6)
    print("jfk greedy:", repr(tok.decode(gen[0, 39:].tolist())))
    print("target    :", repr(tok.decode(seq)))


if __name__ == "__main__":
    main()
