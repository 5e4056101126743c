"""Make a tiny Qwen3-ASR model in the `Qwen/Qwen3-ASR-*-hf` layout (transformers' Qwen3ASRForConditionalGeneration).

Run from the repository root with the NeMo/transformers venv (transformers 5.24.0):

    OMP_NUM_THREADS=1 .venv-nemo/bin/python tools/qwen3_asr_tiny.py --steps 1200 --max-seconds 480

The committed model came from exactly that call; the 480 s cap stopped it after 1073 steps (train_log.json).
To redo that run without depending on the machine's speed: --steps 1200 --stop-at 1073 --max-seconds 1e9.

(`.venv-nemo` is the venv that holds transformers; any interpreter with transformers >= 5.24, tokenizers,
soundfile and torch works.) Audio comes from <repo>/../shared/audio (jfk.wav and dev/manifest.jsonl).

What it writes into --out (default tests/models/qwen3_asr/tiny):
  config.json, generation_config.json, model.safetensors (float32), tokenizer.json, tokenizer_config.json,
  chat_template.jinja, processor_config.json (whatever transformers' save_pretrained writes for the processor)
  and train_log.json (the training recipe and the loss curve).

Steps:
 1. a Qwen2-style byte-level BPE (the `tokenizers` library, the Qwen2 pre-tokenizer regex + ByteLevel, NFC) trained
    on the dev transcripts + the JFK transcript + the "language English" output prefix; the special tokens are put
    right after the BPE pieces in the Qwen order (<|endoftext|>, <|im_start|>, <|im_end|>, <|audio_start|>,
    <|audio_end|>, <|audio_pad|>, then the non-special added tokens <asr_text>, <timestamp>);
 2. Qwen3ASRProcessor(Qwen3ASRFeatureExtractor(), that tokenizer, the -hf ASR chat template);
 3. Qwen3ASRConfig scaled down from Qwen3-ASR-0.6B (every structural switch kept, see README.md there);
 4. a short teacher-forced training run (AdamW, torch threads 1) on the 37 dev clips + jfk.wav, each clip twice:
    the auto-language prompt (target "language English<asr_text>{text}<|im_end|>") and the forced-language prompt
    (processor.apply_transcription_request(language="English"), which already ends in "language English<asr_text>",
    target "{text}<|im_end|>"); the first transcript tokens are weighted up so that the LM has to read the audio;
 5. save_pretrained (float32) + a greedy check on jfk.wav printed at the end.
"""

import argparse
import json
import sys
import math
import os
import random
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
AUDIO = SHARED / "audio"
sys.path.insert(0, str(Path(__file__).resolve().parent))
from speech_clips import clips  # noqa: E402


# The ASR chat template of the transformers -hf conversion (convert_qwen3_asr_to_hf.py, ASR_CHAT_TEMPLATE): a system
# turn (always rendered, empty unless a system message is given), one user turn holding only the audio placeholders,
# then the assistant turns (with {% generation %} markers) and the generation prompt.
ASR_CHAT_TEMPLATE = (
    "{%- set ns = namespace(system_text='') -%}"
    "{%- for m in messages -%}"
    "{%- if m.role == 'system' -%}"
    "{%- if m.content is string -%}"
    "{%- set ns.system_text = ns.system_text + m.content -%}"
    "{%- else -%}"
    "{%- for c in m.content -%}"
    "{%- if c.type == 'text' and (c.text is defined) -%}"
    "{%- set ns.system_text = ns.system_text + c.text -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- set ns2 = namespace(audio_tokens='') -%}"
    "{%- for m in messages -%}"
    "{%- if m.content is not string -%}"
    "{%- for c in m.content -%}"
    "{%- if c.type == 'audio' or ('audio' in c) or ('audio_url' in c) -%}"
    "{%- set ns2.audio_tokens = ns2.audio_tokens + '<|audio_start|><|audio_pad|><|audio_end|>' -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{{- '<|im_start|>system\\n' + ns.system_text + '<|im_end|>\\n' -}}"
    "{{- '<|im_start|>user\\n' + ns2.audio_tokens + '<|im_end|>\\n' -}}"
    "{%- for m in messages -%}"
    "{%- if m.role == 'assistant' -%}"
    "{%- set ns3 = namespace(assistant_text='') -%}"
    "{%- if m.content is string -%}"
    "{%- set ns3.assistant_text = m.content -%}"
    "{%- else -%}"
    "{%- for c in m.content -%}"
    "{%- if c.type == 'text' and (c.text is defined) -%}"
    "{%- set ns3.assistant_text = ns3.assistant_text + c.text -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{% generation %}"
    "{{- ns3.assistant_text + '<|im_end|>\\n' -}}"
    "{% endgeneration %}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- endif -%}"
)

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|audio_start|>", "<|audio_end|>", "<|audio_pad|>"]
ADDED_NOT_SPECIAL = ["<asr_text>", "<timestamp>"]




def build_tokenizer(texts, vocab_size):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import Qwen2Tokenizer
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=2, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator(texts, trainer)
    state = json.loads(tok.to_str())["model"]
    vocab = dict(state["vocab"])
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in state["merges"]]
    n = len(vocab)
    for i, t in enumerate(SPECIAL + ADDED_NOT_SPECIAL):
        vocab[t] = n + i
    qtok = Qwen2Tokenizer(
        vocab=vocab,
        merges=merges,
        unk_token=None,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        extra_special_tokens={
            "audio_token": "<|audio_pad|>",
            "audio_bos_token": "<|audio_start|>",
            "audio_eos_token": "<|audio_end|>",
        },
        model_max_length=131072,
        clean_up_tokenization_spaces=False,
    )
    from tokenizers import AddedToken

    qtok.add_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL], special_tokens=True)
    qtok.add_tokens([AddedToken(t, special=False, normalized=False) for t in ADDED_NOT_SPECIAL])
    for i, t in enumerate(SPECIAL + ADDED_NOT_SPECIAL):
        assert qtok.convert_tokens_to_ids(t) == n + i, (t, qtok.convert_tokens_to_ids(t), n + i)
    return qtok


def build_config(tok):
    from transformers import Qwen3ASRConfig

    n_tok = len(tok)
    vocab_size = 64 * math.ceil((n_tok + 1) / 64)  # embedding rows > tokenizer size, as published (151936 > 151706)
    ids = {t: tok.convert_tokens_to_ids(t) for t in SPECIAL + ADDED_NOT_SPECIAL}
    audio_config = dict(
        num_mel_bins=128,
        encoder_layers=2,
        encoder_attention_heads=4,
        encoder_ffn_dim=256,
        d_model=64,
        dropout=0.0,
        attention_dropout=0.0,
        activation_function="gelu",
        activation_dropout=0.0,
        scale_embedding=False,
        initializer_range=0.02,
        n_window=50,
        n_window_infer=400,  # published 800 (= 8 chunks of 100 frames); 400 = 4 chunks: jfk (11 chunks) -> 3 windows
        downsample_hidden_size=16,
        output_dim=64,
        max_position_embeddings=13,
    )
    text_config = dict(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=192,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        hidden_act="silu",
        max_position_embeddings=65536,
        initializer_range=0.02,
        rms_norm_eps=1e-6,
        use_cache=True,
        tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        attention_bias=False,
        attention_dropout=0.0,
        use_sliding_window=False,
        sliding_window=None,
        max_window_layers=2,
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=None,
    )
    return Qwen3ASRConfig(
        audio_config=audio_config,
        text_config=text_config,
        audio_token_id=ids["<|audio_pad|>"],
        timestamp_token_id=ids["<timestamp>"],
        pad_token_id=ids["<|im_end|>"],
        eos_token_id=[ids["<|endoftext|>"], ids["<|im_end|>"]],
        tie_word_embeddings=True,
        initializer_range=0.02,
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(REPO / "tests" / "models" / "qwen3_asr" / "tiny"))
    ap.add_argument("--steps", type=int, default=1200)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=640)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-seconds", type=float, default=480, help="wall-clock cap on training")
    ap.add_argument("--stop-at", type=int, default=None,
                    help="stop after this many steps (the schedule still spans --steps): reproduces a time-capped run")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    np.random.seed(args.seed)

    import transformers
    from transformers import GenerationConfig, Qwen3ASRFeatureExtractor, Qwen3ASRForConditionalGeneration, Qwen3ASRProcessor

    data = clips()
    # transcripts + the output prefix + the role words of the chat template (so that "system", "user", "assistant"
    # become whole pieces, as in the published vocabulary)
    chat_words = "system\nuser\nassistant\n"
    texts = [t for _, _, t in data] + ["language English<asr_text>"] * 4 + ["language None"] + [chat_words] * 4
    tok = build_tokenizer(texts, args.vocab)
    fe = Qwen3ASRFeatureExtractor()
    proc = Qwen3ASRProcessor(feature_extractor=fe, tokenizer=tok, chat_template=ASR_CHAT_TEMPLATE)
    config = build_config(tok)
    model = Qwen3ASRForConditionalGeneration(config)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"tokenizer {len(tok)} tokens, vocab rows {config.text_config.vocab_size}, params {n_params}")

    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    pad_id = tok.pad_token_id
    examples = []  # (input_ids list, labels list, weights list, features [128, T], mask [T])
    for name, wav, text in data:
        for forced in (False, True):
            enc = proc.apply_transcription_request(audio=wav, language="English" if forced else None)
            prompt = enc["input_ids"][0].tolist()
            target_text = text if forced else f"language English<asr_text>{text}"
            tgt = tok(target_text, add_special_tokens=False)["input_ids"] + [im_end]
            # weight the first transcript tokens: they can only be predicted from the audio
            head = 0 if forced else len(tok("language English<asr_text>", add_special_tokens=False)["input_ids"])
            w = [1.0] * len(tgt)
            for k in range(head, min(head + 4, len(tgt))):
                w[k] = 4.0
            reps = 3 if name == "jfk.wav" else 1
            for _ in range(reps):
                examples.append(
                    (prompt + tgt, [-100] * len(prompt) + tgt, [0.0] * len(prompt) + w,
                     enc["input_features"][0], enc["input_features_mask"][0])
                )
    print(f"{len(examples)} training examples")

    def collate(batch):
        L = max(len(b[0]) for b in batch)
        T = max(b[3].shape[-1] for b in batch)
        ids = torch.full((len(batch), L), pad_id, dtype=torch.long)
        lab = torch.full((len(batch), L), -100, dtype=torch.long)
        wt = torch.zeros((len(batch), L))
        att = torch.zeros((len(batch), L), dtype=torch.long)
        feats = torch.zeros((len(batch), 128, T))
        fmask = torch.zeros((len(batch), T), dtype=torch.long)
        for i, (x, y, w, f, m) in enumerate(batch):
            ids[i, : len(x)] = torch.tensor(x)
            lab[i, : len(y)] = torch.tensor(y)
            wt[i, : len(w)] = torch.tensor(w)
            att[i, : len(x)] = 1
            feats[i, :, : f.shape[-1]] = f
            fmask[i, : m.shape[-1]] = m
        return ids, lab, wt, att, feats, fmask

    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01, betas=(0.9, 0.98))
    warm = 50
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(s, args.steps) / args.steps)))
    )
    model.train()
    log = []
    t0 = time.time()
    order = []
    step = 0
    for step in range(args.steps):
        if len(order) < args.batch:
            order += random.sample(range(len(examples)), len(examples))
        idx, order = order[: args.batch], order[args.batch :]
        ids, lab, wt, att, feats, fmask = collate([examples[i] for i in idx])
        out = model(input_ids=ids, attention_mask=att, input_features=feats, input_features_mask=fmask)
        logits = out.logits[:, :-1].float()
        tgt = lab[:, 1:]
        w = wt[:, 1:]
        nll = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1).clamp(min=0), reduction="none")
        nll = nll.view_as(w)
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
    model.generation_config = GenerationConfig(eos_token_id=list(config.eos_token_id), pad_token_id=config.pad_token_id,
                                               do_sample=False)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    proc.save_pretrained(out_dir)
    (out_dir / "train_log.json").write_text(json.dumps({
        "tool": "tools/qwen3_asr_tiny.py",
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "args": vars(args) | {"out": "tests/models/qwen3_asr/tiny"},
        "steps_done": step + 1,
        "examples": len(examples),
        "params": n_params,
        "log": log,
    }, indent=1) + "\n")

    # greedy check
    for name, wav, text in data[:3]:
        for lang in (None, "English"):
            enc = proc.apply_transcription_request(audio=wav, language=lang)
            with torch.no_grad():
                g = model.generate(**enc, max_new_tokens=80)
            new = g[0, enc["input_ids"].shape[1]:]
            print(name, lang, "|", proc.decode(new, skip_special_tokens=False))
            print("   ref:", text)


if __name__ == "__main__":
    main()
