"""Reference outputs of transformers' Kyutai STT (`KyutaiSpeechToTextForConditionalGeneration`, transformers 5.25.0) on
the tiny model, for tests/test_kyutai.py.

    OMP_NUM_THREADS=1 nice .venv-nemo/bin/python tools/kyutai_reference.py

(run from the repository root; `.venv-nemo` is the venv holding transformers). The audio is read at 24 kHz by
`transcribe.audio.load_audio` (the samples the tests read). For each clip (jfk.wav, two dev clips, and jfk.wav three
times over, 33 s, which crosses the LM's and the codec transformer's sliding windows many times):
 - `ids`: the greedy generate's tokens after the initial one (`logit_margin`: the smallest top-2 logit gap) (the processor's padding: silence before, delay + 1 s
   after; one token per 80 ms frame), `text`: batch_decode(skip_special_tokens=True);
 - `codes`: the codec's codes of the padded audio (`codec_model.encode`, frames x codebooks), jfk.wav only, and
   `code_margin`: the smallest relative gap between the nearest codebook entry's distance and the next one's;
 - `stream_codes`: the codec's streaming encode (`encode(use_streaming=True)` 5 frames at a time, its padding and
   attention caches carried), jfk.wav only;
 - `window_ids`: the generate with generation_config.audio_window_size = 5, jfk.wav only. It is not the streaming
   encode: transformers 5.25.0's `prepare_inputs_for_generation` cuts each new window's audio from the previous
   window's start (`current_window[0]` before it moves), so from the second window on the codec encodes audio it has
   already seen and the ids part from the offline ones; recorded, not compared;
 - `beam`: generate(num_beams=2)'s outcome: its ids, or the error it raises.
"""
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tools"))
from speech_clips import AUDIO  # noqa: E402

CLIPS = ["jfk.wav", "dev/1272-128104-0000.flac", "dev/2277-149896-0000.flac"]


def code_margin(codec, x):
    """The smallest gap, over the frames and codebooks, between the nearest codebook entry's distance and the next
    one's, relative to the nearest's (how far the codes are from a tie)."""
    lat = codec.encoder(x).latents
    worst = float("inf")
    for rvq in (codec.quantizer.semantic_residual_vector_quantizer, codec.quantizer.acoustic_residual_vector_quantizer):
        r = rvq.input_proj(lat)[0].T
        for layer in rvq.layers:
            emb = layer.codebook.embed
            d = torch.cdist(r[None], emb[None])[0].sort(dim=-1).values
            worst = min(worst, float(((d[:, 1] - d[:, 0]) / d[:, 0]).min()))
            r = r - emb[torch.cdist(r[None], emb[None])[0].argmin(-1)]
    return worst


def main():
    import numpy as np
    import transformers
    from transformers import KyutaiSpeechToTextForConditionalGeneration, KyutaiSpeechToTextProcessor

    from transcribe.audio import load_audio

    torch.set_num_threads(1)
    model_dir = REPO / "tests" / "models" / "kyutai" / "tiny"
    out = REPO / "tests" / "references" / "kyutai"
    out.mkdir(parents=True, exist_ok=True)
    proc = KyutaiSpeechToTextProcessor.from_pretrained(model_dir)
    model = KyutaiSpeechToTextForConditionalGeneration.from_pretrained(model_dir).eval()
    manifest = [json.loads(x) for x in (AUDIO / "dev" / "manifest.jsonl").read_text().splitlines()]
    names = [CLIPS[0]] + [("dev/" + r["audio"]) for r in manifest[:2]] + ["jfk.wav x3"]
    result = {"transformers": transformers.__version__, "clips": []}
    for name in names:
        if name.endswith(" x3"):
            one = load_audio(str(AUDIO / name[:-3]), 24000)
            wav = np.concatenate([one, one, one])
        else:
            wav = load_audio(str(AUDIO / name), 24000)
        inputs = proc(audio=wav, sampling_rate=24000, return_tensors="pt")
        with torch.inference_mode():
            res = model.generate(**inputs, output_scores=True, return_dict_in_generate=True)
        gen = res.sequences
        ids = gen[0, 1:].tolist()
        top2 = torch.stack(res.scores)[:, 0].topk(2, dim=-1).values
        row = {"audio": name, "samples": int(len(wav)), "ids": ids,
               "logit_margin": float((top2[:, 0] - top2[:, 1]).min()),
               "text": proc.batch_decode(gen, skip_special_tokens=True)[0]}
        if name == "jfk.wav":
            with torch.inference_mode():
                codes = model.codec_model.encode(inputs["input_values"]).audio_codes[0].T
                row["codes"] = codes.tolist()
                row["code_margin"] = code_margin(model.codec_model, inputs["input_values"])
                x, parts, enc_cache, pad_cache = inputs["input_values"], [], None, None
                for a in range(0, x.shape[-1] - 5 * 1920 + 1, 5 * 1920):
                    o = model.codec_model.encode(x[..., a:a + 5 * 1920], encoder_cache=enc_cache,
                                                 padding_cache=pad_cache, use_streaming=True)
                    enc_cache, pad_cache = o.encoder_cache, o.padding_cache
                    parts.append(o.audio_codes[0].T)
                row["stream_codes"] = torch.cat(parts).tolist()
                model.generation_config.audio_window_size = 5
                row["window_ids"] = model.generate(**inputs)[0, 1:].tolist()
                del model.generation_config.audio_window_size
                try:
                    beam = model.generate(**inputs, num_beams=2)
                    row["beam"] = {"ids": beam[0, 1:].tolist()}
                except Exception as e:  # noqa: BLE001 - the outcome is what is recorded
                    row["beam"] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
        print(name, len(ids), repr(row["text"]), flush=True)
        result["clips"].append(row)
    (out / "tiny.json").write_text(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
