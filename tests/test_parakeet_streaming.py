"""Cache-aware streaming Parakeet against NeMo (references by tools/nemo_streaming_reference.py).

- every chunk's encoder output within 1e-4 of NeMo's `cache_aware_stream_step` (float32; the
  measured difference is ~1e-6: the same operations in another order, summed over two layers);
- tokens identical to NeMo's `conformer_stream_step` (greedy_batch) over
  `CacheAwareStreamingAudioBuffer`, with the audio fed live in random pieces;
- where NeMo's streaming equals its offline decoding, ours equals our offline decoding with the
  same lookahead;
- live input: any piece sizes give the same tokens, words and events.
"""
from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from transcribe import load_model
from transcribe.audio import load_audio
from transcribe.errors import TranscribeError
from transcribe.parakeet import cache_aware

from .conftest import REPO, SHARED, reference_audio

REFS = REPO / "tests/references/nemo_streaming"
MODELS = ["tiny-tdt-streaming-random", "tiny-ctc-streaming-random", "tiny-eou-streaming"]


def _ref(name):
    return json.loads((REFS / f"{name}.json").read_text())


def _path(p: str):
    # The references name paths relative to the repository root (../shared/..., the built
    # two-utterance input).
    return reference_audio(p)


@pytest.fixture(scope="module", params=MODELS)
def case(request):
    ref = _ref(request.param)
    return ref, load_model(_path(ref["model"]))


def _feed(session, audio, rng, sizes=(1, 7, 160, 333, 1600, 7000, 16000)):
    i = 0
    while i < len(audio):
        n = rng.choice(sizes)
        session.feed(audio[i:i + n])
        i += n
    session.finalize()


def _run_id(run):
    return f"{run['clip']}-{run['att_context_size'][0]}-{run['att_context_size'][1]}"


def test_schedule_and_encoder_chunks_match_nemo(case):
    ref, asr = case
    m = asr.model
    assert m.encoder.att_context_sizes == ref["att_context_sizes"]
    for run in ref["runs"]:
        sched = cache_aware.schedule(m.encoder, run["att_context_size"])
        cfg = run["streaming_cfg"]
        assert {k: cfg[k] for k in sched.to_dict()} == sched.to_dict(), _run_id(run)
        audio = torch.from_numpy(load_audio(_path(run["path"])))[None]
        feats, n = m.features(audio, torch.tensor([audio.shape[1]]))
        # NeMo streams every frame of the whole-signal features, the last (past the valid length, 0) too.
        feats = feats[0, :, : audio.shape[1] // m.preprocessor.hop_length + 1]
        chunker = cache_aware.Chunker(sched, feats.shape[0])
        chunks = [(f, d, False) for f, d in chunker.push(feats)]
        last = chunker.finish(drop_short=True)
        if last is not None:
            chunks.append((last[0], last[1], True))
        assert len(chunks) == len(run["chunks"]), _run_id(run)
        cache = cache_aware.EncoderCache(m.encoder, sched)
        for k, ((f, drop, keep), rc) in enumerate(zip(chunks, run["chunks"])):
            assert (f.shape[-1], drop, keep) == (rc["input_frames"], rc["drop_extra_pre_encoded"], rc["keep_all_outputs"])
            out = cache_aware.stream_step(m.encoder, f, cache, sched, drop_extra_pre_encoded=drop, keep_all_outputs=keep)
            want = torch.tensor(rc["encoded"], dtype=torch.float32).t()
            assert out.shape == want.shape, (_run_id(run), k)
            torch.testing.assert_close(out, want, atol=1e-4, rtol=0, msg=f"{_run_id(run)} chunk {k}")


def _stream_tokens(s):
    """Every token of a stream (event tokens too), as take_new_tokens hands them out."""
    return [(t.id, t.frame) for t in s.take_new_tokens()]


def test_tokens_match_nemo_fed_live(case):
    ref, asr = case
    for run in ref["runs"]:
        audio = load_audio(_path(run["path"]))
        s = asr.stream(att_context_size=run["att_context_size"], eou_reset=False, drop_short_tail=True)
        _feed(s, audio, random.Random(_run_id(run)))
        got = _stream_tokens(s)
        assert [i for i, _ in got] == run["tokens"], _run_id(run)
        if "token_frames" in run:  # NeMo's frames (recorded for the EOU model)
            assert [f for _, f in got] == run["token_frames"], _run_id(run)


def _offline_ids(asr, audio, att):
    """Our offline greedy decoding with the lookahead's attention mask."""
    m = asr.model
    x = torch.from_numpy(audio)[None]
    with torch.inference_mode():
        feats, n = m.features(x, torch.tensor([x.shape[1]]))
        enc, enc_len = m.encoder(feats, n, att_context_size=att)
        if m.transducer:
            return asr._greedy_transducer(enc, enc_len, "entropy")[0].ids
        from transcribe.search import ctc

        logp = m.ctc_decoder(enc)[0]
        return ctc.greedy(logp, int(enc_len[0]), m.blank, None).ids


def test_streaming_equals_offline_where_nemo_does(case):
    ref, asr = case
    checked = 0
    for run in ref["runs"]:
        audio = load_audio(_path(run["path"]))
        offline = _offline_ids(asr, audio, run["att_context_size"])
        assert offline == run["offline_tokens"], _run_id(run)  # our offline equals NeMo's offline
        if run["tokens"] != run["offline_tokens"]:
            continue
        s = asr.stream(att_context_size=run["att_context_size"], eou_reset=False, drop_short_tail=True)
        s.feed(audio)
        s.finalize()
        assert [i for i, _ in _stream_tokens(s)] == offline, _run_id(run)
        checked += 1
    assert checked >= 4


def test_live_pieces_give_identical_results():
    ref = _ref("tiny-tdt-streaming-random")
    asr = load_model(_path(ref["model"]))
    audio = load_audio(SHARED / "audio/jfk.wav")[: 16000 * 6]

    def result(rng, att):
        s = asr.stream(att_context_size=att)
        _feed(s, audio, rng, sizes=(0, 1, 2, 159, 161, 480, 1281, 5000, 12345))
        toks = [(t.id, t.frame, t.duration_frames, round(t.confidence, 6)) for t in s.tokens()]
        words = [(w.word, w.start, w.end) for w in s.drain_words()]
        return toks, words, s.drain_events(), s.committed_text()

    for att in ([70, 13], [70, 1]):
        whole = asr.stream(att_context_size=att)
        whole.feed(audio)
        whole.finalize()
        want = ([(t.id, t.frame, t.duration_frames, round(t.confidence, 6)) for t in whole.tokens()],
                [(w.word, w.start, w.end) for w in whole.drain_words()], whole.drain_events(), whole.committed_text())
        assert want[0] and want[1]
        for seed in range(3):
            assert result(random.Random(seed), att) == want


def test_tail_is_decoded_by_default():
    """NeMo's buffer drops a last chunk shorter than the subsampling factor; by default we run it,
    so the tokens extend NeMo's (they can only add what the dropped frames give)."""
    ref = _ref("tiny-tdt-streaming-random")
    asr = load_model(_path(ref["model"]))
    run = next(r for r in ref["runs"] if r["att_context_size"] == [70, 1] and r["clip"] == "jfk")
    audio = load_audio(_path(run["path"]))
    frames = len(audio) // 160 + 1
    sched = cache_aware.schedule(asr.model.encoder, [70, 1])
    tail = (frames - sched.chunk_size[0]) % sched.chunk_size[1]
    assert 0 < tail < sched.sampling_frames[1]  # this run has a short tail: the case in point
    s = asr.stream(att_context_size=[70, 1], eou_reset=False)
    s.feed(audio)
    s.finalize()
    ids = [t.id for t in s.tokens()]
    assert ids[: len(run["tokens"])] == run["tokens"]
    assert s.latency.committed_ms == pytest.approx(1000 * len(audio) / 16000)


def test_session_options_and_latency():
    asr = load_model(SHARED / "models/parakeet-tiny/tiny-tdt-streaming-random.nemo")
    with pytest.raises(TranscribeError, match="not one of this model's lookaheads"):
        asr.stream(att_context_size=[70, 2])
    with pytest.raises(TranscribeError, match="unknown streaming option"):
        asr.stream(beam_size=4)
    with asr.stream(att_context_size=[70, 6]) as s:
        assert s.latency.chunk_ms == pytest.approx(560.0)
        assert s.latency.lookahead_ms == pytest.approx(480.0)
        s.feed(np.zeros(16000, np.float32))
        lat = s.latency
        assert lat.received_ms == pytest.approx(1000.0)
        assert 0 < lat.committed_ms <= lat.received_ms
    assert s.finished
    s.reset()
    assert s.latency.received_ms == 0 and not s.finished


def test_each_kind_of_session_refuses_the_others_options():
    """stream()'s options are ParakeetStreamOptions: a cache-aware session refuses the buffered windows'
    (chunk_s, left_s, right_s) and any name no Parakeet stream takes, as unknown streaming options (an
    OptionsNotTaken); a buffered one refuses the cache-aware session's, and a name no stream takes with
    the family's words. An option left None counts as not given."""
    from transcribe.errors import OptionsNotTaken
    from transcribe.parakeet.streaming import CacheAwareOptionsNotTaken

    live = load_model(SHARED / "models/parakeet-tiny/tiny-tdt-streaming-random.nemo")
    with pytest.raises(CacheAwareOptionsNotTaken, match=r"unknown streaming options for a cache-aware model: "
                       r"beam_size, chunk_s \(options: att_context_size, confidence, drop_short_tail, eou_reset, "
                       r"head, language\)"):
        live.stream(beam_size=4, chunk_s=2.0)
    with pytest.raises(OptionsNotTaken, match="unknown streaming option for a cache-aware model: left_s"):
        live.stream(left_s=1.0)
    live.stream(chunk_s=None, eou_reset=None, drop_short_tail=None).finalize()
    offline = load_model(SHARED / "models/parakeet-tiny/tiny-tdt-fit.nemo")
    for kw, words in ((dict(att_context_size=[70, 13]), "not a cache-aware streaming model"),
                      (dict(eou_reset=False), "eou_reset applies to cache-aware streaming models only"),
                      (dict(drop_short_tail=True), "drop_short_tail applies to cache-aware streaming models only"),
                      (dict(language="en-US"), "has no language prompt")):
        with pytest.raises(TranscribeError, match=words):
            offline.stream(**kw)
    with pytest.raises(OptionsNotTaken, match="is a Parakeet model and does not take beam_size"):
        offline.stream(beam_size=4)
    assert offline.stream(att_context_size=None, eou_reset=None, chunk_s=1.1).chunk_s == 1.12  # whole 80 ms frames


def test_caches_do_not_grow():
    """The state a stream keeps has a fixed size: caches, a chunk of features, one open word."""
    asr = load_model(SHARED / "models/parakeet-tiny/tiny-tdt-streaming-random.nemo")
    audio = load_audio(SHARED / "audio/jfk.wav")
    s = asr.stream(att_context_size=[70, 1])
    shapes = None
    for rep in range(3):
        s.feed(audio)
        s.take_new_text(), s.take_new_tokens(), s.drain_words(), s.drain_events()
        now = (tuple(s._cache.keys.shape), tuple(s._cache.last_time.shape), s._features.held,
               s._chunker._pending.shape[-1] <= s.schedule.chunk_size[1])
        assert shapes is None or now[:2] == shapes[:2]
        assert now[3] and now[2] <= 2 * 512
        shapes = now


def test_language_prompt_applies_to_every_chunk():
    """A prompt model (Nemotron 3.5 ASR's kind, tiny): every chunk's encoder output is conditioned
    on the language, so the stream decodes as the offline model conditioned on it does."""
    from transcribe.nemo.checkpoint import read_nemo
    from transcribe.parakeet.model import ParakeetModel
    from transcribe.parakeet.recognizer import ParakeetASR
    from transcribe.text.sentencepiece import SentencePieceTokenizer

    ckpt = read_nemo(SHARED / "models/parakeet-tiny/tiny-tdt-streaming-random.nemo")
    cfg = json.loads(json.dumps(ckpt.config))
    cfg["target"] = "nemo.collections.asr.models.EncDecRNNTBPEModelWithPrompt"
    cfg["num_prompts"] = 8
    cfg["model_defaults"]["initialize_prompt_feature"] = True
    cfg["model_defaults"]["prompt_dictionary"] = {"en-US": 0, "de-DE": 1, "auto": 7}
    model = ParakeetModel.random(cfg, seed=3)
    asr = ParakeetASR(model, SentencePieceTokenizer(ckpt.tokenizer), "tiny-prompt")
    audio = load_audio(SHARED / "audio/jfk.wav")[: 16000 * 5]
    x = torch.from_numpy(audio)[None]
    got = {}
    for lang in ("de-DE", "auto"):
        with torch.inference_mode():
            feats, n = model.features(x, torch.tensor([x.shape[1]]))
            feats = torch.nn.functional.pad(feats[:, :, : int(n[0])], (0, 1))  # NeMo's streamed last frame
            enc, enc_len = model.encoder(feats, n + 1, att_context_size=[70, 13])
            enc = model.apply_prompt(enc, lang)
            offline = asr._greedy_transducer(enc, enc_len, "entropy")[0].ids
        s = asr.stream(att_context_size=[70, 13], language=lang)
        _feed(s, audio, random.Random(lang))
        got[lang] = [t.id for t in s.tokens()]
        assert got[lang] == offline, lang
    assert got["de-DE"] != got["auto"]  # the prompt changes the decoding
    with pytest.raises(TranscribeError, match="prompt dictionary"):
        asr.stream(language="xx-XX")
    plain = load_model(SHARED / "models/parakeet-tiny/tiny-tdt-streaming-random.nemo")
    with pytest.raises(TranscribeError, match="no language prompt"):
        plain.stream(language="en-US")


@pytest.mark.parametrize("name", ["parakeet_realtime_eou_120m-v1", "nemotron-speech-streaming-en-0.6b",
                                  "nemotron-3.5-asr-streaming-0.6b"])
def test_published_streaming_architectures_stream(name):
    """The published cache-aware architectures (one layer of each, random weights: the shapes,
    lookaheads and caches of the real ones) stream every lookahead, and the streamed encoder
    output equals the offline one with the same lookahead (within 1e-4: float32, the same sums
    in another order) wherever NeMo's streaming can: when the first chunk holds the pre-encode
    cache's frames. With a 1-frame first chunk ([70, 0], [56, 0]) the second chunk's pre-encode
    cache is padded with zero features, as NeMo's buffer does, which offline decoding never sees
    (the NeMo parity test above covers that case)."""
    import yaml

    from transcribe.parakeet.model import ParakeetModel

    cfg = yaml.safe_load((REPO / f"tests/configs/published/{name}.yaml").read_text())
    cfg["encoder"]["n_layers"] = 1
    m = ParakeetModel.random(cfg, seed=1)
    audio = torch.from_numpy(load_audio(SHARED / "audio/jfk.wav")[: 16000 * 3])[None]
    compared = 0
    with torch.inference_mode():
        feats, _ = m.features(audio, torch.tensor([audio.shape[1]]))
        feats = feats[0, :, : audio.shape[1] // m.preprocessor.hop_length + 1]
        for att in m.encoder.att_context_sizes:
            sched = cache_aware.schedule(m.encoder, att)
            chunker = cache_aware.Chunker(sched, feats.shape[0])
            cache = cache_aware.EncoderCache(m.encoder, sched)
            outs = [cache_aware.stream_step(m.encoder, f, cache, sched, drop_extra_pre_encoded=d)
                    for f, d in chunker.push(feats)]
            last = chunker.finish()
            if last is not None:
                outs.append(cache_aware.stream_step(m.encoder, last[0], cache, sched, drop_extra_pre_encoded=last[1],
                                                    keep_all_outputs=True))
            streamed = torch.cat(outs, dim=1)
            offline, n = m.encoder(feats[None], torch.tensor([feats.shape[1]]), att_context_size=att)
            assert streamed.shape == offline[0, :, : int(n[0])].shape
            if sched.chunk_size[0] >= sched.pre_encode_cache_size[1]:
                torch.testing.assert_close(streamed, offline[0, :, : int(n[0])], atol=1e-4, rtol=0)
                compared += 1
    assert compared >= 1
