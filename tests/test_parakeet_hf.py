"""Parakeet in transformers' layout (transcribe/parakeet/hf.py): tests/models/parakeet-hf/{ctc,tdt}, written by
transformers' own converter from the tiny NeMo models tiny-ctc-fit / tiny-tdt-fit / tiny-rnnt-fit
(tools/parakeet_hf_tiny.py), against what transformers 5.25 computes with them
(tests/references/parakeet_hf/):

- greedy: CTC token ids and text equal `ParakeetForCTC.generate` + `processor.decode` on three clips; TDT and
  RNN-T ids, token frames (transformers' frame steps summed) and text equal `ParakeetForTDT.generate` /
  `ParakeetForRNNT.generate` (which work in 5.25 and, per the reference files, give NeMo's own greedy ids on
  the source .nemo for all three clips);
- the front end equals `ParakeetFeatureExtractor`'s features within 1e-5 (measured 1.5e-6: transformers'
  filterbank and float32 log against our float64 log rounded once; normalised values of order 1, so this is a
  few float32 ulps summed over 257 bins) and its filterbank's column sums within 1e-6 relative;
- everything else is the `.nemo` path's, checked by equality with the source .nemo loaded as a .nemo: token
  ids and times with timestamps, CTC and TDT beam search N-best, local attention (the long-input path),
  buffered streaming's committed tokens, int8;
- `transcribe convert <folder>` writes the GGUF files (both schemas) the source .nemo gives;
- `load_model` and `transcribe jfk.wav --model <folder> --format json`; a folder holding both a .nemo and
  transformers' files (NVIDIA's repos) stays a .nemo; settings this code does not implement are ModelErrors.
"""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from transcribe import load_model
from transcribe.audio import load_audio
from transcribe.errors import ModelError
from transcribe.loading import local_family

from .conftest import AUDIO, MODELS, REPO, TINY

HF = MODELS / "parakeet-hf"  # ctc/, tdt/, rnnt/
REFS = REPO / "tests" / "references" / "parakeet_hf"
CLIPS = {"jfk.wav": AUDIO / "jfk.wav", "ls_2086-149220-0033.wav": AUDIO / "ls_2086-149220-0033.wav",
         "cv_17767698.wav": AUDIO / "dev" / "cv_17767698.wav"}
SOURCE = {"ctc": "tiny-ctc-fit", "tdt": "tiny-tdt-fit", "rnnt": "tiny-rnnt-fit"}
FEATURE_ATOL = 1e-5


def _ref(kind):
    return json.loads((REFS / f"{kind}.json").read_text())


@pytest.fixture(scope="module")
def models():
    return {kind: load_model(HF / kind) for kind in SOURCE}


@pytest.fixture(scope="module")
def nemos():
    return {kind: load_model(TINY / f"{SOURCE[kind]}.nemo") for kind in SOURCE}


def _ids(t):
    return [x.id for x in t.tokens]


def _times(t):
    return [(x.id, x.start, x.end) for x in t.tokens]


@pytest.mark.parametrize("kind", ["ctc", "tdt", "rnnt"])
def test_greedy_ids_and_text_are_transformers(models, kind):
    ref = _ref(kind)
    assert ref["generator"]["transformers_version"] == "5.25.0"
    for name, path in CLIPS.items():
        want = ref["clips"][name][kind]
        t = models[kind].transcribe(path)
        assert _ids(t) == want["ids"], name
        assert t.text == want["text"], name


@pytest.mark.parametrize("kind", ["tdt", "rnnt"])
def test_transducer_token_frames_are_transformers_durations(models, kind):
    """A token's start frame is the sum of the frame steps transformers' generate() took before it (TDT: its
    predicted durations; RNN-T: one per blank)."""
    ref = _ref(kind)
    frame_s = models[kind].frame_s
    for name, path in CLIPS.items():
        t = models[kind].transcribe(path)
        assert [round(x.start / frame_s) for x in t.tokens] == ref["clips"][name][kind]["frames"], name


@pytest.mark.parametrize("kind", ["tdt", "rnnt"])
def test_transformers_transducers_equal_nemo_on_the_source(kind):
    """The reference run's own check: transformers 5.25's TDT and RNN-T generate() give NeMo's greedy ids."""
    ref = _ref(kind)
    assert set(ref["nemo"]) == set(CLIPS)
    for name, row in ref["nemo"].items():
        assert row["transformers_equal"] and row["ids"] == ref["clips"][name][kind]["ids"], name


def test_features_are_the_feature_extractors(models):
    model = models["ctc"].model
    ref = _ref("ctc")
    for name, path in CLIPS.items():
        want = ref["clips"][name]["features"]
        wav = load_audio(path)
        x, n = model.features(torch.tensor(wav)[None], torch.tensor([len(wav)]))
        f = x[0].T
        assert int(n[0]) == want["length"]
        k = len(want["first_frames"])
        np.testing.assert_allclose(f[:k].numpy(), np.array(want["first_frames"]), atol=FEATURE_ATOL, rtol=0)
        np.testing.assert_allclose(f[: want["length"]].mean(0).numpy(), want["channel_mean"], atol=FEATURE_ATOL,
                                   rtol=0)
    fb = model.preprocessor.fb[0].double()  # [n_mels, n_freq]
    np.testing.assert_allclose(fb.sum(0).numpy(), ref["filterbank"]["row_sums"], rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("kind", ["ctc", "tdt", "rnnt"])
def test_same_as_the_source_nemo(models, nemos, kind):
    """Timestamps, beam search, local attention and int8: the .nemo model's results, bit for bit."""
    m, n = models[kind], nemos[kind]
    jfk = AUDIO / "jfk.wav"
    assert _times(m.transcribe(jfk)) == _times(n.transcribe(jfk))
    assert [(w.word, w.start, w.end) for w in m.transcribe(jfk).words] == \
        [(w.word, w.start, w.end) for w in n.transcribe(jfk).words]
    beam = {"beam_size": 4, "nbest": 4} if kind == "ctc" else {"beam_size": 4, "nbest": 4, "beam": "malsd"}
    a, b = m.transcribe(jfk, **beam), n.transcribe(jfk, **beam)
    assert [[(x.id, x.frame) for x in h.tokens] for h in a.nbest.hypotheses] == \
        [[(x.id, x.frame) for x in h.tokens] for h in b.nbest.hypotheses]
    # scores: the .nemo's front end uses its stored (librosa) filterbank, this folder ours (no filterbank stored):
    # the features differ in the last float32 bits, and so do the log-probability sums
    assert [h.score for h in a.nbest.hypotheses] == pytest.approx([h.score for h in b.nbest.hypotheses], rel=1e-4,
                                                                   abs=1e-5)
    assert len(a.nbest.hypotheses) >= 2
    assert _times(m.transcribe(jfk, attention="local")) == _times(n.transcribe(jfk, attention="local"))


def test_int8_is_the_nemo_int8():
    m = load_model(HF / "tdt", dtype="int8")
    n = load_model(TINY / "tiny-tdt-fit.nemo", dtype="int8")
    jfk = AUDIO / "jfk.wav"
    assert _times(m.transcribe(jfk)) == _times(n.transcribe(jfk))


def test_buffered_streaming_is_the_nemo_models(models, nemos):
    audio = load_audio(AUDIO / "jfk.wav")
    out = []
    for m in (models["tdt"], nemos["tdt"]):
        with m.stream(chunk_s=2.0, left_s=2.0, right_s=2.0) as s:
            for i in range(0, len(audio), 7000):
                s.feed(audio[i:i + 7000])
            s.finalize()
            out.append(([(x.id, x.start) for x in s.tokens()], s.committed_text()))
    assert out[0] == out[1]
    assert out[0][1] == _ref("tdt")["clips"]["jfk.wav"]["tdt"]["text"]


def test_command_json(capsys):
    from transcribe.cli import main

    assert main([str(AUDIO / "jfk.wav"), "--model", str(HF / "ctc"), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    want = _ref("ctc")["clips"]["jfk.wav"]["ctc"]
    assert data["text"] == want["text"] and data["model"] == "ctc"
    assert [t["id"] for t in data["tokens"]] == want["ids"]
    assert data["words"] and data["words"][0]["start"] is not None


def _copy(tmp_path, kind="tdt"):
    d = tmp_path / kind
    shutil.copytree(HF / kind, d)
    return d


def _edit(d, name, fn):
    p = d / name
    data = json.loads(p.read_text())
    fn(data)
    p.write_text(json.dumps(data))


def test_detection(tmp_path):
    assert local_family(HF / "ctc").name == "parakeet"
    d = _copy(tmp_path)
    shutil.copy(TINY / "tiny-tdt-fit.nemo", d / "tiny-tdt-fit.nemo")  # NVIDIA's repos hold both: the .nemo wins
    from transcribe.parakeet import detect

    assert detect(d) == "nemo" and detect(HF / "tdt") == "hf"


@pytest.mark.parametrize("name,edit,words", [
    ("config.json", lambda c: c.update(model_type="parakeet_lstm"), "parakeet_lstm"),
    ("config.json", lambda c: c.update(architectures=["ParakeetForCTC"]), "architectures"),
    ("config.json", lambda c: c.update(durations=[0, 2]), "durations"),
    ("config.json", lambda c: c.update(something_new=1), "something_new"),
    ("config.json", lambda c: c["encoder_config"].update(subsampling_conv_stride=3), "subsampling_conv_stride"),
    ("config.json", lambda c: c["encoder_config"].update(intermediate_size=100), "intermediate_size"),
    ("config.json", lambda c: c.update(blank_token_id=3), "blank_token_id"),
    ("config.json", lambda c: c["encoder_config"].update(num_hidden_layers=3), "num_hidden_layers"),
    ("processor_config.json", lambda c: c["feature_extractor"].update(feature_size=80), "feature_size"),
    ("processor_config.json", lambda c: c["feature_extractor"].update(padding_value=1.0), "padding_value"),
    ("tokenizer.json", lambda c: c["model"].update(type="Unigram"), "Unigram"),
])
def test_unimplemented_settings_are_model_errors(tmp_path, name, edit, words):
    d = _copy(tmp_path)
    _edit(d, name, edit)
    with pytest.raises(ModelError, match=words):
        load_model(d)


def test_missing_tensor_is_a_model_error(tmp_path):
    from safetensors.torch import load_file, save_file

    d = _copy(tmp_path, "ctc")
    sd = load_file(d / "model.safetensors")
    del sd["ctc_head.bias"]
    save_file(sd, d / "model.safetensors")
    with pytest.raises(ModelError, match="decoder_layers.0.bias"):
        load_model(d)


@pytest.mark.parametrize("schema", ["transcribe.cpp", "parakeet.cpp"])
def test_gguf_export_is_the_source_nemos(tmp_path, models, schema):
    """`transcribe convert <folder>` writes the GGUF file the source .nemo gives: the same metadata but the
    names, the same tensors (parakeet.cpp's stored filterbank is ours, not NeMo's librosa one: within 1e-8),
    and the file transcribes as the folder does."""
    from transcribe.gguf.file import GGUFFile
    from transcribe.parakeet import export_gguf

    a, b = tmp_path / "tdt.gguf", tmp_path / "nemo" / "tdt.gguf"
    b.parent.mkdir()
    export_gguf(HF / "tdt", a, schema, None, None, "tdt")
    export_gguf(TINY / "tiny-tdt-fit.nemo", b, schema, None, None, "tdt")
    fa, fb = GGUFFile(a), GGUFFile(b)
    try:
        assert fa.meta == fb.meta
        assert sorted(fa.tensors) == sorted(fb.tensors)
        for n in fa.tensors:
            if n == "preprocessor.featurizer.fb":
                torch.testing.assert_close(fa.tensor(n), fb.tensor(n), rtol=0, atol=1e-8)
            else:
                assert torch.equal(fa.tensor(n), fb.tensor(n)), n
    finally:
        fa.close()
        fb.close()
    if schema == "transcribe.cpp":  # (test_gguf_parakeet.py loads both schemas' files as their .nemo)
        jfk = AUDIO / "jfk.wav"
        assert _times(load_model(a).transcribe(jfk)) == _times(models["tdt"].transcribe(jfk))


def test_a_published_tdt_config_parses(tmp_path):
    """nvidia/parakeet-tdt-0.6b-v3's config.json and processor_config.json (their keys and values): no linear or
    convolution biases, no input scaling, pad 2 apart from the blank 8192."""
    from transcribe.parakeet.hf import build_config

    enc = {"activation_dropout": 0.1, "attention_bias": False, "attention_dropout": 0.1, "conv_kernel_size": 9,
           "convolution_bias": False, "dropout": 0.1, "dropout_positions": 0.0, "hidden_act": "silu",
           "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 4096, "layerdrop": 0.1,
           "max_position_embeddings": 5000, "model_type": "parakeet_encoder", "num_attention_heads": 8,
           "num_hidden_layers": 24, "num_key_value_heads": 8, "num_mel_bins": 128, "scale_input": False,
           "subsampling_conv_channels": 256, "subsampling_conv_kernel_size": 3, "subsampling_conv_stride": 2,
           "subsampling_factor": 8}
    cfg = {"architectures": ["ParakeetForTDT"], "blank_token_id": 8192, "decoder_hidden_size": 640, "dtype": "float32",
           "durations": [0, 1, 2, 3, 4], "encoder_config": enc, "hidden_act": "relu", "initializer_range": 0.02,
           "is_encoder_decoder": True, "max_symbols_per_step": 10, "model_type": "parakeet_tdt",
           "num_decoder_layers": 2, "pad_token_id": 2, "transformers_version": "5.6.0.dev0", "vocab_size": 8193}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    shutil.copy(HF / "tdt" / "processor_config.json", tmp_path / "processor_config.json")
    _edit(tmp_path, "processor_config.json", lambda c: c["feature_extractor"].update(feature_size=128))
    nemo, kind, blank = build_config(tmp_path)
    assert (kind, blank) == ("tdt", 8192)
    e = nemo["encoder"]
    assert (e["use_bias"], e["xscaling"], e["d_model"], e["n_layers"], e["ff_expansion_factor"]) == \
        (False, False, 1024, 24, 4)
    assert nemo["decoding"]["durations"] == [0, 1, 2, 3, 4] and nemo["joint"]["jointnet"]["joint_hidden"] == 640
    from transcribe.parakeet.model import ParakeetModel

    with torch.device("meta"):
        model = ParakeetModel(nemo)
    assert sum(p.numel() for p in model.parameters()) == pytest.approx(0.6e9, rel=0.05)


def test_the_vocabulary_encodes_as_the_nemo_tokenizer(models, nemos):
    """tokenizer.json's pieces as a SentencePiece BPE model (scores assumed in piece order): the source .nemo's
    pieces, and the same ids for every dev transcript (what hotwords are spelled with)."""
    a, b = models["tdt"].tokenizer, nemos["tdt"].tokenizer
    assert a.pieces == b.pieces
    texts = [json.loads(line)["text"].lower() for line in (AUDIO / "dev" / "manifest.jsonl").read_text().splitlines()]
    assert len(texts) > 30
    for text in texts + ["ask not", "fellow americans"]:
        assert a.encode(text) == b.encode(text), text


def test_a_hub_repo_in_this_layout_fetches_what_loads():
    """A hub id of a transformers-only Parakeet repo: the download patterns cover every file the folder loads
    from (a repo holding a .nemo too fetches the .nemo, which then loads: test_detection)."""
    import fnmatch

    from transcribe.hub import hub_patterns

    files = sorted(p.name for p in (HF / "tdt").iterdir())
    pats = hub_patterns(files + ["README.md", "onnx/model.onnx"])
    assert all(any(fnmatch.fnmatch(f, p) for p in pats) for f in files), (files, pats)
    assert any(fnmatch.fnmatch("parakeet-ctc-1.1b.nemo", p) for p in hub_patterns(files + ["parakeet-ctc-1.1b.nemo"]))
