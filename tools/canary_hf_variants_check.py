"""Check transcribe's transformers-format Canary loader (transcribe/canary/hf.py) against transformers on
config settings the committed tiny model does not have: a decoder head_dim other than hidden / heads, an
encoder without biases, scale_input (x sqrt(d) after subsampling), a GELU decoder, an untied head.

Run from the repository root with the venv that holds transformers 5.24.0 (this repository's package is
imported from the checkout, next to transformers: a check, not a test; nothing is written to the repo):

    OMP_NUM_THREADS=1 .venv-nemo/bin/python tools/canary_hf_variants_check.py

Each variant: tests/models/canary-hf-tiny's folder with config.json changed, weights drawn afresh
(`torch.manual_seed(0)`, every parameter N(0, 0.3^2), batch-norm statistics redrawn) and written by
`save_pretrained` into a temporary folder; transformers' teacher-forced logits of the prompt + 5 tokens on
jfk.wav against the package's step-by-step logits (KV cache). Last run (transformers 5.24.0, torch 2.13.0
CPU): every variant within 2e-6 of logits up to ~4 in size.
"""
from __future__ import annotations

import copy
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import soundfile as sf  # noqa: E402
import torch  # noqa: E402
from transformers import AutoProcessor, CanaryConfig, CanaryForConditionalGeneration  # noqa: E402

import transcribe  # noqa: E402

MODEL = REPO / "tests" / "models" / "canary-hf-tiny"
AUDIO = REPO.parent / "shared" / "audio" / "jfk.wav"
VARIANTS = {
    "head_dim 32 (hidden 64, 4 heads)": {"decoder_config": {"head_dim": 32}},
    "encoder without biases": {"encoder_config": {"attention_bias": False, "convolution_bias": False}},
    "scale_input": {"encoder_config": {"scale_input": True}},
    "GELU decoder": {"decoder_config": {"hidden_act": "gelu"}},
    "untied head": {"tie_word_embeddings": False},
}
TOLERANCE = 1e-4


def ours(folder: Path, ids: torch.Tensor, prompt: int) -> torch.Tensor:
    m = transcribe.load_model(str(folder)).model
    x = torch.from_numpy(transcribe.load_audio(str(AUDIO)))[None]
    with torch.inference_mode():
        states, n = m.encode(x, torch.tensor([x.shape[1]]))
        state = m.start(states, n)
        out = [m.step(ids[None, :prompt], state)[0]]
        out += [m.step(ids[None, i:i + 1], state)[0] for i in range(prompt, len(ids))]
    return torch.stack(out)


def main() -> int:
    torch.set_num_threads(1)
    base = json.loads((MODEL / "config.json").read_text())
    proc = AutoProcessor.from_pretrained(str(MODEL))
    wav, _ = sf.read(str(AUDIO), dtype="float32")
    inputs = proc.apply_transcription_request(audio=wav, source_language="en", target_language="en", punctuation=True)
    prompt = inputs["decoder_input_ids"].shape[1]
    ids = torch.cat([inputs["decoder_input_ids"], torch.tensor([[463, 580, 300, 301, 3]])], dim=1)
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, change in VARIANTS.items():
            cfg = copy.deepcopy(base)
            for key, value in change.items():
                cfg[key].update(value) if isinstance(value, dict) else cfg.__setitem__(key, value)
            folder = Path(tmp) / name.replace(" ", "_")
            shutil.copytree(MODEL, folder)
            (folder / "config.json").write_text(json.dumps(cfg))
            torch.manual_seed(0)
            model = CanaryForConditionalGeneration(CanaryConfig.from_pretrained(str(folder))).eval()
            with torch.no_grad():
                for p in model.parameters():
                    p.normal_(0, 0.3)
                for mod in model.modules():
                    if isinstance(mod, torch.nn.BatchNorm1d):
                        mod.running_var.uniform_(0.5, 1.5)
                        mod.running_mean.normal_(0, 0.1)
            model.save_pretrained(str(folder))
            model = CanaryForConditionalGeneration.from_pretrained(str(folder)).eval()
            with torch.inference_mode():
                want = model(input_features=inputs["input_features"], attention_mask=inputs["attention_mask"],
                             decoder_input_ids=ids).logits[0, prompt - 1:]
            diff = float((ours(folder, ids[0], prompt) - want).abs().max())
            ok = diff < TOLERANCE
            failed += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {name}: max |logit difference| {diff:.2e} (logits up to "
                  f"{float(want.abs().max()):.2f})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
