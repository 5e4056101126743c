"""Make a tiny Moonshine model in the `UsefulSensors/moonshine-*` layout (transformers' MoonshineForConditionalGeneration,
model type "moonshine").

Run from the repository root with the transformers venv (transformers 5.25):

    OMP_NUM_THREADS=1 .venv-nemo/bin/python tools/moonshine_tiny.py --max-seconds 420

The committed model came from exactly that call: the 420 s cap stopped it after 830 steps (train_log.json); to redo
that run without depending on the machine's speed: --steps 830 --max-seconds 1e9.

What it writes into --out (default tests/models/moonshine/tiny): config.json, generation_config.json,
preprocessor_config.json, tokenizer.json, model.safetensors (float32) and train_log.json (recipe and loss curve).

Steps:
 1. a SentencePiece BPE with byte fallback (the published tokenizer's kind) trained on the dev transcripts and the
    JFK transcript, written as the published tokenizer.json is laid out: a `tokenizers` BPE (byte_fallback, fuse_unk,
    unk <unk>), normalizer Prepend("▁") + Replace(" ", "▁"), no pre-tokenizer, decoder Replace("▁", " ") +
    ByteFallback + Fuse + Strip(1 leading space); ids 0, 1, 2 = <unk>, <s>, </s>, then the 256 byte pieces, then the
    merged pieces, then special added tokens <<ST_0>>.. (the published file has 768 of them, here 8);
 2. MoonshineConfig scaled down from moonshine-tiny with every structural switch kept: the conv stem (kernels
    127/7/3, strides 64/3/2, GroupNorm), partial rotary embeddings (factor 0.9: 10 of a head's 12 dimensions),
    pad_head_dim_to_multiple_of 8 (heads padded 12 -> 16 inside attention), GELU encoder MLP and SwiGLU decoder
    MLP, no attention biases, tied embeddings, the decoder's cross-attention, max_position_embeddings 194;
 3. a short teacher-forced training run (AdamW, one thread) on the 37 dev clips + jfk.wav (jfk.wav in every step),
    so that greedy output on jfk.wav follows the speech;
 4. save_pretrained (float32) + a greedy check on jfk.wav printed at the end.
"""
import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from speech_clips import clips  # noqa: E402

SPECIALS = ["<unk>", "<s>", "</s>"]
EXTRA = [f"<<ST_{i}>>" for i in range(8)]


def make_tokenizer(texts: list, out: Path, vocab_size: int):
    import sentencepiece as spm
    from tokenizers import AddedToken, Tokenizer, decoders, normalizers
    from tokenizers.models import BPE
    from transformers.convert_slow_tokenizer import SentencePieceExtractor

    work = out / "_sp"
    work.mkdir(parents=True, exist_ok=True)
    (work / "corpus.txt").write_text("\n".join(texts), encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(work / "corpus.txt"), model_prefix=str(work / "sp"),
                                   vocab_size=vocab_size, model_type="bpe", byte_fallback=True,
                                   character_coverage=1.0, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
                                   normalization_rule_name="identity", remove_extra_whitespaces=False,
                                   minloglevel=2)
    ex = SentencePieceExtractor(str(work / "sp.model")).extract(BPE)
    tok = Tokenizer(BPE(ex["vocab"], ex["merges"], unk_token="<unk>", fuse_unk=True, byte_fallback=True, dropout=None))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in SPECIALS + EXTRA])
    tok.save(str(out / "tokenizer.json"))
    for f in work.iterdir():
        f.unlink()
    work.rmdir()
    return tok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=REPO / "tests" / "models" / "moonshine" / "tiny")
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--max-seconds", type=float, default=420.0)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    from transformers import MoonshineConfig, MoonshineForConditionalGeneration

    data = clips()
    args.out.mkdir(parents=True, exist_ok=True)
    tok = make_tokenizer([t for _, _, t in data] * 3, args.out, 384)
    vocab = tok.get_vocab_size()
    config = MoonshineConfig(
        vocab_size=vocab, hidden_size=48, intermediate_size=192, encoder_num_hidden_layers=2,
        decoder_num_hidden_layers=2, encoder_num_attention_heads=4, decoder_num_attention_heads=4,
        encoder_num_key_value_heads=4, decoder_num_key_value_heads=4, pad_head_dim_to_multiple_of=8,
        encoder_hidden_act="gelu", decoder_hidden_act="silu", max_position_embeddings=194,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.9},
        attention_bias=False, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=2,
        decoder_start_token_id=1)
    model = MoonshineForConditionalGeneration(config)
    model.train()
    items = []
    for name, wav, text in data:
        ids = tok.encode(text).ids
        items.append((name, torch.from_numpy(np.asarray(wav, dtype=np.float32))[None],
                      torch.tensor([[1] + ids]), torch.tensor([ids + [2]])))
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    t0, log, step = time.time(), [], 0
    jfk = items[0]
    for step in range(args.steps):
        if time.time() - t0 > args.max_seconds:
            break
        lr = args.lr * min(1.0, (step + 1) / 50)
        for g in opt.param_groups:
            g["lr"] = lr
        batch = [jfk, random.choice(items[1:])]
        opt.zero_grad()
        total = 0.0
        for _, wav, dec, lab in batch:
            out = model(input_values=wav, decoder_input_ids=dec, labels=lab)
            out.loss.backward()
            total += float(out.loss.detach())
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 20 == 0:
            log.append({"step": step, "loss": round(total / len(batch), 4), "s": round(time.time() - t0, 1)})
            print(log[-1], flush=True)
    model.eval()
    model.save_pretrained(str(args.out), safe_serialization=True)
    gen = {"bos_token_id": 1, "decoder_start_token_id": 1, "eos_token_id": 2, "max_length": 194, "pad_token_id": 2}
    (args.out / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
    pre = {"do_normalize": False, "feature_extractor_type": "Wav2Vec2FeatureExtractor", "feature_size": 1,
           "padding_side": "right", "padding_value": 0.0, "return_attention_mask": True, "sampling_rate": 16000}
    (args.out / "preprocessor_config.json").write_text(json.dumps(pre, indent=2) + "\n")
    (args.out / "train_log.json").write_text(json.dumps({"steps_run": step, "seed": args.seed, "lr": args.lr,
                                                         "batch": "jfk.wav + one random dev clip",
                                                         "log": log}, indent=1) + "\n")
    with torch.no_grad():
        ids = model.generate(jfk[1], max_new_tokens=60, num_beams=1, do_sample=False)[0].tolist()
    print("jfk greedy:", tok.decode(ids, skip_special_tokens=True))


if __name__ == "__main__":
    main()
