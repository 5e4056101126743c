"""Convert the small random transformers Whisper model (tests/models/whisper-hf-random/) with
CTranslate2's own converter, and record what CTranslate2's runtime computes with the results.

Run from the repository root with a Python that has ctranslate2 and transformers, e.g.:

    .venv-hf/bin/pip install ctranslate2      # the venv of tools/whisper_hf_reference.py
    .venv-hf/bin/python tools/whisper_ct2_reference.py

For each quantization in QUANTIZATIONS it writes tests/models/whisper-ct2-random-<quantization>/
holding model.bin and config.json as `ctranslate2.converters.TransformersConverter` wrote them
(tokenizer.json is left out: it is the HF directory's, and the test copies it in), plus
reference.json with, for the log-mel of the first 30 s of ../shared/audio/jfk.wav (our
`whisper_log_mel`, padded to 3000 frames; its sum is stored to catch a different mel):

  - `ctranslate2.models.Whisper(dir, device="cpu", compute_type="float32").encode(mel)`: shape,
    mean, std, two 4x4 corners and every 97th frame in full (quantized weights are dequantized to
    float32 by the runtime, so this is the same arithmetic as a float32 load of the dequantized
    weights);
  - `generate()` greedy (beam_size 1, return_scores, max_length MAX_LENGTH, no suppression, no
    blank suppression) from <|startoftranscript|><|notimestamps|>: the token ids and the score
    (the summed log-probability of the sampled tokens divided by their number; length_penalty 1).
    The random model never samples end-of-text, and ctranslate2 4.8.5 stops this greedy
    generate() after max_length // 2 tokens (measured: max_length 5, 12, 20, 30, 40 give 2, 6,
    10, 15, 20 tokens), so the tokens are a prefix cut by length; `ended_with_eot` says so.
"""
from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import soundfile as sf  # noqa: E402
import torch  # noqa: E402

from transcribe.whisper.frontend import whisper_log_mel  # noqa: E402

HF_DIR = REPO / "tests" / "models" / "whisper-hf-random"
OUT_ROOT = REPO / "tests" / "models"
QUANTIZATIONS = ["int8", "float16"]
MAX_LENGTH = 40  # ctranslate2 4.8.5 generate() stops after max_length // 2 sampled tokens here
FRAME_STRIDE = 97


def mel_of_jfk() -> torch.Tensor:
    audio, sr = sf.read(str(REPO.parent / "shared" / "audio" / "jfk.wav"), dtype="float32")
    assert sr == 16000 and audio.ndim == 1
    audio = np.pad(audio[:480000], (0, max(0, 480000 - len(audio))))
    return whisper_log_mel(audio)[:, :3000]  # [80, 3000]


def prompt_ids() -> list[int]:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(HF_DIR / "tokenizer.json"))
    ids = [tok.token_to_id("<|startoftranscript|>"), tok.token_to_id("<|notimestamps|>")]
    assert ids == [50257, 50362], ids
    return ids


def convert(quantization: str, conv_dir: Path, out: Path) -> None:
    """Convert into conv_dir (the converter's full output, which the runtime loads), then copy
    model.bin and config.json to out."""
    import ctranslate2

    ctranslate2.converters.TransformersConverter(str(HF_DIR)).convert(
        str(conv_dir), quantization=quantization, force=True)
    print(quantization, "converter wrote", sorted(p.name for p in conv_dir.iterdir()))
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for name in ("model.bin", "config.json"):
        shutil.copy(conv_dir / name, out / name)


def reference(model_dir: Path, mel: torch.Tensor, prompt: list[int]) -> dict:
    import ctranslate2

    model = ctranslate2.models.Whisper(str(model_dir), device="cpu", compute_type="float32",
                                       inter_threads=1, intra_threads=1)
    features = ctranslate2.StorageView.from_array(np.ascontiguousarray(mel[None].numpy()))
    enc = torch.from_numpy(np.array(model.encode(features, to_cpu=True)))[0]  # [1500, d]
    res = model.generate(
        features, [prompt], beam_size=1, max_length=MAX_LENGTH, return_scores=True,
        suppress_blank=False, suppress_tokens=[], return_no_speech_prob=False,
    )[0]
    return {
        "ctranslate2_version": ctranslate2.__version__,
        "encoder": {
            "shape": list(enc.shape),
            "mean": enc.mean().item(),
            "std": enc.std().item(),
            "first": enc[:4, :4].tolist(),
            "last": enc[-4:, -4:].tolist(),
            "frame_stride": FRAME_STRIDE,
            "frames": enc[::FRAME_STRIDE].tolist(),
        },
        "generate": {
            "beam_size": 1,
            "max_length": MAX_LENGTH,
            "suppress_blank": False,
            "suppress_tokens": [],
            "sequences_ids": [list(map(int, s)) for s in res.sequences_ids],
            "scores": [float(s) for s in res.scores],
            "ended_with_eot": len(res.sequences_ids[0]) < MAX_LENGTH // 2,
        },
    }


def main() -> None:
    import ctranslate2
    import transformers

    mel = mel_of_jfk()
    prompt = prompt_ids()
    for q in QUANTIZATIONS:
        out = OUT_ROOT / f"whisper-ct2-random-{q}"
        with tempfile.TemporaryDirectory() as tmp:
            conv_dir = Path(tmp) / "ct2"
            convert(q, conv_dir, out)
            runtime = reference(conv_dir, mel, prompt)
        ref = {
            "source": "tests/models/whisper-hf-random",
            "quantization": q,
            "transformers_version": transformers.__version__,
            "mel_sum": mel.double().sum().item(),
            "prompt": prompt,
        }
        ref.update(runtime)
        (out / "reference.json").write_text(json.dumps(ref, indent=1) + "\n")
        sizes = {p.name: p.stat().st_size for p in sorted(out.iterdir())}
        print(q, sizes, "tokens", ref["generate"]["sequences_ids"], "score", ref["generate"]["scores"])
    print("ctranslate2", ctranslate2.__version__, "transformers", transformers.__version__)


if __name__ == "__main__":
    main()
