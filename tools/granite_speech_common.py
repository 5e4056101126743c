"""Shared pieces of tools/granite_speech_tiny.py and tools/granite_speech_reference.py.

Not a tool by itself.  Imported by the two tools (run them with the NeMo/transformers venv,
.venv-nemo/bin/python, from the repository root).

What is here:
  * the four tiny variants (g33, g40, g41, plus): their published prototype and prompt layout;
  * a pure-torch stand-in for ``torchaudio.transforms.MelSpectrogram`` (torchaudio cannot be
    installed next to this torch build), patched into transformers' GraniteSpeechFeatureExtractor
    so that the extractor's own code (log10, clamp at max-8, /4+1, drop odd frame, stack pairs)
    runs unchanged;
  * the audio list (jfk + the dev manifest) and the transcripts used as training targets.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
AUDIO = SHARED / "audio"
MODELS = REPO / "tests" / "models" / "granite_speech"
REFS = REPO / "tests" / "references" / "granite_speech"

JFK_TEXT = ("and so my fellow americans ask not what your country can do for you "
            "ask what you can do for your country")

# The two dev utterances the references use (short, 16 kHz, LibriSpeech).
DEV_REF = ["ls_61-70968-0002.wav", "ls_1089-134691-0001.wav"]

# System message the IBM model cards (granite-speech-3.3-2b/8b) pass explicitly; the
# granite-speech-4.1-2b-plus card uses the same text.  Passing it keeps the chat template from
# inserting today's date (strftime_now), so the prompt is reproducible.
SYSTEM_33 = ("Knowledge Cutoff Date: April 2024.\nToday's Date: December 19, 2024.\n"
             "You are Granite, developed by IBM. You are a helpful AI assistant")

# Chat templates.  "granite" is a Jinja template that renders the Granite 3.x/4.x role format
# (<|start_of_role|>role<|end_of_role|>content<|end_of_text|>\n ... <|start_of_role|>assistant<|end_of_role|>)
# written for these tiny models from the published prompt format (not the published text:
# that could not be fetched here; see tests/references/granite_speech/README.md).
GRANITE_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{%- set system_message = messages[0]['content'] %}"
    "{%- set loop_messages = messages[1:] %}"
    "{%- else %}"
    "{%- set system_message = \"Knowledge Cutoff Date: April 2024.\\nToday's Date: \" + strftime_now('%B %d, %Y') + \".\\nYou are Granite, developed by IBM. You are a helpful AI assistant.\" %}"
    "{%- set loop_messages = messages %}"
    "{%- endif %}"
    "{{- '<|start_of_role|>system<|end_of_role|>' + system_message + '<|end_of_text|>\\n' }}"
    "{%- for message in loop_messages %}"
    "{{- '<|start_of_role|>' + message['role'] + '<|end_of_role|>' + message['content'] + '<|end_of_text|>\\n' }}"
    "{%- if loop.last and add_generation_prompt %}"
    "{{- '<|start_of_role|>assistant<|end_of_role|>' }}"
    "{%- endif %}"
    "{%- endfor %}"
)
# "USER: <content>\n ASSISTANT:" format of granite-4.0-1b-speech / granite-speech-4.1-2b.
USER_ASSISTANT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message['role'] == 'system' %}{{- message['content'] + '\\n' }}"
    "{%- elif message['role'] == 'user' %}{{- 'USER: ' + message['content'] + '\\n' }}"
    "{%- elif message['role'] == 'assistant' %}{{- ' ASSISTANT: ' + message['content'] + eos_token + '\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- ' ASSISTANT:' }}{%- endif %}"
)

VARIANTS = {
    "g33": dict(
        published="ibm-granite/granite-speech-3.3-2b", family="g3", lora=True, tied=True,
        model_type="granite_speech", cat_hidden_layers=None, template=GRANITE_TEMPLATE,
        system=SYSTEM_33, instruction="<|audio|>can you transcribe the speech into a written format?",
        target_prefix="", rope_theta=10000000.0, enc_output_dim=20, seed=33,
    ),
    "g40": dict(
        published="ibm-granite/granite-4.0-1b-speech", family="g4", lora=False, tied=False,
        model_type="granite_speech", cat_hidden_layers=None, template=USER_ASSISTANT_TEMPLATE,
        system=None, instruction="<|audio|>can you transcribe the speech into a written format?",
        target_prefix=" ", rope_theta=10000.0, enc_output_dim=30, seed=40,
    ),
    "g41": dict(
        published="ibm-granite/granite-speech-4.1-2b", family="g4", lora=False, tied=False,
        model_type="granite_speech", cat_hidden_layers=None, template=USER_ASSISTANT_TEMPLATE,
        system=None,
        instruction="<|audio|>transcribe the speech with proper punctuation and capitalization.",
        target_prefix=" ", rope_theta=10000.0, enc_output_dim=30, seed=41,
    ),
    "plus": dict(
        published="ibm-granite/granite-speech-4.1-2b-plus", family="g4", lora=False, tied=True,
        model_type="granite_speech_plus", cat_hidden_layers=[1], template=GRANITE_TEMPLATE,
        system=SYSTEM_33, instruction="<|audio|> can you transcribe the speech into a written format?",
        target_prefix="", rope_theta=10000.0, enc_output_dim=30, seed=44,
    ),
}

TRANSLATE_33 = "<|audio|>can you translate the speech into French?"


def chat(variant: str, instruction: str | None = None) -> list[dict]:
    v = VARIANTS[variant]
    msgs = []
    if v["system"] is not None:
        msgs.append({"role": "system", "content": v["system"]})
    msgs.append({"role": "user", "content": instruction or v["instruction"]})
    return msgs


def set_threads():
    import torch
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)


# ---------------------------------------------------------------------------------------------
# torchaudio.transforms.MelSpectrogram, pure torch (defaults as torchaudio 2.x: periodic Hann
# window of win_length zero-padded to n_fft by torch.stft, center=True with reflect padding,
# power 2, HTK mel scale, no filter normalisation, f_min 0, f_max sr/2).
# ---------------------------------------------------------------------------------------------

def _hz_to_mel_htk(f):
    return 2595.0 * math.log10(1.0 + f / 700.0)


def mel_fbanks(n_freqs: int, f_min: float, f_max: float, n_mels: int, sample_rate: int):
    import torch
    all_freqs = torch.linspace(0, sample_rate // 2, n_freqs)
    m_pts = torch.linspace(_hz_to_mel_htk(f_min), _hz_to_mel_htk(f_max), n_mels + 2)
    f_pts = 700.0 * (10.0 ** (m_pts / 2595.0) - 1.0)
    f_diff = f_pts[1:] - f_pts[:-1]
    slopes = f_pts.unsqueeze(0) - all_freqs.unsqueeze(1)
    down = (-1.0 * slopes[:, :-2]) / f_diff[:-1]
    up = slopes[:, 2:] / f_diff[1:]
    return torch.clamp(torch.min(down, up), min=0.0)  # (n_freqs, n_mels)


def make_melspectrogram_class():
    import torch

    class MelSpectrogram(torch.nn.Module):
        def __init__(self, sample_rate=16000, n_fft=400, win_length=None, hop_length=None,
                     n_mels=128, f_min=0.0, f_max=None):
            super().__init__()
            self.n_fft = n_fft
            self.win_length = win_length or n_fft
            self.hop_length = hop_length or self.win_length // 2
            self.register_buffer("window", torch.hann_window(self.win_length))
            self.register_buffer("fb", mel_fbanks(n_fft // 2 + 1, f_min, f_max or sample_rate / 2,
                                                  n_mels, sample_rate))

        def forward(self, waveform):
            shape = waveform.shape
            x = waveform.reshape(-1, shape[-1])
            spec = torch.stft(x, n_fft=self.n_fft, hop_length=self.hop_length,
                              win_length=self.win_length, window=self.window, center=True,
                              pad_mode="reflect", normalized=False, onesided=True,
                              return_complex=True)
            spec = spec.abs().pow(2.0)
            mel = torch.matmul(spec.transpose(-1, -2), self.fb).transpose(-1, -2)
            return mel.reshape(shape[:-1] + mel.shape[-2:])

    return MelSpectrogram


def patch_torchaudio():
    """Make transformers' GraniteSpeechFeatureExtractor run without torchaudio."""
    import types
    import transformers.models.granite_speech.feature_extraction_granite_speech as fe
    ta = types.ModuleType("torchaudio_standin")
    ta.transforms = types.SimpleNamespace(MelSpectrogram=make_melspectrogram_class())
    fe.torchaudio = ta
    fe.requires_backends = lambda *a, **k: None
    return fe


def patch_peft_version():
    """transformers 5.24 asks for peft >= 0.22.0, which the package index does not have (newest:
    0.21.2).  The adapter calls used here (add_adapter, load_adapter, enable/disable_adapters,
    save) work with 0.21.2, so the version gate is switched off; see the references README."""
    import transformers.integrations.peft as tp
    tp.check_peft_version = lambda *a, **k: None


def check_mel_against_transformers_numpy():
    """Compare the stand-in with transformers.audio_utils (numpy, float64) on jfk; returns stats."""
    import torch
    from transformers.audio_utils import mel_filter_bank, spectrogram, window_function
    ours_fb = mel_fbanks(257, 0.0, 8000.0, 80, 16000).numpy()
    ref_fb = mel_filter_bank(num_frequency_bins=257, num_mel_filters=80, min_frequency=0.0,
                             max_frequency=8000.0, sampling_rate=16000, norm=None, mel_scale="htk")
    wav = load_audio(AUDIO / "jfk.wav")
    M = make_melspectrogram_class()(16000, 512, 400, 160, 80)
    ours = M(torch.from_numpy(wav)).numpy()
    ref = spectrogram(wav.astype(np.float64), window_function(400, "hann", frame_length=512),
                      frame_length=512, hop_length=160, power=2.0, center=True, pad_mode="reflect",
                      mel_filters=ref_fb, log_mel=None)
    rel = np.abs(ours - ref).max() / np.abs(ref).max()
    lo = np.log10(np.maximum(ours, 1e-10)) - np.log10(np.maximum(ref, 1e-10))
    return {"filterbank_max_abs_diff": float(np.abs(ours_fb - ref_fb).max()),
            "mel_power_max_rel_diff": float(rel),
            "log10_mel_max_abs_diff_over_frames": float(np.abs(lo).max()),
            "frames": [int(ours.shape[-1]), int(ref.shape[-1])]}


# ---------------------------------------------------------------------------------------------
# audio
# ---------------------------------------------------------------------------------------------

def load_audio(path) -> np.ndarray:
    import soundfile as sf
    x, sr = sf.read(str(path), dtype="float32", always_2d=False)
    if x.ndim > 1:
        x = x.mean(axis=1)
    if sr != 16000:
        raise ValueError(f"{path}: {sr} Hz, expected 16000")
    return np.ascontiguousarray(x, dtype=np.float32)


def corpus() -> list[tuple[str, np.ndarray, str]]:
    """(name, audio, lowercase transcript) for jfk and every 16 kHz dev utterance."""
    import soundfile as sf
    items = [("jfk.wav", load_audio(AUDIO / "jfk.wav"), JFK_TEXT)]
    with open(AUDIO / "dev" / "manifest.jsonl") as f:
        for line in f:
            row = json.loads(line)
            p = AUDIO / "dev" / row["audio"]
            if sf.info(str(p)).samplerate != 16000:
                continue
            items.append((row["audio"], load_audio(p), row["text_norm"]))
    return items


def ref_audios() -> list[tuple[str, np.ndarray]]:
    out = [("jfk.wav", load_audio(AUDIO / "jfk.wav"))]
    for n in DEV_REF:
        out.append((n, load_audio(AUDIO / "dev" / n)))
    return out


def load_processor(model_dir):
    patch_torchaudio()
    from transformers import AutoProcessor
    return AutoProcessor.from_pretrained(str(model_dir))


def model_class(variant):
    from transformers import (GraniteSpeechForConditionalGeneration,
                              GraniteSpeechPlusForConditionalGeneration)
    return (GraniteSpeechPlusForConditionalGeneration if variant == "plus"
            else GraniteSpeechForConditionalGeneration)
