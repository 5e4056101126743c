"""The README's first Python example runs as written with the default model and prints what it
promises: the text, then one line per word with its start, end and probability."""
from __future__ import annotations

import os
import re
import subprocess
import sys

from .conftest import REPO


def test_readme_python_example_prints_text_and_timed_words(default_whisper_dir):
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", readme, re.S).group(1)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300,
                         env=dict(os.environ, HF_HUB_OFFLINE="1"))
    assert out.returncode == 0, out.stderr
    text, *lines = out.stdout.strip().splitlines()
    assert text.startswith("The quick brown fox") and text == text.strip()
    words = [re.fullmatch(r"\s*(\d+\.\d\d)\s+(\d+\.\d\d) (\d\.\d\d) (\S+)", line) for line in lines]
    assert all(words) and len(words) == len(text.split())
    assert [m.group(4) for m in words] == text.split()
    times = [(float(m.group(1)), float(m.group(2))) for m in words]
    assert all(a <= b for a, b in times) and all(times[i][1] <= times[i + 1][0] + 1e-9 for i in range(len(times) - 1))
