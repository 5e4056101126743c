"""A small trained tekken tokenizer (mistral-common's `tekken.json`) for the tiny Voxtral models.

Importable by the other tools scripts (`make_tekken`) or run alone:

    .venv-nemo/bin/python tools/tekken_tiny.py --out /tmp/tekken.json [--merges 400] [--audio offline|realtime]

The BPE is trained with the `tokenizers` library on the dev transcripts + the JFK transcript + extra texts (the
tekken pre-tokenizer regex, then byte-level pieces), and written in tekken's layout: the 256 bytes as ranks
0-255, then each learned merge's bytes as the next rank (mistral-common merges by rank, as tiktoken does, so the
learned order is the rank order). The special tokens are mistral-common's names at the ranks the published
Voxtral files use for the ones Voxtral reads ([AUDIO] 24 is also transformers' hard-coded audio_token_id,
[STREAMING_PAD] 32 the realtime model's pad), padded with mistral-common's `<SPECIAL_{id}>` fillers to the
published 1000 special tokens. `--audio` adds the published `audio` section (offline: 30 s chunks, the instruct
transcription format; realtime: the streaming format with its delays)."""
from __future__ import annotations

import argparse
import base64
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
AUDIO = REPO.parent / "shared" / "audio"
from speech_clips import JFK_TEXT  # noqa: E402  (this folder is on sys.path when run as a script)

PATTERN = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?"
           r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|"
           r"\s+(?!\S)|\s+")
NUM_SPECIAL = 1000
NAMED = {
    0: "<unk>", 1: "<s>", 2: "</s>", 3: "[INST]", 4: "[/INST]", 5: "[AVAILABLE_TOOLS]", 6: "[/AVAILABLE_TOOLS]",
    7: "[TOOL_RESULTS]", 8: "[/TOOL_RESULTS]", 9: "[TOOL_CALLS]", 10: "[IMG]", 11: "<pad>", 12: "[IMG_BREAK]",
    13: "[IMG_END]", 14: "[PREFIX]", 15: "[MIDDLE]", 16: "[SUFFIX]", 17: "[SYSTEM_PROMPT]", 18: "[/SYSTEM_PROMPT]",
    19: "[TOOL_CONTENT]", 24: "[AUDIO]", 25: "[BEGIN_AUDIO]", 32: "[STREAMING_PAD]", 33: "[STREAMING_WORD]",
    34: "[TRANSCRIBE]", 35: "[ARGS]", 36: "[CALL_ID]",
}
AUDIO_OFFLINE = {
    "sampling_rate": 16000, "frame_rate": 12.5,
    "audio_encoding_config": {"num_mel_bins": 128, "hop_length": 160, "window_size": 400},
    "chunk_length_s": 30.0, "transcription_format": "instruct",
}
AUDIO_REALTIME = {
    "sampling_rate": 16000, "frame_rate": 12.5,
    "audio_encoding_config": {"num_mel_bins": 128, "hop_length": 160, "window_size": 400},
    "transcription_format": "streaming", "transcription_delay_ms": 480.0,
    "streaming_look_ahead_ms": 2.5, "streaming_look_back_ms": 52.5, "streaming_n_left_pad_tokens": 32,
}


def corpus() -> list[str]:
    rows = [json.loads(line) for line in (AUDIO / "dev" / "manifest.jsonl").read_text().splitlines() if line.strip()]
    return [r["text"] for r in rows] + [JFK_TEXT]


def make_tekken(texts: list[str], merges: int = 400, audio: dict | None = None, version: str = "v7") -> dict:
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers
    from tokenizers.pre_tokenizers import ByteLevel

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PATTERN), behavior="isolated"),
        ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    alphabet = ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(vocab_size=len(alphabet) + merges, min_frequency=2, initial_alphabet=alphabet,
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer)
    # the byte-level alphabet back to bytes (GPT-2's printable mapping of the 256 bytes)
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    back = {chr(c): b for b, c in zip(bs, cs)}
    state = json.loads(tok.to_str())["model"]
    pieces = [bytes([i]) for i in range(256)]
    seen = set(pieces)
    for m in state["merges"]:
        a, b = m if isinstance(m, list) else m.split(" ")
        p = bytes(back[c] for c in a + b)
        if p not in seen:
            seen.add(p)
            pieces.append(p)

    def as_str(p: bytes):
        try:
            return p.decode("utf-8")
        except UnicodeDecodeError:
            return None

    vocab = [{"rank": i, "token_bytes": base64.b64encode(p).decode("ascii"), "token_str": as_str(p)}
             for i, p in enumerate(pieces)]
    top = max(NAMED)
    special = [{"rank": i, "token_str": NAMED.get(i, f"<SPECIAL_{i}>"), "is_control": True} for i in range(top + 1)]
    data = {
        "config": {"pattern": PATTERN, "num_vocab_tokens": len(vocab), "default_vocab_size": NUM_SPECIAL + len(vocab),
                   "default_num_special_tokens": NUM_SPECIAL, "version": version},
        "vocab": vocab,
        "special_tokens": special,
    }
    if audio is not None:
        data["audio"] = audio
    return data


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--merges", type=int, default=400)
    ap.add_argument("--audio", choices=["none", "offline", "realtime"], default="offline")
    ap.add_argument("--version", default="v7")
    args = ap.parse_args()
    audio = {"none": None, "offline": AUDIO_OFFLINE, "realtime": AUDIO_REALTIME}[args.audio]
    data = make_tekken(corpus() + ["lang:en"] * 4, args.merges, audio, args.version)
    Path(args.out).write_text(json.dumps(data, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
    print(f"{args.out}: {len(data['vocab'])} tokens + {NUM_SPECIAL} special")


if __name__ == "__main__":
    main()
