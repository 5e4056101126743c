"""int8 (transcribe/quant.py): the layer's arithmetic, row independence, and Parakeet with dtype="int8".

The agreement figures of int8 against float32 on the dev set are measured by
benchmarks/parakeet_int8.py and reported there; these tests hold what must always be true.
"""
from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf
import torch
from torch import nn

import transcribe
from transcribe.errors import ModelError
from transcribe.quant import Int8Linear, quantize_linears

from .conftest import AUDIO, TINY


def _reference(lin: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """The same quantization written plainly in float64: per-output-channel weights, per-row inputs."""
    w = lin.weight.detach().double()
    ws = w.abs().amax(1) / 127
    wq = torch.round(w / ws[:, None])
    x = x.double()
    xs = x.abs().amax(1, keepdim=True) / 127
    xq = torch.round(x / xs)
    return (xq @ wq.t()) * xs * ws + lin.bias.detach().double()


def test_int8_linear_is_the_quantized_product():
    torch.manual_seed(0)
    lin = nn.Linear(96, 40)
    q = Int8Linear.from_linear(lin)
    x = torch.randn(33, 96)
    # The integer products are exact (int32); only the float32 rescaling rounds: a few ulps.
    torch.testing.assert_close(q(x).double(), _reference(lin, x), rtol=1e-5, atol=1e-5)
    # Against float32: the quantization error of 8-bit weights and inputs, about 1 % here.
    y = lin(x).detach()
    rel = float((q(x) - y).norm() / y.norm())
    assert 1e-4 < rel < 0.03


def test_int8_rows_are_independent_and_shapes_kept():
    torch.manual_seed(1)
    q = Int8Linear.from_linear(nn.Linear(64, 24))
    x = torch.randn(5, 7, 64)
    whole = q(x)
    assert whole.shape == (5, 7, 24) and whole.dtype == torch.float32
    for i in range(5):
        assert torch.equal(q(x[i : i + 1]), whole[i : i + 1])  # a batch gives each row what it gets alone
    assert q(x.bfloat16()).dtype == torch.bfloat16
    torch.testing.assert_close(q.forward_transposed(x[0]), whole[0].t(), rtol=1e-6, atol=1e-6)


_SATURATING_CHILD = """
import sys, torch
from transcribe.quant import Int8Linear, int_mm, int_mm_is_exact
torch.manual_seed(0)
a = torch.randint(-127, 128, (37, 640), dtype=torch.int8)
b = torch.randint(-127, 128, (640, 96), dtype=torch.int8)
exact = bool((int_mm(a, b).long() == a.long() @ b.long()).all())
exact_t = bool((int_mm(b.t().contiguous(), a.t()).long() == (a.long() @ b.long()).t()).all())
lin = torch.nn.Linear(640, 96)
x = torch.randn(37, 640)
layer = Int8Linear.from_linear(lin)
torch.save({"probe": int_mm_is_exact(), "exact": exact and exact_t, "y": layer(x), "yt": layer.forward_transposed(x)},
           sys.argv[1])
"""


@pytest.mark.parametrize("isa", ["", "AVX2", "AVX512_CORE"])
def test_int8_products_are_exact_and_equal_on_cpus_without_vnni(isa, tmp_path):
    """oneDNN's int8 kernels without VNNI (ONEDNN_MAX_CPU_ISA forces the ones an AVX2-only or an AVX-512
    CPU without VNNI runs) saturate u8 x s8 pair sums in int16; int_mm detects it and splits the right
    operand, so the int32 products are exact and a layer's output is bitwise what this CPU gives."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "ONEDNN_MAX_CPU_ISA"}
    if isa:
        env["ONEDNN_MAX_CPU_ISA"] = isa
    out = tmp_path / "out.pt"
    r = subprocess.run([sys.executable, "-c", _SATURATING_CHILD, str(out)], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    got = torch.load(out)
    assert got["exact"]
    print(f"ONEDNN_MAX_CPU_ISA={isa or '(unset)'}: torch._int_mm exact for full-range int8: {got['probe']}")
    torch.manual_seed(0)
    torch.randint(-127, 128, (37, 640), dtype=torch.int8), torch.randint(-127, 128, (640, 96), dtype=torch.int8)
    lin = nn.Linear(640, 96)
    x = torch.randn(37, 640)
    layer = Int8Linear.from_linear(lin)
    assert torch.equal(got["y"], layer(x)) and torch.equal(got["yt"], layer.forward_transposed(x))


def test_zero_rows_and_zero_weights():
    lin = nn.Linear(16, 8)
    with torch.no_grad():
        lin.weight[3].zero_()
    q = Int8Linear.from_linear(lin)
    y = q(torch.zeros(2, 16))
    torch.testing.assert_close(y, lin.bias.detach().expand(2, 8))
    assert torch.isfinite(q(torch.randn(4, 16))).all()


def test_quantize_linears_swaps_in_place_and_keeps():
    m = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Sequential(nn.Linear(8, 4), nn.Linear(4, 2)))
    n = quantize_linears(m, keep=lambda name, _: name == "2.1")
    assert n == 2
    assert isinstance(m[0], Int8Linear) and isinstance(m[2][0], Int8Linear) and isinstance(m[2][1], nn.Linear)
    assert m[0].weight_t.dtype == torch.int8 and not list(m[0].parameters())  # the float weight is gone


@pytest.fixture(scope="module")
def tdt_pair():
    path = str(TINY / "tiny-tdt-fit.nemo")
    return transcribe.load_model(path), transcribe.load_model(path, dtype="int8")


def test_parakeet_int8_encoder_close_to_float32(tdt_pair):
    f32, i8 = tdt_pair
    assert isinstance(i8.model.encoder.layers[0].feed_forward1.linear1, Int8Linear)
    assert isinstance(i8.model.encoder.layers[0].conv.pointwise_conv1, Int8Linear)
    assert isinstance(i8.model.joint.enc, Int8Linear)
    audio = sf.read(AUDIO / "jfk.wav", dtype="float32")[0]
    x = torch.from_numpy(audio)[None]
    lens = torch.tensor([x.shape[1]])
    a, la = f32.model.encode(x, lens)
    b, lb = i8.model.encode(x, lens)
    assert torch.equal(la, lb)
    # Measured 1.2 % on the dev set for this model (benchmarks/parakeet_int8.py); 5 % leaves room
    # for other CPUs' float rounding while still failing if a layer were wrong.
    rel = float((a - b).norm() / a.norm())
    assert rel < 0.05, rel
    t32, t8 = f32.transcribe(audio), i8.transcribe(audio)
    assert t8.text and len(t8.tokens) == pytest.approx(len(t32.tokens), rel=0.25)


def test_parakeet_int8_batched_equals_single(tdt_pair):
    _, i8 = tdt_pair
    clips = [sf.read(AUDIO / n, dtype="float32")[0] for n in ("jfk.wav", "ls_2086-149220-0033.wav")]
    clips.append(clips[0][: 16000 * 3])
    single = [i8.transcribe(c) for c in clips]
    batched = i8.transcribe(clips, batch_size=3)
    for s, b in zip(single, batched):
        assert [t.id for t in s.tokens] == [t.id for t in b.tokens]
        assert [t.frame for t in s.tokens] == [t.frame for t in b.tokens]


@pytest.mark.parametrize("name", ["tiny-ctc-fit", "tiny-hybrid-tdt-ctc-fit", "tiny-tdt-streaming-random"])
def test_parakeet_int8_other_heads_run(name):
    m = transcribe.load_model(str(TINY / f"{name}.nemo"), dtype="int8")
    audio = sf.read(AUDIO / "jfk.wav", dtype="float32")[0]
    for head in m.heads:
        assert isinstance(m.transcribe(audio, head=head).text, str)


def test_int8_refused_where_not_implemented():
    with pytest.raises(ModelError, match="int8"):
        transcribe.load_model(str(TINY / "tiny-tdt-fit.nemo"), dtype="int4")
