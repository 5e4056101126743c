"""Kyutai STT (transformers' `kyutai_speech_to_text`) against transformers 5.25.0's own outputs on the tiny model
tests/models/kyutai/tiny (tools/kyutai_tiny.py made it, tools/kyutai_reference.py made
tests/references/kyutai/tiny.json): the codec's codes, the offline greedy ids and text (transformers' generate on
the processor's padding) of jfk.wav, two dev clips and jfk.wav three times over (33 s: across the LM's 40-position
and the codec transformer's 24-frame sliding windows many times), the live session's ids (equal to the offline ones
however the audio is cut), the command's json and jsonl, the WebSocket, bounded state over a long stream, word
times, loading and refusals.

Codes and ids are compared exactly. The codec's float32 operations are transformers' on the same samples (measured
bit-equal latents here); the tiny codec's codebooks were drawn so that every frame of these clips is nearer its entry
than the next by at least 2.4e-4 of the distance (`code_margin` in the references), some 100x the float32 error a
different summation order (AVX2, AVX-512, AMX; chunked vs whole convolutions) leaves in the latents. The greedy runs'
smallest top-2 logit gap is 5.9 for the clips and 0.068 for the 33 s input (`logit_margin`; values up to ~20; the
float32 differences are ~1e-5). transformers' windowed generate (audio_window_size) is not compared: in 5.25.0 it
cuts each new window's audio from the previous window's start (tools/kyutai_reference.py); the live session is
compared with the offline ids and with transformers' streaming encode of the codec instead."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

import transcribe
from transcribe.errors import ModelError, OptionsNotTaken, OptionValueError

from .conftest import AUDIO, MODELS, REPO
from .live_server import fed_session as _stream
from .live_server import websocket_events

MODEL = MODELS / "kyutai" / "tiny"
REFS = json.loads((REPO / "tests" / "references" / "kyutai" / "tiny.json").read_text(encoding="utf-8"))
CLIPS = {c["audio"]: c for c in REFS["clips"]}
JFK = AUDIO / "jfk.wav"


def _pcm24(clip: str) -> np.ndarray:
    from transcribe.audio import load_audio

    if clip.endswith(" x3"):
        one = load_audio(str(AUDIO / clip[:-3]), 24000)
        return np.concatenate([one, one, one])
    return load_audio(str(AUDIO / clip), 24000)


def _pcm16(clip: str) -> np.ndarray:
    from transcribe.audio import load_audio

    return load_audio(str(AUDIO / clip), 16000)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    # the tiny model's operations are a few microseconds each: one thread, as the other tiny-model tests run, spares
    # them OpenMP's hand-offs (on a busy 2-core machine these tests took 145 s with 2 threads, 9 s with one)
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def model(one_thread):
    return transcribe.load_model(str(MODEL))


# ---------------------------------------------------------------------------------------------- offline
def test_the_codec_codes_equal_transformers(model):
    ref = torch.tensor(CLIPS["jfk.wav"]["codes"])
    padded = model.pad(_pcm24("jfk.wav"))
    n = len(padded) // 1920
    codes, _ = model.model.mimi.encode(torch.from_numpy(padded[: n * 1920]), None, model.config.lm.num_codebooks)
    assert codes.shape == (n, 4)
    assert torch.equal(codes, ref[:n])


@pytest.mark.parametrize("clip", list(CLIPS))
def test_offline_greedy_equals_transformers(model, clip):
    ref = CLIPS[clip]
    pcm = _pcm24(clip)
    assert len(pcm) == ref["samples"]
    run = model.decode_pcm(pcm)
    assert [s.id for s in run.steps] == ref["ids"]
    assert model.to_transcript(run.steps, len(pcm) / 24000, model.options()).text == ref["text"].strip()


def test_the_tiny_model_follows_the_audio(model):
    t = model.transcribe(str(JFK), word_timestamps=True)
    assert t.text == CLIPS["jfk.wav"]["text"].strip()
    assert t.text.startswith("And so, my fellow Americans")
    words = [w.word for w in t.words]
    assert " ".join(words) == t.text
    starts = [w.start for w in t.words]
    assert starts == sorted(starts) and all(0 <= w.start <= w.end <= t.duration for w in t.words)
    # the tiny model was trained with the words spread over the speech, "Americans" about 3 s in
    amer = next(w for w in t.words if w.word.startswith("Americans"))
    assert 1.5 < amer.start < 4.5
    assert t.segments and t.segments[0].end == pytest.approx(t.duration)


def test_the_codec_s_streaming_codes_equal_transformers_streaming_encode(model):
    # transformers' encode(use_streaming=True) 5 frames at a time; ours 3 frames at a time: the codes of the whole
    ref = CLIPS["jfk.wav"]["stream_codes"]
    padded = model.pad(_pcm24("jfk.wav"))
    state, parts = None, []
    for a in range(0, len(ref) * 1920, 3 * 1920):
        codes, state = model.model.mimi.encode(torch.from_numpy(padded[a:min(a + 3 * 1920, len(ref) * 1920)]), state,
                                               model.config.lm.num_codebooks)
        parts.append(codes)
    assert torch.cat(parts).tolist() == ref == CLIPS["jfk.wav"]["codes"][: len(ref)]


def test_offline_blocks_of_any_size_give_the_same_ids(model):
    from transcribe.kyutai.decode import Decoder

    padded = model.pad(_pcm24("jfk.wav"))
    n = len(padded) // 1920
    for block in (5, 40):
        d = Decoder(model.model, block_frames=block)
        d.push(padded[: (n - 1) * 1920])
        d.run(n - 1)
        assert [s.id for s in d.steps] == CLIPS["jfk.wav"]["ids"]


def test_beam_equals_transformers_beam(model):
    # transformers' generate(num_beams=2) on jfk.wav (it runs on this model: the audio tokens are per beam row)
    from transcribe.kyutai.decode import beam_padded

    ref = CLIPS["jfk.wav"]["beam"]["ids"]
    hyps = beam_padded(model.model, model.pad(_pcm24("jfk.wav")), 2)
    assert hyps[0].ids == ref
    t = model.transcribe(str(JFK), beam_size=2)
    assert t.text == model.decode_ids(ref).strip() and t.text


# ---------------------------------------------------------------------------------------------- live
@pytest.mark.parametrize("cuts", [[], "odd"])
def test_a_live_session_equals_offline(model, cuts):
    pcm = _pcm16("jfk.wav")
    if cuts == "odd":
        cuts = sorted({int(x) for x in np.cumsum(np.random.default_rng(0).integers(1, 4000, 300)) if x < len(pcm)})
    s, text = _stream(model, pcm, cuts)
    assert s.token_ids == CLIPS["jfk.wav"]["ids"]
    assert text.strip() == s.text() == CLIPS["jfk.wav"]["text"].strip()


def test_text_comes_out_while_the_audio_goes_in(model):
    pcm = _pcm16("jfk.wav")
    s = model.stream()
    got = []
    for i in range(0, len(pcm), 1600):
        s.feed(pcm[i:i + 1600])
        got.append(s.take_new_text())
    assert "".join(got).startswith("And so, my fellow Americans")  # before finalize
    assert s.latency.lookahead_ms == pytest.approx(500.0)
    s.finalize()
    words = s.drain_words()
    assert " ".join(w.word for w in words) == s.text()
    assert [w.start for w in words] == sorted(w.start for w in words)


def test_the_state_stays_bounded_over_a_long_stream(model):
    # 4 s pieces of speech and noise, fed 80 ms at a time: the LM's window is 40 positions (3.2 s), the codec
    # transformer's 24 frames at 25 Hz (0.96 s); after the first piece the state's sizes stop growing
    s = model.stream()
    rng = np.random.default_rng(1)
    speech = _pcm16("jfk.wav")[:64000]
    sizes = []
    for i in range(4):
        pcm = speech if i % 2 == 0 else (0.01 * rng.standard_normal(len(speech))).astype(np.float32)
        for a in range(0, len(pcm), 1280):
            s.feed(pcm[a:a + 1280])
        d = s.decoder
        lm = [kv[0].shape[2] for kv in d.cache["kv"]]
        codec = [kv[0].shape[2] for kv in d.codec_state["transformer"]["kv"]]
        convs = [0 if c is None else c.shape[-1] for c in d.codec_state["convs"]]
        sizes.append((lm, codec, convs, len(d.codes), d.pending.size < 1920))
    cfg = model.config
    assert d.position > 200
    assert all(n == cfg.lm.sliding_window - 1 for n in sizes[-1][0])
    assert all(n == cfg.mimi.sliding_window - 1 for n in sizes[-1][1])
    assert sizes[-1] == sizes[1] == sizes[2]  # the same sizes after 8 s as after 16 s
    assert sizes[-1][3] <= 1 and sizes[-1][4]
    s.finalize()


def test_reset_starts_a_new_stream(model):
    pcm = _pcm16("jfk.wav")
    s = model.stream()
    s.feed(pcm[:20000])
    s.reset()
    s.feed(pcm)
    s.finalize()
    assert s.token_ids == CLIPS["jfk.wav"]["ids"]


# ---------------------------------------------------------------------------------------------- surfaces
def test_the_command_writes_json(capsys, model):
    from transcribe import cli

    code = cli.main([str(JFK), "--model", str(MODEL), "--format", "json"])
    out, _ = capsys.readouterr()
    assert code == 0
    d = json.loads(out)
    assert d["text"] == CLIPS["jfk.wav"]["text"].strip()
    assert d["model"] == "tiny"


def test_the_command_streams_jsonl(capsys, model):
    from transcribe import cli

    code = cli.main(["--stream", str(JFK), "--model", str(MODEL), "--format", "jsonl"])
    out, _ = capsys.readouterr()
    assert code == 0
    lines = [json.loads(line) for line in out.splitlines()]
    final = lines[-1]
    assert final["type"] == "final" and final["text"] == CLIPS["jfk.wav"]["text"].strip()
    assert [t["id"] for t in final["tokens"]] == [i for i in CLIPS["jfk.wav"]["ids"] if i not in model.not_text]
    assert len([d for d in lines if d["type"] == "partial"]) > 3


def test_the_websocket_streams_it(model):
    pcm = (np.clip(_pcm16("jfk.wav"), -1, 1) * 32767).astype("<i2")
    events = websocket_events(model, pcm, 3200)
    s, _ = _stream(model, pcm.astype(np.float32) / 32768.0, list(range(3200, len(pcm), 3200)))
    assert events[-1]["type"] == "final" and events[-1]["text"] == s.text() and s.text()


# ---------------------------------------------------------------------------------------------- dtypes
@pytest.mark.parametrize("dtype", ["bfloat16", "int8"])
def test_other_dtypes_transcribe_the_same_audio(dtype):
    # the LM in bfloat16 / int8 products (the codec float32): not the reference's float32 ids, the same text on the
    # tiny model (its greedy steps' top-2 logit gaps are 5.9 and more on jfk.wav)
    q = transcribe.load_model(str(MODEL), dtype=dtype)
    assert q.transcribe(str(JFK)).text == CLIPS["jfk.wav"]["text"].strip()


# ---------------------------------------------------------------------------------------------- loading
def test_options_it_does_not_take(model):
    with pytest.raises(OptionsNotTaken):
        model.transcribe(str(JFK), delay_ms=480)
    with pytest.raises(OptionValueError):
        model.transcribe(str(JFK), beam_size=0)


def test_unknown_settings_and_broken_layouts_are_refused(tmp_path):
    d = tmp_path / "m"
    shutil.copytree(MODEL, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["codec_config"]["use_causal_conv"] = False
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelError, match="use_causal_conv"):
        transcribe.load_model(str(d))
    cfg["codec_config"]["use_causal_conv"] = True
    cfg["rope_parameters"] = {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e5}
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelError, match="rope_type"):
        transcribe.load_model(str(d))
    cfg["rope_parameters"] = {"rope_type": "default", "rope_theta": 1e5}
    cfg["num_hidden_layers"] = 3
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelError, match="incomplete"):
        transcribe.load_model(str(d))


def test_the_hub_aliases():
    from transcribe.hub import ALIASES
    from transcribe.loading import FAMILIES

    assert ALIASES["kyutai-stt-1b"] == "kyutai/stt-1b-en_fr-trfs"
    assert ALIASES["kyutai-stt-2.6b"] == "kyutai/stt-2.6b-en-trfs"
    names = [f.name for f in FAMILIES]
    assert names.index("kyutai") < names.index("whisper")


def test_the_codec_config_defaults_are_mimis():
    """A codec_config without codebook_dim takes MimiConfig's default (256), not the hidden size; None takes
    the hidden size, as MimiConfig does."""
    from transcribe.kyutai.config import mimi_config

    assert mimi_config({"model_type": "mimi"}, "x").codebook_dim == 256
    c = mimi_config({"model_type": "mimi", "codebook_dim": None, "hidden_size": 384}, "x")
    assert c.codebook_dim == 384
