"""Make a tiny Moonshine Streaming model in the transformers layout (`MoonshineStreamingForConditionalGeneration
.save_pretrained` + the processor's files + a tiny trained tokenizer in the published format).

Run from the repository root with the venv that holds transformers 5.25:

    OMP_NUM_THREADS=1 nice .venv-nemo/bin/python tools/moonshine_streaming_tiny.py --max-seconds 420

(`.venv-nemo` is the NeMo/transformers venv.) Audio: <repo>/../shared/audio (jfk.wav, dev/manifest.jsonl).

What it writes into --out (default tests/models/moonshine_streaming/tiny): config.json (with the top-level
`encoder_hidden_size` the published files carry), generation_config.json, model.safetensors (float32),
tokenizer.json + tokenizer_config.json, preprocessor_config.json + processor_config.json, train_log.json.

Steps:
 1. the tokenizer: a SentencePiece-style BPE with byte fallback as published (`<unk>` 0 = pad, `<s>` 1 = BOS
    and decoder start, `</s>` 2 = EOS, the 256 byte pieces `<0x00>`..`<0xFF>` next, then the pieces, `▁` for a
    space), its merges trained with `tokenizers` on the transcripts;
 2. the config scaled down from moonshine-streaming-small/-medium, every structural switch kept: the encoder's
    width (48) different from its attention width (2 x 16, as small and medium: 620 vs 512, 768 vs 640) and from
    the decoder's (32: the adapter's projection exists), the published six sliding windows ((16,4) (16,4) (16,0)
    (16,0) (16,4) (16,4)), GELU encoder MLP with biases, the decoder's SwiGLU, partial RoPE 0.8, untied head,
    no attention biases; 1,536 adapter positions (30.7 s of encoder frames;
    published 4,096);
 3. a short teacher-forced run (AdamW, torch threads 1) on jfk.wav (every other step) and the 37 dev clips;
 4. save_pretrained (float32) + greedy generate on jfk.wav printed at the end.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from speech_clips import JFK_TEXT, clips  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SPECIALS = ["<unk>", "<s>", "</s>"]


def train_tokenizer(texts: list[str], vocab_size: int):
    """A byte-fallback BPE in the published layout (see the module docstring)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, trainers

    def setup(tok):
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
        tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(" ", 1, 0)])
        return tok

    from tokenizers import pre_tokenizers

    scratch = setup(Tokenizer(models.BPE(unk_token="<unk>")))
    # pieces never cross a word start, as SentencePiece trains them (the saved tokenizer has no pre-tokenizer)
    scratch.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="never", split=True)
    n_bytes = 256
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - len(SPECIALS) - n_bytes, special_tokens=[],
                                  show_progress=False, initial_alphabet=[])
    scratch.train_from_iterator(texts, trainer)
    learned = json.loads(scratch.to_str())["model"]
    vocab = {s: i for i, s in enumerate(SPECIALS)}
    for b in range(n_bytes):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for piece, _ in sorted(learned["vocab"].items(), key=lambda kv: kv[1]):
        if piece not in vocab:
            vocab[piece] = len(vocab)
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in learned["merges"]]
    tok = setup(Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True,
                                     fuse_unk=True)))
    from tokenizers import AddedToken

    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS])
    return tok, len(vocab)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "tests" / "models" / "moonshine_streaming" / "tiny"))
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--max-seconds", type=float, default=420.0)
    ap.add_argument("--vocab", type=int, default=640)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    from transformers import (MoonshineStreamingConfig, MoonshineStreamingForConditionalGeneration,
                              MoonshineStreamingProcessor, PreTrainedTokenizerFast, Wav2Vec2FeatureExtractor)

    data = clips()
    tok, vocab_size = train_tokenizer([t for _, _, t in data], args.vocab)
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                     pad_token="<unk>", clean_up_tokenization_spaces=False)
    fe = Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=16000, padding_value=0.0, do_normalize=False,
                                  return_attention_mask=True)
    processor = MoonshineStreamingProcessor(fe, hf_tok)

    enc = dict(hidden_size=48, intermediate_size=96, num_hidden_layers=6, num_attention_heads=2,
               num_key_value_heads=2, head_dim=16, hidden_act="gelu", max_position_embeddings=1536,
               sliding_windows=[[16, 4], [16, 4], [16, 0], [16, 0], [16, 4], [16, 4]], frame_ms=5.0,
               sample_rate=16000, attention_bias=False)
    config = MoonshineStreamingConfig(
        encoder_config=enc, vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, head_dim=16, hidden_act="silu", max_position_embeddings=1536,
        pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.8})
    model = MoonshineStreamingForConditionalGeneration(config)
    model.train()

    items = []
    for name, wav, text in data:
        ids = hf_tok(text)["input_ids"]
        labels = torch.tensor([ids + [2]])
        feats = processor(wav, sampling_rate=16000, return_tensors="pt")
        items.append((name, feats["input_values"], feats["attention_mask"], labels))
    jfk = items[0]
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    t0 = time.time()
    log = []
    rng = np.random.default_rng(args.seed)
    step = 0
    for step in range(args.steps):
        it = jfk if step % 2 == 0 else items[1 + int(rng.integers(len(items) - 1))]
        lr = 3e-3 * min(1.0, (step + 1) / 100) * (0.5 * (1 + math.cos(math.pi * min(1.0, step / args.steps))))
        for g in opt.param_groups:
            g["lr"] = max(lr, 1e-4)
        out = model(input_values=it[1], attention_mask=it[2], labels=it[3])
        opt.zero_grad()
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0:
            log.append({"step": step, "loss": round(float(out.loss), 4), "clip": it[0]})
            print(step, float(out.loss), it[0], f"{time.time() - t0:.0f}s", flush=True)
        if time.time() - t0 > args.max_seconds:
            break
    model.eval()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    processor.save_pretrained(out_dir)
    cfg = json.loads((out_dir / "config.json").read_text())
    cfg["encoder_hidden_size"] = enc["hidden_size"]  # the published files carry it (transcribe.cpp's converter reads it)
    (out_dir / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    with torch.no_grad():
        gen = model.generate(input_values=jfk[1], attention_mask=jfk[2], max_new_tokens=100)
    text = hf_tok.decode(gen[0], skip_special_tokens=True)
    print("jfk:", text)
    (out_dir / "train_log.json").write_text(json.dumps({"steps": step + 1, "seconds": round(time.time() - t0),
                                                        "jfk_greedy": text, "target": JFK_TEXT, "log": log},
                                                       indent=1) + "\n")


if __name__ == "__main__":
    main()
