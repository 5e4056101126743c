"""Hostile files and disks (issue 36, items 1, 2, 13 and parts of 15): an output that is the input, a full
disk, non-regular inputs (FIFOs, symbolic-link loops, devices, pipes), raw-pickle checkpoints, `--lm DIR`
and `--stream -` inputs that are not audio. Each case runs with a time limit (a hang is a failure)."""
from __future__ import annotations

import hashlib
import os
import shutil

import pytest

from .conftest import TINY
from transcribe.convert import main as convert_main


def _digest(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


# -- 1: convert refuses an OUT that is the model itself ----------------------------------------------


@pytest.mark.parametrize("how", ["same", "symlink", "hardlink"])
def test_convert_refuses_to_replace_its_source(how, tmp_path, capsys):
    model = tmp_path / "M.nemo"
    shutil.copyfile(TINY / "tiny-ctc-fit.nemo", model)
    before = _digest(model)
    out = model
    if how == "symlink":
        out = tmp_path / "link.gguf"
        out.symlink_to(model)
    elif how == "hardlink":
        out = tmp_path / "hard.gguf"
        os.link(model, out)
    assert convert_main([str(model), str(out), "--force"]) == 2
    err = capsys.readouterr().err
    assert "is the model being converted" in err and len(err.strip().splitlines()) == 1
    assert _digest(model) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted({model.name, out.name})  # no temporary left
