"""Make a tiny MedASR model in the `google/medasr` layout (transformers' LasrForCTC, model type "lasr_ctc").

Run from the repository root with the venv that holds transformers >= 5.25 (.venv-nemo):

    OMP_NUM_THREADS=1 nice .venv-nemo/bin/python tools/medasr_tiny.py --steps 900 --max-seconds 460

The committed model came from exactly that call (900 steps, 177 s; train_log.json).

Audio and transcripts come from <repo>/../shared/audio through tools/speech_clips.py.

What it writes into --out (default tests/models/medasr/tiny): config.json, model.safetensors (float32),
spiece.model, tokenizer.json, tokenizer_config.json, processor_config.json (LasrProcessor.save_pretrained),
preprocessor_config.json (the feature extractor's, as the published repo has it) and train_log.json (the recipe and the loss curve).

Steps:
 1. a SentencePiece unigram model trained on the dev transcripts + the JFK transcript, with the published id layout:
    0 <epsilon> (the pad token and CTC blank), 1 <s>, 2 </s>, 3 <unk>, then the pieces; LasrTokenizer converts it
    (tokenizer.json) and adds its 100 <extra_id_N> sentinels above the CTC head's outputs, as the published one has;
 2. LasrCTCConfig scaled down from google/medasr keeping every structural switch: the subsampler (dense 128 mels ->
    hidden, two stride-2 kernel-5 convs, the second to subsampling_conv_channels = hidden / 2, dense back), RoPE
    (default type, theta 10000), the macaron feed-forwards' residual weights (1.5, 0.5), the conv module's (2.0,
    1.0), an even depthwise kernel of 32 ("same" padding 15 left / 16 right), batch norm, bias-free layer norms and
    projections, SiLU, a k=1 conv CTC head with a bias;
 3. CTC training (AdamW, dropouts off while training, the published values written into config.json) on jfk.wav
    (weighted 4x) and the --dev-clips shortest dev clips (4), then batch norm's running statistics re-estimated on the training batch (cumulative average)
    so eval-mode outputs follow the audio;
 4. save_pretrained (float32) + a greedy check on jfk.wav printed at the end.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from speech_clips import clips  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
VOCAB = 128


def train_tokenizer(texts: list[str], out: Path):
    import sentencepiece as spm

    corpus = out / "_corpus.txt"
    corpus.write_text("\n".join(texts) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(out / "spiece"), vocab_size=VOCAB,
                                   model_type="unigram", pad_id=0, pad_piece="<epsilon>", bos_id=1, eos_id=2,
                                   unk_id=3, character_coverage=1.0, minloglevel=2)
    corpus.unlink()
    (out / "spiece.vocab").unlink()
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "LasrTokenizer", "pad_token": "<epsilon>", "eos_token": "</s>", "unk_token": "<unk>",
        "extra_ids": 100}))
    from transformers import LasrTokenizer

    return LasrTokenizer.from_pretrained(str(out))


def make_config(inference: bool):
    from transformers import LasrCTCConfig

    drop = 0.1 if inference else 0.0
    enc = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
               hidden_act="silu", attention_bias=False, convolution_bias=False, conv_kernel_size=32,
               subsampling_conv_channels=16, num_mel_bins=128, subsampling_conv_kernel_size=5,
               subsampling_conv_stride=2, dropout=drop, dropout_positions=0.0, layerdrop=drop,
               activation_dropout=drop, attention_dropout=drop, max_position_embeddings=10000,
               initializer_range=0.02, layer_norm_eps=1e-6, feed_forward_residual_weights=[1.5, 0.5],
               conv_residual_weights=[2.0, 1.0], batch_norm_momentum=0.01,
               rope_parameters={"rope_theta": 10000.0, "rope_type": "default"})
    return LasrCTCConfig(vocab_size=VOCAB, pad_token_id=0, encoder_config=enc, ctc_loss_reduction="mean",
                         ctc_zero_infinity=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=REPO / "tests" / "models" / "medasr" / "tiny")
    ap.add_argument("--steps", type=int, default=900)
    ap.add_argument("--max-seconds", type=float, default=420.0)
    ap.add_argument("--dev-clips", type=int, default=4, help="dev clips trained on beside jfk.wav")
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    from transformers import LasrFeatureExtractor, LasrForCTC, LasrProcessor

    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    data = clips()
    tok = train_tokenizer([t for _, _, t in data], out)
    fe = LasrFeatureExtractor()
    # jfk.wav and the shortest dev clips (a training step costs the longest clip times the batch)
    train = data[:1] + sorted(data[1:], key=lambda c: len(c[1]))[: args.dev_clips]
    feats = fe([w for _, w, _ in train], sampling_rate=16000, return_attention_mask=True, return_tensors="pt")
    labels = [tok(t, add_special_tokens=False)["input_ids"] for _, _, t in train]
    assert all(0 not in x and 3 not in x for x in labels), "a transcript has a blank or unknown piece"
    targets = torch.tensor([i for x in labels for i in x])
    target_len = torch.tensor([len(x) for x in labels])

    model = LasrForCTC(make_config(inference=False))
    model.train()
    in_len = feats["attention_mask"].sum(-1)
    out_len = model._get_subsampling_output_length(in_len)
    weights = torch.tensor([4.0] + [1.0] * (len(train) - 1))
    opt = torch.optim.AdamW(model.parameters(), lr=5e-3, weight_decay=1e-2)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=5e-3, total_steps=args.steps, pct_start=0.1)
    log, t0, step = [], time.time(), 0
    for step in range(1, args.steps + 1):
        logits = model(input_features=feats["input_features"], attention_mask=feats["attention_mask"]).logits
        logp = torch.log_softmax(logits.float(), -1).transpose(0, 1)
        loss = torch.nn.functional.ctc_loss(logp, targets, out_len, target_len, blank=0, reduction="none",
                                            zero_infinity=True)
        loss = (loss / target_len * weights).sum() / weights.sum()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 25 == 0 or step == 1:
            log.append([step, round(float(loss), 4)])
            print(step, f"{float(loss):.4f}", f"{time.time() - t0:.0f}s", flush=True)
        if time.time() - t0 > args.max_seconds:
            break

    # Batch norm's running statistics: the cumulative average over the training batch in train mode.
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm1d):
                m.reset_running_stats()
                m.momentum = None
        for _ in range(3):
            model(input_features=feats["input_features"], attention_mask=feats["attention_mask"])
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm1d):
                m.momentum = 0.01
    model.eval()
    inference = make_config(inference=True)
    model.config.encoder_config = inference.encoder_config
    model.encoder.config = inference.encoder_config
    model.save_pretrained(str(out))
    LasrProcessor(feature_extractor=fe, tokenizer=tok).save_pretrained(str(out))
    fe.save_pretrained(str(out))  # preprocessor_config.json, as the published repo has it (transcribe.cpp reads it)
    (out / "generation_config.json").unlink(missing_ok=True)  # the published model has none (CTC, no generation)
    (out / "train_log.json").write_text(json.dumps({
        "command": "OMP_NUM_THREADS=1 nice .venv-nemo/bin/python tools/medasr_tiny.py " + " ".join(sys.argv[1:]),
        "steps_run": step, "clips": [n for n, _, _ in train], "jfk_weight": 4.0, "optimizer": "AdamW lr 5e-3 "
        "one-cycle, weight decay 1e-2, clip 1.0", "loss": log}, indent=1))

    proc = LasrProcessor.from_pretrained(str(out))
    m = LasrForCTC.from_pretrained(str(out)).eval()
    for name, wav, text in data[:3]:
        x = proc(wav, sampling_rate=16000, return_tensors="pt", padding=True)
        ids = m.generate(**x)
        print(name, "|", proc.batch_decode(ids, skip_special_tokens=True)[0], "| want:", text)
    print("files:", sorted(os.listdir(out)), "bytes:", sum(f.stat().st_size for f in out.iterdir()))


if __name__ == "__main__":
    np.random.seed(0)
    main()
