"""More of NeMo's Canary behaviour, from references made by tools/canary_nemo_reference.py in NeMo's own venv
(tests/references/canary/README.md says how and lists NeMo's quirks):

- tiny-canary1.nemo, a model in NeMo's older `canary` prompt format (canary-1b's: task token, no decoder
  context), with another shape (no projection: the encoder and decoder widths are equal; 2 decoder heads;
  a 512-position table) and canary-1b's special-token order (EOS 2, BOS 3): greedy ASR with and without
  punctuation, en->de, the beam of 4 and its list, the default decoding, a padded batch;
- canary-tiny's beam with a length penalty (NeMo multiplies the kept scores back by the penalty of the slot
  they land in, not their own: the n-best scores here are NeMo's, so that order of operations is checked),
  with a small max_generation_delta (NeMo's beam makes one token more than the limit minus the prompt), and
  with timestamps.

Token ids exactly; scores within 1e-3 (sums of up to ~40 float32 log-probabilities, each within ~1e-5)."""
import json
from pathlib import Path

import pytest

import transcribe

from .conftest import AUDIO, SHARED

REFS = Path(__file__).parent / "references" / "canary"
V1 = json.loads((REFS / "tiny-canary1.json").read_text())


def _path(clip: str) -> Path:
    return AUDIO / clip if clip == "jfk.wav" else AUDIO / "dev" / clip


@pytest.fixture(scope="module")
def v1():
    return transcribe.load_model(str(Path(__file__).parent / "models" / "canary" / "tiny-canary1.nemo"))


@pytest.fixture(scope="module")
def tiny():
    return transcribe.load_model(str(SHARED / "models" / "canary-tiny" / "canary-tiny.nemo"))


V1_KINDS = {
    "greedy_asr_en_pnc": dict(max_generation_delta=-1),
    "greedy_asr_en_nopnc": dict(max_generation_delta=-1, pnc=False),
    "greedy_ast_en_de": dict(max_generation_delta=-1, target_language="de"),
    "beam4_asr_en_pnc": dict(beam_size=4),
    "default_decoding_asr_en_pnc": dict(beam_size=1),
}
V1_CASES = [(k, c["clip"]) for k in V1_KINDS for c in V1["results"][k]["per_clip"]]


@pytest.mark.parametrize("kind,clip", V1_CASES, ids=[f"{k}-{c}" for k, c in V1_CASES])
def test_the_canary_format_model_gives_nemo_s_ids(v1, kind, clip):
    ref = next(c for c in V1["results"][kind]["per_clip"] if c["clip"] == clip)
    t = v1.transcribe(str(_path(clip)), **V1_KINDS[kind])
    assert [x.id for x in t.tokens] == ref["output_ids"]
    assert t.text == ref["text"].strip()


def test_the_canary_format_prompts(v1):
    from transcribe.canary.prompt import Request

    assert v1.model.config.prompt_format == "canary" and v1.model.encoder_decoder_proj is None
    build = v1.prompts.build
    assert list(build(Request()).ids) == V1["results"]["greedy_asr_en_pnc"]["per_clip"][0]["prompt_ids"] == [3, 4, 8, 4, 11]
    assert list(build(Request(pnc=False)).ids) == [3, 4, 8, 4, 10]
    assert list(build(Request(target_language="de")).ids) == [3, 4, 9, 5, 11]
    with pytest.raises(transcribe.errors.OptionValueError, match="no timestamp tokens"):
        v1.transcribe(str(_path("jfk.wav")), word_timestamps=True)
    with pytest.raises(transcribe.errors.OptionValueError, match="canary2-format models only"):
        v1.transcribe(str(_path("jfk.wav")), itn=True)


def test_the_canary_format_n_best_and_batch(v1):
    for ref in V1["results"]["beam4_nbest_asr_en_pnc"]["per_clip"]:
        t = v1.transcribe(str(_path(ref["clip"])), beam_size=4, nbest=4)
        assert [x.id for x in t.tokens] == ref["nbest"][int(ref["best_index"])]["output_ids"]
        got = {tuple(x.id for x in h.tokens): h.score for h in t.nbest.hypotheses}
        assert sorted(got) == sorted(tuple(h["output_ids"]) for h in ref["nbest"])
        for h in ref["nbest"]:
            assert got[tuple(h["output_ids"])] == pytest.approx(h["score"], abs=1e-3)
    batch = V1["results"]["greedy_asr_en_pnc_batch4"]["per_clip"]
    got = v1.transcribe([str(_path(c["clip"])) for c in batch], batch_size=4, max_generation_delta=-1)
    assert [[x.id for x in t.tokens] for t in got] == [c["output_ids"] for c in batch]


def _beam_cases():
    out = []
    for name in ("canary-tiny-beam-lenpen.json", "canary-tiny-beam-maxdelta.json", "canary-tiny-beam-timestamps.json"):
        for kind, v in json.loads((REFS / name).read_text())["results"].items():
            out += [(name, kind, c["clip"]) for c in v["per_clip"]]
    return out


@pytest.mark.parametrize("name,kind,clip", _beam_cases(), ids=[f"{k}-{c}" for _, k, c in _beam_cases()])
def test_the_beam_s_length_penalty_limit_and_timestamps_are_nemo_s(tiny, name, kind, clip):
    run = json.loads((REFS / name).read_text())["results"][kind]
    ref = next(c for c in run["per_clip"] if c["clip"] == clip)
    beam = run["decoding_cfg"]["beam"]  # NeMo reads beam.length_penalty; its beam.len_pen is never read
    t = tiny.transcribe(str(_path(clip)), beam_size=4, nbest=4, length_penalty=beam.get("length_penalty", 0.0),
                        max_generation_delta=beam["max_generation_delta"], word_timestamps="timestamps" in kind)
    if "nbest" not in ref:
        assert [x.id for x in t.tokens] == ref["output_ids"]
        return
    assert [x.id for x in t.tokens] == ref["nbest"][int(ref["best_index"])]["output_ids"]
    got = {tuple(x.id for x in h.tokens): h.score for h in t.nbest.hypotheses}
    assert sorted(got) == sorted(tuple(h["output_ids"]) for h in ref["nbest"])
    for h in ref["nbest"]:
        assert got[tuple(h["output_ids"])] == pytest.approx(h["score"], abs=1e-3)
    if "timestamps" in kind:
        best = ref["nbest"][int(ref["best_index"])]
        assert [w.word for w in t.words] == [w["word"] for w in best["timestamp"]["word"]]
