"""A small random multilingual Whisper, made the same way in our venv and in openai-whisper's.

Imported by tests/test_whisper_multilingual.py and, by path, by
tools/whisper_multilingual_reference.py (run with openai-whisper's venv): it needs only torch and
json. The weights come from a seeded torch.Generator on the CPU, so with the same torch version
both sides build identical tensors and nothing big is committed.

- The decoder holds 64 tokens (openai-whisper samples n_text_ctx // 2 = 32 per window), which
  keeps the decoding tests fast.
- `random_multilingual_state(seed, n_vocab)`: (dims dict, state dict in openai-whisper's names).
  n_vocab 51865 is the 99-language layout (80 mels), 51866 the large-v3 one (100 languages with
  Cantonese, 128 mels).
- `multilingual_tokenizer_json(english_json, n_vocab)`: the English-only tokenizer.json (tiny.en,
  GPT-2 vocabulary) rewritten into the multilingual numbering of the special tokens. Its ordinary
  tokens are GPT-2's, not those of openai-whisper's multilingual.tiktoken: compare ids, not texts.
"""
from __future__ import annotations

import json
import math

import torch

# openai-whisper's LANGUAGES order (whisper/tokenizer.py): the order of the language tokens.
LANGUAGE_CODES = (
    "en zh de es ru ko fr ja pt tr pl ca nl ar sv it id hi fi vi he uk el ms cs ro da hu ta no th ur "
    "hr bg lt la mi ml cy sk te fa lv bn sr az sl kn et mk br eu is hy ne mn bs kk sq sw gl mr pa si "
    "km sn yo so af oc ka be tg sd gu am yi lo uz fo ht ps tk nn mt sa lb my bo tl mg as tt haw ln ha "
    "ba jw su yue"
).split()

N_TEXT_TOKENS = 50257  # ordinary tokens of the multilingual vocabulary (ids 0 .. 50256)


def n_languages(n_vocab: int) -> int:
    """openai-whisper's Whisper.num_languages for a multilingual vocabulary size."""
    if n_vocab < 51865:
        raise ValueError("not a multilingual vocabulary")
    return n_vocab - 51765 - 1


def random_dims(n_vocab: int = 51865) -> dict:
    return dict(
        n_mels=128 if n_vocab >= 51866 else 80,
        n_audio_ctx=1500, n_audio_state=64, n_audio_head=4, n_audio_layer=2,
        n_vocab=n_vocab,
        n_text_ctx=64, n_text_state=64, n_text_head=4, n_text_layer=2,
    )


def _sinusoids(length: int, channels: int) -> torch.Tensor:
    step = math.log(10000.0) / (channels // 2 - 1)
    inv = torch.exp(-step * torch.arange(channels // 2, dtype=torch.float32))
    t = torch.arange(length, dtype=torch.float32)[:, None] * inv[None, :]
    return torch.cat([torch.sin(t), torch.cos(t)], dim=1)


def _shapes(d: dict) -> list[tuple[str, tuple, str]]:
    """(name, shape, kind) of every tensor of openai-whisper's state dict, in a fixed order."""
    out = []

    def linear(name, n_in, n_out, bias=True):
        out.append((f"{name}.weight", (n_out, n_in), "linear"))
        if bias:
            out.append((f"{name}.bias", (n_out,), "bias"))

    def ln(name, n):
        out.append((f"{name}.weight", (n,), "ln_weight"))
        out.append((f"{name}.bias", (n,), "bias"))

    def block(prefix, n, cross):
        for att in ("attn", "cross_attn") if cross else ("attn",):
            linear(f"{prefix}.{att}.query", n, n)
            linear(f"{prefix}.{att}.key", n, n, bias=False)
            linear(f"{prefix}.{att}.value", n, n)
            linear(f"{prefix}.{att}.out", n, n)
            ln(f"{prefix}.{att}_ln", n)
        linear(f"{prefix}.mlp.0", n, 4 * n)
        linear(f"{prefix}.mlp.2", 4 * n, n)
        ln(f"{prefix}.mlp_ln", n)

    na, nt = d["n_audio_state"], d["n_text_state"]
    out.append(("encoder.conv1.weight", (na, d["n_mels"], 3), "conv"))
    out.append(("encoder.conv1.bias", (na,), "bias"))
    out.append(("encoder.conv2.weight", (na, na, 3), "conv"))
    out.append(("encoder.conv2.bias", (na,), "bias"))
    out.append(("encoder.positional_embedding", (d["n_audio_ctx"], na), "sinusoids"))
    for i in range(d["n_audio_layer"]):
        block(f"encoder.blocks.{i}", na, False)
    ln("encoder.ln_post", na)
    out.append(("decoder.token_embedding.weight", (d["n_vocab"], nt), "token_embedding"))
    out.append(("decoder.positional_embedding", (d["n_text_ctx"], nt), "positional"))
    for i in range(d["n_text_layer"]):
        block(f"decoder.blocks.{i}", nt, True)
    ln("decoder.ln", nt)
    return out


def random_multilingual_state(seed: int = 0, n_vocab: int = 51865) -> tuple[dict, dict[str, torch.Tensor]]:
    """(dims, state dict) of a small random multilingual Whisper, float32, deterministic in `seed`.

    Scales keep every layer's activations of order one, and token embeddings large enough
    (logits with a spread of a few units) that the language choices are clear (log-probability
    leads >= 0.13) and the next-token choices of the reference cases, though some are close
    (leads down to 5.4e-4, beam rankings to 1.3e-4), stay 10x or more above float noise (see
    test_whisper_multilingual.test_decode_window).
    """
    n_languages(n_vocab)
    d = random_dims(n_vocab)
    g = torch.Generator().manual_seed(seed)
    sd = {}
    for name, shape, kind in _shapes(d):
        if kind == "sinusoids":
            sd[name] = _sinusoids(*shape)
            continue
        r = torch.randn(shape, generator=g, dtype=torch.float32)
        if kind == "linear":
            sd[name] = r * (1.0 / math.sqrt(shape[1]))
        elif kind == "conv":
            sd[name] = r * (1.0 / math.sqrt(shape[1] * shape[2]))
        elif kind == "bias":
            sd[name] = r * 0.05
        elif kind == "ln_weight":
            sd[name] = 1.0 + r * 0.1
        elif kind == "token_embedding":
            sd[name] = r * 0.12
        elif kind == "positional":
            sd[name] = r * 0.5
        else:  # pragma: no cover
            raise AssertionError(kind)
    return d, sd


def multilingual_specials(n_vocab: int = 51865) -> list[str]:
    """The special tokens of the multilingual vocabulary from id 50257 on (timestamps left out)."""
    langs = LANGUAGE_CODES[: n_languages(n_vocab)]
    return (["<|endoftext|>", "<|startoftranscript|>"] + [f"<|{c}|>" for c in langs]
            + ["<|translate|>", "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", "<|nospeech|>", "<|notimestamps|>"])


def multilingual_tokenizer_json(english_json: str, n_vocab: int = 51865) -> str:
    """tiny.en's tokenizer.json with the multilingual numbering: 50257 ordinary tokens (GPT-2's
    50256 and one placeholder at 50256 where <|endoftext|> was), then the special tokens."""
    d = json.loads(english_json)
    vocab = d["model"]["vocab"]
    old_eot = vocab.pop("<|endoftext|>")
    if old_eot != N_TEXT_TOKENS - 1:
        raise ValueError("expected the English-only layout (<|endoftext|> = 50256)")
    vocab["<multilingual placeholder 50256>"] = old_eot
    template = {k: v for k, v in d["added_tokens"][0].items() if k not in ("id", "content")}
    ids = {}
    d["added_tokens"] = []
    for i, name in enumerate(multilingual_specials(n_vocab)):
        ids[name] = N_TEXT_TOKENS + i
        d["added_tokens"].append({"id": N_TEXT_TOKENS + i, "content": name, **template})
    pp = d.get("post_processor") or {}
    for name, entry in (pp.get("special_tokens") or {}).items():
        entry["ids"] = [ids[name]]
    return json.dumps(d, ensure_ascii=False)
