"""Make a tiny Kyutai STT model in transformers' layout (`KyutaiSpeechToTextForConditionalGeneration.save_pretrained`
+ the processor: preprocessor_config.json, a tiny trained sentencepiece tokenizer as tokenizer.json).

Run from the repository root with the NeMo/transformers venv (transformers 5.25.0):

    OMP_NUM_THREADS=1 nice .venv-nemo/bin/python tools/kyutai_tiny.py --steps 600 --max-seconds 420

Audio: <repo>/../shared/audio (jfk.wav, dev/manifest.jsonl), resampled to 24 kHz by `transcribe.audio.load_audio`
(the same samples the tests read).

The published configurations (kyutai/stt-1b-en_fr-trfs, stt-2.6b-en-trfs) scaled down, every structural switch kept:
 - Mimi: the SEANet encoder (causal convolutions, constant padding, strides 4, 5, 6, 8: 1920 samples per 12.5 Hz
   frame), one residual block per stage (dilation 1, compress 2), its transformer (RoPE, LayerNorm, layer scale,
   GELU MLP, a sliding window of 24 frames at 25 Hz = 0.96 s, so jfk.wav crosses it; published 250), the replicate-
   padded stride-2 downsampling, the split RVQ (1 semantic + 3 acoustic codebooks of 32 entries; published 1 + 31
   of 2048) with input projections (16 dims, hidden 32). The codec is random but fixed: its codebooks are drawn from
   the latents of the training speech (the semantic one from its projection, each acoustic one from the residual
   left by the ones before, each entry a frame plus noise), so that the codes carry the audio; drawn again until
   the tests' clips are 2e-4 (relative) from a tie between two entries.
 - the LM: 2 layers, hidden 64, 4 heads (head_dim 16), gated SiLU MLP (ffn_dim 256), RMSNorm eps 1e-8, RoPE theta
   1e5, the codebook embeddings summed with the text embedding (audio pad id = the last row), untied head, a
   sliding window of 40 positions (3.2 s; published 375 = 30 s) so that jfk.wav crosses it.
 - the processor: 1.0 s of silence before the audio, 0.5 s of delay + 1 s after (stt-1b's layout).
 - tokenizer: sentencepiece unigram, 160 pieces, on the transcripts; <unk> 0, <s> 1, </s> 2, <pad> 3 (the text pad
   token the model writes between words, as the published pad_token_id 3); the initial text token (bos) is the
   last text id, vocab_size - 1, as in the published layout (text_card + 1 rows).
Training: the LM only, teacher forced, on jfk.wav + the dev clips: one target per 80 ms frame, <pad> where nothing is
said, each word's pieces starting `delay` frames after the word starts in the audio (word times spread over the
speech in proportion to their length; no forced alignment), word pieces weighted 4x; a sliding-window mask as the
generate's cache has. Then save_pretrained and a greedy generate on jfk.wav.
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
sys.path.insert(0, str(REPO / "tools"))
sys.path.insert(0, str(REPO))
from speech_clips import AUDIO, JFK_TEXT, clips  # noqa: E402

SR = 24000
FRAME = 1920
PREFIX_S, DELAY_S = 1.0, 0.5
N_CODEBOOKS, CODEBOOK = 4, 32
PAD_ID = 3
VOCAB_PIECES = 160


def load24(path):
    from transcribe.audio import load_audio

    return load_audio(str(path), SR)


def train_tokenizer(texts, out):
    import sentencepiece as spm

    corpus = out / "_corpus.txt"
    corpus.write_text("\n".join(texts) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(out / "_spm"), vocab_size=VOCAB_PIECES,
                                   model_type="unigram", character_coverage=1.0, unk_id=0, bos_id=1, eos_id=2,
                                   pad_id=3, minloglevel=2, hard_vocab_limit=False)
    corpus.unlink()
    return out / "_spm.model"


def hf_tokenizer(sp):
    """The sentencepiece model as a `tokenizers` unigram model (Metaspace word marks), in a PreTrainedTokenizerFast."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    pieces = [(sp.id_to_piece(i), sp.get_score(i)) for i in range(sp.get_piece_size())]
    tok = Tokenizer(models.Unigram(pieces, unk_id=0))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                                   pad_token="<pad>")


def build_config(vocab):
    from transformers import KyutaiSpeechToTextConfig

    codec = dict(model_type="mimi", sampling_rate=SR, frame_rate=12.5, audio_channels=1, hidden_size=32,
                 num_filters=4, num_residual_layers=1, upsampling_ratios=[8, 6, 5, 4], kernel_size=7,
                 last_kernel_size=3, residual_kernel_size=3, dilation_growth_rate=2, use_causal_conv=True,
                 pad_mode="constant", compress=2, trim_right_ratio=1.0, codebook_size=CODEBOOK, codebook_dim=16,
                 num_quantizers=N_CODEBOOKS, use_conv_shortcut=False, vector_quantization_hidden_dimension=16,
                 num_semantic_quantizers=1, upsample_groups=32, num_hidden_layers=2, intermediate_size=64,
                 num_attention_heads=2, num_key_value_heads=2, head_dim=16, hidden_act="gelu",
                 max_position_embeddings=8000, norm_eps=1e-5, sliding_window=24, layer_scale_initial_scale=0.01,
                 rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, attention_bias=False)
    return KyutaiSpeechToTextConfig(
        codebook_vocab_size=CODEBOOK + 1, vocab_size=vocab, hidden_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, head_dim=16, max_position_embeddings=80,
        rope_parameters={"rope_type": "default", "rope_theta": 100000.0}, hidden_act="silu", sliding_window=40,
        ffn_dim=256, rms_norm_eps=1e-8, num_codebooks=N_CODEBOOKS, audio_bos_token_id=CODEBOOK,
        audio_pad_token_id=vocab + N_CODEBOOKS * (CODEBOOK + 1), tie_word_embeddings=False, pad_token_id=PAD_ID,
        bos_token_id=vocab - 1, eos_token_id=None, codec_config=codec)


def speech_span(wav):
    hop = 480
    n = max(1, len(wav) // hop)
    rms = np.sqrt(np.mean(wav[: n * hop].reshape(n, hop) ** 2, axis=1) + 1e-12)
    on = np.nonzero(rms > 0.05 * rms.max())[0]
    if len(on) == 0:
        return 0.0, len(wav) / SR
    return on[0] * hop / SR, (on[-1] + 1) * hop / SR


def padded(wav):
    return np.concatenate([np.zeros(int(PREFIX_S * SR), np.float32), wav,
                           np.zeros(int((DELAY_S + 1.0) * SR), np.float32)])


def targets(wav, text, sp, n_steps):
    """(targets, weights): the token chosen at each position 0..n_steps-1 (position p reads audio frame p-1)."""
    tgt = [PAD_ID] * n_steps
    w = [1.0] * n_steps
    delay = round(DELAY_S * 12.5)
    start, end = speech_span(wav)
    words = text.split()
    lengths = [len(x) + 1 for x in words]
    total = sum(lengths)
    acc, cursor = 0, 0
    for word, n in zip(words, lengths):
        t = PREFIX_S + start + (end - start) * acc / total
        acc += n
        pos = max(int(t / 0.08) + 1 + delay, cursor)
        for i in sp.encode(word):
            if pos >= n_steps:
                break
            tgt[pos] = i
            w[pos] = 4.0
            pos += 1
        cursor = pos
    return tgt, w


def margin(x, entries):
    """The smallest relative gap over the frames `x` between the nearest entry's distance and the next one's."""
    d = torch.cdist(x[None], entries[None])[0].sort(dim=-1).values
    return float(((d[:, 1] - d[:, 0]) / d[:, 0]).min())


def fit_codebooks(model, waves, checked):
    """The quantizer's codebooks from the latents of `waves` (see the module docstring); each codebook is drawn
    again until every frame of the `checked` inputs (the tests' clips) is 2e-4 (relative) nearer its entry than
    the next, so that float32 differences between CPUs and implementations do not flip a code."""
    codec = model.codec_model
    with torch.no_grad():
        def latents(ws):
            return torch.cat([codec.encoder(torch.from_numpy(padded(w))[None, None]).latents for w in ws], dim=-1)

        lat, lat_checked = latents(waves), latents(checked)
        g = torch.Generator().manual_seed(1)
        for rvq in (codec.quantizer.semantic_residual_vector_quantizer, codec.quantizer.acoustic_residual_vector_quantizer):
            x = rvq.input_proj(lat)[0].T  # frames x dim
            xc = rvq.input_proj(lat_checked)[0].T
            for layer in rvq.layers:
                # training frames plus noise (half their spread): no entry equals a frame, whose distance 0 would
                # come out of cdist's matrix-product formula as noise (or NaN) and make the argmin arbitrary
                for _ in range(2000):
                    pick = x[torch.randperm(x.shape[0], generator=g)[:CODEBOOK]]
                    pick = pick + 0.5 * x.std(dim=0) * torch.randn(pick.shape, generator=g)
                    if margin(xc, pick) > 2e-4:
                        break
                else:
                    raise SystemExit("no codebook draw kept the checked frames 2e-4 from a tie")
                print("codebook margin", margin(xc, pick))
                cb = layer.codebook
                cb.embed_sum.copy_(pick)
                cb.cluster_usage.fill_(1.0)
                cb._embed = None
                x = x - pick[torch.cdist(x[None], pick[None])[0].argmin(-1)]
                xc = xc - pick[torch.cdist(xc[None], pick[None])[0].argmin(-1)]


def window_mask(n, window):
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    return ((j <= i) & (i - j < window))[None, None]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(REPO / "tests" / "models" / "kyutai" / "tiny"))
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--lr", type=float, default=5e-3)
    ap.add_argument("--max-seconds", type=float, default=420)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    random.seed(0)
    from transformers import GenerationConfig, KyutaiSpeechToTextFeatureExtractor, \
        KyutaiSpeechToTextForConditionalGeneration, KyutaiSpeechToTextProcessor
    import sentencepiece as spm

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = clips()
    texts = [t for _, _, t in data]
    sp_path = train_tokenizer(texts, out)
    sp = spm.SentencePieceProcessor(model_file=str(sp_path))
    vocab = sp.get_piece_size() + 1  # + the initial text token
    config = build_config(vocab)
    model = KyutaiSpeechToTextForConditionalGeneration(config)
    model.eval()
    waves = [load24(AUDIO / name) for name, _, _ in data]
    # the tests' inputs: jfk.wav, the first two dev clips, jfk.wav three times over (tools/kyutai_reference.py)
    checked = waves[:3] + [np.concatenate([waves[0]] * 3)]
    fit_codebooks(model, waves, checked)
    fe = KyutaiSpeechToTextFeatureExtractor(feature_size=1, sampling_rate=SR, padding_value=0.0,
                                            audio_delay_seconds=DELAY_S, audio_silence_prefix_seconds=PREFIX_S)
    tok = hf_tokenizer(sp)
    # the initial text token, a name for it in the tokenizer (special: decode drops it)
    tok.add_special_tokens({"additional_special_tokens": ["<text_start>"]})
    assert tok.convert_tokens_to_ids("<text_start>") == vocab - 1, tok.convert_tokens_to_ids("<text_start>")

    samples = []
    with torch.no_grad():
        for wav, (_, _, text) in zip(waves, data):
            x = fe(wav, sampling_rate=SR, return_tensors="pt")["input_values"]
            n = x.shape[-1] // FRAME
            codes = model.codec_model.encode(x).audio_codes[0].T  # frames x K
            tgt, w = targets(wav, text, sp, n)
            text_in = [config.bos_token_id] + tgt[:-1]
            audio_in = torch.cat([torch.full((1, N_CODEBOOKS), CODEBOOK), codes[: n - 1]], dim=0)
            ids = torch.cat([torch.tensor(text_in)[:, None], audio_in], dim=1)
            samples.append((ids, torch.tensor(tgt), torch.tensor(w)))
    print(f"vocab {vocab}, params {sum(p.numel() for p in model.parameters())}, {len(samples)} clips")

    params = [p for n, p in model.named_parameters() if not n.startswith("codec_model.")]
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
    model.train()
    t0 = time.time()
    log = []
    for step in range(args.steps):
        for g in opt.param_groups:
            g["lr"] = args.lr * min(1.0, (step + 1) / 30) * (0.5 * (1 + math.cos(math.pi * step / args.steps)))
        batch = random.sample(samples, 4)
        if step % 3 == 0:
            batch[0] = samples[0]  # jfk.wav often
        loss_sum = 0.0
        opt.zero_grad()
        for ids, tgt, w in batch:
            logits = model(input_ids=ids[None], attention_mask=window_mask(len(tgt), config.sliding_window)).logits[0]
            ce = torch.nn.functional.cross_entropy(logits, tgt, reduction="none")
            loss = (ce * w).sum() / w.sum()
            (loss / len(batch)).backward()
            loss_sum += loss.item()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if step % 50 == 0:
            print(f"step {step} loss {loss_sum / len(batch):.4f} {time.time() - t0:.0f}s", flush=True)
            log.append((step, loss_sum / len(batch)))
        if time.time() - t0 > args.max_seconds:
            print("time cap at step", step)
            break
    model.eval()
    model.generation_config = GenerationConfig(bos_token_id=config.bos_token_id, pad_token_id=PAD_ID)
    model.save_pretrained(out)
    proc = KyutaiSpeechToTextProcessor(feature_extractor=fe, tokenizer=tok)
    proc.save_pretrained(out)
    sp_path.unlink()
    (out / "_spm.vocab").unlink()
    (out / "train_log.json").write_text(json.dumps({"steps": step + 1, "loss": log}) + "\n")
    m2 = KyutaiSpeechToTextForConditionalGeneration.from_pretrained(out)
    inputs = proc(audio=waves[0], sampling_rate=SR, return_tensors="pt")
    gen = m2.generate(**inputs)
    print(proc.batch_decode(gen, skip_special_tokens=True))
    print("want:", JFK_TEXT)


if __name__ == "__main__":
    main()
