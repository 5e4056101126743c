"""A loaded Sortformer diarizer: audio -> per-frame speaker probabilities (offline or streaming, as NeMo's
`SortformerEncLabelModel` computes them) -> speaker turns (NeMo's post-processing).

`diarize(audio)` gives a `diarization.Diarization` (probabilities, turns); `transcribe(audio)` a `Transcript`
with no text whose `speakers` are the turns (what `--format rttm` writes); `stream_diarizer()` a live
diarizer fed samples as they come. Any recognizer's `transcribe(audio, diarize=True, diarizer=<this>)` runs
it beside the recognizer and gives each word a speaker (`transcribe.diarization`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np
import torch

from ..errors import ModelError, OptionValueError
from ..recognizer import Recognizer
from ..runtime import scoped
from .config import parse_config
from .model import SortformerModel
from .options import SortformerOptions
from .postprocess import PostProcessing, speaker_turns
from .stream import BLOCK, ChunkLoop, Features, file_stats


class SortformerDiarizer(Recognizer):
    family = "sortformer"
    kind = "Sortformer"
    Options = SortformerOptions
    StreamOptions = None
    diarizer = True

    def __init__(self, model: SortformerModel, name: str, device: str = "cpu"):
        self.model = model
        self.name = name
        self.device = torch.device(device)
        self.sample_rate = model.config.sample_rate
        self.threads: Optional[int] = None

    @classmethod
    def load(cls, path: Path, name: str, device, dtype: Optional[torch.dtype] = None) -> "SortformerDiarizer":
        from ..nemo.checkpoint import read_nemo

        ckpt = read_nemo(path)
        return cls.from_state(ckpt.config, ckpt.state_dict, str(path), name, device, dtype)

    @classmethod
    def from_state(cls, cfg: dict, state: dict, where: str, name: str, device, dtype=None) -> "SortformerDiarizer":
        """NeMo's config and state dict (from a .nemo or a GGUF file) -> the diarizer on `device` in `dtype`."""
        try:
            config = parse_config(cfg)
            with torch.device("meta"):
                model = SortformerModel(config)
        except (ValueError, KeyError, TypeError) as e:
            raise ModelError(f"{where}: model config not supported ({e})") from None
        try:
            model.load_nemo_state_dict(state)
        except KeyError as e:
            raise ModelError(f"{where}: {e.args[0] if e.args else e}") from None
        model.encoder.fold_batch_norm()
        model.eval().to(device)
        if dtype == torch.int8:
            from ..quant import quantize_linears

            model.encoder.quantize_int8()
            quantize_linears(model.transformer_encoder)
            quantize_linears(model.sortformer_modules)
        elif dtype is not None and dtype != torch.float32:
            model.encoder.to(dtype)
            model.sortformer_modules.to(dtype)
            model.transformer_encoder.to(dtype)
            model.dtype = dtype
        return cls(model, name, str(device))

    # -- what a diarizer says about itself
    @property
    def max_speakers(self) -> int:
        return self.model.n_spk

    @property
    def frame_s(self) -> float:
        """Seconds per output frame (80 ms): mel hop x subsampling / rate."""
        pre = self.model.preprocessor
        return pre.hop_length * self.model.subsampling_factor / self.sample_rate

    @property
    def streaming_mode(self) -> bool:
        """The model's own path: streaming (v2, v2.1) or offline (v1)."""
        return self.model.config.streaming_mode

    def check_for_model(self, opts: SortformerOptions) -> None:
        if opts.num_speakers is not None and opts.num_speakers > self.max_speakers:
            raise OptionValueError("num_speakers", f"num_speakers must be at most {self.max_speakers} (the speakers "
                                   f"{self.name} tells apart), got {opts.num_speakers}")

    # -- calls
    @scoped
    def diarize(self, audio, **given):
        """One input or a list -> a `Diarization` (a list for a list): per-frame probabilities [frames,
        speakers] and the speaker turns after post-processing."""
        opts = self.options(**given)
        single = not isinstance(audio, (list, tuple))
        items = [audio] if single else list(audio)
        out = [self._diarize_pcm(self._pcm(item, opts.sample_rate), opts) for item in items]
        return out[0] if single else out

    def _transcribe(self, items: list, opts: SortformerOptions) -> list:
        from ..results import Transcript

        out = []
        for item in items:
            d = self._diarize_pcm(self._pcm(item, opts.sample_rate), opts)
            out.append(Transcript(text="", duration=d.duration, model=self.name, speakers=d.turns))
        return out

    def _pcm(self, item, sample_rate: Optional[int]) -> np.ndarray:
        """One input as float32 samples at the model's rate. Inputs are diarized one at a time, each decoded
        when its turn comes; a float32 mono array already at the model's rate is read in place (the
        diarizer never writes it: no copy of an hour's 230 MB)."""
        from ..audio import model_input

        return model_input(item, self.sample_rate, sample_rate, copy=False)

    def _diarize_pcm(self, pcm: np.ndarray, opts: SortformerOptions):
        from ..diarization import Diarization

        probs = self.probabilities(pcm, opts)
        return Diarization(probs=probs, frame_s=self.frame_s, duration=len(pcm) / self.sample_rate,
                           turns=self.turns(probs, opts))

    def turns(self, probs: np.ndarray, opts: SortformerOptions) -> list:
        """Per-frame probabilities -> speaker turns (num_speakers applied first, then NeMo's post-processing)."""
        if opts.num_speakers is not None and probs.shape[1] > opts.num_speakers:
            from ..diarization import limit_speakers

            probs = limit_speakers(probs, opts.num_speakers)
        pp = PostProcessing(opts.onset, opts.offset, opts.pad_onset, opts.pad_offset, opts.min_duration_on,
                            opts.min_duration_off)
        units = max(1, round(self.frame_s / 0.01))
        return speaker_turns(probs, pp, units)

    def async_update(self, opts: SortformerOptions) -> bool:
        """The streaming update rule: the option, else the model's config (`async_streaming`)."""
        return self.model.config.async_streaming if opts.async_update is None else opts.async_update

    def path(self, seconds: float, opts: SortformerOptions) -> str:
        """"offline" or "streaming": the option, else the model's own; an offline model's long input streams."""
        if opts.mode is not None:
            return opts.mode
        if self.streaming_mode or seconds > opts.max_offline_s:
            return "streaming"
        return "offline"

    @torch.no_grad()
    def probabilities(self, pcm: np.ndarray, opts: Optional[SortformerOptions] = None) -> np.ndarray:
        """float32 samples at the model's rate -> speaker probabilities [frames, speakers] (float32)."""
        opts = opts if opts is not None else SortformerOptions()
        pcm = np.ascontiguousarray(pcm, dtype=np.float32)
        m = self.model
        if self.path(len(pcm) / self.sample_rate, opts) == "offline":
            audio = torch.from_numpy(pcm).to(self.device)
            if audio.numel() == 0:
                return np.zeros((0, m.n_spk), np.float32)
            feats = m.features(audio, scale=True)
            if feats.shape[1] == 0:
                return np.zeros((0, m.n_spk), np.float32)
            return m.offline(feats).cpu().numpy()
        feats = Features(m.preprocessor, file_stats(m.preprocessor, pcm))
        loop = ChunkLoop(m, self.async_update(opts))
        out = []
        for i in range(0, len(pcm), BLOCK):
            out.append(loop.push(feats.push(pcm[i:i + BLOCK])))
        out.append(loop.push(feats.finish()))
        out.append(loop.finish())
        return torch.cat(out, dim=0).cpu().numpy()

    def stream_diarizer(self, **given) -> "LiveDiarizer":
        """A live diarizer: `feed(pcm)` samples as they come (float32 at the model's rate) -> the rows of
        probabilities that became final; `finish()` -> the rest; `turns()` the turns so far."""
        return LiveDiarizer(self, self.options(**given))


class LiveDiarizer:
    """One live stream through the streaming path (NeMo's chunk loop over features made as samples arrive).
    With a front end that does not normalize (the published streaming models) its probabilities are the
    file's exactly; a `per_feature` front end normalizes by the statistics of the frames so far (see
    `stream.Features`)."""

    def __init__(self, diarizer: SortformerDiarizer, opts: SortformerOptions):
        self.diarizer = diarizer
        self.opts = opts
        m = diarizer.model
        self.features = Features(m.preprocessor, None)
        self.loop = ChunkLoop(m, diarizer.async_update(opts))
        self.frame_s = diarizer.frame_s
        self._rows: list = []
        self.samples = 0
        self.finished = False
        self._turns: tuple = (-1, [])  # (frames, turns) of the last turns() call
        # How far back from the last diarized frame a turn may still change: a later turn's pad_onset reaches
        # back, and a turn shorter than min_duration_on or a gap shorter than min_duration_off is decided
        # only when it ends.
        self.settle_s = opts.pad_onset + max(opts.min_duration_on, opts.min_duration_off)

    @property
    def frames_done(self) -> int:
        return self.loop.frames_out

    @property
    def probs(self) -> np.ndarray:
        if not self._rows:
            return np.zeros((0, self.diarizer.max_speakers), np.float32)
        return np.concatenate(self._rows, axis=0)

    def feed(self, pcm) -> np.ndarray:
        if self.finished:
            raise RuntimeError("feed after finish()")
        pcm = np.ascontiguousarray(pcm, dtype=np.float32).reshape(-1)
        self.samples += len(pcm)
        with torch.no_grad():
            rows = self.loop.push(self.features.push(pcm)).cpu().numpy()
        self._rows.append(rows)
        return rows

    def finish(self) -> np.ndarray:
        if self.finished:
            raise RuntimeError("finish() called twice")
        self.finished = True
        with torch.no_grad():
            rows = torch.cat([self.loop.push(self.features.finish()), self.loop.finish()]).cpu().numpy()
        self._rows.append(rows)
        return rows

    def turns(self, final: bool = False) -> list:
        """Speaker turns of the frames diarized so far (a turn still open at the last frame ends there; with
        `final` false it may still grow, and turns within `settle_s` of the last frame may still change).
        Worked out again only when frames have come since the last call."""
        n = self.frames_done
        if self._turns[0] != n:
            rows = [r for r in self._rows if len(r)]
            if len(rows) > 1:
                self._rows = [np.concatenate(rows, axis=0)]
            self._turns = (n, self.diarizer.turns(self.probs, self.opts))
        return list(self._turns[1])
