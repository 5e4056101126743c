"""Make the tiny transformers-format Canary model in tests/models/canary-hf-tiny/ and the reference
outputs transformers' own Canary pipeline gives for it (tests/references/canary_hf/).

Run from the repository root with the NeMo/transformers venv (transformers 5.24.0, torch 2.13.0 CPU):

    OMP_NUM_THREADS=1 .venv-nemo/bin/python tools/canary_hf_reference.py [--stage build|refs|all]

(`.venv-nemo` is whatever venv holds transformers 5.24.0, sentencepiece, tokenizers and soundfile; no
torchaudio is needed: transformers' Canary front end is `ParakeetFeatureExtractor`, pure torch.)

Why random weights and not the NeMo canary-tiny: transformers 5.24.0 ships no NeMo->HF Canary converter
(the wheel has no `convert_canary_nemo_to_hf.py`; the one in transformers' git tree targets
canary-1b-v2 and older weight names), and `CanaryForConditionalGeneration` cannot hold canary-tiny at
all: it has no `encoder_decoder_proj` (its cross-attention reads the encoder output directly, so
encoder hidden size must equal decoder hidden size; canary-tiny is 64 -> 96, like canary-180m-flash
512 -> 1024), and it has one tokenizer where canary-tiny has NeMo's aggregate of five. So, as the
brief's fallback says, this builds a `CanaryConfig` shaped like canary-tiny (encoder d 64, decoder d
64) with seeded random weights and a small unified SentencePiece BPE tokenizer trained on the dev
transcripts, saves it with `save_pretrained`, and records transformers' processor + `generate()`.

Stages:
  build  -> tests/models/canary-hf-tiny/ (config.json, generation_config.json, model.safetensors,
            processor/tokenizer files as `save_pretrained` writes them)
  refs   -> tests/references/canary_hf/reference.json, from a fresh `from_pretrained` of that folder.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import soundfile as sf  # noqa: E402
import torch  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
AUDIO = SHARED / "audio"
MODEL_DIR = REPO / "tests" / "models" / "canary-hf-tiny"
REF_DIR = REPO / "tests" / "references" / "canary_hf"

SEED = 20261203
MAX_NEW_TOKENS = 40
# Added to proj_out.bias[<|endoftext|>] after the random draw so that some runs stop on EOS before
# MAX_NEW_TOKENS and others do not (random weights alone never emit EOS here).
EOS_BIAS_BOOST = 3.0
CLIPS = ["jfk.wav", "dev/ls_61-70968-0002.wav", "dev/cv_18933160.wav", "dev/fleurs_en_004.wav"]
JFK_TEXT = ("And so my fellow Americans, ask not what your country can do for you, "
            "ask what you can do for your country.")
LANGS = ["en", "de", "es", "fr"]
N_TIMESTAMPS = 256
# The canary2 special-token inventory and order of the NeMo canary-tiny (ids 1..280 after <unk> 0);
# it puts <pad> 2, <|endoftext|> 3, <|startoftranscript|> 4, <|startofcontext|> 7 where
# CanaryConfig's defaults (pad 2, eos 3, bos 4, decoder_start 7) expect them.
SPECIALS = (["<|nospeech|>", "<pad>", "<|endoftext|>", "<|startoftranscript|>", "<|pnc|>", "<|nopnc|>",
             "<|startofcontext|>", "<|emo:undefined|>", "<|emo:neutral|>", "<|emo:angry|>", "<|emo:happy|>",
             "<|emo:sad|>", "<|itn|>", "<|noitn|>", "<|timestamp|>", "<|notimestamp|>", "<|diarize|>",
             "<|nodiarize|>", "<|transcribe|>", "<|translate|>"]
            + [f"<|{lang}|>" for lang in LANGS] + [f"<|{k}|>" for k in range(N_TIMESTAMPS)])
SPM_VOCAB = 640

# Written by this tool (transformers 5.24.0 ships no Canary chat template; the published
# harshaljanjani/canary-1b-v2-hf has one on the Hub, not readable offline). It renders exactly the
# prompt transformers' own tests/models/canary/test_processing_canary.py expects:
# <|startofcontext|><|startoftranscript|><|emo:undefined|><|src|><|tgt|><|pnc|>|<|nopnc|><|noitn|><|notimestamp|><|nodiarize|>
CHAT_TEMPLATE = (
    "{%- for message in messages -%}{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'text' -%}"
    "<|startofcontext|><|startoftranscript|><|emo:undefined|>"
    "<|{{ item['source_language'] }}|><|{{ item['target_language'] }}|>"
    "{{ '<|pnc|>' if item['punctuation'] else '<|nopnc|>' }}"
    "<|noitn|><|notimestamp|><|nodiarize|>"
    "{%- endif -%}{%- endfor -%}{%- endfor -%}"
)

ENCODER = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256,
               hidden_act="silu", attention_bias=True, convolution_bias=True, conv_kernel_size=9,
               subsampling_factor=8, subsampling_conv_channels=32, num_mel_bins=128,
               subsampling_conv_kernel_size=3, subsampling_conv_stride=2, dropout=0.0,
               dropout_positions=0.0, layerdrop=0.0, activation_dropout=0.0, attention_dropout=0.0,
               max_position_embeddings=5000, scale_input=False)
DECODER = dict(hidden_size=64, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=4, head_dim=16, hidden_act="relu", max_position_embeddings=1024,
               attention_bias=True, attention_dropout=0.0)


def versions() -> dict:
    import sentencepiece
    import tokenizers
    import transformers
    return {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
            "sentencepiece": sentencepiece.__version__, "numpy": np.__version__,
            "soundfile": sf.__version__}


def set_determinism() -> None:
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    torch.use_deterministic_algorithms(True)


def load_clip(rel: str) -> np.ndarray:
    audio, sr = sf.read(str(AUDIO / rel), dtype="float32")  # int16 / 32768, exactly
    assert sr == 16000 and audio.ndim == 1, (rel, sr, audio.shape)
    return audio


def training_texts() -> list[str]:
    texts = []
    with open(AUDIO / "dev" / "manifest.jsonl", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            texts += [row["text"], row["text_norm"]]
    texts += [JFK_TEXT, JFK_TEXT.lower()]
    return texts


def train_spm(work: Path, prefix: str, vocab: int, specials: list[str]) -> Path:
    import sentencepiece as spm
    corpus = work / f"{prefix}.txt"
    corpus.write_text("\n".join(training_texts()) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(work / prefix), model_type="bpe", vocab_size=vocab,
        hard_vocab_limit=False, character_coverage=1.0, num_threads=1, input_sentence_size=0,
        shuffle_input_sentence=False, unk_id=0, bos_id=-1, eos_id=-1, pad_id=-1,
        user_defined_symbols=specials, byte_fallback=False, minloglevel=2)
    return work / f"{prefix}.model"


def reinit_(model: torch.nn.Module, seed: int) -> None:
    """Seeded weights wider than transformers' init (std 0.02, zero biases, unit norms): random but
    decisive logits, non-trivial biases/norm parameters/BatchNorm statistics, so a re-implementation
    that drops any of them fails."""
    g = torch.Generator().manual_seed(seed)
    sd = model.state_dict()
    seen = set()
    with torch.no_grad():
        for name in sorted(sd):
            t = sd[name]
            if not t.is_floating_point() or t.data_ptr() in seen:
                continue  # a tied tensor (proj_out.weight is the token embedding) is drawn once
            seen.add(t.data_ptr())
            if name.endswith("running_var"):
                t.copy_(0.5 + torch.rand(t.shape, generator=g))
            elif name.endswith("running_mean"):
                t.copy_(0.1 * torch.randn(t.shape, generator=g))
            elif t.ndim == 1 or "bias_u" in name or "bias_v" in name:
                is_norm = any(k in name for k in ("norm", "layernorm")) and name.endswith(".weight")
                t.copy_((1.0 if is_norm else 0.0) + 0.1 * torch.randn(t.shape, generator=g))
            else:
                fan_in = t[0].numel()
                t.copy_(torch.randn(t.shape, generator=g) / math.sqrt(fan_in))


def build() -> None:
    from transformers import (CanaryConfig, CanaryForConditionalGeneration, CanaryProcessor,
                              ParakeetFeatureExtractor, TokenizersBackend)
    from transformers.convert_slow_tokenizer import CanaryConverter

    set_determinism()
    MODEL_DIR.mkdir(parents=True, exist_ok=True)
    for old in MODEL_DIR.iterdir():  # everything save_pretrained wrote last time; the README stays
        if old.name != "README.md":
            shutil.rmtree(old) if old.is_dir() else old.unlink()
    with tempfile.TemporaryDirectory() as tmp:
        sp_model = train_spm(Path(tmp), "canary_spm", SPM_VOCAB, SPECIALS)
        tok_obj = CanaryConverter(str(sp_model)).converted()
    tokenizer = TokenizersBackend(tokenizer_object=tok_obj, clean_up_tokenization_spaces=False,
                                  bos_token="<|startoftranscript|>", eos_token="<|endoftext|>",
                                  pad_token="<pad>", unk_token="<unk>")
    fe = ParakeetFeatureExtractor(feature_size=128, sampling_rate=16000, win_length=400, hop_length=160,
                                  n_fft=512)
    processor = CanaryProcessor(feature_extractor=fe, tokenizer=tokenizer, chat_template=CHAT_TEMPLATE)
    vocab = len(tokenizer)
    config = CanaryConfig(encoder_config=dict(ENCODER), decoder_config=dict(DECODER, vocab_size=vocab),
                          vocab_size=vocab)
    model = CanaryForConditionalGeneration(config).eval()
    reinit_(model, SEED)
    with torch.no_grad():
        model.proj_out.bias[config.eos_token_id] += EOS_BIAS_BOOST
    gc = model.generation_config
    gc.decoder_start_token_id = config.decoder_start_token_id
    gc.bos_token_id, gc.eos_token_id, gc.pad_token_id = (config.bos_token_id, config.eos_token_id,
                                                         config.pad_token_id)
    model.save_pretrained(MODEL_DIR)
    processor.save_pretrained(MODEL_DIR)
    print("built", MODEL_DIR, "vocab", vocab, "params", sum(p.numel() for p in model.parameters()))


def stats(x: torch.Tensor) -> dict:
    x = x.double()
    return {"mean": x.mean().item(), "std": x.std().item(), "min": x.min().item(), "max": x.max().item(),
            "sum": x.sum().item(), "abs_sum": x.abs().sum().item()}


def step_info(logits: tuple, row: int, n_steps: int, eos: int) -> list[dict]:
    out = []
    for s in range(n_steps):
        v, i = torch.topk(logits[s][row].double(), 2)
        lse = torch.logsumexp(logits[s][row].double(), 0).item()
        out.append({"top1_id": int(i[0]), "top1_logit": v[0].item(), "top2_id": int(i[1]),
                    "top2_logit": v[1].item(), "margin": (v[0] - v[1]).item(), "logsumexp": lse,
                    "eos_logit": logits[s][row][eos].item()})
    return out


def teacher_forced(model, inputs, seq: list[int], n_prompt: int) -> dict:
    """Sum of log-softmax log-probs of the generated tokens under one full forward pass (what a beam
    hypothesis' score is built from), and that sum divided by the number of generated tokens."""
    ids = torch.tensor([seq])
    with torch.no_grad():
        logits = model(input_features=inputs["input_features"], attention_mask=inputs["attention_mask"],
                       decoder_input_ids=ids[:, :-1], use_cache=False).logits[0].double()
    logp = torch.log_softmax(logits, -1)[n_prompt - 1:].gather(1, ids[0, n_prompt:, None])[:, 0]
    return {"teacher_forced_sum_logprob": logp.sum().item(),
            "teacher_forced_mean_logprob": (logp.sum() / len(logp)).item()}


def position_table_vs_nemo() -> dict:
    """Compare transformers' CanaryPositionalEmbedding with the fixed table NeMo stores (and uses) in
    ../shared/models/canary-tiny/canary-tiny.nemo (transf_decoder._embedding.position_embedding.pos_enc)."""
    import io
    import tarfile

    from transformers.models.canary.modeling_canary import CanaryPositionalEmbedding
    nemo = SHARED / "models" / "canary-tiny" / "canary-tiny.nemo"
    if not nemo.exists():
        return {"skipped": "canary-tiny.nemo not found"}
    with tarfile.open(nemo) as tf:
        member = next(n for n in tf.getnames() if n.endswith("model_weights.ckpt"))
        sd = torch.load(io.BytesIO(tf.extractfile(member).read()), map_location="cpu", weights_only=True)
    pe = sd["transf_decoder._embedding.position_embedding.pos_enc"]
    length, d = pe.shape
    hf = CanaryPositionalEmbedding(length, d)(torch.arange(length))
    blocks = torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])
    return {"nemo_table_shape": [length, d],
            "max_abs_diff_hf_vs_nemo": (hf - pe).abs().max().item(),
            "max_abs_diff_hf_vs_nemo_channels_as_sin_block_then_cos_block": (hf - pe[:, blocks]).abs().max().item(),
            "nemo_row1_first6": pe[1, :6].tolist(), "hf_row1_first6": hf[1, :6].tolist()}


def strip_after_eos(ids: list[int], eos: int) -> list[int]:
    return ids[: ids.index(eos) + 1] if eos in ids else ids


def refs() -> None:
    from transformers import AutoProcessor, CanaryForConditionalGeneration

    set_determinism()
    processor = AutoProcessor.from_pretrained(MODEL_DIR)
    model = CanaryForConditionalGeneration.from_pretrained(MODEL_DIR).eval()
    tok = processor.tokenizer
    eos = model.generation_config.eos_token_id
    wavs = {rel: load_clip(rel) for rel in CLIPS}

    tasks = {"asr_en_pnc": dict(source_language="en", target_language="en", punctuation=True),
             "asr_en_nopnc": dict(source_language="en", target_language="en", punctuation=False),
             "ast_en_de": dict(source_language="en", target_language="de", punctuation=True)}
    results: dict = {}
    for task, kw in tasks.items():
        for mode, gen_kw in (("greedy", dict(num_beams=1, do_sample=False)),
                             ("beam4", dict(num_beams=4, do_sample=False))):
            per_clip = []
            for rel in CLIPS:
                inputs = processor.apply_transcription_request(audio=wavs[rel], **kw)
                prompt = inputs["decoder_input_ids"][0].tolist()
                # the same prompt by hand through processor(text=...) (what the template renders)
                text_prompt = processor.apply_transcription_request(audio=wavs[rel], tokenize=False, **kw)
                with torch.no_grad():
                    out = model.generate(**inputs, max_new_tokens=MAX_NEW_TOKENS, return_dict_in_generate=True,
                                         output_logits=(mode == "greedy"), output_scores=True, **gen_kw)
                seq = out.sequences[0].tolist()
                gen = seq[len(prompt):]
                rec = {"clip": rel, "n_samples": int(len(wavs[rel])),
                       "prompt_text": text_prompt[0] if isinstance(text_prompt, list) else text_prompt,
                       "decoder_prompt_ids": prompt,
                       "decoder_prompt_tokens": tok.convert_ids_to_tokens(prompt),
                       "sequence_prefix_equals_prompt": seq[:len(prompt)] == prompt,
                       "generated_ids": gen,
                       "generated_tokens": tok.convert_ids_to_tokens(gen),
                       "n_generated": len(gen), "stopped_by_eos": eos in gen,
                       "text": processor.batch_decode([gen], skip_special_tokens=True)[0],
                       "text_with_special": processor.batch_decode([gen], skip_special_tokens=False)[0]}
                if mode == "greedy":
                    rec["steps"] = step_info(out.logits, 0, len(out.logits), eos)
                    rec["min_margin"] = min(s["margin"] for s in rec["steps"])
                    assert [s["top1_id"] for s in rec["steps"]] == gen[: len(rec["steps"])]
                else:
                    rec["sequence_score"] = out.sequences_scores[0].item()
                    rec.update(teacher_forced(model, inputs, seq, len(prompt)))
                if mode == "greedy" and task == "asr_en_pnc":
                    feats = inputs["input_features"]
                    rec["features"] = {"shape": list(feats.shape), "dtype": str(feats.dtype),
                                       "attention_mask_sum": int(inputs["attention_mask"].sum()),
                                       "attention_mask_shape": list(inputs["attention_mask"].shape),
                                       **stats(feats), "first_frame_first8": feats[0, 0, :8].tolist(),
                                       "frame10_mel0_to_4": feats[0, 10, :5].tolist()}
                    with torch.no_grad():
                        enc = model.model.encoder(feats, attention_mask=inputs["attention_mask"])
                    rec["encoder_out"] = {"shape": list(enc.last_hidden_state.shape),
                                          **stats(enc.last_hidden_state),
                                          "row0_first8": enc.last_hidden_state[0, 0, :8].tolist(),
                                          "output_mask_sum": int(enc.attention_mask.sum())}
                per_clip.append(rec)
            results[f"{mode}_{task}"] = {"task_kwargs": kw, "generate_kwargs": dict(
                gen_kw, max_new_tokens=MAX_NEW_TOKENS), "per_clip": per_clip}
            print(mode, task, [(r["n_generated"], r.get("min_margin")) for r in per_clip])

    # one padded batch of the 4 clips (greedy ASR en PnC): padding and masks must not change results
    kw = tasks["asr_en_pnc"]
    batch_audio = [wavs[rel] for rel in CLIPS]
    inputs = processor.apply_transcription_request(audio=batch_audio, **kw)
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=MAX_NEW_TOKENS, num_beams=1, do_sample=False,
                             return_dict_in_generate=True, output_logits=True)
    P = inputs["decoder_input_ids"].shape[1]
    batch = []
    for b, rel in enumerate(CLIPS):
        gen = strip_after_eos(out.sequences[b, P:].tolist(), eos)
        steps = step_info(out.logits, b, len(gen), eos)
        batch.append({"clip": rel, "generated_ids": gen, "text": processor.batch_decode([gen], skip_special_tokens=True)[0],
                      "equals_single_clip_greedy": gen == results["greedy_asr_en_pnc"]["per_clip"][b]["generated_ids"],
                      "min_margin": min(s["margin"] for s in steps)})
    results["greedy_asr_en_pnc_batch4"] = {
        "input_features_shape": list(inputs["input_features"].shape),
        "attention_mask_sums": inputs["attention_mask"].sum(-1).tolist(),
        "sequences_padded": out.sequences.tolist(), "per_clip": batch}

    cfg = model.config
    sd = {k: list(v.shape) for k, v in model.state_dict().items()}
    pos_check = position_table_vs_nemo()
    from safetensors import safe_open
    with safe_open(str(MODEL_DIR / "model.safetensors"), "pt") as f:
        stored = {k: list(f.get_slice(k).get_shape()) for k in f.keys()}
    ref = {
        "made_by": "tools/canary_hf_reference.py (stage refs)", "versions": versions(), "seed": SEED,
        "model_dir": "tests/models/canary-hf-tiny", "max_new_tokens": MAX_NEW_TOKENS,
        "clips": CLIPS,
        "audio_loading": "soundfile float32 (int16 / 32768), 16 kHz mono, passed as numpy arrays",
        "calls": {
            "inputs": "processor.apply_transcription_request(audio=wav, source_language=..., target_language=..., punctuation=...)",
            "generate": "model.generate(**inputs, max_new_tokens=40, num_beams=1|4, do_sample=False, return_dict_in_generate=True, output_logits=True)",
            "text": "processor.batch_decode([generated_ids], skip_special_tokens=True)",
            "steps": "raw logits per generated position (output_logits): top-2 ids/values, margin = top1 - top2, logsumexp"},
        "special_tokens": {t: tok.convert_tokens_to_ids(t) for t in SPECIALS[:24] + ["<unk>", "▁"]},
        "vocab_size": cfg.vocab_size,
        "generation_config": model.generation_config.to_diff_dict(),
        "state_dict_shapes": sd, "safetensors_keys_and_shapes": stored,
        "tied_proj_out_is_embed": model.proj_out.weight.data_ptr() == model.model.decoder.embed_tokens.weight.data_ptr(),
        "decoder_position_table_vs_nemo_canary_tiny": pos_check,
        "results": results,
    }
    REF_DIR.mkdir(parents=True, exist_ok=True)
    (REF_DIR / "reference.json").write_text(json.dumps(ref, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print("wrote", REF_DIR / "reference.json")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stage", choices=["build", "refs", "all"], default="all")
    args = ap.parse_args()
    if args.stage in ("build", "all"):
        build()
    if args.stage in ("refs", "all"):
        refs()


if __name__ == "__main__":
    sys.exit(main())
