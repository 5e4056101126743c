#!/usr/bin/env python
"""Write NeMo reference outputs for the parity tests of the `transcribe` package.

Run from the repository root with the Python of a NeMo virtual environment (see
tools/setup_nemo_venv.sh):

    .venv-nemo/bin/python tools/nemo_reference.py            # build missing test models, write all references
    .venv-nemo/bin/python tools/nemo_reference.py --rebuild  # retrain/re-save the models under tests/models/ too
    .venv-nemo/bin/python tools/nemo_reference.py --models tiny-tdt-fit,built-ctc-80mel-sub4

Outputs:
    tests/models/<name>.nemo             small models built here with NeMo (fixed seed, see BUILT_MODELS)
    tests/references/nemo/<stem>.json    one file per model; the format is described in
                                         tests/references/nemo/README.md

The NeMo import is the only heavy dependency; our own package is never imported here.
Everything runs on the CPU with one thread, so the numbers do not depend on the machine's
core count.
"""

from __future__ import annotations

import os

# One thread everywhere: reference runs must be deterministic and must not fight other
# processes on a shared machine.  Must happen before torch is imported.
os.environ["OMP_NUM_THREADS"] = "1"
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse
import hashlib
import json
import logging
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf
import torch
import yaml

torch.set_num_threads(1)
torch.set_flush_denormal(True)

REPO = Path(__file__).resolve().parents[1]
# Shared data lives next to the repository; always addressed as ../shared/... from the repo root.
SHARED_REL = "../shared"
TINY_DIR_REL = f"{SHARED_REL}/models/parakeet-tiny"
AUDIO_DIR_REL = f"{SHARED_REL}/audio"
BUILT_DIR_REL = "tests/models"
OUT_DIR_REL = "tests/references/nemo"

FORMAT_VERSION = 1
STRATEGIES = ("greedy", "greedy_batch")
MAX_SYMBOLS = 10
MATRIX_LIMIT = 20000  # encoder output stored in full when d_model * T' <= this

CONFIDENCE_METHODS = {
    "confidence_entropy": dict(name="entropy", entropy_type="tsallis", alpha=0.33, entropy_norm="exp"),
    "confidence_max_prob": dict(name="max_prob", entropy_type="tsallis", alpha=0.33, entropy_norm="exp"),
}

log = logging.getLogger("nemo_reference")


def rel(path: Path) -> str:
    """Path relative to the repository root, in the '../shared/...' spelling for shared data."""
    return os.path.relpath(Path(path).resolve(), REPO).replace(os.sep, "/")


def repo_path(relpath: str) -> Path:
    return (REPO / relpath).resolve()


# --------------------------------------------------------------------------------------
# number formatting: float32 values are written with the shortest decimal that reads back
# to the same float32 (numpy's repr of a float32); Python floats (e.g. timestamps in
# seconds, which NeMo computes in double precision) are written as Python's repr.
# --------------------------------------------------------------------------------------


def f32(x) -> float:
    return float(str(np.float32(x)))


def f32_list(a) -> list:
    a = np.asarray(a, dtype=np.float32)
    if a.ndim == 0:
        return f32(a)
    return [f32_list(v) if a.ndim > 1 else float(str(v)) for v in a]


def plain(obj):
    """Turn numpy / torch scalars inside NeMo's timestamp dicts into plain Python values."""
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    if isinstance(obj, torch.Tensor):
        return plain(obj.tolist())
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    return obj


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# --------------------------------------------------------------------------------------
# audio
# --------------------------------------------------------------------------------------


def pick_clips() -> list[dict]:
    """jfk, one LibriSpeech clip, and the three shortest dev clips (< 6 s) by manifest duration."""
    clips = [
        dict(name="jfk", path=f"{AUDIO_DIR_REL}/jfk.wav"),
        dict(name="ls_2086-149220-0033", path=f"{AUDIO_DIR_REL}/ls_2086-149220-0033.wav"),
    ]
    rows = [json.loads(l) for l in open(repo_path(f"{AUDIO_DIR_REL}/dev/manifest.jsonl")) if l.strip()]
    rows = sorted((r for r in rows if r["duration"] < 6.0), key=lambda r: (r["duration"], r["audio"]))
    for r in rows[:3]:
        clips.append(dict(name=Path(r["audio"]).stem, path=f"{AUDIO_DIR_REL}/dev/{r['audio']}"))
    return clips


def load_audio(relpath: str, sample_rate: int = 16000) -> np.ndarray:
    """float32 mono samples in [-1, 1) (int16 / 32768, as NeMo's soundfile-based loader reads them)."""
    data, sr = sf.read(str(repo_path(relpath)), dtype="float32", always_2d=True)
    data = data.mean(axis=1) if data.shape[1] > 1 else data[:, 0]
    if sr != sample_rate:  # not needed for the current clips (all 16 kHz mono)
        import librosa

        data = librosa.resample(data, orig_sr=sr, target_sr=sample_rate)
    return np.ascontiguousarray(data, dtype=np.float32)


# --------------------------------------------------------------------------------------
# NeMo imports (slow: ~10 s), done lazily
# --------------------------------------------------------------------------------------


def nemo_imports():
    global ASRModel, OmegaConf, open_dict, RNNTBPEDecodingConfig, CTCBPEDecodingConfig
    global ConfidenceConfig, ConfidenceMethodConfig, nemo_logging
    from nemo.utils import logging as nemo_logging  # noqa: F401

    nemo_logging.setLevel(logging.ERROR)
    from nemo.collections.asr.models import ASRModel  # noqa: F401
    from omegaconf import OmegaConf, open_dict  # noqa: F401
    from nemo.collections.asr.parts.submodules.rnnt_decoding import RNNTBPEDecodingConfig  # noqa: F401
    from nemo.collections.asr.parts.submodules.ctc_decoding import CTCBPEDecodingConfig  # noqa: F401
    from nemo.collections.asr.parts.utils.asr_confidence_utils import (  # noqa: F401
        ConfidenceConfig,
        ConfidenceMethodConfig,
    )


# --------------------------------------------------------------------------------------
# model building (tests/models/*.nemo)
# --------------------------------------------------------------------------------------

# The built models are fitted to these two clips (lower case, no punctuation); other clips give
# arbitrary but decisive output.
TRAIN_CLIPS = [
    dict(path=f"{AUDIO_DIR_REL}/jfk.wav",
         text="and so my fellow americans ask not what your country can do for you ask what you can do for your country"),
    dict(path=f"{AUDIO_DIR_REL}/ls_2086-149220-0033.wav",
         text="well i don't wish to see it any more observed phoebe turning away her eyes "
              "it is certainly very like the old portrait"),
]


def read_nemo_member(nemo_path: Path, suffix: str) -> bytes:
    with tarfile.open(nemo_path) as tf:
        for m in tf.getmembers():
            if m.name.endswith(suffix):
                return tf.extractfile(m).read()
    raise FileNotFoundError(f"{suffix} not in {nemo_path}")


def template_config() -> dict:
    """The tiny TDT model's model_config.yaml, vocabulary lists dropped (NeMo refills them)."""
    cfg = yaml.safe_load(read_nemo_member(repo_path(f"{TINY_DIR_REL}/tiny-tdt-fit.nemo"), "model_config.yaml"))
    cfg.pop("labels", None)
    cfg["joint"].pop("vocabulary", None)
    cfg.pop("nemo_version", None)
    return cfg


def tokenizer_dir(tmp: Path) -> Path:
    """The tiny models' SentencePiece tokenizer (128 pieces), unpacked under the names NeMo expects."""
    src = repo_path(f"{TINY_DIR_REL}/tiny-tdt-fit.nemo")
    d = tmp / "tokenizer"
    d.mkdir(parents=True, exist_ok=True)
    for suffix, name in (("_tokenizer.model", "tokenizer.model"), ("_vocab.txt", "vocab.txt"),
                         ("_tokenizer.vocab", "tokenizer.vocab")):
        (d / name).write_bytes(read_nemo_member(src, suffix))
    return d


def _preproc(cfg, features, normalize="per_feature", pad_to=0):
    cfg["preprocessor"].update(features=features, normalize=normalize, pad_to=pad_to, dither=0.0)
    cfg["encoder"]["feat_in"] = features


def cfg_tdt_80mel_lstm2_sub4(tok: Path) -> dict:
    """(a) TDT, 80 mels, 2-layer LSTM predictor, durations [0,1,2,4,8], dw_striding 4x."""
    cfg = template_config()
    cfg["tokenizer"] = {"dir": str(tok), "type": "bpe"}
    _preproc(cfg, 80)
    cfg["encoder"].update(subsampling="dw_striding", subsampling_factor=4, subsampling_conv_channels=32,
                          n_layers=2, d_model=64, n_heads=4, conv_kernel_size=9)
    durs = [0, 1, 2, 4, 8]
    cfg["model_defaults"].update(tdt_durations=durs, num_tdt_durations=len(durs))
    cfg["decoder"]["prednet"]["pred_rnn_layers"] = 2
    cfg["joint"]["num_extra_outputs"] = len(durs)
    cfg["decoding"]["durations"] = durs
    cfg["loss"]["tdt_kwargs"]["durations"] = durs
    cfg["target"] = "nemo.collections.asr.models.rnnt_bpe_models.EncDecRNNTBPEModel"
    return cfg


def _plain_rnnt(cfg):
    """Turn the TDT template into a plain RNN-T transducer."""
    for k in ("tdt_durations", "num_tdt_durations"):
        cfg["model_defaults"].pop(k, None)
    cfg["joint"].pop("num_extra_outputs", None)
    cfg["decoding"].pop("model_type", None)
    cfg["decoding"].pop("durations", None)
    cfg["loss"] = {"loss_name": "default", "warprnnt_numba_kwargs": {"fastemit_lambda": 0.0, "clamp": -1.0}}


def cfg_hybrid_rnnt_ctc(tok: Path) -> dict:
    """(b) hybrid RNN-T + CTC (EncDecHybridRNNTCTCBPEModel), plain RNN-T transducer.

    Also varies the encoder: 80 mels, d_model 48, 4 heads, conv kernel 5, no xscaling."""
    cfg = template_config()
    cfg["tokenizer"] = {"dir": str(tok), "type": "bpe"}
    _preproc(cfg, 80)
    cfg["encoder"].update(subsampling="dw_striding", subsampling_factor=8, subsampling_conv_channels=32,
                          n_layers=2, d_model=48, n_heads=4, conv_kernel_size=5, xscaling=False)
    cfg["model_defaults"]["enc_hidden"] = 48
    cfg["joint"]["jointnet"]["encoder_hidden"] = 48
    _plain_rnnt(cfg)
    cfg["aux_ctc"] = {
        "ctc_loss_weight": 0.3,
        "use_cer": False,
        "ctc_reduction": "mean_batch",
        "decoder": {"_target_": "nemo.collections.asr.modules.ConvASRDecoder", "feat_in": 48, "num_classes": 128},
        "decoding": {"strategy": "greedy_batch", "greedy": {}},
    }
    cfg["target"] = "nemo.collections.asr.models.hybrid_rnnt_ctc_bpe_models.EncDecHybridRNNTCTCBPEModel"
    return cfg


def cfg_ctc_80mel_sub4(tok: Path) -> dict:
    """(c) CTC, 80 mels, dw_striding 4x, normalize per_feature, 3 layers."""
    cfg = template_config()
    cfg["tokenizer"] = {"dir": str(tok), "type": "bpe"}
    _preproc(cfg, 80, normalize="per_feature")
    cfg["encoder"].update(subsampling="dw_striding", subsampling_factor=4, subsampling_conv_channels=32,
                          n_layers=3, d_model=64, n_heads=2)
    for k in ("model_defaults", "decoder", "joint", "loss"):
        cfg.pop(k)
    cfg["decoder"] = {"_target_": "nemo.collections.asr.modules.ConvASRDecoder", "feat_in": 64, "num_classes": 128}
    cfg["decoding"] = {"strategy": "greedy_batch", "greedy": {}}
    cfg["target"] = "nemo.collections.asr.models.ctc_bpe_models.EncDecCTCModelBPE"
    return cfg


def cfg_rnnt_padto16_nonorm(tok: Path) -> dict:
    """(d) plain RNN-T with `pad_to: 16` and `normalize: NA` (128 mels, dw_striding 8x)."""
    cfg = template_config()
    cfg["tokenizer"] = {"dir": str(tok), "type": "bpe"}
    _preproc(cfg, 128, normalize="NA", pad_to=16)
    _plain_rnnt(cfg)
    cfg["target"] = "nemo.collections.asr.models.rnnt_bpe_models.EncDecRNNTBPEModel"
    return cfg


# name -> (config builder, seed, loss kind, max training steps)
BUILT_MODELS = {
    "built-tdt-80mel-lstm2-sub4": (cfg_tdt_80mel_lstm2_sub4, 1001, "tdt", 800),
    "built-hybrid-rnnt-ctc": (cfg_hybrid_rnnt_ctc, 1002, "hybrid", 800),
    "built-ctc-80mel-sub4": (cfg_ctc_80mel_sub4, 1003, "ctc", 800),
    "built-rnnt-padto16-nonorm": (cfg_rnnt_padto16_nonorm, 1004, "rnnt", 800),
}


def tdt_loss(token_lp: torch.Tensor, dur_lp: torch.Tensor, targets: torch.Tensor, durations: list[int]) -> torch.Tensor:
    """Negative log-likelihood of one utterance under a TDT model (own implementation, CPU).

    token_lp: [T, U+1, V+1] log-probabilities of tokens (blank last); dur_lp: [T, U+1, D]
    log-probabilities of the durations; targets: [U].  From lattice node (t, u) a blank with
    duration d > 0 goes to (t+d, u); label targets[u] with duration d >= 0 goes to (t+d, u+1).
    The path must end with a blank that lands exactly on t = T with all U labels emitted.
    The duration-0 label chain inside one frame is a linear recurrence along u, solved with
    logcumsumexp, so only T Python steps are needed.
    """
    T, U1, _ = token_lp.shape
    U = U1 - 1
    neg = -1.0e4
    blank = token_lp[:, :, -1]  # [T, U+1]
    lab = token_lp[:, :U, :].gather(2, targets.view(1, U, 1).expand(T, U, 1)).squeeze(2)  # [T, U]
    has0 = 0 in durations
    i0 = durations.index(0) if has0 else None
    alphas: list[torch.Tensor] = []
    for t in range(T):
        terms = []
        if t == 0:
            terms.append(torch.tensor([0.0] + [neg] * U, dtype=token_lp.dtype))
        for di, d in enumerate(durations):
            if d == 0 or t - d < 0:
                continue
            a = alphas[t - d]
            terms.append(a + blank[t - d] + dur_lp[t - d, :, di])
            lab_term = a[:U] + lab[t - d] + dur_lp[t - d, :U, di]
            terms.append(torch.cat([torch.full((1,), neg, dtype=token_lp.dtype), lab_term]))
        base = torch.logsumexp(torch.stack(terms), dim=0) if len(terms) > 1 else terms[0]
        if has0 and U > 0:
            w = lab[t] + dur_lp[t, :U, i0]  # weight of the (t, u) -> (t, u+1) step
            S = torch.cat([torch.zeros(1, dtype=w.dtype), torch.cumsum(w, 0)])
            base = S + torch.logcumsumexp(base - S, dim=0)
        alphas.append(base)
    finals = [alphas[T - d][U] + blank[T - d, U] + dur_lp[T - d, U, di]
              for di, d in enumerate(durations) if d > 0 and T - d >= 0]
    return -torch.logsumexp(torch.stack(finals), dim=0)


def rnnt_loss(token_lp: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Negative log-likelihood of one utterance under a plain RNN-T model (own implementation).

    NeMo's CPU RNN-T loss (numba) takes seconds per step on a small CPU; this one is the same
    lattice (blank: (t, u) -> (t+1, u), label: (t, u) -> (t, u+1)), vectorised along u with
    logcumsumexp.  token_lp: [T, U+1, V+1] log-probabilities (blank last); targets: [U].
    """
    T, U1, _ = token_lp.shape
    U = U1 - 1
    blank = token_lp[:, :, -1]
    lab = token_lp[:, :U, :].gather(2, targets.view(1, U, 1).expand(T, U, 1)).squeeze(2)
    alpha = None
    for t in range(T):
        if t == 0:
            base = torch.cat([torch.zeros(1, dtype=token_lp.dtype), torch.full((U,), -1.0e4, dtype=token_lp.dtype)])
        else:
            base = alpha + blank[t - 1]
        if U > 0:
            S = torch.cat([torch.zeros(1, dtype=lab.dtype), torch.cumsum(lab[t], 0)])
            base = S + torch.logcumsumexp(base - S, dim=0)
        alpha = base
    return -(alpha[U] + blank[T - 1, U])


def quick_text(model, audio: np.ndarray, head: str | None = None) -> str:
    """Plain greedy transcription (no timestamps) for the training loop's progress checks."""
    model.eval()
    with torch.no_grad():
        x = torch.from_numpy(audio)[None]
        n = torch.tensor([audio.shape[0]])
        if not hasattr(model, "joint"):  # CTC model: forward() returns log-probs
            lp, lp_len, _ = model.forward(input_signal=x, input_signal_length=n)
        else:
            enc, enc_len = model.forward(input_signal=x, input_signal_length=n)
            if head != "ctc":
                return model.decoding.rnnt_decoder_predictions_tensor(enc, enc_len, return_hypotheses=False)[0].text
            lp, lp_len = model.ctc_decoder(encoder_output=enc), enc_len
        labels = lp[0, : int(lp_len[0])].argmax(-1).tolist()
        return model.tokenizer.ids_to_text(ctc_collapse(labels, lp.shape[-1] - 1))


def train_model(model, kind: str, data: list[tuple[np.ndarray, str]], max_steps: int, seed: int) -> dict:
    """Fit the model to a few clips (one padded batch) until greedy decoding reproduces every
    transcript, then keep going for 100 more steps so that the argmax decisions are clear."""
    ids = [model.tokenizer.text_to_ids(t) for _, t in data]
    y = torch.zeros(len(ids), max(map(len, ids)), dtype=torch.long)
    for i, seq in enumerate(ids):
        y[i, : len(seq)] = torch.tensor(seq)
    yl = torch.tensor([len(seq) for seq in ids])
    x = torch.zeros(len(data), max(a.shape[0] for a, _ in data))
    for i, (a, _) in enumerate(data):
        x[i, : a.shape[0]] = torch.from_numpy(a)
    n = torch.tensor([a.shape[0] for a, _ in data])
    # Batch norm is trained frozen (eval mode) with random, non-trivial running statistics:
    # training then computes exactly what inference computes, and the saved running_mean /
    # running_var are not the identity, so a re-implementation must really apply them.
    bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for bn in bns:
            bn.running_mean.copy_(0.3 * torch.randn(bn.running_mean.shape, generator=gen))
            bn.running_var.copy_(0.5 + 1.5 * torch.rand(bn.running_var.shape, generator=gen))
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=3e-3)
    heads = ["ctc"] if kind == "ctc" else (["rnnt", "ctc"] if kind == "hybrid" else [None])
    ok_since = None
    step = 0
    t0 = time.time()
    losses = []
    for step in range(1, max_steps + 1):
        model.train()
        for bn in bns:
            bn.eval()
        opt.zero_grad()
        if kind == "ctc":
            lp, enc_len, _ = model.forward(input_signal=x, input_signal_length=n)
            loss = model.loss(log_probs=lp, targets=y, input_lengths=enc_len, target_lengths=yl)
        else:
            enc, enc_len = model.forward(input_signal=x, input_signal_length=n)
            dec, _, _ = model.decoder(targets=y, target_length=yl)
            joint = model.joint(encoder_outputs=enc, decoder_outputs=dec)
            if kind == "tdt":
                durs = list(model.cfg.model_defaults.tdt_durations)
                D = len(durs)
                parts = []
                for b in range(len(ids)):
                    T, U = int(enc_len[b]), int(yl[b])
                    tok_lp = joint[b, :T, : U + 1, :-D].log_softmax(-1)
                    dur_lp = joint[b, :T, : U + 1, -D:].log_softmax(-1)
                    parts.append(tdt_loss(tok_lp, dur_lp, y[b, :U], durs) / U)
                loss = torch.stack(parts).mean()
            else:
                parts = []
                for b in range(len(ids)):
                    T, U = int(enc_len[b]), int(yl[b])
                    parts.append(rnnt_loss(joint[b, :T, : U + 1, :].log_softmax(-1), y[b, :U]) / U)
                loss = torch.stack(parts).mean()
                if kind == "hybrid":
                    ctc_lp = model.ctc_decoder(encoder_output=enc)
                    ctc = model.ctc_loss(log_probs=ctc_lp, targets=y, input_lengths=enc_len, target_lengths=yl)
                    w = model.ctc_loss_weight
                    loss = (1 - w) * loss + w * ctc
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        opt.step()
        losses.append(float(loss))
        if step % 25 == 0:
            texts = [quick_text(model, a, h) for a, _ in data for h in heads]
            want = [t for _, t in data for h in heads]
            ok = texts == want
            log.info("  step %d loss %.4f (%.0f s) ok=%s %s", step, float(loss), time.time() - t0, ok,
                     [t for t, w in zip(texts, want) if t != w])
            if ok and ok_since is None:
                ok_since = step
            elif not ok:
                ok_since = None
            if ok_since is not None and step >= ok_since + 100:
                break
    model.eval()
    return dict(steps=step, final_loss=losses[-1], fits_training_clips=ok_since is not None,
                seconds=round(time.time() - t0, 1))


def build_model(name: str, out_path: Path) -> dict:
    from nemo.collections.asr.models import (
        EncDecCTCModelBPE,
        EncDecHybridRNNTCTCBPEModel,
        EncDecRNNTBPEModel,
    )

    builder, seed, kind, max_steps = BUILT_MODELS[name]
    classes = {
        "nemo.collections.asr.models.rnnt_bpe_models.EncDecRNNTBPEModel": EncDecRNNTBPEModel,
        "nemo.collections.asr.models.ctc_bpe_models.EncDecCTCModelBPE": EncDecCTCModelBPE,
        "nemo.collections.asr.models.hybrid_rnnt_ctc_bpe_models.EncDecHybridRNNTCTCBPEModel":
            EncDecHybridRNNTCTCBPEModel,
    }
    with tempfile.TemporaryDirectory() as tmp:
        tok = tokenizer_dir(Path(tmp))
        cfg = OmegaConf.create(builder(tok))
        torch.manual_seed(seed)
        np.random.seed(seed)
        model = classes[cfg.target](cfg=cfg)
        model = model.cpu()
        data = [(load_audio(c["path"]), c["text"]) for c in TRAIN_CLIPS]
        log.info("training %s (%s, seed %d, %d parameters)", name, kind, seed,
                 sum(p.numel() for p in model.parameters()))
        info = train_model(model, kind, data, max_steps, seed)
        log.info("  %s", info)
        out_path.parent.mkdir(parents=True, exist_ok=True)
        model.save_to(str(out_path))
    info.update(seed=seed, kind=kind, trained_on=[c["path"] for c in TRAIN_CLIPS])
    return info


# --------------------------------------------------------------------------------------
# reference extraction
# --------------------------------------------------------------------------------------


def model_heads(model) -> list[str]:
    heads = []
    if hasattr(model, "joint"):
        durs = list(model.cfg.decoding.get("durations", []) or [])
        heads.append("tdt" if durs else "rnnt")
    if hasattr(model, "ctc_decoder") or not hasattr(model, "joint"):
        heads.append("ctc")
    return heads


def confidence_cfg(method: str | None):
    if method is None:
        return ConfidenceConfig()  # all preserve_* False: confidence off
    return ConfidenceConfig(
        preserve_frame_confidence=True,
        preserve_token_confidence=True,
        preserve_word_confidence=True,
        exclude_blank=True,
        aggregation="min",
        tdt_include_duration=False,
        method_cfg=ConfidenceMethodConfig(**CONFIDENCE_METHODS[method]),
    )


def decoding_cfg(model, head: str, strategy: str, method: str | None):
    """A complete decoding config, set explicitly before every call (NeMo mutates its own)."""
    if head == "ctc":
        cfg = OmegaConf.structured(CTCBPEDecodingConfig())
        with open_dict(cfg):
            cfg.strategy = strategy
            cfg.compute_timestamps = True
            cfg.ctc_timestamp_type = "all"
            cfg.preserve_alignments = True
            cfg.confidence_cfg = confidence_cfg(method)
        return cfg
    cfg = OmegaConf.structured(RNNTBPEDecodingConfig())
    with open_dict(cfg):
        cfg.strategy = strategy
        if head == "tdt":
            cfg.model_type = "tdt"
            cfg.durations = list(model.cfg.decoding.durations)
        else:
            cfg.model_type = "rnnt"
            cfg.durations = []
        cfg.greedy.max_symbols_per_step = MAX_SYMBOLS
        cfg.greedy.loop_labels = True
        cfg.greedy.use_cuda_graph_decoder = False
        cfg.compute_timestamps = True
        cfg.rnnt_timestamp_type = "all"
        cfg.preserve_alignments = True
        cfg.tdt_include_token_duration = head == "tdt"
        cfg.confidence_cfg = confidence_cfg(method)
    return cfg


def set_decoding(model, head: str, strategy: str, method: str | None):
    cfg = decoding_cfg(model, head, strategy, method)
    if hasattr(model, "ctc_decoder"):  # hybrid
        model.change_decoding_strategy(cfg, decoder_type="ctc" if head == "ctc" else "rnnt", verbose=False)
    else:
        model.change_decoding_strategy(cfg, verbose=False)


def run_transcribe(model, audios: list[np.ndarray]):
    out = model.transcribe(
        [torch.from_numpy(a) for a in audios],
        batch_size=len(audios),
        return_hypotheses=True,
        timestamps=True,
        verbose=False,
        num_workers=0,
    )
    if isinstance(out, tuple):
        out = out[0]
    return list(out)


def ctc_collapse(labels: list[int], blank: int) -> list[int]:
    out, prev = [], blank
    for p in labels:
        if p != blank and (p != prev or prev == blank):
            out.append(p)
        prev = p
    return out


def ctc_margin(h) -> float | None:
    """Smallest top-1 minus top-2 log-probability over the valid frames (CTC)."""
    al = h.alignments
    lp = al[0] if isinstance(al, tuple) else al
    if lp is None or lp.shape[0] == 0:
        return None
    top2 = lp.float().topk(2, dim=-1).values
    return f32((top2[:, 0] - top2[:, 1]).min())


@torch.no_grad()
def transducer_replay(model, head: str, enc: torch.Tensor, length: int) -> dict:
    """Re-run NeMo's per-utterance greedy transducer algorithm with the model's own decoder and
    joint, recording the top-1 minus top-2 margin of every token (incl. blank) decision and,
    for TDT, of every duration decision.  The path is compared with NeMo's output by the caller.

    enc: [d_model, T'] encoder output of one utterance.
    """
    blank = int(model.tokenizer.vocab_size)
    durs = list(model.cfg.decoding.durations) if head == "tdt" else None
    frames = enc.t().unsqueeze(1)  # [T', 1, D]

    def predict(label, state):
        y = None if label is None else torch.tensor([[label]], dtype=torch.long)
        g, state = model.decoder.predict(y, state, add_sos=False, batch_size=1)
        return g, state

    g, state = predict(None, None)
    ids, steps, durations, tok_m, dur_m = [], [], [], [], []
    t = 0
    while t < length:
        f = frames[t : t + 1]  # [1, 1, D]
        symbols = 0
        while symbols < MAX_SYMBOLS:
            out = model.joint.joint(f, g)[0, 0, 0].float()
            top = out[: blank + 1].topk(2)
            tok_m.append(float(top.values[0] - top.values[1]))
            k = int(top.indices[0])
            if durs is not None:
                dtop = out[blank + 1 :].topk(2)
                dur_m.append(float(dtop.values[0] - dtop.values[1]))
                skip = durs[int(dtop.indices[0])]
            else:
                skip = 1 if k == blank else 0
            if k != blank:
                ids.append(k)
                steps.append(t)
                durations.append(skip)
                g, state = predict(k, state)
            symbols += 1
            t += skip
            if skip != 0:
                break
        if symbols == MAX_SYMBOLS and (durs is not None or skip == 0):
            # NeMo: TDT always moves one frame on after max_symbols steps; RNN-T moves on
            # when the max_symbols-th step was a label.
            t += 1
    return {
        "ids": ids,
        "timestep": steps,
        "durations": durations if durs is not None else None,
        "min_logprob_margin": f32(min(tok_m)) if tok_m else None,
        "min_duration_margin": f32(min(dur_m)) if dur_m else None,
    }


def ts_entries(entries, key: str) -> list[dict]:
    out = []
    for e in entries or []:
        e = plain(e)
        text = e[key]
        if isinstance(text, list):  # transducers keep a one-element list of the decoded piece
            text = "".join(text)
        out.append({key: text, "start_offset": e["start_offset"], "end_offset": e["end_offset"],
                    "start": e["start"], "end": e["end"]})
    return out


def hyp_record(model, head: str, h) -> dict:
    ts = h.timestamp if isinstance(h.timestamp, dict) else {"timestep": h.timestamp}
    rec = {"text": h.text}
    if head == "ctc":
        al = h.alignments
        labels = al[1].tolist() if isinstance(al, tuple) else None
        blank = model.tokenizer.vocab_size  # blank = last index
        rec["ids"] = ctc_collapse(labels, blank) if labels is not None else None
        rec["frame_labels"] = labels
        rec["durations"] = None
    else:
        ys = h.y_sequence
        rec["ids"] = [int(v) for v in (ys.tolist() if isinstance(ys, torch.Tensor) else ys)]
        rec["durations"] = [int(v) for v in plain(h.token_duration)] if head == "tdt" else None
    rec["timestep"] = [int(v) for v in plain(ts.get("timestep", []))]
    rec["score"] = float(h.score) if h.score is not None else None
    rec["min_logprob_margin"] = ctc_margin(h) if head == "ctc" else None
    rec["min_duration_margin"] = None
    rec["timestamps"] = {
        "char": ts_entries(ts.get("char"), "char"),
        "word": ts_entries(ts.get("word"), "word"),
        "segment": ts_entries(ts.get("segment"), "segment"),
    }
    return rec


def confidence_of(h) -> dict:
    return {
        "token": f32_list(h.token_confidence) if h.token_confidence is not None else None,
        "word": f32_list(h.word_confidence) if h.word_confidence is not None else None,
    }


def decode_all(model, head: str, strategy: str, audios: list[np.ndarray], encs: list) -> list[dict]:
    """One transcribe() call per confidence method on the given batch; merged per-clip records.

    encs: per clip (encoder output [d_model, T'], length) for the transducer margin replay."""
    records = None
    for method in CONFIDENCE_METHODS:
        set_decoding(model, head, strategy, method)
        error = None
        try:
            hyps = run_transcribe(model, audios)
        except Exception as e:  # NeMo 3.0.0: TDT `greedy` + confidence fails, see README
            error = f"{type(e).__name__}: {e}"
            log.warning("  %s/%s/%s failed: %s", head, strategy, method, error)
            set_decoding(model, head, strategy, None)
            hyps = run_transcribe(model, audios)
        if records is None:
            records = [hyp_record(model, head, h) for h in hyps]
            for r in records:
                r["confidence_entropy"] = None
                r["confidence_max_prob"] = None
                r["confidence_errors"] = {}
        for r, h in zip(records, hyps):
            other = hyp_record(model, head, h)
            if (other["text"], other["ids"], other["timestep"]) != (r["text"], r["ids"], r["timestep"]):
                raise RuntimeError(f"{head}/{strategy}: decoding differs between confidence methods")
            if error is None:
                r[method] = confidence_of(h)
            else:
                r["confidence_errors"][method] = error
    for r in records:
        if not r["confidence_errors"]:
            r["confidence_errors"] = None
    if head != "ctc":
        for r, (enc, length) in zip(records, encs):
            rep = transducer_replay(model, head, enc, length)
            if (rep["ids"], rep["timestep"], rep["durations"]) == (r["ids"], r["timestep"], r["durations"]):
                r["min_logprob_margin"] = rep["min_logprob_margin"]
                r["min_duration_margin"] = rep["min_duration_margin"]
            else:
                log.warning("  %s/%s: margin replay does not follow NeMo's path; margins left null", head, strategy)
    return records


def mel_record(mel: torch.Tensor, length: int) -> dict:
    m = mel[0].double()  # [n_mels, T]
    T = m.shape[1]
    valid = m[:, :length]
    idx = [0, 1, T // 2, length - 1]
    return {
        "shape": [int(m.shape[0]), int(T)],
        "length": int(length),
        "mean": f32(valid.mean()),
        "std": f32(valid.std(unbiased=False)),
        "channel_mean": f32_list(valid.mean(dim=1).numpy()),
        "columns": {"index": idx, "values": [f32_list(m[:, i].numpy()) for i in idx]},
    }


def encoder_record(enc: torch.Tensor, length: int) -> dict:
    e = enc[0].double()  # [d_model, T']
    D, T = e.shape
    valid = e[:, :length]
    rec = {
        "shape": [int(D), int(T)],
        "length": int(length),
        "mean": f32(valid.mean()),
        "std": f32(valid.std(unbiased=False)),
    }
    if D * T <= MATRIX_LIMIT:
        rec["matrix"] = f32_list(e.t().numpy())  # [T'][d_model]
        rec["columns"] = None
    else:
        idx = [0, T // 2, length - 1]
        rec["matrix"] = None
        rec["columns"] = {"index": idx, "values": [f32_list(e[:, i].numpy()) for i in idx]}
    return rec


@torch.no_grad()
def features_and_encoder(model, audio: np.ndarray) -> tuple[dict, dict, tuple]:
    # NeMo's transcribe() ends with encoder/decoder.unfreeze(partial=True), which puts them back
    # in training mode; a direct call would then use (and update) batch-norm batch statistics.
    model.eval()
    x = torch.from_numpy(audio)[None]
    n = torch.tensor([audio.shape[0]])
    mel, mel_len = model.preprocessor(input_signal=x, length=n)
    enc, enc_len = model.encoder(audio_signal=mel, length=mel_len)
    return mel_record(mel, int(mel_len[0])), encoder_record(enc, int(enc_len[0])), (enc[0], int(enc_len[0]))


@torch.no_grad()
def batch_encoder(model, audios: list[np.ndarray]) -> list:
    """Encoder outputs of the zero-padded batch, as transcribe() computes them (pad_to forced to 0)."""
    model.eval()
    x = torch.zeros(len(audios), max(a.shape[0] for a in audios))
    for i, a in enumerate(audios):
        x[i, : a.shape[0]] = torch.from_numpy(a)
    n = torch.tensor([a.shape[0] for a in audios])
    pad_to = model.preprocessor.featurizer.pad_to
    model.preprocessor.featurizer.pad_to = 0
    try:
        mel, mel_len = model.preprocessor(input_signal=x, length=n)
    finally:
        model.preprocessor.featurizer.pad_to = pad_to
    enc, enc_len = model.encoder(audio_signal=mel, length=mel_len)
    return [(enc[i], int(enc_len[i])) for i in range(len(audios))]


def model_info(model, name: str, path_rel: str) -> dict:
    pre = model.cfg.preprocessor
    enc = model.cfg.encoder
    sub = int(model.encoder.subsampling_factor)
    ws = float(pre.window_stride)
    info = {
        "name": name,
        "path": path_rel,
        "sha256": sha256(repo_path(path_rel)),
        "class": type(model).__name__,
        "heads": model_heads(model),
        "vocab_size": int(model.tokenizer.vocab_size),
        "blank_id": int(model.tokenizer.vocab_size),
        "durations": list(model.cfg.decoding.durations) if "tdt" in model_heads(model) else None,
        "sample_rate": int(model.cfg.sample_rate),
        "n_mels": int(pre.features),
        "normalize": str(pre.normalize),
        "pad_to": pre.get("pad_to", None),
        "d_model": int(enc.d_model),
        "n_layers": int(enc.n_layers),
        "subsampling": str(enc.subsampling),
        "subsampling_factor": sub,
        "window_stride": ws,
        "time_stride": ws * sub,
        "self_attention_model": str(enc.self_attention_model),
        "att_context_size": plain(OmegaConf.to_container(enc.att_context_size)),
    }
    return info


def settings_block() -> dict:
    return {
        "strategies": list(STRATEGIES),
        "max_symbols_per_step": MAX_SYMBOLS,
        "greedy_batch": "label-looping (loop_labels=True), no CUDA graphs",
        "compute_timestamps": True,
        "timestamp_type": "all",
        "preserve_alignments": True,
        "tdt_include_token_duration": True,
        "confidence": {
            "preserve_frame_confidence": True,
            "preserve_token_confidence": True,
            "preserve_word_confidence": True,
            "exclude_blank": True,
            "aggregation": "min",
            "tdt_include_duration": False,
            "methods": CONFIDENCE_METHODS,
        },
        "transcribe": "model.transcribe(list of float32 tensors, batch_size=len(list), return_hypotheses=True, "
                      "timestamps=True)",
    }


def reference_for(name: str, path_rel: str, clips: list[dict], audios: dict) -> dict:
    model = ASRModel.restore_from(str(repo_path(path_rel)), map_location="cpu")
    model.eval()
    model.preprocessor.featurizer.dither = 0.0
    heads = model_heads(model)
    t0 = time.time()
    doc = {
        "format_version": FORMAT_VERSION,
        "generator": {
            "tool": "tools/nemo_reference.py",
            "nemo_version": __import__("nemo").__version__,
            "torch_version": torch.__version__,
            "device": "cpu",
            "threads": 1,
        },
        "model": model_info(model, name, path_rel),
        "settings": settings_block(),
        "audio": [
            {"name": c["name"], "path": c["path"], "num_samples": int(audios[c["name"]].shape[0]),
             "sample_rate": 16000}
            for c in clips
        ],
        "per_audio": {},
        "batched": None,
        "local_attention": None,
    }
    for c in clips:
        a = audios[c["name"]]
        mel, enc, enc_t = features_and_encoder(model, a)
        dec = {}
        for head in heads:
            dec[head] = {s: decode_all(model, head, s, [a], [enc_t])[0] for s in STRATEGIES}
        doc["per_audio"][c["name"]] = {"mel": mel, "encoder": enc, "decoding": dec}
        log.info("  %s %s: %s", name, c["name"], {h: dec[h]["greedy_batch"]["text"][:50] for h in heads})
    names = [c["name"] for c in clips]
    batch = [audios[n] for n in names]
    bencs = batch_encoder(model, batch)
    bdec = {head: {s: decode_all(model, head, s, batch, bencs) for s in STRATEGIES} for head in heads}
    doc["batched"] = {"clips": names, "batch_size": len(names), "decoding": bdec}
    if name == "tiny-tdt-fit":
        model.change_attention_model("rel_pos_local_attn", [16, 16])
        a = audios["jfk"]
        _, enc, enc_t = features_and_encoder(model, a)
        doc["local_attention"] = {
            "self_attention_model": "rel_pos_local_attn",
            "att_context_size": [16, 16],
            "audio": "jfk",
            "encoder": enc,
            "decoding": {"tdt": {s: decode_all(model, "tdt", s, [a], [enc_t])[0] for s in STRATEGIES}},
        }
    log.info("  %s done in %.1f s", name, time.time() - t0)
    return doc


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", help="comma-separated model stems (default: all)")
    ap.add_argument("--rebuild", action="store_true", help="retrain and re-save the models under tests/models/")
    ap.add_argument("--no-build", action="store_true", help="never build models; skip missing ones")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    if not (REPO / SHARED_REL).exists():
        log.error("%s not found (expected next to the repository)", (REPO / SHARED_REL))
        return 2
    nemo_imports()

    models: dict[str, str] = {}
    for p in sorted(repo_path(TINY_DIR_REL).glob("*.nemo")):
        models[p.stem] = f"{TINY_DIR_REL}/{p.name}"
    for name in BUILT_MODELS:
        models[name] = f"{BUILT_DIR_REL}/{name}.nemo"
    wanted = args.models.split(",") if args.models else list(models)
    unknown = [w for w in wanted if w not in models]
    if unknown:
        log.error("unknown models: %s (known: %s)", unknown, list(models))
        return 2

    build_log_path = repo_path(f"{BUILT_DIR_REL}/BUILD_LOG.json")
    build_log = json.loads(build_log_path.read_text()) if build_log_path.exists() else {}
    for name in wanted:
        if name in BUILT_MODELS:
            p = repo_path(models[name])
            if args.rebuild or (not p.exists() and not args.no_build):
                torch.set_num_threads(1)
                info = build_model(name, p)
                info["sha256"] = sha256(p)
                info["nemo_version"] = __import__("nemo").__version__
                info["torch_version"] = torch.__version__
                build_log[name] = info
                build_log_path.write_text(json.dumps(build_log, indent=1, sort_keys=True) + "\n")

    clips = pick_clips()
    audios = {c["name"]: load_audio(c["path"]) for c in clips}
    out_dir = repo_path(OUT_DIR_REL)
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in wanted:
        if not repo_path(models[name]).exists():
            log.warning("skipping %s: %s missing", name, models[name])
            continue
        log.info("reference for %s", name)
        doc = reference_for(name, models[name], clips, audios)
        text = json.dumps(doc, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        (out_dir / f"{name}.json").write_text(text + "\n", encoding="utf-8")
        log.info("  wrote %s (%.0f kB)", rel(out_dir / f"{name}.json"), len(text.encode()) / 1024)
    return 0


if __name__ == "__main__":
    sys.exit(main())
