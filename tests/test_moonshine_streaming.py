"""Moonshine Streaming (transformers' `moonshine_streaming`) against transformers 5.25.0's own outputs on the tiny
model tests/models/moonshine_streaming/tiny (tools/moonshine_streaming_tiny.py made it; tools/
moonshine_streaming_reference.py made tests/references/moonshine_streaming/reference.json): offline greedy and
beam ids, the live session's partial and final ids against the model's streaming path run with transformers'
modules (chunks of 500 ms decoded every 240 ms, one
segment; chunks of 320 ms decoded every 960 ms, segments of 4 s), bounded state over a long stream, the command's json
and jsonl, the WebSocket, and the refusals.

Tolerances: the ids are compared exactly. The encoder here runs the same float32 operations as transformers' on
the same samples offline (its output measured equal to the bit); the live session encodes a window of the audio
at a time (other matrix shapes, whose results move in the last bits between CPUs: AVX2, AVX-512, AMX), which
changes no greedy choice: the smallest top-2 logit margin of the tiny model's greedy steps on jfk.wav is far
above float32 rounding of values of that size: 3.26 (test_greedy_margins_are_not_ties)."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import soundfile as sf
import torch

import transcribe
from transcribe.errors import ModelError, OptionsNotTaken, OptionValueError

from .conftest import AUDIO, MODELS, REPO
from .live_server import websocket_events

MODEL = MODELS / "moonshine_streaming" / "tiny"
REFS = json.loads((REPO / "tests" / "references" / "moonshine_streaming" / "reference.json").read_text("utf-8"))
JFK = AUDIO / "jfk.wav"


def _audio(clip: str) -> np.ndarray:
    x, sr = sf.read(str(AUDIO / clip), dtype="float32")
    assert sr == 16000 and x.ndim == 1
    return x


@pytest.fixture(scope="module")
def model():
    return transcribe.load_model(str(MODEL))


# ---------------------------------------------------------------------------------------------- offline
@pytest.mark.parametrize("ref", REFS["offline"], ids=[r["clip"] for r in REFS["offline"]])
def test_offline_greedy_and_beam_equal_transformers(model, ref):
    pcm = _audio(ref["clip"])
    assert model.decode_pcm(pcm, model.options()).ids == ref["greedy"]
    assert model.decode_pcm(pcm, model.options(beam_size=3)).ids == ref["beam3"]
    t = model.transcribe(str(AUDIO / ref["clip"]))
    assert t.text == ref["text"] and [tok.id for tok in t.tokens] == ref["greedy"]


def test_int8_loads_and_follows_the_float_model():
    from transcribe.quant import Int8Linear

    m8 = transcribe.load_model(str(MODEL), dtype="int8")
    assert isinstance(m8.model.encoder.layers[0].self_attn.q_proj, Int8Linear)
    assert isinstance(m8.model.decoder.layers[0].mlp.fc1, Int8Linear)
    assert isinstance(m8.model.proj_out, Int8Linear)
    ref = REFS["offline"][0]
    ids8 = m8.decode_pcm(_audio(ref["clip"]), m8.options()).ids
    # the tiny model's words survive int8's rounding (per-channel weights, per-row activations) at its start
    assert ids8[:10] == ref["greedy"][:10]


def test_the_tiny_model_follows_the_audio(model):
    jfk = ("And so, my fellow Americans, ask not what your country can do for you, ask what you can do for your "
           "country.")
    assert REFS["offline"][0]["clip"] == "jfk.wav" and REFS["offline"][0]["text"] == jfk


def test_greedy_margins_are_not_ties(model):
    pcm = _audio("jfk.wav")
    state = model.start(model.encode(pcm))
    ids = torch.tensor([[model.config.decoder_start]])
    margins = []
    with torch.inference_mode():
        for _ in range(len(REFS["offline"][0]["greedy"]) + 1):
            logits = model.model.logits(ids, state)[0]
            top = logits.topk(2).values
            margins.append(float(top[0] - top[1]))
            ids = logits.argmax().view(1, 1)
    assert min(margins) > 0.5, min(margins)  # measured 3.26


# ---------------------------------------------------------------------------------------------- live
def _run(model, pcm, chunk: int, **options):
    s = model.stream(**options)
    partials = []
    for a in range(0, len(pcm), chunk):
        before = s.decodes
        s.feed(pcm[a:a + chunk])
        if s.decodes != before:
            partials.append({"fed": min(a + chunk, len(pcm)), "ids": s.last_partial})
            assert s.tentative_text() == model.decode_ids(s.last_partial)
    s.finalize()
    return s, partials


@pytest.mark.parametrize("ref", REFS["streaming"], ids=[f"{r['chunk_ms']:g}ms-{r['segment_s']:g}s"
                                                        for r in REFS["streaming"]])
def test_a_live_session_equals_the_streaming_path(model, ref):
    pcm = _audio(ref["clip"])
    s, partials = _run(model, pcm, int(ref["chunk_ms"] * 16), decode_every_ms=ref["decode_every_ms"],
                       segment_s=ref["segment_s"])
    assert partials == [{"fed": p["fed"], "ids": p["ids"]} for p in ref["partials"]]
    assert [t.id for t in s.tokens()] == [i for seg in ref["segments"] for i in seg]
    assert s.text().split() == ref["final_text"].split()
    if len(ref["segments"]) == 1:  # one segment: the offline transcript
        assert s.text() == REFS["offline"][0]["text"]


def test_state_stays_bounded_over_a_long_stream(model):
    pcm = np.concatenate([_audio("jfk.wav")] * 2)  # 22 s
    s = model.stream(segment_s=3.0, decode_every_ms=2000.0)
    most_frames = most_samples = most_encoder = 0
    for a in range(0, len(pcm), 16000):
        s.feed(pcm[a:a + 16000])
        most_frames = max(most_frames, s.cache_frames)
        most_samples = max(most_samples, s.held_samples)
        most_encoder = max(most_encoder, s.encoder_frames)
        s.take_new_text()
        s.drain()
    s.finalize()
    assert most_frames <= 3.0 / 0.02 and most_samples <= 3 * 16000
    # each of the 6 layers keeps at most 15 frames back + its lookahead + a feed's new frames (1 s: 50), and the
    # convolutions their inputs of a feed: bounded by the feed, not by the stream
    assert most_encoder <= 6 * (15 + 3 + 50) + 2 * (4 + 200)
    assert len(s.text().split()) > 20  # text of every segment, committed


def test_the_command_gives_json_and_streams_jsonl(capsys):
    from transcribe import cli

    assert cli.main([str(JFK), "--model", str(MODEL), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["text"] == REFS["offline"][0]["text"] and out["segments"][0]["end"] == pytest.approx(11.0, abs=0.01)
    assert cli.main(["--stream", str(JFK), "--model", str(MODEL), "--format", "jsonl", "--decode-every-ms", "960"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines[-1]["type"] == "final" and lines[-1]["text"] == REFS["offline"][0]["text"]
    partials = [d["text"] for d in lines if d["type"] == "partial"]
    assert len(partials) > 3 and partials[-1] == lines[-1]["text"]


def test_the_websocket_streams_it(model):
    pcm = (np.clip(_audio("jfk.wav"), -1, 1) * 32767).astype("<i2")
    events = websocket_events(model, pcm, 8000, start={"decode_every_ms": 960})
    assert events[-1]["type"] == "final" and events[-1]["text"] == REFS["offline"][0]["text"]
    assert "partial" in [e["type"] for e in events]


def test_long_input_is_cut_into_pieces(model):
    pcm = np.concatenate([_audio("jfk.wav"), np.zeros(8000, np.float32), _audio("jfk.wav")])
    t = model.transcribe(pcm, sample_rate=16000, max_piece_s=12.0)
    assert t.text == REFS["offline"][0]["text"] + " " + REFS["offline"][0]["text"]
    assert t.duration == pytest.approx(len(pcm) / 16000)


# ---------------------------------------------------------------------------------------------- refusals
def test_options_it_does_not_take_and_bad_values(model):
    with pytest.raises(OptionsNotTaken):
        model.transcribe(str(JFK), language="en")
    with pytest.raises(OptionValueError, match="word"):
        model.transcribe(str(JFK), word_timestamps=True)
    with pytest.raises(OptionValueError):
        model.transcribe(str(JFK), beam_size=0)
    with pytest.raises(OptionValueError):
        model.stream(segment_s=1.0)
    with pytest.raises(OptionsNotTaken):
        model.stream(beam_size=2)


def test_unknown_settings_and_broken_layouts_are_refused(tmp_path):
    def copy(name):
        d = tmp_path / name
        shutil.copytree(MODEL, d)
        return d

    d = copy("a")
    cfg = json.loads((d / "config.json").read_text())
    cfg["encoder_config"]["sliding_windows"] = [[16, 4]]
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelError, match="sliding_windows"):
        transcribe.load_model(str(d))
    d = copy("b")
    cfg = json.loads((d / "config.json").read_text())
    cfg["rope_parameters"]["rope_type"] = "yarn"
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelError, match="rotary"):
        transcribe.load_model(str(d))
    d = copy("c")
    (d / "tokenizer.json").unlink()
    with pytest.raises(ModelError, match="tokenizer.json"):
        transcribe.load_model(str(d))
    d = copy("d")
    cfg = json.loads((d / "config.json").read_text())
    cfg["hidden_size"] = 40
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelError, match="shape"):
        transcribe.load_model(str(d))


def test_the_hub_aliases():
    from transcribe.hub import ALIASES

    for size in ("tiny", "small", "medium"):
        assert ALIASES[f"moonshine-streaming-{size}"] == f"UsefulSensors/moonshine-streaming-{size}"
