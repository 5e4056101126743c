"""A library does not change its host process, and a loaded model is safe to share: threads and
flush-denormal are scoped to a model call, glibc's allocator is left alone by load_model, per-call
options never write onto the shared model, and a result does not depend on its batch."""
from __future__ import annotations

import subprocess
import sys
import threading

import numpy as np
import pytest
import soundfile as sf
import torch

import transcribe
from transcribe import runtime
from transcribe.parakeet import recognizer as parakeet_recognizer

from .conftest import AUDIO, TINY

TDT = str(TINY / "tiny-tdt-fit.nemo")


@pytest.fixture(scope="module")
def jfk() -> np.ndarray:
    a, sr = sf.read(str(AUDIO / "jfk.wav"), dtype="float32")
    assert sr == 16000
    return a


@pytest.fixture(scope="module")
def tdt():
    return transcribe.load_model(TDT)


@pytest.fixture
def flush_off():
    """These tests need flush-denormal off, the process default (in this thread and its OpenMP team),
    whatever the thread had; it is put back after."""
    was = runtime._flush_denormal_is_on(torch)
    runtime._set_flush_denormal(torch, False)
    yield
    runtime._set_flush_denormal(torch, was)


def test_threads_apply_during_the_call_and_are_restored(jfk, monkeypatch, flush_off):
    before = torch.get_num_threads()
    want = 1 if before != 1 else 2
    model = transcribe.load_model(TDT, threads=want)
    assert torch.get_num_threads() == before  # loading changes nothing
    seen = {}
    real_encode = model.model.encode

    def encode(*a, **k):
        seen["threads"] = torch.get_num_threads()
        seen["flush"] = runtime._flush_denormal_is_on(torch)
        return real_encode(*a, **k)

    monkeypatch.setattr(model.model, "encode", encode)
    model.transcribe(jfk)
    assert seen == {"threads": want, "flush": True}  # while the model runs
    assert torch.get_num_threads() == before  # and after: the caller's own settings
    assert not runtime._flush_denormal_is_on(torch)


def test_whisper_call_restores_threads_and_float_mode(default_whisper_dir, jfk, flush_off):
    before = torch.get_num_threads()
    model = transcribe.load_model(str(default_whisper_dir), threads=1 if before != 1 else 2)
    assert model.transcribe(jfk[:16000 * 3]).text  # some text
    assert torch.get_num_threads() == before and not runtime._flush_denormal_is_on(torch)


def test_flush_denormal_probe_reads_the_mode(flush_off):
    assert not runtime._flush_denormal_is_on(torch)
    torch.set_flush_denormal(True)
    assert runtime._flush_denormal_is_on(torch)


def test_load_model_leaves_the_allocator_alone(monkeypatch):
    calls = []
    monkeypatch.setattr(runtime, "tune_malloc", lambda: calls.append(1))
    transcribe.load_model(TDT)
    assert calls == []


def test_the_cli_configures_its_own_process(monkeypatch, tmp_path):
    from transcribe import cli

    calls = []
    monkeypatch.setattr(cli, "configure_process", lambda threads: calls.append(threads))
    assert cli.main([str(AUDIO / "jfk.wav"), "-m", TDT, "--threads", "1", "-q"]) == 0
    assert calls == [1]


def _omp_env(**set_vars) -> dict:
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env.update(set_vars)
    return env


@pytest.mark.parametrize("chosen", [{}, {"OMP_WAIT_POLICY": "ACTIVE"}, {"GOMP_SPINCOUNT": "300000"}])
def test_openmp_spins_briefly_in_the_package_own_processes(chosen):
    """A process of the package's own (configure_process) sets GOMP_SPINCOUNT=1000 before PyTorch is
    imported, unless the user chose; once PyTorch is imported it changes nothing."""
    code = ("import os, sys; from transcribe import runtime; first = runtime.configure_process(malloc=False); "
            "import torch; again = runtime.openmp_waiting(); "
            "print(os.environ.get('OMP_WAIT_POLICY'), os.environ.get('GOMP_SPINCOUNT'), again)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=_omp_env(**chosen))
    assert out.returncode == 0, out.stderr
    want = {(): "None 1000 False", ("OMP_WAIT_POLICY",): "ACTIVE None False",
            ("GOMP_SPINCOUNT",): "None 300000 False"}[tuple(chosen)]
    assert out.stdout.split("\n")[0] == want


def test_the_command_sets_openmp_waiting_before_torch_loads(tmp_path):
    """`transcribe` (cli.main) decides OpenMP's waiting before anything imports PyTorch, whatever the
    subcommand; a program that imported PyTorch before calling it keeps its environment."""
    def code(out_dir):
        return ("import os, sys; from transcribe import cli; "
                f"rc = cli.main([{str(AUDIO / 'jfk.wav')!r}, '-m', {TDT!r}, '-q', '-o', {str(out_dir)!r}]); "
                "print(rc, os.environ.get('GOMP_SPINCOUNT'))")

    out = subprocess.run([sys.executable, "-c", code(tmp_path / "a")], capture_output=True, text=True, timeout=300, env=_omp_env())
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-2:] == ["0", "1000"]
    late = subprocess.run([sys.executable, "-c", "import torch; " + code(tmp_path / "b")], capture_output=True, text=True, timeout=300,
                          env=_omp_env())
    assert late.returncode == 0, late.stderr
    assert late.stdout.split()[-2:] == ["0", "None"]


def test_bad_threads_are_refused():
    with pytest.raises(transcribe.ModelError, match="threads must be a positive integer"):
        transcribe.load_model(TDT, threads=0)


def test_importing_the_package_imports_no_torch():
    code = "import sys, transcribe; assert 'torch' not in sys.modules and 'numpy' not in sys.modules"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


# --- a shared model ----------------------------------------------------------------------------


def test_concurrent_calls_with_different_attention_share_one_model(tdt, jfk, monkeypatch):
    """Two threads, one model, full and local attention at once: each gets what it gets alone, and
    the model's own setting is untouched (the attention is an argument of the call)."""
    monkeypatch.setattr(parakeet_recognizer, "LOCAL_CONTEXT", (4, 4))  # local then differs clearly from full on jfk (in its confidences)
    own = tdt.model.encoder.local_context
    alone = {mode: tdt.transcribe(jfk, attention=mode).to_dict() for mode in ("full", "local")}
    # the test can fail: the two attentions give different results, so a call that took the other
    # thread's attention would be seen
    assert alone["full"]["tokens"] != alone["local"]["tokens"]
    results, errors = {}, []

    def work(mode):
        try:
            for _ in range(3):
                results.setdefault(mode, []).append(tdt.transcribe(jfk, attention=mode).to_dict())
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(m,)) for m in ("full", "local")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for mode in ("full", "local"):
        assert all(r == alone[mode] for r in results[mode])
    assert tdt.model.encoder.local_context == own


def test_a_result_does_not_depend_on_its_batch(tdt, jfk, monkeypatch):
    """An input long enough for local attention, batched with short ones, no longer switches them
    to local attention: each input's transcript equals its transcript alone."""
    monkeypatch.setattr(parakeet_recognizer, "LOCAL_ATTENTION_AFTER_S", 6.0)  # jfk (11 s) is "long"
    monkeypatch.setattr(parakeet_recognizer, "LOCAL_CONTEXT", (4, 4))  # so local differs on short clips
    short = [jfk[: 16000 * 4], jfk[16000 * 4: 16000 * 9]]
    alone = [tdt.transcribe(x).to_dict() for x in short]
    # the test can fail: local attention changes the short clips' results
    assert any(tdt.transcribe(x, attention="local").to_dict() != a for x, a in zip(short, alone))
    long_alone = tdt.transcribe(jfk).to_dict()
    assert long_alone == tdt.transcribe(jfk, attention="local").to_dict()  # the long one runs local
    together = [t.to_dict() for t in tdt.transcribe([jfk] + short, batch_size=8)]
    for got, want in zip(together, [long_alone] + alone):
        same_decisions(got, want)


def same_decisions(got: dict, want: dict) -> None:
    """Equal text, tokens and times; confidences within 1e-4: a batch of two runs its matrix
    products through other BLAS blockings than a batch of one, which moves float32 results in the
    last bits (the decisions, with margins far above that, do not move)."""
    assert got["text"] == want["text"]
    assert [(t["id"], t["start"], t["end"]) for t in got["tokens"]] == [(t["id"], t["start"], t["end"]) for t in want["tokens"]]
    assert [(w["word"], w["start"], w["end"]) for w in got["words"]] == [(w["word"], w["start"], w["end"]) for w in want["words"]]
    assert [t["confidence"] for t in got["tokens"]] == pytest.approx([t["confidence"] for t in want["tokens"]], abs=1e-4)


# --- arrays at another rate ----------------------------------------------------------------------


def test_an_array_at_another_rate_is_resampled(tdt, jfk):
    import soxr

    at_44k = soxr.resample(jfk, 16000, 44100, quality="HQ")
    assert tdt.transcribe(at_44k, sample_rate=44100).text == tdt.transcribe(jfk).text
    garbage = tdt.transcribe(at_44k).text  # no rate: taken at the model's rate, as documented
    assert garbage != tdt.transcribe(jfk).text


def test_sample_rate_with_a_file_is_an_error(tdt):
    with pytest.raises(transcribe.AudioError, match="applies to arrays only"):
        tdt.transcribe(str(AUDIO / "jfk.wav"), sample_rate=44100)


def test_whisper_resamples_arrays_too(default_whisper_dir, jfk):
    import soxr

    model = transcribe.load_model(str(default_whisper_dir))
    clip = jfk[: 16000 * 4]
    at_8k = soxr.resample(clip, 16000, 8000, quality="HQ")
    back = soxr.resample(at_8k, 8000, 16000, quality="HQ")
    assert model.transcribe(at_8k, sample_rate=8000).text == model.transcribe(back).text


# --- reading limits ------------------------------------------------------------------------------


class _Pipe:
    """A non-seekable binary stream, like standard input from a pipe."""

    def __init__(self, data: bytes):
        self._f = __import__("io").BytesIO(data)

    def read(self, n=-1):
        return self._f.read(n)

    def seekable(self):
        return False


def test_streams_that_cannot_seek_are_read_with_a_bound(monkeypatch):
    from transcribe import audio, audio_source

    data = (AUDIO / "jfk.wav").read_bytes()
    assert len(audio.load_audio(_Pipe(data), 16000)) == 176000
    monkeypatch.setattr(audio_source, "MAX_STREAM_BYTES", 100_000)
    with pytest.raises(transcribe.AudioError, match=r"<file object>: more than .* GiB from a stream that cannot seek"):
        audio.load_audio(_Pipe(data), 16000)
    monkeypatch.setattr(sys, "stdin", type("S", (), {"buffer": _Pipe(data)})())
    with pytest.raises(transcribe.AudioError, match=r"<stdin>: more than"):
        audio.load_audio("-", 16000)


def test_whisper_model_shared_by_threads(default_whisper_dir, jfk):
    """Two threads transcribe different clips with different options through one Whisper model:
    each gets what it gets alone."""
    model = transcribe.load_model(str(default_whisper_dir))
    jobs = {"a": (jfk[: 16000 * 5], {}), "b": (jfk[16000 * 4:], {"beam_size": 2, "word_timestamps": True})}
    alone = {k: model.transcribe(x, **kw).to_dict() for k, (x, kw) in jobs.items()}
    got, errors = {}, []

    def work(k):
        try:
            x, kw = jobs[k]
            got[k] = [model.transcribe(x, **kw).to_dict() for _ in range(2)]
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for k in jobs:
        for r in got[k]:
            assert r["text"] == alone[k]["text"]
            assert [s["text"] for s in r["segments"]] == [s["text"] for s in alone[k]["segments"]]
            assert [(w["word"], w["start"], w["end"]) for w in r["words"]] == \
                [(w["word"], w["start"], w["end"]) for w in alone[k]["words"]]


def test_inputs_are_decoded_in_bounded_groups():
    from transcribe.audio import load_groups

    loaded = []

    def load(n):
        loaded.append(n)
        return np.zeros(n, np.float32)

    groups = load_groups([3, 4, 9, 2, 2, 2], load, rate=1, max_seconds=8)
    first = next(groups)
    assert [len(p) for _, p in first] == [3, 4] and loaded == [3, 4, 9]  # decoded one ahead only
    rest = list(groups)
    assert [[(i, len(p)) for i, p in g] for g in rest] == [[(2, 9)], [(3, 2), (4, 2), (5, 2)]]


def test_flush_denormal_reaches_the_openmp_team_and_is_restored(flush_off):
    """The mode is per thread: inside a model call every thread of the caller's OpenMP team has it
    (PyTorch's intra-op workers, made before the call), and after the call none has."""
    import ctypes

    runner = runtime._openmp_team()
    if runner is None:
        pytest.skip("PyTorch here does not run on GNU OpenMP (libgomp)")
    gomp = ctypes.CDLL(runtime.torch_libgomp())
    seen = {}

    def member(_):
        seen[threading.get_ident()] = runtime._flush_denormal_is_on(torch)

    callback = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(member)

    def team_states(n):
        seen.clear()
        gomp.GOMP_parallel(ctypes.cast(callback, ctypes.c_void_p), None, ctypes.c_uint(n), ctypes.c_uint(0))
        return sorted(seen.values())

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        torch.ones(1 << 20).sum()  # the team exists before the call, as in a running program
        assert team_states(2) == [False, False]
        with runtime.model_call():
            assert team_states(2) == [True, True]
        assert team_states(2) == [False, False]
    finally:
        torch.set_num_threads(before)
