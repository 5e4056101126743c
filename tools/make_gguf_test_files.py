#!/usr/bin/env python
"""Make the GGUF test files of tests/models/gguf/ (README there): Parakeet models of other shapes than the
shared tiny models, written in both upstream schemas by our converter, which reproduces the upstream
converters and quantizers byte for byte (tests/test_gguf_export.py).

Two steps, each in its own Python:

    # 1. the models of MADE (NeMo venv; the BUILT ones are tests/models/built-*.nemo, made by
    #    tools/nemo_reference.py)
    .venv-nemo/bin/python tools/make_gguf_test_files.py build [--models a,b]
    # 2. the GGUF files (our package): Q8_0 files are committed; with --f32 the F32 files are written next
    #    to them for the upstream reference run, and are not committed (the test remakes them and checks
    #    their sha256 against the one recorded in the reference)
    python3 tools/make_gguf_test_files.py gguf [--f32]

Then tools/upstream_gguf_reference.py runs the upstream runtimes on them.
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import hashlib
import importlib
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT_REL = "tests/models/gguf"

# Source models: the fitted hybrid RNN-T + CTC of tests/models/ (trained by tools/nemo_reference.py on jfk
# + one LibriSpeech clip; its two 4x-subsampling models are left out: both runtimes assume 8x, transcribe.cpp
# refuses the file and parakeet-cli crashes; built-rnnt-padto16-nonorm has the shared tiny models' tensor
# shapes and gives no token on unseen clips), and the ones made here, fitted the same way
# (nemo_reference.train_model) or left random. None has the tensor shapes of ../shared/models/parakeet-tiny.
BUILT = ("built-hybrid-rnnt-ctc",)


def _base(tok: Path, mels: int, **encoder) -> dict:
    import nemo_reference as nr

    cfg = nr.template_config()
    cfg["tokenizer"] = {"dir": str(tok), "type": "bpe"}
    nr._preproc(cfg, mels)
    cfg["encoder"].update(subsampling="dw_striding", subsampling_factor=8, subsampling_conv_channels=16, **encoder)
    return cfg


def _tdt(cfg: dict, d_model: int, pred: int, durs: list[int], joint_dropout: float = 0.0) -> None:
    cfg["model_defaults"].update(enc_hidden=d_model, pred_hidden=pred, joint_hidden=pred, tdt_durations=durs,
                                 num_tdt_durations=len(durs))
    cfg["decoder"]["prednet"]["pred_hidden"] = pred
    cfg["joint"]["jointnet"].update(encoder_hidden=d_model, pred_hidden=pred, joint_hidden=pred,
                                    dropout=joint_dropout)
    cfg["joint"]["num_extra_outputs"] = len(durs)
    cfg["decoding"]["durations"] = durs
    cfg["loss"]["tdt_kwargs"]["durations"] = durs
    cfg["target"] = "nemo.collections.asr.models.rnnt_bpe_models.EncDecRNNTBPEModel"


def _ctc_decoder(d_model: int) -> dict:
    return {"_target_": "nemo.collections.asr.modules.ConvASRDecoder", "feat_in": d_model, "num_classes": 128}


def cfg_random_hybrid_tdt_ctc(tok: Path) -> dict:
    """Hybrid TDT + CTC, d_model 96 (3 heads of 32), one conformer layer, FFN 192, conv kernel 7, 80 mels,
    predictor/joint 64, durations [0, 1, 2, 3], joint dropout 0.1 (so the joint's output Linear is saved
    as joint.joint_net.2, as in the published checkpoints)."""
    cfg = _base(tok, 80, n_layers=1, d_model=96, n_heads=3, ff_expansion_factor=2, conv_kernel_size=7)
    _tdt(cfg, 96, 64, [0, 1, 2, 3], joint_dropout=0.1)
    cfg["aux_ctc"] = {"ctc_loss_weight": 0.3, "use_cer": False, "ctc_reduction": "mean_batch",
                      "decoder": _ctc_decoder(96), "decoding": {"strategy": "greedy_batch", "greedy": {}}}
    cfg["target"] = "nemo.collections.asr.models.hybrid_rnnt_ctc_bpe_models.EncDecHybridRNNTCTCBPEModel"
    return cfg


def cfg_fit_tdt(tok: Path) -> dict:
    """TDT, d_model 128 (2 heads of 64), one layer, FFN 128, conv kernel 15, 64 mels, predictor/joint 64,
    durations [0..6]."""
    cfg = _base(tok, 64, n_layers=1, d_model=128, n_heads=2, ff_expansion_factor=1, conv_kernel_size=15)
    _tdt(cfg, 128, 64, [0, 1, 2, 3, 4, 5, 6])
    return cfg


def cfg_fit_ctc(tok: Path) -> dict:
    """CTC, d_model 96 (2 heads of 48), two layers, FFN 96, conv kernel 3, 128 mels, no xscaling."""
    cfg = _base(tok, 128, n_layers=2, d_model=96, n_heads=2, ff_expansion_factor=1, conv_kernel_size=3,
                xscaling=False)
    for k in ("model_defaults", "decoder", "joint", "loss"):
        cfg.pop(k)
    cfg["decoder"] = _ctc_decoder(96)
    cfg["decoding"] = {"strategy": "greedy_batch", "greedy": {}}
    cfg["target"] = "nemo.collections.asr.models.ctc_bpe_models.EncDecCTCModelBPE"
    return cfg


# name -> (config builder, seed, loss kind for training or None for random weights, max training steps);
# all with 8x dw_striding subsampling (16 channels), the tiny models' 128-piece tokenizer
MADE = {
    "fit-tdt-d128": (cfg_fit_tdt, 1102, "tdt", 800),
    "fit-ctc-d96": (cfg_fit_ctc, 1103, "ctc", 800),
    "random-hybrid-tdt-ctc-d96": (cfg_random_hybrid_tdt_ctc, 1101, None, 0),
}


def source_path(name: str) -> Path:
    return REPO / (f"{OUT_REL}/{name}.nemo" if name in MADE else f"tests/models/{name}.nemo")


def _random_batch_norm(model, seed: int) -> None:
    """Random running statistics, as tools/nemo_reference.py's training gives them (not the identity)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for bn in (m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)):
            bn.running_mean.copy_(0.3 * torch.randn(bn.running_mean.shape, generator=gen))
            bn.running_var.copy_(0.5 + 1.5 * torch.rand(bn.running_var.shape, generator=gen))


def build(names: list[str]) -> int:
    """Make the models of MADE with NeMo (fixed seeds): fitted ones with nemo_reference.train_model on its
    training clips (which also randomises the batch norm statistics), the random one with NeMo's own
    initialisation. Logged to BUILD_LOG.json."""
    sys.path.insert(0, str(REPO / "tools"))
    import nemo_reference as nr
    import numpy as np
    import torch

    torch.set_num_threads(1)
    nr.nemo_imports()
    log_path = REPO / OUT_REL / "BUILD_LOG.json"
    build_log = json.loads(log_path.read_text()) if log_path.exists() else {}
    for name in names:
        builder, seed, kind, steps = MADE[name]
        out = source_path(name)
        with tempfile.TemporaryDirectory() as tmp:
            cfg = nr.OmegaConf.create(builder(nr.tokenizer_dir(Path(tmp))))
            mod, cls = cfg.target.rsplit(".", 1)
            torch.manual_seed(seed)
            np.random.seed(seed)
            model = getattr(importlib.import_module(mod), cls)(cfg=cfg).cpu().eval()
            info = {"kind": kind or "random", "seed": seed}
            if kind is None:
                _random_batch_norm(model, seed)
            else:
                data = [(nr.load_audio(c["path"]), c["text"]) for c in nr.TRAIN_CLIPS]
                info.update(nr.train_model(model, kind, data, steps, seed))
                info["trained_on"] = [c["path"] for c in nr.TRAIN_CLIPS]
            out.parent.mkdir(parents=True, exist_ok=True)
            model.save_to(str(out))
        info.update(parameters=sum(p.numel() for p in model.parameters()),
                    sha256=hashlib.sha256(out.read_bytes()).hexdigest(),
                    nemo_version=__import__("nemo").__version__, torch_version=torch.__version__)
        build_log[name] = info
        log_path.write_text(json.dumps(build_log, indent=1, sort_keys=True) + "\n")
        print(name, info, flush=True)
    return 0


def gguf_name(model: str, schema: str, qtype: str) -> str:
    """The upstream spellings: parakeet.cpp `<m>-q8_0.gguf`, transcribe.cpp `<m>-Q8_0.gguf` (whose stem
    without the type is the file's stt.variant)."""
    d = "parakeet-cpp" if schema == "parakeet.cpp" else "transcribe-cpp"
    return f"{d}/{model}-{qtype if schema == 'parakeet.cpp' else qtype.upper()}.gguf"


def make_gguf(with_f32: bool) -> int:
    sys.path.insert(0, str(REPO))
    from transcribe.parakeet.gguf_export import export

    for model in BUILT + tuple(MADE):
        for schema in ("parakeet.cpp", "transcribe.cpp"):
            for qtype in ("f32", "q8_0") if with_f32 else ("q8_0",):
                out = REPO / OUT_REL / gguf_name(model, schema, qtype)
                out.parent.mkdir(parents=True, exist_ok=True)
                if out.exists():
                    out.unlink()
                # general.name (parakeet.cpp's schema): the model's file name, as `transcribe convert` stores it
                export(source_path(model), out, schema, qtype, name=source_path(model).name)
                print(out.relative_to(REPO), out.stat().st_size, hashlib.sha256(out.read_bytes()).hexdigest())
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("step", choices=("build", "gguf"))
    ap.add_argument("--models", help="comma-separated names of MADE to build (default: all)")
    ap.add_argument("--f32", action="store_true", help="also write the F32 files (for the reference run)")
    args = ap.parse_args(argv)
    if args.step == "build":
        return build(args.models.split(",") if args.models else list(MADE))
    return make_gguf(args.f32)


if __name__ == "__main__":
    raise SystemExit(main())
