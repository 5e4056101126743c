"""The README and `--help` say what the package is: every subcommand, every option of the command's
synopsis, every short model name, and a layout whose modules exist where it puts them (and that names
every module of the package)."""
from __future__ import annotations

import re
import subprocess
import sys

from .conftest import REPO

README = (REPO / "README.md").read_text(encoding="utf-8")


def _block_after(heading: str) -> str:
    """The first ``` block after `heading`."""
    at = README.index(heading)
    return re.search(r"```[a-z]*\n(.*?)```", README[at:], re.S).group(1)


def test_help_names_every_command_and_family():
    out = subprocess.run([sys.executable, "-m", "transcribe", "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    text = " ".join(out.stdout.split())
    for word in ("serve", "batch", "convert", "--stream", "Whisper", "Parakeet", "Granite Speech NAR"):
        assert word in text, word
    assert "Parakeet or Whisper model" not in text


def test_synopsis_lists_every_option_of_the_command():
    from transcribe.cli import _parser

    synopsis = _block_after("## Command line").split("transcribe serve")[0]  # the command's own lines
    shown = set(re.findall(r"(?<![\w-])--?[a-z][a-z0-9-]*", synopsis))
    actions = [set(action.option_strings) for action in _parser()._actions if action.option_strings]
    missing = [sorted(a) for a in actions if not a & shown]
    assert missing == [], "options missing from the README's synopsis"
    known = set().union(*actions)
    assert {s for s in shown if s.startswith("--")} - known == set(), "the synopsis names options the command lacks"


def test_every_short_name_is_listed():
    from transcribe.hub import ALIASES

    at = README.index("- Short names:")
    listed = README[at: README.index("\n- ", at + 1)]
    names = set(re.findall(r"`([a-z0-9._-]+)`", listed))
    assert set(ALIASES) - names == set()


def test_layout_puts_every_module_where_it_is():
    tree = _block_after("## Layout")
    pkg = REPO / "transcribe"
    folder = ""
    named = set()
    for line in tree.splitlines()[1:]:
        m = re.match(r"^  (\w+)/ ", line)
        if m:
            folder = m.group(1)
        elif re.match(r"^  \S", line):  # a line of top-level modules
            folder = ""
        elif not line.startswith("   "):
            continue
        text = re.sub(r"\([^()]*\)", "", re.sub(r"\([^()]*\)", "", line))  # names inside parentheses are words
        for name in re.findall(r"\b(\w+\.py)\b", text):
            path = pkg / folder / name
            assert path.is_file(), f"the README's layout puts {name} in transcribe/{folder}: no such file"
            named.add(path.relative_to(pkg).as_posix())
    folders = set(re.findall(r"^  (\w+)/ ", tree, re.M))
    for path in pkg.rglob("*.py"):
        rel = path.relative_to(pkg)
        if rel.name == "__init__.py" and rel.parent.as_posix() != ".":
            continue
        if len(rel.parts) > 2 or (len(rel.parts) == 2 and rel.parts[0] not in folders):
            continue  # deeper folders (whisper/checkpoints/) are named as a whole
        if rel.parts[0] in ("__main__.py",):
            continue
        assert rel.as_posix() in named, f"transcribe/{rel.as_posix()} is missing from the README's layout"
