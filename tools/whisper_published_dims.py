"""openai-whisper's parameter counts and state-dict layouts for every published model size (own venv).

    .venv-whisper/bin/python tools/whisper_published_dims.py   # venv: see tools/whisper_mel_reference.py

The dimensions are those of the published checkpoints (their "dims" entry). Each model is built on
the meta device by openai-whisper itself (no weights needed); per model we record its parameter
count, the number of state-dict entries and a SHA-256 of the sorted "name shape" lines. Writes
tests/references/whisper/published.json; tests/test_whisper_model.py builds ours from the same
dims and compares.
"""
import hashlib
import json

import torch
import whisper
from whisper.model import ModelDimensions, Whisper


def size(n_vocab, n_mels, state, heads, enc_layers, dec_layers):
    return dict(n_mels=n_mels, n_audio_ctx=1500, n_audio_state=state, n_audio_head=heads,
                n_audio_layer=enc_layers, n_vocab=n_vocab, n_text_ctx=448, n_text_state=state,
                n_text_head=heads, n_text_layer=dec_layers)


MODELS = {
    "tiny.en": size(51864, 80, 384, 6, 4, 4), "tiny": size(51865, 80, 384, 6, 4, 4),
    "base.en": size(51864, 80, 512, 8, 6, 6), "base": size(51865, 80, 512, 8, 6, 6),
    "small.en": size(51864, 80, 768, 12, 12, 12), "small": size(51865, 80, 768, 12, 12, 12),
    "medium.en": size(51864, 80, 1024, 16, 24, 24), "medium": size(51865, 80, 1024, 16, 24, 24),
    "large-v2": size(51865, 80, 1280, 20, 32, 32), "large-v3": size(51866, 128, 1280, 20, 32, 32),
    "large-v3-turbo": size(51866, 128, 1280, 20, 32, 4),
}


def layout_digest(sd):
    lines = sorted(f"{k} {list(v.shape)}" for k, v in sd.items())
    return len(lines), hashlib.sha256("\n".join(lines).encode()).hexdigest()


def main():
    # openai-whisper registers its default alignment heads as a sparse tensor, which the meta
    # device cannot make; that buffer is not part of the state dict, so let it stay dense.
    to_sparse = torch.Tensor.to_sparse
    torch.Tensor.to_sparse = lambda self, *a, **k: self if self.is_meta else to_sparse(self, *a, **k)
    out = {"whisper": whisper.__version__, "models": {}}
    for name, dims in MODELS.items():
        with torch.device("meta"):
            model = Whisper(ModelDimensions(**dims))
        n_entries, digest = layout_digest(model.state_dict())
        out["models"][name] = {"dims": dims, "parameters": sum(p.numel() for p in model.parameters()),
                               "state_dict_entries": n_entries, "layout_sha256": digest}
        print(name, out["models"][name]["parameters"])
    with open("tests/references/whisper/published.json", "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
