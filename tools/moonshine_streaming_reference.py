"""Reference outputs of the tiny Moonshine Streaming model from transformers 5.25
(`MoonshineStreamingForConditionalGeneration` + `MoonshineStreamingProcessor`), for tests/test_moonshine_streaming*.py.

Run from the repository root with the venv that holds transformers:

    OMP_NUM_THREADS=1 nice .venv-nemo/bin/python tools/moonshine_streaming_reference.py

Writes tests/references/moonshine_streaming/reference.json:

- offline: jfk.wav and two dev clips through the processor (`return_attention_mask=True`: the encoder's sliding
  windows apply only with a mask in transformers; the tiny model's processor config asks for it) and
  `generate(max_new_tokens=ceil(6.5 x seconds))` (the model card's bound): greedy ids and text, and beam
  search (num_beams=3) ids;
- streaming: transformers has no streaming generate (the model card: its code path "does not yet implement fully
  efficient streaming"); the model is streaming by construction (causal convolutions, sliding windows, no
  encoder positions), and this is the streaming path of the model as transcribe.cpp runs it, with
  transformers' modules: audio arrives in chunks of `chunk_ms`; after each chunk, the encoder frames whose
  lookahead has arrived are final (`stable` = the front end's complete frames less the windows' lookahead, 12
  frames in the published windows); every `decode_every_ms` (240) of new final frames the decoder decodes them
  greedily from the start (transformers' encoder run on all the audio so far, its output cut to the final
  frames, then `generate` over them: a partial text, bound ceil(6.5 x their seconds)); runs: chunks of 500 ms
  decoded every 240 ms in segments of 20 s, chunks of 320 ms decoded every 960 ms in segments of 4 s; at the end, the audio is
  padded to whole 5 ms frames and decoded whole as offline: the final text. A segment ends once it holds
  `segment_s` of audio, at the quietest 20 ms block of its last 2 s (the lowest sum of squares on the 320-sample
  grid from the segment's start, the first of equals); each segment is then decoded as an offline input and a
  new one starts with the audio after the cut.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from speech_clips import clips  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RATE = 16000
FRAME = 80          # samples per 5 ms front-end frame
ENC = 320           # samples per encoder frame


def load(path):
    from transformers import AutoProcessor, MoonshineStreamingForConditionalGeneration

    model = MoonshineStreamingForConditionalGeneration.from_pretrained(path).eval()
    return model, AutoProcessor.from_pretrained(path)


def bound(samples: int) -> int:
    return max(1, math.ceil(6.5 * samples / RATE))


@torch.no_grad()
def offline(model, proc, wav, beams: int = 1) -> list[int]:
    feats = proc(wav, sampling_rate=RATE, return_tensors="pt", return_attention_mask=True)
    out = model.generate(input_values=feats["input_values"], attention_mask=feats["attention_mask"],
                         max_new_tokens=bound(len(wav)), num_beams=beams, do_sample=False)
    ids = out[0].tolist()[1:]  # after the decoder start token
    while ids and ids[-1] in (model.config.eos_token_id, model.config.pad_token_id):
        ids.pop()
    return ids


@torch.no_grad()
def partial(model, wav, frames: int) -> list[int]:
    """Greedy ids over the first `frames` encoder frames of transformers' encoding of `wav` (whole 5 ms frames)."""
    from transformers.models.moonshine_streaming.modeling_moonshine_streaming import \
        MoonshineStreamingEncoderModelOutput as EncoderOutput

    n = (len(wav) // FRAME) * FRAME
    x = torch.from_numpy(np.ascontiguousarray(wav[:n], dtype=np.float32))[None]
    enc = model.model.encoder(x, attention_mask=torch.ones_like(x, dtype=torch.long)).last_hidden_state
    enc = enc[:, :frames].clone()
    out = model.generate(encoder_outputs=EncoderOutput(last_hidden_state=enc), max_new_tokens=bound(frames * ENC), do_sample=False, num_beams=1)
    ids = out[0].tolist()[1:]
    while ids and ids[-1] in (model.config.eos_token_id, model.config.pad_token_id):
        ids.pop()
    return ids


def quiet_cut(seg: np.ndarray, tail_s: float = 2.0) -> int:
    blocks = len(seg) // ENC
    first = max(0, blocks - int(round(tail_s * RATE / ENC)))
    energy = [float(np.sum(seg[b * ENC:(b + 1) * ENC].astype(np.float64) ** 2)) for b in range(first, blocks)]
    return (first + int(np.argmin(energy))) * ENC


def stream(model, wav, chunk_ms: float, decode_every_ms: float = 240.0, segment_s: float = 20.0,
           lookahead: int = 12) -> dict:
    chunk = int(round(chunk_ms * RATE / 1000))
    every = int(round(decode_every_ms / 20.0))
    seg_len = int(round(segment_s * RATE))
    seg = np.zeros(0, np.float32)
    decoded = 0
    partials, segments = [], []
    fed = 0
    for a in range(0, len(wav), chunk):
        seg = np.concatenate([seg, wav[a:a + chunk]])
        fed += len(wav[a:a + chunk])
        while len(seg) >= seg_len:
            cut = quiet_cut(seg[:seg_len])
            segments.append(offline_ids(model, seg[:cut]))
            seg = seg[cut:]
            decoded = 0
        f = len(seg) // FRAME
        avail = -(-f // 4)
        stable = max(0, avail - lookahead)
        if stable - decoded >= every and stable > 0:
            ids = partial(model, seg, stable)
            partials.append({"fed": fed, "segment": len(segments), "frames": stable, "ids": ids})
            decoded = stable
    if len(seg):
        segments.append(offline_ids(model, seg))
    return {"chunk_ms": chunk_ms, "decode_every_ms": decode_every_ms, "segment_s": segment_s,
            "partials": partials, "segments": segments}


_PROC = {}


def offline_ids(model, seg):
    return offline(model, _PROC["p"], seg)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(ROOT / "tests" / "models" / "moonshine_streaming" / "tiny"))
    ap.add_argument("--out", default=str(ROOT / "tests" / "references" / "moonshine_streaming" / "reference.json"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    model, proc = load(args.model)
    _PROC["p"] = proc
    data = clips()
    tok = proc.tokenizer
    picks = [data[0], data[1], data[2]]
    out = {"offline": [], "streaming": []}
    for name, wav, _ in picks:
        g = offline(model, proc, wav)
        b = offline(model, proc, wav, beams=3)
        out["offline"].append({"clip": name, "samples": len(wav), "greedy": g, "text": tok.decode(g, skip_special_tokens=True),
                               "beam3": b, "beam3_text": tok.decode(b, skip_special_tokens=True)})
        print(name, "|", out["offline"][-1]["text"], "|", out["offline"][-1]["beam3_text"], flush=True)
    jfk = data[0][1]
    for chunk_ms, every_ms, seg_s in ((500.0, 240.0, 20.0), (320.0, 960.0, 4.0)):
        s = stream(model, jfk, chunk_ms, decode_every_ms=every_ms, segment_s=seg_s)
        s["clip"] = "jfk.wav"
        s["final_text"] = " ".join(tok.decode(ids, skip_special_tokens=True).strip() for ids in s["segments"])
        for p in s["partials"]:
            p["text"] = tok.decode(p["ids"], skip_special_tokens=True)
        out["streaming"].append(s)
        print(chunk_ms, every_ms, seg_s, len(s["partials"]), "|", s["final_text"], flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=None, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
