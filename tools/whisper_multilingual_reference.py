"""openai-whisper's language detection and multilingual decoding on a small random model, for
tests/test_whisper_multilingual.py (run in openai-whisper's venv, from the repo root):

    .venv-whisper/bin/python tools/whisper_multilingual_reference.py   # venv: see tools/whisper_mel_reference.py

The model is tests/whisper_random.py's `random_multilingual_state` (seeded, rebuilt by the test),
in the 99-language layout (n_vocab 51865, 80 mels) and the large-v3 one (51866, 128 mels, 100
languages). For each clip's first 30 s window: `model.detect_language` (every language's
probability) and `whisper.decode` (fp32, temperature 0) for German transcription and French
translation, with and without timestamps, greedy and beam 2 (all on the first clip, three on the
others), and (greedy, with timestamps) with
language=None, which decode resolves by detection; for one clip, `whisper.transcribe`
with language=None (detection on the first window) at temperature 0 alone (no sampling fallback,
which could not be reproduced). Written to tests/references/whisper/multilingual.json.
"""
import importlib.util
import json
import sys
import wave
from pathlib import Path

import numpy as np
import torch
import whisper
from whisper.decoding import DecodingOptions, DecodingTask, decode
from whisper.model import ModelDimensions, Whisper
from whisper.tokenizer import get_tokenizer

REPO = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("whisper_random", REPO / "tests" / "whisper_random.py")
whisper_random = importlib.util.module_from_spec(spec)
spec.loader.exec_module(whisper_random)

SEED = 2
CLIPS = ["../shared/audio/jfk.wav", "../shared/audio/dev/cv_17767698.wav", "../shared/audio/dev/fleurs_en_000.wav"]
TRANSCRIBE_CLIP = "../shared/audio/jfk.wav"
# name -> (language, task, timestamps, beam_size)
CASES = {
    f"{lang}_{task}_{'ts' if ts else 'nots'}_{'beam2' if beam else 'greedy'}": (lang, task, ts, beam)
    for lang, task in (("de", "transcribe"), ("fr", "translate"))
    for ts in (True, False)
    for beam in (None, 2)
}
# language=None: openai-whisper's decode detects the window's language and writes its token
CASES["auto_transcribe_ts_greedy"] = (None, "transcribe", True, None)
# a long prompt (40 earlier tokens, cut to n_text_ctx // 2 - 1 = 31): the window fills the decoder's
# 64 positions before 32 tokens are sampled; openai-whisper then stops (greedy and beam)
PROMPT = list(range(1000, 1040))
CASES["de_transcribe_ts_greedy_prompt"] = ("de", "transcribe", True, None)
CASES["de_transcribe_ts_beam2_prompt"] = ("de", "transcribe", True, 2)
# every case on the first clip; on the others, these
OTHER_CLIPS_CASES = ("de_transcribe_ts_beam2", "fr_translate_nots_greedy", "auto_transcribe_ts_greedy")
# the large-v3 layout: detection on every clip, one decode case on the first
V3_CASES = {"de_transcribe_ts_greedy": ("de", "transcribe", True, None)}


def read_wav(path):
    with wave.open(path) as w:
        assert w.getframerate() == 16000 and w.getnchannels() == 1 and w.getsampwidth() == 2
        return np.frombuffer(w.readframes(w.getnframes()), np.int16).astype(np.float32) / 32768.0


def decode_case(model, mel, lang, task, ts, beam, prompt=None):
    opts = DecodingOptions(task=task, language=lang, temperature=0.0, fp16=False,
                           without_timestamps=not ts, beam_size=beam, prompt=prompt)
    dt = DecodingTask(model, opts)
    r = decode(model, mel, opts)
    return {
        "language": lang, "task": task, "timestamps": ts, "beam_size": beam, "prompt": prompt,
        "initial_tokens": list(dt.initial_tokens),
        "tokens": list(map(int, r.tokens)),
        "avg_logprob": float(r.avg_logprob),
        "sum_logprob": float(r.avg_logprob) * (len(r.tokens) + 1),
        "no_speech_prob": float(r.no_speech_prob),
        "detected_language": r.language,
    }


def layout(n_vocab, cases, transcribe_clip):
    dims, sd = whisper_random.random_multilingual_state(SEED, n_vocab)
    model = Whisper(ModelDimensions(**dims))
    model.load_state_dict(sd, strict=True)
    model.eval()
    tok = get_tokenizer(True, num_languages=model.num_languages)
    dt = DecodingTask(model, DecodingOptions(language="de", fp16=False))
    out = {
        "seed": SEED, "n_vocab": n_vocab, "dims": dims,
        "language_tokens": dict(zip(tok.all_language_codes, map(int, tok.all_language_tokens))),
        "suppress_tokens": sorted(int(t) for t in dt._get_suppress_tokens()),
        "blank": tok.encode(" "),
        "clips": {},
    }
    for i, path in enumerate(CLIPS):
        audio = read_wav(path)
        mel = whisper.log_mel_spectrogram(torch.from_numpy(audio), dims["n_mels"], padding=480000)[:, :3000]
        with torch.no_grad():
            lang_token, probs = model.detect_language(mel)
        entry = {"path": path, "num_samples": len(audio), "language_token": int(lang_token),
                 "language": max(probs, key=probs.get), "language_probs": probs, "decode": {}}
        for name, (lang, task, ts, beam) in cases.items():
            if i > 0 and (n_vocab == 51866 or name not in OTHER_CLIPS_CASES):
                continue
            prompt = PROMPT if name.endswith("_prompt") else None
            entry["decode"][name] = decode_case(model, mel, lang, task, ts, beam, prompt)
        out["clips"][path.split("/")[-1]] = entry
    if transcribe_clip:
        audio = read_wav(transcribe_clip)
        r = whisper.transcribe(model, audio, language=None, temperature=0.0, fp16=False, verbose=None)
        out["transcribe"] = {
            "path": transcribe_clip, "options": {"language": None, "temperature": 0.0},
            "language": r["language"],
            "segments": [{k: s[k] for k in ("seek", "start", "end", "tokens", "avg_logprob", "no_speech_prob",
                                            "temperature")} for s in r["segments"]],
        }
    return out


def main():
    torch.set_num_threads(1)
    out = {
        "whisper": whisper.__version__, "torch": torch.__version__,
        "model": "tests/whisper_random.py random_multilingual_state (random weights)",
        "layouts": {
            "51865": layout(51865, CASES, TRANSCRIBE_CLIP),
            "51866": layout(51866, V3_CASES, None),
        },
    }
    path = REPO / "tests" / "references" / "whisper" / "multilingual.json"
    path.write_text(json.dumps(out, indent=None, separators=(",", ":")) + "\n")
    print(f"wrote {path} ({path.stat().st_size} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
