"""Build and briefly train the tiny Granite Speech 5 CTC model under tests/models/granite_speech5/tiny/.

Run from the repository root with the transformers venv:

    OMP_NUM_THREADS=1 nice .venv-nemo/bin/python tools/granite_speech5_tiny.py [--minutes 7]

The published config (ibm-granite/granite-speech-5.0-470m-turboctc: transformers' GraniteSpeech5CTCConfig
defaults, the checkpoint its docstrings name) scaled down, keeping every structural switch: two subsampling
blocks first (subsample_layers [0, 1]), the self-conditioning CTC at layer num_hidden_layers // 2 (a plain
block, as in the 16-layer model), block attention with Shaw's relative positions (context_size < the
table's max_position_embeddings, so several blocks and a padded last one), biases in the feed-forwards
(attention_bias), 80 mel bins (x2 deltas, x2 stacking), a depthwise kernel of 7, the CTC head tied to the
encoder's `out` (tie_word_embeddings, so the file has no ctc_head.* tensors), blank = pad = id 0.

Tokenizer: a small BPE in tokenizer.json (Metaspace pre-tokenizer and decoder, <pad> = 0 the CTC blank,
<unk> = 1), loaded as transformers' ParakeetTokenizer (the class transformers maps this model type to),
trained on the transcripts of jfk.wav and the dev utterances. Training: CTC on the encoder's logits over
jfk + the dev utterances (AdamW, one thread, a time budget), BatchNorm in training mode (its running
statistics are the trained ones). The steps a time budget allows vary between runs, so rerun
tools/granite_speech5_reference.py after this.
"""
from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import granite_speech5_common as C  # noqa: E402
from speech_clips import clips  # noqa: E402

VOCAB = 160
ENCODER = dict(hidden_size=32, intermediate_size=128, num_hidden_layers=6, num_attention_heads=4,
               num_mel_bins=80, hidden_act="silu", max_position_embeddings=40, context_size=16,
               conv_kernel_size=7, conv_expansion_factor=2, subsample_layers=[0, 1], attention_bias=True)


def build_tokenizer(texts, out: Path):
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import ParakeetTokenizer

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<pad>", "<unk>"], min_frequency=1)
    tok.train_from_iterator(texts, trainer)
    hf = ParakeetTokenizer(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>")
    hf.save_pretrained(str(out))
    return hf


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=7.0)
    ap.add_argument("--seed", type=int, default=5)
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    fe_module = C.patch_torchaudio()
    from transformers import GraniteSpeech5CTCConfig, GraniteSpeech5ForCTC, GraniteSpeech5Processor

    out = C.MODEL
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    data = [(n, w, t) for n, w, t in clips() if len(w) <= 16000 * 12]
    tok = build_tokenizer([t for _, _, t in data], out)
    vocab = len(tok)
    fe = fe_module.GraniteSpeech5FeatureExtractor()
    processor = GraniteSpeech5Processor(fe, tok)
    processor.save_pretrained(str(out))

    cfg = GraniteSpeech5CTCConfig(vocab_size=vocab, encoder_config=dict(vocab_size=vocab, **ENCODER),
                                  pad_token_id=0, tie_word_embeddings=True)
    model = GraniteSpeech5ForCTC(cfg)
    feats = []
    for name, wav, text in data:
        f = fe(wav, sampling_rate=16000, return_tensors="pt")
        ids = tok(text, add_special_tokens=False)["input_ids"]
        feats.append((name, f["input_features"][0], ids))
    print(f"{len(feats)} clips, vocab {vocab}, params {sum(p.numel() for p in model.parameters())}", flush=True)

    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    jfk = [x for x in feats if x[0] == "jfk.wav"][0]
    t0, step = time.time(), 0
    while time.time() - t0 < args.minutes * 60:
        batch = random.sample(feats, 8)
        if jfk not in batch:
            batch[0] = jfk
        t = max(f.shape[0] for _, f, _ in batch)
        x = torch.zeros(len(batch), t, batch[0][1].shape[1])
        mask = torch.zeros(len(batch), t, dtype=torch.long)
        for j, (_, f, _) in enumerate(batch):
            x[j, : f.shape[0]] = f
            mask[j, : f.shape[0]] = 1
        model.train()
        logits = model(input_features=x, attention_mask=mask).logits
        lengths = model._get_subsampling_output_length(mask.sum(-1))
        targets = torch.cat([torch.tensor(ids) for _, _, ids in batch])
        tl = torch.tensor([len(ids) for _, _, ids in batch])
        loss = F.ctc_loss(logits.log_softmax(-1).transpose(0, 1), targets, lengths, tl, blank=0,
                          zero_infinity=True)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 50 == 0:
            model.eval()
            with torch.no_grad():
                ids = model.generate(input_features=jfk[1][None])[0].tolist()
            print(f"step {step} {time.time() - t0:.0f}s loss {loss.item():.3f} | {tok.decode(ids)}", flush=True)
    model.eval()
    model.save_pretrained(str(out))
    with torch.no_grad():
        ids = model.generate(input_features=jfk[1][None])[0].tolist()
    text = tok.decode(ids)
    (out / "TRAINING.json").write_text(json.dumps(dict(steps=step, seconds=round(time.time() - t0),
                                                       final_loss=round(loss.item(), 4), jfk=text,
                                                       published=C.PUBLISHED), indent=1) + "\n")
    print("jfk:", text)
    print("files:", sorted(p.name for p in out.iterdir()))


if __name__ == "__main__":
    main()
