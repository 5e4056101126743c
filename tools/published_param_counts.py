#!/usr/bin/env python
"""Count the parameters of the published Parakeet architectures with NeMo's own modules.

Run from the repository root with the Python of a NeMo virtual environment (see
tools/setup_nemo_venv.sh):

    .venv-nemo/bin/python tools/published_param_counts.py

Reads tests/configs/published/<name>.yaml (architecture sections reconstructed from model
cards and NeMo's example configs; see the comment at the top of each file), instantiates the
encoder, prediction network, joint and CTC decoder with NeMo's classes (on the `meta` device,
so no memory is allocated, where the class allows it), plus the language-prompt projection
(`prompt_kernel`) of NeMo's prompt-conditioned models, and writes
tests/references/nemo/param_counts.json.  Our own
package can then build the same architectures from the same yaml files and compare counts
without NeMo or the multi-gigabyte checkpoints.
"""

from __future__ import annotations

import os

os.environ["OMP_NUM_THREADS"] = "1"

import json
import logging
import sys
from pathlib import Path

import torch
import yaml

REPO = Path(__file__).resolve().parents[1]
CONFIG_DIR = REPO / "tests/configs/published"
OUT = REPO / "tests/references/nemo/param_counts.json"

# Nominal sizes as NVIDIA states them on the model cards, for orientation only.
PUBLISHED = {
    "parakeet-tdt-0.6b-v2": dict(hf="nvidia/parakeet-tdt-0.6b-v2", nominal=0.6e9, nominal_text="600M"),
    "parakeet-tdt-0.6b-v3": dict(hf="nvidia/parakeet-tdt-0.6b-v3", nominal=0.6e9, nominal_text="600M"),
    "parakeet-tdt_ctc-110m": dict(hf="nvidia/parakeet-tdt_ctc-110m", nominal=0.11e9, nominal_text="110M (~114M)"),
    "parakeet-rnnt-0.6b": dict(hf="nvidia/parakeet-rnnt-0.6b", nominal=0.6e9, nominal_text="600M"),
    "parakeet-ctc-0.6b": dict(hf="nvidia/parakeet-ctc-0.6b", nominal=0.6e9, nominal_text="600M"),
    "parakeet-tdt-1.1b": dict(hf="nvidia/parakeet-tdt-1.1b", nominal=1.1e9, nominal_text="1.1B"),
    # cache-aware streaming models
    "parakeet_realtime_eou_120m-v1": dict(hf="nvidia/parakeet_realtime_eou_120m-v1", nominal=0.12e9,
                                          nominal_text="120M"),
    "nemotron-speech-streaming-en-0.6b": dict(hf="nvidia/nemotron-speech-streaming-en-0.6b", nominal=0.6e9,
                                              nominal_text="600M"),
    "nemotron-3.5-asr-streaming-0.6b": dict(hf="nvidia/nemotron-3.5-asr-streaming-0.6b", nominal=0.6e9,
                                            nominal_text="600M"),
}

# Model classes that add NeMo's language-prompt projection (`prompt_kernel`) to the encoder output.
PROMPT_MODELS = ("EncDecRNNTBPEModelWithPrompt", "EncDecHybridRNNTCTCBPEModelWithPrompt")


def count(module) -> int:
    return int(sum(p.numel() for p in module.parameters()))


def build(cfg_section, **overrides):
    from nemo.core.classes.common import Serialization
    from omegaconf import OmegaConf, open_dict

    cfg = OmegaConf.create(OmegaConf.to_container(cfg_section, resolve=True))
    with open_dict(cfg):
        for k, v in overrides.items():
            cfg[k] = v
    try:
        with torch.device("meta"):
            return Serialization.from_config_dict(cfg), "meta"
    except Exception:  # a module that cannot be built on `meta`: build it for real
        return Serialization.from_config_dict(cfg), "cpu"


def build_prompt_kernel(cfg):
    """NeMo's `prompt_kernel`, built by NeMo's own `PromptStreamingMixin.initialize_prompt_feature` on a
    bare host module that carries the config the mixin reads (the full model would need a tokenizer)."""
    from nemo.collections.asr.parts.mixins import PromptStreamingMixin
    from omegaconf import OmegaConf

    class Host(PromptStreamingMixin, torch.nn.Module):
        pass

    model_cfg = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    model_cfg.num_prompts = model_cfg.model_defaults.get("num_prompts", 128)  # as the model's __init__ does
    host = Host()
    host.cfg = host._cfg = model_cfg
    host.initialize_prompt_feature()
    return host.prompt_kernel


def counts_for(name: str, path: Path) -> dict:
    from omegaconf import OmegaConf

    cfg = OmegaConf.create(yaml.safe_load(path.read_text()))
    target = str(cfg.target)
    modules: dict[str, int | None] = {"encoder": None, "decoder": None, "joint": None, "ctc_decoder": None}
    detail: dict = {}
    devices = set()

    encoder, dev = build(cfg.encoder)
    devices.add(dev)
    modules["encoder"] = count(encoder)
    detail["encoder"] = {
        "pre_encode": count(encoder.pre_encode),
        "layers": count(encoder.layers),
        "per_layer": count(encoder.layers[0]),
        "n_layers": len(encoder.layers),
        "other": modules["encoder"] - count(encoder.pre_encode) - count(encoder.layers),
    }
    del encoder

    vocab = None
    if "joint" in cfg:  # transducer (TDT or RNN-T), maybe hybrid
        decoder, dev = build(cfg.decoder)
        devices.add(dev)
        modules["decoder"] = count(decoder)
        vocab = int(cfg.decoder.vocab_size)
        del decoder
        joint, dev = build(cfg.joint)
        devices.add(dev)
        modules["joint"] = count(joint)
        detail["joint"] = {
            "num_outputs": int(joint.num_classes_with_blank),  # vocabulary + blank + TDT durations
            "num_extra_outputs": int(cfg.joint.get("num_extra_outputs", 0) or 0),
        }
        del joint
        if "aux_ctc" in cfg:
            ctc, dev = build(cfg.aux_ctc.decoder)
            devices.add(dev)
            modules["ctc_decoder"] = count(ctc)
            del ctc
    else:  # CTC model: `decoder` is the CTC head
        ctc, dev = build(cfg.decoder)
        devices.add(dev)
        modules["ctc_decoder"] = count(ctc)
        vocab = int(cfg.decoder.num_classes)
        del ctc

    if target.rsplit(".", 1)[-1] in PROMPT_MODELS and cfg.model_defaults.get("initialize_prompt_feature", False):
        kernel = build_prompt_kernel(cfg)
        modules["prompt_kernel"] = count(kernel)
        detail["prompt_kernel"] = {
            "num_prompts": int(kernel[0].in_features - kernel[2].out_features),
            "in_features": int(kernel[0].in_features),
            "hidden": int(kernel[0].out_features),
            "out_features": int(kernel[2].out_features),
        }
        del kernel

    total = sum(v for v in modules.values() if v is not None)
    info = PUBLISHED.get(name, {})
    extra = {}
    enc = cfg.encoder
    if enc.get("att_context_style", "regular") != "regular" or enc.get("causal_downsampling", False):
        ctx = OmegaConf.to_container(enc.att_context_size, resolve=True)
        conv_ctx = enc.get("conv_context_size")
        extra["streaming"] = {  # the lookahead choices, NeMo's default first
            "att_context_size": ctx if isinstance(ctx[0], list) else [ctx],
            "att_context_style": str(enc.att_context_style),
            "conv_context_size": OmegaConf.to_container(conv_ctx) if OmegaConf.is_list(conv_ctx) else conv_ctx,
            "causal_downsampling": bool(enc.get("causal_downsampling", False)),
        }
    return {
        "config": os.path.relpath(path, REPO).replace(os.sep, "/"),
        "hf_model": info.get("hf"),
        "target": target,
        "vocab_size": vocab,
        "n_mels": int(cfg.preprocessor.features),
        "d_model": int(cfg.encoder.d_model),
        "n_layers": int(cfg.encoder.n_layers),
        "tdt_durations": list(cfg.decoding.durations) if cfg.get("decoding", {}).get("durations") else None,
        "total": total,
        "modules": modules,
        "detail": detail,
        "nominal": info.get("nominal"),
        "nominal_text": info.get("nominal_text"),
        "ratio_to_nominal": round(total / info["nominal"], 4) if info.get("nominal") else None,
        "built_on": sorted(devices),
        **extra,
    }


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    torch.set_num_threads(1)
    from nemo.utils import logging as nemo_logging

    nemo_logging.setLevel(logging.ERROR)
    import nemo

    result = {
        "format_version": 1,
        "generator": {"tool": "tools/published_param_counts.py", "nemo_version": nemo.__version__,
                      "torch_version": torch.__version__},
        "note": "Parameter counts (module.parameters(), buffers such as batch-norm statistics and the "
                "mel filterbank excluded) of NeMo modules built from tests/configs/published/*.yaml; "
                "'total' = encoder + decoder + joint + ctc_decoder (null modules are absent), plus "
                "prompt_kernel where a model lists one (the language-prompt projection of NeMo's "
                "*WithPrompt models). The preprocessor has no parameters.",
        "models": {},
    }
    for path in sorted(CONFIG_DIR.glob("*.yaml")):
        name = path.stem
        res = counts_for(name, path)
        result["models"][name] = res
        logging.info("%-24s total %12d  %s  (nominal %s, ratio %s)", name, res["total"], res["modules"],
                     res["nominal_text"], res["ratio_to_nominal"])
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    logging.info("wrote %s", os.path.relpath(OUT, REPO))
    return 0


if __name__ == "__main__":
    sys.exit(main())
