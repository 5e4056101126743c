"""Sortformer diarization against NeMo 3.0.0 on the shared tiny streaming model (../shared/models/sortformer-tiny:
a `SortformerEncLabelModel` saved by NeMo, its mixtures, and NeMo's probabilities, segments, chunk traces and
stage tensors; how they were made is in its README.md).

Tolerances: the probabilities are sigmoids of float32 networks (a FastConformer, a Transformer) whose matrix
products round differently between BLAS kernels and CPUs; on this model they agree with NeMo within 2e-6
(AMX Xeon); the bound is 2e-5. The segments are compared exactly: NeMo's post-processing is reproduced
operation by operation (float32 thresholds and times), and the reference probability nearest a threshold
lies 1.2e-5 from it (more than 6x the largest difference seen), so no decision is a near tie on any CPU.
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from transcribe.audio import load_audio
from transcribe.errors import ModelError, OptionValueError

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "models" / "sortformer-tiny"
MODEL = SHARED / "sortformer-tiny.nemo"
MIXES = ("mix0", "mix1", "mix2")
MODES = {"offline": dict(mode="offline"), "streaming_sync": dict(mode="streaming"),
         "streaming_async": dict(mode="streaming", async_update=True)}
ATOL = 2e-5

pytestmark = pytest.mark.skipif(not MODEL.is_file(), reason=f"the shared tiny Sortformer is not at {MODEL}")


@pytest.fixture(scope="module")
def refs():
    return json.loads((SHARED / "references.json").read_text())


@pytest.fixture(scope="module")
def tensors():
    from safetensors.torch import load_file

    return load_file(str(SHARED / "sortformer-tiny_refs.safetensors"))


@pytest.fixture(scope="module")
def diarizer():
    from transcribe import load_model

    return load_model(str(MODEL))


@pytest.fixture(scope="module")
def audio():
    return {m: load_audio(str(SHARED / f"{m}.wav"), 16000) for m in MIXES}


def nemo_order(lines):
    return sorted(lines, key=lambda s: (s.split()[2], float(s.split()[0])))


def test_loads_as_a_diarizer(diarizer):
    assert diarizer.family == "sortformer" and diarizer.diarizer
    assert diarizer.max_speakers == 4
    assert diarizer.frame_s == pytest.approx(0.08)
    assert diarizer.streaming_mode is True  # the config's streaming_mode


@pytest.mark.parametrize("mix", MIXES)
@pytest.mark.parametrize("mode", list(MODES))
def test_probabilities_and_segments_match_nemo(diarizer, refs, tensors, audio, mix, mode):
    from transcribe.sortformer.options import SortformerOptions
    from transcribe.sortformer.postprocess import nemo_lines

    opts = SortformerOptions(**MODES[mode])
    probs = diarizer.probabilities(audio[mix], opts)
    ref = tensors[f"{mix}.{mode}.probs"].numpy()
    assert probs.shape == ref.shape == (refs["mixtures"][mix][mode]["n_frames"], 4)
    np.testing.assert_allclose(probs, ref, atol=ATOL, rtol=0)
    assert nemo_lines(diarizer.turns(probs, opts)) == nemo_order(refs["mixtures"][mix][mode]["segments"])


@pytest.mark.parametrize("mix", MIXES)
@pytest.mark.parametrize("mode", list(MODES))
def test_post_processing_of_nemo_probabilities_is_nemo_exactly(diarizer, refs, tensors, mix, mode):
    """The post-processing alone, on NeMo's own probabilities: no network rounding in between."""
    from transcribe.sortformer.options import SortformerOptions
    from transcribe.sortformer.postprocess import nemo_lines

    turns = diarizer.turns(tensors[f"{mix}.{mode}.probs"].numpy(), SortformerOptions())
    assert nemo_lines(turns) == nemo_order(refs["mixtures"][mix][mode]["segments"])


@pytest.mark.parametrize("mode", ["streaming_sync", "streaming_async"])
@pytest.mark.parametrize("mix", MIXES)
def test_chunk_trace_matches_nemo(diarizer, refs, audio, mix, mode):
    """Every chunk: its feature frames, left and right offsets, and the speaker cache's and FIFO's lengths."""
    from transcribe.sortformer.stream import BLOCK, ChunkLoop, Features, file_stats

    m = diarizer.model
    loop = ChunkLoop(m, async_update=mode == "streaming_async")
    feats = Features(m.preprocessor, file_stats(m.preprocessor, audio[mix]))
    pcm = audio[mix]
    with torch.no_grad():
        for i in range(0, len(pcm), BLOCK):
            loop.push(feats.push(pcm[i:i + BLOCK]))
        loop.push(feats.finish())
        loop.finish()
    want = refs["mixtures"][mix][mode]["trace"]
    assert len(loop.trace) == len(want)

    def one(v):
        return v[0] if isinstance(v, list) else v

    for got, w in zip(loop.trace, want):
        assert got["feat_frames"] == w["chunk_feat_frames"]
        assert (got["left_offset"], got["right_offset"]) == (w["left_offset"], w["right_offset"])
        assert tuple(got["before"]) == (one(w["spkcache_len_before"]), one(w["fifo_len_before"]))
        assert tuple(got["after"]) == (one(w["spkcache_len_after"]), one(w["fifo_len_after"]))


def test_final_streaming_state_matches_nemo(diarizer, tensors, audio):
    """After mix0 (sync): the compressed speaker cache (embeddings and predictions), the FIFO and the silence
    profile are NeMo's."""
    from transcribe.sortformer.stream import ChunkLoop, Features, file_stats

    m = diarizer.model
    loop = ChunkLoop(m)
    feats = Features(m.preprocessor, file_stats(m.preprocessor, audio["mix0"]))
    with torch.no_grad():
        loop.push(feats.push(audio["mix0"]))
        loop.push(feats.finish())
        loop.finish()
    c = loop.cache
    pre = "mix0.streaming_sync.final_state."
    torch.testing.assert_close(c.spkcache, tensors[pre + "spkcache"], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(c.spkcache_preds, tensors[pre + "spkcache_preds"], atol=ATOL, rtol=0)
    torch.testing.assert_close(c.fifo, tensors[pre + "fifo"], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(c.fifo_preds, tensors[pre + "fifo_preds"], atol=ATOL, rtol=0)
    torch.testing.assert_close(c.mean_sil_emb, tensors[pre + "mean_sil_emb"], atol=1e-4, rtol=1e-4)
    assert c.n_sil_frames.tolist() == tensors[pre + "n_sil_frames"].tolist()


def test_offline_stages_match_nemo(diarizer, tensors, audio):
    """The offline path stage by stage on mix0: input scaling, mel, subsampling, encoder, projection,
    Transformer, head (pre-encoder and encoder activations are O(1-10): float32 bounds a little wider)."""
    m = diarizer.model
    x = torch.from_numpy(audio["mix0"])
    torch.testing.assert_close(x * (1.0 / (x.max() + 1e-3)), tensors["stages.audio_normalized"][0], atol=1e-7, rtol=0)
    with torch.no_grad():
        mel = m.features(x, scale=True)
        torch.testing.assert_close(mel, tensors["stages.mel"][0], atol=2e-4, rtol=1e-4)
        emb = m.pre_encode(mel)
        torch.testing.assert_close(emb, tensors["stages.pre_encode_out"][0], atol=1e-4, rtol=1e-4)
        enc, _ = m.encoder.layers_forward(emb[None], torch.tensor([emb.shape[0]]))
        torch.testing.assert_close(enc, tensors["stages.fc_encoder_out"], atol=1e-4, rtol=1e-4)
        h = m.sortformer_modules.encoder_proj(enc.transpose(1, 2))
        torch.testing.assert_close(h, tensors["stages.encoder_proj_out"], atol=1e-4, rtol=1e-4)
        h = m.transformer_encoder(h)
        torch.testing.assert_close(h, tensors["stages.transformer_encoder_out"], atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(m.sortformer_modules.head(h), tensors["stages.preds"], atol=ATOL, rtol=0)
    # the streaming path's features: the raw (unscaled) audio, normalized over the whole clip
    from transcribe.sortformer.stream import Features, file_stats

    f = Features(m.preprocessor, file_stats(m.preprocessor, audio["mix0"]))
    got = torch.cat([f.push(audio["mix0"]), f.finish()], dim=1)
    torch.testing.assert_close(got, tensors["stages.streaming_mel"][0], atol=2e-4, rtol=1e-4)


@pytest.mark.parametrize("block", [1000, 4000, 17777])
def test_streaming_does_not_depend_on_how_the_audio_is_cut(diarizer, audio, monkeypatch, block):
    """A file is read in blocks (bounded memory for hours of audio): the probabilities do not depend on the
    block size (frames are made bit-equal to the whole signal's; the chunks are the same)."""
    from transcribe.sortformer import recognizer as rec
    from transcribe.sortformer.options import SortformerOptions

    opts = SortformerOptions(mode="streaming")
    whole = diarizer.probabilities(audio["mix1"], opts)
    monkeypatch.setattr(rec, "BLOCK", block)
    cut = diarizer.probabilities(audio["mix1"], opts)
    np.testing.assert_allclose(cut, whole, atol=1e-6, rtol=0)


def _unnormalized(diarizer):
    """The tiny model with its front end's normalization off (as the published streaming models have it)."""
    from transcribe.nemo.frontend import NemoMelFrontEnd
    from transcribe.sortformer.recognizer import SortformerDiarizer

    import copy

    m = copy.deepcopy(diarizer.model)
    fe = NemoMelFrontEnd(replace(m.preprocessor.config, normalize="NA"))
    fe.window, fe.fb = m.preprocessor.window, m.preprocessor.fb
    m.preprocessor = fe
    return SortformerDiarizer(m, "tiny-NA")


@pytest.mark.parametrize("piece", [160, 1234, 16000])
def test_live_diarizer_equals_the_file_for_a_model_without_normalization(diarizer, audio, piece):
    """Live: samples fed in pieces of any size give the file's streaming probabilities (a front end without
    whole-clip normalization, like the published streaming models')."""
    from transcribe.sortformer.options import SortformerOptions

    d = _unnormalized(diarizer)
    want = d.probabilities(audio["mix2"], SortformerOptions(mode="streaming"))
    live = d.stream_diarizer()
    rows = [live.feed(audio["mix2"][i:i + piece]) for i in range(0, len(audio["mix2"]), piece)]
    rows.append(live.finish())
    got = np.concatenate(rows)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=1e-6, rtol=0)
    assert live.frames_done == want.shape[0]
    # rows come as chunks complete: never before their right context has arrived
    assert sum(len(r) for r in rows[:-1]) <= want.shape[0]


def test_live_diarizer_with_normalization_runs_on_running_statistics(diarizer, audio):
    """A per_feature model live: the statistics of the frames so far stand in for the clip's (documented);
    the frames and the speakers found are those of the file, the values close to it."""
    from transcribe.sortformer.options import SortformerOptions

    want = diarizer.probabilities(audio["mix0"], SortformerOptions(mode="streaming"))
    live = diarizer.stream_diarizer()
    got = np.concatenate([live.feed(audio["mix0"][i:i + 8000]) for i in range(0, len(audio["mix0"]), 8000)]
                         + [live.finish()])
    assert got.shape == want.shape
    assert ((got > 0.5).any(axis=0) == (want > 0.5).any(axis=0)).all()


def test_num_speakers_above_the_model_is_refused(diarizer, audio):
    with pytest.raises(OptionValueError, match="at most 4"):
        diarizer.transcribe(audio["mix0"], sample_rate=16000, num_speakers=5)
    with pytest.raises(OptionValueError):
        diarizer.transcribe(audio["mix0"], sample_rate=16000, num_speakers=0)


def test_bad_post_processing_values_are_refused(diarizer, audio):
    for bad in (dict(onset=1.5), dict(offset=-0.1), dict(pad_onset=float("nan")), dict(mode="sideways")):
        with pytest.raises(OptionValueError):
            diarizer.transcribe(audio["mix0"], sample_rate=16000, **bad)


def test_config_settings_not_implemented_are_errors():
    from transcribe.nemo.checkpoint import read_config
    from transcribe.sortformer.config import parse_config

    cfg = read_config(MODEL)
    parse_config(cfg)
    for section, key, value, words in [
        ("sortformer_modules", "fifo_len", -1, "at least 0"),
        ("sortformer_modules", "spkcache_len", 4, "at least 16"),
        ("sortformer_modules", "chunk_len", 1.5, "whole number"),
        ("sortformer_modules", "new_knob", 1, "does not implement"),
        ("transformer_encoder", "hidden_act", "tanh", "not implemented"),
        ("transformer_encoder", "mask_future", True, "not implemented"),
        ("transformer_encoder", "hidden_size", 48, "differs"),
        ("sortformer_modules", "num_spks", 3, "differs from sortformer_modules.num_spks"),
    ]:
        bad = json.loads(json.dumps(cfg))
        bad[section][key] = value
        if key == "num_spks":
            bad["max_num_of_spks"] = 4
        with pytest.raises(ValueError, match=words):
            parse_config(bad)


def test_empty_and_tiny_inputs(diarizer):
    from transcribe.sortformer.options import SortformerOptions

    for mode in ("offline", "streaming"):
        p = diarizer.probabilities(np.zeros(0, np.float32), SortformerOptions(mode=mode))
        assert p.shape == (0, 4)
        p = diarizer.probabilities(np.zeros(800, np.float32), SortformerOptions(mode=mode))
        assert p.shape[1] == 4 and p.shape[0] >= 1


@pytest.mark.parametrize("dtype", ["bfloat16", "int8"])
def test_reduced_precision_stays_near_float32(diarizer, audio, dtype):
    """bf16 (8-bit mantissa) and int8 layers move the probabilities by a few hundredths on this model (0.018
    and 0.026 measured); the bound is 0.1, and at most 2% of the speaker decisions may flip (near 0.5)."""
    from transcribe import load_model

    ref = diarizer.probabilities(audio["mix1"])
    got = load_model(str(MODEL), dtype=dtype).probabilities(audio["mix1"])
    assert got.shape == ref.shape
    assert np.abs(got - ref).max() < 0.1
    assert ((got > 0.5) != (ref > 0.5)).mean() <= 0.02


def test_array_inputs_are_read_in_place_and_checked_as_any_input(diarizer, audio):
    """A float32 mono array at the model's rate is diarized without a copy (an hour is 230 MB) and never
    written; other arrays and bad ones go through the audio layer's checks, with its errors."""
    from transcribe.errors import AudioError

    pcm = audio["mix2"].copy()
    before = pcm.copy()
    d = diarizer.diarize(pcm, sample_rate=16000)
    assert np.array_equal(pcm, before)
    assert d.probs.shape == diarizer.diarize(str(SHARED / "mix2.wav")).probs.shape
    np.testing.assert_allclose(diarizer.diarize(pcm.astype(np.float64), sample_rate=16000).probs, d.probs,
                               atol=1e-6, rtol=0)
    bad = pcm.copy()
    bad[100] = np.nan
    for x in (bad, np.zeros(0, np.float32)):
        with pytest.raises(AudioError):
            diarizer.diarize(x, sample_rate=16000)
