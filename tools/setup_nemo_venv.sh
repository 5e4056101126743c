#!/usr/bin/env bash
# Create a virtual environment with NVIDIA NeMo for the reference tools
# (tools/nemo_reference.py, tools/published_param_counts.py).
#
#   tools/setup_nemo_venv.sh [VENV_DIR]      # default: .venv-nemo (git-ignored)
#
# torch is installed first and then pinned through a constraints file, so that pip does not
# replace it while resolving nemo_toolkit's dependencies.  Set PYTHON to choose the
# interpreter (default: python3).  Takes a few minutes and about 2.2 GB.
set -euo pipefail

VENV="${1:-.venv-nemo}"
PYTHON="${PYTHON:-python3}"
TORCH_VERSION="2.13.0"
NEMO_VERSION="3.0.0"

"$PYTHON" -m venv "$VENV"
PIP="$VENV/bin/pip"

"$PIP" install --upgrade pip
"$PIP" install "torch==${TORCH_VERSION}"

CONSTRAINTS="$(mktemp)"
trap 'rm -f "$CONSTRAINTS"' EXIT
echo "torch==${TORCH_VERSION}" > "$CONSTRAINTS"
"$PIP" install -c "$CONSTRAINTS" "nemo_toolkit[asr]==${NEMO_VERSION}"
"$PIP" install --no-deps peft==0.21.2 accelerate==1.16.0 psutil==7.2.2  # LoRA of the tiny Granite Speech 3.3 (tools/granite_speech_*.py)

"$VENV/bin/python" -c "import nemo, torch, nemo.collections.asr; print('nemo', nemo.__version__, 'torch', torch.__version__)"
echo "NeMo environment ready: $VENV (run the tools with $VENV/bin/python from the repository root)"
