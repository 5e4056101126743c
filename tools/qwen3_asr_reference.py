"""transformers' outputs on the tiny Qwen3-ASR model (tests/models/qwen3_asr/tiny), for our re-implementation to match.

Run from the repository root with the NeMo/transformers venv (transformers 5.24.0):

    OMP_NUM_THREADS=1 .venv-nemo/bin/python tools/qwen3_asr_reference.py

Writes tests/references/qwen3_asr/tiny.json and tests/references/qwen3_asr/tiny_stages.safetensors.
Audio: <repo>/../shared/audio/jfk.wav, dev/ls_61-70968-0002.wav, dev/fleurs_en_004.wav.
Everything runs in float32 on CPU with torch threads 1, with transformers' own AutoProcessor (Qwen3ASRProcessor; its
feature extractor is pure torch/numpy, no torchaudio needed) and Qwen3ASRForConditionalGeneration.
"""

import json
import os
import platform
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
import soundfile as sf
import torch

REPO = Path(__file__).resolve().parents[1]
AUDIO = REPO.parent / "shared" / "audio"
MODEL = REPO / "tests" / "models" / "qwen3_asr" / "tiny"
OUT = REPO / "tests" / "references" / "qwen3_asr"
CLIPS = ["jfk.wav", "dev/ls_61-70968-0002.wav", "dev/fleurs_en_004.wav"]
MAX_NEW = 160


def load(name):
    wav, sr = sf.read(AUDIO / name, dtype="float32")
    assert sr == 16000 and wav.ndim == 1
    return wav


def stats(t):
    t = t.detach().double()
    return {"shape": list(t.shape), "sum": t.sum().item(), "abs_sum": t.abs().sum().item(), "mean": t.mean().item(),
            "std": t.std().item() if t.numel() > 1 else 0.0, "min": t.min().item(), "max": t.max().item()}


def corner(t, n=4):
    t = t.detach().float()
    while t.dim() > 2:
        t = t[0]
    return t[:n, :n].tolist()


def main():
    import argparse

    global MODEL, OUT
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(MODEL))
    ap.add_argument("--out", default=str(OUT))
    a = ap.parse_args()
    MODEL, OUT = Path(a.model), Path(a.out)
    torch.set_num_threads(1)
    import transformers
    from transformers import AutoProcessor, Qwen3ASRForConditionalGeneration

    proc = AutoProcessor.from_pretrained(MODEL)
    model = Qwen3ASRForConditionalGeneration.from_pretrained(MODEL, dtype=torch.float32)
    model.eval()
    tok = proc.tokenizer
    cfg = model.config
    ref = {
        "how": {
            "tool": "tools/qwen3_asr_reference.py",
            "model": "tests/models/qwen3_asr/tiny",
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "tokenizers": __import__("tokenizers").__version__,
            "numpy": np.__version__,
            "python": platform.python_version(),
            "dtype": "float32",
            "device": "cpu",
            "torch_threads": torch.get_num_threads(),
            "attn_implementation": {"text": cfg.text_config._attn_implementation,
                                     "audio": cfg.audio_config._attn_implementation},
            "processor_class": type(proc).__name__,
            "feature_extractor_class": type(proc.feature_extractor).__name__,
            "tokenizer_class": type(tok).__name__,
            "max_new_tokens": MAX_NEW,
        },
        "tokens": {t: tok.convert_tokens_to_ids(t) for t in
                   ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|audio_start|>", "<|audio_end|>",
                    "<|audio_pad|>", "<asr_text>", "<timestamp>"]},
        "tokenizer": {"len": len(tok), "vocab_rows": cfg.text_config.vocab_size, "eos_token": tok.eos_token,
                      "pad_token": tok.pad_token, "pad_token_id": tok.pad_token_id, "bos_token": tok.bos_token,
                      "padding_side_default": tok.padding_side,
                      "special_ids": sorted(tok.all_special_ids),
                      "encode_examples": {s: tok(s, add_special_tokens=False)["input_ids"] for s in
                                          ["language English<asr_text>", "language English", "language None<asr_text>",
                                           "\n", "system\n", "And so, my fellow Americans"]}},
        "audio_token_formula": (
            "n_tokens(F) = (F // 100) * 13 + c(c(c(F % 100))) with c(L) = (L - 1) // 2 + 1 (python floor division; "
            "c(c(c(0))) = 0); F = input_features_mask.sum() = valid mel frames (processor._get_audio_token_length, "
            "n_window 50). Equivalently: per 100-frame chunk, three stride-2 k3 p1 convs, summed over chunks."),
        "generation_config_file": model.generation_config.to_diff_dict(),
        "clips": {},
    }

    # the formula at r == 0 (exact multiple of 100 frames): what the processor computes
    ref["audio_token_formula_checks"] = {
        str(f): int(proc._get_audio_token_length(torch.tensor([f]))[0]) for f in [1, 7, 8, 9, 50, 99, 100, 101, 200, 297, 432, 1100]
    }

    gen_kw = dict(max_new_tokens=MAX_NEW, do_sample=False)
    wavs = {c: load(c) for c in CLIPS}
    for name in CLIPS:
        wav = wavs[name]
        entry = {"samples": int(wav.shape[0])}
        for mode, lang in (("auto", None), ("forced_English", "English")):
            text_prompt = proc.apply_transcription_request(audio=wav, language=lang, tokenize=False)
            enc = proc.apply_transcription_request(audio=wav, language=lang)
            ids = enc["input_ids"][0]
            with torch.no_grad():
                g = model.generate(**enc, **gen_kw)
            new = g[0, ids.shape[0]:]
            e = {
                "prompt_text_unexpanded": text_prompt[0] if isinstance(text_prompt, list) else text_prompt,
                "input_ids": ids.tolist(),
                "input_len": int(ids.shape[0]),
                "attention_mask_all_ones": bool(enc["attention_mask"].all()),
                "num_audio_tokens": int((ids == cfg.audio_token_id).sum()),
                "input_features_shape": list(enc["input_features"].shape),
                "valid_mel_frames": int(enc["input_features_mask"].sum()),
                "greedy_ids": new.tolist(),
                "greedy_raw": proc.decode(new, skip_special_tokens=False),
                "greedy_skip_special": proc.decode(new, skip_special_tokens=True),
                "greedy_parsed_new_tokens": proc.decode(new, return_format="parsed"),
                "greedy_transcription_only": proc.decode(new, return_format="transcription_only"),
                "full_sequence_parsed": proc.decode(g[0], return_format="parsed"),
                "stopped_by": ("eos" if new.numel() and int(new[-1]) in cfg.eos_token_id else "max_new_tokens"),
            }
            entry[mode] = e
            print(name, mode, "|", e["greedy_raw"])
        ref["clips"][name] = entry

    # beam search on jfk and one dev clip
    ref["beam"] = {"settings": {"num_beams": 4, "num_return_sequences": 4, "length_penalty": "default (1.0)",
                                "early_stopping": "default (False)", "max_new_tokens": MAX_NEW}}
    for name in CLIPS[:2]:
        for mode, lang in (("auto", None), ("forced_English", "English")):
            enc = proc.apply_transcription_request(audio=wavs[name], language=lang)
            with torch.no_grad():
                g = model.generate(**enc, max_new_tokens=MAX_NEW, num_beams=4, num_return_sequences=4,
                                   return_dict_in_generate=True, output_scores=True, do_sample=False)
            L = enc["input_ids"].shape[1]
            seqs = g.sequences[:, L:]
            ref["beam"][f"{name}|{mode}"] = {
                "sequences": [s.tolist() for s in seqs],
                "sequences_note": "trailing pad_token_id fill after EOS kept as transformers returns it",
                "sequences_scores": g.sequences_scores.tolist(),
                "texts_raw": [proc.decode(s, skip_special_tokens=False) for s in seqs],
                "parsed": [proc.decode(s, return_format="parsed") for s in seqs],
            }
            print("beam", name, mode, g.sequences_scores.tolist())

    # batch of the 3 clips (auto and forced)
    ref["batch"] = {}
    for mode, lang in (("auto", None), ("forced_English", "English")):
        enc = proc.apply_transcription_request(audio=[wavs[c] for c in CLIPS], language=lang)
        with torch.no_grad():
            g = model.generate(**enc, **gen_kw)
        L = enc["input_ids"].shape[1]
        rows = []
        for i, c in enumerate(CLIPS):
            new = g[i, L:]
            single = ref["clips"][c][mode]["greedy_ids"]
            rows.append({
                "clip": c,
                "input_ids": enc["input_ids"][i].tolist(),
                "attention_mask": enc["attention_mask"][i].tolist(),
                "valid_mel_frames": int(enc["input_features_mask"][i].sum()),
                "greedy_ids": new.tolist(),
                "greedy_raw": proc.decode(new, skip_special_tokens=False),
                "same_as_single_after_trimming_pad": new.tolist()[: len(single)] == single,
            })
        # the batched features are not the single-clip features: compare them (and the projector output) per row
        for i, c in enumerate(CLIPS):
            single = proc.apply_transcription_request(audio=wavs[c], language=lang)
            n = int(single["input_features_mask"].sum())
            T = single["input_features"].shape[-1]
            fb, fs = enc["input_features"][i], single["input_features"][0]
            d = (fb[:, :n] - fs[:, :n]).abs().amax(0)
            with torch.no_grad():
                pb = model.model.get_audio_features(enc["input_features"][i:i + 1],
                                                    enc["input_features_mask"][i:i + 1]).pooler_output
                ps = model.model.get_audio_features(single["input_features"], single["input_features_mask"]).pooler_output
            rows[i]["vs_single"] = {
                "valid_frames_max_abs_diff": d.max().item(),
                "valid_frames_that_differ": torch.nonzero(d > 1e-6).flatten().tolist(),
                "single_tail_frames_n_to_T": [n, T],
                "single_tail_max_abs": fs[:, n:T].abs().max().item() if T > n else None,
                "batch_tail_min_max": [fb[:, n:T].min().item(), fb[:, n:T].max().item()] if T > n else None,
                "projector_max_abs_diff": (pb - ps).abs().max().item(),
            }
        ref["batch"][mode] = {
            "padding_side": "left (Qwen3ASRProcessor text_kwargs padding_side='left'); pad id = tokenizer pad "
                            f"{tok.pad_token_id} ({tok.pad_token}); generated rows are padded after EOS with "
                            f"generation pad_token_id {model.generation_config.pad_token_id}",
            "input_features_shape": list(enc["input_features"].shape),
            "rows": rows,
        }
        print("batch", mode, [r["greedy_raw"] for r in rows])

    # stage tensors for jfk (auto prompt)
    wav = wavs["jfk.wav"]
    enc = proc.apply_transcription_request(audio=wav)
    captured = {}
    tower = model.model.audio_tower

    def pre0(mod, args, kwargs):
        captured["encoder_layer0_in"] = args[0].detach().clone()
        captured["cu_seqlens"] = args[1].detach().clone()

    h = tower.layers[0].register_forward_pre_hook(pre0, with_kwargs=True)
    with torch.no_grad():
        aud = model.model.get_audio_features(enc["input_features"], enc["input_features_mask"], return_dict=True)
        out = model(**enc)
    h.remove()
    enc_out = aud.last_hidden_state
    proj_out = aud.pooler_output
    first_logits = out.logits[0, -1]
    top = torch.topk(first_logits, 5)
    greedy = torch.tensor(ref["clips"]["jfk.wav"]["auto"]["greedy_ids"])
    full = torch.cat([enc["input_ids"][0], greedy]).unsqueeze(0)
    with torch.no_grad():
        tf = model(input_ids=full, attention_mask=torch.ones_like(full), input_features=enc["input_features"],
                   input_features_mask=enc["input_features_mask"])
    L = enc["input_ids"].shape[1]
    lp = torch.log_softmax(tf.logits[0, L - 1: -1].double(), -1)
    tf_lp = lp.gather(-1, greedy.unsqueeze(-1)).squeeze(-1)
    feats = enc["input_features"][0]
    ref["stages_jfk"] = {
        "prompt": "auto (no language)",
        "input_features": stats(feats) | {"first_4x4": corner(feats), "slice_bins0-3_frames1096-1099":
                                           feats[:4, -4:].tolist()},
        "input_features_mask": {"shape": list(enc["input_features_mask"].shape),
                                "sum": int(enc["input_features_mask"].sum())},
        "cu_seqlens": captured["cu_seqlens"].tolist(),
        "encoder_layer0_in": stats(captured["encoder_layer0_in"]) | {"first_4x4": corner(captured["encoder_layer0_in"])},
        "encoder_out": stats(enc_out) | {"first_4x4": corner(enc_out)},
        "projector_out": stats(proj_out) | {"first_4x4": corner(proj_out)},
        "first_step_logits": stats(first_logits) | {"top5_ids": top.indices.tolist(), "top5_values": top.values.tolist(),
                                                    "top5_tokens": tok.convert_ids_to_tokens(top.indices.tolist())},
        "teacher_forced_logprobs_of_greedy": tf_lp.tolist(),
        "teacher_forced_sum_logprob": tf_lp.sum().item(),
        "teacher_forced_argmax_equals_greedy": bool((lp.argmax(-1) == greedy).all()),
    }
    from safetensors.torch import save_file

    OUT.mkdir(parents=True, exist_ok=True)
    save_file({
        "input_features": feats.contiguous(),
        "input_features_mask": enc["input_features_mask"][0].to(torch.int64).contiguous(),
        "input_ids": enc["input_ids"][0].contiguous(),
        "cu_seqlens": captured["cu_seqlens"].to(torch.int64).contiguous(),
        "encoder_layer0_in": captured["encoder_layer0_in"].contiguous(),
        "encoder_out": enc_out.contiguous(),
        "projector_out": proj_out.contiguous(),
        "first_step_logits": first_logits.contiguous(),
        "greedy_ids": greedy.contiguous(),
        "teacher_forced_logprobs": tf_lp.float().contiguous(),
    }, str(OUT / "tiny_stages.safetensors"), metadata={"clip": "jfk.wav", "prompt": "auto", "tool": "tools/qwen3_asr_reference.py"})

    # resolved generation settings
    gc, model_kwargs = model._prepare_generation_config(None, **gen_kw)
    ref["generation_resolved"] = {
        "greedy_call": {"max_new_tokens": MAX_NEW, "do_sample": False},
        "resolved_config": {k: v for k, v in gc.to_dict().items() if v is not None and k != "transformers_version"},
    }
    # what a call without max_new_tokens does
    enc = proc.apply_transcription_request(audio=wavs[CLIPS[1]])
    with torch.no_grad():
        g = model.generate(**enc)
    ref["generation_resolved"]["call_without_max_new_tokens"] = {
        "clip": CLIPS[1], "input_len": int(enc["input_ids"].shape[1]),
        "new_tokens": int(g.shape[1] - enc["input_ids"].shape[1]),
        "resolved_max_length": model._prepare_generation_config(None)[0].max_length,
    }
    (OUT / "tiny.json").write_text(json.dumps(ref, indent=1, ensure_ascii=False) + "\n")
    print("wrote", OUT / "tiny.json")


if __name__ == "__main__":
    main()
