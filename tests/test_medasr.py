"""MedASR (transformers' LasrForCTC, model type lasr_ctc) against transformers 5.25.0's own outputs on the tiny model
tests/models/medasr/tiny (tools/medasr_tiny.py: the published config scaled down, trained briefly so greedy output
follows jfk.wav; references by tools/medasr_reference.py): the front end's features, the CTC logits, every frame's
argmax, the greedy ids and text of each clip exactly, the padded batch, LasrTokenizer's decode of random frame
paths (special tokens, repeats, blanks), then timestamps, the CTC beam, long audio, loading and the command.

Tolerances: the front end runs the reference's float64 operations in the same order (unfold, symmetric Hann,
rfft, |X|^2, the float64 filterbank product, log): measured bit-exact here; 1e-6 on log-mel values (|x| < 12)
leaves room for another FFT kernel. The encoder runs the same products through other kernels (batch norm folded
into the depthwise convolution, another attention path), which differ between CPUs (AVX2, AVX-512, AMX):
measured within 1.5e-5 on logits of magnitude ~20; the bound 2e-4 leaves 10x, and greedy ids are compared
exactly (each frame's argmax is the reference's). Audio is read as the references read it (soundfile float32)."""
import json

import numpy as np
import pytest
import soundfile as sf
import torch

import transcribe
from transcribe.errors import ModelError, OptionValueError
from transcribe.search.ctc import collapse

from .conftest import AUDIO, MODELS, REPO, hub_snapshot

MODEL = MODELS / "medasr" / "tiny"
REFS = json.loads((REPO / "tests" / "references" / "medasr" / "reference.json").read_text(encoding="utf-8"))
CLIPS = list(REFS["clips"])


def _audio(clip: str) -> np.ndarray:
    x, sr = sf.read(str(AUDIO / clip), dtype="float32")
    assert sr == 16000 and x.ndim == 1
    return x


@pytest.fixture(scope="module")
def model():
    return transcribe.load_model(str(MODEL))


@pytest.fixture(scope="module")
def audio():
    return {c: _audio(c) for c in CLIPS}


def test_loads_as_medasr(model):
    assert model.family == "medasr" and model.kind == "MedASR"
    assert model.frame_s == pytest.approx(0.04)


@pytest.mark.parametrize("clip", CLIPS)
def test_features_and_logits_match_transformers(model, audio, clip):
    ref = REFS["clips"][clip]
    w = audio[clip]
    feats, frames = model.frontend(torch.from_numpy(w)[None], torch.tensor([len(w)]))
    assert int(frames[0]) == ref["frames"] == feats.shape[1]
    np.testing.assert_allclose(feats[0, :: REFS["feat_step"]].numpy(), np.array(ref["features"]), rtol=0, atol=1e-6)
    logits, n = model.logits([w])
    assert n == [len(ref["path"])]
    np.testing.assert_allclose(logits[0, :: REFS["logit_step"]].numpy(), np.array(ref["logits"]), rtol=0, atol=2e-4)
    assert logits[0].argmax(-1).tolist() == ref["path"]


@pytest.mark.parametrize("clip", CLIPS)
def test_greedy_ids_and_text_exact(model, audio, clip):
    ref = REFS["clips"][clip]
    t = model.transcribe(audio[clip], sample_rate=16000)
    assert t.text == ref["text"]
    assert [tok.id for tok in t.tokens] == [i for i in ref["ids"] if not model.tokenizer.is_special(i)]
    assert model.tokenizer.decode(ref["ids"], skip_special=False) == ref["text_card"]


def test_jfk_follows_the_speech():
    assert REFS["clips"]["jfk.wav"]["text"] == REFS["clips"]["jfk.wav"]["transcript"]


def test_batch_equals_single_and_reference(model, audio):
    batch = REFS["batch"]
    wavs = [audio[c] for c in batch["clips"]]
    together = model.transcribe(wavs, sample_rate=16000, batch_size=len(wavs))
    alone = [model.transcribe(w, sample_rate=16000) for w in wavs]
    for t, a, ids, text in zip(together, alone, batch["ids"], batch["text"]):
        assert t.text == a.text == text
        assert [x.id for x in t.tokens] == [x.id for x in a.tokens] == ids
        assert [x.frame for x in t.tokens] == [x.frame for x in a.tokens]


def test_decode_rules_match_lasr_tokenizer(model):
    d = REFS["decode"]
    tok = model.tokenizer
    for path, skip, card in zip(d["paths"], d["skip"], d["card"]):
        ids = [r.id for r in collapse(path, REFS["blank"])]
        assert tok.decode(ids) == skip
        assert tok.decode(ids, skip_special=False) == card


def test_timestamps_words_and_tokens(model, audio):
    t = model.transcribe(audio["jfk.wav"], sample_rate=16000)
    words = [w.word for w in t.words]
    assert " ".join(words) == t.text
    assert len(words) == 22
    starts = [w.start for w in t.words]
    assert starts == sorted(starts) and all(w.start <= w.end for w in t.words)
    assert 0.0 <= t.words[0].start and t.words[-1].end <= t.duration
    # token times are CTC frames x 40 ms: a token ends at the first frame of its run (a punctuation mark takes
    # no time: it sits where the token before it ends, as Parakeet's CTC head places it)
    for tok in t.tokens:
        if tok.text in (",", "."):
            assert tok.start == tok.end
        else:
            assert tok.end == pytest.approx(tok.frame * 0.04)
        assert tok.confidence is not None and 0.0 <= tok.confidence <= 1.0 and tok.logprob <= 0.0
    assert "".join(x.text for x in t.tokens).strip() == t.text
    assert t.segments and t.segments[0].text.startswith("And so,")
    assert t.to_dict()["words"][0]["word"] == "And"


def test_beam_search(model, audio):
    greedy = model.transcribe(audio["jfk.wav"], sample_rate=16000)
    t = model.transcribe(audio["jfk.wav"], sample_rate=16000, beam_size=4, nbest=2)
    assert t.text == greedy.text  # a confident model: the best beam is the greedy path
    assert t.nbest is not None and 1 <= len(t.nbest.hypotheses) <= 2
    scores = [h.score for h in t.nbest.hypotheses]
    assert scores == sorted(scores, reverse=True)
    assert t.nbest.hypotheses[0].text == t.text
    with pytest.raises(OptionValueError):
        model.transcribe(audio["jfk.wav"], sample_rate=16000, beam_size=2, nbest=3)


def test_long_audio_through_pieces(model, audio):
    jfk = audio["jfk.wav"]
    gap = np.zeros(32000, dtype=np.float32)
    long = np.concatenate([jfk, gap, jfk, gap, jfk])  # 37 s: cut at pauses into pieces of <= 15 s (in the gaps)
    t = model.transcribe(long, sample_rate=16000, max_piece_s=15.0)
    assert t.duration == pytest.approx(len(long) / 16000)
    # the shared path: cut at pauses (on the 40 ms frame grid), each piece decoded alone, texts joined by a space,
    # times moved by the piece's start (the tiny model, trained on clips without silence around them, reads the
    # pieces' silent edges poorly: the text is compared with the pieces', not with the speech)
    from transcribe.long_input import cut_spans

    spans = cut_spans(long, 16000, 15.0, "auto", grain=640)
    assert len(spans) == 3
    parts = [model.transcribe(long[a:b], sample_rate=16000) for a, b in spans]
    assert t.text == " ".join(p.text for p in parts)
    moved = [round(w.start + a / 16000, 3) for p, (a, _) in zip(parts, spans) for w in p.words]
    assert [w.start for w in t.words] == pytest.approx(moved, abs=1e-3)
    assert t.words[-1].end > 30.0


def test_too_short_input_is_empty(model, audio):
    t = model.transcribe(np.zeros(1000, dtype=np.float32), sample_rate=16000)
    assert t.text == "" and t.words == [] and t.tokens == []
    # in a batch (no encoder frame for the short ones: their rows attend to nothing) the others are untouched
    for beam in (None, 2):
        out = model.transcribe([np.zeros(300, np.float32), audio["jfk.wav"], np.zeros(2000, np.float32)],
                               sample_rate=16000, batch_size=3, beam_size=beam)
        assert [t.text for t in out] == ["", REFS["clips"]["jfk.wav"]["text"], ""]


def test_hub_id_and_short_name(monkeypatch, tmp_path):
    from transcribe.hub import ALIASES

    assert ALIASES["medasr"] == "google/medasr"
    snap = hub_snapshot(monkeypatch, tmp_path, "google/medasr")
    for f in MODEL.iterdir():
        if f.name != "train_log.json":
            (snap / f.name).write_bytes(f.read_bytes())
    m = transcribe.load_model("medasr")
    assert m.family == "medasr" and m.name == "medasr"
    m = transcribe.load_model("google/medasr")
    assert m.family == "medasr" and m.name == "google/medasr"


def test_refuses_what_it_does_not_implement(tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    for f in MODEL.iterdir():
        (d / f.name).write_bytes(f.read_bytes())
    cfg = json.loads((d / "config.json").read_text())
    cfg["encoder_config"]["rope_parameters"] = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 2.0}
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelError, match="rope_type"):
        transcribe.load_model(str(d))
    cfg["encoder_config"]["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0}
    cfg["encoder_config"]["num_hidden_layers"] = 3
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelError, match="missing tensor encoder.layers.2"):
        transcribe.load_model(str(d))


def test_command_json(capsys):
    from transcribe.cli import main

    assert main([str(AUDIO / "jfk.wav"), "--model", str(MODEL), "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["text"] == REFS["clips"]["jfk.wav"]["text"]
    assert [t["id"] for t in d["tokens"]] == REFS["clips"]["jfk.wav"]["ids"]
    assert d["words"][0]["word"] == "And" and d["model"] == "tiny"


@pytest.mark.parametrize("dtype", ["int8", "bfloat16"])
def test_int8_and_bf16_keep_the_jfk_ids(audio, dtype):
    """Not parity (int8 and bfloat16 round the encoder's products): on this confident model the ids survive."""
    m = transcribe.load_model(str(MODEL), dtype=dtype)
    t = m.transcribe(audio["jfk.wav"], sample_rate=16000)
    assert [x.id for x in t.tokens] == REFS["clips"]["jfk.wav"]["ids"]


def test_the_published_architecture_has_the_published_tensors():
    """google/medasr's config (its key fields as transcribe.cpp's intake of the gated repo records them, which are
    transformers' LasrCTCConfig defaults) builds 351 float tensors of 105.28 M values: what the published
    safetensors header holds (F32 = 351 tensors, 105.28 M parameters; plus 17 int64 num_batches_tracked)."""
    from transcribe.medasr.config import Features, parse_config
    from transcribe.medasr.model import MedASRModel

    enc = dict(model_type="lasr_encoder", hidden_size=512, num_hidden_layers=17, num_attention_heads=8,
               num_key_value_heads=8, intermediate_size=2048, hidden_act="silu", conv_kernel_size=32,
               subsampling_conv_channels=256, subsampling_conv_kernel_size=5, subsampling_conv_stride=2,
               num_mel_bins=128, layer_norm_eps=1e-6, feed_forward_residual_weights=[1.5, 0.5],
               conv_residual_weights=[2.0, 1.0], max_position_embeddings=10000, batch_norm_momentum=0.01,
               rope_parameters={"rope_theta": 10000.0, "rope_type": "default"})
    c = parse_config({"model_type": "lasr_ctc", "vocab_size": 512, "pad_token_id": 0, "encoder_config": enc},
                     Features())
    with torch.device("meta"):
        m = MedASRModel(c)
    state = {k: v for k, v in m.state_dict().items() if not k.endswith("num_batches_tracked")}
    assert len(state) == 351
    assert round(sum(v.numel() for v in state.values()) / 1e6, 2) == 105.28
    assert c.encoded_length(1000) == 247 and c.subsampling == 4  # 10 s -> 40 ms frames
