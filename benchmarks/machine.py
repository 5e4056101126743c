"""What machine a benchmark ran on, as its results record it (standard library only: also imported
under NeMo's and the peers' Pythons)."""
from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _cpu_module():
    """transcribe/cpu.py loaded by its path (standard library only): the package's own view of the CPU,
    without importing the package (this file also runs under NeMo's and the peers' Pythons)."""
    import importlib.util
    import sys

    name = "_transcribe_cpu"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO / "transcribe" / "cpu.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo, or "unknown"."""
    return _cpu_module().cpu_model()


def cpu_info() -> dict:
    """What a benchmark records of its CPU: cpu_model, cpu_family ("amx", "avx512_bf16", "avx512",
    "avx2", "other": what benchmarks/README.md groups figures by), cpu_flags (those of AMX-BF16,
    AMX-INT8, AVX512-BF16, AVX512-VNNI, AVX-VNNI, AVX-512F, AVX2 this process may use: the CPU's,
    less what ONEDNN_MAX_CPU_ISA / ATEN_CPU_CAPABILITY / MKL_ENABLE_INSTRUCTIONS take away) and
    cpu_count."""
    return _cpu_module().describe()


def cpu_line() -> str:
    """cpu_info() in one line for a printed header: "AMD EPYC (avx512_bf16: avx512_bf16 avx512_vnni ...; 2 cores)"."""
    c = cpu_info()
    return f"{c['cpu_model']} ({c['cpu_family']}: {' '.join(c['cpu_flags']) or 'none of the listed flags'}; {c['cpu_count']} cores)"


def package_commit() -> str:
    """The repository's HEAD, with "+dirty" when transcribe/ has uncommitted changes."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "transcribe"], cwd=REPO, capture_output=True,
                               text=True).stdout.strip()
        return head + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def write_result(path, record: dict) -> None:
    """A benchmark's JSON record at `path` (its folder made), with the CPU (cpu_info) and the package's
    commit added, and a line saying so."""
    import json

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"package_commit": package_commit(), **cpu_info(), **record}, indent=1) + "\n")
    print(f"\nwritten {path}")
