"""Make a tiny Canary-Qwen (NeMo speechlm2 SALM) in the layout of `nvidia/canary-qwen-2.5b`.

Run from the repository root with the NeMo venv (NeMo 3.0.0, transformers 5.25, peft):

    OMP_NUM_THREADS=1 .venv-nemo/bin/python tools/canary_qwen_tiny.py --steps 900 --max-seconds 420

(any interpreter with nemo_toolkit >= 2.5 [speechlm2], transformers, peft, tokenizers and soundfile works). Audio
comes from <repo>/../shared/audio (jfk.wav and dev/manifest.jsonl).

Everything is built offline: NeMo's `SALM(cfg)` reads its LLM's config and tokenizer from `cfg["pretrained_llm"]`
and builds the perception module from `cfg["perception"]`; with `pretrained_weights: false` it downloads nothing.
So step 1 writes a tiny Qwen3 LM config and a tiny Qwen-style tokenizer into a scratch folder and points
`pretrained_llm` at it (the published config names `Qwen/Qwen3-1.7B` and `nvidia/canary-1b-flash` there).

Steps:
 1. a Qwen2-style byte-level BPE (`tokenizers`: the Qwen2 pre-tokenizer regex + ByteLevel, NFC) trained on the dev
    transcripts + the JFK transcript + the prompt's words, then Qwen3's first special tokens in Qwen3's order
    (<|endoftext|>, <|im_start|>, <|im_end|> special; <think>, </think> added, not special): as in
    Qwen/Qwen3-1.7B, the tokenizer has no <|audioplaceholder|>: SALM adds it (the next id) when it loads;
 2. the SALM config scaled down from the published one (every structural switch kept: README.md there);
 3. `SALM(cfg)` (PEFT LoRA installed on q_proj/v_proj), a short teacher-forced run on the 37 dev clips + jfk.wav
    through SALM's own `prepare_inputs` (the prompt "Transcribe the following: <|audioplaceholder|>" in the `qwen`
    prompt format, the answer, <|im_end|>), every parameter trained (LoRA A/B too, so the adapters are not zero);
 4. `model.to(bfloat16)` and `save_pretrained` (config.json + model.safetensors, as published: bfloat16), the
    config's `pretrained_llm` / `pretrained_asr` set back to the published names, NeMo's added `model_type` /
    `architectures` removed (the published config has neither); the LM's files beside it as NeMo's
    `from_pretrained` finds them (`tokenizer.json` + `tokenizer_config.json` at the root, `llm_backbone/config.json`);
 5. `SALM.from_pretrained(out)` and a greedy check printed at the end.
"""
from __future__ import annotations

import argparse
import json
import sys
import math
import os
import random
import shutil
import tempfile
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

TAG = "<|audioplaceholder|>"
PROMPT = f"Transcribe the following: {TAG}"
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ADDED_NOT_SPECIAL = ["<think>", "</think>"]




def build_tokenizer(texts, vocab_size):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import Qwen2Tokenizer
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    state = json.loads(tok.to_str())["model"]
    vocab = dict(state["vocab"])
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in state["merges"]]
    n = len(vocab)
    for i, t in enumerate(SPECIAL + ADDED_NOT_SPECIAL):
        vocab[t] = n + i
    qtok = Qwen2Tokenizer(vocab=vocab, merges=merges, unk_token=None, bos_token=None, eos_token="<|im_end|>",
                          pad_token="<|endoftext|>", model_max_length=131072, clean_up_tokenization_spaces=False)
    qtok.add_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL], special_tokens=True)
    qtok.add_tokens([AddedToken(t, special=False, normalized=False) for t in ADDED_NOT_SPECIAL])
    for i, t in enumerate(SPECIAL + ADDED_NOT_SPECIAL):
        assert qtok.convert_tokens_to_ids(t) == n + i, (t, qtok.convert_tokens_to_ids(t), n + i)
    return qtok


def lm_config(tok):
    from transformers import Qwen3Config

    n_tok = len(tok) + 1  # + the placeholder SALM adds
    vocab_size = 64 * math.ceil((n_tok + 1) / 64)  # rows above the tokenizer, as published (151936 > 151670)
    return Qwen3Config(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=192, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, hidden_act="silu", max_position_embeddings=40960,
        initializer_range=0.02, rms_norm_eps=1e-6, use_cache=True, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, attention_bias=False,
        attention_dropout=0.0, use_sliding_window=False, sliding_window=None, max_window_layers=2,
        bos_token_id=tok.convert_tokens_to_ids("<|endoftext|>"), eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
    )


def salm_config(llm_dir: str) -> dict:
    """The published config.json's sections (NeMo's examples/speechlm2/conf/salm.yaml as trained for
    canary-qwen-2.5b), every size scaled down and every switch kept."""
    d_model = 64
    return {
        "pretrained_llm": llm_dir,
        "pretrained_asr": "nvidia/canary-1b-flash",
        "pretrained_weights": False,
        "audio_locator_tag": TAG,
        "prompt_format": "qwen",
        "freeze_params": ["^llm\\..+$", "^embed_tokens\\..+$"],
        "prevent_freeze_params": [],
        "lora": {"task_type": "CAUSAL_LM", "r": 8, "lora_alpha": 16, "lora_dropout": 0.01,
                 "target_modules": ["q_proj", "v_proj"]},
        "perception": {
            "target": "nemo.collections.speechlm2.modules.perception.AudioPerceptionModule",
            "output_dim": 64,
            "preprocessor": {
                "_target_": "nemo.collections.asr.modules.AudioToMelSpectrogramPreprocessor",
                "sample_rate": 16000, "normalize": "per_feature", "window_size": 0.025, "window_stride": 0.01,
                "window": "hann", "features": 128, "n_fft": 512, "log": True, "frame_splicing": 1,
                "dither": 1e-05, "pad_to": 0, "pad_value": 0.0,
            },
            "encoder": {
                "_target_": "nemo.collections.asr.modules.ConformerEncoder",
                "feat_in": 128, "feat_out": -1, "n_layers": 2, "d_model": d_model, "subsampling": "dw_striding",
                "subsampling_factor": 8, "subsampling_conv_channels": 32, "causal_downsampling": False,
                "reduction": None, "reduction_position": None, "reduction_factor": 1, "ff_expansion_factor": 4,
                "self_attention_model": "rel_pos", "n_heads": 4, "att_context_size": [-1, -1],
                "xscaling": False, "untie_biases": True, "pos_emb_max_len": 5000, "conv_kernel_size": 9,
                "conv_norm_type": "batch_norm", "conv_context_size": None, "dropout": 0.0, "dropout_pre_encoder": 0.0,
                "dropout_emb": 0.0, "dropout_att": 0.0,
            },
            "modality_adapter": {"_target_": "nemo.collections.speechlm2.modules.perception.IdentityConnector",
                                 "d_model": d_model},
            "spec_augment": None,
        },
        "optimizer": {"_target_": "torch.optim.AdamW", "lr": 5e-4, "betas": [0.9, 0.98], "weight_decay": 1e-3,
                      "foreach": True},
        "lr_scheduler": {"_target_": "nemo.core.optim.lr_scheduler.CosineAnnealing", "warmup_steps": 1000,
                         "min_lr": 1e-6, "max_steps": 100000},
        "torch_dtype": "bfloat16",
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(REPO / "tests" / "models" / "canary_qwen" / "tiny"))
    ap.add_argument("--steps", type=int, default=900)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--batch", type=int, default=6)
    ap.add_argument("--vocab", type=int, default=600)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-seconds", type=float, default=420, help="wall-clock cap on training")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    np.random.seed(args.seed)

    import nemo
    import peft
    import transformers
    from nemo.collections.common.prompts import PromptFormatter
    from nemo.collections.speechlm2.data.salm_dataset import left_collate_vectors
    from nemo.collections.speechlm2.models import SALM

    data = clips()
    texts = [t for _, _, t in data] + ["Transcribe the following: "] * 4 + ["user\nassistant\n"] * 4
    tok = build_tokenizer(texts, args.vocab)
    scratch = Path(tempfile.mkdtemp(prefix="canary-qwen-tiny-"))
    llm_dir = scratch / "llm"
    tok.save_pretrained(llm_dir)
    lm_config(tok).save_pretrained(llm_dir)
    cfg = salm_config(str(llm_dir))
    model = SALM(cfg)
    for p in model.parameters():
        p.requires_grad_(True)  # the base LM too (PEFT froze it): a few minutes must teach everything
    n_params = sum(p.numel() for p in model.parameters())
    print(f"tokenizer {len(model.tokenizer.tokenizer)} tokens (placeholder id {model.audio_locator_tag_id}), "
          f"embedding rows {model.embed_tokens.num_embeddings}, params {n_params}")

    formatter = PromptFormatter.resolve(cfg["prompt_format"])(model.tokenizer)
    examples = []
    for name, wav, text in data:
        enc = formatter.encode_dialog([{"role": "user", "slots": {"message": PROMPT}},
                                       {"role": "assistant", "slots": {"message": text}}])
        reps = 3 if name == "jfk.wav" else 1
        for _ in range(reps):
            examples.append((torch.from_numpy(wav), enc["input_ids"], enc["mask"]))
    print(f"{len(examples)} training examples")

    def collate(batch):
        audios = torch.nn.utils.rnn.pad_sequence([b[0] for b in batch], batch_first=True)
        lens = torch.tensor([len(b[0]) for b in batch])
        ids = left_collate_vectors([b[1] for b in batch], padding_value=model.text_pad_id)
        mask = left_collate_vectors([b[2] for b in batch], padding_value=False)
        return {"audios": audios, "audio_lens": lens, "input_ids": ids, "loss_mask": mask}

    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01, betas=(0.9, 0.98))
    warm = 50
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(s, args.steps) / args.steps))))
    model.train()
    log, order, t0, step = [], [], time.time(), 0
    for step in range(args.steps):
        if len(order) < args.batch:
            order += random.sample(range(len(examples)), len(examples))
        idx, order = order[:args.batch], order[args.batch:]
        inputs = model.prepare_inputs(collate([examples[i] for i in idx]))
        logits = model(inputs["input_embeds"], attention_mask=inputs["attention_mask"])["logits"].float()
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), inputs["target_ids"].flatten(0, 1),
                                                 ignore_index=-100)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 25 == 0 or step == args.steps - 1:
            log.append({"step": step, "loss": round(loss.item(), 4), "seconds": round(time.time() - t0, 1)})
            print(log[-1], flush=True)
        if time.time() - t0 > args.max_seconds:
            print("time cap reached")
            break

    model.eval()
    model.to(torch.bfloat16)
    out = Path(args.out)
    readme = (out / "README.md").read_text() if (out / "README.md").is_file() else None  # the folder's own README
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    model.save_pretrained(out)
    (out / "README.md").unlink(missing_ok=True)  # the hub mixin's model card
    if readme is not None:
        (out / "README.md").write_text(readme)
    saved = json.loads((out / "config.json").read_text())
    saved.pop("model_type", None)
    saved.pop("architectures", None)
    saved["pretrained_llm"] = "Qwen/Qwen3-1.7B"
    saved["pretrained_weights"] = True
    (out / "config.json").write_text(json.dumps(saved, indent=2) + "\n")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(llm_dir / f, out / f)
    (out / "llm_backbone").mkdir()
    shutil.copy(llm_dir / "config.json", out / "llm_backbone" / "config.json")
    (out / "train_log.json").write_text(json.dumps({
        "tool": "tools/canary_qwen_tiny.py", "nemo": nemo.__version__, "transformers": transformers.__version__,
        "peft": peft.__version__, "torch": torch.__version__,
        "args": vars(args) | {"out": "tests/models/canary_qwen/tiny"}, "steps_done": step + 1,
        "examples": len(examples), "params": n_params, "log": log,
    }, indent=1) + "\n")
    shutil.rmtree(scratch)

    # reload as published and check greedy output
    model = SALM.from_pretrained(str(out)).eval()
    for name, wav, text in data[:4]:
        ids = model.generate(prompts=[[{"role": "user", "content": PROMPT}]], audios=torch.from_numpy(wav)[None],
                             audio_lens=torch.tensor([len(wav)]), max_new_tokens=60)
        print(name, "|", model.tokenizer.ids_to_text(ids[0].tolist()))
        print("   ref:", text)


if __name__ == "__main__":
    main()
