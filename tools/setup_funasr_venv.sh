#!/usr/bin/env bash
# Create a virtual environment with the `funasr` package, the reference for SenseVoice
# (tools/sensevoice_tiny.py, tools/sensevoice_reference.py, benchmarks/sensevoice_speed.py).
#
#   tools/setup_funasr_venv.sh [VENV_DIR]      # default: .venv-funasr (git-ignored)
#
# The venv sees the system site-packages so that it reuses the installed torch (CPU); torch is pinned
# through a constraints file so that pip does not replace it. funasr's front end imports torchaudio
# (kaldi fbank) when it is there and otherwise kaldi-native-fbank (installed here): no torchaudio wheel
# fits the CPU torch, so the reference features are kaldi-native-fbank's (Kaldi's own C++ port).
# Set PYTHON to choose the interpreter (default: python3).
set -euo pipefail

VENV="${1:-.venv-funasr}"
PYTHON="${PYTHON:-python3}"
FUNASR_VERSION="1.4.16"

"$PYTHON" -m venv --system-site-packages "$VENV"
PIP="$VENV/bin/pip"

CONSTRAINTS="$(mktemp)"
trap 'rm -f "$CONSTRAINTS"' EXIT
"$VENV/bin/python" -c "import torch; print('torch==' + torch.__version__)" > "$CONSTRAINTS"
"$PIP" install -c "$CONSTRAINTS" "funasr==${FUNASR_VERSION}" kaldi-native-fbank

"$VENV/bin/python" -c "import funasr, torch; print('funasr', funasr.__version__, 'torch', torch.__version__)"
echo "funasr environment ready: $VENV (run the tools with $VENV/bin/python from the repository root)"
