"""Whisper on the model's device: every tensor of a decoding is made where the weights are.

On a CPU: decoding runs under `with torch.device("meta")`, so a factory call (torch.tensor,
zeros, arange, full, ...) that names no device makes a meta tensor; tensors made on the model's
device (taken from the weights or the cross-attention keys) are real CPU tensors and the result is
the normal one, bit for bit.

The device context alone is not enough: elementwise operations refuse a meta operand beside a
CPU one, but PyTorch's CPU index kernels (index_select, advanced indexing, embedding) take a meta
*index* without complaint and read whatever memory is there (garbage values, no error; seen with
torch 2.13). So the meta runs also go through `MixedDevices`, a function mode that refuses any
torch call whose tensor arguments are meta and real at once, and reads back (`.tolist()`,
`.item()`) of a meta tensor fail on their own.

The one thing the device context cannot see is `torch.Generator()`, which ignores it: a spy checks
that transcribe() makes its generator on the model's device, and the CUDA test samples on a GPU.

The runtime's flush-denormal probe (transcribe.runtime, outside this family) makes a CPU tensor
without a device and reads it back; every recognizer call runs it on entry. The meta runs
therefore enter `model_call()` first, outside the device context, so that the recognizer's own
(nested) calls skip that probe; everything under the context is the recognizer's code.

On a GPU (skipped without one): the default model loaded with device="cuda" (float16) transcribes
jfk.wav to the CPU float32 text; beam search and seeded sampling run.
"""
from __future__ import annotations

import pytest
import soundfile as sf
import torch

from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from transcribe.runtime import model_call

from .conftest import AUDIO


class MixedDevices(TorchFunctionMode):
    """Under the meta device context: refuse every torch call that mixes meta tensors with real
    ones, and every call that makes a meta tensor out of no meta tensor (a factory that named no
    device: caught where it is made, even when nothing reads it afterwards)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", func)
        devices = {a.device.type for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)}
        if "meta" in devices and len(devices) > 1:
            raise RuntimeError(f"{name}: a tensor made without the model's device (meta) meets one on "
                               f"{sorted(devices - {'meta'})}")
        out = func(*args, **kwargs)
        if "meta" not in devices and any(isinstance(o, torch.Tensor) and o.is_meta for o in tree_flatten(out)[0]):
            raise RuntimeError(f"{name}: made a tensor without the model's device (meta)")
        return out


@pytest.fixture(scope="module")
def asr(default_whisper_dir):
    from transcribe.whisper.recognizer import WhisperASR

    return WhisperASR.from_ctranslate2(default_whisper_dir)


@pytest.fixture(scope="module")
def jfk():
    audio, sr = sf.read(AUDIO / "jfk.wav", dtype="float32")
    assert sr == 16000
    return audio


def _generator(asr):
    return torch.Generator(device=asr.device).manual_seed(0)


def _languages(asr, audio, mel):
    from transcribe.whisper.language import language_probabilities

    return language_probabilities(asr.model, asr.tokenizer, mel).tolist(), asr.detect_language(mel)


# name -> (model, (recognizer, audio, window mel) -> result); each run starts from a freshly
# seeded generator. "tiny.en" is the default model; "multilingual" the small random multilingual
# one of test_whisper_multilingual (the only way to reach language detection: tiny.en has none).
CASES = {
    "greedy": ("tiny.en", lambda asr, audio, mel: asr.decode_window(mel)),
    "beam2": ("tiny.en", lambda asr, audio, mel: asr.decode_window(mel, beam_size=2)),
    "sample": ("tiny.en", lambda asr, audio, mel: asr.decode_window(mel, temperature=0.5, best_of=2,
                                                                    generator=_generator(asr))),
    "words": ("tiny.en", lambda asr, audio, mel: asr.transcribe(audio, word_timestamps=True)),
    "languages": ("multilingual", _languages),
    "multilingual": ("multilingual", lambda asr, audio, mel: asr.transcribe(audio, beam_size=2)),
}


@pytest.fixture(scope="module")
def models(asr):
    from .test_whisper_multilingual import random_asr

    return {"tiny.en": asr, "multilingual": random_asr("51865")}


_normal: dict = {}
_meta: dict = {}


def _run(models, audio, case, meta: bool):
    cache = _meta if meta else _normal
    if case not in cache:
        name, fn = CASES[case]
        asr = models[name]
        mel = asr.window_mel(audio)  # the front end's input is the caller's (CPU) array
        if meta:
            with model_call(asr.threads), torch.device("meta"), MixedDevices():
                cache[case] = fn(asr, audio, mel)
        else:
            cache[case] = fn(asr, audio, mel)
    return cache[case]


def test_the_check_sees_a_meta_index():
    """What the device context alone misses: a CPU tensor indexed by a meta index."""
    x = torch.arange(15.0).reshape(3, 5)
    i = torch.tensor([2, 0], device="meta")  # as a factory with no device makes it under the context
    with torch.device("meta"), MixedDevices():
        with pytest.raises(RuntimeError, match="without the model's device"):
            x.index_select(0, i)
        with pytest.raises(RuntimeError, match="without the model's device"):
            x[i]
        with pytest.raises(RuntimeError, match="without the model's device"):
            torch.nn.functional.embedding(i, x)
        assert torch.equal(x[torch.tensor([2, 0], device="cpu")], x[[2, 0]])
    with torch.device("meta"), MixedDevices():
        with pytest.raises(RuntimeError, match="made a tensor without"):
            torch.zeros(2, dtype=torch.long)  # made, never read
        torch.zeros(2, device=x.device)


@pytest.mark.parametrize("case", list(CASES))
def test_no_tensor_is_made_without_the_model_device(models, jfk, case):
    r = _run(models, jfk, case, meta=True)
    if case == "words":
        assert r.text and r.words and all(w.end >= w.start for w in r.words)
    elif case == "multilingual":
        assert r.language and r.segments
    elif case == "languages":
        probs, (code, by_code) = r
        assert len(probs) == 1 and code in by_code
    else:
        assert r.tokens[0] and len(r.sum_logprobs) == 1 and len(r.no_speech_probs) == 1


@pytest.mark.parametrize("case", list(CASES))
def test_the_result_under_the_meta_context_is_the_normal_one(models, jfk, case):
    assert _run(models, jfk, case, meta=True) == _run(models, jfk, case, meta=False)


def test_transcribe_makes_its_generator_on_the_model_device(asr, jfk, monkeypatch):
    made = []
    real = torch.Generator

    def spy(*args, **kwargs):
        made.append(kwargs.get("device", args[0] if args else None))
        return real(*args, **kwargs)

    monkeypatch.setattr(torch, "Generator", spy)
    asr.transcribe(jfk[: 16000 * 3], temperature=0.0, seed=3)
    assert made and all(d is not None and torch.device(d) == asr.device for d in made)


def test_a_generator_on_another_device_is_refused(asr, jfk):
    """A CPU model given a generator of another device says so (a stand-in with a CUDA device:
    no real one can be made without a GPU)."""
    from types import SimpleNamespace

    from transcribe.errors import TranscribeError

    gen = SimpleNamespace(device=torch.device("cuda", 0))
    with pytest.raises(TranscribeError, match="generator"):
        asr.decode_window(asr.window_mel(jfk), temperature=0.5, best_of=2, generator=gen)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is false)")
def test_cuda_float16_transcribes_as_the_cpu(asr, jfk, default_whisper_dir):
    from transcribe.loading import load_model

    gpu = load_model(str(default_whisper_dir), device="cuda")
    assert gpu.device.type == "cuda" and gpu.model.dtype == torch.float16
    assert gpu.model.decoder.token_embedding.weight.dtype == torch.float16
    want = asr.transcribe(jfk).text
    got = gpu.transcribe(jfk)
    assert got.text == want
    words = gpu.transcribe(jfk, word_timestamps=True)
    assert words.text == want and words.words and all(w.end >= w.start for w in words.words)
    beam = gpu.transcribe(jfk, beam_size=5, temperature=0.0)
    assert beam.text
    mel = gpu.window_mel(jfk)
    r = gpu.decode_window(mel, beam_size=2)
    assert r.tokens[0]
    hot = gpu.transcribe(jfk, temperature=0.7, seed=1, best_of=2)
    again = gpu.transcribe(jfk, temperature=0.7, seed=1, best_of=2)
    assert hot.text and hot.text == again.text  # seeded on the GPU's generator
    s = gpu.decode_window(mel, temperature=0.5, best_of=2,
                          generator=torch.Generator(device=gpu.device).manual_seed(0))
    assert s.tokens[0]
