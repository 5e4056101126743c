#!/usr/bin/env python
"""Build a random-weight model with the full nvidia/canary-180m-flash or canary-1b-flash architecture, as a .nemo.

Run from the repository root with the Python of the NeMo virtual environment (made by
tools/setup_nemo_venv.sh):

    .venv-nemo/bin/python benchmarks/make_canary_model.py --variant 180m [OUT.nemo] [--max-new-tokens 200]
    .venv-nemo/bin/python benchmarks/make_canary_model.py --variant 1b [OUT.nemo]

The output (about 0.75 GB for 180m, 3.5 GB for 1b; default local-models/canary-<variant>-flash-random.nemo,
relative to the repository root; a path given is relative to the working directory) goes to a git-ignored
folder and is never committed. It stands in for the published checkpoint (which cannot be downloaded here)
with the same shapes, so the same compute: only the weights differ. Used by benchmarks/canary_speed.py.

What it builds: NeMo's `EncDecMultiTaskModel(cfg)` with NeMo's own initialisation under a fixed seed, then
`save_to()`. The config is written out below from the published facts (sources in benchmarks/README.md,
"Canary"):
  - preprocessor: 128 mels, n_fft 512, window 0.025 s / stride 0.01 s (hann), per_feature normalize
  - encoder: FastConformer, dw_striding x8 with 256 channels, rel_pos, 8 heads, ff_expansion 4, conv
    kernel 9 (batch norm), xscaling false; 180m: 17 layers of d_model 512; 1b: 32 layers of d_model 1024
  - decoder: NeMo Transformer, 4 layers, hidden 1024, inner 4096, 8 heads, pre-LN, ReLU;
    encoder_decoder_proj Linear(512, 1024) for 180m (none for 1b: same widths)
  - head: TokenClassifier tied to the token embedding; prompt format canary2
  - tokenizer: aggregate ("agg", CanaryTokenizer): spl_tokens of 1152 entries + en/de/es/fr SentencePiece
    BPE of 1024 pieces each = 5248 ids (the published size)
  - decoding: beam, beam_size 1, max_generation_delta 50 (the published default)

One deliberate change: the decoder's `max_sequence_length` (NeMo's and ours: the most prompt + output
tokens) is 9 + --max-new-tokens (default 209, published 1024). A random model never emits EOS, so both
engines generate up to that limit; 200 new tokens for a minute of speech is about what a real model emits
(3-4 tokens a second), and with the published 1024 (and delta 50) they would generate ~790 tokens a minute,
four times too much decoding work. The only other effect is a shorter fixed sinusoid table.

Tokenizers (the published ones are not on disk): the special tokenizer is built with NeMo's
`CanaryTokenizer.build_special_tokenizer` as ../shared/models/canary-tiny/make_canary_tiny.py does (its
special tokens, then timestamp tokens <|0|>.. up to 1152 entries: the real inventory is not readable
offline); one 1024-piece cased BPE is trained with NeMo's `create_spt_model` on the English text
make_parakeet_model.py uses (license texts and standard-library docstrings) and used for all four
languages. Only the sizes matter for speed.
"""
from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SPL_SIZE = 1152          # 5248 - 4 x 1024
LANG_SIZE = 1024
LANGS = ["en", "de", "es", "fr"]
PROMPT_LEN = 9           # canary2 prompt with an empty decoder context

VARIANTS = {
    # name: encoder layers, encoder d_model (both: 8 heads, ff 4x, 256 subsampling channels)
    "180m": dict(name="canary-180m-flash", enc_layers=17, enc_d_model=512),
    "1b": dict(name="canary-1b-flash", enc_layers=32, enc_d_model=1024),
}
DEC_HIDDEN, DEC_LAYERS, DEC_HEADS = 1024, 4, 8

# canary2 special tokens (as ../shared/models/canary-tiny/make_canary_tiny.py; build_special_tokenizer adds its own)
SPECIAL_TOKENS = [
    "<|startofcontext|>",
    "<|emo:undefined|>", "<|emo:neutral|>", "<|emo:angry|>", "<|emo:happy|>", "<|emo:sad|>",
    "<|itn|>", "<|noitn|>", "<|timestamp|>", "<|notimestamp|>", "<|diarize|>", "<|nodiarize|>",
    "<|transcribe|>", "<|translate|>", "<|en|>", "<|de|>", "<|es|>", "<|fr|>",
]

log = logging.getLogger("make_canary_model")


def model_config(v: dict, tokdir: str, max_sequence_length: int) -> dict:
    E, D = v["enc_d_model"], DEC_HIDDEN
    return {
        "sample_rate": 16000, "label_smoothing": 0.0, "use_loss_mask_for_prompt": False, "log_prediction": False,
        "prompt_format": "canary2",
        "prompt_defaults": [
            {"role": "user", "slots": {"decodercontext": "", "source_lang": "<|en|>", "target_lang": "<|en|>",
                                       "emotion": "<|emo:undefined|>", "pnc": "<|pnc|>", "itn": "<|noitn|>",
                                       "diarize": "<|nodiarize|>", "timestamp": "<|notimestamp|>"}},
            {"role": "user_partial", "slots": {"decodercontext": ""}},
        ],
        "model_defaults": {"asr_enc_hidden": E, "lm_enc_hidden": D, "lm_dec_hidden": D},
        "tokenizer": {
            "dir": None, "type": "agg",
            "langs": {lang: {"dir": f"{tokdir}/{lang}", "type": "bpe"} for lang in ["spl_tokens"] + LANGS},
            "custom_tokenizer": {"_target_": "nemo.collections.common.tokenizers.canary_tokenizer.CanaryTokenizer",
                                 "tokenizer": None},
        },
        "preprocessor": {
            "_target_": "nemo.collections.asr.modules.AudioToMelSpectrogramPreprocessor",
            "sample_rate": 16000, "normalize": "per_feature", "window_size": 0.025, "window_stride": 0.01,
            "window": "hann", "features": 128, "n_fft": 512, "log": True, "frame_splicing": 1,
            "dither": 1e-05, "pad_to": 0, "pad_value": 0.0,
        },
        "spec_augment": {"_target_": "nemo.collections.asr.modules.SpectrogramAugmentation",
                         "freq_masks": 2, "time_masks": 10, "freq_width": 27, "time_width": 0.05},
        "encoder": {
            "_target_": "nemo.collections.asr.modules.ConformerEncoder",
            "feat_in": 128, "feat_out": -1, "n_layers": v["enc_layers"], "d_model": E,
            "subsampling": "dw_striding", "subsampling_factor": 8, "subsampling_conv_channels": 256,
            "causal_downsampling": False, "reduction": None, "reduction_position": None, "reduction_factor": 1,
            "ff_expansion_factor": 4, "self_attention_model": "rel_pos", "n_heads": 8,
            "att_context_size": [-1, -1], "xscaling": False, "untie_biases": True, "pos_emb_max_len": 5000,
            "conv_kernel_size": 9, "conv_norm_type": "batch_norm", "conv_context_size": None,
            "dropout": 0.1, "dropout_pre_encoder": 0.1, "dropout_emb": 0.0, "dropout_att": 0.1,
        },
        "transf_decoder": {
            "_target_": "nemo.collections.asr.modules.transformer.get_nemo_transformer",
            "model_name": None, "pretrained": False, "encoder": None, "pre_ln_final_layer_norm": True,
            "config_dict": {
                "max_sequence_length": max_sequence_length, "num_token_types": 0, "embedding_dropout": 0.1,
                "learn_positional_encodings": False, "hidden_size": D, "inner_size": 4 * D,
                "num_layers": DEC_LAYERS, "num_attention_heads": DEC_HEADS, "ffn_dropout": 0.1,
                "attn_score_dropout": 0.1, "attn_layer_dropout": 0.1, "hidden_act": "relu", "pre_ln": True,
                "vocab_size": None,
            },
        },
        "head": {"_target_": "nemo.collections.asr.parts.submodules.token_classifier.TokenClassifier",
                 "num_layers": 1, "activation": "relu", "log_softmax": True, "hidden_size": D,
                 "num_classes": None, "dropout": 0.0, "use_transformer_init": True},
        "decoding": {"strategy": "beam", "return_best_hypothesis": True,
                     "beam": {"beam_size": 1, "len_pen": 0.0, "max_generation_delta": 50}},
        "loss": {"_target_": "nemo.collections.common.losses.smoothed_cross_entropy.SmoothedCrossEntropyLoss",
                 "label_smoothing": 0.0, "pad_id": None},
    }


def build_tokenizers(tokdir: Path, seed: int) -> None:
    import sentencepiece as spm
    from nemo.collections.common.tokenizers.canary_tokenizer import CanaryTokenizer
    from nemo.collections.common.tokenizers.sentencepiece_tokenizer import create_spt_model

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from make_parakeet_model import english_corpus

    # build_special_tokenizer adds its own defaults and "▁": find the timestamp count that gives SPL_SIZE
    n_ts = SPL_SIZE - len(SPECIAL_TOKENS) - 8
    spl = tokdir / "spl_tokens"
    CanaryTokenizer.build_special_tokenizer(SPECIAL_TOKENS + [f"<|{i}|>" for i in range(n_ts)], str(spl),
                                            force_rebuild=True)
    got = spm.SentencePieceProcessor(model_file=str(spl / "tokenizer.model")).get_piece_size()
    if got != SPL_SIZE:
        raise SystemExit(f"special tokenizer has {got} entries, wanted {SPL_SIZE}")
    corpus = tokdir / "corpus.txt"
    english_corpus(corpus)
    spm.set_random_generator_seed(seed)
    en = tokdir / "en"
    create_spt_model(str(corpus), LANG_SIZE, sample_size=-1, do_lower_case=False, tokenizer_type="bpe",
                     output_dir=str(en))
    got = spm.SentencePieceProcessor(model_file=str(en / "tokenizer.model")).get_piece_size()
    if got != LANG_SIZE:
        raise SystemExit(f"BPE tokenizer has {got} pieces, wanted {LANG_SIZE}: not enough text")
    for lang in LANGS[1:]:
        shutil.copytree(en, tokdir / lang)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variant", choices=sorted(VARIANTS), required=True)
    ap.add_argument("out", nargs="?", default=None,
                    help="output .nemo (default local-models/canary-<variant>-flash-random.nemo in the repository)")
    ap.add_argument("--max-new-tokens", type=int, default=200,
                    help="decoder max_sequence_length = 9 (prompt) + this (default 200)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    v = VARIANTS[args.variant]

    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    import numpy as np
    import torch

    torch.set_num_threads(args.threads)
    from nemo.utils import logging as nemo_logging

    nemo_logging.setLevel(logging.ERROR)
    from nemo.collections.asr.models import EncDecMultiTaskModel
    from omegaconf import OmegaConf

    out = Path(args.out).resolve() if args.out else REPO / f"local-models/{v['name']}-random.nemo"
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tokdir = Path(tmp) / "tokenizers"
        build_tokenizers(tokdir, args.seed)
        cfg = OmegaConf.create(model_config(v, str(tokdir), PROMPT_LEN + args.max_new_tokens))
        torch.manual_seed(args.seed)
        np.random.seed(args.seed)
        t0 = time.time()
        model = EncDecMultiTaskModel(cfg=cfg).cpu().eval()
        n_params = sum(p.numel() for p in model.parameters())
        rows = int(model.transf_decoder.embedding.token_embedding.weight.shape[0])
        log.info("built in %.1f s: %.1f M parameters, vocabulary %d (embedding/head rows %d)", time.time() - t0,
                 n_params / 1e6, model.tokenizer.vocab_size, rows)
        t0 = time.time()
        model.save_to(str(out))
    log.info("saved %s (%.2f GB) in %.1f s", out, out.stat().st_size / 1e9, time.time() - t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
