"""SenseVoice (funasr's SenseVoiceSmall) against funasr 1.4.16's own outputs on the tiny model
tests/models/sensevoice/tiny (tools/sensevoice_tiny.py; references by tools/sensevoice_reference.py, funasr's
AutoModel.generate with its front end's dither 0): the greedy CTC ids (tags included) of 3 clips x 4 requests
(language auto / en / zh, use_itn on and off) exactly, funasr's text with its tags, its
`rich_transcription_postprocess` text, the front end's fbank and LFR + CMVN features and the encoder's output
within float32 tolerances; the tags in `Transcript.tags` / `.language`, never in the text; times on the 60 ms
frames; long audio through the shared path; the command's JSON; the refusals.

Tolerances: the front end computes Kaldi's fbank in float32 as funasr's (kaldi-native-fbank) does, with another
FFT and other sums: measured 2.1e-4 on log-mel values up to ~20 (the power spectrum's float32 sums of values
up to 1e14 round in the 7th digit), 4.7e-5 after LFR + CMVN; the bounds 2e-3 / 1e-3 leave 10x-20x for other CPUs'
FFTs. The encoder (on funasr's features) runs the same products through other kernels (SDPA against funasr's
matmul + softmax; CPUs differ: AVX2, AVX-512, AMX): measured 3e-6, bound 1e-4. The per-frame best log-probs
(each run from the audio, so front end included): measured 1.8e-5, bound 1e-3; the greedy ids are compared
exactly."""
import json
import numpy as np
import pytest
import soundfile as sf
import torch

import transcribe
from transcribe.errors import ModelError, OptionValueError, OptionsNotTaken, TranscribeError

from .conftest import AUDIO, REPO

MODEL = REPO / "tests" / "models" / "sensevoice" / "tiny"
REFDIR = REPO / "tests" / "references" / "sensevoice"
REFS = json.loads((REFDIR / "tiny.json").read_text(encoding="utf-8"))
CASES = [(clip, k) for clip, rows in REFS["clips"].items() for k in range(len(rows))]
TAG_IDS_DROPPED_FROM_TEXT = "<|"


def _audio(clip: str) -> np.ndarray:
    x, sr = sf.read(str(AUDIO / clip), dtype="float32")
    assert sr == 16000 and x.ndim == 1
    return x


@pytest.fixture(scope="module")
def model():
    return transcribe.load_model(str(MODEL))


@pytest.mark.parametrize("clip,k", CASES)
def test_greedy_ids_and_texts_equal_funasr(model, clip, k):
    ref = REFS["clips"][clip][k]
    d = model.decode(_audio(clip), ref["language"], ref["use_itn"])
    assert d.ids == ref["ids"]
    assert d.n_frames == ref["frames"]
    assert model.tokenizer.decode(d.ids) == ref["text"]
    t = model.transcribe(_audio(clip), language=ref["language"], itn=ref["use_itn"])
    # funasr's post-processed text turns NEUTRAL / Speech into nothing: the same words as ours
    assert t.text == ref["postprocessed"].strip()
    assert TAG_IDS_DROPPED_FROM_TEXT not in t.text and all("<|" not in w.word for w in t.words)


def test_per_frame_logprobs_within_tolerance(model):
    for clip, rows in REFS["clips"].items():
        ref = rows[0]
        lp = model.logprobs(_audio(clip), ref["language"], ref["use_itn"])
        assert np.abs(lp.max(-1).values.numpy() - np.array(ref["max_logprob"])).max() < 1e-3


def test_front_end_and_encoder_within_tolerance(model):
    z = np.load(REFDIR / "tiny_frames.npz")
    short = torch.from_numpy(_audio("jfk.wav")[:24000].copy())
    fb = model.frontend.fbank(short).float().numpy()
    assert fb.shape == z["fbank"].shape and np.abs(fb - z["fbank"]).max() < 2e-3
    feats = model.frontend(short)
    assert feats.shape == z["features"].shape and np.abs(feats.numpy() - z["features"]).max() < 1e-3
    with torch.inference_mode():  # the encoder alone: on funasr's features
        rows = model.model.embed(torch.tensor(model.prompt("auto", False)))[None]
        enc = model.model.encoder(torch.cat([rows, torch.from_numpy(z["features"])[None]], 1))[0]
    assert np.abs(enc.numpy() - z["encoder"]).max() < 1e-4


def test_tags_go_to_language_and_tags_not_text(model):
    ref = REFS["clips"]["jfk.wav"][0]
    t = model.transcribe(str(AUDIO / "jfk.wav"))
    assert ref["text"].startswith("<|en|><|NEUTRAL|><|Speech|><|woitn|>")
    assert t.language == "en" and t.tags == {"emotion": "NEUTRAL", "event": "Speech"}
    assert t.segments and all(s.tags == t.tags for s in t.segments)
    d = t.to_dict()
    assert d["tags"] == {"emotion": "NEUTRAL", "event": "Speech"} and "NEUTRAL" not in d["text"]
    back = transcribe.Transcript.from_dict(json.loads(json.dumps(d)))
    assert back.tags == t.tags and back.segments[0].tags == t.tags
    # ids of the tags are kept out of the tokens too
    assert [tok.id for tok in t.tokens] == [i for i in model.decode(_audio("jfk.wav")).ids if i not in model.tags]


def test_times_on_60_ms_frames(model):
    """Times come from the greedy path's runs (no reference has token times for this family: funasr's own
    output_timestamp path fails on the tiny model (IndexError, tiny.json), transcribe.cpp's runtime gives
    segment times only)."""
    t = model.transcribe(str(AUDIO / "jfk.wav"))
    assert model.frame_s == pytest.approx(0.06)
    assert t.words and t.tokens
    for tok in t.tokens:
        assert tok.frame is not None and tok.start == pytest.approx(min(tok.frame * 0.06, t.duration))
        assert 0 <= tok.start <= tok.end <= t.duration
    starts = [w.start for w in t.words]
    assert starts == sorted(starts)
    assert " ".join(w.word for w in t.words) == t.text


def test_long_audio_runs_in_pieces(model):
    pcm = _audio("jfk.wav")
    gap = np.zeros(16000, dtype=np.float32)
    long = np.concatenate([pcm, gap, pcm, gap, pcm])  # 35 s: cut in the two gaps into 3 pieces of under 13 s
    t = model.transcribe(long, max_piece_s=13.0)
    one = model.transcribe(pcm)
    assert t.duration == pytest.approx(len(long) / 16000)
    assert t.tags == one.tags and t.language == "en"
    # one segment per piece (no "." without ITN), each in its own copy of the speech, each with its piece's tags
    assert len(t.segments) == 3 and all(s.tags == one.tags for s in t.segments)
    assert [round(s.start) for s in t.segments] == [0, 12, 24]
    assert all("fellow americans" in s.text for s in t.segments)


def test_other_families_have_no_tags():
    seg = transcribe.Segment("a", 0.0, 1.0)
    tr = transcribe.Transcript("a", 1.0, segments=[seg])
    assert tr.tags is None and seg.tags is None and tr.to_dict()["tags"] is None
    assert transcribe.Transcript.from_dict({"text": "a", "duration": 1.0}).tags is None


def test_options_are_checked(model):
    with pytest.raises(OptionValueError, match="language"):
        model.transcribe(_audio("jfk.wav"), language="de")
    with pytest.raises(OptionValueError, match="itn"):
        model.transcribe(_audio("jfk.wav"), itn="yes")
    with pytest.raises(OptionsNotTaken):
        model.transcribe(_audio("jfk.wav"), beam_size=4)
    with pytest.raises(TranscribeError, match="shorter"):
        model.transcribe(np.zeros(100, dtype=np.float32))
    with pytest.raises(TranscribeError, match="stream"):
        model.stream()


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")  # torch's note on the raw pickle refused here
def test_bad_model_files_are_refused(tmp_path):
    import shutil

    bad = tmp_path / "m"
    shutil.copytree(MODEL, bad)
    cfg = (bad / "config.yaml").read_text()
    (bad / "config.yaml").write_text(cfg.replace("selfattention_layer_type: sanm", "selfattention_layer_type: abs"))
    with pytest.raises(ModelError, match="selfattention_layer_type"):
        transcribe.load_model(str(bad))
    (bad / "config.yaml").write_text(cfg)
    (bad / "am.mvn").write_text("<Nnet>\n</Nnet>\n")
    with pytest.raises(ModelError, match="AddShift"):
        transcribe.load_model(str(bad))
    shutil.copy(MODEL / "am.mvn", bad / "am.mvn")
    import pickle

    (bad / "model.pt").write_bytes(pickle.dumps({"x": 1}))
    with pytest.raises(ModelError, match="model.pt"):
        transcribe.load_model(str(bad))
    with pytest.raises(ModelError, match="float32, bfloat16 or int8"):
        transcribe.load_model(str(MODEL), dtype="float16")


@pytest.mark.parametrize("dtype", ["bfloat16", "int8"])
def test_bf16_and_int8_run_and_keep_the_words(dtype):
    """Lower precisions change the log-probs slightly; on jfk.wav the tiny model's words stay (measured: the
    same text in both), the tags and language too."""
    m = transcribe.load_model(str(MODEL), dtype=dtype)
    t = m.transcribe(_audio("jfk.wav"))
    want = REFS["clips"]["jfk.wav"][0]["postprocessed"]
    assert t.language == "en" and t.tags == {"emotion": "NEUTRAL", "event": "Speech"}
    assert t.text.split()[:6] == want.split()[:6]


def test_command_writes_json_with_tags(capsys):
    from transcribe.cli import main

    assert main([str(AUDIO / "jfk.wav"), "--model", str(MODEL), "--format", "json", "--language", "en",
                 "--itn"]) == 0
    d = json.loads(capsys.readouterr().out)
    ref = next(r for r in REFS["clips"]["jfk.wav"] if r["language"] == "en" and r["use_itn"])
    assert d["text"] == ref["postprocessed"].strip()
    assert d["language"] == "en" and d["tags"] == {"emotion": "NEUTRAL", "event": "Speech"}
    assert d["model"] and d["segments"] and d["words"]


def test_short_name_loads_the_published_repo(monkeypatch, tmp_path):
    import shutil

    from .conftest import hub_snapshot

    snap = hub_snapshot(monkeypatch, tmp_path, "FunAudioLLM/SenseVoiceSmall")
    for f in MODEL.iterdir():
        shutil.copy(f, snap / f.name)
    m = transcribe.load_model("sensevoice-small")
    assert m.name == "sensevoice-small" and m.kind == "SenseVoice"
    assert m.decode(_audio("jfk.wav")).ids == REFS["clips"]["jfk.wav"][0]["ids"]


def test_without_timestamps_no_segments_but_the_same_text(model):
    t = model.transcribe(_audio("jfk.wav"), timestamps=False)
    one = model.transcribe(_audio("jfk.wav"))
    assert t.text == one.text and t.segments == [] and t.words == [] and t.tags == one.tags
    assert [k.id for k in t.tokens] == [k.id for k in one.tokens]
