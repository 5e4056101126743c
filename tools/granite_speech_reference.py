"""transformers' outputs on the tiny Granite Speech models -> tests/references/granite_speech/.

Run from the repository root with the transformers venv (peft needed for g33):

    .venv-nemo/bin/python tools/granite_speech_reference.py              # g33 g40 g41 plus
    .venv-nemo/bin/python tools/granite_speech_reference.py g40

Writes, per variant <v> (models from tools/granite_speech_tiny.py):
    tests/references/granite_speech/<v>.json             prompts, input ids, greedy / beam / batch
                                                          ids + text, stage statistics, generation
                                                          settings
    tests/references/granite_speech/<v>.safetensors      jfk stage tensors (float32):
        encoder_out   [1, 550, E]   GraniteSpeechCTCEncoder last_hidden_state (plus: the concat)
        projector_out [1, 111, 64]  projector output (audio embeddings in LM space)
        first_logits  [V]           logits of the first generated position (greedy prompt)
        greedy_logprobs [N]         teacher-forced log-softmax of each greedy token
    tests/references/granite_speech/features_jfk.safetensors
        input_features [1, 550, 160] processor output for jfk (same for every variant)

The feature extractor needs torchaudio, which cannot be installed next to this torch build; its
MelSpectrogram is replaced by a pure-torch equivalent (tools/granite_speech_common.py), checked
against transformers.audio_utils (numpy) and recorded in the json.  Everything runs in float32
on CPU with 1 thread.
"""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import granite_speech_common as C  # noqa: E402

MAX_NEW = 60


def versions():
    import peft
    import tokenizers
    import torch
    import transformers
    return {"transformers": transformers.__version__, "torch": torch.__version__,
            "tokenizers": tokenizers.__version__, "peft": peft.__version__,
            "python": platform.python_version()}


def stats(t):
    t = t.detach().float()
    return {"shape": list(t.shape), "sum": float(t.sum()), "abs_sum": float(t.abs().sum()),
            "mean": float(t.mean()), "std": float(t.std()), "min": float(t.min()),
            "max": float(t.max())}


def resolved(model, **kw):
    """The GenerationConfig generate() works with (model's config, then global defaults, then the
    call's kwargs), restricted to the decoding-relevant fields."""
    gc, _ = model._prepare_generation_config(None, **kw)
    keep = ["max_length", "max_new_tokens", "min_length", "min_new_tokens", "do_sample",
            "num_beams", "num_return_sequences", "early_stopping", "length_penalty",
            "repetition_penalty", "no_repeat_ngram_size", "temperature", "top_k", "top_p",
            "bos_token_id", "eos_token_id", "pad_token_id", "use_cache", "suppress_tokens",
            "begin_suppress_tokens", "forced_bos_token_id", "forced_eos_token_id"]
    return {k: getattr(gc, k, None) for k in keep}


def run(variant: str, mel_check: dict):
    import torch
    from safetensors.torch import save_file
    from transformers import GenerationMixin
    d = C.MODELS / variant
    proc = C.load_processor(d)
    model = C.model_class(variant).from_pretrained(str(d), dtype=torch.float32).eval()
    tok = proc.tokenizer
    v = C.VARIANTS[variant]
    audios = C.ref_audios()
    prompt = tok.apply_chat_template(C.chat(variant), tokenize=False, add_generation_prompt=True)
    out = {
        "made_by": {"tool": "tools/granite_speech_reference.py", "versions": versions(),
                    "model_dir": f"tests/models/granite_speech/{variant}",
                    "model_class": type(model).__name__, "dtype": "float32", "device": "cpu",
                    "torchaudio": "not installed: MelSpectrogram replaced by the pure-torch "
                                  "stand-in in tools/granite_speech_common.py",
                    "mel_standin_check": mel_check},
        "published_prototype": v["published"],
        "chat_messages": C.chat(variant),
        "prompt_text": prompt,
        "special_tokens": {t: tok.convert_tokens_to_ids(t) for t in
                           ["<|end_of_text|>", "<|start_of_role|>", "<|end_of_role|>",
                            "<|audio|>", "<|pad|>", "<|tool_call|>"] if t in tok.get_vocab()},
        "tokenizer": {"vocab_size": len(tok), "padding_side": tok.padding_side,
                      "pad_token_id": tok.pad_token_id, "eos_token_id": tok.eos_token_id,
                      "bos_token_id": tok.bos_token_id},
        "has_lora_adapter": bool(model.config.has_lora_adapter),
        "peft_adapter_loaded": bool(getattr(model, "_hf_peft_config_loaded", False)),
        "generation_config": {k: x for k, x in model.generation_config.to_dict().items()
                              if x is not None},
        "generation_config_resolved_greedy": resolved(model, max_new_tokens=MAX_NEW,
                                                      do_sample=False, num_beams=1),
        "generation_config_resolved_beam": resolved(model, max_new_tokens=MAX_NEW,
                                                    do_sample=False, num_beams=4,
                                                    num_return_sequences=4),
        "greedy_call": {"max_new_tokens": MAX_NEW, "do_sample": False, "num_beams": 1},
        "audios": {},
    }
    inputs = {}
    for name, wav in audios:
        inp = proc(text=prompt, audio=[torch.from_numpy(wav)], return_tensors="pt")
        inputs[name] = inp
        n_audio = int((inp["input_ids"] == model.config.audio_token_index).sum())
        with torch.no_grad():
            g = model.generate(**inp, max_new_tokens=MAX_NEW, do_sample=False, num_beams=1)
        new = g[0, inp["input_ids"].shape[1]:].tolist()
        out["audios"][name] = {
            "num_samples": int(len(wav)),
            "input_ids": inp["input_ids"][0].tolist(),
            "attention_mask_sum": int(inp["attention_mask"].sum()),
            "num_audio_tokens": n_audio,
            "audio_embed_sizes": [int(x) for x in inp["audio_embed_sizes"]]
            if "audio_embed_sizes" in inp else None,
            "input_features_shape": list(inp["input_features"].shape),
            "input_features_mask_shape": list(inp["input_features_mask"].shape),
            "greedy_ids": new,
            "greedy_text": tok.decode(new, skip_special_tokens=True),
            "greedy_text_with_special": tok.decode(new, skip_special_tokens=False),
        }
        print(f"[{variant}] {name}: {n_audio} audio tokens, greedy {out['audios'][name]['greedy_text']!r}",
              flush=True)

    # beam search with the model's default length_penalty / early_stopping
    gc = model.generation_config
    rb = out["generation_config_resolved_beam"]
    out["beam"] = {"call": {"num_beams": 4, "num_return_sequences": 4, "do_sample": False,
                            "max_new_tokens": MAX_NEW, "output_scores": True,
                            "return_dict_in_generate": True},
                   "length_penalty": rb["length_penalty"], "early_stopping": rb["early_stopping"],
                   "model_generation_config_sets": {"length_penalty": gc.length_penalty,
                                                    "early_stopping": gc.early_stopping},
                   "results": {}}
    for name in ["jfk.wav", C.DEV_REF[0]]:
        inp = inputs[name]
        with torch.no_grad():
            b = model.generate(**inp, max_new_tokens=MAX_NEW, do_sample=False, num_beams=4,
                               num_return_sequences=4, output_scores=True,
                               return_dict_in_generate=True)
        L = inp["input_ids"].shape[1]
        seqs = [s[L:].tolist() for s in b.sequences]
        out["beam"]["results"][name] = {
            "sequences": seqs,
            "texts": [tok.decode(s, skip_special_tokens=True) for s in seqs],
            "sequences_scores": [float(x) for x in b.sequences_scores],
            "note": "sequences are padded with pad_token_id after eos to the longest",
        }

    # the three audios as one batch
    names = [n for n, _ in audios]
    binp = proc(text=[prompt] * len(audios), audio=[torch.from_numpy(w) for _, w in audios],
                return_tensors="pt")
    with torch.no_grad():
        bg = model.generate(**binp, max_new_tokens=MAX_NEW, do_sample=False, num_beams=1)
    L = binp["input_ids"].shape[1]
    out["batch"] = {
        "audios": names,
        "text_padding_side": tok.padding_side,
        "audio_padding": "zero-padded at the end to the longest waveform before the mel "
                         "(torch.nn.utils.rnn.pad_sequence); no audio attention mask",
        "input_ids": binp["input_ids"].tolist(),
        "attention_mask": binp["attention_mask"].tolist(),
        "input_features_shape": list(binp["input_features"].shape),
        "input_features_mask_sum": binp["input_features_mask"].sum(-1).tolist(),
        "greedy_ids": [s[L:].tolist() for s in bg],
        "greedy_texts": [tok.decode(s[L:], skip_special_tokens=True) for s in bg],
    }
    out["batch"]["same_as_single"] = [
        tok.decode(s[L:], skip_special_tokens=True) == out["audios"][n]["greedy_text"]
        for s, n in zip(bg, names)]

    # stage tensors for jfk
    inp = inputs["jfk.wav"]
    feats = inp["input_features"]
    tensors = {}
    with torch.no_grad():
        enc = model.model.encoder(feats).last_hidden_state
        proj = model.model.projector(enc)
        logits = model(**inp).logits[0, -1]
        greedy = torch.tensor([out["audios"]["jfk.wav"]["greedy_ids"]])
        full = torch.cat([inp["input_ids"], greedy], 1)
        tf = model(input_ids=full, input_features=feats,
                   input_features_mask=inp["input_features_mask"],
                   attention_mask=torch.ones_like(full)).logits[0]
        lp = torch.log_softmax(tf[inp["input_ids"].shape[1] - 1:-1], -1)
        greedy_lp = lp.gather(1, greedy[0][:, None])[:, 0]
    top = torch.topk(logits, 5)
    out["stages_jfk"] = {
        "input_features": {**stats(feats), "slice_[0,:4,:8]": feats[0, :4, :8].tolist(),
                           "slice_[0,-2:,-4:]": feats[0, -2:, -4:].tolist()},
        "encoder_out": {**stats(enc), "first_4x4": enc[0, :4, :4].tolist()},
        "projector_out": {**stats(proj), "first_4x4": proj[0, :4, :4].tolist()},
        "first_step_logits_top5": {"ids": top.indices.tolist(), "values": top.values.tolist()},
        "greedy_teacher_forced_logprobs": greedy_lp.tolist(),
        "greedy_teacher_forced_logprob_sum": float(greedy_lp.sum()),
    }
    tensors = {"encoder_out": enc.contiguous(), "projector_out": proj.contiguous(),
               "first_logits": logits.contiguous(), "greedy_logprobs": greedy_lp.contiguous()}

    if variant == "g33":
        # generate() switches the adapter on when input_features is given and off otherwise, so
        # the no-adapter run calls GenerationMixin.generate directly with the adapter disabled.
        na = {}
        model.disable_adapters()
        for name, _ in audios:
            i2 = inputs[name]
            with torch.no_grad():
                g = GenerationMixin.generate(model, **i2, max_new_tokens=MAX_NEW, do_sample=False,
                                             num_beams=1)
            new = g[0, i2["input_ids"].shape[1]:].tolist()
            na[name] = {"greedy_ids": new, "greedy_text": tok.decode(new, skip_special_tokens=True),
                        "differs_from_adapter_run": new != out["audios"][name]["greedy_ids"]}
        with torch.no_grad():
            logits_na = model(**inputs["jfk.wav"]).logits[0, -1]
        model.enable_adapters()
        out["no_adapter"] = {"how": "model.disable_adapters(); GenerationMixin.generate(model, ...)",
                             "results": na,
                             "first_step_logits_top5": {
                                 "ids": torch.topk(logits_na, 5).indices.tolist(),
                                 "values": torch.topk(logits_na, 5).values.tolist()}}
        tensors["first_logits_no_adapter"] = logits_na.contiguous()
        tp = tok.apply_chat_template(C.chat(variant, C.TRANSLATE_33), tokenize=False,
                                     add_generation_prompt=True)
        ti = proc(text=tp, audio=[torch.from_numpy(audios[0][1])], return_tensors="pt")
        with torch.no_grad():
            g = model.generate(**ti, max_new_tokens=MAX_NEW, do_sample=False, num_beams=1)
        new = g[0, ti["input_ids"].shape[1]:].tolist()
        out["translate_jfk"] = {"instruction": C.TRANSLATE_33, "prompt_text": tp,
                                "input_ids": ti["input_ids"][0].tolist(), "greedy_ids": new,
                                "greedy_text": tok.decode(new, skip_special_tokens=True)}
        # text-only turn (no audio): generate() disables the adapter
        tt = tok.apply_chat_template(C.chat(variant, "what is your name?"), tokenize=False,
                                     add_generation_prompt=True)
        ti = proc(text=tt, return_tensors="pt")
        with torch.no_grad():
            g = model.generate(**ti, max_new_tokens=20, do_sample=False, num_beams=1)
        new = g[0, ti["input_ids"].shape[1]:].tolist()
        out["text_only"] = {"prompt_text": tt, "input_ids": ti["input_ids"][0].tolist(),
                            "greedy_ids": new, "adapter": "disabled by generate()"}

    C.REFS.mkdir(parents=True, exist_ok=True)
    (C.REFS / f"{variant}.json").write_text(json.dumps(out, indent=1) + "\n")
    save_file(tensors, str(C.REFS / f"{variant}.safetensors"), metadata={"format": "pt"})
    save_file({"input_features": feats.contiguous()}, str(C.REFS / "features_jfk.safetensors"),
              metadata={"format": "pt"})
    return out


def main():
    C.set_threads()
    C.patch_torchaudio()
    C.patch_peft_version()
    variants = sys.argv[1:] or list(C.VARIANTS)
    mel_check = C.check_mel_against_transformers_numpy()
    for v in variants:
        run(v, mel_check)


if __name__ == "__main__":
    main()
