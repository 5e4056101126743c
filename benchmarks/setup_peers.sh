#!/usr/bin/env bash
# The peers of benchmarks/peers.py (issue 32): their virtual environment, and their files made from one .nemo.
#
#   benchmarks/setup_peers.sh [--venv DIR] [--model MODEL.nemo] [--out DIR] [--no-onnx] [--no-gguf]
#
#   --venv DIR     the peers' virtual environment (default .venv-peers, git-ignored)
#   --model PATH   the .nemo (default local-models/parakeet-tdt-0.6b-v2-random.nemo; made with
#                  benchmarks/make_parakeet_model.py in .venv-nemo when it is missing and the default is used)
#   --out DIR      where the peers' files go (default local-models/peers, git-ignored)
#   --no-onnx      skip the ONNX export (it needs .venv-nemo: tools/setup_nemo_venv.sh)
#   --no-gguf      skip the GGUF files
#
# Run from anywhere; default paths are relative to the repository root, paths given are relative to the
# working directory. Idempotent: whatever exists is kept (delete a file to make it again).
# Environment: PYTHON (default python3) makes the venv; NEMO_PYTHON (default .venv-nemo/bin/python) exports.
#
# What it makes, under OUT (STEM = the .nemo's name without .nemo):
#   STEM-tcpp-f32.gguf, STEM-tcpp-q8_0.gguf     transcribe convert --schema transcribe.cpp (transcribe.cpp reads these)
#   STEM-pcpp-f32.gguf, STEM-pcpp-q8_0.gguf     transcribe convert --schema parakeet.cpp (parakeet.cpp's layout)
#   STEM-crispasr-f32.gguf, STEM-crispasr-q8_0.gguf   the pcpp files under CrispASR's names (peers_crispasr_gguf.py)
#   STEM-onnx/onnx-asr/, STEM-onnx/sherpa-onnx/ benchmarks/peers_export_onnx.py (NeMo's model.export()), and
#                                               their *.int8.onnx (benchmarks/peers_quantize_onnx.py, ONNX Runtime)
set -euo pipefail

die() { echo "setup_peers.sh: error: $*" >&2; exit 2; }
say() { echo "[setup_peers] $*"; }

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="" MODEL="" OUT="" ONNX=1 GGUF=1
while [ $# -gt 0 ]; do
  case "$1" in
    --venv) [ $# -ge 2 ] || die "--venv needs a folder"; VENV="$(realpath -m "$2")"; shift 2 ;;
    --model) [ $# -ge 2 ] || die "--model needs a .nemo path"; MODEL="$(realpath -m "$2")"; shift 2 ;;
    --out) [ $# -ge 2 ] || die "--out needs a folder"; OUT="$(realpath -m "$2")"; shift 2 ;;
    --no-onnx) ONNX=0; shift ;;
    --no-gguf) GGUF=0; shift ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
DEFAULT_MODEL=0
[ -n "$MODEL" ] || { MODEL="$REPO/local-models/parakeet-tdt-0.6b-v2-random.nemo"; DEFAULT_MODEL=1; }
VENV="${VENV:-$REPO/.venv-peers}"
OUT="${OUT:-$REPO/local-models/peers}"
PYTHON="${PYTHON:-python3}"
NEMO_PYTHON="${NEMO_PYTHON:-$REPO/.venv-nemo/bin/python}"
cd "$REPO"

# 1. the peers' venv, pinned as issue 32 names them
PEERS=("transcribe-cpp==0.4.1" "transcribe-cpp-native==0.4.1" "onnx-asr==0.12.*" "onnxruntime" "onnx"
       "sherpa-onnx==2.0.1" "crispasr==0.8.45" "faster-whisper" "numpy" "soundfile")
CHECK='import transcribe_cpp, onnx_asr, onnxruntime, onnx, sherpa_onnx, crispasr, faster_whisper, numpy, soundfile'
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "$CHECK" 2>/dev/null; then
  say "$VENV: the peers are installed, kept"
else
  command -v "$PYTHON" >/dev/null || die "no $PYTHON (set PYTHON)"
  [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV" || die "could not make the venv $VENV"
  say "installing into $VENV: ${PEERS[*]}"
  "$VENV/bin/pip" install -q "${PEERS[@]}" || die "pip install into $VENV failed (see above)"
  "$VENV/bin/python" -c "$CHECK" || die "the peers do not import in $VENV"
fi
"$VENV/bin/python" - <<'EOF'
import importlib.metadata as m
print("[setup_peers] versions:", ", ".join(f"{p} {m.version(p)}" for p in (
    "transcribe-cpp", "transcribe-cpp-native", "onnx-asr", "onnxruntime", "sherpa-onnx", "crispasr", "faster-whisper")))
EOF

# 2. the .nemo
if [ ! -f "$MODEL" ]; then
  [ "$DEFAULT_MODEL" = 1 ] || die "$MODEL: no such .nemo"
  [ -x "$NEMO_PYTHON" ] || die "$MODEL is missing and making it needs NeMo's Python $NEMO_PYTHON (tools/setup_nemo_venv.sh)"
  say "making $MODEL (benchmarks/make_parakeet_model.py; a few minutes, about 2.4 GB)"
  "$NEMO_PYTHON" benchmarks/make_parakeet_model.py "$MODEL" --threads "${THREADS:-2}" || die "make_parakeet_model.py failed"
fi
STEM="$(basename "$MODEL" .nemo)"
mkdir -p "$OUT"

# 3. GGUF files by our converter, in both schemas, f32 and q8_0
if [ "$GGUF" = 1 ]; then
  for schema in transcribe.cpp parakeet.cpp; do
    tag="${schema%%.*}"; tag="${tag/transcribe/tcpp}"; tag="${tag/parakeet/pcpp}"
    for type in f32 q8_0; do
      f="$OUT/$STEM-$tag-$type.gguf"
      if [ -f "$f" ]; then say "$f: exists, kept"; continue; fi
      say "writing $f (transcribe convert --schema $schema --type $type)"
      # written in a side folder under its final name (the converter names the model after the file), moved when
      # complete: an interrupted run leaves no file that looks done
      mkdir -p "$OUT/.partial"; part="$OUT/.partial/$(basename "$f")"
      PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" python3 -m transcribe convert "$MODEL" "$part" \
        --schema "$schema" --type "$type" --force || { rm -f "$part"; die "transcribe convert failed for $f"; }
      mv "$part" "$f"
    done
  done
  rmdir "$OUT/.partial" 2>/dev/null || true
  # CrispASR reads parakeet.cpp's tensors under its own names: the pcpp files renamed (peers_crispasr_gguf.py)
  for type in f32 q8_0; do
    f="$OUT/$STEM-crispasr-$type.gguf"
    if [ -f "$f" ]; then say "$f: exists, kept"; continue; fi
    say "writing $f (benchmarks/peers_crispasr_gguf.py from $STEM-pcpp-$type.gguf)"
    python3 benchmarks/peers_crispasr_gguf.py "$OUT/$STEM-pcpp-$type.gguf" "$f.partial" \
      || { rm -f "$f.partial"; die "peers_crispasr_gguf.py failed for $f"; }
    mv "$f.partial" "$f"
  done
fi

# 4. ONNX files by NeMo's own export, in onnx-asr's and sherpa-onnx's layouts
if [ "$ONNX" = 1 ]; then
  [ -x "$NEMO_PYTHON" ] || die "the ONNX export needs NeMo's Python $NEMO_PYTHON (tools/setup_nemo_venv.sh), or pass --no-onnx"
  "$NEMO_PYTHON" -c "import onnx" 2>/dev/null || die "the package onnx is missing in $NEMO_PYTHON's venv (pip install onnx there)"
  OMP_NUM_THREADS="${THREADS:-2}" "$NEMO_PYTHON" benchmarks/peers_export_onnx.py "$MODEL" "$OUT/$STEM-onnx" \
    || die "the ONNX export failed (see above)"
  # the ONNX peers' own int8 files (ONNX Runtime's dynamic quantization), in the peers' venv
  "$VENV/bin/python" benchmarks/peers_quantize_onnx.py "$OUT/$STEM-onnx" || die "the ONNX int8 quantization failed"
fi
say "done: $OUT"
ls -la "$OUT"
