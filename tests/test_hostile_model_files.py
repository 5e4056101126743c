"""Hostile model files (issue 36, items 6 and 7): small GGUF headers whose declared counts are huge,
and .nemo configs whose YAML expands (aliases) or nests without bound. Each is given to the CLI in a
subprocess under an address-space limit and a time limit, and must end in a clear model error (exit 2)
within them. Before the bounds, these files took gigabytes (the `gguf` package read arrays element by
element before any check; a "setting not implemented" message formatted the whole expanded value) or
crashed with a RecursionError (exit 1).

The limits are the issue's test form: the loaders stop at the first count they check, in well under a
second and a few megabytes here; the time limit only keeps a regression from hanging the suite.
"""
from __future__ import annotations

import io
import os
import resource
import struct
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from transcribe.config_yaml import excerpt, load_yaml, YAMLBoundError

from .conftest import REPO, SHARED

JFK = SHARED / "audio" / "jfk.wav"
NEMO = SHARED / "models" / "parakeet-tiny" / "tiny-ctc-fit.nemo"
MEMORY_LIMIT = 3 << 30  # bytes of address space: the CLI with torch loaded needs about 1 GB of it
TIME_LIMIT = 120  # seconds: a loaded CLI refusing a model takes a few


def _limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def _cli(model: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "transcribe", str(JFK), "-m", str(model)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=TIME_LIMIT, preexec_fn=_limit_memory)


def _refused(model: Path, *words: str) -> str:
    r = _cli(model)
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr and str(model) in r.stderr, r.stderr[-2000:]
    for w in words:
        assert w in r.stderr, (w, r.stderr[-2000:])
    assert len(r.stderr) < 2000, len(r.stderr)  # a message, not a formatted expansion
    return r.stderr


# ------------------------------------------------------------------------------------------
# GGUF headers


def _s(text: str | bytes) -> bytes:
    b = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(b)) + b


def _kv_str(key: str, value: str) -> bytes:
    return _s(key) + struct.pack("<I", 8) + _s(value)


def _gguf(tmp_path: Path, hostile: bytes, n_kv: int = 2, n_tensors: int = 0, pad: int = 1 << 20) -> Path:
    """A GGUF header: magic, version 3, tensor count, kv count, general.architecture = parakeet, then
    the hostile bytes, then `pad` zero bytes (the file is about a megabyte, as in the issue)."""
    head = b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv) + _kv_str("general.architecture", "parakeet")
    path = tmp_path / "hostile.gguf"
    path.write_bytes(head + hostile + bytes(pad))
    return path


def _array(key: str, itype: int, n: int) -> bytes:
    return _s(key) + struct.pack("<IIQ", 9, itype, n)


def test_a_uint8_array_of_2_to_the_40_elements_is_refused(tmp_path):
    _refused(_gguf(tmp_path, _array("parakeet.x", 0, 1 << 40)), "parakeet.x", "1099511627776 elements")


def test_an_array_of_arrays_is_refused(tmp_path):
    _refused(_gguf(tmp_path, _array("parakeet.x", 9, 1 << 40) + struct.pack("<IQ", 0, 1 << 30)),
             "parakeet.x is an array of arrays")


def test_a_vocabulary_of_ten_million_entries_is_refused(tmp_path):
    n = 10_000_000  # every entry an empty string, all in the file (80 MB): the gguf package took 8 GB
    _refused(_gguf(tmp_path, _array("tokenizer.ggml.tokens", 8, n), pad=8 * n), "tokenizer.ggml.tokens", "10000000")


def test_a_vocabulary_longer_than_the_file_is_refused(tmp_path):
    _refused(_gguf(tmp_path, _array("tokenizer.ggml.tokens", 8, 1 << 30)), "tokenizer.ggml.tokens", "1073741824")


def test_a_vocabulary_beyond_the_bound_is_refused_even_when_the_file_holds_it(tmp_path):
    n = (1 << 20) + 1  # every entry an empty string: 8 bytes each, the file holds them all
    path = _gguf(tmp_path, _array("tokenizer.ggml.tokens", 8, n), pad=8 * n)
    _refused(path, "tokenizer.ggml.tokens declares an array of 1048577 elements")


@pytest.mark.parametrize("hostile, n_kv, n_tensors, words", [
    (b"", 1 << 40, 0, ["1099511627776 metadata keys"]),
    (b"", 1, 1 << 40, ["1099511627776 tensors"]),
    (_s("parakeet.x") + struct.pack("<IQ", 8, 1 << 60), 2, 0, ["parakeet.x declares a string of"]),
    (struct.pack("<Q", 1 << 60), 2, 0, ["corrupt or truncated GGUF file", "name of 1152921504606846976 bytes"]),
    (_s("t") + struct.pack("<I", 1 << 31), 1, 1, ["corrupt or truncated GGUF file", "2147483648 dimensions"]),
    (_s("t") + struct.pack("<I3QIQ", 3, 1 << 40, 1 << 40, 1 << 40, 0, 0), 1, 1, ["truncated GGUF file", "tensor t"]),
])
def test_huge_counts_in_a_gguf_header_are_refused(tmp_path, hostile, n_kv, n_tensors, words):
    _refused(_gguf(tmp_path, hostile, n_kv=n_kv, n_tensors=n_tensors), *words)


# ------------------------------------------------------------------------------------------
# .nemo configs


def _nemo_with_config(tmp_path: Path, text: str) -> Path:
    """The tiny CTC model with its model_config.yaml replaced by `text`."""
    dst = tmp_path / "hostile.nemo"
    with tarfile.open(NEMO) as src, tarfile.open(dst, "w") as out:
        for m in src.getmembers():
            data = src.extractfile(m).read() if m.isfile() else b""
            if Path(m.name).name == "model_config.yaml":
                data = text.encode()
            m.size = len(data)
            out.addfile(m, io.BytesIO(data) if m.isfile() else None)
    return dst


def _config_text(encoder_extra: str, spec_augment: str = "") -> str:
    """The model's own config as YAML text, with lines added to `spec_augment:` (before the encoder)
    and to `encoder:`."""
    with tarfile.open(NEMO) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("model_config.yaml"))
        cfg = yaml.safe_load(tar.extractfile(member).read())
    cfg["spec_augment"] = dict(cfg.get("spec_augment") or {}, anchors="@ANCHORS@")
    cfg["encoder"] = {"hostile": "@HOSTILE@", **cfg["encoder"]}
    text = yaml.safe_dump(cfg, sort_keys=False)
    assert text.index("@ANCHORS@") < text.index("@HOSTILE@")
    return text.replace("'@ANCHORS@'", spec_augment).replace("'@HOSTILE@'", encoder_extra)


def _laughs(levels: int = 9) -> str:
    """A flow list of anchored lists, each ten aliases of the one before: the last stands for 10^levels."""
    items = ["&l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    items += [f"&l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]" for i in range(1, levels)]
    return "[" + ", ".join(items) + "]"


def test_a_billion_laughs_under_encoder_is_refused(tmp_path):
    path = _nemo_with_config(tmp_path, _config_text("*l8", spec_augment=_laughs()))
    _refused(path, "model_config.yaml holds more than", "aliases expanded")


def test_a_hundred_thousand_nested_brackets_are_refused(tmp_path):
    deep = "[" * 100_000 + "]" * 100_000
    _refused(_nemo_with_config(tmp_path, _config_text(deep)), "model_config.yaml nests deeper than 100 levels")


def test_an_alias_inside_the_value_it_names_is_refused(tmp_path):
    _refused(_nemo_with_config(tmp_path, _config_text("&me [1, *me]")), "model_config.yaml has an alias (*me)")


def test_a_shared_value_within_the_bounds_is_shown_as_an_excerpt(tmp_path):
    # 10^4 values through aliases: within the bounds, so the config loads and the encoder's unknown
    # key is the error; its value is shown cut to 80 characters, not all 10^4 (60 KB of text)
    stderr = _refused(_nemo_with_config(tmp_path, _config_text("*l3", spec_augment=_laughs(4))),
                      "encoder.hostile = [[[['lol', 'lol',", "is a setting this code does not implement")
    assert stderr.count("lol") < 20


# ------------------------------------------------------------------------------------------
# the loader and the excerpt, in process


def test_the_bounded_loader_reads_what_safe_load_reads():
    for path in sorted((REPO / "tests" / "configs").rglob("*.yaml")):
        text = path.read_text()
        assert load_yaml(text) == yaml.safe_load(text), path
    text = "a: &x {b: [1, 2.5, 'c']}\nd: *x\ne: " + "[" * 98 + "]" * 98
    assert load_yaml(text) == yaml.safe_load(text)
    with pytest.raises(YAMLBoundError, match="nests deeper than 100 levels"):
        load_yaml("e: " + "[" * 100 + "]" * 100)


def test_an_excerpt_is_the_repr_of_a_small_value_and_a_cut_one_of_a_large_one():
    for v in [1, -2.5, "a'b", None, True, [1, [2, "x"]], {"a": (1,), 2: ()}, (1, 2), [], {}]:
        assert excerpt(v) == repr(v)
    big = [list(range(100))] * 10**6  # shared: a full repr would be 390 MB
    assert excerpt(big, 40) == "[" + repr(big[0])[:36] + "..."
    assert excerpt("x" * 10**7, 10) == "'xxxxxx..."
