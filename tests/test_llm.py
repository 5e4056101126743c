"""The generation layer (transcribe/llm/) against transformers 5.24's `generate` on tiny random LMs of each
supported layout (tests/references/llm/, made by tools/llm_reference.py): logits, greedy and beam token ids for
each request alone and for the three requests left-padded into one batch, beam scores.

Tolerances: the logits are float32 sums over 48-80 terms of values around 1 (weights drawn with std 0.3), run by
other kernels than transformers' (SDPA's GQA path vs its repeated heads, our fused rotation): they agree to about
1e-5 relative; 1e-4 absolute on logits up to ~30 leaves room for AVX2 vs AVX-512 vs AMX. Beam scores are sums of
up to 14 log-probabilities of that accuracy: 1e-4. Token ids are compared exactly: the wide weights keep every
step's best two logits far apart (checked below), so rounding cannot flip a choice.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from transcribe.errors import ModelError
from transcribe.llm.config import LMConfig
from transcribe.llm.generate import generate
from transcribe.llm.model import DecoderLM

REFS = Path(__file__).parent / "references" / "llm"
NAMES = ("granite", "qwen3", "qwen2", "llama", "mistral")


def _load(name: str):
    doc = json.loads((REFS / f"{name}.json").read_text())
    tensors = load_file(str(REFS / f"{name}.safetensors"))
    cfg = LMConfig.from_hf(doc["config"], name)
    lm_tensors = {k[len("model."):] if k.startswith("model.") else k: v for k, v in tensors.items()
                  if k.startswith("model.") or k == "lm_head.weight"}
    lm = DecoderLM.from_tensors(cfg, lm_tensors, name).eval()
    prompts = [tensors[f"prompt.{i}"] for i in range(3)]
    return doc, lm, prompts, tensors


def _trim(seq: list[int], stops: list[int]) -> tuple[list[int], bool]:
    for i, t in enumerate(seq):
        if t in stops:
            return seq[:i], True
    return seq, False


@pytest.fixture(scope="module", params=NAMES)
def case(request):
    return (request.param,) + _load(request.param)


def test_config_reads_each_layout(case):
    name, doc, lm, _, _ = case
    cfg = lm.cfg
    assert cfg.model_type == name
    assert cfg.num_kv_heads < cfg.num_heads  # grouped-query attention in every reference
    if name == "granite":
        assert (cfg.embedding_multiplier, cfg.scale, cfg.residual_multiplier, cfg.logits_scaling) == (4.0, 0.09, 0.5, 2.5)
    else:
        assert cfg.scale == cfg.head_dim ** -0.5
    assert cfg.qk_norm == (name == "qwen3")
    assert cfg.head_dim == (16 if name == "qwen3" else 12)
    assert (cfg.qkv_bias, cfg.o_bias, cfg.mlp_bias) == {"qwen2": (True, False, False), "llama": (True, True, True)}.get(
        name, (False, False, False))
    assert cfg.tie_word_embeddings == (name == "qwen3") and (lm.lm_head is None) == (name == "qwen3")


def test_logits_match_transformers(case):
    name, doc, lm, prompts, tensors = case
    cache = lm.new_cache(1, prompts[0].shape[0])
    with torch.inference_mode():
        ours = lm.logits(lm(prompts[0][None], cache))[0]
    ref = tensors["prompt0_logits"]
    assert torch.allclose(ours, ref, atol=1e-4, rtol=1e-5), float((ours - ref).abs().max())
    top2 = ref.topk(2, dim=-1).values
    assert float((top2[:, 0] - top2[:, 1]).min()) > 1e-3  # no near ties in these references


def test_greedy_single_and_batched(case):
    name, doc, lm, prompts, _ = case
    stops = doc["stop_ids"]
    for i, p in enumerate(prompts):
        [[g]] = generate(lm, [p], max_new_tokens=doc["max_new_tokens"], stop_ids=stops)
        want, stopped = _trim(doc["greedy_single"][str(i)], stops)
        assert (g.ids, g.stopped) == (want, stopped), (name, i)
    together = generate(lm, prompts, max_new_tokens=doc["max_new_tokens"], stop_ids=stops)
    for i, [g] in enumerate(together):
        want, stopped = _trim(doc["greedy_batch"][i], stops)
        assert (g.ids, g.stopped) == (want, stopped), (name, i)
        assert want == _trim(doc["greedy_single"][str(i)], stops)[0]  # transformers' batch = its single too


def test_beam_ids_and_scores(case):
    name, doc, lm, prompts, _ = case
    stops = doc["stop_ids"]
    for run in doc["beam"]:
        got = generate(lm, [prompts[i] for i in run["requests"]], max_new_tokens=doc["max_new_tokens"],
                       stop_ids=stops, num_beams=run["num_beams"], length_penalty=run["length_penalty"],
                       early_stopping=run["early_stopping"])
        for hyps, seqs, scores in zip(got, run["sequences"], run["scores"]):
            assert [h.ids for h in hyps] == [_trim(s, stops)[0] for s in seqs], (name, run["num_beams"],
                                                                                  run["early_stopping"])
            assert [h.score for h in hyps] == pytest.approx(scores, abs=1e-4)


def test_tokens_are_heard_as_generated(case):
    name, doc, lm, prompts, _ = case
    heard: list[tuple[int, int]] = []
    out = generate(lm, prompts, max_new_tokens=doc["max_new_tokens"], stop_ids=doc["stop_ids"],
                   on_token=lambda r, t: heard.append((r, t)))
    for r, [g] in enumerate(out):
        assert [t for rr, t in heard if rr == r] == g.ids


def test_bf16_runs_close_to_float32():
    doc, lm, prompts, _ = _load("qwen3")
    lm16 = DecoderLM.from_tensors(lm.cfg, {k: v for k, v in lm.state_dict().items()}, "qwen3", torch.bfloat16)
    assert lm16.embed_tokens.weight.dtype == torch.bfloat16
    [[g]] = generate(lm16, [prompts[0].to(torch.bfloat16)], max_new_tokens=4, stop_ids=doc["stop_ids"])
    assert len(g.ids) <= 4  # runs end to end in bf16 (its ids may differ from float32's: bf16 rounds)


def test_weight_only_int8_rounds_each_weight_by_at_most_half_a_step_and_rows_stay_independent():
    from transcribe.quant import W8_ROWS, W8Linear

    g = torch.Generator().manual_seed(0)
    w = torch.randn(48, 160, generator=g) * torch.linspace(0.1, 3.0, 48)[:, None]
    layer = W8Linear(w, torch.randn(48, generator=g))
    step = layer.weight_scale.to(torch.float32)[:, None]
    # q * scale is the weight to half a step (the scale is the bfloat16 one the product uses)
    assert bool(((layer.dequantized(torch.float32) - w).abs() <= step / 2 + 1e-7).all())
    x = torch.randn(W8_ROWS + 4, 160, generator=g).to(torch.bfloat16)
    exact = x.float() @ layer.dequantized(torch.float32).t() + layer.bias
    # a product of bfloat16 inputs in float32, rounded once to bfloat16 (2^-8 of the sum of |terms|), and
    # for more than W8_ROWS rows also of the weight rounded to bfloat16 (2^-8 of each term)
    bound = 2.0 ** -7 * (x.float().abs() @ layer.dequantized(torch.float32).abs().t() + layer.bias.abs())
    few = layer(x[:W8_ROWS])
    many = layer(x)
    assert few.dtype == many.dtype == torch.bfloat16
    assert bool(((few.float() - exact[:W8_ROWS]).abs() <= bound[:W8_ROWS]).all())
    assert bool(((many.float() - exact).abs() <= bound).all())
    # up to W8_ROWS rows, each row is multiplied on its own: alone it gets what it gets in company
    alone = torch.cat([layer(x[i:i + 1]) for i in range(W8_ROWS)])
    assert torch.equal(alone, few)


@pytest.mark.parametrize("name", ["qwen3", "granite"])  # a tied head and a separate one
def test_int8_lm_follows_float32_in_each_compute_dtype(name):
    from transcribe.quant import Int8Linear, W8Linear

    doc, lm, prompts, tensors = _load(name)

    def logits(model):
        with torch.inference_mode():
            return model.logits(model(prompts[0][None].to(model.dtype), model.new_cache(1, prompts[0].shape[0])))[0]

    ref = logits(lm)
    bf16 = DecoderLM.from_tensors(lm.cfg, dict(lm.state_dict()), name, torch.bfloat16).eval()
    bf16_error = float((logits(bf16).float() - ref).abs().max())
    for compute, kind in ((torch.float32, Int8Linear), (torch.bfloat16, W8Linear)):
        q = DecoderLM.from_tensors(lm.cfg, dict(lm.state_dict()), name, None).eval()
        assert q.quantize_int8(compute) == 7 * lm.cfg.num_layers + 1
        head = q.head_int8 if q.lm_head is None else q.lm_head
        assert isinstance(head, kind) and isinstance(q.layers[0].mlp.down_proj, kind)
        # the norms compute in `compute`; the embedding keeps its dtype as loaded (float32 here), rows cast
        assert q.dtype == q.norm.weight.dtype == compute and q.inv_freq.dtype == torch.float32
        assert q.embed_tokens.weight.dtype == torch.float32 and q.embed(torch.tensor([[1]])).dtype == compute
        # rounding each weight to 1/254 of its row's range moves the logits as much as bfloat16's rounding to 2^-9
        # of each weight, give or take: measured 1.5-2.4x on these LMs (int8 activations add their own rounding)
        error = float((logits(q).float() - ref).abs().max())
        assert error < 4 * bf16_error, (name, compute, error, bf16_error)
        [[g]] = generate(q, [prompts[0].to(compute)], max_new_tokens=4, stop_ids=doc["stop_ids"])
        assert len(g.ids) <= 4


@pytest.mark.parametrize("change, message", [
    ({"model_type": "gpt2"}, "not supported"),
    ({"hidden_act": "gelu"}, "hidden_act"),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "yarn"),
    ({"use_sliding_window": True}, "sliding"),
    ({"num_key_value_heads": 3}, "divide"),
    ({"some_new_switch": 1}, "some_new_switch"),
])
def test_settings_not_implemented_are_refused(change, message):
    doc = json.loads((REFS / "qwen3.json").read_text())
    with pytest.raises(ModelError, match=message):
        LMConfig.from_hf({**doc["config"], **change}, "cfg")


def test_missing_and_misshapen_tensors_are_named():
    doc, lm, _, _ = _load("granite")
    state = dict(lm.state_dict())
    del state["layers.1.mlp.up_proj.weight"]
    with pytest.raises(ModelError, match="layers.1.mlp.up_proj.weight"):
        DecoderLM.from_tensors(lm.cfg, state, "x")
    state = dict(lm.state_dict())
    state["norm.weight"] = torch.ones(3)
    with pytest.raises(ModelError, match="norm.weight"):
        DecoderLM.from_tensors(lm.cfg, state, "x")
