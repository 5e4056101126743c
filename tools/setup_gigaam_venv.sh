#!/usr/bin/env bash
# Create a virtual environment with the `gigaam` package (salute-developers/GigaAM), the reference of the
# GigaAM family (tools/gigaam_tiny.py, tools/gigaam_reference.py, benchmarks/gigaam_speed.py).
#
#   tools/setup_gigaam_venv.sh [GIGAAM_SOURCE] [VENV_DIR]    # default venv: .venv-gigaam (git-ignored)
#
# GIGAAM_SOURCE: a checkout of salute-developers/GigaAM (a directory) or a pip requirement for it; default
# the GitHub repository at commit 85558932 ("Fix batched encoding by padding convolution results with
# zeroes", the newest when this was written). PyPI's `gigaam` 0.1.0 (2024) predates v3: it knows only the
# v1/v2 models, so the package is installed from the repository.
#
# The venv reuses the system's torch (2.13 CPU) through --system-site-packages. gigaam imports torchaudio
# for its front end (torchaudio.transforms.MelSpectrogram, pure PyTorch); no torchaudio wheel matches torch
# 2.13 and PyPI's are built against CUDA, so torchaudio 2.11.1 is installed without dependencies and its
# compiled extensions are removed: torchaudio then imports without them (its _extension module loads a
# library only where the file exists) and the transforms gigaam uses run as they are. onnx and onnxruntime
# (gigaam's ONNX export only) are left out.
set -euo pipefail

SOURCE="${1:-git+https://github.com/salute-developers/GigaAM@85558932f047bf80d03f2b2e9dc2584c26e8bda6}"
VENV="${2:-.venv-gigaam}"
PYTHON="${PYTHON:-python3}"

"$PYTHON" -m venv --system-site-packages "$VENV"
PIP="$VENV/bin/pip"
"$PIP" install --no-deps "$SOURCE"
"$PIP" install hydra-core==1.3.2 omegaconf==2.3.0 sentencepiece soundfile tqdm
"$PIP" install --no-deps torchaudio==2.11.1
SITE="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
rm -f "$SITE"/torchaudio/lib/*.so

"$VENV/bin/python" -c "import gigaam, torch, torchaudio; print('gigaam', gigaam.__file__, 'torch', torch.__version__)"
echo "GigaAM environment ready: $VENV (run the tools with $VENV/bin/python from the repository root)"
