"""Voice detection: where a recording has speech and where it pauses.

`speech_activity(pcm, sample_rate, detector)` gives a detector's frames (`Activity`); `Scan` is what
cut placement (`transcribe.long_input.split_at_pauses`, which cuts long audio at pauses into pieces
a model takes whole) reads of one input: its pauses and its energy.

Detectors (`speech_activity(pcm, sample_rate, detector)` gives their frames):

- ``"energy"``: frame energy in dB over 30 ms windows every 10 ms (the mean square of three 10 ms
  blocks), computed 2.6 s of samples at a time in float32 with no per-sample Python (an hour of
  16 kHz audio takes under 0.1 s and a few MB besides the input). A frame is speech when it is above
  a threshold adapted to the file: the 10th percentile of the file's frame levels plus 10 dB, at
  most halfway to the 99th percentile, at least -60 dBFS. When the 99th and 10th percentiles lie
  within 12 dB of each other (constant noise, a tone, silence) only frames below -60 dBFS count as
  pauses, so steady noise has no pauses and is cut at its quietest points. Speech is then widened by
  60 ms on each side (hangover), which also bridges the stop closures inside words.
- ``"silero"``: the Silero VAD network (16 kHz), one speech probability per 32 ms (512 samples),
  with the hysteresis of silero's `get_speech_timestamps` (speech from 0.5 until a frame below
  0.35) and 64 ms of padding. The network is written out here: an STFT as a convolution and four
  convolutions in PyTorch, run on blocks of 4096 frames (131 s) at once, then the LSTM cell and the
  head in numpy, a frame at a time, the state carried across blocks; memory stays bounded and an
  hour takes about 5 s on 2 cores. The weights come from the optional ``silero-vad`` package (5.x
  or 6.x; not a dependency of this one), file ``silero_vad/data/silero_vad.jit``, a TorchScript
  archive (a zip). Only its ``data.pkl`` and the tensor files that names are read, through an
  unpickler that admits the four globals such a pickle holds (module objects become plain attribute
  holders, tensors float32 arrays) and refuses any other, as ``torch.load(weights_only=True)``
  would: the archive's TorchScript code is never compiled or run. The probabilities equal those of
  ``torch.jit.load`` on the same file to 1e-5. The package's ``silero_vad_16k.safetensors`` (the
  weights of its tinygrad port) is not used: it holds other weights, whose probabilities differ from
  the TorchScript and ONNX models' by up to 0.5 on real speech (silero-vad issue #768). The package
  is found without being imported, since importing it sets PyTorch's thread count for the process.
- ``"auto"``: silero when its weights are installed and the rate is 16 kHz, else energy.

Bad input (not 1-D, empty, NaN or infinite samples, an unknown detector) raises
`transcribe.errors.TranscribeError`.
"""
from __future__ import annotations

import functools
import importlib.util
import io
import logging
import os
import pickle
import zipfile
from dataclasses import dataclass

import numpy as np

from .errors import ModelError, TranscribeError
from .runtime import model_call

__all__ = ["Activity", "Scan", "check_audio", "speech_activity", "DETECTORS"]

log = logging.getLogger(__name__)

DETECTORS = ("auto", "energy", "silero")

# Energy detector.
HOP_S = 0.010           # one frame every 10 ms
WINDOW_HOPS = 3         # each frame's level is the mean square over 3 hops (30 ms) centred on it
FLOOR_DB = -60.0        # frames below this level (dBFS) are never speech
MARGIN_DB = 10.0        # speech lies this far above the file's low (10th) percentile ...
CONTRAST_DB = 12.0      # ... when the 99th percentile lies this far above it; else only the floor counts
HANGOVER_S = 0.060      # speech widened this much on each side
_BLOCK_HOPS = 1 << 14   # hops read at a time (2.6 s at 16 kHz): bounds the float32 temporaries

# Silero detector.
SILERO_RATE = 16000
SILERO_HOP = 512        # samples per frame (32 ms)
SILERO_CONTEXT = 64     # samples of the previous frame each frame also sees
SILERO_ON, SILERO_OFF = 0.5, 0.35
SILERO_PAD = 2          # frames of padding around speech
_SILERO_FILE = "silero_vad.jit"
_SILERO_BLOCK = 4096    # frames (131 s) run through the network at a time


@dataclass(frozen=True)
class Activity:
    """One value per frame: a speech probability (silero) or a 0/1 decision after hangover (energy).
    Frame i covers samples `[i * hop, (i + 1) * hop)` of the input; the last may be partial."""
    speech: np.ndarray  # float32, shape (ceil(len(pcm) / hop),)
    hop: int            # samples per frame at the input's rate
    detector: str       # "energy" or "silero"

    @property
    def frames(self) -> int:
        return len(self.speech)


# ----------------------------------------------------------------------------------- input checks

def _check_pcm(pcm, sample_rate) -> np.ndarray:
    if isinstance(sample_rate, bool) or not isinstance(sample_rate, (int, np.integer)) or sample_rate < 1000:
        raise TranscribeError(f"sample_rate must be an integer of at least 1000 Hz, got {sample_rate!r}")
    if hasattr(pcm, "detach") and hasattr(pcm, "cpu"):  # a torch tensor, without importing torch
        pcm = pcm.detach().cpu().numpy()
    x = np.asarray(pcm)
    if x.ndim != 1:
        raise TranscribeError(f"audio must be a 1-D mono array, got shape {x.shape}")
    if x.size == 0:
        raise TranscribeError("audio is empty (0 samples)")
    if x.dtype.kind not in "fiu":
        raise TranscribeError(f"audio must hold real numbers (float or integer samples), got dtype {x.dtype}")
    return x


def _check_detector(detector) -> None:
    if detector not in DETECTORS:
        raise TranscribeError(f"unknown pause detector {detector!r}; choose one of {', '.join(DETECTORS)}")


def _as_float(block: np.ndarray) -> np.ndarray:
    """A block of samples as float32 (float64 stays float64), integers scaled to [-1, 1)."""
    if block.dtype.kind == "f":
        return block if block.dtype.itemsize >= 4 else block.astype(np.float32)
    scale = 2.0 ** (8 * block.dtype.itemsize - 1)  # int16: 32768; uint8: 128 around 128
    x = block.astype(np.float32)
    if block.dtype.kind == "u":
        x -= scale
    x *= np.float32(1.0 / scale)
    return x


# --------------------------------------------------------------------------------- energy frames

def _block_power(b: np.ndarray, hop: int) -> np.ndarray:
    """Mean square of each `hop`-sample block of `b` (the last may be shorter)."""
    full = len(b) // hop
    r = b[:full * hop].reshape(full, hop)
    power = np.einsum("ij,ij->i", r, r) / hop
    if full * hop < len(b):
        t = b[full * hop:]
        power = np.append(power, float(np.dot(t, t)) / len(t))
    return power


def _hop_power(x: np.ndarray, hop: int) -> np.ndarray:
    """Mean square of each `hop`-sample block of `x` (the last may be shorter) as float64, read
    `_BLOCK_HOPS` hops at a time so the float32 temporaries stay small. Raises on NaN or infinity."""
    n = len(x)
    power = np.empty(-(-n // hop), np.float64)
    step = hop * _BLOCK_HOPS
    for s in range(0, n, step):
        b = _as_float(x[s:s + step])
        p = _block_power(b, hop)
        if not np.isfinite(p).all():
            bad = ~np.isfinite(b)
            if bad.any():
                raise TranscribeError(f"audio holds non-finite values (NaN or infinity), the first at "
                                      f"sample {s + int(np.argmax(bad))}")
            p = _block_power(b.astype(np.float64), hop)  # finite but huge: float32 squares overflowed
        power[s // hop:s // hop + len(p)] = p
    return power


def _moving_mean(v: np.ndarray, width: int) -> np.ndarray:
    """Mean over `width` values centred on each (edge values repeated). A convolution, not a
    cumulative sum, whose rounding over an hour could make silence slightly negative."""
    if width <= 1 or len(v) == 0:
        return v
    left = width // 2
    p = np.concatenate((np.full(left, v[0]), v, np.full(width - 1 - left, v[-1])))
    return np.convolve(p, np.full(width, 1.0 / width), mode="valid")


def _dilate(mask: np.ndarray, k: int) -> np.ndarray:
    """True wherever a True lies within `k` frames."""
    if k <= 0 or not mask.any():
        return mask
    n = len(mask)
    c = np.concatenate(([0], np.cumsum(mask, dtype=np.int64)))
    i = np.arange(n)
    return (c[np.minimum(i + k + 1, n)] - c[np.maximum(i - k, 0)]) > 0


def _energy_threshold(db: np.ndarray) -> float:
    lo, hi = np.percentile(db, [10, 99])
    if hi - lo < CONTRAST_DB:
        return FLOOR_DB
    return float(max(FLOOR_DB, min(lo + MARGIN_DB, (lo + hi) / 2)))


def _energy_speech(power: np.ndarray, hop: int, sample_rate: int) -> np.ndarray:
    """0/1 speech per hop from the per-hop mean squares."""
    db = 10.0 * np.log10(_moving_mean(power, WINDOW_HOPS) + 1e-12)
    thr = _energy_threshold(db)
    speech = _dilate(db > thr, int(round(HANGOVER_S * sample_rate / hop)))
    log.debug("energy detector: threshold %.1f dB, %.1f%% of frames speech", thr, 100 * speech.mean())
    return speech


# ---------------------------------------------------------------------------------------- silero

def silero_model_path() -> str:
    """The path of silero-vad's TorchScript model file, found without importing the package."""
    spec = importlib.util.find_spec("silero_vad")
    if spec is None or not spec.submodule_search_locations:
        raise TranscribeError("the 'silero' pause detector needs the silero-vad package "
                              "(pip install silero-vad), which is not installed; use detector='energy'")
    for root in spec.submodule_search_locations:
        path = os.path.join(root, "data", _SILERO_FILE)
        if os.path.isfile(path):
            return path
    raise TranscribeError(f"the installed silero-vad package has no data/{_SILERO_FILE}; "
                          "reinstall it: pip install -U silero-vad")


def _silero_available() -> bool:
    try:
        silero_model_path()
        return True
    except TranscribeError:
        return False


class _ScriptObject:
    """A module object of a TorchScript archive's pickle, reduced to its attributes."""

    def __setstate__(self, state):
        self.attrs = state if isinstance(state, dict) else {}


def _rebuild_tensor(storage, offset, size, stride, *_):
    size, stride = tuple(size), tuple(stride)
    if any(d < 0 for d in size) or any(st < 0 for st in stride) or len(size) != len(stride):
        raise pickle.UnpicklingError(f"bad tensor layout {size} / {stride}")
    last = offset + sum((d - 1) * st for d, st in zip(size, stride)) if all(size) else offset - 1
    if offset < 0 or last >= len(storage):
        raise pickle.UnpicklingError(f"tensor {size} at {offset} overruns its storage of {len(storage)}")
    view = np.lib.stride_tricks.as_strided(storage[offset:], size, tuple(4 * st for st in stride))
    return np.array(view, dtype=np.float32)


class _WeightsUnpickler(pickle.Unpickler):
    """Reads a TorchScript archive's `data.pkl` as plain attributes and float32 arrays: any global
    beyond the few a TorchScript pickle holds is refused, and no code from the archive runs."""

    def __init__(self, data: bytes, storage):
        super().__init__(io.BytesIO(data))
        self._storage = storage

    def find_class(self, module, name):
        if module.startswith("__torch__."):
            return _ScriptObject
        allowed = {("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
                   ("collections", "OrderedDict"): dict, ("torch.jit._pickle", "build_intlist"): list,
                   ("torch", "FloatStorage"): "FloatStorage"}
        if (module, name) not in allowed:
            raise pickle.UnpicklingError(f"refused global {module}.{name}")
        return allowed[module, name]

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[:2] == ("storage", "FloatStorage")):
            raise pickle.UnpicklingError(f"unexpected storage {pid!r:.80}")
        return self._storage(str(pid[2]), int(pid[4]))


def _read_script_weights(path: str) -> dict:
    """The 16 kHz network's weights in silero-vad's TorchScript archive, by our names."""
    try:
        with zipfile.ZipFile(path) as z:
            infos = {i.filename: i for i in z.infolist()}
            pkl = [n for n in infos if n.count("/") == 1 and n.endswith("/data.pkl")]
            if len(pkl) != 1 or infos[pkl[0]].file_size > _MAX_PICKLE:
                raise ModelError(f"{path}: not a TorchScript archive with one data.pkl")
            prefix = pkl[0][:-len("data.pkl")]

            def storage(key: str, numel: int) -> np.ndarray:
                info = infos.get(f"{prefix}data/{key}")
                if info is None or info.file_size != 4 * numel or numel > _MAX_STORAGE:
                    raise ModelError(f"{path}: storage {key} is missing or not {numel} float32 values")
                return np.frombuffer(z.read(info), dtype="<f4")

            root = _WeightsUnpickler(z.read(pkl[0]), storage).load()
    except (zipfile.BadZipFile, pickle.UnpicklingError, EOFError, ValueError, TypeError, KeyError) as e:
        raise ModelError(f"{path}: cannot read the silero model: {e}") from None
    sd = {}
    for ours, theirs in _SILERO_NAMES.items():
        obj = root
        for part in ("_model." + theirs).split("."):
            attrs = getattr(obj, "attrs", None)
            if not isinstance(attrs, dict) or part not in attrs:
                raise ModelError(f"{path}: no {theirs} in the 16 kHz silero model; this network needs "
                                 "silero-vad 5 or 6 (pip install -U silero-vad)")
            obj = attrs[part]
        if not isinstance(obj, np.ndarray) or obj.shape != _SILERO_SHAPES[ours]:
            got = getattr(obj, "shape", type(obj).__name__)
            raise ModelError(f"{path}: {theirs} should have shape {_SILERO_SHAPES[ours]}, got {got}")
        sd[ours] = obj
    return sd


# Our names -> the attribute paths under the TorchScript archive's `_model` (the 16 kHz network).
_SILERO_NAMES = {
    "stft": "stft.forward_basis_buffer",
    **{f"conv{k}.{w}": f"encoder.{k - 1}.reparam_conv.{w}" for k in range(1, 5) for w in ("weight", "bias")},
    **{f"lstm.{w}": f"decoder.rnn.{w}" for w in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")},
    "out.weight": "decoder.decoder.2.weight", "out.bias": "decoder.decoder.2.bias",
}
_SILERO_SHAPES = {
    "stft": (258, 1, 256),
    "conv1.weight": (128, 129, 3), "conv1.bias": (128,),
    "conv2.weight": (64, 128, 3), "conv2.bias": (64,),
    "conv3.weight": (64, 64, 3), "conv3.bias": (64,),
    "conv4.weight": (128, 64, 3), "conv4.bias": (128,),
    "lstm.weight_ih": (512, 128), "lstm.weight_hh": (512, 128), "lstm.bias_ih": (512,), "lstm.bias_hh": (512,),
    "out.weight": (1, 128, 1), "out.bias": (1,),
}
_MAX_PICKLE = 1 << 20     # bytes: the v6 archive's data.pkl is ~25 KB
_MAX_STORAGE = 1 << 22    # float32 values in one tensor: the largest is 66,048


class _Silero:
    """The Silero VAD 16 kHz network with the weights of silero-vad's model file: the convolutions
    in PyTorch on many frames at once, the LSTM cell and the head in numpy, one frame at a time."""

    def __init__(self, sd: dict):
        import torch

        self.stft = torch.from_numpy(sd["stft"])
        self.convs = [(torch.from_numpy(sd[f"conv{k}.weight"]), torch.from_numpy(sd[f"conv{k}.bias"]), s)
                      for k, s in ((1, 1), (2, 2), (3, 2), (4, 1))]
        self.w_ih = sd["lstm.weight_ih"].T.copy()   # (128, 512): gates i, f, g, o as in torch's LSTMCell
        self.w_hh = sd["lstm.weight_hh"].T.copy()
        self.bias = sd["lstm.bias_ih"] + sd["lstm.bias_hh"]
        self.w_out = sd["out.weight"][0, :, 0].copy()
        self.b_out = float(sd["out.bias"][0])

    def features(self, chunks):
        """chunks (T, 64 + 512), each frame with its context -> (T, 128) float32."""
        import torch
        import torch.nn.functional as F

        x = F.pad(chunks[:, None], (0, SILERO_CONTEXT), mode="reflect")
        x = F.conv1d(x, self.stft, stride=128)                   # (T, 258, 4): an STFT
        x = torch.sqrt(x[:, :129] ** 2 + x[:, 129:] ** 2)
        for w, b, stride in self.convs:
            x = torch.relu(F.conv1d(x, w, b, stride=stride, padding=1))
        return x[:, :, 0].numpy()                                  # (T, 128)

    def recur(self, feats: np.ndarray, h: np.ndarray, c: np.ndarray) -> np.ndarray:
        """The LSTM cell over the frames, updating `h` and `c` in place -> probabilities (T,).
        A loop in numpy: a torch LSTM of batch 1 meets each step's OpenMP barrier, and on a busy
        machine a barrier may wait for a descheduled thread (seen: 0.03 s a block turning into 30 s)."""
        gates = feats @ self.w_ih + self.bias
        hs = np.empty_like(feats)
        for t in range(len(feats)):
            g = gates[t] + h @ self.w_hh
            s = np.tanh(0.5 * g)
            s *= 0.5
            s += 0.5                                              # sigmoid, without overflow
            c[:] = s[128:256] * c + s[:128] * np.tanh(g[256:384])
            h[:] = s[384:] * np.tanh(c)
            hs[t] = h
        logit = np.maximum(hs, 0) @ self.w_out + self.b_out
        return (0.5 + 0.5 * np.tanh(0.5 * logit)).astype(np.float32)


@functools.lru_cache(maxsize=1)
def _silero_model(path: str) -> _Silero:
    return _Silero(_read_script_weights(path))


def _silero_probs(x: np.ndarray, path: str | None = None) -> np.ndarray:
    """Speech probability per 512 samples of 16 kHz audio, as silero's `get_speech_timestamps` gets
    them (state and 64 samples of context carried across frames, the last frame padded with zeros)."""
    import torch

    model = _silero_model(path or silero_model_path())
    n = len(x)
    frames = -(-n // SILERO_HOP)
    out = np.empty(frames, np.float32)
    h, c = np.zeros(128, np.float32), np.zeros(128, np.float32)
    with model_call(), torch.inference_mode():  # model_call: flush-denormal, as every model call
        for f0 in range(0, frames, _SILERO_BLOCK):
            f1 = min(frames, f0 + _SILERO_BLOCK)
            s0 = f0 * SILERO_HOP - SILERO_CONTEXT
            seg = np.zeros(SILERO_CONTEXT + (f1 - f0) * SILERO_HOP, np.float32)
            lo = max(s0, 0)
            part = _as_float(x[lo:f1 * SILERO_HOP]).astype(np.float32, copy=False)
            seg[lo - s0:lo - s0 + len(part)] = part
            chunks = torch.from_numpy(seg).unfold(0, SILERO_CONTEXT + SILERO_HOP, SILERO_HOP)
            out[f0:f1] = model.recur(model.features(chunks), h, c)
    return out


def _silero_speech(probs: np.ndarray) -> np.ndarray:
    """Hysteresis: speech from SILERO_ON until a frame below SILERO_OFF, then padded."""
    decided = np.where(probs >= SILERO_ON, 1, np.where(probs < SILERO_OFF, 0, -1))
    idx = np.where(decided >= 0, np.arange(len(probs)), -1)
    last = np.maximum.accumulate(idx)  # the last decisive frame at or before each frame
    speech = np.where(last >= 0, decided[np.maximum(last, 0)], 0) == 1
    return _dilate(speech, SILERO_PAD)


# --------------------------------------------------------------------------------------- activity

def _resolve(detector: str, sample_rate: int) -> str:
    _check_detector(detector)
    if detector == "auto":
        return "silero" if sample_rate == SILERO_RATE and _silero_available() else "energy"
    if detector == "silero":
        silero_model_path()  # raises, naming the missing package
        if sample_rate != SILERO_RATE:
            raise TranscribeError(f"the 'silero' pause detector takes {SILERO_RATE} Hz audio, got "
                                  f"{sample_rate} Hz; resample it (transcribe.audio.load_audio) or use "
                                  "detector='energy'")
    return detector


def speech_activity(pcm, sample_rate: int = 16000, detector: str = "auto") -> Activity:
    """Speech per frame: 0/1 every 10 ms (energy) or a probability every 32 ms (silero)."""
    x = _check_pcm(pcm, sample_rate)
    name = _resolve(detector, sample_rate)
    if name == "silero":
        _hop_power(x, SILERO_HOP)  # the checks for NaN and infinity
        return Activity(_silero_probs(x), SILERO_HOP, "silero")
    hop = max(1, int(round(HOP_S * sample_rate)))
    speech = _energy_speech(_hop_power(x, hop), hop, sample_rate)
    return Activity(speech.astype(np.float32), hop, "energy")


def _runs(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Starts and ends (exclusive) of the runs of True."""
    d = np.diff(np.concatenate(([0], mask.astype(np.int8), [0])))
    return np.flatnonzero(d == 1), np.flatnonzero(d == -1)




def check_audio(pcm, sample_rate: int, detector: str) -> np.ndarray:
    """`pcm` as a 1-D array of real samples, after checking it, the rate and the detector's name
    (not yet its package or rate: `Scan` resolves it); raises TranscribeError."""
    x = _check_pcm(pcm, sample_rate)
    _check_detector(detector)
    return x


class Scan:
    """One input as cut placement reads it (`transcribe.long_input.split_at_pauses`): the detector
    resolved (silero without its package, or at another rate than 16 kHz, raises) and the energy of
    every 10 ms hop, read once (which checks for NaN and infinity); its pauses and its smoothed level
    on demand."""

    def __init__(self, x: np.ndarray, sample_rate: int, detector: str):
        self.x, self.sample_rate = x, sample_rate
        self.detector = _resolve(detector, sample_rate)
        self.hop = max(1, int(round(HOP_S * sample_rate)))
        self.power = _hop_power(x, self.hop)

    def pauses(self) -> tuple[np.ndarray, np.ndarray]:
        """Starts and ends (samples, the end exclusive) of the runs without speech: sorted and apart."""
        if self.detector == "silero":
            speech, frame = _silero_speech(_silero_probs(self.x)), SILERO_HOP
        else:
            speech, frame = _energy_speech(self.power, self.hop, self.sample_rate), self.hop
        a, b = _runs(~speech)
        return a * frame, np.minimum(b * frame, len(self.x))

    def level(self, span_s: float) -> np.ndarray:
        """The mean square of each hop averaged over `span_s` seconds centred on it."""
        return _moving_mean(self.power, max(1, int(round(span_s * self.sample_rate / self.hop))))
