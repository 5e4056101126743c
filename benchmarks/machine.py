"""What machine a benchmark ran on, as its results record it (standard library only: also imported
under NeMo's and the peers' Pythons)."""
from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo, or "unknown"."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


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
