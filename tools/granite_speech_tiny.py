"""Build and briefly train the tiny IBM Granite Speech models under tests/models/granite_speech/.

Run from the repository root with the transformers venv (needs peft for g33, see
tools/setup_nemo_venv.sh):

    .venv-nemo/bin/python tools/granite_speech_tiny.py                # all four variants
    .venv-nemo/bin/python tools/granite_speech_tiny.py g40 plus       # some of them
    .venv-nemo/bin/python tools/granite_speech_tiny.py --steps 300 g33

Variants (each scaled down from a published checkpoint, keeping its structural switches):
    g33   ibm-granite/granite-speech-3.3-2b      Granite 3.x LM, tied embeddings, PEFT LoRA adapter
                                                 (q_proj, v_proj) saved next to the base, applied only
                                                 with audio; role-marker chat template with system turn
    g40   ibm-granite/granite-4.0-1b-speech      untied lm_head, no LoRA, "USER: ...\\n ASSISTANT:" prompt
    g41   ibm-granite/granite-speech-4.1-2b      as g40, 4.1 instruction ("transcribe the speech with
                                                 proper punctuation and capitalization.")
    plus  ibm-granite/granite-speech-4.1-2b-plus granite_speech_plus: cat_hidden_layers=[1], projector
                                                 encoder_hidden_size = 2 * hidden_dim, tied, role prompt

Each directory gets: config.json, model.safetensors (float32, published key names: encoder.*,
projector.*, language_model.model.*, language_model.lm_head.weight when untied), tokenizer.json,
tokenizer_config.json, chat_template.jinja (4.x) or the template inside tokenizer_config.json (3.3),
preprocessor_config.json + processor_config.json (plus: processor_config.json only, nested, as
transformers 5 writes it), generation_config.json (plus only), adapter_config.json +
adapter_model.safetensors (g33 only).  Training: teacher-forced cross entropy on the assistant
turn (transcript + <|end_of_text|>) over jfk + the 16 kHz dev utterances, AdamW, 1 thread.
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
import granite_speech_common as C  # noqa: E402

VOCAB_BPE = 560  # byte alphabet + merges, before the added special tokens


def build_tokenizer(variant: str, texts: list[str]):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast
    v = C.VARIANTS[variant]
    if v["family"] == "g3":
        # Granite 3.x: <|end_of_text|> is id 0 (bos = eos = pad = unk), the FIM/code tokens follow,
        # role markers and <|tool_call|> were appended after the BPE vocabulary, <|audio|> last.
        head = ["<|end_of_text|>", "<fim_prefix>", "<fim_middle>", "<fim_suffix>", "<fim_pad>"]
        tail = ["<|start_of_role|>", "<|end_of_role|>", "<|tool_call|>", "<|audio|>"]
    else:
        # Granite 4.x: specials after the BPE vocabulary; <|pad|> then <|end_of_text|>
        # (bos = eos = <|end_of_text|>, pad = <|pad|>), role markers, <|audio|> last.
        head = []
        tail = ["<|pad|>", "<|end_of_text|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
                "<|fim_pad|>", "<|start_of_role|>", "<|end_of_role|>", "<|tool_call|>", "<|audio|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_BPE + len(head), special_tokens=head,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer)
    tok.add_special_tokens(tail)
    eot = "<|end_of_text|>"
    pad = eot if v["family"] == "g3" else "<|pad|>"
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=eot, eos_token=eot,
                                   unk_token=eot, pad_token=pad, padding_side="left",
                                   model_max_length=4096, add_prefix_space=False,
                                   clean_up_tokenization_spaces=True)
    fast.chat_template = v["template"]
    return fast


def build_config(variant: str, tok):
    from transformers import GraniteSpeechConfig, GraniteSpeechPlusConfig
    v = C.VARIANTS[variant]
    vocab = len(tok)
    audio_id = tok.convert_tokens_to_ids("<|audio|>")
    assert audio_id == vocab - 1
    hidden, heads = 48, 4
    cat = v["cat_hidden_layers"]
    enc = dict(input_dim=160, num_layers=4, hidden_dim=hidden, feedforward_mult=4, num_heads=heads,
               dim_head=hidden // heads, output_dim=v["enc_output_dim"], context_size=40,
               max_pos_emb=64, dropout=0.1, conv_kernel_size=15, conv_expansion_factor=2)
    if variant == "plus":
        enc["model_type"] = "granite_speech_plus_encoder"
        enc["cat_hidden_layers"] = cat
    else:
        enc["model_type"] = "granite_speech_encoder"
    proj = dict(model_type="blip_2_qformer", hidden_size=32, num_hidden_layers=2,
                num_attention_heads=4, intermediate_size=64, hidden_act="gelu",
                hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                max_position_embeddings=512, layer_norm_eps=1e-12, cross_attention_frequency=1,
                encoder_hidden_size=hidden * ((len(cat) + 1) if cat else 1),
                position_embedding_type="absolute", use_qformer_text_input=False,
                vocab_size=30522, pad_token_id=0, initializer_range=0.02)
    eot = tok.convert_tokens_to_ids("<|end_of_text|>")
    pad = tok.pad_token_id
    head_dim = 16
    text = dict(model_type="granite", vocab_size=vocab, hidden_size=64, intermediate_size=128,
                num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                hidden_act="silu", max_position_embeddings=4096, rms_norm_eps=1e-5,
                rope_parameters={"rope_type": "default", "rope_theta": v["rope_theta"]},
                attention_bias=False, mlp_bias=False, attention_dropout=0.0,
                embedding_multiplier=12.0, logits_scaling=8.0, residual_multiplier=0.22,
                attention_multiplier=1.0 / head_dim, tie_word_embeddings=v["tied"],
                bos_token_id=eot, eos_token_id=eot, pad_token_id=pad, initializer_range=0.02)
    cls = GraniteSpeechPlusConfig if variant == "plus" else GraniteSpeechConfig
    cfg = cls(encoder_config=enc, projector_config=proj, text_config=text,
              audio_token_index=audio_id, has_lora_adapter=v["lora"], downsample_rate=5,
              window_size=15, tie_word_embeddings=v["tied"], initializer_range=0.02)
    return cfg


def prompt_text(proc, variant, instruction=None):
    return proc.tokenizer.apply_chat_template(C.chat(variant, instruction), tokenize=False,
                                              add_generation_prompt=True)


def batch_inputs(proc, variant, items, with_targets=True):
    """Processor inputs for a list of (name, audio, text); labels mask everything but targets."""
    import torch
    v = C.VARIANTS[variant]
    prompt = prompt_text(proc, variant)
    eot = "<|end_of_text|>"
    texts, n_tgt = [], []
    for _, _, t in items:
        tgt = v["target_prefix"] + t + eot if with_targets else ""
        texts.append(prompt + tgt)
        n_tgt.append(len(proc.tokenizer(tgt, add_special_tokens=False)["input_ids"]) if tgt else 0)
    audios = [torch.from_numpy(a) for _, a, _ in items]
    inp = proc(text=texts, audio=audios, return_tensors="pt")
    if with_targets:
        labels = torch.full_like(inp["input_ids"], -100)
        L = labels.shape[1]
        for i, n in enumerate(n_tgt):
            labels[i, L - n:] = inp["input_ids"][i, L - n:]
        inp["labels"] = labels
    return inp


def greedy(model, proc, variant, items, max_new_tokens=60):
    import torch
    outs = []
    for it in items:
        inp = batch_inputs(proc, variant, [it], with_targets=False)
        with torch.no_grad():
            seq = model.generate(**inp, max_new_tokens=max_new_tokens, do_sample=False, num_beams=1)
        outs.append(proc.tokenizer.decode(seq[0, inp["input_ids"].shape[1]:],
                                          skip_special_tokens=True))
    return outs


def wer(ref, hyp):
    r, h = ref.split(), hyp.split()
    d = list(range(len(h) + 1))
    for i in range(1, len(r) + 1):
        prev, d[0] = d[0], i
        for j in range(1, len(h) + 1):
            cur = min(d[j] + 1, d[j - 1] + 1, prev + (r[i - 1] != h[j - 1]))
            prev, d[j] = d[j], cur
    return d[len(h)] / max(1, len(r))


def write_processor_files(out: Path, variant: str, proc):
    fe = proc.audio_processor
    fe_cfg = {"feature_extractor_type": "GraniteSpeechFeatureExtractor",
              "feature_size": fe.feature_size, "sampling_rate": fe.sampling_rate,
              "padding_value": fe.padding_value, "padding_side": fe.padding_side,
              "return_attention_mask": fe.return_attention_mask,
              "melspec_kwargs": fe.melspec_kwargs,
              "projector_window_size": fe.projector_window_size,
              "projector_downsample_rate": fe.projector_downsample_rate,
              "processor_class": "GraniteSpeechProcessor"}
    if variant == "plus":
        # The published -plus repo ships no preprocessor_config.json; transformers 5 keeps the
        # feature extractor inside processor_config.json.
        cfg = {"audio_processor": fe_cfg, "audio_token": "<|audio|>",
               "processor_class": "GraniteSpeechProcessor"}
        (out / "processor_config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    else:
        (out / "preprocessor_config.json").write_text(json.dumps(fe_cfg, indent=2) + "\n")
        (out / "processor_config.json").write_text(json.dumps(
            {"audio_token": "<|audio|>", "processor_class": "GraniteSpeechProcessor"}, indent=2) + "\n")


def published_state_dict(model):
    """transformers 5 names -> the published (transformers 4.x) names of the hub checkpoints."""
    sd = {}
    for k, t in model.state_dict().items():
        if "lora_" in k:
            continue
        k = k.replace(".base_layer.", ".")
        if k == "lm_head.weight":
            if model.config.text_config.tie_word_embeddings:
                continue
            k = "language_model.lm_head.weight"
        elif k.startswith("model.language_model."):
            k = "language_model.model." + k[len("model.language_model."):]
        elif k.startswith("model."):
            k = k[len("model."):]
        sd[k] = t.detach().contiguous().clone()
    return sd


def finalize(variant: str):
    """Published-style metadata in the written json files (also: --finalize-only)."""
    out = C.MODELS / variant
    cfg = json.loads((out / "config.json").read_text())
    cfg["architectures"] = [C.model_class(variant).__name__]
    cfg["dtype"] = "float32"
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    tc = json.loads((out / "tokenizer_config.json").read_text())
    tc["tokenizer_class"] = "GPT2Tokenizer"  # as published; loads tokenizer.json unchanged (checked)
    tc.pop("backend", None)
    (out / "tokenizer_config.json").write_text(json.dumps(tc, indent=2) + "\n")


def make(variant: str, steps: int, lr: float):
    import torch
    from safetensors.torch import save_file
    C.set_threads()
    C.patch_torchaudio()
    C.patch_peft_version()
    from transformers import GraniteSpeechProcessor
    from transformers.models.granite_speech.feature_extraction_granite_speech import (
        GraniteSpeechFeatureExtractor)
    v = C.VARIANTS[variant]
    random.seed(v["seed"])
    torch.manual_seed(v["seed"])
    items = C.corpus()
    texts = [t for _, _, t in items] + [v["instruction"].replace("<|audio|>", ""),
                                        C.SYSTEM_33, C.TRANSLATE_33.replace("<|audio|>", ""),
                                        "USER: ASSISTANT: system user assistant"] * 3
    tok = build_tokenizer(variant, texts)
    fe = GraniteSpeechFeatureExtractor()
    proc = GraniteSpeechProcessor(fe, tok)
    cfg = build_config(variant, tok)
    model = C.model_class(variant)(cfg)
    if v["lora"]:
        from peft import LoraConfig
        # r / alpha / targets scaled from the published 3.3 adapter (q_proj, v_proj only).
        model.add_adapter(LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0,
                                     target_modules=["q_proj", "v_proj"], bias="none",
                                     init_lora_weights=True))
        model.enable_adapters()
        for p in model.parameters():  # add_adapter froze the base; train everything here
            p.requires_grad_(True)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"[{variant}] vocab {len(tok)} params {n_params}", flush=True)
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr,
                            weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.1)
    jfk = items[0]
    t0 = time.time()
    for step in range(steps):
        batch = random.sample(items[1:], 5) + [jfk]
        inp = batch_inputs(proc, variant, batch)
        loss = model(**inp).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 25 == 0 or step == steps - 1:
            print(f"[{variant}] step {step} loss {loss.item():.3f} {time.time() - t0:.0f}s",
                  flush=True)
    model.eval()
    refs = [items[0]] + [it for it in items if it[0] in C.DEV_REF]
    hyps = greedy(model, proc, variant, refs)
    summary = []
    for it, h in zip(refs, hyps):
        summary.append({"audio": it[0], "reference": it[2], "greedy": h, "wer": wer(it[2], h)})
        print(f"[{variant}] {it[0]} WER {wer(it[2], h):.2f}: {h!r}", flush=True)

    out = C.MODELS / variant
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    cfg_d = model.config.to_dict()
    (out / "config.json").write_text(json.dumps(cfg_d, indent=2, sort_keys=True) + "\n")
    save_file(published_state_dict(model), str(out / "model.safetensors"), metadata={"format": "pt"})
    if v["lora"]:
        from peft import get_peft_model_state_dict
        lsd = get_peft_model_state_dict(model)
        tmp = out / "_adapter"
        model.save_pretrained(str(tmp))  # transformers' own adapter writer (names, config)
        for name in ("adapter_config.json", "adapter_model.safetensors"):
            shutil.move(str(tmp / name), str(out / name))
        shutil.rmtree(tmp)
        # transformers 5 writes base_model.model.model.language_model.*; the published adapter was
        # written against the 4.x module tree (base_model.model.language_model.model.*), which
        # transformers 5 still loads (checked).  Store the 4.x names.
        from safetensors.torch import load_file
        asd = load_file(str(out / "adapter_model.safetensors"))
        asd = {k.replace("base_model.model.model.language_model.",
                         "base_model.model.language_model.model."): t for k, t in asd.items()}
        save_file(asd, str(out / "adapter_model.safetensors"), metadata={"format": "pt"})
        ac = json.loads((out / "adapter_config.json").read_text())
        ac["base_model_name_or_path"] = v["published"]
        (out / "adapter_config.json").write_text(json.dumps(ac, indent=2, sort_keys=True) + "\n")
        print(f"[{variant}] adapter tensors: {sorted(lsd)[:2]} ...", flush=True)
    tok.save_pretrained(str(out))
    if variant == "g33":
        # transformers 5 writes the template to chat_template.jinja; the published 3.3 repo
        # (transformers 4.x era) carries it inside tokenizer_config.json.
        tc = json.loads((out / "tokenizer_config.json").read_text())
        tc["chat_template"] = (out / "chat_template.jinja").read_text()
        (out / "tokenizer_config.json").write_text(json.dumps(tc, indent=2) + "\n")
        (out / "chat_template.jinja").unlink()
    write_processor_files(out, variant, proc)
    if variant == "plus":
        eot = tok.convert_tokens_to_ids("<|end_of_text|>")
        (out / "generation_config.json").write_text(json.dumps(
            {"bos_token_id": eot, "eos_token_id": eot, "pad_token_id": tok.pad_token_id,
             "_from_model_config": True}, indent=2) + "\n")
    finalize(variant)
    (out / "TRAINING.json").write_text(json.dumps(
        {"tool": "tools/granite_speech_tiny.py", "steps": steps, "lr": lr, "batch": 6,
         "train_items": [n for n, _, _ in items], "params": n_params,
         "greedy_after_training": summary}, indent=2) + "\n")
    return summary


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("variants", nargs="*", default=list(C.VARIANTS))
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--finalize-only", action="store_true",
                    help="only rewrite the metadata of already written model directories")
    a = ap.parse_args()
    for v in a.variants:
        if a.finalize_only:
            finalize(v)
        else:
            make(v, a.steps, a.lr)


if __name__ == "__main__":
    main()
