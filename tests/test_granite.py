"""IBM Granite Speech NAR against IBM's own code (remote code, revision 99a4df9), on the tiny
random-weight model in ../shared/models/granite-nar-tiny: every stage's tensors, the first
hypothesis, the editor's template and the final ids, through the model, the Python API and the CLI.

Tolerances: the references were made in float32 on a CPU with one thread (README there). Features
within 1e-4 (a log10 of a power spectrum: another FFT moves them by a few 1e-5); every other tensor
within 1e-4 absolute, scaled by the tensor's magnitude where it exceeds 1 (logits): a different BLAS,
kernel or thread count moves these values by about 1e-6, and the differences seen here are <= 1.5e-5.
Token ids and templates are compared exactly.
"""
from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

import transcribe
from transcribe import cli
from transcribe.errors import ModelError, TranscribeError
from transcribe.granite.checkpoint import read_checkpoint
from transcribe.granite.config import parse_config
from transcribe.granite.frontend import GraniteFrontEnd
from transcribe.granite.model import build

from .conftest import SHARED, hub_snapshot

TINY = SHARED / "models" / "granite-nar-tiny"
REFS = json.loads((TINY / "references.json").read_text())
CASES = ("A", "B", "C")
FEATURE_TOL = 1e-4
TOL = 1e-4


def close(a: torch.Tensor, b: torch.Tensor, tol: float = TOL) -> float:
    """Max-abs difference, asserted within tol scaled by the reference's magnitude above 1."""
    assert a.shape == b.shape, (a.shape, b.shape)
    diff = (a.float() - b.float()).abs().max().item()
    scale = max(1.0, b.abs().max().item())
    assert diff <= tol * scale, f"max-abs {diff:.3g} > {tol * scale:.3g}"
    return diff


@pytest.fixture(scope="module")
def model():
    ck = read_checkpoint(TINY)
    return build(parse_config(ck.config, ck.layout), ck.state_dict)


def wave(case: str) -> torch.Tensor:
    return load_file(TINY / f"wave_{case}.safetensors")["wave"]


def reference(case: str) -> dict:
    return load_file(TINY / f"ref_remote_{case}.safetensors")


def run(model, waves: list[torch.Tensor], keep: bool = True):
    fe = GraniteFrontEnd()
    feats = [fe(w) for w in waves]
    t = max(f.shape[0] for f in feats)
    x = torch.zeros(len(feats), t, 160)
    for i, f in enumerate(feats):
        x[i, : f.shape[0]] = f
    with torch.inference_mode():
        return feats, model(x, torch.tensor([f.shape[0] for f in feats]), keep=keep)


@pytest.mark.parametrize("case", CASES)
def test_every_stage_matches_ibm(model, case):
    ref, info = reference(case), REFS["cases"][case]
    feats, p = run(model, [wave(case)])
    s = p.stages
    close(feats[0], ref["input_features"][0], FEATURE_TOL)
    assert feats[0].shape[0] == info["frames_T"][0] == len(wave(case)) // 320
    close(s["enc.input_linear.out"], ref["enc.input_linear.out"])
    for i, block in enumerate(s["enc.blocks"], start=1):
        close(block, ref[f"enc.block{i}.out"])
    for key in ("enc.mid_logits", "enc.cat_out", "enc.pooled", "enc.bpe_logits", "proj.out", "lm.inputs_embeds",
                "lm.last_hidden_state"):
        close(s[key], ref[key])
    assert s["lm.position_ids"].tolist() == ref["lm.position_ids"].tolist()
    close(s["text_logits"][0], ref["text_logits"][0])
    assert p.first == info["initial_hypothesis_ids"]
    assert s["templates"] == info["inserted_template_ids"]
    assert p.ids == info["final_ids"]


def test_batch_equals_single(model):
    """A short input batched with a long one gets what it gets alone (IBM's code does not: its
    encoder reads the padding, and B's ids change in its own batch reference)."""
    waves = [wave(c) for c in CASES]
    _, together = run(model, waves)
    for j, case in enumerate(CASES):
        _, alone = run(model, [waves[j]])
        assert together.ids[j] == alone.ids[0] == REFS["cases"][case]["final_ids"][0]
        assert together.first[j] == alone.first[0]
        n = together.bpe_lengths[j]
        close(together.stages["enc.bpe_logits"][j, :n], alone.stages["enc.bpe_logits"][0, :n], 1e-5)
        close(together.bpe_lse[j, :n], alone.bpe_lse[0, :n], 1e-5)
        close(together.stages["text_logits"][j], alone.stages["text_logits"][0], 1e-5)


def test_ibm_batch_reference_rows_are_the_single_results(model):
    """The AB batch reference was made with unmasked padding: A's row (the longest, no padding)
    matches it; B's row matches B's single reference instead, not the batch's padded B."""
    batch = load_file(TINY / "wave_AB_batch.safetensors")
    ref_ab = reference("AB_batch")
    _, p = run(model, [batch["wave_A"], batch["wave_B"]])
    assert p.ids[0] == REFS["cases"]["AB_batch"]["final_ids"][0]
    close(p.stages["enc.bpe_logits"][0], ref_ab["enc.bpe_logits"][0])
    ref_b = reference("B")
    nb = p.bpe_lengths[1]
    close(p.stages["enc.bpe_logits"][1, :nb], ref_b["enc.bpe_logits"][0])
    assert p.ids[1] == REFS["cases"]["B"]["final_ids"][0] != REFS["cases"]["AB_batch"]["final_ids"][1]


def test_api_gives_the_reference_ids_and_text():
    m = transcribe.load_model(str(TINY))
    assert m.family == "granite"
    for case in CASES:
        t = m.transcribe(str(TINY / f"wave_{case}.wav"))
        assert [tok.id for tok in t.tokens] == REFS["cases"][case]["final_ids"][0]
        assert t.text == REFS["cases"][case]["final_text"][0].strip()
    both = m.transcribe([str(TINY / "wave_A.wav"), str(TINY / "wave_C.wav")], batch_size=2)
    assert [[tok.id for tok in t.tokens] for t in both] == [REFS["cases"]["A"]["final_ids"][0],
                                                           REFS["cases"]["C"]["final_ids"][0]]


@pytest.mark.parametrize("case", CASES)
def test_cli_json_tokens_are_the_reference_ids(case, capsys):
    code = cli.main([str(TINY / f"wave_{case}.wav"), "--model", str(TINY), "--format", "json"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert [t["id"] for t in doc["tokens"]] == REFS["cases"][case]["final_ids"][0]
    assert set(doc) == set(transcribe.Transcript("", 0.0).to_dict())  # the one schema of every family


def test_word_times_are_consistent(model):
    """Words and tokens on the tiny model's own outputs: monotonic, inside the audio, each word's
    span covering its tokens' spans, tokens on the 80 ms grid of the BPE-CTC frames."""
    m = transcribe.load_model(str(TINY))
    for case in CASES:
        t = m.transcribe(str(TINY / f"wave_{case}.wav"))
        assert t.words and t.segments
        prev = 0.0
        for tok in t.tokens:
            assert 0.0 <= tok.start < tok.end <= t.duration
            assert tok.start >= prev - 1e-9
            assert abs(tok.start / 0.08 - round(tok.start / 0.08)) < 1e-6
            assert tok.confidence is not None and 0.0 < tok.confidence <= 1.0
            prev = tok.end
        for w in t.words:
            assert w.start < w.end
        assert [w.start for w in t.words] == sorted(w.start for w in t.words)
        assert " ".join(w.word for w in t.words).split() == t.text.split()
        seg_words = [w for s in t.segments for w in s.words]
        assert seg_words == t.words


def test_words_cover_their_tokens():
    m = transcribe.load_model(str(TINY))
    t = m.transcribe(str(TINY / "wave_A.wav"))
    toks = iter(t.tokens)
    for w in t.words:
        covered = []
        while "".join(covered).strip() != w.word:
            tok = next(toks)
            if not tok.text.strip() and not covered:
                continue  # a lone space token between words belongs to neither
            covered.append(tok.text)
            assert w.start <= tok.start and tok.end <= w.end + 1e-9, (w, tok)


def _copy_model(tmp_path, rename=None, drop=(), config=None):
    d = tmp_path / "m"
    d.mkdir()
    shutil.copy(TINY / "tokenizer.json", d / "tokenizer.json")
    cfg = json.loads((TINY / "config.json").read_text())
    if config:
        config(cfg)
    (d / "config.json").write_text(json.dumps(cfg))
    sd = load_file(TINY / "model.safetensors")
    out = {}
    for k, v in sd.items():
        if any(k.startswith(p) for p in drop):
            continue
        out[rename(k) if rename else k] = v
    save_file(out, d / "model.safetensors")
    return d


def _native(k: str):
    import re
    if re.search(r"^projector\.(layer_norms\.\d+|out_norm|qformer\.layers\.\d+\.(attn_norm|mlp_norm))\.", k):
        return None
    for a, b in (("language_model.model.", "model.language_model."), ("encoder.out_bpe.", "model.out_bpe."),
                 ("encoder.", "model.encoder."), ("projector.layer_projector.", "model.projector.proj."),
                 ("projector.out_linear.", "model.projector.qformer.linear."),
                 ("projector.query", "model.projector.qformer.queries"),
                 ("projector.window_positions", "model.projector.qformer.pos_emb")):
        if k.startswith(a):
            return b + k[len(a):]
    return "model." + k.replace("cross_attention", "cross_attn")


@pytest.mark.parametrize("layout", ["hf", "ibm-old"])
def test_other_layouts_give_the_same_ids(tmp_path, layout):
    if layout == "hf":
        d = tmp_path / "m"
        d.mkdir()
        shutil.copy(TINY / "tokenizer.json", d / "tokenizer.json")
        cfg = json.loads((TINY / "config.json").read_text())
        enc = cfg["encoder_config"]
        enc["vocabulary_size"] = enc.pop("bpe_output_dim")
        enc["pooling_window"] = enc.pop("bpe_pooling_window")
        enc["cat_hidden_layers"] = cfg.pop("encoder_layer_indices")[:-1]
        prj = cfg["projector_config"]
        for a, b in (("num_heads", "num_attention_heads"), ("num_layers", "num_hidden_layers"),
                     ("block_size", "window_size"), ("layernorm_eps", "layer_norm_eps"), ("attn_bias", "attention_bias")):
            prj[b] = prj.pop(a)
        prj["intermediate_size"] = prj["hidden_size"] * prj.pop("mlp_ratio")
        (d / "config.json").write_text(json.dumps(cfg))
        sd = load_file(TINY / "model.safetensors")
        save_file({_native(k): v for k, v in sd.items() if _native(k) is not None}, d / "model.safetensors")
    else:
        def old(cfg):
            cfg["llm_config"] = cfg.pop("text_config")
        d = _copy_model(tmp_path, rename=lambda k: k.replace("language_model.model.", "llm.model."), config=old)
    m = transcribe.load_model(str(d))
    assert m.model.cfg.layout == layout
    t = m.transcribe(str(TINY / "wave_A.wav"))
    assert [tok.id for tok in t.tokens] == REFS["cases"]["A"]["final_ids"][0]


def test_older_head_blank_first_shifts_ids(tmp_path):
    """The older 100353-wide head: channel 0 is the blank, channel c is token c - 1. The same
    weights with the head's rows rotated so (blank 3 -> channel 0, token k -> channel k + 1) give
    the same first hypothesis and final ids."""
    def widen(cfg):
        cfg["encoder_config"]["bpe_output_dim"] = 101
        del cfg["blank_token_id"]
        del cfg["encoder_config"]["blank_token_id"]
    d = _copy_model(tmp_path, config=widen)
    sd = load_file(d / "model.safetensors")
    w, b = sd["encoder.out_bpe.weight"], sd["encoder.out_bpe.bias"]
    nw = torch.zeros(101, w.shape[1])
    nb = torch.full((101,), -1e4)
    nw[0], nb[0] = w[3], b[3]
    for k in range(100):
        if k != 3:
            nw[k + 1], nb[k + 1] = w[k], b[k]
    sd["encoder.out_bpe.weight"], sd["encoder.out_bpe.bias"] = nw, nb
    save_file(sd, d / "model.safetensors")
    m = transcribe.load_model(str(d))
    assert (m.model.cfg.bpe_blank_channel, m.model.cfg.bpe_id_offset, m.model.cfg.blank_token_id) == (0, 1, 3)
    t = m.transcribe(str(TINY / "wave_B.wav"))
    assert [tok.id for tok in t.tokens] == REFS["cases"]["B"]["final_ids"][0]


def test_wrong_layout_is_a_clear_error(tmp_path):
    d = _copy_model(tmp_path, rename=lambda k: "backbone." + k)
    with pytest.raises(ModelError, match="not in a Granite Speech NAR layout"):
        transcribe.load_model(str(d))


def test_missing_tensor_is_a_clear_error(tmp_path):
    d = _copy_model(tmp_path, drop=("encoder.out_mid.",))
    with pytest.raises(ModelError, match="missing 2 tensors"):
        transcribe.load_model(str(d))


def test_missing_tokenizer_is_a_clear_error(tmp_path):
    d = _copy_model(tmp_path)
    (d / "tokenizer.json").unlink()
    with pytest.raises(ModelError, match="no tokenizer.json"):
        transcribe.load_model(str(d))


def test_non_identity_projector_norm_is_refused(tmp_path):
    d = _copy_model(tmp_path)
    sd = load_file(d / "model.safetensors")
    sd["projector.out_norm.weight"] = sd["projector.out_norm.weight"] * 2
    save_file(sd, d / "model.safetensors")
    with pytest.raises(ModelError, match="not identity"):
        transcribe.load_model(str(d))


@pytest.mark.parametrize("edit, words", [
    (lambda c: c["text_config"].update(hidden_act="gelu"), "hidden_act"),
    (lambda c: c["text_config"].update(rope_parameters={"rope_type": "yarn", "rope_theta": 1e4}), "rope_type"),
    (lambda c: c["encoder_config"].update(new_trick=1), "new_trick"),
    (lambda c: c["encoder_config"].update(conv_kernel_size=14), "odd kernels"),
    (lambda c: c["text_config"].update(sliding_window=64), "sliding_window"),
    (lambda c: c.update(encoder_layer_indices=[1, 9]), "encoder_layer_indices"),
    (lambda c: c["encoder_config"].update(bpe_output_dim=50), "neither the same width"),
])
def test_unimplemented_config_is_a_model_error(tmp_path, edit, words):
    cfg = json.loads((TINY / "config.json").read_text())
    edit(cfg)
    with pytest.raises(ModelError, match=words):
        parse_config(cfg)


def test_audio_shorter_than_one_frame_is_a_clear_error(capsys):
    m = transcribe.load_model(str(TINY))
    with pytest.raises(TranscribeError, match="shorter than one Granite frame"):
        m.transcribe(torch.zeros(319).numpy())
    t = m.transcribe(torch.zeros(320).numpy())  # exactly one frame: runs
    assert t.duration == pytest.approx(0.02)


def test_options_of_other_families_are_refused():
    m = transcribe.load_model(str(TINY))
    with pytest.raises(TranscribeError, match="is a Granite Speech NAR model and does not take beam_size$"):
        m.transcribe(str(TINY / "wave_C.wav"), beam_size=4)
    with pytest.raises(TranscribeError, match="does not take nonsense"):
        m.transcribe(str(TINY / "wave_C.wav"), nonsense=1)
    with pytest.raises(TranscribeError, match="no streaming session"):
        m.stream()


def test_hub_alias_resolves_from_the_local_cache_offline(monkeypatch, tmp_path):
    """`granite-speech-4.1-2b-nar` stands for IBM's hub id; a snapshot in huggingface_hub's cache
    (here the tiny model's files) loads without a network."""
    snap = hub_snapshot(monkeypatch, tmp_path, "ibm-granite/granite-speech-4.1-2b-nar")
    for f in ("config.json", "model.safetensors", "tokenizer.json"):
        shutil.copy(TINY / f, snap / f)
    m = transcribe.load_model("granite-speech-4.1-2b-nar")
    assert m.name == "granite-speech-4.1-2b-nar"
    t = m.transcribe(str(TINY / "wave_C.wav"))
    assert [tok.id for tok in t.tokens] == REFS["cases"]["C"]["final_ids"][0]


def test_bfloat16_runs():
    """bfloat16 weights (the published checkpoint's dtype): the pass runs in bfloat16 with the front
    end in float32. Its ids are not compared with the float32 reference: one flipped CTC argmax
    changes the editor's input (README of the tiny model), and bf16 matmuls differ between CPUs."""
    m = transcribe.load_model(str(TINY), dtype="bfloat16")
    assert m.model.dtype == torch.bfloat16
    t = m.transcribe(str(TINY / "wave_A.wav"))
    assert t.tokens and all(0 <= tok.id < 100 for tok in t.tokens)
    assert [tok.start for tok in t.tokens] == sorted(tok.start for tok in t.tokens)


def test_scan_head_equals_the_whole_head(monkeypatch):
    """The vocabulary-wide heads are scanned a slice at a time (never held whole): the argmax (first
    on a tie) and the log-sum-exp equal the whole table's, whatever the slice."""
    from transcribe.granite import model as gm

    g = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(37, 16, generator=g), torch.randn(1000, 16, generator=g), torch.randn(1000, generator=g)
    w[777] = w[5]  # an exact tie between two slices: the first wins
    b[777] = b[5]
    full = torch.nn.functional.linear(x, w, b)
    for chunk in (1, 7, 128, 5000):
        monkeypatch.setattr(gm, "VOCAB_CHUNK", chunk)
        arg, lse = gm.scan_head(x, w, b, lse=True)
        assert arg.tolist() == full.argmax(dim=-1).tolist()
        torch.testing.assert_close(lse, torch.logsumexp(full, dim=-1), atol=1e-5, rtol=1e-6)
