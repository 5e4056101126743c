#!/usr/bin/env python
"""Build a random-weight audio-LLM with a published full-size architecture, in the published layout.

Run from the repository root with the Python of the NeMo/transformers virtual environment (transformers
5.25.0, mistral-common 1.13.1, NeMo 3.0.0; made by tools/setup_nemo_venv.sh):

    .venv-nemo/bin/python benchmarks/make_audio_llm_model.py --family granite     [OUT_DIR]
    .venv-nemo/bin/python benchmarks/make_audio_llm_model.py --family qwen3_asr   [OUT_DIR]
    .venv-nemo/bin/python benchmarks/make_audio_llm_model.py --family voxtral     [OUT_DIR]
    .venv-nemo/bin/python benchmarks/make_audio_llm_model.py --family canary_qwen [OUT_DIR]

    options: --tokenizer-from DIR  the tiny model whose tokenizer and processor files are copied (default
                                   tests/models/granite_speech/g40, tests/models/qwen3_asr/tiny,
                                   tests/models/canary_qwen/tiny; voxtral needs none: its tekken.json is
                                   mistral-common's full-size one)
             --scale small         2 encoder and 2 LM layers, every width and the vocabulary as published, into
                                   <default folder>-small: to check the tools end to end in minutes (a smoke
                                   test, never a benchmark)
             --lm-layers N, --encoder-layers N  other layer counts (the benchmark wants the published ones)
             --threads N           torch threads (default 2)
             --no-check            skip the finiteness check (one bf16 forward pass on 3 s of speech)

The output (a folder as `save_pretrained` writes it: config.json, model.safetensors in bfloat16 like the
published files, generation_config.json for Qwen3-ASR and Voxtral, the tokenizer and processor files; default
local-models/granite-4.0-1b-speech-random, qwen3-asr-0.6b-random, voxtral-mini-3b-random (9.4 GB) or
canary-qwen-2.5b-random (5.1 GB), relative to the repository root; a path given is relative to the working
directory) goes to a git-ignored folder and is never
committed. It stands in for the published checkpoint (not downloadable here) with the same shapes, so the same
compute: only the weights and the tokenizer differ. Used by benchmarks/audio_llm_speed.py.

What it builds: the references' own classes from the published configs (the key fields transcribe.cpp's
intake files record, reports/porting/<family>/<model>/intake.json: granite-4.0-1b-speech, qwen3-asr-0.6b,
voxtral-mini-3b-2507, canary-qwen-2.5b; written out below, nothing is downloaded):

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
- voxtral: `VoxtralForConditionalGeneration(VoxtralConfig(...))` as mistralai/Voxtral-Mini-3B-2507: Whisper
  encoder of 32 layers, 1280 wide, 20 heads of 64, FF 5120, 128 mels, 1500 positions (30 s chunks); 4-frame
  stacking into the GELU projector (5120 -> 3072 -> 3072); Llama LM of 30 layers, hidden 3072, 32 heads / 8
  key-value heads of 128, SwiGLU 8192, RoPE theta 1e8, RMSNorm eps 1e-5, untied head; vocabulary 131,072 rows;
  audio token 24, bos 1, eos 2, pad 11 (generation_config.json as published); preprocessor_config.json: the
  WhisperFeatureExtractor of 128 mels. Tokenizer: a full-size tekken.json, mistral-common's bundled
  tekken_240911.json (131,072 ids: 1000 special + 130,072 pieces) with Voxtral's special tokens at their ranks
  ([AUDIO] 24, [BEGIN_AUDIO] 25, [TRANSCRIBE] 34: tools/tekken_tiny.py's NAMED), version v7 and the offline
  `audio` section, so that mistral-common's encode_transcription builds the published prompts and random ids
  decode to text. 4,676 M parameters.
- canary_qwen: NeMo's `SALM(cfg)` as nvidia/canary-qwen-2.5b (tools/canary_qwen_tiny.py's config with the
  published sizes): FastConformer of 32 layers, d_model 1024, 8 heads, FF x4, dw_striding x8 with 256 channels,
  kernel 9, rel_pos with untied biases; IdentityConnector + Linear(1024 -> 2048); Qwen3-1.7B LM (28 layers,
  hidden 2048, 16 / 8 heads of 128, SwiGLU 6144, RoPE 1e6, tied embeddings, 151,936 rows); LoRA r 128, alpha 256
  on q_proj and v_proj. Built offline (`pretrained_weights: false`; the LM's config and the tiny tokenizer in a
  scratch folder named as `pretrained_llm`), the LM directly in bfloat16; saved as tools/canary_qwen_tiny.py
  saves the tiny one (config.json with `pretrained_llm: Qwen/Qwen3-1.7B`, model.safetensors, the tokenizer at the
  root, llm_backbone/config.json): the layout our loader and `SALM.from_pretrained` read. The tokenizer is the
  tiny model's (606 ids with the placeholder SALM adds; Qwen3-1.7B's is not available offline); the front end's
  mel filters and window are kept as NeMo computes them (not redrawn). 2,559 M parameters (the LoRA unmerged),
  5.12 GB as the published file.

Weights: built in bfloat16 under a fixed seed, then redrawn with the recipe of tests/models/cohere-tiny
(tools/cohere_hf_reference.py `reinit_`: matrices N(0, 1/fan_in), vectors 0.1 N(0, 1), norm gains 1 + that,
random BatchNorm statistics); that keeps every activation of order one through the 28-40 LM layers, so
nothing overflows in bfloat16 (the check below runs one bf16 forward pass and refuses non-finite logits).
Saved in bfloat16, as the published files are (both publish bf16 weights only). No EOS boost: a random model
never stops, so both engines generate up to the same `max_new_tokens`.

Tokenizer and processor (granite, qwen3_asr): the tiny model's files copied unchanged (granite: g40, 570 tokens, the USER:/ASSISTANT:
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
    "voxtral": dict(
        published="mistralai/Voxtral-Mini-3B-2507", out="local-models/voxtral-mini-3b-random", vocab=131072,
        layers=(32, 30),  # encoder, LM
    ),
    "canary_qwen": dict(
        published="nvidia/canary-qwen-2.5b", out="local-models/canary-qwen-2.5b-random",
        tiny="tests/models/canary_qwen/tiny", vocab=151936, layers=(32, 28),
    ),
}
SMALL_LAYERS = 2  # --scale small: this many encoder and LM layers, every width and the vocabulary as published


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


def voxtral_config(encoder_layers: int, lm_layers: int):
    """mistralai/Voxtral-Mini-3B-2507's config.json (transcribe.cpp's intake of it; the ids are tekken's)."""
    from transformers import VoxtralConfig

    audio = dict(hidden_size=1280, intermediate_size=5120, num_hidden_layers=encoder_layers, num_attention_heads=20,
                 num_key_value_heads=20, head_dim=64, num_mel_bins=128, max_source_positions=1500,
                 scale_embedding=False, activation_function="gelu", vocab_size=51866, dropout=0.0,
                 attention_dropout=0.0, activation_dropout=0.0, layerdrop=0.0)
    text = dict(model_type="llama", vocab_size=FAMILIES["voxtral"]["vocab"], hidden_size=3072, intermediate_size=8192,
                num_hidden_layers=lm_layers, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                hidden_act="silu", max_position_embeddings=131072, rms_norm_eps=1e-5,
                rope_parameters={"rope_type": "default", "rope_theta": 100000000.0}, attention_bias=False,
                mlp_bias=False, tie_word_embeddings=False, use_cache=True, bos_token_id=1, eos_token_id=2,
                pad_token_id=11)
    return VoxtralConfig(audio_config=audio, text_config=text, audio_token_id=24, projector_hidden_act="gelu")


def write_tekken(out: Path) -> int:
    """A full-size tekken.json: mistral-common's bundled tekken_240911.json (150,000 pieces, 131,072 ids: 1000
    special + 130,072 pieces) with Voxtral's special tokens named at their ranks (tools/tekken_tiny.py's NAMED,
    listed 0..36, the rest mistral-common's <SPECIAL_n> fillers), version v7 (the file says v3; v7 is the
    first that reads the audio section and encodes transcription requests) and the offline `audio` section.
    Returns the number of ids."""
    import mistral_common
    from tekken_tiny import AUDIO_OFFLINE, NAMED  # tools/

    src = Path(mistral_common.__file__).parent / "data" / "tekken_240911.json"
    data = json.loads(src.read_text(encoding="utf-8"))
    data.pop("image", None)  # Voxtral's tekken has no image section
    data["config"]["version"] = "v7"
    data["special_tokens"] = [{"rank": i, "token_str": NAMED.get(i, f"<SPECIAL_{i}>"), "is_control": True}
                              for i in range(max(NAMED) + 1)]
    data["audio"] = AUDIO_OFFLINE
    (out / "tekken.json").write_text(json.dumps(data, ensure_ascii=False) + "\n", encoding="utf-8")
    return data["config"]["default_vocab_size"]


def canary_qwen_salm_config(llm_dir: str, encoder_layers: int) -> dict:
    """nvidia/canary-qwen-2.5b's config.json: tools/canary_qwen_tiny.py's `salm_config` with every size as
    published (transcribe.cpp's intake: FastConformer of 32 layers, d_model 1024, 8 heads, FF x4, dw_striding x8
    with 256 channels, kernel 9, rel_pos with untied biases, no xscaling; Linear(1024 -> 2048); LoRA r 128,
    alpha 256 on q_proj and v_proj; the LoRA weights trainable)."""
    from canary_qwen_tiny import salm_config  # tools/

    cfg = salm_config(llm_dir)
    cfg["perception"]["encoder"].update(n_layers=encoder_layers, d_model=1024, n_heads=8,
                                        subsampling_conv_channels=256)
    cfg["perception"]["modality_adapter"]["d_model"] = 1024
    cfg["perception"]["output_dim"] = 2048
    cfg["lora"].update(r=128, lora_alpha=256)
    cfg["prevent_freeze_params"] = ["^.+\\.lora_.+$"]
    return cfg


def qwen3_1_7b_config(tokenizer, lm_layers: int):
    """Qwen/Qwen3-1.7B's config.json (28 layers, hidden 2048, 16 / 8 heads of 128, SwiGLU 6144, RoPE 1e6, 40,960
    positions, tied embeddings, 151,936 rows); bos / eos the tiny tokenizer's <|endoftext|> / <|im_end|>."""
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=FAMILIES["canary_qwen"]["vocab"], hidden_size=2048, intermediate_size=6144,
        num_hidden_layers=lm_layers, num_attention_heads=16, num_key_value_heads=8, head_dim=128, hidden_act="silu",
        max_position_embeddings=40960, rms_norm_eps=1e-6, use_cache=True, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, attention_bias=False,
        attention_dropout=0.0, use_sliding_window=False, sliding_window=None, max_window_layers=lm_layers,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"))


def added_id(ids: dict, token: str) -> int:
    if token not in ids["added"]:
        raise SystemExit(f"the tiny tokenizer has no {token}")
    return ids["added"][token]


def check_finite(family: str, out: Path, model, seconds: float = 3.0) -> dict:
    """One forward pass of 3 s of speech through the bfloat16 model, its inputs made as the benchmark's reference
    makes them from the saved folder: the last position's logits must be finite. Returns a few statistics."""
    import torch

    from speech_clip import speech_clip  # benchmarks/

    pcm, _ = speech_clip(seconds)
    with torch.inference_mode():
        if family == "canary_qwen":
            n_prompt, logits = salm_last_logits(model, pcm)
        else:
            from audio_llm_hf import hf_inputs, load_hf_processor

            processor = load_hf_processor(family, str(out))
            inputs = hf_inputs(family, processor, [pcm]).to(model.dtype)
            n_prompt, logits = int(inputs["input_ids"].shape[1]), model(**inputs).logits[0, -1].float()
    if not torch.isfinite(logits).all():
        raise SystemExit(f"{out}: the bfloat16 model's logits are not finite; the weights need a smaller scale")
    return dict(prompt_len=n_prompt, logit_absmax=round(float(logits.abs().max()), 2),
                logit_std=round(float(logits.std()), 3), argmax=int(logits.argmax()))


def salm_last_logits(model, pcm):
    """SALM's first generation step by hand (as tools/canary_qwen_reference.py computes its first logits): the
    prompt's embeddings with the audio rows in place of the placeholder, through the LM."""
    import torch
    from nemo.collections.common.prompts import PromptFormatter
    from nemo.collections.speechlm2.parts.pretrained import move_embedding

    from audio_llm_hf import salm_audio, salm_prompt

    formatter = PromptFormatter.resolve(model.cfg.prompt_format)(model.tokenizer)
    ids = formatter.encode_dialog(turns=salm_prompt(model))["input_ids"].tolist()
    audios, lens = salm_audio([pcm])
    emb, emb_len = model.perception(input_signal=audios, input_signal_length=lens)
    tag = model.audio_locator_tag_id
    x = torch.tensor([ids])
    embeds = model.embed_tokens(x.where(x != tag, 0))[0]
    at = ids.index(tag)
    x = torch.cat([embeds[:at], emb[0, :int(emb_len[0])], embeds[at + 1:]])[None]
    with move_embedding(model):
        logits = model.llm(inputs_embeds=x).logits[0, -1].float()
    return int(x.shape[1]), logits


def build_transformers(family: str, tiny, layers: tuple, out: Path):
    """granite, qwen3_asr, voxtral: transformers' model class from the published config, built in bfloat16."""
    import torch

    fam = FAMILIES[family]
    enc, lm = layers
    if family == "granite":
        from transformers import GraniteSpeechForConditionalGeneration as cls

        config = granite_config(tiny_ids(tiny), lm, enc)
    elif family == "qwen3_asr":
        from transformers import Qwen3ASRForConditionalGeneration as cls

        config = qwen3_asr_config(tiny_ids(tiny), lm, enc)
    else:
        from transformers import VoxtralForConditionalGeneration as cls

        config = voxtral_config(enc, lm)
    torch.manual_seed(SEED)
    t0 = time.time()
    model = cls._from_config(config, dtype=torch.bfloat16).eval()  # built in bf16: no float32 copy in memory
    log.info("built in %.1f s", time.time() - t0)
    t0 = time.time()
    reinit_(model, SEED)
    log.info("weights drawn in %.1f s", time.time() - t0)
    gc = model.generation_config
    if family == "granite":
        eot = config.text_config.eos_token_id
        gc.bos_token_id, gc.eos_token_id, gc.pad_token_id = eot, eot, config.text_config.pad_token_id
    elif family == "voxtral":  # the published generation_config.json
        gc.bos_token_id, gc.eos_token_id, gc.pad_token_id = 1, 2, 11
    else:
        gc.eos_token_id, gc.pad_token_id = list(config.eos_token_id), config.pad_token_id
    clear(out)
    t0 = time.time()
    model.save_pretrained(out)
    if family == "granite":
        # the published granite-4.0-1b-speech ships none (stops come from the LM's eos_token_id), nor does g40
        (out / "generation_config.json").unlink(missing_ok=True)
    if family == "voxtral":
        from transformers import WhisperFeatureExtractor

        n_tok = write_tekken(out)
        WhisperFeatureExtractor(feature_size=128, sampling_rate=16000, hop_length=160, chunk_length=30, n_fft=400,
                                padding_value=0.0, return_attention_mask=False).save_pretrained(out)
    else:
        n_tok = tokenizer_size(tiny, fam["vocab"])
        for name in ("tokenizer.json",) + fam["files"]:
            shutil.copy(tiny / name, out / name)
    log.info("saved in %.1f s", time.time() - t0)
    return model, n_tok


def build_canary_qwen(tiny: Path, layers: tuple, out: Path):
    """NeMo's SALM(cfg) with the published config, offline (`pretrained_weights: false`: nothing downloaded; the
    LM's config and the tiny tokenizer in a scratch folder named as `pretrained_llm`), the LM built directly in
    bfloat16 (NeMo's `load_pretrained_hf` asks for float32: its dtype is overridden while SALM builds), the rest
    cast to bfloat16, weights redrawn (the front end's mel filters and window kept), saved in the published
    layout as tools/canary_qwen_tiny.py saves the tiny one."""
    import tempfile

    import torch
    import nemo.collections.speechlm2.models.salm as salm_module
    from transformers import AutoTokenizer

    enc, lm = layers
    tok = AutoTokenizer.from_pretrained(tiny)
    with tempfile.TemporaryDirectory(prefix="canary-qwen-llm-") as scratch:
        llm_dir = Path(scratch)
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(tiny / name, llm_dir / name)
        qwen3_1_7b_config(tok, lm).save_pretrained(llm_dir)
        cfg = canary_qwen_salm_config(str(llm_dir), enc)
        nemo_load = salm_module.load_pretrained_hf

        def load_bf16(path, pretrained_weights=True, dtype=None, trust_remote_code=False):
            return nemo_load(path, pretrained_weights=pretrained_weights, dtype=torch.bfloat16,
                             trust_remote_code=trust_remote_code)

        torch.manual_seed(SEED)
        t0 = time.time()
        salm_module.load_pretrained_hf = load_bf16
        try:
            model = salm_module.SALM(cfg).eval()
        finally:
            salm_module.load_pretrained_hf = nemo_load
        model.to(torch.bfloat16)
        log.info("built in %.1f s", time.time() - t0)
        t0 = time.time()
        front = {k: v.clone() for k, v in model.perception.preprocessor.state_dict().items()}
        reinit_(model, SEED)
        model.perception.preprocessor.load_state_dict(front)
        log.info("weights drawn in %.1f s", time.time() - t0)
        clear(out)
        t0 = time.time()
        model.save_pretrained(out)
        (out / "README.md").unlink(missing_ok=True)  # the hub mixin's model card
        saved = json.loads((out / "config.json").read_text())
        saved.pop("model_type", None)
        saved.pop("architectures", None)
        saved["pretrained_llm"] = "Qwen/Qwen3-1.7B"
        saved["pretrained_weights"] = True
        (out / "config.json").write_text(json.dumps(saved, indent=2) + "\n")
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(tiny / name, out / name)
        (out / "llm_backbone").mkdir(exist_ok=True)
        shutil.copy(llm_dir / "config.json", out / "llm_backbone" / "config.json")
    log.info("saved in %.1f s", time.time() - t0)
    return model, len(model.tokenizer.tokenizer)


def reinit_(model, seed: int) -> None:
    from cohere_hf_reference import reinit_ as draw  # tools/: the recipe of tests/models/cohere-tiny

    draw(model, seed)


def clear(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for old in list(out.glob("model*.safetensors*")) + [out / "generation_config.json"]:
        if old.exists():
            old.unlink()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", default=None,
                    help="output folder (default local-models/<name> in the repository; with --scale small, "
                         "<name>-small)")
    ap.add_argument("--family", choices=sorted(FAMILIES), required=True)
    ap.add_argument("--tokenizer-from", help="the tiny model folder whose tokenizer files are copied")
    ap.add_argument("--scale", choices=["full", "small"], default="full",
                    help=f"small: {SMALL_LAYERS} encoder and {SMALL_LAYERS} LM layers, every width as published "
                         "(to check the tools end to end in minutes; not a benchmark)")
    ap.add_argument("--lm-layers", type=int, help="published: granite 40, qwen3_asr 28, voxtral 30, canary_qwen 28")
    ap.add_argument("--encoder-layers", type=int, help="published: granite 16, qwen3_asr 18, voxtral 32, "
                                                       "canary_qwen 32")
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
    sys.path.insert(0, str(REPO / "benchmarks"))
    torch.set_num_threads(args.threads)
    fam = FAMILIES[args.family]
    tiny = None
    if "tiny" in fam:
        tiny = Path(args.tokenizer_from).resolve() if args.tokenizer_from else REPO / fam["tiny"]
        if not (tiny / "tokenizer.json").is_file():
            raise SystemExit(f"{tiny}: no tokenizer.json (the tiny model's folder; pass --tokenizer-from)")
    published = fam.get("layers") or {"granite": (16, 40), "qwen3_asr": (18, 28)}[args.family]
    small = args.scale == "small"
    layers = (args.encoder_layers or (SMALL_LAYERS if small else published[0]),
              args.lm_layers or (SMALL_LAYERS if small else published[1]))
    out = Path(args.out).resolve() if args.out else REPO / (fam["out"] + ("-small" if small else ""))
    if args.family == "canary_qwen":
        model, n_tok = build_canary_qwen(tiny, layers, out)
    else:
        model, n_tok = build_transformers(args.family, tiny, layers, out)
    n_params = sum(p.numel() for p in model.parameters())
    if not args.no_check:
        t0 = time.time()
        stats = check_finite(args.family, out, model)
        log.info("bf16 forward pass on 3 s of speech in %.1f s: logits finite %s", time.time() - t0, stats)
    size = sum(f.stat().st_size for f in out.glob("model*.safetensors"))
    log.info("%s: %s architecture (%d encoder, %d LM layers), %.1f M parameters, weights %.2f GB (bfloat16), "
             "vocabulary %d rows (the tokenizer has %d ids), transformers %s", out, fam["published"], layers[0],
             layers[1], n_params / 1e6, size / 1e9, fam["vocab"], n_tok, transformers.__version__)
    return 0


if __name__ == "__main__":
    sys.exit(main())
