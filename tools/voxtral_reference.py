"""transformers' (and mistral-common's) outputs on the tiny Voxtral (tests/models/voxtral/tiny), for our
re-implementation to match.

Run from the repository root with the venv that holds transformers 5.25.0 and mistral-common 1.13.1:

    OMP_NUM_THREADS=1 .venv-nemo/bin/python tools/voxtral_reference.py

Writes tests/references/voxtral/tiny.json and tests/references/voxtral/tiny_stages.safetensors.

The prompts and the padded audio come from mistral-common itself (the tokenizer transformers' VoxtralProcessor
wraps: `encode_transcription` for a transcription request, `encode_chat_completion` for the translation turn of an
audio chunk and an instruction), the features from the processor's WhisperFeatureExtractor exactly as
`VoxtralProcessor._retrieve_input_features` computes them, and the tokens from
`VoxtralForConditionalGeneration.generate` (float32, CPU, torch threads 1). The audio goes to mistral-common as a
float32 WAV (the processor's own array path writes 16-bit PCM first; a float file keeps the samples exact, so the
same samples reach both implementations). Clips: jfk.wav, two dev clips, and "concat" (jfk.wav + two dev clips,
over 30 s: two chunks)."""
from __future__ import annotations

import base64
import io
import json
import os
import platform
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
import soundfile as sf
import torch

REPO = Path(__file__).resolve().parents[1]
AUDIO = REPO.parent / "shared" / "audio"
MODEL = REPO / "tests" / "models" / "voxtral" / "tiny"
OUT = REPO / "tests" / "references" / "voxtral"
CLIPS = ["jfk.wav", "dev/ls_61-70968-0002.wav", "dev/fleurs_en_004.wav"]
CONCAT = ["jfk.wav", "dev/ls_1089-134691-0001.wav", "dev/fleurs_en_004.wav"]
MAX_NEW = 120
BEAMS = 3
ENCODE_EXAMPLES = ["lang:en", "lang:fr", "Translate this to French.", "Translate this to English.",
                   "And so, my fellow Americans, ask not", " leading space", "naïve café 日本語 😀\n\ttabs  ",
                   "[TRANSCRIBE] <s> [INST]", "1234567890 12,345.67", "A GOLDEN FORTUNE AND A HAPPY LIFE"]


def load(name: str) -> np.ndarray:
    wav, sr = sf.read(AUDIO / name, dtype="float32")
    assert sr == 16000 and wav.ndim == 1
    return wav


def float_wav_b64(wav: np.ndarray) -> str:
    buf = io.BytesIO()
    sf.write(buf, wav, 16000, format="WAV", subtype="FLOAT")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def main():
    torch.set_num_threads(1)
    import mistral_common
    import transformers
    from mistral_common.protocol.instruct.chunk import AudioChunk, RawAudio, TextChunk
    from mistral_common.protocol.instruct.messages import UserMessage
    from mistral_common.protocol.instruct.request import ChatCompletionRequest
    from mistral_common.protocol.transcription.request import TranscriptionRequest
    from mistral_common.tokens.tokenizers.base import SpecialTokenPolicy
    from safetensors.torch import save_file
    from transformers import AutoProcessor, VoxtralForConditionalGeneration

    proc = AutoProcessor.from_pretrained(MODEL)
    model = VoxtralForConditionalGeneration.from_pretrained(MODEL, dtype=torch.float32).eval()
    mt = proc.tokenizer.tokenizer  # mistral-common's MistralTokenizer
    tek = mt.instruct_tokenizer.tokenizer
    akw = dict(sampling_rate=16000, padding=True, truncation=False, pad_to_multiple_of=480000, return_tensors="pt")

    def features(audios) -> torch.Tensor:
        return proc._retrieve_input_features([a.audio_array for a in audios], 3000, **akw)

    def transcription(wav, lang):
        req = TranscriptionRequest(model="voxtral-tiny", audio=RawAudio(data=float_wav_b64(wav), format="wav"),
                                   language=lang)
        t = mt.instruct_tokenizer.encode_transcription(req)
        return t.tokens, features(t.audios)

    def translation(wav, instruction):
        msg = UserMessage(content=[AudioChunk(input_audio=RawAudio(data=float_wav_b64(wav), format="wav")),
                                   TextChunk(text=instruction)])
        t = mt.encode_chat_completion(ChatCompletionRequest(messages=[msg]))
        return t.tokens, features(t.audios)

    def greedy(ids, feats):
        x = torch.tensor([ids])
        with torch.no_grad():
            g = model.generate(input_ids=x, attention_mask=torch.ones_like(x), input_features=feats,
                               max_new_tokens=MAX_NEW, do_sample=False)
        return g[0, len(ids):].tolist()

    cfg = model.config
    ref = {
        "how": {"tool": "tools/voxtral_reference.py", "model": "tests/models/voxtral/tiny",
                "transformers": transformers.__version__, "mistral_common": mistral_common.__version__,
                "torch": torch.__version__, "numpy": np.__version__, "python": platform.python_version(),
                "dtype": "float32", "device": "cpu", "torch_threads": torch.get_num_threads(),
                "attn_implementation": {"text": cfg.text_config._attn_implementation,
                                        "audio": cfg.audio_config._attn_implementation},
                "max_new_tokens": MAX_NEW, "generation_config": model.generation_config.to_diff_dict()},
        "tokenizer": {
            "n_words": tek.n_words, "num_special_tokens": tek.num_special_tokens,
            "specials": {s: tek.get_special_token(s) for s in ["<s>", "</s>", "[INST]", "[/INST]", "[AUDIO]",
                                                              "[BEGIN_AUDIO]", "[TRANSCRIBE]", "<pad>"]},
            "encode": {s: tek.encode(s, bos=False, eos=False) for s in ENCODE_EXAMPLES},
        },
        "clips": {},
    }
    dec_ids = tek.encode("naïve café 日本語 😀", bos=False, eos=False)
    dec_ids = dec_ids[:5] + [3, 24] + dec_ids[5:] + [2]
    ref["tokenizer"]["decode"] = {"ids": dec_ids,
                                  "ignore": tek.decode(dec_ids, special_token_policy=SpecialTokenPolicy.IGNORE),
                                  "keep": tek.decode(dec_ids, special_token_policy=SpecialTokenPolicy.KEEP)}
    # a multi-byte character cut by a special token: each side decoded alone
    euro = tek.encode("€", bos=False, eos=False)
    if len(euro) > 1:
        split = euro[:1] + [24] + euro[1:]
        ref["tokenizer"]["decode_split"] = {"ids": split, "ignore": tek.decode(split)}

    wavs = {c: load(c) for c in CLIPS}
    wavs["concat"] = np.concatenate([load(c) for c in CONCAT])
    stages = {}
    for name, wav in wavs.items():
        entry = {"samples": int(wav.shape[0])}
        for mode, lang in (("en", "en"), ("auto", None)):
            ids, feats = transcription(wav, lang)
            new = greedy(ids, feats)
            entry[mode] = {"input_ids": ids, "input_features_shape": list(feats.shape),
                           "num_audio_tokens": ids.count(cfg.audio_token_id), "greedy_ids": new,
                           "greedy_text": tek.decode(new)}
            print(name, mode, "|", entry[mode]["greedy_text"])
            if name == "jfk.wav" and mode == "en":
                x = torch.tensor([ids])
                with torch.no_grad():
                    audio = model.get_audio_features(feats).pooler_output
                    enc = model.model.audio_tower(feats).last_hidden_state
                    logits = model(input_ids=x, attention_mask=torch.ones_like(x), input_features=feats).logits
                stages["mel"] = feats[0, :, :400].contiguous()
                stages["mel_peak"] = feats.amax().reshape(1)
                stages["encoder_rows_0_64"] = enc[0, :64].contiguous()
                stages["projected"] = audio.contiguous()
                stages["first_logits"] = logits[0, -1].contiguous()
        ref["clips"][name] = entry

    ref["translate"] = {}
    for target, instruction in (("fr", "Translate this to French."), ("en", "Translate this to English.")):
        ids, feats = translation(wavs["jfk.wav"], instruction)
        new = greedy(ids, feats)
        ref["translate"][target] = {"instruction": instruction, "input_ids": ids, "greedy_ids": new,
                                    "greedy_text": tek.decode(new)}

    ref["beam"] = {"settings": {"num_beams": BEAMS, "num_return_sequences": BEAMS, "length_penalty": 1.0,
                                "early_stopping": False, "max_new_tokens": MAX_NEW}}
    for name, mode, lang in (("jfk.wav", "en", "en"), ("dev/ls_61-70968-0002.wav", "auto", None),
                             ("concat", "en", "en")):
        ids, feats = transcription(wavs[name], lang)
        x = torch.tensor([ids])
        with torch.no_grad():
            g = model.generate(input_ids=x, attention_mask=torch.ones_like(x), input_features=feats,
                               max_new_tokens=MAX_NEW, num_beams=BEAMS, num_return_sequences=BEAMS,
                               return_dict_in_generate=True, output_scores=True, do_sample=False)
        seqs = g.sequences[:, len(ids):]
        ref["beam"][f"{name}|{mode}"] = {
            "sequences": [s.tolist() for s in seqs],
            "sequences_note": "trailing pad_token_id fill after EOS kept as transformers returns it",
            "sequences_scores": g.sequences_scores.tolist(),
            "texts": [tek.decode([int(i) for i in s if int(i) != 11]) for s in seqs],
        }
        print("beam", name, mode, g.sequences_scores.tolist())

    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "tiny.json").write_text(json.dumps(ref, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    save_file({k: v.float().contiguous() for k, v in stages.items()}, str(OUT / "tiny_stages.safetensors"))
    print("wrote", OUT)


if __name__ == "__main__":
    main()
