"""The shared building blocks of transcribe/modules.py that decoders use for speed: `fused_linear` (several linear
layers on one input as one product) and `kv_append` (a self-attention cache grown in place) give what the plain
forms give."""
from __future__ import annotations

import torch
from torch import nn

from transcribe.modules import fused_linear, kv_append
from transcribe.quant import HalfLinear, Int8Linear


def _layers():
    torch.manual_seed(0)
    return [nn.Linear(16, 8), nn.Linear(16, 8), nn.Linear(16, 4, bias=False)]


def test_fused_linear_is_the_layers_side_by_side():
    layers = _layers()
    x = torch.randn(5, 16)
    ref = torch.cat([m(x) for m in layers], dim=-1).detach()
    cache: dict = {}
    fused = fused_linear(cache, layers)
    # float32: the same dot products, only the product's blocking may differ (a few ulps)
    torch.testing.assert_close(fused(x), ref, rtol=1e-6, atol=1e-6)
    assert fused_linear(cache, layers) is fused  # made once
    # the layers' own weights are now views of the fused weight, and still give their outputs
    assert all(m.weight.untyped_storage().data_ptr() == fused.weight.untyped_storage().data_ptr() for m in layers)
    torch.testing.assert_close(torch.cat([m(x) for m in layers], dim=-1), ref, rtol=0, atol=0)

    # int8: one quantization of each input row for all three; the int32 products and the rescaling are the same
    q = [Int8Linear.from_linear(m) for m in layers]
    ref8 = torch.cat([m(x) for m in q], dim=-1)
    fused8 = fused_linear(cache, q)
    assert fused8 is not fused and isinstance(fused8, Int8Linear)  # new layers: made again
    torch.testing.assert_close(fused8(x), ref8, rtol=1e-6, atol=1e-6)

    # other kinds run one after the other
    h = [HalfLinear(m.weight, m.bias) for m in layers]
    assert torch.equal(fused_linear({}, h)(x), torch.cat([m(x) for m in h], dim=-1))


def test_kv_append_grows_as_concatenation_does():
    torch.manual_seed(1)
    held, length = None, 0
    ks, vs = [], []
    for n in (5, 1, 1, 60, 1, 3):  # a prompt, steps, a jump past the first capacity
        k, v = torch.randn(2, 3, n, 4), torch.randn(2, 3, n, 4)
        held, kk, vv = kv_append(held, length, k, v)
        ks.append(k)
        vs.append(v)
        length += n
        assert torch.equal(kk, torch.cat(ks, dim=2)) and torch.equal(vv, torch.cat(vs, dim=2))
        assert held[0].shape[2] >= length
    # cutting back (a rejected draft) and writing again overwrites the tail
    length -= 3
    k, v = torch.zeros(2, 3, 1, 4), torch.zeros(2, 3, 1, 4)
    held, kk, _ = kv_append(held, length, k, v)
    assert torch.equal(kk[:, :, :length], torch.cat(ks, dim=2)[:, :, :length]) and not kk[:, :, length:].any()
