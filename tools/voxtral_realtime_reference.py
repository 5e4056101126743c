"""Reference outputs of transformers 5.25.0 (+ mistral-common 1.13.1) for the tiny Voxtral Realtime model.

    OMP_NUM_THREADS=1 .venv-nemo/bin/python tools/voxtral_realtime_reference.py

Writes tests/references/voxtral_realtime/tiny.json: for jfk.wav and three dev clips,
- offline: the processor's request (`VoxtralRealtimeProcessor(audio)`: prompt ids, features) and
  `generate(**inputs)`'s ids and text (`batch_decode(skip_special_tokens=True)`), at the tokenizer's delay (480 ms)
  and, for jfk, at 320 ms (a `TranscriptionRequest` with target_streaming_delay_ms, num_delay_tokens from
  mistral-common's audio config);
- streaming: transformers' documented streaming generate (the processor's first chunk with is_first_audio_chunk,
  then chunks of 8 * 160 + 400 samples with center=False, from a generator of input_features), over the audio
  padded on the right by num_right_pad_tokens * raw_audio_length_per_tok (the documentation's example pads it so;
  it then feeds the unpadded array by a typo, `xaudio`), its ids and text;
- checks of the stages: features of jfk (a slice and the sums), the first step's logits (top 5).
"""
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
import soundfile as sf
import torch

REPO = Path(__file__).resolve().parents[1]
AUDIO = REPO.parent / "shared" / "audio"
MODEL = REPO / "tests" / "models" / "voxtral_realtime" / "tiny"
OUT = REPO / "tests" / "references" / "voxtral_realtime" / "tiny.json"
CLIPS = ["jfk.wav", "dev/cv_17767698.wav", "dev/cv_18820498.wav", "dev/ami_ES2011a_headset0_40-46s.wav"]


def stream_ids(model, processor, audio):
    """transformers' documented streaming generate (see the module docstring)."""
    audio = np.pad(audio, (0, processor.num_right_pad_tokens * processor.raw_audio_length_per_tok))
    first = processor(audio[:processor.num_samples_first_audio_chunk], is_streaming=True, is_first_audio_chunk=True,
                      return_tensors="pt")

    def features():
        yield first.input_features
        mel_frame_idx = processor.num_mel_frames_first_audio_chunk
        hop = processor.feature_extractor.hop_length
        win = processor.feature_extractor.win_length
        start = mel_frame_idx * hop - win // 2
        while (end := start + processor.num_samples_per_audio_chunk) < audio.shape[0]:
            yield processor(audio[start:end], is_streaming=True, is_first_audio_chunk=False,
                            return_tensors="pt").input_features
            mel_frame_idx += processor.audio_length_per_tok
            start = mel_frame_idx * hop - win // 2

    out = model.generate(input_ids=first.input_ids, input_features=features(),
                         num_delay_tokens=first.num_delay_tokens)
    return first.input_ids[0].tolist(), out[0, first.input_ids.shape[1]:].tolist()


def main():
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(MODEL))
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    import transformers
    import mistral_common
    from mistral_common.protocol.transcription.request import StreamingMode, TranscriptionRequest
    from mistral_common.tokens.tokenizers.audio import Audio
    from transformers import VoxtralRealtimeForConditionalGeneration, VoxtralRealtimeProcessor

    torch.set_num_threads(1)
    processor = VoxtralRealtimeProcessor.from_pretrained(args.model)
    model = VoxtralRealtimeForConditionalGeneration.from_pretrained(args.model, dtype=torch.float32).eval()
    tok = processor.tokenizer
    mc = tok.tokenizer  # mistral-common's MistralTokenizer
    refs = {"how": {"transformers": transformers.__version__, "mistral_common": mistral_common.__version__,
                    "torch": torch.__version__, "delay_ms": processor.mistral_common_audio_config.transcription_delay_ms,
                    "num_delay_tokens": processor.num_delay_tokens,
                    "num_right_pad_tokens": processor.num_right_pad_tokens},
            "generation_config": model.generation_config.to_dict(), "clips": {}}
    with torch.inference_mode():
        for clip in CLIPS:
            wav, sr = sf.read(str(AUDIO / clip), dtype="float32")
            assert sr == 16000
            inputs = processor(wav, return_tensors="pt")
            ids = model.generate(**inputs)
            prompt = inputs.input_ids[0].tolist()
            gen = ids[0, len(prompt):].tolist()
            row = {"prompt": prompt, "frames": int(inputs.input_features.shape[-1]), "offline_ids": gen,
                   "offline_text": processor.batch_decode(ids[:, len(prompt):], skip_special_tokens=True)[0]}
            s_prompt, s_ids = stream_ids(model, processor, wav)
            assert s_prompt == prompt
            row["stream_ids"] = s_ids
            row["stream_text"] = tok.decode(s_ids, skip_special_tokens=True)
            if clip == "jfk.wav":
                f = inputs.input_features[0]
                row["features"] = {"slice_frames": [300, 304], "slice": f[:, 300:304].T.tolist(),
                                   "sum": float(f.double().sum()), "abs_sum": float(f.double().abs().sum())}
                out = model(input_ids=inputs.input_ids, input_features=inputs.input_features[:, :, :8 * len(prompt)],
                            num_delay_tokens=inputs.num_delay_tokens)  # the prompt with its audio: the first step
                logits = out.logits[0, -1].float()
                top = torch.topk(logits, 5)
                row["first_step_top5"] = {"ids": top.indices.tolist(), "values": top.values.tolist()}
                # another delay: mistral-common's offline request at 320 ms
                audio = Audio(audio_array=wav, sampling_rate=16000, format="wav")
                req = TranscriptionRequest(audio=audio.to_base64("wav"), streaming=StreamingMode.OFFLINE,
                                           language=None, target_streaming_delay_ms=320)
                enc = mc.encode_transcription(req)
                feats = processor.feature_extractor(enc.audios[0].audio_array, sampling_rate=16000,
                                                    return_tensors="pt").input_features
                n_delay = processor.mistral_common_audio_config.get_num_delay_tokens(320)
                ids320 = model.generate(input_ids=torch.tensor([enc.tokens]), input_features=feats,
                                        num_delay_tokens=n_delay)
                row["delay_320"] = {"prompt": enc.tokens, "num_delay_tokens": n_delay,
                                    "ids": ids320[0, len(enc.tokens):].tolist()}
            refs["clips"][clip] = row
            print(clip, repr(row["offline_text"]), "| stream:", repr(row["stream_text"]), flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(refs, indent=1) + "\n", encoding="utf-8")
    print("wrote", out)


if __name__ == "__main__":
    sys.exit(main())
