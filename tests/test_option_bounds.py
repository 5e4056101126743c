"""Every numeric option of every family is bounded (issue 36, items 5 and 12): NaN, infinity, a value below
its least or above its documented maximum is refused by the family's options dataclass with
`OptionValueError` naming the option, before any work; the command says it in one line (exit 2) and the
server answers 400 naming the field, never 500. The maxima are said in the options' help texts."""
from __future__ import annotations

import dataclasses
import math
import subprocess
import sys

import pytest

from transcribe import options as shared
from transcribe.errors import OptionValueError
from transcribe.granite.options import GraniteOptions
from transcribe.options import surfaces
from transcribe.parakeet import options as parakeet
from transcribe.parakeet.options import ParakeetOptions, ParakeetStreamOptions
from transcribe.whisper import options as whisper
from transcribe.whisper.options import WhisperOptions, WhisperStreamOptions

from .conftest import REPO, TINY

NAN, INF = math.nan, math.inf
SAMPLE = REPO / "samples" / "sample.wav"
PARAKEET_MODEL = TINY / "tiny-tdt-random.nemo"

# (options class, option, the values it refuses, the largest value it takes or None)
P_BEAM, W_BEAM = parakeet.MAX_BEAM, whisper.MAX_BEAM
RATES = shared.SAMPLE_RATES
BATCH = shared.MAX_BATCH_SIZE
CASES = [
    # Parakeet transcribe()
    (ParakeetOptions, "batch_size", [0, -1, BATCH + 1, 1.5, True, NAN], BATCH),
    (ParakeetOptions, "sample_rate", [0, -16000, 1, RATES[1] + 1, 16000.0, NAN], RATES[1]),
    (ParakeetOptions, "beam_size", [0, -5, P_BEAM + 1, 10**9, 2.0, NAN, INF], P_BEAM),
    (ParakeetOptions, "nbest", [0, -1, P_BEAM + 1, NAN], None),
    (ParakeetOptions, "hotword_weight", [NAN, INF, -INF, -1.0, parakeet.MAX_HOTWORD_WEIGHT + 0.1, "2"],
     parakeet.MAX_HOTWORD_WEIGHT),
    (ParakeetOptions, "lm_weight", [NAN, INF, -0.5, parakeet.MAX_LM_WEIGHT + 0.1], parakeet.MAX_LM_WEIGHT),
    # Parakeet stream()
    (ParakeetStreamOptions, "chunk_s", [NAN, INF, 0.0, -1.0, parakeet.MAX_WINDOW_PART_S + 1, True],
     parakeet.MAX_WINDOW_PART_S),
    (ParakeetStreamOptions, "left_s", [NAN, INF, -0.5, parakeet.MAX_WINDOW_PART_S + 1], parakeet.MAX_WINDOW_PART_S),
    (ParakeetStreamOptions, "right_s", [NAN, -INF, -0.5, parakeet.MAX_WINDOW_PART_S + 1], 0.0),
    (ParakeetStreamOptions, "att_context_size", [[70], [70, 13, 1], [70.0, 13], "70,13"], None),
    # Whisper transcribe()
    (WhisperOptions, "batch_size", [0, -3, BATCH + 1, NAN], BATCH),
    (WhisperOptions, "sample_rate", [0, 1, RATES[1] * 2, NAN], RATES[0]),
    (WhisperOptions, "beam_size", [0, -5, W_BEAM + 1, 1000, NAN, INF], W_BEAM),
    (WhisperOptions, "best_of", [0, -1, W_BEAM + 1, 1000, 100_000_000, None, NAN], W_BEAM),
    (WhisperOptions, "patience", [NAN, INF, 0.0, -1.0, whisper.MAX_PATIENCE + 1], whisper.MAX_PATIENCE),
    (WhisperOptions, "length_penalty", [NAN, INF, -0.1, whisper.MAX_LENGTH_PENALTY + 0.1], whisper.MAX_LENGTH_PENALTY),
    (WhisperOptions, "temperature", [NAN, INF, -0.2, whisper.MAX_TEMPERATURE + 1, (0.0, NAN), (), "0.2",
                                     (0.1,) * (whisper.MAX_TEMPERATURES + 1)], (0.05,) * whisper.MAX_TEMPERATURES),
    (WhisperOptions, "temperature_increment", [NAN, INF, -0.2, 1.5, 1e-9, 0.01], 1 / (whisper.MAX_TEMPERATURES - 1)),
    (WhisperOptions, "no_speech_threshold", [NAN, INF, -0.1, 1.1], 1.0),
    (WhisperOptions, "logprob_threshold", [NAN, -INF, 0.5], -1e6),
    (WhisperOptions, "compression_ratio_threshold", [NAN, INF, 0.0, -2.4], 1e6),
    (WhisperOptions, "seed", [-1, 2**64, 1.5, NAN], 2**63 - 1),
    (WhisperOptions, "initial_prompt", ["x" * (whisper.MAX_PROMPT_CHARS + 1), 5], "x" * whisper.MAX_PROMPT_CHARS),
    # Whisper stream() (its transcribe() options are checked as above: the class derives from it)
    (WhisperStreamOptions, "chunk_s", [NAN, INF, 0.0, -4.0, whisper.MAX_WINDOW_S + 1], whisper.MAX_WINDOW_S),
    (WhisperStreamOptions, "left_s", [NAN, -1.0, whisper.MAX_WINDOW_S + 1], 0.0),
    (WhisperStreamOptions, "right_s", [INF, -1.0], 2.0),
    (WhisperStreamOptions, "beam_size", [0, W_BEAM + 1], W_BEAM),
    # Granite transcribe()
    (GraniteOptions, "batch_size", [0, -1, BATCH + 1, None, NAN], BATCH),
    (GraniteOptions, "sample_rate", [0, 1, RATES[1] + 1], 8000),
    (GraniteOptions, "max_piece_s", [NAN, INF, -INF, 0.0, 9.9, 200.5, "90", None], 200.0),
]


def _label(case) -> str:
    return f"{case[0].__name__}.{case[1]}"


@pytest.mark.parametrize("cls,name,bad,largest", CASES, ids=[_label(c) for c in CASES])
def test_each_bad_value_is_refused_naming_the_option(cls, name, bad, largest):
    for value in bad:
        with pytest.raises(OptionValueError) as e:
            cls(**{name: value})
        assert e.value.option == name, (value, e.value.option)
        message = str(e.value)
        assert message.startswith(name) or f" {name} " in f" {message}", (value, message)
        assert len(message) < 300 and "\n" not in message, message  # one line, the value cut short
    if largest is not None:  # the bound itself is taken
        cls(**{name: largest})


def test_every_numeric_option_has_a_case():
    """A numeric option added to a family without a bound would be missing here: every int or float field
    of every options class is listed in CASES (or is checked as a pair: nbest against beam_size)."""
    listed = {(c[0], c[1]) for c in CASES}
    listed |= {(WhisperStreamOptions, f.name) for f in dataclasses.fields(WhisperOptions)
               if (WhisperOptions, f.name) in listed}  # the stream's inherited checks
    missing = []
    for cls in (ParakeetOptions, ParakeetStreamOptions, WhisperOptions, WhisperStreamOptions, GraniteOptions):
        for f in dataclasses.fields(cls):
            if any(word in str(f.type) for word in ("int", "float")) and (cls, f.name) not in listed:
                missing.append(f"{cls.__name__}.{f.name}")
    assert not missing, missing


def test_the_defaults_and_usual_values_are_taken():
    for cls in (ParakeetOptions, ParakeetStreamOptions, WhisperOptions, WhisperStreamOptions, GraniteOptions):
        cls()
    ParakeetOptions(beam_size=4, nbest=4, hotwords="Kennedy,Berlin", hotword_weight=2.0, lm_weight=0.0)
    WhisperOptions(beam_size=5, patience=2.0, length_penalty=1.0, best_of=5, temperature=(0.0, 0.2, 0.4),
                   temperature_increment=0.2, logprob_threshold=0.0, no_speech_threshold=None)
    WhisperOptions(temperature=0.0, temperature_increment=0.05)  # 0 to 1 in 21 steps: the longest schedule
    assert len(WhisperOptions(temperature=0.0, temperature_increment=0.05).temperatures) == whisper.MAX_TEMPERATURES
    ParakeetStreamOptions(att_context_size=[70, 13], chunk_s=2.0, left_s=0.0, right_s=2.0)
    GraniteOptions(max_piece_s=10, batch_size=1)


def test_pairs_and_counts_are_bounded():
    with pytest.raises(OptionValueError, match="cannot exceed beam_size"):
        ParakeetOptions(beam_size=2, nbest=3)
    with pytest.raises(OptionValueError, match="at most 1000 phrases"):
        ParakeetOptions(hotwords=",".join(f"w{i}" for i in range(parakeet.MAX_HOTWORDS + 1)))
    with pytest.raises(OptionValueError, match="at most 100 characters"):
        ParakeetOptions(hotwords=["x" * (parakeet.MAX_HOTWORD_CHARS + 1)])
    with pytest.raises(OptionValueError, match="keeps no finished candidate") as e:
        WhisperOptions(beam_size=2, patience=0.1)  # round(0.2) = 0: the decoder's own ValueError before
    assert e.value.option == "patience"


def test_the_help_texts_say_the_maxima():
    helps = {(cls, name): s.help for cls in (ParakeetOptions, WhisperOptions, ParakeetStreamOptions,
                                             WhisperStreamOptions, GraniteOptions)
             for name, s in surfaces(cls).items()}
    assert f"at most {P_BEAM}" in helps[ParakeetOptions, "beam_size"]
    assert f"at most {W_BEAM}" in helps[WhisperOptions, "beam_size"]
    assert f"at most {W_BEAM}" in helps[WhisperOptions, "best_of"]
    assert f"at most {whisper.MAX_PATIENCE:g}" in helps[WhisperOptions, "patience"]
    assert f"{parakeet.MAX_LM_WEIGHT:g}" in helps[ParakeetOptions, "lm_weight"]
    assert f"{parakeet.MAX_HOTWORD_WEIGHT:g}" in helps[ParakeetOptions, "hotword_weight"]
    assert f"at most {parakeet.MAX_HOTWORDS}" in helps[ParakeetOptions, "hotwords"]
    assert f"{whisper.MAX_TEMPERATURES}" in helps[WhisperOptions, "temperature"]
    assert f"{BATCH}" in helps[GraniteOptions, "batch_size"]


# ---------------------------------------------------------------------------------------------- the command

def _command(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "transcribe", str(SAMPLE), *args], cwd=REPO, capture_output=True,
                          text=True, timeout=300)


# The command names its flags (`--beam-size`), not the Python option (`beam_size`).
@pytest.mark.parametrize("args,words", [
    (["--beam-size", "1000000000"], "error: --beam-size must be at most 64"),  # Whisper (the default model)
    (["--patience", "nan"], "error: --patience must be a finite number"),
    (["--beam-size", "5", "--patience", "inf"], "error: --patience must be a finite number"),
    (["--temperature", "0", "--temperature-increment", "0.000001"], "error: --temperature-increment"),
    (["--model", str(PARAKEET_MODEL), "--beam-size", "1000000000"], "error: --beam-size must be at most 64"),
    (["--model", str(PARAKEET_MODEL), "--beam-size", "4", "--hotwords", "a", "--hotword-weight", "nan"],
     "error: --hotword-weight must be a finite number"),
], ids=["whisper-beam", "whisper-patience-nan", "whisper-patience-inf", "whisper-step", "parakeet-beam",
        "parakeet-hotword-weight"])
def test_the_command_refuses_in_one_line(args, words):
    r = _command(*args)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2, r.stderr
    assert len(lines) == 1 and words in lines[0], r.stderr
    assert "usage" not in r.stderr and "Traceback" not in r.stderr and "internal error" not in r.stderr
    assert r.stdout == ""  # nothing transcribed


@pytest.mark.parametrize("model", [None, str(PARAKEET_MODEL)], ids=["whisper", "parakeet"])
def test_the_command_refuses_a_value_before_loading_the_model(model, monkeypatch, capsys):
    """A local model's family checks the values of its options before the model loads (minutes for a
    large one): no Worker is made."""
    from transcribe import cli
    from transcribe.jobs import work

    def no_load(*a, **k):
        raise AssertionError("the model was loaded before its options were checked")

    monkeypatch.setattr(work, "Worker", no_load)
    rc = cli.main([str(SAMPLE), "--beam-size", "65"] + (["--model", model] if model else []))
    assert rc == 2
    assert capsys.readouterr().err.strip().endswith("error: --beam-size must be at most 64 (accuracy stops "
                                                    "improving by about 10; time and memory grow with each), got 65")


def test_a_batch_job_refuses_a_value_naming_its_flag(tmp_path):
    r = subprocess.run([sys.executable, "-m", "transcribe", "batch", str(SAMPLE), "-o", str(tmp_path / "out"),
                        "--model", str(PARAKEET_MODEL), "--beam-size", "65"], cwd=REPO, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == ["transcribe batch: error: --beam-size must be at most 64 (accuracy stops "
                                             "improving by about 10; time and memory grow with each), got 65"]
    assert r.stderr.strip().splitlines() == ["transcribe batch: error: --beam-size must be at least 1, got 0"] or \
        "error: --beam-size" in r.stderr and "beam_size" not in r.stderr, r.stderr


# ---------------------------------------------------------------------------------------------- the server

@pytest.fixture(scope="module")
def server(tmp_path_factory):
    pytest.importorskip("fastapi", reason="the server tests need the test extra")
    from .test_server import Server

    s = Server([], tmp_path_factory.mktemp("bounds"))
    yield s
    s.stop()


@pytest.mark.parametrize("fields,param", [
    ({"beam_size": "1000000000"}, "beam_size"),
    ({"beam_size": "0"}, "beam_size"),
    ({"beam_size": "-5"}, "beam_size"),
    ({"beam_size": "5", "patience": "nan"}, "patience"),
    ({"best_of": "100000000"}, "best_of"),
    ({"best_of": "1000"}, "best_of"),
    ({"compression_ratio_threshold": "inf"}, "compression_ratio_threshold"),
    ({"no_speech_threshold": "-1"}, "no_speech_threshold"),
])
def test_the_server_answers_400_naming_the_field(server, fields, param):
    import json

    from .test_server import multipart

    body, headers = multipart(fields, {"file": ("a.wav", SAMPLE.read_bytes())})
    status, _, raw = server.request("POST", "/v1/audio/transcriptions", body, headers)
    assert status == 400, raw
    err = json.loads(raw)["error"]
    assert err["param"] == param and err["code"] == "invalid_value", err
    assert "\n" not in err["message"] and len(err["message"]) < 300, err


@pytest.mark.parametrize("query,words", [
    ("beam_size=1000000000", "beam_size must be at most 64"),
    ("patience=nan", "patience must be a finite number"),
    ("best_of=100000000", "best_of must be at most 64"),
])
def test_the_websocket_refuses_before_a_session(server, query, words):
    import asyncio
    import json

    websockets = pytest.importorskip("websockets", reason="the server tests need the test extra")

    async def run():
        messages = []
        async with websockets.connect(f"ws://127.0.0.1:{server.port}/v1/audio/stream?{query}") as ws:
            await ws.send(json.dumps({"type": "start"}))
            try:
                async for m in ws:
                    messages.append(json.loads(m))
            except websockets.exceptions.ConnectionClosedError:
                pass  # closed with an error code: read below
            return messages, ws.close_code

    messages, code = asyncio.run(asyncio.wait_for(run(), 60))  # refused at once: a session would wait for audio
    assert [m["type"] for m in messages] == ["error"] and words in messages[0]["message"], messages
    assert code == 1003
