"""Reading MedASR's tensors from a transformers-format directory (model.safetensors, or an index of shards): the
checkpoint's names as transformers saves LasrForCTC (`encoder.*`, `ctc_head.*`). safetensors holds tensors only:
nothing in the files is run."""
from __future__ import annotations

from pathlib import Path

import torch

from ..errors import ModelError
from ..safetensors_files import weight_files


def read_state(path: Path) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError, safe_open

    state: dict[str, torch.Tensor] = {}
    for f in weight_files(Path(path)):
        try:
            with safe_open(str(f), framework="pt") as h:
                for k in h.keys():
                    if k in state:
                        raise ModelError(f"{f.name}: tensor {k} appears twice")
                    state[k] = h.get_tensor(k)
        except SafetensorError as e:
            raise ModelError(f"{f}: not a readable safetensors file ({e})") from None
        except OSError as e:
            raise ModelError(f"{f}: {e}") from None
    return state
