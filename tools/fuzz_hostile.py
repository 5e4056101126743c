"""Fuzz the CLI and a live server with hostile input (issue 36): the issue's cases replayed, plus
seeded variants of them.

Variants (kinds):
  wav        a small valid WAV with header fields (rate, channels, bit depth, block align, sizes,
             format tag) set to extreme values, cut short, or with random bytes flipped
  flac       the same for a FLAC (STREAMINFO's rate, channels, bits, total samples; cuts; flips)
  multipart  malformed multipart bodies and form fields, sent raw over a socket
  headers    odd or oversized HTTP request lines and headers, sent raw
  gguf       GGUF headers with extreme counts (tests/test_hostile_model_files.py's writers)
  yaml       .nemo configs with hostile YAML (aliases, nesting, odd values)
  replay     the issue's own cases

Targets: `cli` runs `python -m transcribe` in a subprocess under RLIMIT_AS and a timeout; `server`
sends the case to one `transcribe serve` started on a free loopback port with a tiny model.

Invariants checked:
  cli     exit 0 or 2 (never 1, a signal or the timeout), no traceback, and on 2 a short message
  server  every request answered 2xx/4xx (never 5xx), the connection kept until the answer (a
          dropped connection is allowed only where the case cuts its own request short), /health
          answering 200 after every case and at the end, and the server's RSS under --max-rss-mb

    python3 tools/fuzz_hostile.py --seed 1 --count 300 --time-budget 600 --json fuzz.json

Run from the repository root (../shared holds the audio and the tiny model). Exit status 0 when no
invariant failed, 1 otherwise; each failure is printed with the case's seed and index, which
`--only INDEX` reruns.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import random
import resource
import socket
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests import test_hostile_model_files as hmf  # noqa: E402  (the GGUF and .nemo writers)

SHARED = REPO.parent / "shared"
# the tree whose `transcribe` the CLI and the server run (--package-tree or FUZZ_HOSTILE_PACKAGE_TREE: an
# older commit's, to see what the fuzz finds there)
PACKAGE = [Path(os.environ.get("FUZZ_HOSTILE_PACKAGE_TREE") or REPO).resolve()]
JFK = SHARED / "audio" / "jfk.wav"
MODEL = SHARED / "models" / "parakeet-tiny" / "tiny-ctc-fit.nemo"
CLI_MEMORY = 3 << 30  # address space of a CLI run: torch with a tiny model needs about 1 GB of it
CLI_TIMEOUT = 60.0
# The server's address space: a request that would take all of the machine's memory ends in the
# server instead (a failure this script reports, and a fresh server for the next case).
SERVER_MEMORY = 4 << 30
REQUEST_TIMEOUT = 60.0
KINDS = ("wav", "flac", "multipart", "headers", "gguf", "yaml")
WEIGHTS = (3, 3, 4, 4, 1, 1)  # a model-file case is a CLI run (about 1.5 s): fewer of them


def known_defect(case: Case) -> str | None:
    """Why a case is a defect known and reported (left out with --skip-known), or None. None are known:
    the defects the first long runs found (search sizes and prompts without a bound, issue 36 item 5; a
    WAV libsndfile refuses reaching an AttributeError in audio._decode_av) are fixed, and their cases
    run again."""
    return None


@dataclass
class Case:
    index: int
    kind: str
    target: str  # "cli" or "server"
    name: str
    data: bytes = b""  # audio bytes (cli/server upload), a raw request (server), or a model file (cli)
    raw: bool = False  # server: `data` is the whole request, sent as is
    cut: bool = False  # server: the request is cut short on purpose (a dropped connection is fine)
    model_file: bool = False  # cli: `data` is a model file (suffix in `suffix`), the audio is jfk
    suffix: str = ".wav"
    fields: dict = field(default_factory=dict)  # server upload: extra form fields


# ------------------------------------------------------------------------------------------
# base inputs


def base_audio() -> tuple[bytes, bytes]:
    """Half a second of jfk.wav at 16 kHz as 16-bit WAV and as FLAC."""
    import soundfile as sf

    x, rate = sf.read(str(JFK), dtype="int16", frames=8000)
    out = []
    for fmt in ("WAV", "FLAC"):
        buf = io.BytesIO()
        sf.write(buf, x, rate, format=fmt, subtype="PCM_16")
        out.append(buf.getvalue())
    return out[0], out[1]


EXTREME32 = [0, 1, 2, 7, 999, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 768001, 4_000_000_000]
EXTREME16 = [0, 1, 3, 7, 24, 63, 65, 255, 0x7FFF, 0xFFFF]
# WAV header fields: (offset, struct format, name); the base file has a 44-byte canonical header
WAV_FIELDS = [(4, "<I", "riff_size"), (20, "<H", "format_tag"), (22, "<H", "channels"), (24, "<I", "rate"),
              (28, "<I", "byte_rate"), (32, "<H", "block_align"), (34, "<H", "bits"), (40, "<I", "data_size")]


def _flip(rng: random.Random, data: bytes, start: int = 0) -> tuple[bytes, str]:
    b = bytearray(data)
    n = rng.choice([1, 2, 4, 16])
    spots = sorted(rng.randrange(start, min(len(b), start + rng.choice([64, len(b)]))) for _ in range(n))
    for i in spots:
        b[i] = rng.randrange(256)
    return bytes(b), f"flip {n} bytes at {spots[:4]}"


def wav_variant(rng: random.Random, wav: bytes) -> tuple[bytes, str]:
    how = rng.choice(["field", "field", "field", "two_fields", "cut", "flip", "huge_float"])
    if how in ("field", "two_fields"):
        b, names = bytearray(wav), []
        for _ in range(1 if how == "field" else 2):
            off, fmt, name = rng.choice(WAV_FIELDS)
            value = rng.choice(EXTREME16 if fmt == "<H" else EXTREME32)
            struct.pack_into(fmt, b, off, value)
            names.append(f"{name}={value}")
        return bytes(b), "wav " + ",".join(names)
    if how == "cut":
        n = rng.choice([0, 4, 12, 20, 36, 43, 44, 45, rng.randrange(len(wav))])
        return wav[:n], f"wav cut at {n}"
    if how == "flip":
        data, what = _flip(rng, wav)
        return data, "wav " + what
    value = rng.choice([1e30, 3e38, -2e7, float("nan"), float("inf")])
    samples = struct.pack("<f", value) * 1600 + struct.pack("<f", 0.1) * 1600
    head = b"RIFF" + struct.pack("<I", 36 + len(samples)) + b"WAVEfmt " + struct.pack(
        "<IHHIIHH", 16, 3, 1, 16000, 64000, 4, 32) + b"data" + struct.pack("<I", len(samples))
    return head + samples, f"wav float samples {value}"


def _streaminfo(flac: bytes, rate: int | None, channels: int | None, bits: int | None, total: int | None) -> bytes:
    """The FLAC with STREAMINFO's packed fields (rate 20 bits, channels-1 3, bits-1 5, total 36) set."""
    b = bytearray(flac)
    packed = int.from_bytes(b[18:26], "big")
    old = [(packed >> 44) & 0xFFFFF, (packed >> 41) & 7, (packed >> 36) & 31, packed & (2 ** 36 - 1)]
    new = [rate if rate is not None else old[0], channels - 1 if channels is not None else old[1],
           bits - 1 if bits is not None else old[2], total if total is not None else old[3]]
    packed = (new[0] << 44) | (new[1] << 41) | (new[2] << 36) | new[3]
    b[18:26] = packed.to_bytes(8, "big")
    return bytes(b)


def flac_variant(rng: random.Random, flac: bytes) -> tuple[bytes, str]:
    how = rng.choice(["rate", "channels", "bits", "total", "cut", "flip", "flip_head"])
    if how == "rate":
        v = rng.choice([0, 1, 7, 999, 768001, 0xFFFFF])
        return _streaminfo(flac, v, None, None, None), f"flac rate={v}"
    if how == "channels":
        v = rng.choice([1, 3, 8])
        return _streaminfo(flac, None, v, None, None), f"flac channels={v}"
    if how == "bits":
        v = rng.choice([1, 4, 8, 24, 32])
        return _streaminfo(flac, None, None, v, None), f"flac bits={v}"
    if how == "total":
        v = rng.choice([0, 1, 2 ** 36 - 1, 16000 * 3600 * 6])
        return _streaminfo(flac, None, None, None, v), f"flac total_samples={v}"
    if how == "cut":
        n = rng.choice([0, 4, 8, 26, 42, rng.randrange(len(flac))])
        return flac[:n], f"flac cut at {n}"
    data, what = _flip(rng, flac, 0 if how == "flip" else 4)
    return data, "flac " + what


# ------------------------------------------------------------------------------------------
# raw HTTP


def _request(method: str, path: str, headers: list[tuple[str, str]], body: bytes, version: str = "HTTP/1.1") -> bytes:
    lines = [f"{method} {path} {version}"] + [f"{k}: {v}" for k, v in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace") + body


def _multipart(parts: list[tuple[str, bytes]], boundary: str = "fuzzb") -> bytes:
    out = b""
    for head, content in parts:
        out += f"--{boundary}\r\n".encode() + head.encode("latin-1", "replace") + b"\r\n\r\n" + content + b"\r\n"
    return out + f"--{boundary}--\r\n".encode()


def _upload(port: int, wav: bytes, fields: dict, boundary: str = "fuzzb", ctype: str | None = None,
            parts: list | None = None) -> bytes:
    parts = parts if parts is not None else (
        [(f'Content-Disposition: form-data; name="{k}"', str(v).encode()) for k, v in fields.items()]
        + [('Content-Disposition: form-data; name="file"; filename="a.wav"\r\nContent-Type: audio/wav', wav)])
    body = _multipart(parts, boundary)
    headers = [("Host", f"127.0.0.1:{port}"), ("Content-Type", ctype or f"multipart/form-data; boundary={boundary}"),
               ("Content-Length", str(len(body))), ("Connection", "close")]
    return _request("POST", "/v1/audio/transcriptions", headers, body)


ODD_FIELDS = [("beam_size", "1000000000"), ("beam_size", "0"), ("beam_size", "-5"), ("best_of", "100000000"),
              ("best_of", "1000"), ("patience", "nan"), ("temperature", "nan"), ("temperature", "1e309"),
              ("response_format", "exe"), ("language", "x" * 5000), ("prompt", "p" * 100000), ("model", "../../etc"),
              ("model", "\x00"), ("timestamp_granularities[]", "word" * 1000), ("hotwords", "a," * 20000),
              ("beam_size", "1e9"), ("model", "whisper-1"), ("response_format", "verbose_json")]


def multipart_variant(rng: random.Random, port: int, wav: bytes) -> tuple:
    """A raw request, its description, whether the request is cut short (and the form fields)."""
    how = rng.choice(["field", "field", "no_boundary", "wrong_boundary", "no_end", "many_parts", "no_file",
                      "empty_file", "odd_disposition", "huge_field_name", "cut_body", "not_multipart",
                      "nested_quotes", "dup_file"])
    if how == "field":
        k, v = rng.choice(ODD_FIELDS)
        fields = {"model": rng.choice(["tiny.en", str(MODEL)]), k: v} if k != "model" else {k: v}
        return _upload(port, wav, fields), f"multipart fields {({a: b[:40] for a, b in fields.items()})}", False, fields
    if how == "no_boundary":
        return _upload(port, wav, {}, ctype="multipart/form-data"), "multipart content-type without boundary", False
    if how == "wrong_boundary":
        return _upload(port, wav, {}, ctype="multipart/form-data; boundary=other"), "multipart wrong boundary", False
    if how == "no_end":
        req = _upload(port, wav, {})
        body_at = req.index(b"\r\n\r\n") + 4
        body = req[body_at:].rsplit(b"--fuzzb--", 1)[0]
        head = req[:body_at].replace(f"Content-Length: {len(req) - body_at}".encode(), f"Content-Length: {len(body)}".encode())
        return head + body, "multipart without closing boundary", False
    if how == "many_parts":
        n = rng.choice([1000, 5000, 20000])
        parts = [(f'Content-Disposition: form-data; name="f{i}"', b"x") for i in range(n)]
        return _upload(port, wav, {}, parts=parts), f"multipart {n} parts", False
    if how == "no_file":
        return _upload(port, wav, {}, parts=[('Content-Disposition: form-data; name="model"', b"whisper-1")]), "multipart no file", False
    if how == "empty_file":
        return _upload(port, b"", {}), "multipart empty file", False
    if how == "odd_disposition":
        head = rng.choice(['Content-Disposition: form-data; name="file"; filename="../../../x\x00.wav"',
                           "Content-Disposition: attachment", "Content-Disposition: form-data; name=",
                           "X-Nothing: 1", 'Content-Disposition: form-data; name="file"; filename*=UTF-8\'\'%FF%FE'])
        return _upload(port, wav, {}, parts=[(head, wav)]), f"multipart disposition {head[:50]!r}", False
    if how == "huge_field_name":
        return _upload(port, wav, {}, parts=[(f'Content-Disposition: form-data; name="{"n" * 200000}"', b"1"),
                                             ('Content-Disposition: form-data; name="file"; filename="a.wav"', wav)]), "multipart 200 KB field name", False
    if how == "cut_body":
        req = _upload(port, wav, {})
        n = rng.randrange(req.index(b"\r\n\r\n") + 4, len(req))
        return req[:n], f"multipart body cut at {n} of {len(req)}", True
    if how == "not_multipart":
        ctype = rng.choice(["application/json", "text/plain", "application/x-www-form-urlencoded", "multipart/mixed; boundary=fuzzb"])
        return _upload(port, wav, {}, ctype=ctype), f"multipart sent as {ctype}", False
    if how == "nested_quotes":
        return _upload(port, wav, {}, ctype='multipart/form-data; boundary="fu"zzb"'), "multipart quoted boundary", False
    return _upload(port, wav, {}, parts=[('Content-Disposition: form-data; name="file"; filename="a.wav"', wav)] * 3), "multipart three files", False


def headers_variant(rng: random.Random, port: int) -> tuple[bytes, str, bool]:
    host = ("Host", f"127.0.0.1:{port}")
    how = rng.choice(["huge_value", "many", "evil_host", "no_host", "origin", "bad_cl", "te_and_cl", "bad_chunks",
                      "garbage_line", "odd_method", "http10", "long_path", "nul", "head_health", "slow_cut"])
    if how == "huge_value":
        n = rng.choice([8000, 20000, 100000])
        return _request("GET", "/health", [host, ("X-Big", "a" * n)], b""), f"headers one of {n} bytes", False
    if how == "many":
        n = rng.choice([100, 1000, 5000])
        return _request("GET", "/health", [host] + [(f"X-{i}", "1") for i in range(n)], b""), f"headers {n} of them", False
    if how == "evil_host":
        h = rng.choice(["evil.example", "127.0.0.1.evil.example:80", "", "[::1", "a" * 300])
        return _request("GET", "/v1/models", [("Host", h)], b""), f"headers Host={h[:40]!r}", False
    if how == "no_host":
        return _request("GET", "/health", [], b""), "headers no Host", False
    if how == "origin":
        o = rng.choice(["https://evil.example", "null", "http://127.0.0.1.evil", "file://"])
        return _request("GET", "/v1/models", [host, ("Origin", o)], b""), f"headers Origin={o}", False
    if how == "bad_cl":
        v = rng.choice(["-1", "abc", "99999999999999999999", "1, 2", "0x10"])
        return _request("POST", "/v1/audio/transcriptions", [host, ("Content-Length", v)], b""), f"headers Content-Length={v}", False
    if how == "te_and_cl":
        return _request("POST", "/v1/audio/transcriptions", [host, ("Content-Length", "5"), ("Transfer-Encoding", "chunked")],
                        b"0\r\n\r\n"), "headers Transfer-Encoding and Content-Length", False
    if how == "bad_chunks":
        body = rng.choice([b"zz\r\nabc\r\n0\r\n\r\n", b"FFFFFFFFFFFFFFFF\r\nab", b"5\r\nabc\r\n0\r\n\r\n"])
        return _request("POST", "/v1/audio/transcriptions", [host, ("Transfer-Encoding", "chunked"),
                        ("Content-Type", "multipart/form-data; boundary=x")], body), f"headers bad chunks {body[:12]!r}", True
    if how == "garbage_line":
        line = rng.choice([b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", b"GET\r\n\r\n", b"GET / HTTP/9.9\r\n\r\n",
                           b"\r\n\r\n\r\n", bytes(rng.randrange(256) for _ in range(64)) + b"\r\n\r\n"])
        return line, f"headers garbage request line {line[:16]!r}", False
    if how == "odd_method":
        m = rng.choice(["DELETE", "PATCH", "TRACE", "OPTIONS", "PROPFIND", "X" * 100])
        return _request(m, "/v1/audio/transcriptions", [host, ("Content-Length", "0")], b""), f"headers method {m[:20]}", False
    if how == "http10":
        return _request("GET", "/health", [], b"", version="HTTP/1.0"), "headers HTTP/1.0 without Host", False
    if how == "long_path":
        p = "/" + rng.choice(["a" * 10000, "%00" * 1000, "../" * 2000, "v1/models/" + "%2e%2e/" * 500])
        return _request("GET", p, [host], b""), f"headers path of {len(p)} chars", False
    if how == "nul":
        return _request("GET", "/health", [host, ("X-A", "a\x00b")], b""), "headers NUL in a value", False
    if how == "head_health":
        return _request("HEAD", "/health", [host], b""), "headers HEAD /health", False
    return _request("POST", "/v1/audio/transcriptions", [host, ("Content-Length", "100000"),
                    ("Content-Type", "multipart/form-data; boundary=x")], b"--x\r\n"), "headers body shorter than Content-Length", True


# ------------------------------------------------------------------------------------------
# model files


def gguf_variant(rng: random.Random, folder: Path) -> tuple[Path, str]:
    big = rng.choice([1 << 20, 1 << 30, 1 << 40, 1 << 63, 2 ** 64 - 1])
    how = rng.choice(["n_kv", "n_tensors", "array", "array_of_arrays", "vocab", "string", "name", "dims", "flip"])
    pad = 4096
    if how == "n_kv":
        return hmf._gguf(folder, b"", n_kv=big, pad=pad), f"gguf n_kv={big}"
    if how == "n_tensors":
        return hmf._gguf(folder, b"", n_kv=1, n_tensors=big, pad=pad), f"gguf n_tensors={big}"
    if how == "array":
        itype = rng.choice([0, 4, 6, 10, 12])
        return hmf._gguf(folder, hmf._array("parakeet.x", itype, big), pad=pad), f"gguf array type {itype} of {big}"
    if how == "array_of_arrays":
        return hmf._gguf(folder, hmf._array("parakeet.x", 9, big) + struct.pack("<IQ", 0, big), pad=pad), f"gguf array of arrays {big}"
    if how == "vocab":
        return hmf._gguf(folder, hmf._array("tokenizer.ggml.tokens", 8, big), pad=pad), f"gguf vocabulary of {big}"
    if how == "string":
        return hmf._gguf(folder, hmf._s("parakeet.x") + struct.pack("<IQ", 8, big), pad=pad), f"gguf string of {big}"
    if how == "name":
        return hmf._gguf(folder, struct.pack("<Q", big), pad=pad), f"gguf key name of {big}"
    if how == "dims":
        n = rng.choice([0, 5, 1 << 31, 2 ** 32 - 1])
        return hmf._gguf(folder, hmf._s("t") + struct.pack("<I", n) + struct.pack("<Q", big) * min(n, 4), n_kv=1, n_tensors=1, pad=pad), f"gguf tensor of {n} dims"
    path = hmf._gguf(folder, hmf._kv_str("parakeet.y", "z"), n_kv=3, pad=pad)
    data, what = _flip(rng, path.read_bytes(), 4)
    path.write_bytes(data)
    return path, "gguf " + what


HOSTILE_YAML = ["*l8", "[" * 100_000 + "]" * 100_000, "&me [1, *me]", "{" * 500 + "}" * 500, "!!python/object:os.system ls",
                "!!binary AAAA", "*nothing", "'" + "x" * 5_000_000 + "'", "1e999999", "- - - - -", "\t\x00", "&a [*a]",
                "!!set {a, b}", "? [a, b]\n  : c"]


def yaml_variant(rng: random.Random, folder: Path) -> tuple[Path, str]:
    extra = rng.choice(HOSTILE_YAML)
    levels = rng.choice([4, 6, 9])
    if extra == "*l8":
        extra = f"*l{levels - 1}"
    return hmf._nemo_with_config(folder, hmf._config_text(extra, spec_augment=hmf._laughs(levels))), \
        f"yaml encoder.hostile: {extra[:40]!r} (laughs of 10^{levels})"


# ------------------------------------------------------------------------------------------
# the cases


def replay_cases(port: int, wav: bytes) -> list[tuple[str, str, dict]]:
    """The issue's own server cases as (kind, name, Case keyword arguments)."""
    one_hz = bytearray(wav)
    struct.pack_into("<I", one_hz, 24, 1)
    struct.pack_into("<I", one_hz, 28, 2)
    cases = [("one Hz WAV", {"data": bytes(one_hz)})]
    for k, v in [("beam_size", "1000000000"), ("best_of", "100000000"), ("beam_size", "0"), ("patience", "nan")]:
        cases.append((f"{k}={v}", {"data": wav, "fields": {k: v}}))
    for k, v in [("beam_size", "1000000000"), ("best_of", "1000"), ("beam_size", "-5"), ("patience", "nan")]:
        cases.append((f"tiny.en {k}={v}", {"data": wav, "fields": {"model": "tiny.en", k: v}}))
    cases.append(("Host evil.example", {"data": _request("GET", "/v1/models", [("Host", "evil.example")], b""), "raw": True}))
    cases.append(("HEAD /health", {"data": _request("HEAD", "/health", [("Host", f"127.0.0.1:{port}")], b""), "raw": True}))
    return [("replay", n, kw) for n, kw in cases]


def make_case(rng: random.Random, index: int, port: int, wav: bytes, flac: bytes, folder: Path, cli_share: float) -> Case:
    kind = rng.choices(KINDS, WEIGHTS)[0]
    if kind in ("gguf", "yaml"):
        path, name = (gguf_variant if kind == "gguf" else yaml_variant)(rng, folder)
        return Case(index, kind, "cli", name, path.read_bytes(), model_file=True, suffix=path.suffix)
    if kind in ("wav", "flac"):
        data, name = wav_variant(rng, wav) if kind == "wav" else flac_variant(rng, flac)
        target = "cli" if rng.random() < cli_share else "server"
        fields = {"model": rng.choice(["tiny.en", str(MODEL)])} if rng.random() < 0.5 else {}
        return Case(index, kind, target, name, data, suffix="." + kind, fields=fields)
    data, name, cut, *fields = (multipart_variant(rng, port, wav) if kind == "multipart" else headers_variant(rng, port))
    return Case(index, kind, "server", name, data, raw=True, cut=cut, fields=fields[0] if fields else {})


def cases(seed: int, count: int, port: int, folder: Path, cli_share: float, replay: bool):
    """The cases one at a time (a model file is a megabyte: they are not all held)."""
    wav, flac = base_audio()
    index = 0
    if replay:
        for kind, name, kw in replay_cases(port, wav):
            yield Case(index, kind, "server", name, **kw)
            index += 1
        for kind, fn in (("replay", lambda f: hmf._gguf(f, hmf._array("parakeet.x", 0, 1 << 40))),
                         ("replay", lambda f: hmf._nemo_with_config(f, hmf._config_text("*l8", spec_augment=hmf._laughs()))),
                         ("replay", lambda f: hmf._nemo_with_config(f, hmf._config_text("[" * 100_000 + "]" * 100_000)))):
            path = fn(folder)
            yield Case(index, kind, "cli", f"issue's model file {path.name} #{index}", path.read_bytes(),
                       model_file=True, suffix=path.suffix)
            index += 1
    for i in range(count):
        rng = random.Random(f"{seed}/{i}")  # each case from its own seed and number
        yield make_case(rng, index, port, wav, flac, folder, cli_share)
        index += 1


# ------------------------------------------------------------------------------------------
# running a case


def _limit_memory(limit: int = CLI_MEMORY):
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _limit_server_memory():
    _limit_memory(SERVER_MEMORY)


def run_cli(case: Case, folder: Path) -> str | None:
    """The case through `python -m transcribe`: None when the invariants hold, else what broke."""
    path = folder / f"case{case.suffix}"
    path.write_bytes(case.data)
    audio, model = (JFK, path) if case.model_file else (path, MODEL)
    env = dict(os.environ, PYTHONPATH=str(PACKAGE[0]), OMP_NUM_THREADS="1")
    try:
        r = subprocess.run([sys.executable, "-m", "transcribe", str(audio), "-m", str(model)], cwd=PACKAGE[0], env=env,
                           capture_output=True, text=True, errors="replace", timeout=CLI_TIMEOUT,
                           preexec_fn=_limit_memory)
    except subprocess.TimeoutExpired:
        return f"cli: no exit within {CLI_TIMEOUT:.0f} s"
    err = r.stderr.strip()
    if r.returncode not in (0, 2):
        return f"cli: exit {r.returncode}: {err[-600:]}"
    if "Traceback" in err:
        return f"cli: a traceback: {err[-600:]}"
    if r.returncode == 2:
        lines = [ln for ln in err.splitlines() if ln.strip()]
        if not lines or len(lines) > 3 or len(err) > 2000:
            return f"cli: exit 2 without a short message ({len(lines)} lines): {err[-600:]}"
    return None


def send_raw(port: int, data: bytes, cut: bool, timeout: float = REQUEST_TIMEOUT) -> tuple[int | None, str]:
    """Send `data` as is and read the status line; (None, why) when the connection gave no answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            s.sendall(data)
            if cut:
                s.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused before all was read: the answer may be waiting
        answer = b""
        try:
            while b"\r\n\r\n" not in answer:  # the status line and headers
                chunk = s.recv(4096)
                if not chunk:
                    break
                answer += chunk
        except ConnectionResetError:
            pass
        except socket.timeout:
            return None, f"no answer within {timeout:.0f} s"
        try:  # the start of the body, where it comes at once (a kept-alive connection stays open)
            s.settimeout(0.2)
            while len(answer) < 4096:
                chunk = s.recv(4096)
                if not chunk:
                    break
                answer += chunk
        except OSError:
            pass
    if not answer:
        return None, "connection closed without an answer"
    parts = answer.split(b"\r\n", 1)[0].split()
    if len(parts) < 2 or not parts[1].isdigit():
        return None, f"not an HTTP answer: {answer[:80]!r}"
    body = answer.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in answer else b""
    return int(parts[1]), body[:300].decode("latin-1")


def rss_mb(pid: int, which: str = "VmHWM") -> float:
    """The process's peak resident memory (VmHWM, the kernel's high-water mark) or current (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(which + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def run_server(case: Case, port: int, record: dict) -> str | None:
    data = case.data if case.raw else _upload(port, case.data, case.fields)
    try:
        status, body = send_raw(port, data, case.cut)
    except OSError as e:
        return f"server: could not connect: {e}"
    record["status"] = status
    if status is None and not case.cut:
        return f"server: {body}"
    if status is not None and not (200 <= status < 500):
        return f"server: answered {status}: {body}"
    return None


def health(port: int) -> str | None:
    data = _request("GET", "/health", [("Host", f"127.0.0.1:{port}"), ("Connection", "close")], b"")
    try:
        status, body = send_raw(port, data, False, timeout=30)
    except OSError as e:
        return f"/health: could not connect: {e}"
    return None if status == 200 else f"/health: {status}: {body}"


class Serve:
    """`transcribe serve` with Whisper tiny.en and the tiny CTC Parakeet on a free loopback port."""

    def __init__(self, folder: Path):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.log = open(folder / "server.log", "w+")
        (folder / "spool").mkdir(exist_ok=True)
        env = dict(os.environ, PYTHONPATH=str(PACKAGE[0]), OMP_NUM_THREADS="1", TMPDIR=str(folder / "spool"))
        self.proc = subprocess.Popen([sys.executable, "-m", "transcribe", "serve", "--port", str(self.port),
                                      "--model", "tiny.en", "--model", str(MODEL), "--max-upload-mb", "5",
                                      "--log-level", "warning"],
                                     cwd=PACKAGE[0], env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     preexec_fn=_limit_server_memory)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited ({self.proc.returncode}):\n{self.output()}")
            if health(self.port) is None:
                return
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"the server did not come up:\n{self.output()}")

    def output(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def fuzz(seed: int, count: int, time_budget: float, max_rss_mb: float, cli_share: float = 0.15,
         replay: bool = True, only: int | None = None, skip_known: bool = False) -> dict:
    """Run the cases; a summary dict (cases per kind and target, failures with their cases)."""
    start = time.monotonic()
    summary = {"seed": seed, "count": count, "cases": 0, "per_kind": {}, "failures": [], "max_rss_mb": 0.0,
               "stopped_by_time_budget": False, "server_restarts": 0, "statuses": {}, "log": [], "skipped_known": []}
    with tempfile.TemporaryDirectory(prefix="fuzz_hostile_") as tmp:
        folder = Path(tmp)
        server = Serve(folder)
        try:
            summary["rss_at_start_mb"] = round(rss_mb(server.proc.pid), 1)
            for case in cases(seed, count, server.port, folder, cli_share, replay):
                if only is not None and case.index != only:
                    continue
                if time.monotonic() - start > time_budget:
                    summary["stopped_by_time_budget"] = True
                    break
                if skip_known and known_defect(case):
                    summary["skipped_known"].append({"index": case.index, "case": case.name,
                                                     "why": known_defect(case)})
                    continue
                t0 = time.monotonic()
                record = {"index": case.index, "kind": case.kind, "target": case.target, "case": case.name}
                problem = run_cli(case, folder) if case.target == "cli" else run_server(case, server.port, record)
                if server.proc.poll() is not None:
                    problem = (problem or "") + f" / the server exited ({server.proc.returncode})"
                    summary["server_log_tail"] = server.output()[-3000:]
                    server.stop()
                    server = Serve(folder)  # a fresh one for the cases after
                    summary["server_restarts"] += 1
                elif problem is None:
                    problem = health(server.port)
                if server.proc.poll() is None:
                    rss = rss_mb(server.proc.pid)
                    summary["max_rss_mb"] = round(max(summary["max_rss_mb"], rss), 1)
                    if rss > max_rss_mb and problem is None:
                        problem = f"server peak RSS {rss:.0f} MB over {max_rss_mb:.0f} MB"
                record["seconds"] = round(time.monotonic() - t0, 2)
                summary["log"].append(record)
                if "status" in record:
                    st = str(record["status"])
                    summary["statuses"][st] = summary["statuses"].get(st, 0) + 1
                key = f"{case.kind}/{case.target}"
                summary["per_kind"][key] = summary["per_kind"].get(key, 0) + 1
                summary["cases"] += 1
                if problem:
                    summary["failures"].append({"index": case.index, "kind": case.kind, "target": case.target,
                                                "case": case.name, "fields": case.fields, "problem": problem,
                                                "seconds": round(time.monotonic() - t0, 2)})
            end = health(server.port) if server.proc.poll() is None else "the server is gone"
            if end:
                summary["failures"].append({"index": None, "kind": "end", "target": "server", "case": "the end",
                                            "problem": end})
        finally:
            summary.setdefault("server_log_tail", server.output()[-3000:] if not server.log.closed else "")
            server.stop()
    summary["seconds"] = round(time.monotonic() - start, 1)
    return summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--count", type=int, default=300, help="generated variants (besides the issue's cases)")
    p.add_argument("--time-budget", type=float, default=900.0, metavar="S", help="stop starting cases after S s")
    p.add_argument("--max-rss-mb", type=float, default=3000.0, help="the server's memory bound")
    p.add_argument("--cli-share", type=float, default=0.15, help="share of audio variants run through the CLI")
    p.add_argument("--no-replay", action="store_true", help="leave out the issue's own cases")
    p.add_argument("--skip-known", action="store_true", help="leave out the cases of defects known (known_defect)")
    p.add_argument("--package-tree", type=Path, default=None, metavar="DIR",
                   help="run the CLI and the server from this tree's package (default: this repository's)")
    p.add_argument("--only", type=int, default=None, metavar="INDEX", help="run the case of this index alone")
    p.add_argument("--json", type=Path, default=None, metavar="OUT")
    a = p.parse_args(argv)
    if a.package_tree:
        PACKAGE[0] = a.package_tree.resolve()
    s = fuzz(a.seed, a.count, a.time_budget, a.max_rss_mb, a.cli_share, not a.no_replay, a.only, a.skip_known)
    if a.json:
        a.json.write_text(json.dumps(s, indent=1))
    print(f"seed {s['seed']}: {s['cases']} cases in {s['seconds']} s"
          f"{' (stopped by the time budget)' if s['stopped_by_time_budget'] else ''}; "
          f"server peak RSS {s['rss_at_start_mb']} MB at start, {s['max_rss_mb']} MB at most; "
          f"{s['server_restarts']} server restarts; answers {s['statuses']}")
    for k, n in sorted(s["per_kind"].items()):
        print(f"  {k:18} {n}")
    if s["skipped_known"]:
        print(f"{len(s['skipped_known'])} cases of known defects left out")
    print(f"{len(s['failures'])} failures")
    for f in s["failures"]:
        print(f"  #{f['index']} {f['kind']}/{f['target']} {f['case']!r} {f.get('fields') or ''}: {f['problem'][:400]}"
              f"\n    rerun: python3 tools/fuzz_hostile.py --seed {s['seed']} --count {s['count']} --only {f['index']}")
    return 1 if s["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
