"""The SenseVoice recognizer behind `load_model`: audio in, `Transcript` out.

One input runs as funasr's `SenseVoiceSmall.inference` runs it (batch of one): front end (frontend.py), the
four prompt embeddings [language, event, emotion, text norm] before the features, the encoder, CTC log-probs,
greedy CTC (the best id per frame, repeats merged, blanks (id 0) dropped). The first output frames carry the
model's tags: its language (<|en|>, ...), emotion (<|NEUTRAL|>, ...), event (<|Speech|>, ...) and text norm
(<|withitn|>/<|woitn|>). They go to `Transcript.language` and `Transcript.tags` ({"emotion", "event"}, the
model's own labels without <| |>), never into the text, words or tokens; `decode()` gives every id (the
parity tests compare them with funasr's).

Times: an output frame is an LFR frame (6 feature frames of 10 ms: 60 ms); a token spans the frames of its
greedy run, counted after the four prompt frames (`frame_seconds`). Words are made of tokens (a piece that
starts with SentencePiece's word mark starts a word); segments end at . ? ! and at the cuts between pieces.
Long inputs are cut at pauses (`transcribe.long_input`) into pieces of at most max_piece_s, each decoded
alone, and joined; each segment keeps the tags of its piece, the transcript those of its first piece.
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from .. import long_input
from ..errors import ModelError, TranscribeError, weights_only_refusal
from ..recognizer import Recognizer
from ..results import Segment, Token, Transcript, Word
from ..text.sentencepiece import SentencePieceTokenizer, punctuation_in
from ..text.words import TokenSpan, group_segments, group_words
from . import KIND
from .config import check_frontend, encoder_config, model_files
from .frontend import HOP, WINDOW, SenseVoiceFrontEnd, read_cmvn
from .model import N_PROMPTS, SenseVoiceModel
from .options import EVENT_EMOTION_ROWS, LANGUAGE_ROWS, TEXT_NORM_ROWS, SenseVoiceOptions

log = logging.getLogger("transcribe")

_TAG = re.compile(r"^<\|([^|]+)\|>$")
LANGUAGES = ("zh", "en", "yue", "ja", "ko", "nospeech")
EMOTIONS = ("HAPPY", "SAD", "ANGRY", "NEUTRAL", "FEARFUL", "DISGUSTED", "SURPRISED", "EMO_UNKNOWN")
EVENTS = ("Speech", "BGM", "Applause", "Laughter", "Cry", "Sneeze", "Breath", "Cough", "Event_UNK", "Sing",
          "Speech_Noise")
TEXT_NORMS = ("withitn", "woitn")


@dataclass
class Decoded:
    """One input's greedy CTC output: every id (tags included) with the output frames of its run
    [start, end) counted from the first prompt frame, and its confidence (exp of the mean log-prob over
    the run); `n_frames` output frames in all."""

    ids: list[int]
    starts: list[int]
    ends: list[int]
    confidences: list[float]
    n_frames: int


def load_state_dict(path: Path) -> dict:
    try:
        sd = torch.load(path, weights_only=True, map_location="cpu")
    except OSError as e:
        raise ModelError(f"{path}: cannot read the checkpoint ({e.strerror or e})") from None
    except Exception as e:  # torch raises RuntimeError, UnpicklingError, EOFError, ... on bad files
        what = weights_only_refusal(e)
        if what is not None:
            raise ModelError(f"{path}: holds Python objects other than tensors{' (' + what + ')' if what else ''}, "
                             "which are not loaded (weights_only)") from None
        raise ModelError(f"{path}: not a readable PyTorch checkpoint; truncated or corrupt?") from None
    if isinstance(sd, dict) and isinstance(sd.get("state_dict"), dict):
        sd = sd["state_dict"]
    if not isinstance(sd, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in sd.items()):
        raise ModelError(f"{path}: not a state dict of tensors")
    return sd


def build_model(cfg_dict: dict, sd: dict, d_input: int, name: str) -> SenseVoiceModel:
    head = sd.get("ctc.ctc_lo.weight")
    if head is None or head.dim() != 2:
        raise ModelError(f"{name}: no CTC head (ctc.ctc_lo.weight) in the checkpoint")
    cfg = encoder_config(cfg_dict, d_input, int(head.shape[0]))
    embed = sd.get("embed.weight")
    if embed is None or embed.dim() != 2 or embed.shape[1] != d_input or embed.shape[0] < 16:
        raise ModelError(f"{name}: the prompt embedding (embed.weight) is not (16, {d_input})")
    from dataclasses import replace

    cfg = replace(cfg, prompt_rows=int(embed.shape[0]))
    model = SenseVoiceModel(cfg)
    want = model.state_dict()
    missing = sorted(set(want) - set(sd))
    if missing:
        raise ModelError(f"{name}: the checkpoint lacks {len(missing)} tensors of the config's shape "
                         f"(first: {missing[0]})")
    for k, v in want.items():
        if tuple(sd[k].shape) != tuple(v.shape):
            raise ModelError(f"{name}: {k} is {tuple(sd[k].shape)}, the config makes it {tuple(v.shape)}")
        if not torch.is_floating_point(sd[k]) or not torch.isfinite(sd[k]).all():
            raise ModelError(f"{name}: {k} holds values that are not finite numbers")
    model.load_state_dict({k: sd[k].float() for k in want})
    return model.eval()


def place(model: SenseVoiceModel, device, dtype: Optional[torch.dtype], name: str) -> SenseVoiceModel:
    """The float32 model on `device` in the dtype asked: None / float32; bfloat16 (every weight; the front end,
    the log-softmax stay float32); int8 (the encoder's linear layers as int8 products, `quant.quantize_linears`;
    the prompt rows, FSMN convolutions, norms and the CTC head float32). float16 is refused."""
    if dtype in (None, torch.float32):
        return model.to(device)
    if dtype == torch.bfloat16:
        return model.to(device=device, dtype=torch.bfloat16)
    if dtype == torch.int8:
        from ..quant import quantize_linears

        quantize_linears(model.encoder)
        return model.to(device)
    raise ModelError(f"{name}: SenseVoice models run in float32, bfloat16 or int8 here (asked for {dtype})")


class SenseVoiceASR(Recognizer):
    """A loaded SenseVoice model: `transcribe()` takes paths, bytes or arrays (options: `SenseVoiceOptions`)."""

    family = "sensevoice"
    kind = KIND
    Options = SenseVoiceOptions
    StreamOptions = None
    sample_rate = 16000

    def __init__(self, model: SenseVoiceModel, tokenizer: SentencePieceTokenizer, frontend: SenseVoiceFrontEnd,
                 name: str, device: str = "cpu"):
        self.model = model
        self.tokenizer = tokenizer
        self.frontend = frontend
        self.name = name
        self.device = torch.device(device)
        self.threads: Optional[int] = None
        if len(tokenizer) != model.cfg.vocab_size:
            raise ModelError(f"{name}: the tokenizer has {len(tokenizer)} pieces, the CTC head {model.cfg.vocab_size}")
        self.tags = {}  # id -> (kind, label) of the rich tags in the vocabulary
        for i, p in enumerate(tokenizer.pieces):
            m = _TAG.match(p)
            if m:
                label = m.group(1)
                kind = ("language" if label in LANGUAGES else "emotion" if label in EMOTIONS else
                        "event" if label in EVENTS else "text_norm" if label in TEXT_NORMS else "other")
                self.tags[i] = (kind, label)
        self.punctuation = punctuation_in(tokenizer.pieces)

    @classmethod
    def load(cls, path: Path, name: str, device: torch.device, dtype: Optional[torch.dtype] = None):
        """A model directory in the published layout -> a recognizer on `device` (dtype: `place`)."""
        if dtype not in (None, torch.float32, torch.bfloat16, torch.int8):
            raise ModelError(f"{name}: SenseVoice models run in float32, bfloat16 or int8 here (asked for {dtype})")
        files = model_files(Path(path))
        n_mels, lfr_m, lfr_n = check_frontend(files.frontend)
        d_input = n_mels * lfr_m
        shift, scale = read_cmvn(files.cmvn, d_input)
        try:
            tokenizer = SentencePieceTokenizer(str(files.bpe))
        except ValueError as e:
            raise ModelError(f"{files.bpe}: {e}") from None
        model = place(build_model(files.config, load_state_dict(files.weights), d_input, name), device, dtype, name)
        return cls(model, tokenizer, SenseVoiceFrontEnd(shift, scale, n_mels, lfr_m, lfr_n), name, str(device))

    # -- frames
    @property
    def frame_stride(self) -> int:
        """Samples per output frame (LFR: lfr_n feature frames of 10 ms)."""
        return self.frontend.lfr_n * HOP

    def frame_seconds(self, frame: float) -> float:
        """Output frames counted after the prompts -> seconds: the one conversion of this family."""
        return frame * self.frame_stride / self.sample_rate

    @property
    def frame_s(self) -> float:
        return self.frame_seconds(1)

    def cannot_stream(self) -> str:
        return (f"{self.name} is a SenseVoice model: it decodes whole clips and has no streaming session (use a "
                "Parakeet or Whisper model for live audio)")

    # -- decoding
    def prompt(self, language: Optional[str], use_itn: bool) -> list[int]:
        """The four prompt rows: funasr's lid_dict[language], event and emotion (1, 2), text norm (14 / 15)."""
        lang = LANGUAGE_ROWS[language or "auto"]
        return [lang, *EVENT_EMOTION_ROWS, TEXT_NORM_ROWS[bool(use_itn)]]

    @torch.inference_mode()
    def logprobs(self, pcm: np.ndarray, language: Optional[str] = None, use_itn: bool = False) -> torch.Tensor:
        """(4 + frames, vocab) CTC log-probs of one input (float32 mono at 16 kHz)."""
        feats = self.frontend(torch.from_numpy(np.ascontiguousarray(pcm, dtype=np.float32)))
        dtype = self.model.embed.weight.dtype
        return self.model(feats[None].to(self.device, dtype), self.prompt(language, use_itn))[0].cpu()

    def decode(self, pcm: np.ndarray, language: Optional[str] = None, use_itn: bool = False) -> Decoded:
        """Greedy CTC over one input: funasr's argmax, unique_consecutive, blanks dropped."""
        lp = self.logprobs(pcm, language, use_itn)
        best = lp.argmax(dim=-1).tolist()
        ids, starts, ends, confs = [], [], [], []
        t, n = 0, len(best)
        while t < n:
            u = t
            while u < n and best[u] == best[t]:
                u += 1
            i = best[t]
            if i != 0:
                ids.append(i)
                starts.append(t)
                ends.append(u)
                confs.append(float(lp[t:u, i].mean().exp()))
            t = u
        return Decoded(ids, starts, ends, confs, n)

    # -- transcription
    def _transcribe(self, items: list, opts: SenseVoiceOptions) -> list[Transcript]:
        out: list = [None] * len(items)

        def run(pcms: list[np.ndarray]) -> list[Transcript]:
            return [self._to_transcript(self.decode(p, opts.language, opts.itn), len(p) / self.sample_rate,
                                        opts) for p in pcms]

        for group in self.groups(items, opts.sample_rate):
            for i, pcm in group:
                if len(pcm) < WINDOW:
                    raise TranscribeError(f"input {i + 1}: audio of {len(pcm)} samples is shorter than one SenseVoice "
                                          f"window ({WINDOW} samples, 25 ms)")
            done = long_input.in_pieces(group, run, rate=self.sample_rate, max_piece_s=opts.max_piece_s,
                                        detector=opts.detector, grain=self.frame_stride, batch_size=1,
                                        max_batch_s=None)
            for i, t in done.items():
                if t.tags is None:  # joined from pieces: the first piece's tags
                    t.tags = next((dict(s.tags) for s in t.segments if s.tags is not None), {})
                out[i] = t
        return out

    def _to_transcript(self, d: Decoded, duration: float, opts: SenseVoiceOptions) -> Transcript:
        tags: dict = {}
        keep = []
        for k, i in enumerate(d.ids):
            if i in self.tags:
                kind, label = self.tags[i]
                tags.setdefault(kind, label)
            else:
                keep.append(k)
        language = tags.pop("language", None) or (opts.language if opts.language not in (None, "auto") else None)
        if language == "nospeech":
            language = None
        tags = {k: v for k, v in tags.items() if k in ("emotion", "event")}
        tok = self.tokenizer
        text = tok.decode([d.ids[k] for k in keep])
        at = self.frame_seconds
        spans = [TokenSpan(d.ids[k], tok.piece(d.ids[k]), tok.decode([d.ids[k]]), max(d.starts[k] - N_PROMPTS, 0),
                           max(d.ends[k] - N_PROMPTS, 0), d.confidences[k]) for k in keep]
        end_s = lambda f: min(at(f), duration)  # noqa: E731  (the last LFR frame reaches past the audio)
        tokens = [Token(s.id, s.text, end_s(s.start), end_s(s.end), s.confidence, frame=s.start, piece=s.piece)
                  for s in spans]
        if not opts.timestamps or not spans:
            return Transcript(text=text, duration=duration, tokens=tokens, model=self.name, language=language,
                              tags=tags)
        wspans = group_words(spans, tok.decode, self.punctuation)
        words = [Word(w.word.strip(), end_s(w.start), end_s(w.end), w.confidence) for w in wspans]
        word_of = {id(w): words[n] for n, w in enumerate(wspans)}
        segments = [Segment(sg.text.strip(), end_s(sg.start), end_s(sg.end), [word_of[id(w)] for w in sg.words],
                            tags=dict(tags)) for sg in group_segments(wspans)]
        return Transcript(text=text, duration=duration, segments=segments, words=words, tokens=tokens,
                          model=self.name, language=language, tags=tags)
