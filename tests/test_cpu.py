"""transcribe/cpu.py (what the CPU computes natively, less what the libraries' switches take away) and
load_model(dtype="auto"), the fastest precision measured per CPU family."""
from __future__ import annotations

import pytest
import torch

import transcribe
from transcribe import cpu
from transcribe.quant import Int8Linear

from .conftest import AUDIO, TINY

TDT = str(TINY / "tiny-tdt-fit.nemo")


def test_flags_and_family_follow_proc_cpuinfo():
    f = cpu.features({})
    assert set(f) == set(cpu.FLAG_NAMES)
    assert all(f[name] == (name in cpu.cpu_flags()) for name in cpu.FLAG_NAMES)
    d = cpu.describe({})
    assert d["cpu_model"] == cpu.cpu_model() and d["cpu_family"] == cpu.family({})
    assert d["cpu_flags"] == [n for n in cpu.FLAG_NAMES if f[n]]
    if f["amx_bf16"]:
        assert cpu.family({}) == "amx"
    elif f["avx512_bf16"]:
        assert cpu.family({}) == "avx512_bf16"
    print(f"{cpu.cpu_model()}: family {cpu.family({})}, flags {d['cpu_flags']}")


def test_library_switches_take_features_away(monkeypatch):
    every = frozenset(cpu.FLAG_NAMES)
    monkeypatch.setattr(cpu, "cpu_flags", lambda: every)
    assert cpu.family({}) == "amx"
    assert cpu.family({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}) == "avx512_bf16"
    assert cpu.family({"ONEDNN_MAX_CPU_ISA": "avx512_core"}) == "avx512"
    f = cpu.features({"ONEDNN_MAX_CPU_ISA": "AVX2_VNNI"})
    assert f["avx_vnni"] and not f["avx512_vnni"] and not f["avx512_bf16"] and not f["amx_int8"]
    assert cpu.family({"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}) == "avx2"
    assert cpu.family({"MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}) == "avx2"
    assert cpu.family({"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41"}) == "other"
    assert cpu.family({"ONEDNN_MAX_CPU_ISA": "NOT_AN_ISA"}) == "amx"  # an unknown value caps nothing
    monkeypatch.setattr(cpu, "cpu_flags", lambda: frozenset({"avx2", "fma"}))
    assert cpu.family({}) == "avx2" and cpu.describe({})["cpu_flags"] == ["avx2"]
    monkeypatch.setattr(cpu, "cpu_flags", lambda: frozenset())
    assert cpu.family({}) == "other"


def _kind(model) -> str:
    layers = list(model.model.modules())
    if any(isinstance(x, Int8Linear) for x in layers):
        return "int8"
    return str(next(p.dtype for n, p in model.model.named_parameters() if n.startswith("encoder.")))


@pytest.mark.parametrize("family,want", [("amx", "torch.bfloat16"), ("avx512_bf16", "int8"), ("avx512", "int8"),
                                         ("avx2", "int8"), ("other", "torch.float32")])
def test_auto_dtype_takes_the_fastest_measured_for_the_cpu(monkeypatch, family, want):
    monkeypatch.setattr(cpu, "family", lambda environ=None: family)
    model = transcribe.load_model(TDT, dtype="auto")
    assert _kind(model) == want
    assert model.transcribe(str(AUDIO / "jfk.wav")).text  # it runs


def test_auto_dtype_through_the_command_line(tmp_path):
    from transcribe import cli

    assert cli.main([str(AUDIO / "jfk.wav"), "-m", TDT, "--dtype", "auto", "-q", "-o", str(tmp_path)]) == 0
    assert (tmp_path / "jfk.txt").read_text().strip()


def test_unknown_dtype_names_auto():
    with pytest.raises(transcribe.ModelError, match="auto"):
        transcribe.load_model(TDT, dtype="fastest")


def test_float32_stays_the_default():
    assert _kind(transcribe.load_model(TDT)) == str(torch.float32)
