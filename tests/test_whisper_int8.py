"""int8 Whisper (`load_model(dtype="int8")`, transcribe/whisper/int8.py).

What is checked: the int8 linear layer's rows do not depend on the rows they are batched with (bit
for bit), its products are within int8's error of the float ones, the int8 model transcribes the
real speech samples as the float32 model does (same words after normalisation; the dev-set WER is
the benchmark's, benchmarks/README.md), the float32 model is untouched by the option, and the
host process's settings are left alone. No timing is asserted here.
"""
from __future__ import annotations

import re
import threading

import numpy as np
import pytest
import torch

from transcribe.whisper.int8 import Int8Embedding, RowInt8Linear, fbgemm_available

from .conftest import AUDIO

needs_fbgemm = pytest.mark.skipif(not fbgemm_available(), reason="this PyTorch has no fbgemm dynamic int8 kernel")


def words(text: str) -> list[str]:
    return re.sub(r"[^a-z0-9' ]", " ", text.lower()).split()


@needs_fbgemm
@pytest.mark.parametrize("n,k", [(384, 384), (1536, 384), (384, 1536), (1000, 64)])
def test_row_int8_rows_independent_of_batch(n, k):
    torch.manual_seed(n + k)
    w = torch.randn(n, k) * 0.05
    b = torch.randn(n)
    layer = RowInt8Linear(w, b)
    # rows of very different magnitudes: a shared activation scale would change the small ones
    x = torch.randn(7, k) * torch.tensor([1e-3, 1.0, 50.0, 0.2, 3.0, 1e2, 0.01])[:, None]
    together = layer(x)
    alone = torch.cat([layer(x[i : i + 1]) for i in range(7)])
    assert torch.equal(together, alone)
    # and in another company: reversed, and with a huge row added
    mixed = layer(torch.cat([x.flip(0), torch.full((1, k), 1e4)]))[:7].flip(0)
    assert torch.equal(mixed, alone)
    ref = x @ w.t() + b
    for i in range(7):
        # int8 weights and activations: about 1 % of the row's scale (measured 1.0-1.2 %)
        err = (together[i] - ref[i]).norm() / (x[i] @ w.t()).norm()
        assert err < 0.03, (i, err)


@needs_fbgemm
def test_row_int8_shapes_and_zero_rows():
    w = torch.randn(16, 8)
    layer = RowInt8Linear(w, None)
    x = torch.zeros(2, 3, 8)
    y = layer(x)
    assert y.shape == (2, 3, 16)
    assert torch.equal(y, torch.zeros(2, 3, 16))  # an all-zero row gives zeros, not NaN


def test_int8_embedding_lookup_and_projection():
    torch.manual_seed(0)
    w = torch.randn(50, 16)
    for fast in ([False, True] if fbgemm_available() else [False]):
        emb = Int8Embedding(w, fast)
        ids = torch.tensor([[0, 7, 49]])
        rows = emb(ids)
        assert rows.shape == (1, 3, 16) and rows.dtype == torch.float32
        # int8 per row: each value within half a step (absmax / 254) of the float one
        step = w.abs().amax(dim=1) / 127
        assert ((rows[0] - w[ids[0]]).abs() <= step[ids[0]][:, None] / 2 + 1e-7).all()
        x = torch.randn(4, 16)
        logits = emb.project(x)
        ref = x @ w.t()
        assert ((logits - ref).norm(dim=1) / ref.norm(dim=1)).max() < 0.03


@pytest.fixture(scope="module")
def models():
    import transcribe

    return transcribe.load_model(), transcribe.load_model(dtype="int8")


def test_int8_model_is_quantized_and_fp32_is_not(models):
    fp32, int8 = models
    assert int8.quantized and not fp32.quantized
    assert isinstance(int8.model.decoder.token_embedding, Int8Embedding)
    assert isinstance(fp32.model.decoder.token_embedding, torch.nn.Embedding)
    floats = [n for n, m in fp32.model.named_modules() if isinstance(m, torch.nn.Linear)]
    assert len(floats) > 40 and not any(isinstance(m, torch.nn.Linear) for m in int8.model.modules())
    # the int8 model holds less: its tensors (the token table's int8 rows, 20 MB, and its float16
    # lookup copy, 40 MB, the float layer norms and position tables; fbgemm's packed int8 weights
    # are not tensors and are not counted) against the float32 model's (measured 0.58)
    size = lambda m: sum(t.numel() * t.element_size() for t in list(m.model.parameters()) + list(m.model.buffers()))
    assert size(int8) < 0.65 * size(fp32)
    assert int8.model.decoder.token_embedding.table.dtype == torch.float16


@pytest.mark.parametrize("name", ["jfk.wav", "ls_2086-149220-0033.wav"])
def test_int8_transcribes_as_fp32(models, name):
    fp32, int8 = models
    a = fp32.transcribe(str(AUDIO / name))
    b = int8.transcribe(str(AUDIO / name))
    assert words(b.text) == words(a.text)
    assert len(b.segments) >= 1
    for s in b.segments:
        assert 0 <= s.start <= s.end <= b.duration + 0.02


def test_int8_beam_and_words(models):
    _, int8 = models
    r = int8.transcribe(str(AUDIO / "jfk.wav"), beam_size=5, word_timestamps=True)
    assert "country" in words(r.text)
    assert r.words and all(w.start <= w.end for w in r.words)
    assert all(a.start <= b.start for a, b in zip(r.words, r.words[1:]))


def test_int8_batched_equals_alone(models):
    _, int8 = models
    from transcribe.audio import load_audio

    clips = [load_audio(str(AUDIO / n)) for n in ("jfk.wav", "ls_2086-149220-0033.wav")]
    together = int8.transcribe(clips, batch_size=2)
    alone = [int8.transcribe(c) for c in clips]
    for t, a in zip(together, alone):
        assert t.text == a.text
        assert [(s.start, s.end) for s in t.segments] == [(s.start, s.end) for s in a.segments]


def test_int8_leaves_host_settings_alone(models):
    _, int8 = models
    threads = torch.get_num_threads()
    engine = torch.backends.quantized.engine
    int8.transcribe(str(AUDIO / "jfk.wav"))
    assert torch.get_num_threads() == threads
    assert torch.backends.quantized.engine == engine


def test_int8_shared_between_threads(models):
    _, int8 = models
    want = int8.transcribe(str(AUDIO / "jfk.wav")).text
    got = [None] * 3

    def run(i):
        got[i] = int8.transcribe(str(AUDIO / "jfk.wav")).text

    ts = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert got == [want] * 3


def test_attend_prefixed_equals_attention_over_joined_keys():
    from transcribe.whisper.model import MultiHeadAttention

    torch.manual_seed(3)
    attn = MultiHeadAttention(64, 4).eval()
    x = torch.randn(5, 1, 64)
    pk, pv = torch.randn(1, 4, 7, 16), torch.randn(1, 4, 7, 16)
    k, v = torch.randn(5, 4, 3, 16), torch.randn(5, 4, 3, 16)
    with torch.no_grad():
        got = attn.attend_prefixed(x, None, pk, pv, k, v)
        want = attn.attend(x, torch.cat([pk.expand(5, -1, -1, -1), k], 2), torch.cat([pv.expand(5, -1, -1, -1), v], 2),
                           None)
    assert torch.allclose(got, want, atol=1e-5, rtol=1e-5)


def test_int8_shared_prefix_beam_matches_unshared(models, monkeypatch):
    # beams computing their forced tokens once (the int8 default) against each beam its own copy
    _, int8 = models
    a = int8.transcribe(str(AUDIO / "jfk.wav"), beam_size=5)
    monkeypatch.setattr(int8.model.decoder, "shared_prefix", False)
    b = int8.transcribe(str(AUDIO / "jfk.wav"), beam_size=5)
    assert words(a.text) == words(b.text)
    assert a.segments[0].avg_logprob == pytest.approx(b.segments[0].avg_logprob, abs=0.02)


def test_int8_without_fbgemm_falls_back_to_int_mm(monkeypatch, models):
    # where fbgemm's kernel is missing (and on a GPU) every layer is transcribe.quant.Int8Linear
    import transcribe
    import transcribe.whisper.int8 as int8_module
    from transcribe.quant import Int8Linear

    monkeypatch.setattr(int8_module, "fbgemm_available", lambda: False)
    m = transcribe.load_model(dtype="int8")
    assert not any(isinstance(x, RowInt8Linear) for x in m.model.modules())
    assert isinstance(m.model.decoder.token_embedding.proj, Int8Linear)
    x = torch.randn(2, 384)
    ref = x @ m.model.decoder.token_embedding.weight.t()
    got = m.model.decoder.token_embedding.project(x)
    assert ((got - ref).norm(dim=1) / ref.norm(dim=1)).max() < 0.03
    assert words(m.transcribe(str(AUDIO / "jfk.wav")).text) == words(models[0].transcribe(str(AUDIO / "jfk.wav")).text)
