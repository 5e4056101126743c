"""Moonshine (transformers' `moonshine`) against transformers 5.25's own outputs on the tiny model
tests/models/moonshine/tiny (tools/moonshine_tiny.py; references by tools/moonshine_reference.py): the greedy token
ids and text of every recorded case exactly, under the model card's output bound (6.5 tokens a second, which cuts
jfk.wav, its first 2 s and a dev clip, and leaves a dev clip to stop at EOS), the 3 hypotheses of a 3-beam search
(ids exactly, scores within 1e-4), the encoder's output and the first step's logits within float32 tolerances; a
batch equal to its inputs one at a time, long inputs cut at pauses, the command's json, int8, and the refusals.

Tolerances: the encoder and decoder run transformers' float32 operations through other kernels (which differ
between CPUs: AVX2, AVX-512, AMX). Measured here: encoder outputs and logits within 5.1e-7 (values of magnitude
~1-10). The bound 1e-4 leaves 200x for other CPUs; beam scores (sums of ~70 log-probabilities) get the same 1e-4."""
import json
import shutil
import numpy as np
import pytest
import soundfile as sf
import torch

import transcribe
from transcribe import hub, loading
from transcribe.errors import ModelError, OptionValueError
from transcribe.moonshine.recognizer import max_length

from .conftest import AUDIO, MODELS, REPO

MODEL = MODELS / "moonshine" / "tiny"
REFS = json.loads((REPO / "tests" / "references" / "moonshine" / "reference.json").read_text(encoding="utf-8"))
CASES = {c["name"]: c for c in REFS["cases"]}
GREEDY = [name for name, c in CASES.items() if "greedy" in c]
START, EOS = 1, 2


@pytest.fixture(scope="module")
def model():
    return transcribe.load_model(str(MODEL))


def _audio(case: dict) -> np.ndarray:
    x, sr = sf.read(str(AUDIO / case["source"]), dtype="float32")
    assert sr == 16000 and x.ndim == 1
    return x[:case["samples"]]


def _generated(ids: list) -> list:
    """transformers' sequence less the decoder's start token and a final EOS."""
    assert ids[0] == START
    return ids[1:-1] if ids[-1] == EOS else ids[1:]


def test_the_cases_cover_both_ends_of_a_decode():
    ends = [CASES[n]["greedy"]["ids"][-1] == EOS for n in GREEDY]
    assert any(ends) and not all(ends)  # some stop at EOS, others at the model card's bound
    assert CASES["jfk_2s"]["max_length"] == 13 and len(CASES["jfk_2s"]["greedy"]["ids"]) == 13


@pytest.mark.parametrize("name", GREEDY)
def test_greedy_ids_and_text_match_transformers(model, name):
    case = CASES[name]
    t = model.transcribe(_audio(case), sample_rate=16000)
    assert [tok.id for tok in t.tokens] == _generated(case["greedy"]["ids"])
    assert t.text == case["greedy"]["text"]
    assert t.duration == pytest.approx(case["samples"] / 16000)
    assert [(s.start, s.end) for s in t.segments] == ([(0.0, t.duration)] if t.text.strip() else [])


@pytest.mark.parametrize("name", list(CASES))
def test_the_output_bound_is_the_model_cards(name):
    assert max_length(CASES[name]["samples"], 16000) == CASES[name]["max_length"]


def test_an_input_that_leaves_no_token_has_an_empty_transcript(model):
    case = CASES["jfk_0.25s"]
    assert case["max_length"] == 1 and "max_length" in case["error"]  # transformers refuses it
    t = model.transcribe(_audio(case), sample_rate=16000)
    assert t.text == "" and t.tokens == [] and t.segments == []
    # too short for the conv stem's kernels (one encoder frame needs 895 samples): empty too
    assert model.transcribe(np.zeros(800, dtype=np.float32), sample_rate=16000, max_new_tokens=5).text == ""


def test_beam_search_matches_transformers(model):
    case = CASES["jfk.wav"]
    t = model.transcribe(_audio(case), sample_rate=16000, beam_size=3, nbest=3)
    hyps = t.nbest.hypotheses
    assert len(hyps) == len(case["beam3"]) == 3 and t.nbest.beam == "transformers"
    for h, ref in zip(hyps, case["beam3"]):
        assert [x.id for x in h.tokens] == _generated(ref["ids"])
        assert h.text == ref["text"].strip()
        assert h.score == pytest.approx(ref["score"], abs=1e-4)
    assert t.text == case["beam3"][0]["text"]


def test_encoder_and_first_logits_within_float_tolerance(model):
    case = CASES["jfk_2s"]
    wav = torch.from_numpy(_audio(case))[None]
    enc = model.model.encode(wav)[0]
    assert enc.shape[0] == case["encoder_frames"]
    assert torch.allclose(enc[:8], torch.tensor(case["encoder_head"]), atol=1e-4, rtol=0)
    jfk = CASES["jfk.wav"]
    states, lengths = model.encode([_audio(jfk)])
    logits = model.model.step(torch.tensor([[START]]), model.model.start(states, lengths))[0]
    assert torch.allclose(logits, torch.tensor(jfk["first_logits"]), atol=1e-4, rtol=0)


def test_a_batch_equals_its_inputs_one_at_a_time(model):
    names = ["jfk.wav", "jfk_2s", GREEDY[-1], "jfk_0.5s", "jfk_0.25s"]
    pcm = [_audio(CASES[n]) for n in names]
    batch = model.transcribe(pcm, sample_rate=16000, batch_size=len(pcm))
    for n, t in zip(names, batch):
        want = _generated(CASES[n]["greedy"]["ids"]) if "greedy" in CASES[n] else []
        assert [tok.id for tok in t.tokens] == want, n


def test_a_long_input_is_cut_at_pauses_and_joined(model):
    jfk, dev = _audio(CASES["jfk.wav"]), _audio(CASES[GREEDY[-2]])
    long = np.concatenate([jfk, np.zeros(16000, dtype=np.float32), dev])
    t = model.transcribe(long, sample_rate=16000, max_piece_s=12.0)
    assert len(t.segments) >= 2 and t.segments[-1].end == pytest.approx(len(long) / 16000, abs=1e-3)
    # each piece (cut on the encoder's 384-sample grid) is transcribed as that piece alone, the texts joined
    texts = []
    for seg in t.segments:
        a, b = round(seg.start * 16000), round(seg.end * 16000)
        assert a % 384 == 0 and b - a <= 12 * 16000
        texts.append(model.transcribe(long[a:b], sample_rate=16000).text.strip())
        assert seg.text == texts[-1]
    assert t.text == " ".join(x for x in texts if x)


def test_a_stream_commits_each_utterance_as_transcribe_decodes_it(model):
    """transcribe/utterances.py: cut at the 2 s pause between two clips, each utterance decoded whole."""
    a, b = _audio(CASES["jfk.wav"]), _audio(CASES[GREEDY[-2]])
    pcm = np.concatenate([a, np.zeros(32000, np.float32), b])
    s = model.stream(pause_s=1.2)
    commits = []
    for i in range(0, len(pcm), 8000):
        s.feed(pcm[i:i + 8000])
        new = s.take_new_text()
        if new:
            commits.append((new, list(s.drain_words())))
    s.finalize()
    commits.append((s.take_new_text(), list(s.drain_words())))
    assert len(commits) == 2
    cut = commits[0][1][0].start
    assert len(a) / 16000 < cut < len(a) / 16000 + 2.0
    first = model.transcribe(pcm[:int(round(cut * 16000))], sample_rate=16000)
    rest = model.transcribe(pcm[int(round(cut * 16000)):], sample_rate=16000)
    assert commits[0][0].strip() == first.text and commits[1][0].strip() == rest.text
    assert s.text().strip() == first.text + " " + rest.text  # one space between utterances, from the piece's mark
    assert all(w.start == w.end == cut for w in commits[0][1])  # the model gives no times: words sit at the cut
    with pytest.raises(OptionValueError, match="nbest does not apply to a stream"):
        model.stream(beam_size=2, nbest=2)


@pytest.mark.parametrize("name,params,dims", [("moonshine-tiny", 27_092_736, (36, 40, 32)),
                                              ("moonshine-base", 61_513_920, (52, 56, 32))])
def test_the_published_configs_build_transformers_model(name, params, dims):
    from transcribe.moonshine.config import parse_config
    from transcribe.moonshine.model import MoonshineModel

    cfg = json.loads((REPO / "tests" / "configs" / "published" / "moonshine" / f"{name}.json").read_text())
    c = parse_config(cfg, {}, {})
    assert (c.head_dim, c.padded_head_dim, c.rotary_dim) == dims and (c.pad, c.eos, c.decoder_start) == (2, 2, 1)
    with torch.device("meta"):
        m = MoonshineModel(c)
    # transformers' count (the head tied: counted once)
    assert sum(p.numel() for p in m.parameters()) - m.proj_out.weight.numel() == params


def test_load_model_finds_the_family_and_the_short_names(model):
    claims = [f.name for f in loading.FAMILIES if f.detect(MODEL)]
    assert claims[0] == "moonshine"  # before Whisper, which claims every folder with a config.json
    assert model.family == "moonshine" and model.kind == "Moonshine"


@pytest.mark.parametrize("name,repo", [("moonshine-tiny", "UsefulSensors/moonshine-tiny"),
                                       ("moonshine-base", "UsefulSensors/moonshine-base"),
                                       ("UsefulSensors/moonshine-tiny", "UsefulSensors/moonshine-tiny")])
def test_short_names_and_hub_ids_load(monkeypatch, name, repo):
    asked = []
    monkeypatch.setattr(hub, "from_hub", lambda r: asked.append(r) or MODEL)
    m = transcribe.load_model(name)
    assert asked == [repo] and m.name == name and m.family == "moonshine"


def test_int8_and_bfloat16_load_and_transcribe(model):
    from transcribe.quant import Int8Linear

    ref = _generated(CASES["jfk.wav"]["greedy"]["ids"])
    wav = _audio(CASES["jfk.wav"])
    m8 = transcribe.load_model(str(MODEL), dtype="int8")
    assert isinstance(m8.model.model.encoder.layers[0].self_attn.q_proj, Int8Linear)
    assert isinstance(m8.model.model.decoder.layers[0].mlp.fc1, Int8Linear)
    ids8 = [t.id for t in m8.transcribe(wav, sample_rate=16000).tokens]
    # the tiny model's words survive int8's rounding (per-channel weights, per-row activations) at its start
    assert ids8[:10] == ref[:10]
    bf = transcribe.load_model(str(MODEL), dtype="bfloat16")
    assert [t.id for t in bf.transcribe(wav, sample_rate=16000).tokens][:10] == ref[:10]


def test_the_command_writes_the_shared_json(capsys):
    from transcribe import cli

    assert cli.main([str(AUDIO / "jfk.wav"), "--model", str(MODEL), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["text"] == CASES["jfk.wav"]["greedy"]["text"] and out["language"] == "en"
    assert [t["id"] for t in out["tokens"]] == _generated(CASES["jfk.wav"]["greedy"]["ids"])
    assert out["segments"][0]["start"] == 0.0 and out["duration"] == pytest.approx(11.0)
    assert out["words"] == []


def test_options_the_model_does_not_have_are_refused(model):
    with pytest.raises(OptionValueError, match="cannot time words"):
        model.transcribe(_audio(CASES["jfk_0.5s"]), sample_rate=16000, word_timestamps=True)
    with pytest.raises(OptionValueError, match="nbest"):
        model.transcribe(_audio(CASES["jfk_0.5s"]), sample_rate=16000, beam_size=2, nbest=3)


@pytest.mark.parametrize("edit,words", [
    ({"decoder_num_attention_heads": 2}, "differs from encoder_num_attention_heads"),
    ({"encoder_num_key_value_heads": 2}, "encoder_num_key_value_heads = 2 is not implemented"),
    ({"rope_parameters": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}}, "rope_type = 'linear'"),
    ({"encoder_hidden_act": "mish"}, "encoder_hidden_act = 'mish' is not implemented"),
    ({"hidden_size": 40}, "checkpoint tensor"),
])
def test_a_config_this_code_does_not_implement_is_refused(tmp_path, edit, words):
    d = tmp_path / "edited"
    shutil.copytree(MODEL, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(edit)
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelError, match=words.replace("(", r"\(")):
        transcribe.load_model(str(d))


def test_a_normalizing_feature_extractor_is_refused(tmp_path):
    d = tmp_path / "normalizing"
    shutil.copytree(MODEL, d)
    pre = json.loads((d / "preprocessor_config.json").read_text())
    pre["do_normalize"] = True
    (d / "preprocessor_config.json").write_text(json.dumps(pre))
    with pytest.raises(ModelError, match="do_normalize = True is not implemented"):
        transcribe.load_model(str(d))
