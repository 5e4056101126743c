"""A transformers `generation_config.json` read for deterministic decoding (greedy or beam search): the stop tokens,
max_new_tokens, and the beam settings; a setting that changes greedy or beam search and is not implemented (a
repetition penalty, n-gram blocking) is refused. Sampling settings are ignored: this package decodes
deterministically, as transformers does with do_sample false (the published audio-LLMs' setting)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

from ..config_yaml import excerpt
from ..errors import ModelError

# Keys read (`GenerationDefaults`) and keys that change nothing for greedy or beam search.
_HARMLESS = {"transformers_version", "_from_model_config", "use_cache", "bos_token_id", "temperature", "top_k",
             "top_p", "min_p", "typical_p", "output_scores", "return_dict_in_generate", "output_attentions",
             "output_hidden_states", "num_return_sequences", "cache_implementation", "do_sample",
             "repetition_penalty", "no_repeat_ngram_size", "num_beams", "length_penalty", "early_stopping",
             "max_new_tokens", "eos_token_id", "pad_token_id", "max_length"}


@dataclass(frozen=True)
class GenerationDefaults:
    stop_ids: tuple[int, ...]
    max_new_tokens: int
    num_beams: int = 1
    length_penalty: float = 1.0
    early_stopping: Union[bool, str] = False  # transformers' beam stopping rule: True, False or "never"


def token_ids(value: Any, where: str, key: str) -> tuple[int, ...]:
    """A token id or a list of them (eos_token_id's two forms) -> a tuple; ModelError otherwise."""
    ids = value if isinstance(value, (list, tuple)) else [value]
    if not ids or any(isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in ids):
        raise ModelError(f"{where}: {key} {excerpt(value, 60)} is not a token id or a list of them")
    return tuple(ids)


def _int(where: str, gen: dict, key: str, default: int, least: int, most: int) -> int:
    value = gen.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
        raise ModelError(f"{where}: {key} = {excerpt(value, 80)} is not a whole number >= {least} and <= {most}")
    return value


def generation_defaults(gen: dict, default_eos: Any, default_max_new: int, where: str) -> GenerationDefaults:
    """generation_config.json's settings (`default_eos`, e.g. the model config's eos_token_id, when it names no
    stop token; `default_max_new` when it sets no max_new_tokens: transformers would stop after 20 tokens, its
    default max_length, which no family's published use relies on)."""
    where = f"{where} generation_config.json"
    for key in gen:
        if key not in _HARMLESS:
            raise ModelError(f"{where}: the setting {key!r} is not implemented")
    if gen.get("repetition_penalty", 1.0) != 1.0:
        raise ModelError(f"{where}: repetition_penalty {excerpt(gen['repetition_penalty'], 40)} is not implemented")
    if gen.get("no_repeat_ngram_size", 0) not in (0, None):
        raise ModelError(f"{where}: no_repeat_ngram_size {excerpt(gen['no_repeat_ngram_size'], 40)} is not "
                         "implemented")
    if gen.get("max_length") is not None and gen.get("max_new_tokens") is None:
        raise ModelError(f"{where}: max_length {excerpt(gen['max_length'], 40)} without max_new_tokens is not "
                         "implemented (a bound on the prompt and the output together)")
    stop = token_ids(gen.get("eos_token_id", default_eos), where, "eos_token_id")
    max_new = _int(where, gen, "max_new_tokens", default_max_new, 1, 1 << 20)
    beams = _int(where, gen, "num_beams", 1, 1, 64)
    penalty = gen.get("length_penalty", 1.0)
    if isinstance(penalty, bool) or not isinstance(penalty, (int, float)):
        raise ModelError(f"{where}: length_penalty {excerpt(penalty, 40)} is not a number")
    early = gen.get("early_stopping", False)
    if early not in (True, False, "never"):
        raise ModelError(f"{where}: early_stopping {excerpt(early, 40)} is not implemented (true, false or never)")
    return GenerationDefaults(stop, max_new, beams, float(penalty), early)
