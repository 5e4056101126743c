"""The Canary-Qwen network (NeMo's speechlm2 `SALM`): the perception module (NeMo's mel front end, a FastConformer
encoder, the `IdentityConnector` adapter and the projection `proj` to the LM's width) and the Qwen3 LM
(`llm.model.DecoderLM`), with its weights read from `model.safetensors`.

Tensor names are SALM's state dict: `perception.preprocessor.featurizer.{fb,window}` (the front end's filterbank
and window as the checkpoint holds them: bfloat16-rounded in the published one, and NeMo runs with those values),
`perception.encoder.*`, `perception.proj.*`, `embed_tokens.weight` (SALM keeps the LM's embedding outside it; the
tied head is the same tensor and is not stored) and the LM under `llm.base_model.model.model.*` (PEFT's wrapper;
`llm.model.*` without LoRA). LoRA: each target layer's `base_layer.weight` + `lora_A.default.weight` +
`lora_B.default.weight` is merged at load into one weight, W + (B @ A) * scale, computed in float32 from the stored
values (NeMo runs them unmerged: base(x) + B(A(x)) * scale; the two differ by float rounding only)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import torch
from torch import nn

from ..errors import ModelError
from ..llm.model import DecoderLM
from ..nemo.checkpoint import adopt, own_names
from ..nemo.conformer import ConformerEncoder
from ..nemo.frontend import NemoMelFrontEnd
from ..safetensors_files import read_tensors, weight_files
from .config import CanaryQwenConfig

PERCEPTION = "perception."
EMBED = "embed_tokens.weight"
LM_PREFIXES = ("llm.base_model.model.model.", "llm.model.")
HEADS = ("llm.base_model.model.lm_head.weight", "llm.lm_head.weight")
LORA_A, LORA_B, BASE = ".lora_A.default.weight", ".lora_B.default.weight", ".base_layer.weight"


class Perception(nn.Module):
    """NeMo's `AudioPerceptionModule` with an IdentityConnector: front end, encoder, projection."""

    def __init__(self, cfg: CanaryQwenConfig):
        super().__init__()
        self.preprocessor = NemoMelFrontEnd(cfg.frontend)
        self.encoder = ConformerEncoder(cfg.encoder)
        self.proj = nn.Linear(cfg.encoder.d_model, cfg.output_dim)


def merge_lora(lm: dict, cfg: CanaryQwenConfig, where: str, dtype: torch.dtype = torch.float32) -> dict:
    """The LM's tensors (names below its prefix) with every LoRA pair merged into its base weight: computed in
    float32, kept in `dtype` (each merged weight cast as it is made, so no float32 copy of them all lives at once)."""
    lora = cfg.lora
    out = {}
    bases = {k[:-len(BASE)] for k in lm if k.endswith(BASE)}
    if bases and lora is None:
        raise ModelError(f"{where}: the checkpoint holds LoRA layers ({sorted(bases)[0]}) but the config has no lora")
    for layer in sorted(bases):
        name = layer.rsplit(".", 1)[-1]
        if name not in lora.targets:
            raise ModelError(f"{where}: LoRA on {layer}, not among the config's target_modules")
        a, b = lm.pop(layer + LORA_A, None), lm.pop(layer + LORA_B, None)
        if a is None or b is None:
            raise ModelError(f"{where}: {layer} has a base layer but not both LoRA matrices")
        w = lm.pop(layer + BASE)
        if a.shape != (lora.r, w.shape[1]) or b.shape != (w.shape[0], lora.r):
            raise ModelError(f"{where}: {layer}'s LoRA matrices {tuple(a.shape)} / {tuple(b.shape)} do not fit its "
                             f"weight {tuple(w.shape)} at rank {lora.r}")
        out[layer + ".weight"] = (w.float() + (b.float() @ a.float()) * lora.scale).to(dtype)
    stray = [k for k in lm if ".lora_" in k]
    if stray:
        raise ModelError(f"{where}: LoRA tensor {stray[0]!r} without its base layer")
    if lora is not None and not bases:
        raise ModelError(f"{where}: the config has lora but the checkpoint holds no LoRA layers")
    out.update(lm)
    return out


class CanaryQwenModel(nn.Module):
    def __init__(self, cfg: CanaryQwenConfig, perception: Perception, lm: DecoderLM,
                 encoder_dtype: torch.dtype = torch.float32):
        super().__init__()
        self.encoder_dtype = encoder_dtype  # what the encoder and the projection take (int8: float32)
        self.config = cfg
        self.perception = perception
        self.language_model = lm
        self.sample_rate = perception.preprocessor.sample_rate

    @classmethod
    def load(cls, path: Path, cfg: CanaryQwenConfig, dtype: torch.dtype = torch.float32,
             int8: Optional[torch.dtype] = None) -> "CanaryQwenModel":
        """The network with the checkpoint's weights, built without a random initialisation: the front end in
        float32 (its filterbank and window the checkpoint's values), the rest in `dtype`. `int8` (the dtype the LM
        computes in): the LM's products int8 (`DecoderLM.quantize_int8`), the encoder's linear layers and pointwise
        convolutions and the projection int8 products (`ConformerEncoder.quantize_int8`, `quant.quantize_linears`),
        their convolutions and norms float32."""
        where = str(path)
        tensors = read_tensors(weight_files(path))
        perception, lm, head = {}, {}, None
        for key, t in tensors.items():
            if key.startswith(PERCEPTION):
                perception[key[len(PERCEPTION):]] = t
            elif key == EMBED:
                lm["embed_tokens.weight"] = t
            elif key in HEADS:
                head = t
            else:
                for prefix in LM_PREFIXES:
                    if key.startswith(prefix):
                        lm[key[len(prefix):]] = t
                        break
                else:
                    raise ModelError(f"{where}: unexpected tensor {key!r} (not of the perception module or the "
                                     "language model)")
        del tensors
        if not cfg.lm.tie_word_embeddings:
            if head is None:
                raise ModelError(f"{where}: the language model's head (untied) is missing")
            lm["lm_head.weight"] = head
        # int8 quantizes the merged weights from float32 (no rounding to the load dtype between)
        merged = merge_lora(lm, cfg, where, torch.float32 if int8 is not None else dtype)
        return cls.build(cfg, perception, merged, where, dtype, int8)

    @classmethod
    def build(cls, cfg: CanaryQwenConfig, perception: dict, lm: dict, where: str, dtype: torch.dtype = torch.float32,
              int8: Optional[torch.dtype] = None) -> "CanaryQwenModel":
        """The network from the perception module's tensors (NeMo's names below `perception.`) and the LM's
        (transformers' names below the LM, LoRA merged); see `load`."""
        with torch.device("meta"):
            perc = Perception(cfg)
        try:
            adopt(perc, own_names(perception), lambda: NemoMelFrontEnd(cfg.frontend))
        except KeyError as e:
            raise ModelError(f"{where}: the perception module's {e.args[0] if e.args else e}") from None
        perception.clear()  # the modules hold the tensors now: each is freed when its layer is converted
        encoder_dtype = torch.float32 if int8 is not None else dtype
        # one conformer layer at a time: its batch norm folded into the depthwise convolution in float32, its
        # linear layers and pointwise convolutions made int8 products from the stored weights (int8), then the
        # rest cast to the encoder's dtype (weights already stored in it stay the checkpoint's mapped tensors): the
        # load never holds a float32 copy of the whole encoder
        from ..quant import Int8Linear, quantize_linears

        perc.preprocessor.float()
        for layer in perc.encoder.layers:
            layer.conv.float()
            layer.conv.fold_batch_norm()
            if int8 is not None:
                quantize_linears(layer)
                layer.conv.quantize_int8()
            layer.to(encoder_dtype)
        if int8 is not None:
            quantize_linears(perc.encoder)  # the subsampling's output projection (the layers' are done)
            perc.proj = Int8Linear.from_linear(perc.proj)
            language_model = DecoderLM.from_tensors(cfg.lm, lm, where, int8=int8)
        else:
            language_model = DecoderLM.from_tensors(cfg.lm, lm, where, dtype)
        perc.encoder.to(encoder_dtype)
        perc.proj.to(encoder_dtype)
        return cls(cfg, perc, language_model, encoder_dtype)

    @property
    def dtype(self) -> torch.dtype:
        return self.language_model.dtype

    def encode(self, audio: torch.Tensor, lengths: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """audio [B, samples] (float32) and lengths -> (mel features [B, n_mels, T], the encoder's output
        [B, T', d_model], the projected rows [B, T', hidden] in the LM's dtype) and their lengths [B]."""
        p = self.perception
        feats, flen = p.preprocessor(audio, lengths)
        enc, enc_len = p.encoder(feats.to(self.encoder_dtype), flen)
        states = enc.transpose(1, 2)
        rows = p.proj(states).to(self.dtype)
        return feats, states, rows, enc_len

    def audio_embeddings(self, audio: torch.Tensor, lengths: torch.Tensor) -> list[torch.Tensor]:
        """Each input's audio rows for the LM ([rows_b, hidden], the LM's dtype)."""
        _, _, rows, n = self.encode(audio, lengths)
        return [rows[i, :int(n[i])] for i in range(rows.shape[0])]
