"""Granite Speech (autoregressive) against transformers 5.24 on the committed tiny models
(tests/models/granite_speech/<variant>: the 3.3 layout with a LoRA adapter, 4.0, 4.1 and plus; references in
tests/references/granite_speech/, made by tools/granite_speech_reference.py; README.md there says how).

Tolerances: the features are float32 log-mels of the same STFT (within 1e-5: FFT rounding differs between
pocketfft builds and CPUs); the encoder and projector outputs are float32 sums over tens of terms of values
around 1, through other kernels (SDPA's fused path, the BatchNorm folded into the convolution): 1e-4 absolute.
Token ids are compared exactly, for every reference greedy and beam output; beam scores within 1e-4.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import transcribe
from transcribe.audio import load_audio
from transcribe.errors import ModelError

HERE = Path(__file__).parent
MODELS = HERE / "models" / "granite_speech"
REFS = HERE / "references" / "granite_speech"
AUDIO = HERE.parent.parent / "shared" / "audio"
VARIANTS = sorted(p.stem for p in REFS.glob("*.json"))


def _audio(name: str):
    path = AUDIO / name if (AUDIO / name).is_file() else AUDIO / "dev" / name
    return load_audio(str(path), 16000)


def _trim(ids: list[int], stops: list[int], pad: int | None = None) -> list[int]:
    for i, t in enumerate(ids):
        if t in stops:
            return ids[:i]
    return ids


@pytest.fixture(scope="module", params=VARIANTS)
def case(request):
    v = request.param
    ref = json.loads((REFS / f"{v}.json").read_text())
    asr = transcribe.load_model(str(MODELS / v), dtype="float32")
    return v, ref, asr


def _instruction(ref: dict) -> str:
    return ref["chat_messages"][-1]["content"].replace("<|audio|>", "")


def test_variants_are_all_there():
    assert set(VARIANTS) >= {"g33", "g40", "g41", "plus"}


def test_prompt_ids_equal_the_processor_s(case):
    v, ref, asr = case
    prompt = asr.prompts.build(None, None, _instruction(ref))
    assert prompt.text == ref["prompt_text"]
    for name, a in ref["audios"].items():
        n = a["num_audio_tokens"]
        from transcribe.granite_speech.frontend import audio_tokens
        q = asr.model.cfg.projector
        assert audio_tokens(a["num_samples"], q.window_size, q.num_queries) == n
        assert prompt.ids(asr.audio_id, n) == a["input_ids"], (v, name)


def test_stage_tensors(case):
    v, ref, asr = case
    st = ref["stages_jfk"]
    pcm = _audio("jfk.wav")
    f = asr.frontend(pcm)
    assert list(f.shape) == st["input_features"]["shape"][1:]
    assert torch.allclose(f[:4, :8], torch.tensor(st["input_features"]["slice_[0,:4,:8]"]), atol=1e-5)
    assert float(f.sum()) == pytest.approx(st["input_features"]["sum"], rel=1e-5)
    m = asr.model
    with torch.inference_mode():
        out = m.encoder(f[None], torch.tensor([f.shape[0]]))
        enc = torch.cat(out.taps, dim=-1)
    assert list(enc.shape) == st["encoder_out"]["shape"]
    assert torch.allclose(enc[0, :4, :4], torch.tensor(st["encoder_out"]["first_4x4"]), atol=1e-4)
    emb = asr.audio_embeddings([pcm])[0]
    assert list(emb.shape) == st["projector_out"]["shape"][1:]
    assert torch.allclose(emb[:4, :4], torch.tensor(st["projector_out"]["first_4x4"]), atol=1e-4)
    assert float(emb.abs().sum()) == pytest.approx(st["projector_out"]["abs_sum"], rel=1e-4)


def test_greedy_ids_equal_transformers(case):
    v, ref, asr = case
    prompt = asr.prompts.build(None, None, _instruction(ref))
    opts = asr.options(max_new_tokens=ref["greedy_call"]["max_new_tokens"])
    stops = asr.stop_ids
    for name, a in ref["audios"].items():
        [[g]] = asr.decode([_audio(name)], prompt, opts)
        assert g.ids == _trim(a["greedy_ids"], stops), (v, name)


def test_batch_equals_single_and_transformers(case):
    v, ref, asr = case
    prompt = asr.prompts.build(None, None, _instruction(ref))
    opts = asr.options(max_new_tokens=ref["greedy_call"]["max_new_tokens"])
    names = ref["batch"]["audios"]
    found = asr.decode([_audio(n) for n in names], prompt, opts)
    for n, [g] in zip(names, found):
        assert g.ids == _trim(ref["audios"][n]["greedy_ids"], asr.stop_ids), (v, n)


def test_beam_ids_and_scores_equal_transformers(case):
    v, ref, asr = case
    prompt = asr.prompts.build(None, None, _instruction(ref))
    beam = ref["beam"]
    n = beam["call"]["num_beams"]
    opts = asr.options(max_new_tokens=beam["call"]["max_new_tokens"], beam_size=n)
    for name, r in beam["results"].items():
        [hyps] = asr.decode([_audio(name)], prompt, opts)
        assert [h.ids for h in hyps] == [_trim(s, asr.stop_ids) for s in r["sequences"]], (v, name)
        assert [h.score for h in hyps] == pytest.approx(r["sequences_scores"], abs=1e-4)


def test_transcribe_gives_the_reference_text(case):
    v, ref, asr = case
    t = asr.transcribe(str(AUDIO / "jfk.wav"), instruction=_instruction(ref),
                       max_new_tokens=ref["greedy_call"]["max_new_tokens"])
    assert t.text == ref["audios"]["jfk.wav"]["greedy_text"].strip()
    assert t.words == [] and len(t.segments) == (1 if t.text else 0)


def _copy(tmp_path: Path, v: str) -> Path:
    dst = tmp_path / v
    shutil.copytree(MODELS / v, dst)
    return dst


def test_a_checkpoint_missing_a_file_is_refused(tmp_path):
    d = _copy(tmp_path, "g40")
    (d / "tokenizer.json").unlink()
    with pytest.raises(ModelError, match="tokenizer.json"):
        transcribe.load_model(str(d))
    d = _copy(tmp_path / "b", "g33")
    (d / "adapter_model.safetensors").unlink()
    with pytest.raises(ModelError, match="adapter_model"):
        transcribe.load_model(str(d))


def test_an_unknown_chat_template_is_refused(tmp_path):
    d = _copy(tmp_path, "g40")
    for name in ("chat_template.jinja", "chat_template.json"):
        if (d / name).exists():
            (d / name).unlink()
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    cfg["chat_template"] = "{% for m in messages %}<<{{ m['content'] }}>>{% endfor %}"
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelError, match="chat template"):
        transcribe.load_model(str(d))


def test_a_config_setting_not_implemented_is_refused(tmp_path):
    d = _copy(tmp_path, "g40")
    cfg = json.loads((d / "config.json").read_text())
    cfg["projector_config"]["use_qformer_text_input"] = True
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelError, match="use_qformer_text_input"):
        transcribe.load_model(str(d))


def test_the_lora_adapter_is_merged_and_matters(tmp_path):
    ref = json.loads((REFS / "g33.json").read_text())
    want = ref["no_adapter"]["results"]["jfk.wav"]["greedy_ids"]
    d = _copy(tmp_path, "g33")
    cfg = json.loads((d / "config.json").read_text())
    cfg["has_lora_adapter"] = False  # the base weights alone: transformers with its adapter disabled
    (d / "config.json").write_text(json.dumps(cfg))
    bare = transcribe.load_model(str(d))
    prompt = bare.prompts.build(None, None, _instruction(ref))
    [[g]] = bare.decode([_audio("jfk.wav")], prompt, bare.options(max_new_tokens=ref["greedy_call"]["max_new_tokens"]))
    assert g.ids == _trim(want, bare.stop_ids)
    assert g.ids != _trim(ref["audios"]["jfk.wav"]["greedy_ids"], bare.stop_ids)


def test_translation_prompt_and_ids():
    ref = json.loads((REFS / "g33.json").read_text())["translate_jfk"]
    asr = transcribe.load_model(str(MODELS / "g33"))
    prompt = asr.prompts.build("translate", "fr", None)
    assert prompt.text == ref["prompt_text"]
    [[g]] = asr.decode([_audio("jfk.wav")], prompt, asr.options(task="translate", target_language="fr",
                                                                 max_new_tokens=60))
    assert g.ids == _trim(ref["greedy_ids"], asr.stop_ids)


@pytest.mark.parametrize("dtype", ["bfloat16", "int8"])
def test_bf16_and_int8_follow_float32(dtype):
    """bf16 rounds every product and int8 every weight and activation: their ids may part from float32's, so
    the check is the text: on jfk, the tiny model's words agree with float32's but for at most two."""
    ref = json.loads((REFS / "g40.json").read_text())["audios"]["jfk.wav"]["greedy_text"].split()
    asr = transcribe.load_model(str(MODELS / "g40"), dtype=dtype)
    got = asr.transcribe(str(AUDIO / "jfk.wav"), max_new_tokens=60).text.split()
    import difflib

    same = sum(b.size for b in difflib.SequenceMatcher(a=ref, b=got).get_matching_blocks())
    assert same >= len(ref) - 2 and abs(len(got) - len(ref)) <= 2, got


def test_options_of_other_families_and_bad_values_are_refused():
    from transcribe.errors import OptionsNotTaken, OptionValueError

    asr = transcribe.load_model(str(MODELS / "g40"))
    with pytest.raises(OptionsNotTaken):
        asr.options(language="en")
    with pytest.raises(OptionValueError, match="target_language"):
        asr.options(task="translate")
    with pytest.raises(OptionValueError, match="cannot time words"):
        asr.options(word_timestamps=True)
    with pytest.raises(OptionValueError, match="nbest"):
        asr.options(nbest=3, beam_size=2)


def test_nbest_comes_back_ranked():
    asr = transcribe.load_model(str(MODELS / "g40"))
    t = asr.transcribe(str(AUDIO / "jfk.wav"), beam_size=3, nbest=3, max_new_tokens=60)
    hyps = t.nbest.hypotheses
    assert len(hyps) == 3 and hyps[0].text == t.text and t.nbest.beam == "transformers"
    assert hyps[0].score >= hyps[1].score >= hyps[2].score


# ---------------------------------------------------------------------------------------------- command

def _cli(model: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "transcribe", str(AUDIO / "jfk.wav"), "--model", str(model), *args],
                          capture_output=True, text=True, cwd=str(HERE.parent), timeout=300)


def test_the_command_prints_the_reference_text_in_the_shared_schema():
    r = _cli(MODELS / "g40", "--format", "json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    doc = json.loads((REFS / "g40.json").read_text())
    ref = doc["audios"]["jfk.wav"]
    assert out["text"] == ref["greedy_text"].strip()
    # the reference's greedy output ends with EOS within its 60 tokens, so the command's default bound gives the same
    assert [t["id"] for t in out["tokens"]] == _trim(ref["greedy_ids"], [doc["tokenizer"]["eos_token_id"]])
    assert set(out) >= {"text", "language", "duration", "model", "segments", "words", "tokens", "nbest", "speakers"}
    assert out["duration"] == pytest.approx(11.0) and out["segments"][0]["end"] == pytest.approx(11.0)


@pytest.mark.parametrize("args,words", [
    (["--language", "en"], "g40 is a Granite Speech model and does not take --language"),
    (["--task", "translate"], "target_language"),
    (["--word-timestamps"], "cannot time words"),
])
def test_the_command_refuses_bad_options_in_one_line(args, words):
    r = _cli(MODELS / "g40", *args, "--format", "json")
    assert r.returncode == 2 and r.stdout == ""
    assert words in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_the_command_refuses_a_broken_checkpoint_in_one_line(tmp_path):
    d = _copy(tmp_path, "g40")
    (d / "model.safetensors").unlink()
    r = _cli(d)
    assert r.returncode == 2 and "model.safetensors" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    d = _copy(tmp_path / "t", "g40")
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    cfg["chat_template"] = "{{ messages }}"
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    for name in ("chat_template.jinja", "chat_template.json"):
        if (d / name).exists():
            (d / name).unlink()
    r = _cli(d)
    assert r.returncode == 2 and "chat template" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_greedy_tokens_carry_transformers_log_probabilities():
    ref = json.loads((REFS / "g40.json").read_text())
    asr = transcribe.load_model(str(MODELS / "g40"))
    t = asr.transcribe(str(AUDIO / "jfk.wav"), max_new_tokens=60)
    want = ref["stages_jfk"]["greedy_teacher_forced_logprobs"][:len(t.tokens)]
    assert [tk.logprob for tk in t.tokens] == pytest.approx(want, abs=1e-4)


def test_text_keeps_the_spaces_bpe_gives_as_transformers_5_does():
    """tokenizer_config.json says clean_up_tokenization_spaces (the published Granite tokenizers do), which
    transformers 5.24 ignores for a BPE tokenizer (it warns so): "hello , world" stays as BPE spells it."""
    from transcribe.llm.tokenizer import LLMTokenizer

    tok = LLMTokenizer.load(MODELS / "g40")
    assert json.loads((MODELS / "g40" / "tokenizer_config.json").read_text())["clean_up_tokenization_spaces"]
    assert tok.decode(tok.encode("hello , world . it 's")) == "hello , world . it 's"
