"""Canary as a transformers folder (tests/models/canary-hf-tiny: `CanaryForConditionalGeneration` with seeded
random weights, saved by transformers 5.24.0) against transformers' own outputs
(tests/references/canary_hf/reference.json; both READMEs say how they were made): greedy token ids and text
exactly for every clip and task, with `generate(max_new_tokens=40)`'s cap, greedy and transformers' beam of 4
(and its sequences_score); the 4-clip padded batch; the raw logits of every step within float32 tolerances.

Tolerances: the front end, the encoder and the decoder run the same float32 operations as transformers in
another order (the mel projection band by band, the log in float64, attention kernels), so features agree
to ~1e-5 and logits to ~1e-4; the smallest greedy margin of the references is 1.1e-3, so argmax decisions
cannot flip within that."""
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import transcribe
from transcribe.errors import ModelError, OptionValueError

from .conftest import AUDIO

HERE = Path(__file__).parent
MODEL = HERE / "models" / "canary-hf-tiny"
REFS = json.loads((HERE / "references" / "canary_hf" / "reference.json").read_text())
CAP = REFS["max_new_tokens"]
EOS = REFS["special_tokens"]["<|endoftext|>"]
# reference run -> transcribe()'s options for the same request
KINDS = {
    "greedy_asr_en_pnc": dict(),
    "greedy_asr_en_nopnc": dict(pnc=False),
    "greedy_ast_en_de": dict(target_language="de"),
}
CASES = [(k, i) for k in KINDS for i in range(len(REFS["results"][k]["per_clip"]))]
BEAMS = [(k, i) for k in KINDS for i in range(len(REFS["results"][k.replace("greedy", "beam4")]["per_clip"]))]


def _clip(ref: dict) -> np.ndarray:
    return transcribe.load_audio(str(AUDIO / ref["clip"]))


def _ids(ref: dict) -> list[int]:
    """transformers' generated ids without the EOS that ends them (the recognizer's tokens leave it out)."""
    ids = list(ref["generated_ids"])
    if ref["stopped_by_eos"]:
        assert ids[-1] == EOS
        ids = ids[:-1]
    return ids


@pytest.fixture(scope="module")
def model():
    return transcribe.load_model(str(MODEL))


def test_the_folder_is_a_transformers_canary():
    from transcribe.canary import detect
    from transcribe.canary.hf import CanaryHFASR

    assert detect(MODEL) == "hf"
    m = transcribe.load_model(str(MODEL))  # Canary's, not Whisper's (which takes other transformers folders)
    assert isinstance(m, CanaryHFASR) and m.family == "canary"
    assert m.languages == ["de", "en", "es", "fr"]
    d = m.model.config.decoder
    assert (d.hidden, d.heads, d.head_dim, d.layers, d.max_positions) == (64, 4, 16, 2, 1024)
    assert m.model.encoder_decoder_proj is None
    head = m.model.log_softmax.mlp.layer0.weight
    assert torch.equal(head, m.model.transf_decoder._embedding.token_embedding.weight)  # tied


@pytest.mark.parametrize("kind,i", CASES, ids=[f"{k}-{Path(REFS['results'][k]['per_clip'][i]['clip']).stem}"
                                               for k, i in CASES])
def test_greedy_ids_and_text_equal_transformers(model, kind, i):
    ref = REFS["results"][kind]["per_clip"][i]
    t = model.transcribe(_clip(ref), max_new_tokens=CAP, **KINDS[kind])
    assert [tok.id for tok in t.tokens] == _ids(ref)
    assert len(t.tokens) + ref["stopped_by_eos"] == ref["n_generated"]  # the cap counts EOS, as generate()'s
    assert t.text == ref["text"]


@pytest.mark.parametrize("kind,i", BEAMS, ids=[f"{k.replace('greedy', 'beam4')}-"
                                               f"{Path(REFS['results'][k]['per_clip'][i]['clip']).stem}"
                                               for k, i in BEAMS])
def test_beam_ids_text_and_score_equal_transformers(model, kind, i):
    """transformers' beam of 4 (length_penalty 1.0: sum / length); its sequences_score within float32
    rounding of 40 summed log-probabilities."""
    ref = REFS["results"][kind.replace("greedy", "beam4")]["per_clip"][i]
    t = model.transcribe(_clip(ref), beam_size=4, nbest=4, max_new_tokens=CAP, **KINDS[kind])
    assert [tok.id for tok in t.tokens] == _ids(ref)
    assert t.text == ref["text"]
    assert t.nbest.beam == "transformers" and len(t.nbest.hypotheses) == 4
    assert [x.id for x in t.nbest.hypotheses[0].tokens] == _ids(ref)
    assert t.nbest.hypotheses[0].score == pytest.approx(ref["sequence_score"], abs=1e-5)
    assert t.nbest.hypotheses[0].score == pytest.approx(ref["teacher_forced_mean_logprob"], abs=1e-5)


def test_a_batch_of_beams_gives_each_clip_what_it_gives_alone(model):
    refs = REFS["results"]["beam4_asr_en_pnc"]["per_clip"]
    got = model.transcribe([_clip(r) for r in refs], batch_size=4, beam_size=4, nbest=4, max_new_tokens=CAP)
    for t, ref in zip(got, refs):
        assert [tok.id for tok in t.tokens] == _ids(ref)
        assert t.nbest.hypotheses[0].score == pytest.approx(ref["sequence_score"], abs=1e-5)


@pytest.mark.parametrize("kind", list(KINDS))
def test_the_prompts_are_transformers_(model, kind):
    opts = model.Options(**KINDS[kind])
    prompt, _ = model._plan(opts)
    for ref in REFS["results"][kind]["per_clip"]:
        assert list(prompt.ids) == ref["decoder_prompt_ids"]


def test_every_step_s_logits_equal_transformers_(model):
    """Teacher-forced on transformers' own output: each step's raw logits (top two, their margin, the
    log-sum-exp, the EOS logit) within float32 tolerances, and its argmax transformers' token."""
    m = model.model
    for kind in KINDS:
        prompt, _ = model._plan(model.Options(**KINDS[kind]))
        for ref in REFS["results"][kind]["per_clip"]:
            x = torch.from_numpy(_clip(ref))[None]
            with torch.inference_mode():
                states, n = m.encode(x, torch.tensor([x.shape[1]]))
                state = m.start(states, n)
                ids = torch.tensor([prompt.ids])
                for k, step in enumerate(ref["steps"]):
                    logits = m.step(ids, state)[0].double()
                    top = torch.topk(logits, 2)
                    assert int(top.indices[0]) == step["top1_id"] == ref["generated_ids"][k]
                    assert float(top.values[0]) == pytest.approx(step["top1_logit"], abs=2e-4)
                    assert float(top.values[1]) == pytest.approx(step["top2_logit"], abs=2e-4)
                    assert float(torch.logsumexp(logits, 0)) == pytest.approx(step["logsumexp"], abs=2e-4)
                    assert float(logits[EOS]) == pytest.approx(step["eos_logit"], abs=2e-4)
                    ids = torch.tensor([[step["top1_id"]]])


def test_features_and_encoder_states_equal_transformers_(model):
    ref = REFS["results"]["greedy_asr_en_pnc"]["per_clip"][0]
    f, e = ref["features"], ref["encoder_out"]
    m = model.model
    x = torch.from_numpy(_clip(ref))[None]
    with torch.inference_mode():
        mel, frames = m.preprocessor(x, torch.tensor([x.shape[1]]))
        states, n = m.encode(x, torch.tensor([x.shape[1]]))
    assert int(frames) == f["attention_mask_sum"]
    mel = mel[0, :, :int(frames)].T  # time first, as transformers'; its last (padding) frame is all zero
    assert mel[0, :8].tolist() == pytest.approx(f["first_frame_first8"], abs=1e-4)
    assert mel[10, :5].tolist() == pytest.approx(f["frame10_mel0_to_4"], abs=1e-4)
    assert float(mel.abs().sum()) == pytest.approx(f["abs_sum"], rel=1e-5)
    assert (float(mel.min()), float(mel.max())) == pytest.approx((f["min"], f["max"]), abs=1e-4)
    assert list(states.shape) == e["shape"] and int(n) == e["output_mask_sum"]
    assert states[0, 0, :8].tolist() == pytest.approx(e["row0_first8"], abs=1e-4)
    assert float(states.double().sum()) == pytest.approx(e["sum"], abs=1e-2)
    assert float(states.double().abs().sum()) == pytest.approx(e["abs_sum"], rel=1e-5)


def test_the_batch_of_four_gives_each_clip_what_it_gives_alone(model):
    batch = REFS["results"]["greedy_asr_en_pnc_batch4"]
    clips = [_clip(ref) for ref in batch["per_clip"]]
    got = model.transcribe(clips, batch_size=4, max_new_tokens=CAP)
    alone = REFS["results"]["greedy_asr_en_pnc"]["per_clip"]
    for t, ref, single, row in zip(got, batch["per_clip"], alone, batch["sequences_padded"]):
        assert [tok.id for tok in t.tokens] == _ids(single)
        assert t.text == ref["text"] == single["text"]
        prompt = single["decoder_prompt_ids"]
        assert row[:len(prompt) + len(t.tokens)] == prompt + [tok.id for tok in t.tokens]


def test_max_new_tokens_caps_the_output(model):
    ref = REFS["results"]["greedy_asr_en_pnc"]["per_clip"][0]
    x = _clip(ref)
    for cap in (1, 7):
        assert [tok.id for tok in model.transcribe(x, max_new_tokens=cap).tokens] == ref["generated_ids"][:cap]
    # without a cap the decoder's table bounds it (transformers' generic default, 20 new tokens, is not taken)
    ref = REFS["results"]["greedy_asr_en_nopnc"]["per_clip"][0]  # ends on EOS after 11 tokens
    assert [tok.id for tok in model.transcribe(_clip(ref), pnc=False).tokens] == _ids(ref)


def test_generation_config_s_length_bounds_are_the_default(tmp_path):
    folder = _copy(tmp_path)
    _edit(folder / "generation_config.json", max_new_tokens=5)
    ref = REFS["results"]["greedy_asr_en_pnc"]["per_clip"][0]
    m = transcribe.load_model(str(folder))
    assert [tok.id for tok in m.transcribe(_clip(ref)).tokens] == ref["generated_ids"][:5]
    assert [tok.id for tok in m.transcribe(_clip(ref), max_new_tokens=9).tokens] == ref["generated_ids"][:9]
    _edit(folder / "generation_config.json", max_new_tokens=None, max_length=12)  # prompt (9) + output
    m = transcribe.load_model(str(folder))
    assert [tok.id for tok in m.transcribe(_clip(ref)).tokens] == ref["generated_ids"][:3]


def test_inputs_are_not_padded_to_one_second_but_to_two_hops(model):
    """transformers pads nothing (NeMo's transcribe() pads inputs to one second); an input under two hops,
    where transformers' normalisation divides by zero, is padded with silence to two hops."""
    x = _clip(REFS["results"]["greedy_asr_en_pnc"]["per_clip"][0])
    short = x[:8000]
    assert model._padded(short) is short
    tiny = x[:100]
    padded = np.concatenate([tiny, np.zeros(220, np.float32)])
    got = model.transcribe(tiny, max_new_tokens=5)
    assert [t.id for t in got.tokens] == [t.id for t in model.transcribe(padded, max_new_tokens=5).tokens]
    assert got.duration == pytest.approx(100 / 16000)


def test_the_text_is_transformers_decode_without_special_tokens(model):
    tok = model.tokenizer
    assert tok.text([21, 580, 5, 463]) == "ces"       # specials dropped, then the first leading space
    assert tok.text([463, 580, 580, 463]) == "ces  ces"
    assert tok.text([463, 2, 463]) == "cesces"        # <pad> (not marked special) dropped as transformers does
    assert tok.text([0, 300, 301, 580]) == "anat "    # <unk> dropped; a trailing space kept
    assert tok.text([3, 2, 2]) == ""


def test_without_tokenizer_config_the_canary_special_tokens_are_dropped(tmp_path):
    folder = _copy(tmp_path)
    (folder / "tokenizer_config.json").unlink()
    tok = transcribe.load_model(str(folder)).tokenizer
    assert tok.text([463, 2, 0, 3, 463]) == "cesces"


def test_the_decoder_positions_are_transformers_block_layout():
    """transformers' table is NeMo's with the channels reordered: sines first, then cosines."""
    from transcribe.canary.hf import decoder_positions
    from transcribe.nemo.transformer import sinusoid_positions

    hf = decoder_positions(1024, 96)
    nemo = sinusoid_positions(96, 1024)
    facts = REFS["decoder_position_table_vs_nemo_canary_tiny"]
    assert float((hf - nemo).abs().max()) == pytest.approx(facts["max_abs_diff_hf_vs_nemo"], abs=1e-6)
    reordered = torch.cat([nemo[:, 0::2], nemo[:, 1::2]], dim=1)
    assert float((hf - reordered).abs().max()) < 1e-6
    assert hf[1, :6].tolist() == pytest.approx(facts["hf_row1_first6"], abs=1e-7)


# -------------------------------------------------- hypotheses that end on EOS (tests/references/canary_hf_eos)

EOS_REFS = json.loads((HERE / "references" / "canary_hf_eos" / "reference.json").read_text())


@pytest.fixture(scope="module")
def eos_models(tmp_path_factory):
    """The tiny model with its EOS logit raised, as the reference tool makes it (a copy, the bias + bump)."""
    from safetensors.torch import load_file, save_file

    out = {}
    for bump in sorted({r["bump"] for r in EOS_REFS["runs"]}):
        folder = tmp_path_factory.mktemp("eos") / "model"
        shutil.copytree(MODEL, folder)
        sd = load_file(str(folder / "model.safetensors"))
        sd["proj_out.bias"][3] += bump
        save_file(sd, str(folder / "model.safetensors"), metadata={"format": "pt"})
        out[bump] = transcribe.load_model(str(folder))
    return out


def test_searches_ending_on_eos_equal_transformers(eos_models):
    """Greedy and beam (3 or 4 beams, length_penalty 0.5 to 2) where hypotheses end on EOS: the finished
    hypotheses' scores count EOS in the length, only the top N of the 2N candidates finish, the early-stop
    heuristic ends an item; ids, text and sequences_score as transformers'."""
    ended = 0
    for r in EOS_REFS["runs"]:
        opts = dict(max_new_tokens=EOS_REFS["max_new_tokens"], target_language=r["target_language"],
                    pnc=r["punctuation"])
        if r["num_beams"] > 1:
            opts.update(beam_size=r["num_beams"], nbest=1, length_penalty=r["length_penalty"])
        t = eos_models[r["bump"]].transcribe(_clip(r), **opts)
        want = r["generated_ids"]
        if want and want[-1] == EOS:
            want, ended = want[:-1], ended + (r["num_beams"] > 1)
        assert [tok.id for tok in t.tokens] == want, r
        assert t.text == r["text"]
        if r["num_beams"] > 1:
            assert t.nbest.hypotheses[0].score == pytest.approx(r["sequence_score"], abs=1e-5)
    assert ended >= 50  # the point of these references


# ------------------------------------------------------------------------------------------------- refusals

@pytest.mark.parametrize("options,words", [
    (dict(word_timestamps=True), "word timestamps are not implemented for transformers-format Canary"),
    (dict(length_penalty=0.5), "length_penalty needs a beam search"),
    (dict(max_new_tokens=0), "max_new_tokens must be"),
    (dict(max_new_tokens=(1 << 16) + 1), "max_new_tokens must be"),
    (dict(max_new_tokens=True), "max_new_tokens must be"),
    (dict(language="xx"), "language 'xx' is not one of the model's languages (de, en, es, fr)"),
], ids=["word-timestamps", "penalty-greedy", "cap-0", "cap-big", "cap-bool", "language"])
def test_bad_options_are_refused_in_one_line(model, options, words):
    with pytest.raises(OptionValueError) as e:
        model.transcribe(np.zeros(16000, np.float32), **options)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_the_command_gives_transformers_ids_and_refuses_in_one_line(capsys):
    from transcribe.cli import main

    ref = REFS["results"]["greedy_asr_en_nopnc"]["per_clip"][0]  # ends on EOS within the cap
    args = [str(AUDIO / ref["clip"]), "--model", str(MODEL)]
    assert main([*args, "--format", "json", "--no-pnc"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [t["id"] for t in out["tokens"]] == _ids(ref)
    assert main([*args, "--word-timestamps"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "word timestamps are not implemented for transformers-format Canary" in err[0], err


def _copy(tmp_path: Path) -> Path:
    folder = tmp_path / "canary-hf"
    shutil.copytree(MODEL, folder)
    return folder


def _edit(path: Path, **changes) -> None:
    data = json.loads(path.read_text())
    for key, value in changes.items():
        part, _, name = key.rpartition("__")
        target = data[part] if part else data
        if value is None:
            target.pop(name, None)
        else:
            target[name] = value
    path.write_text(json.dumps(data))


@pytest.mark.parametrize("file,changes,words", [
    ("config.json", dict(something_new=1), "config.something_new = 1 is a setting this code does not implement"),
    ("config.json", dict(decoder_config__num_key_value_heads=2), "decoder_config.num_key_value_heads = 2 is not "
     "implemented"),
    ("config.json", dict(encoder_config__hidden_act="gelu"), "encoder_config.hidden_act = 'gelu' is not implemented"),
    ("config.json", dict(decoder_config__hidden_size=128), "differs from encoder_config.hidden_size"),
    ("config.json", dict(decoder_config__num_hidden_layers=1 << 20), "decoder_config.num_hidden_layers = 1048576 is "
     "out of the range"),
    ("config.json", dict(vocab_size=641), "vocab_size = 641 disagrees with decoder_config.vocab_size = 640"),
    ("generation_config.json", dict(decoder_start_token_id=4), "decoder_start_token_id = 4 disagrees with "
     "config.json's 7"),
    ("config.json", dict(decoder_config__head_dim=8), "checkpoint tensor"),
    ("generation_config.json", dict(num_beams=65), "generation_config.json: num_beams = 65 is out of the range"),
    ("generation_config.json", dict(early_stopping=True), "generation_config.early_stopping = True is not "
     "implemented"),
    ("generation_config.json", dict(repetition_penalty=1.2), "generation_config.repetition_penalty = 1.2 is a "
     "setting this code does not implement"),
    ("processor_config.json", dict(feature_extractor__preemphasis=2.0), "preemphasis = 2.0 is not implemented"),
    ("processor_config.json", dict(feature_extractor__feature_size=80), "num_mel_bins = 128 disagrees with the "
     "feature extractor's feature_size = 80"),
    ("tokenizer.json", dict(decoder={"type": "Fuse"}), "tokenizer.json: decoder = 'Fuse' is not implemented "
     "(Metaspace)"),
], ids=["unknown-key", "gqa", "encoder-act", "widths", "huge", "vocab", "start-token", "head-dim-vs-weights",
        "beams-bound", "early-stopping", "penalty", "preemphasis", "mels", "text-decoder"])
def test_settings_not_implemented_are_refused_by_name(tmp_path, file, changes, words):
    folder = _copy(tmp_path)
    _edit(folder / file, **changes)
    with pytest.raises(ModelError) as e:
        transcribe.load_model(str(folder))
    assert words in str(e.value) and "\n" not in str(e.value)


def test_a_start_token_other_than_the_prompt_s_first_is_refused(tmp_path):
    """transformers prepends decoder_start_token_id unless the prompt starts with it: only <|startofcontext|>
    (the template's first token) gives the prompt transformers decodes from."""
    folder = _copy(tmp_path)
    (folder / "generation_config.json").unlink()
    _edit(folder / "config.json", decoder_start_token_id=4)
    with pytest.raises(ModelError, match="decoder_start_token_id = 4 is not the vocabulary's id of the token it "
                                         r"names \(7\)"):
        transcribe.load_model(str(folder))


def test_a_missing_or_foreign_tensor_is_refused(tmp_path):
    from safetensors.torch import load_file, save_file

    folder = _copy(tmp_path)
    sd = load_file(str(folder / "model.safetensors"))
    sd.pop("model.decoder.layers.1.mlp.fc2.bias")
    save_file(sd, str(folder / "model.safetensors"))
    with pytest.raises(ModelError, match="missing"):
        transcribe.load_model(str(folder))
    sd["model.decoder.extra.weight"] = torch.zeros(2)
    save_file(sd, str(folder / "model.safetensors"))
    with pytest.raises(ModelError, match="tensor model.decoder.extra.weight is not part of a transformers Canary"):
        transcribe.load_model(str(folder))


def test_a_head_dim_other_than_hidden_over_heads_builds_wider_attention(tmp_path):
    """transformers' `head_dim` sets the attention projections' width (heads x head_dim), not hidden / heads."""
    from safetensors.torch import load_file, save_file

    folder = _copy(tmp_path)
    _edit(folder / "config.json", decoder_config__head_dim=32)
    sd = load_file(str(folder / "model.safetensors"))
    g = torch.Generator().manual_seed(0)
    for k in list(sd):
        if k.startswith("model.decoder.layers.") and "_attn." in k:
            if k.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight")):
                sd[k] = torch.randn(128, 64, generator=g) / 8
            elif k.endswith(("q_proj.bias", "k_proj.bias", "v_proj.bias")):
                sd[k] = torch.zeros(128)
            elif k.endswith("o_proj.weight"):
                sd[k] = torch.randn(64, 128, generator=g) / 11
    save_file(sd, str(folder / "model.safetensors"))
    m = transcribe.load_model(str(folder))
    layer = m.model.transf_decoder._decoder.layers[0].first_sub_layer
    assert layer.head_dim == 32 and tuple(layer.query_net.weight.shape) == (128, 64)
    assert len(m.transcribe(np.zeros(16000, np.float32), max_new_tokens=3).tokens) <= 3
