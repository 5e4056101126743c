"""A .nemo's weights mapped where they lie (transcribe/nemo/mapped_ckpt.py): the same state dict as torch.load's,
each storage a private mapping of its own bytes of the archive, and torch.load where the archive is not stored so."""
from __future__ import annotations

import io
import os
import tarfile
import zipfile
from pathlib import Path

import pytest
import torch

from transcribe.errors import ModelError
from transcribe.nemo.checkpoint import WEIGHTS, read_nemo
from transcribe.nemo.mapped_ckpt import read_mapped

SHARED = Path(__file__).resolve().parents[2] / "shared" / "models"
NEMOS = sorted((SHARED / "parakeet-tiny").glob("*.nemo"))[:3] + sorted((SHARED / "canary-tiny").glob("*.nemo"))[:1]


def _reference(path: Path) -> dict:
    with tarfile.open(path) as t:
        m = next(m for m in t if Path(m.name).name == WEIGHTS)
        return torch.load(t.extractfile(m), map_location="cpu", weights_only=True)


def _file_maps(path: Path) -> list[tuple[int, int, str]]:
    """This process's mappings of `path` (Linux's /proc/self/maps): (start, end, permissions)."""
    out = []
    for line in Path("/proc/self/maps").read_text().splitlines():
        part = line.split(maxsplit=5)
        if len(part) == 6 and part[5] == str(path.resolve()):
            lo, hi = (int(x, 16) for x in part[0].split("-"))
            out.append((lo, hi, part[1]))
    return out


@pytest.mark.parametrize("path", NEMOS, ids=lambda p: p.name)
def test_the_mapped_state_dict_is_torch_load_s(path):
    """Every tensor: the same name, dtype, shape, strides and values (bit for bit) as torch.load's."""
    want = _reference(path)
    got = read_nemo(path).state_dict
    assert list(got) == list(want)
    for k, v in want.items():
        g = got[k]
        assert (g.dtype, g.shape, g.stride(), g.storage_offset()) == (v.dtype, v.shape, v.stride(), v.storage_offset()), k
        assert torch.equal(g, v), k


def test_each_storage_is_a_private_mapping_of_the_archive_and_goes_with_its_tensors(tmp_path):
    """No copy in the heap: each tensor's bytes lie in a private (copy-on-write) mapping of the .nemo; writing to
    a tensor changes neither the file nor a fresh read; once the tensors are dropped, the mappings are gone."""
    path = tmp_path / "m.nemo"
    path.write_bytes(NEMOS[0].read_bytes())
    before = path.read_bytes()
    fds = len(os.listdir("/proc/self/fd"))
    sd = read_nemo(path).state_dict
    maps = _file_maps(path)
    assert len(maps) > 50
    # the mappings hold no file descriptors (Python's mmap keeps one per mapping: a 0.6B model's thousand
    # tensors would hold a thousand, against a common limit of 1024)
    assert len(os.listdir("/proc/self/fd")) <= fds
    for k, v in sd.items():
        if v.numel():
            a = v.data_ptr()
            hit = [m for m in maps if m[0] <= a < m[1]]
            assert hit and hit[0][2].endswith("p"), k
    big = max(sd.items(), key=lambda kv: kv[1].numel())[0]
    sd[big].add_(1.0)  # a private mapping: the write stays in this process
    assert path.read_bytes() == before
    assert torch.equal(read_nemo(path).state_dict[big], _reference(path)[big])
    del sd, v
    assert _file_maps(path) == []


def _repack(src: Path, dst: Path, deflate_records: bool = False, gzip: bool = False) -> None:
    """A copy of a .nemo whose checkpoint's records are deflated (zip), or whose archive is gzipped."""
    with tarfile.open(src) as t:
        members = [(m, t.extractfile(m).read() if m.isfile() else None) for m in t]
    out = []
    for m, data in members:
        if deflate_records and Path(m.name).name == WEIGHTS:
            zin = zipfile.ZipFile(io.BytesIO(data))
            buf = io.BytesIO()
            with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zout:
                for info in zin.infolist():
                    zout.writestr(info.filename, zin.read(info))
            data = buf.getvalue()
            m.size = len(data)
        out.append((m, data))
    with tarfile.open(dst, "w:gz" if gzip else "w") as t:
        for m, data in out:
            t.addfile(m, io.BytesIO(data) if data is not None else None)


@pytest.mark.parametrize("kind", ["deflated records", "gzipped archive"])
def test_what_is_not_stored_plainly_is_read_by_torch_load(tmp_path, kind):
    """A checkpoint whose records are compressed cannot be mapped: read_mapped says None and the checkpoint is
    read as before, with the same values."""
    path = tmp_path / "m.nemo"
    _repack(NEMOS[0], path, deflate_records=kind == "deflated records", gzip=kind == "gzipped archive")
    if kind == "deflated records":
        with tarfile.open(path) as t:
            m = next(m for m in t if Path(m.name).name == WEIGHTS)
        assert read_mapped(path, m.offset_data, m.size) is None
    sd = read_nemo(path).state_dict
    want = _reference(NEMOS[0])
    assert list(sd) == list(want) and all(torch.equal(sd[k], want[k]) for k in want)
    assert _file_maps(path) == []


def test_a_record_past_the_checkpoint_is_not_mapped_and_torch_load_says_what_is_wrong(tmp_path):
    """A checkpoint cut short: the mapped reader declines, torch.load's error is the message."""
    path = tmp_path / "m.nemo"
    with tarfile.open(NEMOS[0]) as t:
        members = [(m, t.extractfile(m).read() if m.isfile() else None) for m in t]
    with tarfile.open(path, "w") as t:
        for m, data in members:
            if Path(m.name).name == WEIGHTS:
                data = data[: len(data) * 2 // 3]
                m.size = len(data)
            t.addfile(m, io.BytesIO(data) if data is not None else None)
    with pytest.raises(ModelError, match="corrupt or truncated"):
        read_nemo(path)


def test_without_the_c_library_python_s_mmap_maps_the_same_bytes(tmp_path, monkeypatch):
    """The fallback (no C library found, or not POSIX): Python's mmap, the same values, still private."""
    import transcribe.file_map as file_map

    monkeypatch.setattr(file_map, "_LIBC", None)
    path = tmp_path / "m.nemo"
    path.write_bytes(NEMOS[0].read_bytes())
    sd = read_nemo(path).state_dict
    want = _reference(path)
    assert list(sd) == list(want) and all(torch.equal(sd[k], want[k]) for k in want)
    assert _file_maps(path) and all(m[2].endswith("p") for m in _file_maps(path))
