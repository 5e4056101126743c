"""Greedy decoding of one sequence as transformers' generate runs Voxtral Realtime, offline and streaming.

The prompt is BOS and `[STREAMING_PAD]` x (left-pad + delay tokens); every position's input row is its token's
embedding plus the audio embedding of the same position (one per 80 ms: 8 mel frames, 4 encoder frames). The
prompt's rows go in at once (with the first audio embeddings), then each chosen token is fed back with the next
audio embedding, so the text runs `delay` tokens behind the audio. A stop token (generation_config's eos) ends the
sequence; else it ends with the audio: offline after as many positions as the padded input has audio embeddings
(transformers' max_length), streaming when the audio runs out.

`Run` holds one sequence's state: the convolution stem's carried frames, the encoder's and the LM's sliding-window
caches, the delay's per-layer scales and the tokens so far. Offline, the stem and the encoder take the whole input
in a few large blocks; streaming, one token's frames at a time: the same operations on the same frames."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np
import torch

from .encoder import ConvState
from .frontend import StreamMel
from .model import VoxtralRealtimeModel

# Encoder frames per call offline: large blocks for speed, bounded for memory.
ENCODER_BLOCK = 2048


@dataclass
class Step:
    """A chosen token: its id, its position in the sequence (prompt included) and its log-probability."""

    id: int
    position: int
    logprob: float


@dataclass
class Run:
    model: VoxtralRealtimeModel
    prompt: Sequence[int]
    delay_tokens: int
    stop_ids: Sequence[int]
    steps: list = field(default_factory=list)
    stopped: bool = False

    def __post_init__(self):
        m = self.model
        device = m.language_model.norm.weight.device
        self.device = device
        self.scales = m.language_model.time_scales(self.delay_tokens)
        self.conv = ConvState()
        self.enc_cache = m.audio_tower.new_cache(device)
        self.lm_cache = m.language_model.new_window_cache(device)
        self.pending = torch.zeros(0, m.config.encoder.hidden, dtype=m.encoder_dtype, device=device)
        self._stops = frozenset(int(t) for t in self.stop_ids)

    @property
    def position(self) -> int:
        """Positions the LM has taken (prompt included)."""
        return self.lm_cache.position

    # -- audio
    @torch.inference_mode()
    def audio_rows(self, mel: torch.Tensor, block: int = ENCODER_BLOCK) -> torch.Tensor:
        """Mel frames [n_mels, 8 k] after those already given -> k audio embeddings [k, D] (the LM's dtype)."""
        m = self.model
        tower = m.audio_tower
        x = tower.embedder(mel.to(device=self.device, dtype=tower.embedder.conv1.weight.dtype)[None], self.conv)
        x = x.to(tower.dtype)
        outs = []
        step = max(block - block % m.config.downsample, m.config.downsample)
        for i in range(0, x.shape[1], step):
            outs.append(tower(x[:, i:i + step], self.enc_cache))
        frames = torch.cat(outs, dim=1) if outs else x
        return m.multi_modal_projector(frames)[0].to(m.dtype)

    # -- text
    def _choose(self, hidden: torch.Tensor) -> Optional[int]:
        lm = self.model.language_model
        logits = lm.logits(hidden[:, -1]).to(torch.float32)[0]
        token = int(torch.argmax(logits))
        logprob = float(torch.log_softmax(logits, dim=-1)[token])
        if token in self._stops:
            self.stopped = True
            return None
        self.steps.append(Step(token, self.position, logprob))
        return token

    @torch.inference_mode()
    def prefill(self, rows: torch.Tensor) -> Optional[int]:
        """The prompt with its audio embeddings rows [len(prompt), D] -> the first token (None: a stop token)."""
        lm = self.model.language_model
        if rows.shape[0] != len(self.prompt):
            raise ValueError(f"the prompt has {len(self.prompt)} positions, {rows.shape[0]} audio embeddings came")
        ids = torch.tensor(list(self.prompt), dtype=torch.long, device=self.device)
        x = lm.embed(ids[None]) + rows[None]
        return self._choose(lm.run(x, self.lm_cache, self.scales))

    @torch.inference_mode()
    def step(self, row: torch.Tensor) -> Optional[int]:
        """The last token fed back with the next audio embedding row [D] -> the next token (None: a stop token)."""
        if self.stopped or not self.steps:
            raise ValueError("no token to feed back")
        lm = self.model.language_model
        last = torch.tensor([[self.steps[-1].id]], dtype=torch.long, device=self.device)
        x = lm.embed(last) + row[None, None]
        return self._choose(lm.run(x, self.lm_cache, self.scales))

    @property
    def ids(self) -> list[int]:
        return [s.id for s in self.steps]


def decode_offline(run: Run, mel: torch.Tensor, block_tokens: int = 512) -> Run:
    """The whole input's features (frames a multiple of 8) through `run`: transformers' offline generate. The audio
    embeddings are made `block_tokens` at a time as the decoding reaches them (the stem's and the encoder's state
    carried), so a long input holds one block of them."""
    per = run.model.config.frames_per_token
    total = mel.shape[1] // per
    p = len(run.prompt)
    if total < p:
        raise ValueError(f"{total} audio embeddings are fewer than the prompt's {p} positions")

    def rows():
        for a in range(0, total, max(block_tokens, p)):
            yield from run.audio_rows(mel[:, a * per:min(total, a + max(block_tokens, p)) * per])

    it = rows()
    first = torch.stack([next(it) for _ in range(p)])
    token = run.prefill(first)
    for _ in range(p, total - 1):
        if token is None:
            break
        token = run.step(next(it))
    return run


class LiveDecoder:
    """A stream's decoding (transformers' streaming generate over its processor's chunks, `frontend.StreamMel`):
    `feed(pcm)` and `finish()` return the tokens chosen with the audio so far. `finish()` adds the right padding
    (delay + 1 + 10 tokens of silence) that the offline request adds, and decodes the groups it completes."""

    def __init__(self, run: Run, frontend: StreamMel, right_pad_samples: int):
        self.run = run
        self.frontend = frontend
        self.right_pad = right_pad_samples
        self.finished = False

    def feed(self, pcm) -> list[Step]:
        self.frontend.feed(pcm)
        return self._advance(None)

    def finish(self) -> list[Step]:
        if self.finished:
            return []
        self.finished = True
        self.frontend.feed(np.zeros(self.right_pad, np.float32))
        return self._advance(self.frontend.total)

    def _advance(self, final_total) -> list[Step]:
        run = self.run
        mel = self.frontend.take(final_total)
        if mel.shape[1] == 0 or run.stopped:
            return []
        before = len(run.steps)
        rows = run.audio_rows(mel)
        i = 0
        if not run.steps:
            p = len(run.prompt)
            run.prefill(rows[:p])
            i = p
        for j in range(i, rows.shape[0]):
            if run.stopped:
                break
            run.step(rows[j])
        return run.steps[before:]
