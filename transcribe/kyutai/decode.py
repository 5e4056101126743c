"""Greedy decoding in lockstep with the audio, as transformers' generate runs this model: position 0 reads the
initial text token and the audio BOS id in every codebook, position p >= 1 the token chosen at p - 1 and the codec's
frame p - 1; one token is chosen per position, as many positions as the padded input has whole 1920-sample frames
(transformers' max_new_tokens), stopping early at a stop token (generation_config's eos_token_id; the published
models have none).

`Decoder` is the one loop offline and live: `push(samples)` takes padded audio (whole frames are encoded as they
complete, a partial one waits), `run(last_position)` chooses the tokens the encoded frames allow, up to a bound.
Its state is the codec's (`mimi.MimiEncoder.new_state`), the LM's window cache and a few frames of codes: the same
size after an hour as after a second."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch


@dataclass(frozen=True)
class Step:
    id: int
    position: int  # the LM position that chose it (0-based; the token after the initial one is chosen at 0)
    logprob: float


class Decoder:
    def __init__(self, model, block_frames: int = 750):
        self.model = model
        cfg = model.config
        self.frame = cfg.mimi.frame_size
        self.k = cfg.lm.num_codebooks
        self.block = block_frames * self.frame  # at most this much audio encoded at once (the codec attends in T x T)
        self.device = next(model.parameters()).device
        self.codec_state = model.mimi.new_state()
        self.cache = model.lm.new_cache()
        self.pending = np.zeros(0, np.float32)
        self.codes: deque = deque()  # encoded frames (tensors of num_codebooks ids) not yet read by the LM
        self.frames = 0  # frames encoded so far
        self.position = 0  # the next LM position
        self.prev = cfg.bos_token_id
        self.stopped = False
        self.steps: list[Step] = []
        bos = torch.full((self.k,), cfg.lm.audio_bos_token_id, dtype=torch.long, device=self.device)
        self._audio_bos = bos

    @torch.inference_mode()
    def push(self, samples: np.ndarray) -> None:
        """Padded audio at 24 kHz (any length): encodes the frames it completes."""
        buf = np.concatenate([self.pending, np.asarray(samples, np.float32)]) if self.pending.size else \
            np.asarray(samples, np.float32)
        whole = (buf.size // self.frame) * self.frame
        for a in range(0, whole, self.block):
            b = min(whole, a + self.block)
            codes, self.codec_state = self.model.mimi.encode(torch.from_numpy(buf[a:b]).to(self.device),
                                                             self.codec_state, self.k)
            self.codes.extend(codes.unbind(0))
            self.frames += codes.shape[0]
        self.pending = buf[whole:].copy()

    @torch.inference_mode()
    def run(self, last: Optional[int] = None) -> list[Step]:
        """Chooses the tokens of positions the encoded frames allow (position p needs frame p - 1), up to position
        `last` (inclusive; None: no bound); the new steps."""
        new = []
        eos = self.model.config.eos_token_ids
        lm = self.model.lm
        while not self.stopped and (last is None or self.position <= last):
            p = self.position
            if p == 0:
                audio = self._audio_bos
            elif self.codes:
                audio = self.codes.popleft()
            else:
                break
            ids = torch.cat([torch.tensor([self.prev], device=self.device), audio])[None, None]
            logits = lm(ids, self.cache)[0, 0]
            i = int(torch.argmax(logits))
            logprob = float(torch.log_softmax(logits, dim=-1)[i])
            step = Step(i, p, logprob)
            new.append(step)
            self.steps.append(step)
            self.prev = i
            self.position += 1
            if i in eos:
                self.stopped = True
        return new


def decode_padded(model, padded: np.ndarray) -> Decoder:
    """A whole padded input -> its decoder after transformers' number of positions (len // 1920)."""
    d = Decoder(model)
    n = padded.size // d.frame
    if n == 0:
        return d
    # the positions read frames 0 .. n - 2: the audio after (n - 1) frames is never read; a block of audio at a time,
    # so that a long input's codes do not pile up before the LM reads them
    end = (n - 1) * d.frame
    for a in range(0, max(end, 1), d.block):
        d.push(padded[a:min(end, a + d.block)])
        d.run(n - 1)
    return d


@torch.inference_mode()
def beam_padded(model, padded: np.ndarray, num_beams: int) -> list:
    """transformers' beam search (`generate(num_beams=N)`, `search.hf_beam`) over a whole padded input: the same
    positions as the greedy run, every beam reading the same frames; its hypotheses, best first (a hypothesis'
    token k was chosen at position k)."""
    from ..search.hf_beam import beam

    d = Decoder(model)
    n = padded.size // d.frame
    if n == 0:
        return []
    d.push(padded[: (n - 1) * d.frame])
    codes, lm, cache = list(d.codes), model.lm, model.lm.new_cache()
    pos = [0]

    def step(ids: torch.Tensor) -> torch.Tensor:
        p = pos[0]
        audio = d._audio_bos if p == 0 else codes[p - 1]
        rows = ids.shape[0]
        inp = torch.cat([ids[:, -1:].to(d.device), audio[None].expand(rows, -1)], dim=1)[:, None]
        pos[0] += 1
        return lm(inp, cache)[:, 0]

    prompt = torch.tensor([[model.config.bos_token_id]])
    return beam(step, lambda rows: lm.select(cache, rows.to(d.device)), prompt, num_beams, n,
                model.config.eos_token_ids)[0]
