#!/usr/bin/env python
"""Build a random-weight audio-LLM with a published full-size architecture, in transformers' format.

Run from the repository root with the Python of the NeMo/transformers virtual environment (transformers
5.24.0; made by tools/setup_nemo_venv.sh):

    .venv-nemo/bin/python benchmarks/make_audio_llm_model.py --family granite    [OUT_DIR]
    .venv-nemo/bin/python benchmarks/make_audio_llm_model.py --family qwen3_asr  [OUT_DIR]

    options: --tokenizer-from DIR  the tiny model whose tokenizer and processor files are copied (default
                                   tests/models/granite_speech/g40 or tests/models/qwen3_asr/tiny)
             --lm-layers N, --encoder-layers N  fewer layers than published (only to try the tools on a
                                   smaller machine; the benchmark wants the published counts)
             --threads N           torch threads (default 2)
             --no-check            skip the finiteness check (one bf16 forward pass on 3 s of speech)

The output (a folder as `save_pretrained` writes it: config.json, model.safetensors in bfloat16 like the
published files, generation_config.json for Qwen3-ASR, the tiny model's tokenizer and processor files;
default local-models/granite-4.0-1b-speech-random or local-models/qwen3-asr-0.6b-random, relative to the
repository root; a path given is relative to the working directory) goes to a git-ignored folder and is never
committed. It stands in for the published checkpoint (not downloadable here) with the same shapes, so the same
compute: only the weights and the tokenizer differ. Used by benchmarks/audio_llm_speed.py.

What it builds: transformers' own classes from the published configs (the key fields transcribe.cpp's
intake files record, reports/porting/granite/granite-4.0-1b-speech/intake.json and
reports/porting/qwen3_asr/qwen3-asr-0.6b/intake.json; written out below, nothing is downloaded):

- granite: `GraniteSpeechForConditionalGeneration(GraniteSpeechConfig(...))` as ibm-granite/granite-4.0-1b-speech:
  conformer encoder of 16 layers, 1024 wide, 8 heads of 128, FF x4, kernel 15, context 200, Shaw positions
  512, CTC output 348; BLIP-2 Q-Former projector of 2 layers, 1024 wide, 16 heads, FF 4096, window 15,
  downsample 5 (3 queries a window: 10 audio embeddings a second); Granite LM of 40 layers, hidden 2048,
  16 heads / 4 key-value heads, SwiGLU 4096, RoPE theta 10000, embedding x12, logits / 8, attention 1/128,
  residual x0.22, untied head; vocabulary 100,353 rows; no LoRA adapter.
- qwen3_asr: `Qwen3ASRForConditionalGeneration(Qwen3ASRConfig(...))` as Qwen/Qwen3-ASR-0.6B in transformers'
  -hf layout: audio encoder of 18 layers, d_model 896, 14 heads, FF 3584, conv stack of 480 channels, 128 mels,
  100-frame chunks, 800-frame attention windows, projector to 1024; Qwen3 LM of 28 layers, hidden 1024,
  16 heads / 8 key-value heads of 128, SwiGLU 3072, RoPE theta 1e6, tied embeddings; vocabulary 151,936 rows.

Weights: built in bfloat16 under a fixed seed, then redrawn with the recipe of tests/models/cohere-tiny
(tools/cohere_hf_reference.py `reinit_`: matrices N(0, 1/fan_in), vectors 0.1 N(0, 1), norm gains 1 + that,
random BatchNorm statistics); that keeps every activation of order one through the 40 (28) LM layers, so
nothing overflows in bfloat16 (the check below runs one bf16 forward pass and refuses non-finite logits).
Saved in bfloat16, as the published files are (both publish bf16 weights only). No EOS boost: a random model
never stops, so both engines generate up to the same `max_new_tokens`.

Tokenizer and processor: the tiny model's files copied unchanged (granite: g40, 570 tokens, the USER:/ASSISTANT:
chat template of granite-4.0-1b-speech; qwen3_asr: tiny, 648 tokens, the -hf ASR chat template); the config's
special ids (audio token, eos, bos, pad, timestamp) are the tiny tokenizer's. The embedding and the head keep the
published number of rows, so a random model mostly emits ids the tiny tokenizer has no piece for; both engines'
decoders skip those (the `tokenizers` library drops unknown ids), so the texts are short and only the ids are
compared. The vocabulary is not padded with filler pieces as make_cohere_model.py does: transformers 5.24's
GPT2Tokenizer / Qwen2Tokenizer rebuild the tokenizer from its pieces and renumber the added tokens after them,
which would move the special ids away from the config's. Only the sizes matter for speed.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SEED = 20261205

log = logging.getLogger("make_audio_llm_model")

# The published configs' key fields (transcribe.cpp's intake files, see the docstring), tiny token ids filled in
# by `config_for` from the tiny tokenizer.
FAMILIES = {
    "granite": dict(
        published="ibm-granite/granite-4.0-1b-speech", out="local-models/granite-4.0-1b-speech-random",
        tiny="tests/models/granite_speech/g40", vocab=100353,
        files=("tokenizer_config.json", "chat_template.jinja", "preprocessor_config.json", "processor_config.json"),
    ),
    "qwen3_asr": dict(
        published="Qwen/Qwen3-ASR-0.6B", out="local-models/qwen3-asr-0.6b-random",
        tiny="tests/models/qwen3_asr/tiny", vocab=151936,
        files=("tokenizer_config.json", "chat_template.jinja", "processor_config.json", "generation_config.json"),
    ),
}


def tokenizer_size(tiny: Path, vocab_rows: int) -> int:
    """The number of ids the tiny tokenizer.json has (its BPE pieces and added tokens), checked to fit."""
    tok = json.loads((tiny / "tokenizer.json").read_text(encoding="utf-8"))
    n = max(set(tok["model"]["vocab"].values()) | {t["id"] for t in tok["added_tokens"]}) + 1
    if n > vocab_rows:
        raise SystemExit(f"{tiny}: the tokenizer has {n} ids, more than the published {vocab_rows} rows")
    return n


def tiny_ids(tiny: Path) -> dict:
    """The special ids of the tiny model (its config.json and tokenizer)."""
    cfg = json.loads((tiny / "config.json").read_text(encoding="utf-8"))
    tok = json.loads((tiny / "tokenizer.json").read_text(encoding="utf-8"))
    added = {t["content"]: t["id"] for t in tok["added_tokens"]}
    return dict(config=cfg, added=added)


def granite_config(ids: dict, lm_layers: int, encoder_layers: int):
    from transformers import GraniteSpeechConfig

    t = ids["config"]["text_config"]
    eot, pad, audio = added_id(ids, "<|end_of_text|>"), added_id(ids, "<|pad|>"), added_id(ids, "<|audio|>")
    assert (t["eos_token_id"], t["pad_token_id"], ids["config"]["audio_token_index"]) == (eot, pad, audio)
    encoder = dict(model_type="granite_speech_encoder", input_dim=160, num_layers=encoder_layers, hidden_dim=1024,
                   num_heads=8, dim_head=128, output_dim=348, context_size=200, max_pos_emb=512, conv_kernel_size=15,
                   conv_expansion_factor=2, feedforward_mult=4, dropout=0.1)
    projector = dict(model_type="blip_2_qformer", hidden_size=1024, intermediate_size=4096, num_attention_heads=16,
                     num_hidden_layers=2, encoder_hidden_size=1024, cross_attention_frequency=1,
                     position_embedding_type="absolute", layer_norm_eps=1e-12, vocab_size=30522, hidden_act="gelu",
                     use_qformer_text_input=False, max_position_embeddings=512, pad_token_id=0)
    text = dict(model_type="granite", hidden_size=2048, intermediate_size=4096, num_hidden_layers=lm_layers,
                num_attention_heads=16, num_key_value_heads=4, vocab_size=FAMILIES["granite"]["vocab"],
                max_position_embeddings=4096, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                rms_norm_eps=1e-5, hidden_act="silu", embedding_multiplier=12.0, logits_scaling=8.0,
                attention_multiplier=0.0078125, residual_multiplier=0.22, tie_word_embeddings=False,
                attention_bias=False, mlp_bias=False, bos_token_id=eot, eos_token_id=eot, pad_token_id=pad)
    return GraniteSpeechConfig(encoder_config=encoder, projector_config=projector, text_config=text,
                               audio_token_index=audio, has_lora_adapter=False, downsample_rate=5, window_size=15,
                               tie_word_embeddings=False)


def qwen3_asr_config(ids: dict, lm_layers: int, encoder_layers: int):
    from transformers import Qwen3ASRConfig

    c = ids["config"]
    endoftext, im_end = added_id(ids, "<|endoftext|>"), added_id(ids, "<|im_end|>")
    audio, stamp = added_id(ids, "<|audio_pad|>"), added_id(ids, "<timestamp>")
    assert (c["audio_token_id"], c["timestamp_token_id"], c["pad_token_id"]) == (audio, stamp, im_end)
    assert c["eos_token_id"] == [endoftext, im_end]
    audio_config = dict(model_type="qwen3_asr_encoder", num_mel_bins=128, encoder_layers=encoder_layers, d_model=896,
                        encoder_attention_heads=14, encoder_ffn_dim=3584, downsample_hidden_size=480, output_dim=1024,
                        n_window=50, n_window_infer=800, max_position_embeddings=13, activation_function="gelu",
                        scale_embedding=False)
    text = dict(model_type="qwen3", hidden_size=1024, intermediate_size=3072, num_hidden_layers=lm_layers,
                num_attention_heads=16, num_key_value_heads=8, head_dim=128, hidden_act="silu", rms_norm_eps=1e-6,
                rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, max_position_embeddings=65536,
                tie_word_embeddings=True, vocab_size=FAMILIES["qwen3_asr"]["vocab"], attention_bias=False,
                bos_token_id=endoftext, eos_token_id=im_end, use_sliding_window=False,
                layer_types=["full_attention"] * lm_layers, max_window_layers=lm_layers)
    return Qwen3ASRConfig(audio_config=audio_config, text_config=text, audio_token_id=audio, timestamp_token_id=stamp,
                          pad_token_id=im_end, eos_token_id=[endoftext, im_end], tie_word_embeddings=True)


def added_id(ids: dict, token: str) -> int:
    if token not in ids["added"]:
        raise SystemExit(f"the tiny tokenizer has no {token}")
    return ids["added"][token]


def check_finite(family: str, out: Path, model, seconds: float = 3.0) -> dict:
    """One forward pass of the saved folder's processor output through the bfloat16 model: the last position's
    logits must be finite. Returns a few statistics for the log."""
    import torch

    sys.path.insert(0, str(REPO / "benchmarks"))
    from audio_llm_speed import hf_inputs, load_hf_processor
    from speech_clip import speech_clip

    pcm, _ = speech_clip(seconds)
    processor = load_hf_processor(family, str(out))
    inputs = hf_inputs(family, processor, [pcm]).to(model.dtype)
    with torch.inference_mode():
        logits = model(**inputs).logits[0, -1].float()
    if not torch.isfinite(logits).all():
        raise SystemExit(f"{out}: the bfloat16 model's logits are not finite; the weights need a smaller scale")
    return dict(prompt_len=int(inputs["input_ids"].shape[1]), logit_absmax=round(float(logits.abs().max()), 2),
                logit_std=round(float(logits.std()), 3), argmax=int(logits.argmax()))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", default=None,
                    help="output folder (default local-models/<name> in the repository)")
    ap.add_argument("--family", choices=sorted(FAMILIES), required=True)
    ap.add_argument("--tokenizer-from", help="the tiny model folder whose tokenizer and processor files are copied")
    ap.add_argument("--lm-layers", type=int, help="published: granite 40, qwen3_asr 28 (fewer only to save time)")
    ap.add_argument("--encoder-layers", type=int, help="published: granite 16, qwen3_asr 18")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-check", action="store_true", help="skip the bf16 finiteness check")
    args = ap.parse_args(argv)

    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    import torch
    import transformers
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    sys.path.insert(0, str(REPO / "tools"))
    from cohere_hf_reference import reinit_  # the recipe of tests/models/cohere-tiny

    torch.set_num_threads(args.threads)
    fam = FAMILIES[args.family]
    tiny = Path(args.tokenizer_from).resolve() if args.tokenizer_from else REPO / fam["tiny"]
    if not (tiny / "tokenizer.json").is_file():
        raise SystemExit(f"{tiny}: no tokenizer.json (the tiny model's folder; pass --tokenizer-from)")
    out = Path(args.out).resolve() if args.out else REPO / fam["out"]
    ids = tiny_ids(tiny)
    if args.family == "granite":
        from transformers import GraniteSpeechForConditionalGeneration as cls

        config = granite_config(ids, args.lm_layers or 40, args.encoder_layers or 16)
    else:
        from transformers import Qwen3ASRForConditionalGeneration as cls

        config = qwen3_asr_config(ids, args.lm_layers or 28, args.encoder_layers or 18)

    torch.manual_seed(SEED)
    t0 = time.time()
    model = cls._from_config(config, dtype=torch.bfloat16).eval()  # built in bf16: no float32 copy in memory
    log.info("built in %.1f s", time.time() - t0)
    t0 = time.time()
    reinit_(model, SEED)
    log.info("weights drawn in %.1f s", time.time() - t0)
    n_params = sum(p.numel() for p in model.parameters())
    gc = model.generation_config
    if args.family == "granite":
        eot = config.text_config.eos_token_id
        gc.bos_token_id, gc.eos_token_id, gc.pad_token_id = eot, eot, config.text_config.pad_token_id
    else:
        gc.eos_token_id, gc.pad_token_id = list(config.eos_token_id), config.pad_token_id

    out.mkdir(parents=True, exist_ok=True)
    for old in list(out.glob("model*.safetensors*")) + [out / "generation_config.json"]:
        if old.exists():
            old.unlink()
    t0 = time.time()
    model.save_pretrained(out)
    if args.family == "granite":
        # the published granite-4.0-1b-speech ships none (stops come from the LM's eos_token_id), nor does g40
        (out / "generation_config.json").unlink(missing_ok=True)
    n_tok = tokenizer_size(tiny, fam["vocab"])
    for name in ("tokenizer.json",) + fam["files"]:
        shutil.copy(tiny / name, out / name)
    log.info("saved in %.1f s", time.time() - t0)
    if not args.no_check:
        t0 = time.time()
        stats = check_finite(args.family, out, model)
        log.info("bf16 forward pass on 3 s of speech in %.1f s: logits finite %s", time.time() - t0, stats)
    size = sum(f.stat().st_size for f in out.glob("model*.safetensors"))
    log.info("%s: %s architecture, %.1f M parameters, weights %.2f GB (bfloat16), vocabulary %d rows (the tiny "
             "tokenizer has %d ids), transformers %s", out, fam["published"], n_params / 1e6, size / 1e9,
             fam["vocab"], n_tok, transformers.__version__)
    return 0


if __name__ == "__main__":
    sys.exit(main())
