#!/usr/bin/env python
"""Where one Granite Speech call's time goes in this package: front end + encoder + projector, the LM's prefill,
and the decode per generated token (greedy steps on the KV cache), on a 60 s clip of real speech.

    python3 benchmarks/audio_llm_split.py [MODEL_DIR] [float32|bfloat16|int8]

Default model: local-models/granite-4.0-1b-speech-random (benchmarks/make_audio_llm_model.py); 2 threads; two
repetitions (the first warms up). Check `uptime` first: run it alone.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from speech_clip import speech_clip  # noqa: E402

import transcribe  # noqa: E402
import transcribe.runtime  # noqa: E402

STEPS = 50


def main() -> None:
    path = sys.argv[1] if len(sys.argv) > 1 else "local-models/granite-4.0-1b-speech-random"
    dtype = sys.argv[2] if len(sys.argv) > 2 else "bfloat16"
    torch.set_num_threads(2)
    transcribe.runtime.tune_malloc()
    m = transcribe.load_model(path, threads=2, dtype=None if dtype == "float32" else dtype)
    pcm = speech_clip(60.0)[0]
    lm = m.model.lm
    with torch.inference_mode():
        for _ in range(2):
            t0 = time.perf_counter()
            emb = m.audio_embeddings([pcm])[0]
            prompt = m.prompts.build(None, None, None)
            ids = prompt.ids(m.audio_id, emb.shape[0])
            x = lm.embed(torch.tensor(ids))
            a = len(prompt.before)
            x[a:a + emb.shape[0]] = emb.to(x.dtype)
            t1 = time.perf_counter()
            cache = lm.new_cache(1, x.shape[0] + STEPS + 1)
            tok = lm.logits(lm(x[None], cache)[:, -1]).argmax(-1)
            t2 = time.perf_counter()
            for _ in range(STEPS):
                tok = lm.logits(lm(lm.embed(tok[:, None]), cache)[:, -1]).argmax(-1)
            t3 = time.perf_counter()
            print(f"{dtype}: audio {t1 - t0:.2f} s ({x.shape[0]} prompt rows), prefill {t2 - t1:.2f} s, "
                  f"decode {(t3 - t2) / STEPS * 1000:.0f} ms/token")


if __name__ == "__main__":
    main()
