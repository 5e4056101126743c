"""Cohere Transcribe (transformers' `cohere_asr`) against transformers 5.24.0's own outputs on the tiny model
tests/models/cohere-tiny (random weights; tests/references/cohere/README.md says how the references were
made): the greedy token ids and text of every recorded run exactly (4 clips x en PnC, en noPnC, de, ja; the
padded batch of 4), the prompts of all 14 languages, the front end's features and the encoder's output
within float32 tolerances, the logits of every generated step, and the refusals.

Tolerances: the front end runs the same float32 operations as transformers' feature extractor in another
order (a banded mel sum and a float64 log against a float32 matrix product and log), and the encoder and
decoder the same products through other kernels (which differ between CPUs: AVX2, AVX-512, AMX). Measured
on this machine: feature statistics within 3e-9, encoder outputs within 5e-7, every step's logits within
1e-6. The bounds, 1e-4 (2e-4 for single feature values, which reach +-11), leave 100x for other CPUs and
stay 5x under the smallest top-2 margin the references record (0.0010), so no greedy decision here is a
near-tie at that scale. Audio is read as
the references read it (soundfile, int16 / 32768)."""
import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf
import torch

import transcribe
from transcribe.errors import ModelError, OptionValueError, OptionsNotTaken

from .conftest import AUDIO, MODELS, REPO

MODEL = MODELS / "cohere-tiny"
REFS = json.loads((REPO / "tests" / "references" / "cohere" / "reference.json").read_text(encoding="utf-8"))
RESULTS = REFS["results"]
CLIPS = REFS["clips"]
MAX_NEW = REFS["max_new_tokens"]
EOS = REFS["special_tokens"]["<|endoftext|>"]
# run -> the options of that run (transformers' language and punctuation)
RUNS = {
    "greedy_en_pnc": dict(language="en", pnc=True),
    "greedy_en_nopnc": dict(language="en", pnc=False),
    "greedy_de_pnc": dict(language="de", pnc=True),
    "greedy_ja_pnc": dict(language="ja", pnc=True),
}
CASES = [(run, c["clip"]) for run in RUNS for c in RESULTS[run]["per_clip"]]


def _audio(clip: str) -> np.ndarray:
    x, sr = sf.read(str(AUDIO / clip), dtype="float32")
    assert sr == 16000 and x.ndim == 1
    return x


def _ref(run: str, clip: str) -> dict:
    return next(c for c in RESULTS[run]["per_clip"] if c["clip"] == clip)


def _without_eos(ref: dict) -> list[int]:
    ids = list(ref["generated_ids"])
    if ref["stopped_by_eos"]:
        assert ids[-1] == EOS
        ids = ids[:-1]
    return ids


@pytest.fixture(scope="module")
def model():
    return transcribe.load_model(str(MODEL))


def test_the_directory_is_detected_as_cohere():
    from transcribe.cohere import detect
    from transcribe.loading import FAMILIES

    assert detect(MODEL) == "transformers"
    assert next(f.name for f in FAMILIES if f.detect(MODEL)) == "cohere"  # not Whisper's "not a Whisper model"
    assert detect(REPO / "tests" / "models" / "canary-hf-tiny") is None


@pytest.mark.parametrize("run,clip", CASES, ids=[f"{r}-{c}" for r, c in CASES])
def test_greedy_ids_and_text_equal_transformers(model, run, clip):
    ref = _ref(run, clip)
    t = model.transcribe(_audio(clip), max_new_tokens=MAX_NEW, **RUNS[run])
    ids = [tok.id for tok in t.tokens]
    assert ids == _without_eos(ref), f"min top-2 margin of the reference run: {ref['min_margin']:.4f}"
    assert len(ids) + int(ref["stopped_by_eos"]) == ref["n_generated"]
    assert t.text == ref["text"]
    assert t.language == RUNS[run]["language"]
    assert t.segments[0].text == t.text.strip() and t.segments[0].end == pytest.approx(ref["n_samples"] / 16000)


def test_the_prompts_are_transformers_s(model):
    for key, ids in REFS["prompt_ids_all_languages"].items():
        lang, p = key.split("_")
        assert list(model.prompts.build(lang, p == "pnc").ids) == ids, key
    for run, kw in RUNS.items():
        assert list(model.prompts.build(kw["language"], kw["pnc"]).ids) == _ref(run, "jfk.wav")["decoder_prompt_ids"]
    assert model.languages == sorted({k.split("_")[0] for k in REFS["prompt_ids_all_languages"]})
    assert list(model.prompts.build(None, None).ids) == _ref("greedy_en_pnc", "jfk.wav")["decoder_prompt_ids"]


def test_a_batch_gives_transformers_s_batch_and_each_input_alone(model):
    batch = RESULTS["greedy_en_pnc_batch4"]["per_clip"]
    out = model.transcribe([_audio(c["clip"]) for c in batch], batch_size=4, max_new_tokens=MAX_NEW)
    for c, t in zip(batch, out):
        want = c["generated_ids"][:-1] if c["generated_ids"][-1] == EOS else c["generated_ids"]
        assert [tok.id for tok in t.tokens] == want, c["clip"]
        assert [tok.id for tok in t.tokens] == _without_eos(_ref("greedy_en_pnc", c["clip"]))


def _close(stats: dict, x: torch.Tensor, atol: float, rtol: float) -> None:
    x = x.double()
    assert stats["mean"] == pytest.approx(float(x.mean()), abs=atol)
    assert stats["std"] == pytest.approx(float(x.std()), abs=atol, rel=rtol)
    assert stats["min"] == pytest.approx(float(x.min()), abs=atol, rel=rtol)
    assert stats["max"] == pytest.approx(float(x.max()), abs=atol, rel=rtol)
    assert stats["abs_sum"] == pytest.approx(float(x.abs().sum()), rel=rtol)


def test_features_equal_transformers_s_with_its_dither(model):
    ref = _ref("greedy_en_pnc", "jfk.wav")
    f = ref["features"]
    x = torch.from_numpy(_audio("jfk.wav"))[None]
    n = torch.tensor([x.shape[1]])
    with torch.inference_mode():
        feats, frames = model.model.features(x, n)
    feats = feats.transpose(1, 2)  # transformers' [B, T, n_mels]
    assert list(feats.shape) == f["shape"] and int(frames) == f["attention_mask_sum"]
    _close(f, feats, atol=1e-4, rtol=1e-4)
    assert feats[0, 0, :8].tolist() == pytest.approx(f["first_frame_first8"], abs=2e-4)
    assert feats[0, 10, :5].tolist() == pytest.approx(f["frame10_mel0_to_4"], abs=2e-4)
    assert feats[0, int(frames) - 1, :4].tolist() == pytest.approx(f["last_valid_frame_first4"], abs=2e-4)
    assert bool((feats[0, int(frames):] == 0).all())
    # the dither is what transformers adds: without it the features move as far as transformers' do
    from transcribe.cohere.model import CohereFrontEnd

    plain = CohereFrontEnd(model.model.config)
    plain.dither_scale = 0.0
    with torch.inference_mode():
        undithered = plain(x, n)[0].transpose(1, 2)
    d0 = ref["features_dither0"]
    _close(d0, undithered, atol=1e-4, rtol=1e-4)
    assert float((feats - undithered).abs().max()) == pytest.approx(d0["max_abs_diff_vs_dithered"], abs=1e-3)


def test_the_dither_is_seeded_by_each_row_s_length():
    from transcribe.cohere.model import dither

    audio = torch.zeros(2, 1000)
    out = dither(audio, torch.tensor([1000, 600]), 1e-5)
    g = torch.Generator().manual_seed(600)
    assert torch.equal(out[1, :600], 1e-5 * torch.randn(600, generator=g))
    assert bool((out[1, 600:] == 0).all()) and bool((audio == 0).all())


def test_the_encoder_output_equals_transformers_s(model):
    ref = _ref("greedy_en_pnc", "jfk.wav")
    x = torch.from_numpy(_audio("jfk.wav"))[None]
    m = model.model
    with torch.inference_mode():
        feats, frames = m.features(x, torch.tensor([x.shape[1]]))
        enc, enc_len = m.encode_features(feats, frames)
        proj = m.project(enc)
    e, p = ref["encoder_out"], ref["encoder_proj_out"]
    assert list(enc.shape) == e["shape"] and int(enc_len) == e["output_mask_sum"]
    assert list(proj.shape) == p["shape"]
    _close(e, enc, atol=1e-4, rtol=1e-4)
    _close(p, proj, atol=1e-4, rtol=1e-4)
    assert enc[0, 0, :8].tolist() == pytest.approx(e["row0_first8"], abs=1e-4)
    assert proj[0, 0, :8].tolist() == pytest.approx(p["row0_first8"], abs=1e-4)


@pytest.mark.parametrize("run", list(RUNS))
def test_every_step_s_logits_equal_transformers_s(model, run):
    """Teacher-forced on the reference's ids: each step's top logit, log-sum-exp and EOS logit (the
    margins the references record are 10x or more above these differences)."""
    m = model.model
    for clip in CLIPS:
        ref = _ref(run, clip)
        x = torch.from_numpy(_audio(clip))[None]
        with torch.inference_mode():
            states, enc_len = m.encode(x, torch.tensor([x.shape[1]]))
            state = m.start(states, enc_len)
            ids = torch.tensor([ref["decoder_prompt_ids"]])
            for k, step in enumerate(ref["steps"]):
                logits = m.step(ids, state)[0]
                assert int(logits.argmax()) == step["top1_id"], (clip, k)
                assert float(logits.max()) == pytest.approx(step["top1_logit"], abs=1e-4)
                assert float(torch.logsumexp(logits.double(), 0)) == pytest.approx(step["logsumexp"], abs=1e-4)
                assert float(logits[EOS]) == pytest.approx(step["eos_logit"], abs=1e-4)
                ids = torch.tensor([[ref["generated_ids"][k]]])


def test_without_decoder_start_token_id_the_prompt_starts_with_bos_as_in_transformers(tmp_path):
    """transformers' quirk: with no decoder_start_token_id, generate() puts bos_token_id before the
    prompt (11 tokens); the first generated token is then the reference's."""
    q = RESULTS["quirk_no_decoder_start_token_id"]
    d = tmp_path / "cohere-nostart"
    shutil.copytree(MODEL, d)
    for name in ("config.json", "generation_config.json"):
        cfg = json.loads((d / name).read_text())
        cfg["decoder_start_token_id"] = None
        (d / name).write_text(json.dumps(cfg))
    m = transcribe.load_model(str(d))
    prompt = m.prompts.build("en", True)
    assert list(prompt.ids) == q["sequence_first_12"][:11]
    t = m.transcribe(_audio(q["clip"]), max_new_tokens=1)
    assert [tok.id for tok in t.tokens] == q["sequence_first_12"][11:]


def test_a_sentencepiece_tokenizer_model_gives_the_same_text():
    """The published repository stores tokenizer.model; the same vocabulary as a SentencePiece model
    (tests/references/cohere/tokenizer.model, trained by the reference tool's `train_spm`: the pieces of
    tokenizer.json) decodes every reference run's ids to transformers' text."""
    from transcribe.cohere.tokenizer import from_sentencepiece, from_tokenizer_json

    sp = from_sentencepiece(REPO / "tests" / "references" / "cohere" / "tokenizer.model")
    assert sp.pieces == from_tokenizer_json(MODEL / "tokenizer.json").pieces
    for run in RUNS:
        for clip in CLIPS:
            ref = _ref(run, clip)
            assert sp.text(ref["generated_ids"]) == ref["text"], (run, clip)


@pytest.mark.parametrize("language,sep", [("en", " "), ("ja", "")])
def test_a_long_input_is_cut_at_pauses_and_joined_as_transformers_joins_chunks(model, language, sep):
    """44 s (jfk.wav four times) is over max_piece_s (35 s): its pieces are decoded alone and their texts
    joined with a space (without one for ja and zh, as transformers' processor joins its chunks)."""
    from transcribe import long_input

    x = np.concatenate([_audio("jfk.wav")] * 4)
    spans = long_input.cut_spans(x, 16000, 35.0, "auto", grain=model.model.frame_stride)
    assert len(spans) == 2 and all(b - a <= 35 * 16000 for a, b in spans)
    t = model.transcribe(x, max_new_tokens=5, language=language)
    parts = [model.transcribe(x[a:b], max_new_tokens=5, language=language) for a, b in spans]
    assert t.text == sep.join(p.text.strip() for p in parts)
    assert [tok.id for tok in t.tokens] == [tok.id for p in parts for tok in p.tokens]
    assert t.duration == pytest.approx(44.0)
    assert [(sg.start, sg.end) for sg in t.segments] == [pytest.approx((a / 16000, b / 16000)) for a, b in spans]


def test_an_input_shorter_than_one_frame_gives_an_empty_transcript(model):
    x = _audio("jfk.wav")
    out = model.transcribe([x[:100], x[:16000], x[:159]], max_new_tokens=5)
    assert [t.text for t in (out[0], out[2])] == ["", ""] and not out[0].tokens
    assert [t.id for t in out[1].tokens] == [t.id for t in model.transcribe(x[:16000], max_new_tokens=5).tokens]


# ---------------------------------------------------------------------------------------------- refusals

@pytest.mark.parametrize("options,error,words", [
    (dict(language="xx"), OptionValueError, r"language 'xx' is not one this model transcribes \(one of ar, de, el, en"),
    (dict(beam_size=4), OptionsNotTaken, "is a Cohere model and does not take beam_size"),
    (dict(temperature=0.5), OptionsNotTaken, "is a Cohere model and does not take temperature"),
    (dict(task="translate"), OptionsNotTaken, "is a Cohere model and does not take task"),
    (dict(word_timestamps=True), OptionValueError, "cannot time words"),
    (dict(max_new_tokens=0), OptionValueError, "max_new_tokens"),
    (dict(max_piece_s=5.0), OptionValueError, "max_piece_s"),
])
def test_bad_options_are_refused_in_one_line(model, options, error, words):
    with pytest.raises(error, match=words) as e:
        model.transcribe(_audio("jfk.wav")[:16000], **options)
    assert "\n" not in str(e.value)


def test_max_new_tokens_bounds_the_output_and_defaults_to_the_position_table(model):
    x = _audio("jfk.wav")
    assert len(model.transcribe(x, max_new_tokens=3).tokens) == 3
    prompt = model.prompts.build("en", True)
    assert model.max_new(prompt, model.Options()) == model.model.max_positions - 10


def test_transformers_in_memory_names_map_onto_the_saved_ones():
    """The reference lists both: the names the file holds and transformers' module names after loading it."""
    from transcribe.cohere.checkpoint import is_hf_layout, nemo_name

    hf, saved = REFS["state_dict_shapes"], REFS["safetensors_keys_and_shapes"]
    assert is_hf_layout(hf) and not is_hf_layout(saved)
    assert {nemo_name(k, True): v for k, v in hf.items()} == {nemo_name(k, False): v for k, v in saved.items()}


def test_a_file_of_transformers_in_memory_names_gives_the_same_ids(tmp_path):
    from safetensors.torch import load_file, save_file

    from transcribe.cohere.checkpoint import nemo_name

    d = tmp_path / "cohere-hf-names"
    shutil.copytree(MODEL, d)
    saved = {nemo_name(k, False): v for k, v in load_file(str(MODEL / "model.safetensors")).items()}
    save_file({k: saved[nemo_name(k, True)].contiguous() for k in REFS["state_dict_shapes"]},
              str(d / "model.safetensors"))
    m = transcribe.load_model(str(d))
    ref = _ref("greedy_en_pnc", "dev/ls_61-70968-0002.wav")
    assert [t.id for t in m.transcribe(_audio(ref["clip"]), max_new_tokens=MAX_NEW).tokens] == _without_eos(ref)


def test_the_head_is_untied_unless_the_config_ties_it(model, tmp_path):
    m = model.model
    emb = m.transf_decoder._embedding.token_embedding.weight
    assert not torch.equal(m.log_softmax.mlp.layer0.weight, emb)  # cohere-tiny's head is its own tensor
    d = tmp_path / "cohere-tied"
    shutil.copytree(MODEL, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["tie_word_embeddings"] = True
    (d / "config.json").write_text(json.dumps(cfg))
    tied = transcribe.load_model(str(d)).model
    assert torch.equal(tied.log_softmax.mlp.layer0.weight, tied.transf_decoder._embedding.token_embedding.weight)


def test_a_model_whose_config_this_code_does_not_implement_is_refused(tmp_path):
    d = tmp_path / "cohere-gqa"
    shutil.copytree(MODEL, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["num_key_value_heads"] = 2
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelError, match="num_key_value_heads = 2 is not implemented"):
        transcribe.load_model(str(d))


# ---------------------------------------------------------------------------------------------- command

def _cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "transcribe", str(AUDIO / "jfk.wav"), "--model", str(MODEL), *args],
                          capture_output=True, text=True, cwd=str(REPO), timeout=300)


def test_the_command_transcribes_with_the_model():
    r = _cli("--format", "json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["language"] == "en" and out["duration"] == pytest.approx(11.0)
    ids = [t["id"] for t in out["tokens"]]
    # no max_new_tokens on the command: jfk.wav runs past the reference's 40 tokens, with the same start
    assert ids[:MAX_NEW] == _ref("greedy_en_pnc", "jfk.wav")["generated_ids"]


@pytest.mark.parametrize("args,words", [
    (["--language", "xx"], "language 'xx' is not one this model transcribes"),
    (["--beam-size", "2"], "cohere-tiny is a Cohere model and does not take --beam-size"),
    (["--word-timestamps"], "cannot time words"),
])
def test_the_command_refuses_bad_options_in_one_line(args, words):
    r = _cli(*args, "--format", "json")
    assert r.returncode == 2 and r.stdout == ""
    assert words in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
