"""The whole Granite Speech NAR network: encoder -> first hypothesis (BPE CTC) -> projector ->
editor, in one pass; tensors in, token ids out (no text).

Steps (IBM's remote code, revision 99a4df9):
1. the encoder's last state, pooled over windows of 4 frames, gives BPE-CTC logits; greedy CTC (argmax,
   merge repeats, drop the blank) is the first hypothesis y1..yn;
2. the projector turns the taps into T // 5 audio embeddings, divided by the embedding multiplier;
3. the editor reads `[audio | b, y1, b, y2, ..., b, yn, b]` (padded with b to at least
   `min_edit_sequence_length`), and the argmax over the template positions, repeats merged and blanks
   dropped, is the transcript.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from ..search.ctc import collapse
from .config import GraniteConfig
from .editor import GraniteLM
from ..ibm.conformer import EncoderOutput, GraniteEncoder, compute_dtype
from .projector import WindowedQFormer


# IBM's names of the weights an int8 model runs as Int8Linear (`GraniteNAR.quantize_int8`): every matrix
# product of the encoder's blocks and input projection (feed-forwards, attention q / kv / out, the pointwise
# convolutions), of the projector (its input and output projections, the Q-Former's attention and MLP) and
# of the editor's layers (attention q / k / v / o, gate / up / down). What stays float: the embedding and
# the tied LM head (the logits product over the vocabulary), the CTC heads (`encoder.out`, `encoder.out_mid`,
# `encoder.out_bpe`: see quantize_int8), the norms, the depthwise convolution, the relative-position table,
# the projector's queries and window positions.
INT8_WEIGHTS = re.compile(
    r"^(encoder\.(input_linear|layers\.\d+\.(ff[12]\.(up|down)_proj|attn\.to_(q|kv|out)|conv\.(up|down)_conv))"
    r"|projector\.(layer_projector|out_linear|qformer\.layers\.\d+\.(cross_attention\.[qkvo]_proj|mlp\.fc[12]))"
    r"|language_model\.model\.layers\.\d+\.(self_attn\.[qkvo]_proj|mlp\.(gate|up|down)_proj))\.weight$")


class _LanguageModel(nn.Module):
    """`language_model.*`: the LM body and, when the checkpoint does not tie it, its own head."""

    def __init__(self, cfg: GraniteConfig, tied: bool):
        super().__init__()
        self.model = GraniteLM(cfg.text)
        self.lm_head = None if tied else nn.Linear(cfg.text.hidden_size, cfg.text.vocab_size, bias=False)

    def head_weight(self) -> torch.Tensor:
        return self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight


def ctc_collapse(ids: list[int], blank: int) -> list[int]:
    """A frame-wise argmax -> its token ids: repeats merged, blanks dropped."""
    return [run.id for run in collapse(ids, blank)]


@dataclass
class Pass:
    """What one batch's pass leaves: each input's final ids and first hypothesis, and what the
    BPE-CTC log-probs of chosen ids are made from (for word times): the pooled states, each frame's
    log-sum-exp over the vocabulary, and each input's count of frames."""

    ids: list[list[int]]
    first: list[list[int]]
    pooled: torch.Tensor  # [B, ceil(T / 4), D], the model's dtype and device
    bpe_lse: torch.Tensor  # [B, ceil(T / 4)] float32
    bpe_lengths: list[int]
    stages: Optional[dict] = None


# Rows of a vocabulary-wide head computed at a time: its logits are never held whole ([frames x 100352]
# would be hundreds of MB), and each matmul reads a slice of the weight (no copy of the whole table).
VOCAB_CHUNK = 8192


def scan_head(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None,
              lse: bool = False) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """x [N, D] -> the argmax over the head's outputs (the first on a tie, as torch.argmax) and, when
    asked, the log-sum-exp (float32), a slice of VOCAB_CHUNK outputs at a time."""
    n = x.shape[0]
    best = torch.full((n,), float("-inf"), device=x.device)
    arg = torch.zeros(n, dtype=torch.long, device=x.device)
    m = torch.full((n,), float("-inf"), device=x.device)
    total = torch.zeros(n, device=x.device)
    for v0 in range(0, weight.shape[0], VOCAB_CHUNK):
        w = weight[v0:v0 + VOCAB_CHUNK]
        logits = F.linear(x, w, None if bias is None else bias[v0:v0 + VOCAB_CHUNK]).float()
        val, idx = logits.max(dim=-1)
        better = val > best
        best = torch.where(better, val, best)
        arg = torch.where(better, idx + v0, arg)
        if lse:
            new_m = torch.maximum(m, val)
            total = total * torch.exp(m - new_m) + torch.exp(logits - new_m[:, None]).sum(dim=-1)
            m = new_m
    return arg, (m + torch.log(total) if lse else None)


class GraniteNAR(nn.Module):
    def __init__(self, cfg: GraniteConfig, tied: Optional[bool] = None):
        super().__init__()
        self.cfg = cfg
        tied = cfg.text.tie_word_embeddings if tied is None else tied
        self.encoder = GraniteEncoder(cfg.encoder, cfg.encoder_layer_indices)
        self.projector = WindowedQFormer(cfg.projector)
        self.language_model = _LanguageModel(cfg, tied)

    @classmethod
    def random(cls, config: dict, seed: int = 0, dtype: torch.dtype = torch.float32, device="cpu") -> "GraniteNAR":
        """A model of a config.json's architecture with random weights (for speed and memory
        measurements): built on the meta device, then each tensor made once in `dtype` (no float32
        copy of a bfloat16 model), BatchNorm folded as a loaded model's is."""
        from .config import parse_config

        cfg = parse_config(config)
        with torch.device("meta"):
            model = cls(cfg)
        model.to(dtype)  # on the meta device: no memory yet
        model.to_empty(device=device)
        gen = torch.Generator(device="cpu").manual_seed(seed)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith("bias") or "batch_norm" in name:
                    p.zero_()
                elif p.dim() == 1:  # norm scales
                    p.fill_(1.0)
                else:
                    # drawn a slice of rows at a time: no float32 copy of a whole table (the
                    # embedding's would be 800 MB) is left behind in the allocator's heap
                    fan_in = p.shape[-1] if p.dim() > 1 else 1
                    rows = p.view(p.shape[0], -1)
                    step = max(1, (1 << 22) // rows.shape[1])
                    for r0 in range(0, rows.shape[0], step):
                        part = rows[r0:r0 + step]
                        part.copy_(torch.randn(part.shape, generator=gen, dtype=torch.float32) * (fan_in ** -0.5))
            for mod in model.modules():
                if isinstance(mod, nn.BatchNorm1d):
                    mod.running_mean.zero_()
                    mod.running_var.fill_(1.0)
                    mod.weight.fill_(1.0)
            for layer in model.encoder.layers:  # the non-persistent tables to_empty left unset
                c = cfg.encoder.context_size
                pos = torch.arange(c, device=device)
                layer.attn.dists = (pos[:, None] - pos[None, :]).clamp(-c, c) + cfg.encoder.max_pos_emb
        model.encoder.fold_batch_norm()
        model.eval()
        model.requires_grad_(False)
        return model

    @property
    def dtype(self) -> torch.dtype:
        """The compute dtype (float32 for an int8 model: everything not int8 is float32)."""
        return compute_dtype(self.encoder.input_linear)

    @torch.no_grad()
    def quantize_int8(self) -> int:
        """dtype int8: the layers INT8_WEIGHTS names become Int8Linear (int8 weights per output row,
        activations quantized per row at run time: transcribe/quant.py), each float weight freed as its
        int8 copy is made; the pointwise convolutions [N, K, 1] as the [N, K] matrix products they are.
        The model must be float32 (the rest of an int8 model computes in float32). Returns how many
        layers were quantized.

        The CTC heads stay float: the BPE head decides the first hypothesis and gives the word times'
        log-probs (and over a real model's 100k-entry vocabulary it is scanned a slice at a time, which an
        int8 layer's whole-vocabulary output would not be), the character head's softmax drives the
        self-conditioning and the pooling weights; they are 3 of the model's smallest products. Measured
        on the tiny checkpoint: the int8 model gives float32's ids on wave_A/B/C and jfk
        (tests/test_granite_int8.py asserts wave_A/B/C), and so did the same model with `encoder.out` and
        `encoder.out_mid` int8 too and the BPE head's weight rounded to its int8 rows: no accuracy
        difference to decide by there, so what decides is the above. On CUDA, Int8Linear's `torch._int_mm`
        wants K and N multiples of 8 (not checked on a GPU here)."""
        if self.dtype != torch.float32:
            raise ValueError(f"int8 quantization starts from a float32 model, not {self.dtype}")
        from ..quant import quantize_matching

        return quantize_matching(self, INT8_WEIGHTS.match)

    # ------------------------------------------------------------------------------------------
    def hypotheses(self, best: torch.Tensor, lengths: list[int]) -> list[list[int]]:
        """Greedy CTC over the BPE head's argmax [B, P]: token ids of each input's first hypothesis."""
        cfg = self.cfg
        best = best.tolist()
        out = []
        for row, n in zip(best, lengths):
            ids = ctc_collapse(row[:n], cfg.bpe_blank_channel)
            out.append([k - cfg.bpe_id_offset for k in ids])
        return out

    def template(self, hyp: list[int]) -> list[int]:
        """[b, y1, b, y2, ..., b, yn, b], padded with b to at least min_edit_sequence_length."""
        b = self.cfg.blank_token_id
        out = [b] * max(2 * len(hyp) + 1, self.cfg.min_edit_sequence_length)
        out[1:2 * len(hyp):2] = hyp
        return out

    def forward(self, features: torch.Tensor, lengths: torch.Tensor, keep: bool = False) -> Pass:
        """features [B, T, 160] (zero past each length), lengths [B] encoder frames (each >= 1)."""
        cfg = self.cfg
        lens = [int(x) for x in lengths.tolist()]
        enc: EncoderOutput = self.encoder(features, lengths, keep=keep)
        w = cfg.encoder.bpe_pooling_window
        bpe_lens = [-(-n // w) for n in lens]
        b, p, d = enc.pooled.shape
        head = self.encoder.out_bpe
        best, lse = scan_head(enc.pooled.reshape(b * p, d), head.weight, head.bias, lse=True)
        first = self.hypotheses(best.view(b, p), bpe_lens)
        proj = self.projector(enc.taps, lengths)
        if cfg.scale_projected_embeddings:
            proj = proj / cfg.text.embedding_multiplier
        audio = [n // cfg.projector.downsample_rate for n in lens]
        templates = [self.template(h) for h in first]
        best_text, logits, inputs, positions, hidden = self._edit(proj, audio, templates, keep)
        ids = [ctc_collapse(row, cfg.blank_token_id) for row in best_text]
        stages = None
        if keep:
            stages = {
                "enc.input_linear.out": enc.embedded, "enc.blocks": enc.blocks, "enc.mid_logits": enc.mid_logits,
                "enc.cat_out": torch.cat(enc.taps, dim=-1), "enc.pooled": enc.pooled,
                "enc.bpe_logits": enc.bpe_logits, "proj.out": proj * (cfg.text.embedding_multiplier
                                                                      if cfg.scale_projected_embeddings else 1.0),
                "lm.inputs_embeds": inputs, "lm.position_ids": positions, "lm.last_hidden_state": hidden,
                "text_logits": logits, "templates": templates,
            }
        return Pass(ids, first, enc.pooled, lse.view(b, p), bpe_lens, stages)

    def bpe_logprobs(self, pooled: torch.Tensor, lse: torch.Tensor, channels: list[int]) -> torch.Tensor:
        """Log-probs of the BPE head's `channels` at each frame: [P, len(channels)] float32 from one
        input's pooled states [P, D] and their log-sum-exp [P]."""
        head = self.encoder.out_bpe
        idx = torch.tensor(channels, device=pooled.device)
        return F.linear(pooled, head.weight[idx], head.bias[idx]).float() - lse[:, None]

    def _edit(self, audio_embeds: torch.Tensor, audio: list[int], templates: list[list[int]], keep: bool):
        """One editor pass over every input of the batch; the template positions' logits per input."""
        lm = self.language_model
        embed = lm.model.embed_tokens
        dev = audio_embeds.device
        sizes = [a + len(t) for a, t in zip(audio, templates)]
        width = max(sizes)
        b, d = len(templates), audio_embeds.shape[-1]
        inputs = audio_embeds.new_zeros(b, width, d)
        positions = torch.zeros(b, width, dtype=torch.long, device=dev)
        for i, (a, t) in enumerate(zip(audio, templates)):
            inputs[i, :a] = audio_embeds[i, :a]
            inputs[i, a:a + len(t)] = embed(torch.tensor(t, device=dev))
            positions[i, :sizes[i]] = torch.arange(sizes[i], device=dev)
        lengths = torch.tensor(sizes, device=dev)
        hidden = lm.model(inputs, positions, lengths)
        rows = torch.cat([hidden[i, a:a + len(t)] for i, (a, t) in enumerate(zip(audio, templates))])
        sizes_t = [len(t) for t in templates]
        best, _ = scan_head(rows, lm.head_weight())  # dividing by logits_scaling > 0 keeps the argmax
        best = [r.tolist() for r in best.split(sizes_t)]
        if not keep:
            return best, None, None, None, None
        logits = F.linear(rows, lm.head_weight()).float() / self.cfg.text.logits_scaling
        return best, list(logits.split(sizes_t)), inputs, positions, hidden


def build(cfg: GraniteConfig, state: dict, tied: bool = True) -> GraniteNAR:
    """A model built on the meta device that adopts `state`'s tensors (IBM's names); every tensor the
    model has must be there and nothing else may be (a ModelError names the difference)."""
    from ..errors import ModelError

    state = dict(state)
    if tied:
        state.pop("language_model.lm_head.weight", None)
    with torch.device("meta"):
        model = GraniteNAR(cfg, tied=tied)
    own = {k: v for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked")}
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"missing {len(missing)} tensors ({', '.join(missing[:4])})")
        if unexpected:
            parts.append(f"{len(unexpected)} tensors this model does not have ({', '.join(unexpected[:4])})")
        raise ModelError("weights do not fit the config: " + "; ".join(parts))
    for k, t in own.items():
        if tuple(state[k].shape) != tuple(t.shape):
            raise ModelError(f"weights do not fit the config: {k} is {tuple(state[k].shape)}, the config makes {tuple(t.shape)}")
    model.load_state_dict(state, strict=False, assign=True)
    model.encoder.fold_batch_norm()
    model.eval()
    model.requires_grad_(False)
    return model
