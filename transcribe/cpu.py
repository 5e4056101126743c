"""What this CPU computes natively, for the choices that depend on it (standard library only).

The speed of each precision on a CPU depends on a few instruction sets (benchmarks/README.md has
the measurements per CPU family):

- AMX (``amx_bf16``, ``amx_int8``: Intel Xeon since Sapphire Rapids): bfloat16 and int8 matrix
  products on tile units;
- AVX512-BF16 (``avx512_bf16``: AMD EPYC since Zen 4, Intel Cooper Lake): bfloat16 dot products in
  vector registers;
- AVX512-VNNI / AVX-VNNI (``avx512_vnni``, ``avx_vnni``): int8 dot products without AVX2's int16
  saturation;
- AVX-512 (``avx512f``) and AVX2 (``avx2``): float32 vectors of 16 and 8 lanes.

A process can be told to use less than the CPU has (the libraries' own switches, used to try other
code paths on one machine): ``ONEDNN_MAX_CPU_ISA`` caps oneDNN (PyTorch's bfloat16 and int8 matrix
products on a CPU), ``ATEN_CPU_CAPABILITY`` PyTorch's own vector kernels, ``MKL_ENABLE_INSTRUCTIONS``
MKL's. `features()` reports what this process can use: the CPU's flags less what those switches
take away.
"""
from __future__ import annotations

import functools
import os

__all__ = ["cpu_model", "cpu_flags", "features", "family", "describe", "FLAG_NAMES"]

# The flags that decide the speed of the precisions, as /proc/cpuinfo names them.
FLAG_NAMES = ("amx_bf16", "amx_int8", "avx512_bf16", "avx512_vnni", "avx_vnni", "avx512f", "avx2")

# oneDNN's ISA names (ONEDNN_MAX_CPU_ISA) and the flags each one may use.
_ONEDNN_ISA = {
    "SSE41": set(),
    "AVX": set(),
    "AVX2": {"avx2"},
    "AVX2_VNNI": {"avx2", "avx_vnni"},
    "AVX2_VNNI_2": {"avx2", "avx_vnni"},
    "AVX512_CORE": {"avx2", "avx512f"},
    "AVX512_CORE_VNNI": {"avx2", "avx512f", "avx512_vnni", "avx_vnni"},
    "AVX512_CORE_BF16": {"avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16"},
    "AVX10_1_512": {"avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16"},
    "AVX512_CORE_FP16": {"avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16"},
    "AVX10_1_512_AMX": set(FLAG_NAMES),
    "AVX512_CORE_AMX": set(FLAG_NAMES),
    "AVX10_1_512_AMX_FP16": set(FLAG_NAMES),
    "AVX512_CORE_AMX_FP16": set(FLAG_NAMES),
    "AVX10_2_512": set(FLAG_NAMES),
    "AVX10_2_512_AMX_2": set(FLAG_NAMES),
}


@functools.lru_cache(maxsize=None)
def _cpuinfo() -> tuple[str, frozenset]:
    model, flags = "unknown", frozenset()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name") and model == "unknown":
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags") and not flags:
                    flags = frozenset(line.split(":", 1)[1].split())
                if model != "unknown" and flags:
                    break
    except OSError:
        pass
    return model, flags


def cpu_model() -> str:
    """The CPU's model name ("unknown" where /proc/cpuinfo cannot be read)."""
    return _cpuinfo()[0]


def cpu_flags() -> frozenset:
    """All the CPU's feature flags from /proc/cpuinfo (empty where it cannot be read)."""
    return _cpuinfo()[1]


def features(environ=None) -> dict[str, bool]:
    """Each of FLAG_NAMES: whether this process can use it (the CPU has it and no switch in the
    environment (`environ`, default os.environ) caps it away)."""
    env = os.environ if environ is None else environ
    have = {name: name in cpu_flags() for name in FLAG_NAMES}
    isa = env.get("ONEDNN_MAX_CPU_ISA", "").strip().upper()
    allowed = _ONEDNN_ISA.get(isa)
    if allowed is not None:
        for name in ("amx_bf16", "amx_int8", "avx512_bf16", "avx512_vnni", "avx_vnni"):
            have[name] = have[name] and name in allowed
    aten = env.get("ATEN_CPU_CAPABILITY", "").strip().lower()
    mkl = env.get("MKL_ENABLE_INSTRUCTIONS", "").strip().upper()
    if aten in ("default", "avx2") or mkl in ("SSE4_2", "AVX", "AVX2"):
        have["avx512f"] = False
    if aten == "default" or mkl in ("SSE4_2", "AVX"):
        have["avx2"] = False
    return have


def family(environ=None) -> str:
    """The CPU family as the benchmarks group their figures: "amx" (AMX-BF16), "avx512_bf16"
    (AVX512-BF16 without AMX), "avx512" (AVX-512 without BF16), "avx2", or "other"."""
    f = features(environ)
    if f["amx_bf16"]:
        return "amx"
    if f["avx512_bf16"]:
        return "avx512_bf16"
    if f["avx512f"]:
        return "avx512"
    if f["avx2"]:
        return "avx2"
    return "other"


def describe(environ=None) -> dict:
    """The model, the family and the flags that matter, for a benchmark's record."""
    f = features(environ)
    return {"cpu_model": cpu_model(), "cpu_family": family(environ),
            "cpu_flags": [name for name in FLAG_NAMES if f[name]], "cpu_count": os.cpu_count()}
