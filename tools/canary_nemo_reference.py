#!/usr/bin/env python
"""NeMo reference outputs for Canary (EncDecMultiTaskModel, AED) beyond those shipped with canary-tiny.

Run from the repository root with the Python of the NeMo virtual environment (NeMo 3.0.0), each stage in its
own process (`all` runs them one after another in subprocesses):

    .venv-nemo/bin/python tools/canary_nemo_reference.py --stage build      # tiny-canary1.nemo (~14 min CPU)
    .venv-nemo/bin/python tools/canary_nemo_reference.py --stage refs       # JSON references (both models)
    .venv-nemo/bin/python tools/canary_nemo_reference.py --stage verify     # fresh process: regenerate + compare
    .venv-nemo/bin/python tools/canary_nemo_reference.py --stage longclip   # item 4 probe (prints, writes nothing)

Stages:
  build     tiny model in NeMo's OLDER `canary` prompt format (the canary-1b one): a CanaryTokenizer aggregate
            whose `spl_tokens` sub-tokenizer has canary-1b's special-token inventory and order, en/de/es/fr BPE
            sub-tokenizers trained on the dev transcripts; briefly trained on the dev clips (ASR PnC, ASR no-PnC,
            made-up "en->de"); saved with NeMo's save_to() as tests/models/canary/tiny-canary1.nemo
  refs      EncDecMultiTaskModel.restore_from() + eval(); NeMo's transcribe() per reference kind;
            writes tests/references/canary/tiny-canary1.json and canary-tiny-*.json (see the README there)
  verify    regenerate every reference in a fresh process and compare with the files on disk
  longclip  what NeMo does with canary-tiny on a clip longer than the encoder's positional table (5000 frames)

Inputs (read, never copied): <repo>/../shared/audio/ (jfk.wav, dev/ + manifest.jsonl) and
<repo>/../shared/models/canary-tiny/ (canary-tiny.nemo, and make_canary_tiny.py whose data helpers and
training loop are imported, not copied).

Everything runs on the CPU with one thread; the model is in eval mode and the preprocessor's dither is off
during transcribe(), so the references are deterministic.
"""
from __future__ import annotations

import os

os.environ["OMP_NUM_THREADS"] = "1"
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse
import copy
import importlib.util
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
AUDIO = SHARED / "audio"
DEV = AUDIO / "dev"
CANARY_TINY_DIR = SHARED / "models" / "canary-tiny"
CANARY_TINY = CANARY_TINY_DIR / "canary-tiny.nemo"
MODELS_OUT = REPO / "tests" / "models" / "canary"
REFS_OUT = REPO / "tests" / "references" / "canary"
V1_NAME = "tiny-canary1"
V1_NEMO = MODELS_OUT / f"{V1_NAME}.nemo"
STAGES_FILE = f"{V1_NAME}_stages.safetensors"

REF_CLIPS = [AUDIO / "jfk.wav", DEV / "ls_61-70968-0002.wav", DEV / "cv_18933160.wav", DEV / "fleurs_en_004.wav"]

# canary-1b's special-token inventory, in its order (NeMo 1.23's CanaryTokenizer: SPECIAL_TOKENS for the four
# languages, then 18 unused placeholders; built with vocab_size 32, so <unk> takes id 0 and one byte piece is
# left over).  The current NeMo builds canary2-style spl tokenizers differently (6 default tokens first), so
# the inventory is listed here and the SentencePiece model is made with NeMo's own create_spt_model.
V1_SPECIAL_TOKENS = (
    ["<pad>", "<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|de|>", "<|es|>", "<|fr|>",
     "<|transcribe|>", "<|translate|>", "<|nopnc|>", "<|pnc|>", "<|nospeech|>"]
    + [f"<|spltoken{i}|>" for i in range(18)]
)
V1_SPL_VOCAB = 32

# Shape: canary-1b-like (decoder width == encoder width, so NeMo uses Identity for encoder_decoder_proj),
# tiny, and deliberately different from canary-tiny (heads, conv channels, max_sequence_length).
V1 = dict(
    enc_layers=2, enc_d_model=64, enc_heads=8, enc_conv_channels=16, enc_ff=4, conv_kernel=9,
    dec_layers=2, dec_hidden=64, dec_heads=2, dec_inner=256, dec_max_seq=512,
    vocab={"en": 256, "de": 128, "es": 128, "fr": 128},
    seed=4321,
)


def load_helpers():
    """make_canary_tiny.py (shared folder): dev rows, PnC/"de" target texts, the PyTorch training loop."""
    spec = importlib.util.spec_from_file_location("make_canary_tiny", CANARY_TINY_DIR / "make_canary_tiny.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def versions():
    import lhotse
    import nemo
    import numpy
    import sentencepiece
    import torch

    return dict(nemo=nemo.__version__, torch=torch.__version__, lhotse=lhotse.__version__,
                numpy=numpy.__version__, sentencepiece=sentencepiece.__version__,
                python=sys.version.split()[0])


def rel(p):
    """Path relative to the repository root (shared-folder paths start with ../shared)."""
    return os.path.relpath(str(p), str(REPO))


# ----------------------------------------------------------------------------------------------------------------
# build (tiny-canary1)
# ----------------------------------------------------------------------------------------------------------------
def v1_cfg(tokdir):
    E, D = V1["enc_d_model"], V1["dec_hidden"]
    return {
        "sample_rate": 16000,
        "label_smoothing": 0.0,
        "use_loss_mask_for_prompt": False,
        "log_prediction": True,
        "prompt_format": "canary",
        "model_defaults": {"asr_enc_hidden": E, "lm_enc_hidden": D, "lm_dec_hidden": D},
        "tokenizer": {
            "dir": None,
            "type": "agg",
            "langs": {lang: {"dir": f"{tokdir}/{lang}", "type": "bpe"}
                      for lang in ["spl_tokens", "en", "de", "es", "fr"]},
            "custom_tokenizer": {"_target_": "nemo.collections.common.tokenizers.canary_tokenizer.CanaryTokenizer",
                                 "tokenizer": None},
        },
        "preprocessor": {
            "_target_": "nemo.collections.asr.modules.AudioToMelSpectrogramPreprocessor",
            "sample_rate": 16000, "normalize": "per_feature", "window_size": 0.025, "window_stride": 0.01,
            "window": "hann", "features": 128, "n_fft": 512, "log": True, "frame_splicing": 1,
            "dither": 1e-05, "pad_to": 0, "pad_value": 0.0,
        },
        "spec_augment": {
            "_target_": "nemo.collections.asr.modules.SpectrogramAugmentation",
            "freq_masks": 2, "time_masks": 10, "freq_width": 27, "time_width": 0.05,
        },
        "encoder": {
            "_target_": "nemo.collections.asr.modules.ConformerEncoder",
            "feat_in": 128, "feat_out": -1, "n_layers": V1["enc_layers"], "d_model": E,
            "subsampling": "dw_striding", "subsampling_factor": 8, "subsampling_conv_channels": V1["enc_conv_channels"],
            "causal_downsampling": False, "reduction": None, "reduction_position": None, "reduction_factor": 1,
            "ff_expansion_factor": V1["enc_ff"], "self_attention_model": "rel_pos", "n_heads": V1["enc_heads"],
            "att_context_size": [-1, -1], "xscaling": True, "untie_biases": True, "pos_emb_max_len": 5000,
            "conv_kernel_size": V1["conv_kernel"], "conv_norm_type": "batch_norm", "conv_context_size": None,
            "dropout": 0.1, "dropout_pre_encoder": 0.1, "dropout_emb": 0.0, "dropout_att": 0.1,
        },
        "transf_decoder": {
            "_target_": "nemo.collections.asr.modules.transformer.get_nemo_transformer",
            "model_name": None, "pretrained": False, "encoder": None, "pre_ln_final_layer_norm": True,
            "config_dict": {
                "max_sequence_length": V1["dec_max_seq"], "num_token_types": 0, "embedding_dropout": 0.1,
                "learn_positional_encodings": False, "hidden_size": D, "inner_size": V1["dec_inner"],
                "num_layers": V1["dec_layers"], "num_attention_heads": V1["dec_heads"], "ffn_dropout": 0.1,
                "attn_score_dropout": 0.1, "attn_layer_dropout": 0.1, "hidden_act": "relu", "pre_ln": True,
                "vocab_size": None,
            },
        },
        "head": {
            "_target_": "nemo.collections.asr.parts.submodules.token_classifier.TokenClassifier",
            "num_layers": 1, "activation": "relu", "log_softmax": True, "hidden_size": D, "num_classes": None,
            "dropout": 0.0, "use_transformer_init": True,
        },
        "decoding": {
            "strategy": "beam", "return_best_hypothesis": True,
            "beam": {"beam_size": 1, "len_pen": 0.0, "max_generation_delta": 50},
        },
        "loss": {"_target_": "nemo.collections.common.losses.smoothed_cross_entropy.SmoothedCrossEntropyLoss",
                 "label_smoothing": 0.0, "pad_id": None},
        "optim": {"name": "adamw", "lr": 3e-4, "betas": [0.9, 0.98], "weight_decay": 1e-3},
    }


def build_v1_tokenizers(H, tokdir, rows):
    from nemo.collections.common.tokenizers.sentencepiece_tokenizer import create_spt_model

    d = Path(tokdir) / "spl_tokens"
    d.mkdir(parents=True, exist_ok=True)
    (d / "train_text.txt").write_text("\n".join(V1_SPECIAL_TOKENS))
    create_spt_model(str(d / "train_text.txt"), vocab_size=V1_SPL_VOCAB, sample_size=-1, do_lower_case=False,
                     output_dir=str(d), user_defined_symbols=V1_SPECIAL_TOKENS)
    texts = {
        "en": [H.pnc_text(r) for r in rows] + [r["text_norm"] for r in rows],
        "de": [H.fake_de(r) for r in rows],
        "es": [r["text_norm"] for r in rows],
        "fr": [r["text_norm"] for r in rows],
    }
    for lang, lines in texts.items():
        d = Path(tokdir) / lang
        d.mkdir(parents=True, exist_ok=True)
        (d / "train_text.txt").write_text("\n".join(lines) + "\n")
        create_spt_model(str(d / "train_text.txt"), vocab_size=V1["vocab"][lang], sample_size=-1,
                         do_lower_case=False, tokenizer_type="bpe", output_dir=str(d))


def v1_examples(H, model, rows):
    """(clip index, ids, context length, task) per clip x task, built with NeMo's `canary` prompt function."""
    from lhotse import Recording, SupervisionSegment
    from nemo.collections.common.data import apply_prompt_format_fn

    ex = []
    for ci, r in enumerate(rows):
        rec = Recording.from_file(r["path"])
        tasks = [
            ("asr_pnc", dict(source_lang="en", target_lang="en", pnc="yes", taskname="asr"), H.pnc_text(r), "en"),
            ("asr_nopnc", dict(source_lang="en", target_lang="en", pnc="no", taskname="asr"), r["text_norm"], "en"),
            ("ast_de", dict(source_lang="en", target_lang="de", pnc="yes", taskname="ast"), H.fake_de(r), "de"),
        ]
        for name, custom, text, lang in tasks:
            cut = rec.to_cut()
            cut.supervisions = [SupervisionSegment(id=cut.id, recording_id=rec.id, start=0.0, duration=rec.duration,
                                                   text=text, language=lang)]
            cut.custom = dict(custom)
            out = apply_prompt_format_fn(cut, model.prompt)
            ids = out["input_ids"].tolist()
            ctx = len(out["context_ids"])
            assert ids[-1] == model.tokenizer.eos_id, ids
            assert ctx == 5, (ctx, ids)
            ex.append((ci, ids, ctx, name))
    return ex


def stage_build(args):
    import numpy as np
    import soundfile as sf
    import torch
    from omegaconf import OmegaConf

    torch.set_num_threads(1)
    random.seed(V1["seed"])
    np.random.seed(V1["seed"])
    torch.manual_seed(V1["seed"])
    from nemo.collections.asr.models import EncDecMultiTaskModel

    H = load_helpers()
    rows = H.load_dev_rows()
    work = Path(args.work or tempfile.mkdtemp(prefix="canary1_"))
    tokdir = work / "tokenizers"
    build_v1_tokenizers(H, tokdir, rows)
    model = EncDecMultiTaskModel(cfg=OmegaConf.create(v1_cfg(str(tokdir))))
    print("vocab", model.tokenizer.vocab_size, "params", sum(p.numel() for p in model.parameters()),
          "proj", type(model.encoder_decoder_proj).__name__, flush=True)
    model.eval()
    feats = []
    with torch.no_grad():
        for r in rows:
            x, sr = sf.read(r["path"], dtype="float32")
            sig = torch.from_numpy(x)[None]
            m, ml = model.preprocessor(input_signal=sig, length=torch.tensor([sig.shape[1]]))
            feats.append(m[0, :, : ml[0]].clone())
    examples = v1_examples(H, model, rows)
    print("examples", len(examples), flush=True)
    targs = argparse.Namespace(batch=8)
    info1 = H.train_loop(model, feats, examples, targs, seed=V1["seed"], steps=args.steps,
                         max_minutes=args.max_minutes, lr=2e-3, early_weight=1.0, early_tokens=0)
    info2 = H.train_loop(model, feats, examples, targs, seed=V1["seed"] + 1, steps=args.ft_steps,
                         max_minutes=args.ft_max_minutes, lr=1e-3, early_weight=5.0, early_tokens=3)
    MODELS_OUT.mkdir(parents=True, exist_ok=True)
    model.eval()
    from omegaconf import open_dict

    with open_dict(model.cfg):  # the scratch folder's path would otherwise be kept in model_config.yaml
        for lang in model.cfg.tokenizer.langs:
            model.cfg.tokenizer.langs[lang].dir = None
    model.save_to(str(V1_NEMO))
    info = dict(phase1=info1, phase2_first3_tokens_x5=info2, versions=versions())
    (MODELS_OUT / f"{V1_NAME}.train_info.json").write_text(json.dumps(info, indent=1) + "\n")
    print("saved", V1_NEMO, os.path.getsize(V1_NEMO), info1["final_loss_ema"], info2["final_loss_ema"], flush=True)


# ----------------------------------------------------------------------------------------------------------------
# references
# ----------------------------------------------------------------------------------------------------------------
def to_py(x):
    import torch

    if isinstance(x, torch.Tensor):
        return x.tolist()
    if isinstance(x, dict):
        return {k: to_py(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [to_py(v) for v in x]
    return x


class Runner:
    """One restored model; wraps NeMo internals only to OBSERVE (prompt ids, audio, greedy step logits)."""

    def __init__(self, nemo_path):
        import torch

        torch.set_num_threads(1)
        from nemo.collections.asr.models import EncDecMultiTaskModel

        self.model = EncDecMultiTaskModel.restore_from(str(nemo_path), map_location="cpu")
        self.model.eval()
        self.base_dec = copy.deepcopy(self.model.cfg.decoding)
        self.captured = {}
        orig = self.model._transcribe_forward

        def wrapped(batch, trcfg):
            out = orig(batch, trcfg)
            self.captured.setdefault("prompts", []).append(out["decoder_input_ids"].detach().cpu().clone())
            self.captured.setdefault("audio_lens", []).append(batch.audio_lens.clone())
            self.captured.setdefault("enc_frames", []).append(int(out["encoder_states"].shape[1]))
            return out

        self.model._transcribe_forward = wrapped

    def set_decoding(self, strategy, beam_size=1, return_best=True, **beam_extra):
        from omegaconf import OmegaConf, open_dict

        cfg = copy.deepcopy(self.base_dec)
        with open_dict(cfg):
            cfg.strategy = strategy
            cfg.beam.beam_size = beam_size
            cfg.beam.return_best_hypothesis = return_best
            for k, v in beam_extra.items():
                cfg.beam[k] = v
        self.model.change_decoding_strategy(cfg)
        dec = self.model.decoding.decoding
        gen = getattr(dec, "beam_search", None) or getattr(dec, "greedy_search", None)
        info = dict(generator=type(gen).__name__, max_seq_length=gen.max_seq_length, max_delta_length=gen.max_delta_len)
        if hasattr(gen, "len_pen"):
            info.update(beam_size=gen.beam_size, len_pen=gen.len_pen)
        self._hook_steps(gen)
        return OmegaConf.to_container(cfg), info

    def _hook_steps(self, gen):
        """Record the head output of every decoder step (greedy: raw logits, log-softmax off)."""
        if getattr(gen, "_ref_hooked", False):
            return
        orig = gen._one_step_forward
        runner = self

        def step(*a, **kw):
            out = orig(*a, **kw)
            runner.captured.setdefault("step_logits", []).append(out[0][:, -1].detach().cpu().clone())
            return out

        gen._one_step_forward = step
        gen._ref_hooked = True

    def transcribe(self, clips, **kw):
        self.captured.clear()
        return self.model.transcribe([str(c) for c in clips], batch_size=len(clips), return_hypotheses=True,
                                     verbose=False, **kw)

    def tok(self, ids):
        return self.model.tokenizer.ids_to_tokens(ids) if ids else []

    def hyp(self, h):
        y = [int(t) for t in to_py(h.y_sequence)]
        rec = dict(output_ids=y, output_tokens=self.tok(y), text=h.text,
                   score=float(h.score) if h.score is not None else None)
        if isinstance(h.timestamp, dict) and h.timestamp:
            rec["timestamp"] = to_py(h.timestamp)
        return rec

    def margins(self, n_steps_expected):
        """Top-2 margin of the raw logits at each greedy step (batch of one)."""
        import torch

        out = []
        for lg in self.captured.get("step_logits", []):
            top = torch.topk(lg[0].double(), 2)
            out.append(dict(top1=int(top.indices[0]), top2=int(top.indices[1]),
                            margin=float(top.values[0] - top.values[1])))
        assert len(out) == n_steps_expected, (len(out), n_steps_expected)
        return out

    def teacher_forced(self, clip, prompt_ids, out_ids, with_eos=True):
        import soundfile as sf
        import torch

        self.model.eval()  # transcribe() leaves encoder/transf_decoder in train mode (unfreeze())
        x, _ = sf.read(str(clip), dtype="float32")
        audio = torch.from_numpy(x)[None]
        eos = self.model.tokenizer.eos_id
        targets = list(out_ids) + ([eos] if with_eos else [])
        seq = list(prompt_ids) + targets
        inp = torch.tensor([seq[:-1]])
        with torch.no_grad():
            logp, _, _, _ = self.model(input_signal=audio, input_signal_length=torch.tensor([audio.shape[1]]),
                                       transcript=inp, transcript_length=torch.tensor([inp.shape[1]]))
        P = len(prompt_ids)
        return [float(logp[0, P - 1 + i, t]) for i, t in enumerate(targets)]


def len_penalty(prefix_len, alpha):
    return ((5.0 + prefix_len) / 6.0) ** alpha


def run_kind(R, kind, dec, kw, clips, greedy_extras=True):
    """One reference kind: one transcribe() call per clip (batch of one)."""
    import numpy as np

    eff, gen = R.set_decoding(**dec)
    per_clip = []
    for c in clips:
        hyps = R.transcribe([c], **kw)
        prompt = R.captured["prompts"][0][0].tolist()
        h0 = hyps[0]
        rec = dict(prompt_ids=prompt, prompt_tokens=R.tok(prompt))
        if isinstance(h0, list):
            rec["nbest"] = [R.hyp(h) for h in h0]
            alpha = gen.get("len_pen", 0.0)
            frames = R.captured["enc_frames"][0]
            limit = gen["max_seq_length"]
            if gen["max_delta_length"] >= 0:
                limit = min(limit, frames + gen["max_delta_length"])
            rec["encoder_frames"] = frames
            rec["max_total_length"] = limit
            for r in rec["nbest"]:
                # the beam makes its first token outside its loop: up to limit - P + 1 new tokens (greedy: limit - P)
                r["ended_with_eos"] = len(prompt) + len(r["output_ids"]) <= limit
                lp = R.teacher_forced(c, prompt, r["output_ids"], with_eos=r["ended_with_eos"])
                r["teacher_forced_sum_logprob"] = float(sum(lp))
                # NeMo's prefixes_len: 1 + tokens that are neither EOS nor pad, prompt included
                plen = 1 + len(prompt) + len(r["output_ids"])
                r["length_penalty_prefix_len"] = plen
                r["score_normalised"] = r["score"] / len_penalty(plen, alpha)
            rec["best_index"] = int(np.argmax([r["score_normalised"] for r in rec["nbest"]]))
        else:
            rec.update(R.hyp(h0))
            if dec["strategy"] == "greedy" and greedy_extras:
                n_out = len(rec["output_ids"])
                limit = gen["max_seq_length"]
                if gen["max_delta_length"] >= 0:
                    limit = min(limit, R.captured["enc_frames"][0] + gen["max_delta_length"])
                ended = n_out + len(prompt) < limit
                steps = R.margins(n_out + 1 if ended else n_out)
                rec["greedy_steps"] = steps
                rec["greedy_top2_logit_margins"] = [s["margin"] for s in steps]
                rec["greedy_min_top2_logit_margin"] = min(s["margin"] for s in steps)
                lp = R.teacher_forced(c, prompt, rec["output_ids"])
                rec["teacher_forced_logprobs"] = lp
                rec["teacher_forced_sum_logprob_incl_eos"] = float(sum(lp))
            rec["n_output_tokens"] = len(rec["output_ids"])
        rec["clip"] = c.name
        per_clip.append(rec)
    print(kind, [r.get("text", r.get("nbest", [{}])[0].get("text")) for r in per_clip], flush=True)
    return dict(decoding_cfg=eff, generator=gen, transcribe_kwargs={**kw, "batch_size": 1, "return_hypotheses": True},
                per_clip=per_clip)


def run_batch(R, kw):
    R.set_decoding("greedy")
    hyps = R.transcribe(REF_CLIPS, **kw)
    return dict(transcribe_kwargs={**kw, "batch_size": len(REF_CLIPS), "return_hypotheses": True},
                audio_lens=R.captured["audio_lens"][0].tolist(),
                per_clip=[dict(clip=c.name, prompt_ids=R.captured["prompts"][0][i].tolist(), **R.hyp(h))
                          for i, (c, h) in enumerate(zip(REF_CLIPS, hyps))])


V1_ASR_PNC = dict(source_lang="en", target_lang="en", taskname="asr", pnc="yes")
V1_KINDS = [
    ("greedy_asr_en_pnc", dict(strategy="greedy"), V1_ASR_PNC),
    ("greedy_asr_en_nopnc", dict(strategy="greedy"), dict(V1_ASR_PNC, pnc="no")),
    ("greedy_ast_en_de", dict(strategy="greedy"), dict(V1_ASR_PNC, target_lang="de", taskname="ast")),
    ("beam4_asr_en_pnc", dict(strategy="beam", beam_size=4, return_best=True), V1_ASR_PNC),
    ("beam4_nbest_asr_en_pnc", dict(strategy="beam", beam_size=4, return_best=False), V1_ASR_PNC),
    ("default_decoding_asr_en_pnc", None, V1_ASR_PNC),
]


def error_text(e):
    """The exception as text; NeMo prints a set of allowed values in hash order: sort it (deterministic)."""
    import re

    msg = str(e)
    m = re.search(r"allowed_values=\(([^)]*)\)", msg)
    if m:
        vals = sorted(v.strip().strip("'") for v in m.group(1).split(","))
        msg = msg[: m.start()] + "allowed_values=(sorted) " + repr(vals) + msg[m.end():]
    return f"{type(e).__name__}: {msg[:400]}"


def v1_prompt_probes(R):
    """How transcribe() kwargs reach the canary (v1) prompt: which spellings work, which are dropped."""
    R.set_decoding("greedy")
    probes = [
        ("no kwargs", {}),
        ("taskname='ast', target_lang='de'", dict(source_lang="en", target_lang="de", taskname="ast", pnc="yes")),
        ("task='ast', target_lang='de'", dict(source_lang="en", target_lang="de", task="ast", pnc="yes")),
        ("taskname='translate'", dict(source_lang="en", target_lang="de", taskname="translate", pnc="yes")),
        ("taskname='s2t_translation'", dict(source_lang="en", target_lang="de", taskname="s2t_translation", pnc="yes")),
        ("pnc=False (bool)", dict(source_lang="en", target_lang="en", taskname="asr", pnc=False)),
        ("pnc='nopnc'", dict(source_lang="en", target_lang="en", taskname="asr", pnc="nopnc")),
        ("pnc='<|nopnc|>'", dict(source_lang="en", target_lang="en", taskname="asr", pnc="<|nopnc|>")),
        ("pnc='Yes'", dict(source_lang="en", target_lang="en", taskname="asr", pnc="Yes")),
        ("pnc='True'", dict(source_lang="en", target_lang="en", taskname="asr", pnc="True")),
        ("pnc='False'", dict(source_lang="en", target_lang="en", taskname="asr", pnc="False")),
        ("source_lang='<|de|>'", dict(source_lang="<|de|>", target_lang="en", taskname="asr", pnc="yes")),
    ]
    out = []
    for name, kw in probes:
        try:
            R.transcribe(REF_CLIPS[:1], **kw)
            p = R.captured["prompts"][0][0].tolist()
            out.append(dict(kwargs=name, prompt_ids=p, prompt_tokens=R.tok(p)))
        except Exception as e:  # noqa: BLE001 - recorded as behaviour
            out.append(dict(kwargs=name, error=error_text(e)))
    for name, kw in [("timestamps=True", dict(V1_ASR_PNC, timestamps=True))]:
        try:
            R.transcribe(REF_CLIPS[:1], **kw)
            p = R.captured["prompts"][0][0].tolist()
            out.append(dict(kwargs=name, prompt_ids=p, prompt_tokens=R.tok(p)))
        except Exception as e:  # noqa: BLE001
            out.append(dict(kwargs=name, error=error_text(e)))
    return out


def model_facts(R):
    m = R.model
    tok = m.tokenizer
    emb = m.transf_decoder.embedding
    return dict(
        prompt_format=m.prompt_format,
        vocab_size_tokenizer=tok.vocab_size,
        vocab_size_model=int(emb.token_embedding.weight.shape[0]),
        sub_tokenizer_offsets=dict(tok.token_id_offset),
        sub_tokenizer_sizes={k: len(t.vocab) for k, t in tok.tokenizers_dict.items()},
        spl_tokens_vocab=list(tok.tokenizers_dict["spl_tokens"].vocab),
        special_token_ids={k: int(i) for k, i in sorted(tok.special_tokens.items(), key=lambda kv: kv[1])},
        bos=int(tok.bos_id), eos=int(tok.eos_id), pad=int(tok.pad_id), nospeech=int(tok.nospeech_id),
        encoder=dict(n_layers=len(m.encoder.layers), d_model=int(m.encoder.d_model),
                     n_heads=int(m.encoder.layers[0].self_attn.h),
                     subsampling_factor=int(m.encoder.subsampling_factor),
                     subsampling_conv_channels=int(m.cfg.encoder.subsampling_conv_channels)),
        decoder=dict(n_layers=len(m.transf_decoder.decoder.layers), hidden=int(m.transf_decoder.hidden_size),
                     n_heads=int(m.cfg.transf_decoder.config_dict.num_attention_heads),
                     inner=int(m.cfg.transf_decoder.config_dict.inner_size),
                     max_sequence_length=int(m.cfg.transf_decoder.config_dict.max_sequence_length),
                     position_table_rows=int(emb.position_embedding.pos_enc.shape[0])),
        encoder_decoder_proj=type(m.encoder_decoder_proj).__name__,
        head_tied_to_embedding=bool(m.log_softmax.mlp.layer0.weight.data_ptr()
                                    == emb.token_embedding.weight.data_ptr()),
        state_dict_keys={k: list(v.shape) for k, v in m.state_dict().items()},
    )


def v1_stage_tensors(R, prompt_ids):
    """Stage-by-stage tensors for jfk.wav (like canary-tiny_stages.safetensors, without the audio)."""
    import soundfile as sf
    import torch
    from nemo.collections.asr.models.aed_multitask_models import lens_to_mask
    from safetensors.torch import load_file

    m = R.model
    m.eval()
    x, _ = sf.read(str(REF_CLIPS[0]), dtype="float32")
    audio = torch.from_numpy(x)[None]
    fe = m.preprocessor.featurizer
    saved = (fe.dither, fe.pad_to)
    fe.dither, fe.pad_to = 0.0, 0
    prompt = torch.tensor([prompt_ids])
    with torch.no_grad():
        mel, mel_len = m.preprocessor(input_signal=audio, length=torch.tensor([audio.shape[1]]))
        pre, pre_len = m.encoder.pre_encode(x=mel.transpose(1, 2), lengths=mel_len)
        enc, enc_len = m.encoder(audio_signal=mel, length=mel_len)
        states = m.encoder_decoder_proj(enc.permute(0, 2, 1))
        mask = lens_to_mask(enc_len, states.shape[1]).to(states.dtype)
        dec_h = m.transf_decoder(input_ids=prompt, decoder_mask=torch.ones_like(prompt).float(),
                                 encoder_embeddings=states, encoder_mask=mask)
        logp = m.log_softmax(hidden_states=dec_h)
        with m.log_softmax.with_log_softmax_enabled(False) as clf:
            logits = clf(hidden_states=dec_h)
        _, _, states2, _ = m(input_signal=audio, input_signal_length=torch.tensor([audio.shape[1]]))
    fe.dither, fe.pad_to = saved
    assert torch.equal(states2, states)
    ct = CANARY_TINY_DIR / "canary-tiny_stages.safetensors"
    if ct.exists():  # same preprocessor config; canary-tiny's mel was stored on another machine (see README)
        print("mel vs canary-tiny_stages.safetensors: max abs diff",
              float((load_file(str(ct))["mel"] - mel).abs().max()), flush=True)
    return {
        "mel": mel.contiguous(),
        "mel_len": mel_len.to(torch.int64),
        "pre_encode_out": pre.contiguous(),
        "pre_encode_len": pre_len.to(torch.int64),
        "encoder_out": enc.contiguous(),
        "encoder_len": enc_len.to(torch.int64),
        "encoder_states": states.contiguous(),
        "prompt_ids": prompt.to(torch.int64),
        "decoder_hidden_prompt": dec_h.contiguous(),
        "decoder_logits_prompt": logits.contiguous(),
        "decoder_logprobs_prompt": logp.contiguous(),
        "first_step_logits": logits[:, -1].contiguous(),
        "first_step_logprobs": logp[:, -1].contiguous(),
    }


def make_v1_refs():
    R = Runner(V1_NEMO)
    refs = dict(nemo_file=rel(V1_NEMO), clips=[c.name for c in REF_CLIPS], results={})
    for kind, dec, kw in V1_KINDS:
        if dec is None:  # the saved decoding config as is (beam, beam_size 1)
            R.model.change_decoding_strategy(copy.deepcopy(R.base_dec))
            gen = R.model.decoding.decoding.beam_search
            R.captured.clear()
            per_clip = []
            for c in REF_CLIPS[:1]:
                h = R.transcribe([c], **kw)[0]
                p = R.captured["prompts"][0][0].tolist()
                per_clip.append(dict(prompt_ids=p, prompt_tokens=R.tok(p), **R.hyp(h), clip=c.name))
            from omegaconf import OmegaConf

            refs["results"][kind] = dict(decoding_cfg=OmegaConf.to_container(R.base_dec),
                                         generator=dict(generator=type(gen).__name__, max_seq_length=gen.max_seq_length,
                                                        max_delta_length=gen.max_delta_len,
                                                        beam_size=gen.beam_size, len_pen=gen.len_pen),
                                         transcribe_kwargs={**kw, "batch_size": 1, "return_hypotheses": True},
                                         per_clip=per_clip)
            continue
        refs["results"][kind] = run_kind(R, kind, dec, kw, REF_CLIPS)
    refs["results"]["greedy_asr_en_pnc_batch4"] = run_batch(R, V1_ASR_PNC)
    first = refs["results"]["greedy_asr_en_pnc"]["per_clip"][0]
    refs["stages"] = v1_stage_tensors(R, first["prompt_ids"])
    assert int(refs["stages"]["first_step_logits"][0].argmax()) == first["output_ids"][0]
    refs["prompt_probes"] = v1_prompt_probes(R)
    refs["model_facts"] = model_facts(R)
    return refs


CT_ASR_PNC = dict(source_lang="en", target_lang="en", pnc="yes")


def beam4(return_best, **beam_extra):
    return dict(strategy="beam", beam_size=4, return_best=return_best, **beam_extra)


CT_FILES = {
    "canary-tiny-beam-lenpen.json": [
        ("beam4_lenpen1.0_asr_en_pnc", beam4(True, length_penalty=1.0), CT_ASR_PNC),
        ("beam4_lenpen1.0_nbest_asr_en_pnc", beam4(False, length_penalty=1.0), CT_ASR_PNC),
        ("beam4_lenpen0.5_asr_en_pnc", beam4(True, length_penalty=0.5), CT_ASR_PNC),
        ("beam4_lenpen0.5_nbest_asr_en_pnc", beam4(False, length_penalty=0.5), CT_ASR_PNC),
        ("beam4_len_pen_key_1.0_nbest_asr_en_pnc", beam4(False, len_pen=1.0), CT_ASR_PNC),
    ],
    "canary-tiny-beam-maxdelta.json": [
        ("beam4_maxdelta5_nbest_asr_en_pnc", beam4(False, max_generation_delta=5), CT_ASR_PNC),
        ("beam4_maxdelta5_asr_en_pnc", beam4(True, max_generation_delta=5), CT_ASR_PNC),
        ("beam4_maxdelta5_lenpen1.0_nbest_asr_en_pnc",
         beam4(False, max_generation_delta=5, length_penalty=1.0), CT_ASR_PNC),
    ],
    "canary-tiny-beam-timestamps.json": [
        ("beam4_timestamps_asr_en_pnc", dict(strategy="beam", beam_size=4, return_best=True),
         dict(CT_ASR_PNC, timestamps=True)),
        ("beam4_timestamps_nbest_asr_en_pnc", dict(strategy="beam", beam_size=4, return_best=False),
         dict(CT_ASR_PNC, timestamps=True)),
    ],
}


def make_canary_tiny_refs():
    R = Runner(CANARY_TINY)
    out = {}
    for fname, kinds in CT_FILES.items():
        refs = dict(nemo_file=rel(CANARY_TINY), clips=[c.name for c in REF_CLIPS], results={})
        for kind, dec, kw in kinds:
            dec = dict(dec)
            # best_index cross-check: the return_best run and the n-best list must agree
            refs["results"][kind] = run_kind(R, kind, dec, kw, REF_CLIPS)
        for kind in list(refs["results"]):
            if kind.endswith("_nbest_asr_en_pnc") and kind.replace("_nbest", "") in refs["results"]:
                best = refs["results"][kind.replace("_nbest", "")]["per_clip"]
                for nb, b in zip(refs["results"][kind]["per_clip"], best):
                    nb["best_matches_return_best_run"] = nb["nbest"][nb["best_index"]]["output_ids"] == b["output_ids"]
        out[fname] = refs
    return out


def all_refs():
    v = versions()
    files = {f"{V1_NAME}.json": make_v1_refs(), **make_canary_tiny_refs()}
    for f in files.values():
        f["made_by"] = dict(tool="tools/canary_nemo_reference.py --stage refs", versions=v)
    return files


def stage_refs(args):
    from safetensors.torch import save_file

    REFS_OUT.mkdir(parents=True, exist_ok=True)
    for name, refs in all_refs().items():
        if "stages" in refs:
            save_file({k: t.detach().clone().contiguous() for k, t in refs.pop("stages").items()},
                      str(REFS_OUT / STAGES_FILE))
            print("wrote", REFS_OUT / STAGES_FILE, flush=True)
        (REFS_OUT / name).write_text(json.dumps(refs, indent=1) + "\n")
        print("wrote", REFS_OUT / name, flush=True)


def compare(a, b, path="", tol=1e-5):
    errs = []
    if isinstance(a, dict):
        if set(a) != set(b):
            errs.append(f"{path}: keys {sorted(set(a) ^ set(b))}")
        for k in a:
            if k in b:
                errs += compare(a[k], b[k], f"{path}.{k}", tol)
    elif isinstance(a, list):
        if len(a) != len(b):
            errs.append(f"{path}: len {len(a)} != {len(b)}")
        else:
            for i, (x, y) in enumerate(zip(a, b)):
                errs += compare(x, y, f"{path}[{i}]", tol)
    elif isinstance(a, float) and isinstance(b, float):
        if abs(a - b) > tol * max(1.0, abs(a)):
            errs.append(f"{path}: {a} != {b}")
    elif a != b:
        errs.append(f"{path}: {a!r} != {b!r}")
    return errs


def stage_verify(args):
    import torch
    from safetensors.torch import load_file

    errs = []
    for name, refs in all_refs().items():
        if "stages" in refs:
            st = load_file(str(REFS_OUT / STAGES_FILE))
            for k, t in refs.pop("stages").items():
                if k not in st or not torch.equal(st[k], t):
                    errs.append(f"{STAGES_FILE}: {k} differs")
        saved = json.loads((REFS_OUT / name).read_text())
        saved.pop("made_by", None)
        refs.pop("made_by", None)
        errs += compare(saved, refs, name)
    print("VERIFY", "OK" if not errs else f"{len(errs)} differences", flush=True)
    for e in errs[:50]:
        print("  ", e)
    sys.exit(1 if errs else 0)


def replay_beam(model, audio, prompt, beam, alpha, max_total, slot_penalty_quirk=True):
    """NeMo's beam-search arithmetic written out step by step (BeamSearchSequenceGenerator._forward, NeMo 3.0.0),
    on NeMo's own decoder/head recomputed over whole prefixes (no cache). slot_penalty_quirk=False multiplies back
    each candidate's own parent penalty instead (what the code's comments intend). Returns (beams, scores)."""
    import torch
    from nemo.collections.common.parts import NEG_INF

    tok = model.tokenizer
    eos, pad = tok.eos_id, tok.pad_id
    with torch.no_grad():
        _, _, enc, enc_mask = model(input_signal=audio, input_signal_length=torch.tensor([audio.shape[1]]))

        def last_logprobs(seqs):
            ids = torch.tensor(seqs)
            n = ids.shape[0]
            h = model.transf_decoder(input_ids=ids, decoder_mask=(ids != pad).float(),
                                     encoder_embeddings=enc.expand(n, -1, -1), encoder_mask=enc_mask.expand(n, -1))
            return model.log_softmax(hidden_states=h)[:, -1].double()

        def pen(lengths):
            return ((5.0 + lengths) / 6.0) ** alpha

        s, t = torch.topk(last_logprobs([prompt])[0], beam)
        beams = [list(prompt) + [int(x)] for x in t]
        scores = s.clone()
        plen = torch.full((beam,), float(len(prompt) + 2), dtype=torch.float64)  # prefixes.size(1) + 1
        finished = torch.zeros(beam, dtype=torch.bool)  # NeMo starts with no beam finished, even after an EOS
        for _ in range(max_total - len(prompt)):
            cs, ci = torch.topk(last_logprobs(beams), beam, dim=-1)
            mult = torch.ones(beam, beam, dtype=torch.float64)
            for r in range(beam):
                if finished[r]:
                    ci[r] = pad
                    mult[r, 0] = 0.0
                    mult[r, 1:] = 1.0 - NEG_INF
            cand = scores[:, None] + cs * mult
            p = pen(plen)
            vals, idx = torch.topk((cand / p[:, None]).reshape(-1), beam)
            parents = idx // beam
            beams = [beams[int(a)] + [int(ci[int(a), int(b) % beam])] for a, b in zip(parents, idx)]
            scores = vals * (p if slot_penalty_quirk else p[parents])
            plen = torch.tensor([1.0 + sum(1 for x in b if x not in (eos, pad)) for b in beams], dtype=torch.float64)
            finished = torch.tensor([b[-1] in (eos, pad) for b in beams])
            if bool(finished.all()):
                break
        best = int(torch.argmax(scores / pen(plen)))
    outs = []
    for b in beams:
        y = b[len(prompt):]
        while y and y[-1] in (eos, pad):
            y.pop()
        outs.append(y)
    return outs, [float(x) for x in scores], best


def stage_beamcheck(args):
    """Replay NeMo's beam arithmetic (see replay_beam) for every stored n-best of canary-tiny; compare."""
    import soundfile as sf
    import torch

    torch.set_num_threads(1)
    from nemo.collections.asr.models import EncDecMultiTaskModel

    model = EncDecMultiTaskModel.restore_from(str(CANARY_TINY), map_location="cpu")
    model.eval()
    audio = {c.name: torch.from_numpy(sf.read(str(c), dtype="float32")[0])[None] for c in REF_CLIPS}
    for fname in ["canary-tiny-beam-lenpen.json", "canary-tiny-beam-maxdelta.json"]:
        refs = json.loads((REFS_OUT / fname).read_text())
        for kind, res in refs["results"].items():
            if "nbest" not in res["per_clip"][0]:
                continue
            g = res["generator"]
            for rec in res["per_clip"]:
                for quirk in (True, False):
                    outs, scores, best = replay_beam(model, audio[rec["clip"]], rec["prompt_ids"], g["beam_size"],
                                                     g["len_pen"], rec["max_total_length"], quirk)
                    same_ids = outs == [n["output_ids"] for n in rec["nbest"]]
                    err = max(abs(a - n["score"]) for a, n in zip(scores, rec["nbest"]))
                    print(f"{kind:45s} {rec['clip']:22s} slot_penalty_quirk={quirk!s:5s} ids_equal={same_ids!s:5s} "
                          f"max_score_err={err:.2e} best {best} vs {rec['best_index']}", flush=True)


def stage_longclip(args):
    """canary-tiny on clips longer than its tables: encoder pos_emb_max_len 5000 frames, decoder 1024 positions."""
    import numpy as np
    import soundfile as sf
    import torch

    R = Runner(CANARY_TINY)
    enc = R.model.encoder
    print("encoder pos_enc.pe rows before:", tuple(enc.pos_enc.pe.shape), "max_audio_length", enc.max_audio_length)
    x, sr = sf.read(str(REF_CLIPS[0]), dtype="float32")

    def jfk_encoder_out():
        R.model.eval()
        with torch.no_grad():
            _, _, states, _ = R.model(input_signal=torch.from_numpy(x)[None],
                                      input_signal_length=torch.tensor([len(x)]))
        return states.clone()

    before = jfk_encoder_out()
    secs = args.long_seconds
    reps = int(np.ceil(secs * sr / len(x)))
    long = np.tile(x, reps)[: int(secs * sr)]
    with tempfile.TemporaryDirectory() as td:
        p = Path(td) / "long.wav"
        sf.write(str(p), long, sr, subtype="PCM_16")
        for strategy in ["greedy", "beam"]:
            R.set_decoding(strategy, beam_size=1)
            try:
                h = R.transcribe([p], **CT_ASR_PNC)[0]
                n = len(to_py(h.y_sequence))
                print(strategy, "ok: output tokens", n, "prompt", len(R.captured["prompts"][0][0]),
                      "steps", len(R.captured.get("step_logits", [])), "text[:80]", repr(h.text[:80]))
            except Exception as e:  # noqa: BLE001
                print(strategy, "error:", type(e).__name__, str(e)[:400])
    print("encoder pos_enc.pe rows after:", tuple(enc.pos_enc.pe.shape), "max_audio_length", enc.max_audio_length)
    R.model.eval()  # transcribe() left the encoder in train mode: BatchNorm would update its running stats
    with torch.no_grad():
        mel, ml = R.model.preprocessor(input_signal=torch.from_numpy(long)[None], length=torch.tensor([len(long)]))
        e, el = enc(audio_signal=mel, length=ml)
    print("mel frames", int(ml[0]), "encoder frames", int(el[0]))
    print("jfk encoder states identical before/after the table was extended:", torch.equal(before, jfk_encoder_out()))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stage", choices=["build", "refs", "verify", "longclip", "beamcheck", "all"], default="all")
    ap.add_argument("--work", default=None, help="scratch folder for tokenizer training (default: a temp dir)")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--max-minutes", type=float, default=9.0)
    ap.add_argument("--ft-steps", type=int, default=1000)
    ap.add_argument("--ft-max-minutes", type=float, default=5.0)
    ap.add_argument("--long-seconds", type=float, default=420.0)
    args = ap.parse_args()
    if args.stage == "all":
        for st in ["build", "refs", "verify"]:
            cmd = [sys.executable, os.path.abspath(__file__), *[a for a in sys.argv[1:] if not a.startswith("--stage")]]
            cmd = [c for c in cmd if c != "all"] + ["--stage", st]
            print("RUN", " ".join(cmd), flush=True)
            subprocess.run(cmd, check=True)
        return
    dict(build=stage_build, refs=stage_refs, verify=stage_verify, longclip=stage_longclip,
         beamcheck=stage_beamcheck)[args.stage](args)


if __name__ == "__main__":
    main()
