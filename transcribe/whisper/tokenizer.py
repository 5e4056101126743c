"""Whisper's tokenizer: byte-level BPE from a `tokenizer.json`, with the special and timestamp tokens."""
from __future__ import annotations

from typing import Optional, Sequence


class WhisperTokenizer:
    """Whisper's byte-level BPE from a `tokenizer.json`, with every special token.

    The timestamp tokens (`<|0.00|>` ... `<|30.00|>`) follow `<|notimestamps|>` in the model's
    vocabulary but are not in `tokenizer.json`; they are numbered here.
    """

    TIME_STEP = 0.02

    def __init__(self, tokenizer_json: str, n_vocab: Optional[int] = None):
        from tokenizers import Tokenizer

        try:
            self._tok = Tokenizer.from_str(tokenizer_json)
        except Exception as e:  # tokenizers raises its own exception types with long texts
            raise ValueError(f"unreadable tokenizer.json ({str(e).splitlines()[0][:200]})") from None
        vocab = self._tok.get_vocab(with_added_tokens=True)
        self.special = {k: v for k, v in vocab.items() if k.startswith("<|") and k.endswith("|>")}

        def sid(name: str) -> int:
            if name not in self.special:
                raise ValueError(f"tokenizer.json lacks the special token {name}")
            return self.special[name]

        self.eot = sid("<|endoftext|>")
        self.sot = sid("<|startoftranscript|>")
        self.transcribe = sid("<|transcribe|>")
        self.translate = sid("<|translate|>")
        self.no_timestamps = sid("<|notimestamps|>")
        self.sot_prev = sid("<|startofprev|>")
        self.sot_lm = self.special.get("<|startoflm|>")
        self.no_speech = self.special.get("<|nospeech|>", self.special.get("<|nocaptions|>"))
        self.timestamp_begin = self.no_timestamps + 1
        # Language tokens sit between <|startoftranscript|> and <|translate|>, in the model's order.
        self.languages = {
            k[2:-2]: v for k, v in sorted(self.special.items(), key=lambda kv: kv[1])
            if self.sot < v < self.translate and k[2:-2].isalpha()
        }
        self.n_vocab = n_vocab if n_vocab is not None else self.timestamp_begin + 1501

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int]) -> str:
        """Text of the ordinary tokens (specials and timestamps left out)."""
        return self._tok.decode([int(i) for i in ids if int(i) < self.eot], skip_special_tokens=False)

    def decode_with_timestamps(self, ids: Sequence[int]) -> str:
        out, run = [], []
        for i in ids:
            i = int(i)
            if i >= self.timestamp_begin:
                out.append(self.decode(run))
                run = []
                out.append(f"<|{(i - self.timestamp_begin) * self.TIME_STEP:.2f}|>")
            else:
                run.append(i)
        out.append(self.decode(run))
        return "".join(out)

    def piece(self, i: int) -> str:
        """One token's raw vocabulary entry (byte-level BPE, "Ġthe"); timestamps by name."""
        i = int(i)
        if i >= self.timestamp_begin:
            return self.token_text(i)
        return self._tok.id_to_token(i) or f"<|{i}|>"

    def token_text(self, i: int) -> str:
        """One token's text; specials and timestamps by name."""
        i = int(i)
        if i >= self.timestamp_begin:
            return f"<|{(i - self.timestamp_begin) * self.TIME_STEP:.2f}|>"
        if i >= self.eot:
            return self._tok.id_to_token(i) or f"<|{i}|>"
        return self._tok.decode([i])

    def sot_sequence(self, language: Optional[str] = None, task: str = "transcribe", multilingual: bool = False) -> list[int]:
        """The decoder's prompt: <|startoftranscript|> [<|lang|> <|task|>] for multilingual models."""
        seq = [self.sot]
        if multilingual:
            if language is not None:
                if language not in self.languages:
                    raise ValueError(f"unknown language {language!r}")
                seq.append(self.languages[language])
            if task not in ("transcribe", "translate"):
                raise ValueError(f"task must be transcribe or translate, got {task!r}")
            seq.append(self.transcribe if task == "transcribe" else self.translate)
        return seq
