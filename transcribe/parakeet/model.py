"""Parakeet heads (LSTM predictor, joint, CTC head) and the Parakeet model that joins them.

Module and parameter names follow NeMo's state dict (`decoder.prediction.*`, `joint.*`,
`ctc_decoder.*` / `decoder.decoder_layers.*`), so checkpoints load without renaming. The model is
built from NeMo's config as `config.parse_config` reads and checks it (`ParakeetConfig`).
"""
from __future__ import annotations

import os
from typing import Optional, Union

import torch
import torch.nn.functional as F
from torch import nn

from ..modules import embedding_weight, label_lstm_step
from ..quant import Int8Linear, quantize_linears
from ..search.transducer import DEFAULT_MAX_SYMBOLS

from .config import ParakeetConfig, parse_config
from ..nemo.frontend import NemoMelFrontEnd
from ..nemo.conformer import MODEL_DEFAULT, ConformerEncoder


class _LSTM(nn.Module):
    def __init__(self, hidden: int, layers: int):
        super().__init__()
        self.lstm = nn.LSTM(hidden, hidden, num_layers=layers, batch_first=True)

    def forward(self, x, state):
        return self.lstm(x, state)


class _Prediction(nn.Module):
    def __init__(self, vocab_with_blank: int, hidden: int, layers: int):
        super().__init__()
        self.embed = nn.Embedding(vocab_with_blank, hidden, _weight=embedding_weight(vocab_with_blank, hidden))
        self.dec_rnn = _LSTM(hidden, layers)


class Predictor(nn.Module):
    """NeMo `RNNTDecoder`: embedding (blank as padding: the blank's row is zero) + LSTM."""

    def __init__(self, vocab_size: int, pred_hidden: int, pred_rnn_layers: int = 1):
        super().__init__()
        self.blank = vocab_size
        self.hidden = pred_hidden
        self.layers = pred_rnn_layers
        self.prediction = _Prediction(vocab_size + 1, pred_hidden, pred_rnn_layers)
        self.int8 = False

    def initial_state(self, batch: int, device=None, dtype=torch.float32):
        z = torch.zeros(self.layers, batch, self.hidden, device=device, dtype=dtype)
        return (z, z.clone())

    def forward(self, labels: torch.Tensor, state) -> tuple[torch.Tensor, tuple]:
        """labels [B] -> output [B, H], new state. The blank label embeds to zeros (start of sequence);
        one step of the LSTM stack written out (`modules.label_lstm_step`)."""
        return label_lstm_step(self.__dict__.setdefault("_fused", {}), self.prediction.embed.weight, self.blank,
                               self.prediction.dec_rnn.lstm, self.int8, labels, state)

    def quantize_int8(self) -> None:
        """The LSTM's matrix products on the hidden state (and a later layer's input) in int8
        (transcribe/quant.py); the first layer's input table stays in floating point."""
        self.int8 = True
        self.__dict__.pop("_fused", None)


class Joint(nn.Module):
    """NeMo `RNNTJoint`: enc and pred projections, activation, output layer (tokens + blank + durations)."""

    def __init__(self, enc_hidden: int, pred_hidden: int, joint_hidden: int, n_out: int, activation: str, out_index: int):
        super().__init__()
        self.enc = nn.Linear(enc_hidden, joint_hidden)
        self.pred = nn.Linear(pred_hidden, joint_hidden)
        acts = {"relu": nn.ReLU(), "tanh": nn.Tanh(), "sigmoid": nn.Sigmoid(), "swish": nn.SiLU(), "silu": nn.SiLU()}
        if activation not in acts:
            raise ValueError(f"joint.jointnet.activation = {activation!r} is not implemented ({', '.join(acts)})")
        layers: list[nn.Module] = [acts[activation]] + [nn.Identity() for _ in range(out_index - 1)]
        layers.append(nn.Linear(joint_hidden, n_out))
        self.joint_net = nn.Sequential(*layers)

    def project_encoder(self, enc: torch.Tensor) -> torch.Tensor:
        return self.enc(enc)

    def project_predictor(self, pred: torch.Tensor) -> torch.Tensor:
        return self.pred(pred)

    def forward(self, enc_proj: torch.Tensor, pred_proj: torch.Tensor) -> torch.Tensor:
        """Projected encoder frames and predictor outputs of the same leading shape -> logits."""
        x = enc_proj + pred_proj
        if (x.dim() == 2 and 1 < x.shape[0] <= 16 and not torch.is_grad_enabled()
                and isinstance(self.joint_net[-1], nn.Linear)):
            # a few rows (a beam's hypotheses, a small batch): the output layer as one product with
            # its weight stored transposed, which MKL ran ~1.5-2x faster than nn.Linear's layout at
            # 2-16 rows here (TDT 0.6B malsd beam 4, 60 s: joint 77 -> 58 ms)
            *hidden, out = self.joint_net
            for layer in hidden:
                x = layer(x)
            return torch.addmm(out.bias, x, self._out_t(out))
        return self.joint_net(x)

    def _out_t(self, out: nn.Linear) -> torch.Tensor:
        cache = self.__dict__.setdefault("_t", {})
        key = (out.weight.data_ptr(), out.weight.dtype, out.weight.device)
        got = cache.get(key)
        if got is None:  # (threads may race here: each then makes its own copy, all equal)
            got = out.weight.detach().t().contiguous()
            cache.clear()
            cache[key] = got
        return got


class CTCHead(nn.Module):
    """NeMo `ConvASRDecoder`: a 1x1 convolution to vocabulary + blank, then log-softmax."""

    def __init__(self, feat_in: int, n_classes_with_blank: int):
        super().__init__()
        self.decoder_layers = nn.Sequential(nn.Conv1d(feat_in, n_classes_with_blank, 1))

    def forward(self, enc: torch.Tensor) -> torch.Tensor:
        """enc [B, D, T] -> log-probs [B, T, V+1]."""
        return F.log_softmax(self.decoder_layers(enc).transpose(1, 2).float(), dim=-1)


class PromptKernel(nn.Sequential):
    """NeMo's language prompt (`prompt_kernel` of the *WithPrompt models, Nemotron 3.5 ASR).

    Linear(d_model + num_prompts -> 2 d_model), ReLU, Linear(2 d_model -> d_model), stored as NeMo's
    nn.Sequential (`prompt_kernel.0.*`, `prompt_kernel.2.*`). At inference it maps the encoder
    output to the conditioned encoder output that the heads (joint, and the CTC head of a hybrid)
    read: each frame [d_model] is concatenated with the one-hot vector [num_prompts] of the
    language's prompt index, the same index for every frame of an utterance, and projected back to
    d_model. Offline it runs on the whole encoder output (NeMo's forward with prompt_indices); in
    cache-aware streaming on each chunk's encoder output as it comes (NeMo's conformer_stream_step
    -> _apply_prompt_to_encoded), frame by frame, so chunking does not change it.
    """

    def __init__(self, d_model: int, num_prompts: int):
        super().__init__(nn.Linear(d_model + num_prompts, 2 * d_model), nn.ReLU(), nn.Linear(2 * d_model, d_model))
        self.d_model = d_model
        self.num_prompts = num_prompts

    def condition(self, enc: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """enc [B, d_model, T] and prompt indices [B] -> [B, d_model, T], in enc's dtype."""
        b, _, t = enc.shape
        x = enc.transpose(1, 2).to(self[0].weight.dtype)
        one_hot = x.new_zeros(b, t, self.num_prompts)
        one_hot.scatter_(2, index.to(device=x.device, dtype=torch.long).view(b, 1, 1).expand(b, t, 1), 1.0)
        return self(torch.cat([x, one_hot], dim=-1)).to(enc.dtype).transpose(1, 2)


class ParakeetModel(nn.Module):
    """Front end + FastConformer encoder + transducer (TDT / RNN-T) and/or CTC head."""

    def __init__(self, cfg: dict):
        """A model from NeMo's config dict (`model_config.yaml`), parsed and checked by
        `config.parse_config` (a setting this code does not implement is an error), with fresh
        weights: `load_nemo_state_dict` gives it a checkpoint's."""
        super().__init__()
        self.cfg = cfg
        config = parse_config(cfg)
        self.config: ParakeetConfig = config
        self.preprocessor = NemoMelFrontEnd(config.preprocessor)
        self.sample_rate = config.sample_rate
        self.encoder = ConformerEncoder(config.encoder)
        self._build_transducer(config)
        ctc = config.ctc
        self.ctc_decoder: Optional[CTCHead] = CTCHead(ctc.feat_in, ctc.num_classes + 1) if ctc else None
        self.vocab_size = config.vocab_size
        prompt = config.prompt
        self.prompt_kernel: Optional[PromptKernel] = (
            PromptKernel(self.encoder.d_model, prompt.num_prompts) if prompt else None)
        self.prompt_dictionary: dict[str, int] = dict(prompt.dictionary) if prompt else {}
        self.blank = self.vocab_size
        # Seconds per encoder frame: hop x subsampling / rate (see `frame_seconds`).
        self.frame_stride = self.preprocessor.hop_length * self.encoder.subsampling_factor

    def _build_transducer(self, config: ParakeetConfig) -> None:
        """The predictor and joint of a transducer model (None for a CTC model) and what the joint's
        extra outputs are (`transducer` 'tdt' with `durations`, or 'rnnt')."""
        t = config.transducer
        self.transducer: Optional[str] = t.kind if t else None
        self.durations: Optional[list[int]] = list(t.durations) if t and t.durations is not None else None
        self.max_symbols = t.max_symbols if t else DEFAULT_MAX_SYMBOLS
        self.decoder: Optional[Predictor] = Predictor(t.vocab_size, t.pred_hidden, t.pred_rnn_layers) if t else None
        self.joint: Optional[Joint] = None
        if t:
            self.joint = Joint(t.joint_enc_hidden, t.joint_pred_hidden, t.joint_hidden, t.joint_outputs,
                               t.activation, t.out_index)

    @classmethod
    def random(cls, cfg: Union[dict, str, os.PathLike], seed: int = 0, device="cpu",
               dtype: Optional[torch.dtype] = None) -> "ParakeetModel":
        """A model with random weights (for benchmarks and tests) from a config dict or a yaml file
        such as tests/configs/published/<name>.yaml, in eval mode on `device`; `dtype` applies to
        the encoder (and the prompt projection), as a loaded model's does."""
        if not isinstance(cfg, dict):
            import yaml

            with open(cfg, encoding="utf-8") as f:
                cfg = yaml.safe_load(f)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            with torch.device("cpu"):
                model = cls(cfg)
        model.eval().to(device)
        if dtype is not None and dtype != torch.float32:
            model.encoder.to(dtype)
            if model.prompt_kernel is not None:
                model.prompt_kernel.to(dtype)
        return model

    def prompt_index(self, language: Union[str, int, None] = None) -> int:
        """The prompt index of `language`: a key of the config's prompt_dictionary (a locale such as
        'en-US', or 'auto', NeMo's default) or an index; for a model with a language prompt only."""
        if self.prompt_kernel is None:
            raise ValueError("this model has no language prompt")
        if language is None:
            language = "auto"
        if isinstance(language, int) and not isinstance(language, bool):
            index = language
        elif str(language) in self.prompt_dictionary:
            index = self.prompt_dictionary[str(language)]
        else:
            known = ", ".join(sorted(self.prompt_dictionary)[:20]) or "none in the config"
            raise ValueError(f"language {language!r} is not in the model's prompt dictionary ({known}...)")
        if not 0 <= index < self.prompt_kernel.num_prompts:
            raise ValueError(f"prompt index {index} is outside 0..{self.prompt_kernel.num_prompts - 1}")
        return index

    def apply_prompt(self, enc: torch.Tensor, language: Union[str, int, None] = None) -> torch.Tensor:
        """Encoder output [B, d_model, T] -> the conditioned output the heads read (see `PromptKernel`);
        unchanged for a model without a language prompt (where `language` must be None)."""
        if self.prompt_kernel is None:
            if language is not None:
                raise ValueError("this model has no language prompt; language must be None")
            return enc
        index = torch.full((enc.shape[0],), self.prompt_index(language), dtype=torch.long, device=enc.device)
        return self.prompt_kernel.condition(enc, index)

    @property
    def heads(self) -> list[str]:
        out = []
        if self.transducer:
            out.append(self.transducer)
        if self.ctc_decoder is not None:
            out.append("ctc")
        return out

    def frame_seconds(self, frames: float) -> float:
        """The one place where encoder frames become seconds."""
        return float(frames) * self.frame_stride / self.sample_rate

    def load_nemo_state_dict(self, sd: dict[str, torch.Tensor]) -> None:
        """Load a NeMo state dict: the CTC head of a pure CTC model is stored as `decoder.*`."""
        own = {}
        for k, v in sd.items():
            if k.startswith("preprocessor.featurizer."):
                own["preprocessor." + k[len("preprocessor.featurizer."):]] = v
            elif k.startswith("decoder.decoder_layers.") and self.decoder is None:
                own["ctc_decoder." + k[len("decoder."):]] = v
            elif k.endswith("num_batches_tracked"):
                continue
            else:
                own[k] = v
        expected = self.state_dict()
        missing = [k for k in expected if k not in own and not k.startswith("preprocessor.") and not k.endswith("num_batches_tracked")]
        unexpected = [k for k in own if k not in expected]
        if missing or unexpected:
            raise KeyError(
                "checkpoint does not match the config: "
                + (f"missing {missing[:5]}{'...' if len(missing) > 5 else ''} " if missing else "")
                + (f"unexpected {unexpected[:5]}{'...' if len(unexpected) > 5 else ''}" if unexpected else "")
            )
        for k, v in own.items():
            if expected[k].shape != v.shape:
                raise KeyError(f"checkpoint tensor {k} has shape {tuple(v.shape)}, config expects {tuple(expected[k].shape)}")
        # assign=True adopts the checkpoint's tensors (no copy): a model built on the meta device
        # costs no memory and no initialization before this.
        self.load_state_dict(own, strict=False, assign=True)
        self._materialize()

    def _materialize(self) -> None:
        """Give real values to what a checkpoint does not hold, after a build on the meta device."""
        pre = self.preprocessor
        for name in ("window", "fb"):
            if getattr(pre, name).is_meta:
                fresh = NemoMelFrontEnd(self.config.preprocessor)
                setattr(pre, name, getattr(fresh, name))
        self.encoder.pos_enc.reset()
        for name, t in list(self.named_parameters()) + list(self.named_buffers()):
            if t.is_meta and not name.endswith("num_batches_tracked"):
                raise KeyError(f"checkpoint lacks {name}")

    @torch.no_grad()
    def quantize_int8(self) -> None:
        """dtype int8: the encoder's linear layers and pointwise convolutions, the predictor's LSTM
        products and the joint's linear layers run as int8 matrix products (transcribe/quant.py:
        weights per output channel, activations per row); everything else stays float32."""
        self.encoder.quantize_int8()
        if getattr(self, "decoder", None) is not None:
            self.decoder.quantize_int8()
        if getattr(self, "joint", None) is not None:
            quantize_linears(self.joint)

    @torch.no_grad()
    def features(self, audio: torch.Tensor, lengths: torch.Tensor):
        return self.preprocessor(audio, lengths)

    @torch.no_grad()
    def encode(self, audio: torch.Tensor, lengths: torch.Tensor, local_context=MODEL_DEFAULT,
               language: Union[str, int, None] = None):
        """audio [B, samples], lengths -> encoder output [B, d_model, T'] and lengths; local_context
        as `ConformerEncoder.forward` (this call's attention, the model's own by default). A model
        with a language prompt conditions the output on `language` (`apply_prompt`; 'auto' by
        default, as NeMo's transcribe)."""
        feats, flen = self.preprocessor(audio, lengths)
        dtype = next(self.encoder.parameters()).dtype
        enc, enc_len = self.encoder(feats.to(dtype), flen, local_context)
        if self.prompt_kernel is not None or language is not None:
            enc = self.apply_prompt(enc, language)
        return enc, enc_len
