"""GigaAM v3 against the `gigaam` package's own outputs on the four tiny models of tests/models/gigaam (the
published variants scaled down and briefly trained on English speech: tools/gigaam_tiny.py; references:
tools/gigaam_reference.py): greedy token ids, their frames and the text exactly, each clip alone and in a
padded batch; word times; encoder outputs within a float tolerance; loading by path, by short name and
from the command line; long inputs through the shared path; the refusals.

Tolerances: the encoder runs the reference's float32 operations in its order on the same data (bitwise equal
on the machine that made the references); other CPUs (AVX2, AVX-512, AMX) move the last bits, so encoder
values are compared within 1e-4 (they are of order 1; float32 rounding through two layers stays near 1e-6).
Word times are compared within 1 ms: gigaam divides each input's duration by its frame count for a frame's
length, here a frame is 40 ms (hop 160 x subsampling 4 at 16 kHz); over these clips the two agree to well
under a millisecond. Audio is read as the references read it (soundfile, int16 / 32768)."""
import json
import numpy as np
import pytest
import soundfile as sf
import torch

import transcribe
from transcribe.errors import ModelError, OptionValueError, TranscribeError

from .conftest import AUDIO, MODELS, REPO

VARIANTS = ("ctc", "rnnt", "e2e-ctc", "e2e-rnnt")
ROOT = MODELS / "gigaam"
REFS = {v: json.loads((REPO / "tests" / "references" / "gigaam" / f"{v}.json").read_text(encoding="utf-8"))
        for v in VARIANTS}
CASES = [(v, i) for v in VARIANTS for i in range(len(REFS[v]["clips"]))]


def _audio(clip: str) -> np.ndarray:
    x, sr = sf.read(str(AUDIO / clip), dtype="float32")
    assert sr == 16000 and x.ndim == 1
    return x


@pytest.fixture(scope="module")
def models():
    return {v: transcribe.load_model(str(ROOT / v)) for v in VARIANTS}


def test_the_folders_are_detected_as_gigaam():
    from transcribe.loading import FAMILIES

    for v in VARIANTS:
        assert next(f.name for f in FAMILIES if f.detect(ROOT / v)) == "gigaam"
    from transcribe.gigaam import detect

    assert detect(MODELS / "cohere-tiny") is None


def test_the_references_are_not_empty():
    """The tiny models say something on every clip (so the comparisons below compare tokens)."""
    for v in VARIANTS:
        clips = REFS[v]["clips"]
        assert all(c["ids"] for c in clips) and len(clips[0]["ids"]) >= 10, v


@pytest.mark.parametrize("variant,k", CASES, ids=[f"{v}-{k}" for v, k in CASES])
def test_greedy_ids_frames_and_text_equal_gigaam(models, variant, k):
    ref = REFS[variant]["clips"][k]
    m = models[variant]
    t = m.transcribe(_audio(ref["clip"]))
    assert [x.id for x in t.tokens] == ref["ids"]
    assert [x.frame for x in t.tokens] == ref["frames"]
    assert t.text == ref["text"].strip()
    assert [w.word for w in t.words] == [w["word"] for w in ref["words"]]
    # gigaam's frame length is the input's duration over its frame count; ours 40 ms: the same frames
    shift = len(_audio(ref["clip"])) / 16000 / ref["encoded_len"]
    for w, r in zip(t.words, ref["words"]):
        assert round(w.start / m.frame_s) * shift == pytest.approx(r["start"], abs=1e-9)
        assert round(w.end / m.frame_s) * shift == pytest.approx(r["end"], abs=1e-9)


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_batch_gives_each_input_s_own_result(models, variant):
    clips = REFS[variant]["clips"]
    ts = models[variant].transcribe([_audio(c["clip"]) for c in clips], batch_size=len(clips))
    for t, ref in zip(ts, clips):
        assert ref["batch_ids"] == ref["ids"]  # the reference's own batch = single
        assert [x.id for x in t.tokens] == ref["ids"]


@pytest.mark.parametrize("variant", ["ctc", "e2e-rnnt"])
def test_encoder_output_within_float_tolerance(models, variant):
    m = models[variant]
    ref = REFS[variant]["clips"][0]
    enc, lengths = m.encode([_audio(ref["clip"])])
    assert int(lengths[0]) == ref["encoded_len"]
    assert torch.allclose(enc[0, :4, :6], torch.tensor(ref["enc_sample"]), atol=1e-4)
    assert abs(float(enc.abs().mean()) - ref["enc_mean_abs"]) < 1e-4


@pytest.mark.parametrize("dtype", ["bfloat16", "int8"])
def test_other_precisions_keep_the_transcript(models, dtype):
    """bf16 (the encoder's weights and compute) and int8 (its linear layers) move the numbers, not the words:
    on jfk.wav the tiny character RNN-T model keeps at least 90% of its float32 ids in order (measured: all)."""
    import difflib

    from transcribe.quant import Int8Linear

    m = transcribe.load_model(str(ROOT / "rnnt"), dtype=dtype)
    if dtype == "int8":
        assert isinstance(m.model.encoder.layers[0].feed_forward1.linear1, Int8Linear)
    else:
        assert m.model.encoder.layers[0].feed_forward1.linear1.weight.dtype == torch.bfloat16
    pcm = _audio("jfk.wav")
    ids = [x.id for x in m.transcribe(pcm).tokens]
    ref = REFS["rnnt"]["clips"][0]["ids"]
    assert difflib.SequenceMatcher(None, ids, ref).ratio() >= 0.9


def test_token_and_segment_times_come_from_40ms_frames(models):
    t = models["e2e-ctc"].transcribe(_audio("jfk.wav"))
    assert models["e2e-ctc"].frame_s == pytest.approx(0.04)
    for tok in t.tokens:
        assert tok.start == pytest.approx(tok.frame * 0.04) and tok.end == pytest.approx(tok.start + 0.04)
    assert t.segments and t.segments[0].start == t.words[0].start and t.segments[-1].end == t.words[-1].end


@pytest.mark.parametrize("variant", ["ctc", "rnnt"])
def test_beam_search_runs_and_ranks(models, variant):
    """Beams are ours (gigaam has none): an N-best list, best first, its top a real transcript."""
    t = models[variant].transcribe(_audio("jfk.wav"), beam_size=4, nbest=3)
    hyps = t.nbest.hypotheses
    assert 1 <= len(hyps) <= 3 and t.text == hyps[0].text
    assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True) or variant == "rnnt"
    assert t.tokens


def test_long_input_is_cut_into_pieces_and_joined(models):
    """An input over max_piece_s is cut at pauses (long_input.cut_spans, on the 640-sample frame grid) and each
    piece's transcript, its times shifted by the piece's start, is the piece's own."""
    from transcribe import long_input

    m = models["ctc"]
    clips = [_audio(c["clip"]) for c in REFS["ctc"]["clips"]]
    quiet = np.zeros(4800, np.float32)
    long = np.concatenate([clips[0], quiet, clips[1], quiet, clips[2], quiet, clips[0]])
    t = m.transcribe(long, max_piece_s=12.0)
    spans = long_input.cut_spans(long, 16000, 12.0, "auto", grain=640)
    assert len(spans) >= 3 and all(a % 640 == 0 for a, _ in spans)
    parts = [m.transcribe(long[a:b]) for a, b in spans]
    assert t.duration == pytest.approx(len(long) / 16000)
    assert t.text == " ".join(p.text for p in parts if p.text)
    assert [x.id for x in t.tokens] == [x.id for p in parts for x in p.tokens]
    starts = [round(x.start + a / 16000, 3) for p, (a, _) in zip(parts, spans) for x in p.tokens]
    assert [x.start for x in t.tokens] == pytest.approx(starts, abs=1e-9)


def test_refusals(models, tmp_path):
    m = models["ctc"]
    with pytest.raises(TranscribeError):
        m.stream()
    with pytest.raises(OptionValueError):
        m.transcribe(_audio("jfk.wav"), max_piece_s=60.0)
    with pytest.raises(TranscribeError, match="shorter than one GigaAM window"):
        m.transcribe(np.zeros(100, np.float32))
    # a pickled config (the gigaam package's .ckpt) is refused, not unpickled
    import argparse

    bad = tmp_path / "v3_ctc.ckpt"
    torch.save({"cfg": argparse.Namespace(encoder=1), "state_dict": {}}, bad)
    with pytest.raises(ModelError, match="Hugging Face layout"):
        transcribe.load_model(str(bad))
    from transcribe.gigaam import detect

    plain = tmp_path / "model_weights.ckpt"  # a bare state dict (NeMo's) is not taken for one
    torch.save({"w": torch.zeros(2)}, plain)
    assert detect(bad) == "ckpt" and detect(plain) is None
    # a setting this implementation does not run
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "pytorch_model.bin").write_bytes((ROOT / "ctc" / "pytorch_model.bin").read_bytes())
    for key, value, said in (("self_attention_model", "rel_pos", "self_attention_model"),
                             ("xscaling", True, "does not know: xscaling")):
        cfg = json.loads((ROOT / "ctc" / "config.json").read_text())
        cfg["cfg"]["model"]["cfg"]["encoder"][key] = value
        (folder / "config.json").write_text(json.dumps(cfg))
        with pytest.raises(ModelError, match=said):
            transcribe.load_model(str(folder))


def test_a_ckpt_with_a_plain_config_loads(models, tmp_path):
    """A .ckpt in the package's shape (cfg, state_dict) whose config is a plain dict loads with weights_only."""
    cfg = json.loads((ROOT / "ctc" / "config.json").read_text())["cfg"]["model"]["cfg"]
    sd = torch.load(ROOT / "ctc" / "pytorch_model.bin", weights_only=True)
    path = tmp_path / "v3_ctc.ckpt"
    torch.save({"cfg": cfg, "state_dict": {k[len("model."):]: v for k, v in sd.items()}}, path)
    m = transcribe.load_model(str(path))
    pcm = _audio("jfk.wav")
    assert [x.id for x in m.transcribe(pcm).tokens] == REFS["ctc"]["clips"][0]["ids"]


def test_short_names_are_the_published_branches():
    from transcribe.hub import ALIASES

    assert ALIASES["gigaam-v3-ctc"] == "ai-sage/GigaAM-v3@ctc"
    assert ALIASES["gigaam-v3-rnnt"] == "ai-sage/GigaAM-v3@rnnt"
    assert ALIASES["gigaam-v3-e2e-ctc"] == "ai-sage/GigaAM-v3@e2e_ctc"
    assert ALIASES["gigaam-v3-e2e-rnnt"] == "ai-sage/GigaAM-v3@main"


def test_command_line_json(capsys):
    """`transcribe jfk.wav --model <tiny> --format json` (the command's main, in this process)."""
    from transcribe import cli

    code = cli.main([str(AUDIO / "jfk.wav"), "--model", str(ROOT / "e2e-rnnt"), "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(out)
    ref = REFS["e2e-rnnt"]["clips"][0]
    assert doc["text"] == ref["text"].strip()
    assert [t["id"] for t in doc["tokens"]] == ref["ids"]
    assert doc["words"] and doc["segments"]


def test_a_short_name_fetches_its_branch(monkeypatch, tmp_path):
    """hub.from_hub("owner/name@rev"): the snapshot of that revision (the cache first)."""
    import huggingface_hub

    from transcribe import hub

    asked = []

    def snapshot(repo, **kw):
        asked.append((repo, kw.get("revision"), kw.get("local_files_only")))
        (tmp_path / "pytorch_model.bin").write_bytes(b"")
        return str(tmp_path)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot)
    assert hub.resolve("gigaam-v3-e2e-ctc") == (tmp_path, "gigaam-v3-e2e-ctc")
    assert asked == [("ai-sage/GigaAM-v3", "e2e_ctc", True)]
