"""Shared pieces of tools/granite_speech5_tiny.py and tools/granite_speech5_reference.py (not a tool by itself;
run those with the transformers venv, .venv-nemo/bin/python, from the repository root).

transformers' GraniteSpeech5FeatureExtractor calls two torchaudio functions, and torchaudio's wheels need CUDA
here: `torchaudio.transforms.MelSpectrogram` (the pure-torch stand-in of tools/granite_speech_common.py, the
same defaults) and `torchaudio.functional.compute_deltas`, written here in pure torch as torchaudio defines it
(replicate padding of (win_length - 1) // 2 frames, a [-n..n] kernel, divided by n (n + 1) (2n + 1) / 3).
`patch_torchaudio` puts both into the extractor's module, so the extractor's own code runs unchanged.
"""
from __future__ import annotations

import sys
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from granite_speech_common import make_melspectrogram_class  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
MODEL = REPO / "tests" / "models" / "granite_speech5" / "tiny"
REFS = REPO / "tests" / "references" / "granite_speech5"
PUBLISHED = "ibm-granite/granite-speech-5.0-470m-turboctc"


def compute_deltas(specgram, win_length: int = 5, mode: str = "replicate"):
    import torch
    import torch.nn.functional as F

    shape = specgram.shape
    x = specgram.reshape(1, -1, shape[-1])
    n = (win_length - 1) // 2
    denom = n * (n + 1) * (2 * n + 1) / 3
    x = F.pad(x, (n, n), mode=mode)
    kernel = torch.arange(-n, n + 1, 1, device=x.device, dtype=x.dtype).repeat(x.shape[1], 1, 1)
    out = F.conv1d(x, kernel, groups=x.shape[1]) / denom
    return out.reshape(shape)


def patch_torchaudio():
    """Make transformers' GraniteSpeech5FeatureExtractor run without torchaudio."""
    import transformers.models.granite_speech5.feature_extraction_granite_speech5 as fe
    import transformers.utils.import_utils as iu

    ta = types.ModuleType("torchaudio_standin")
    ta.transforms = types.SimpleNamespace(MelSpectrogram=make_melspectrogram_class())
    ta.functional = types.SimpleNamespace(compute_deltas=compute_deltas)
    fe.torchaudio = ta
    # the extractor's @requires(torchaudio) check
    iu.BACKENDS_MAPPING["torchaudio"] = (lambda: True, iu.BACKENDS_MAPPING["torchaudio"][1])
    return fe


def load_processor(model_dir):
    fe_module = patch_torchaudio()
    from transformers import GraniteSpeech5Processor, ParakeetTokenizer

    # the class from its module: the top-level name is transformers' placeholder without torchaudio
    fe = fe_module.GraniteSpeech5FeatureExtractor.from_pretrained(str(model_dir))
    tok = ParakeetTokenizer.from_pretrained(str(model_dir))
    return GraniteSpeech5Processor(fe, tok)
