"""NeMo SALM's outputs on the tiny Canary-Qwen model (tests/models/canary_qwen/tiny), for our re-implementation to match.

Run from the repository root with the NeMo venv (NeMo 3.0.0, transformers 5.25, peft):

    OMP_NUM_THREADS=1 .venv-nemo/bin/python tools/canary_qwen_reference.py

Writes tests/references/canary_qwen/tiny.json and tests/references/canary_qwen/tiny_stages.safetensors.
Audio: <repo>/../shared/audio/jfk.wav and three dev clips. Everything runs as NeMo runs it by default: float32 on
CPU (the bfloat16 checkpoint's values cast up as `load_state_dict` copies them), torch threads 1, the model from
`SALM.from_pretrained(dir)` (LoRA unmerged: PEFT adds lora_B(lora_A(x)) * alpha / r to q_proj / v_proj).

For each clip: the prompt ids `SALM.generate` builds from `[{"role": "user", "content": "Transcribe the following:
<|audioplaceholder|>"}]` (its `qwen` PromptFormatter), the audio's rows, greedy ids (`generate(max_new_tokens=MAX_NEW)`)
and beam ids (`num_beams=3`, HF's `sequences_scores`); for jfk.wav and one dev clip also the stages: the mel features,
the encoder's output, the projected audio rows and the first step's logits (safetensors file).
"""
from __future__ import annotations

import json
import os
import platform
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import soundfile as sf
import torch

REPO = Path(__file__).resolve().parents[1]
AUDIO = REPO.parent / "shared" / "audio"
MODEL = REPO / "tests" / "models" / "canary_qwen" / "tiny"
OUT = REPO / "tests" / "references" / "canary_qwen"
CLIPS = ["jfk.wav", "dev/ls_61-70968-0002.wav", "dev/ls_1089-134691-0001.wav", "dev/fleurs_en_004.wav"]
STAGES = ["jfk.wav", "dev/ls_61-70968-0002.wav"]
MAX_NEW = 120
BEAMS = 3


def load(name):
    wav, sr = sf.read(AUDIO / name, dtype="float32")
    assert sr == 16000 and wav.ndim == 1
    return torch.from_numpy(wav)


def main():
    import nemo
    import peft
    import transformers
    from nemo.collections.common.prompts import PromptFormatter
    from nemo.collections.speechlm2.models import SALM
    from safetensors.torch import save_file
    from transformers import GenerationConfig

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = SALM.from_pretrained(str(MODEL)).eval()
    prompt = [{"role": "user", "content": f"Transcribe the following: {model.audio_locator_tag}"}]
    formatter = PromptFormatter.resolve(model.cfg.prompt_format)(model.tokenizer)
    prompt_ids = formatter.encode_dialog(turns=[dict(t) for t in prompt])["input_ids"].tolist()
    tok = model.tokenizer
    out = {
        "tool": "tools/canary_qwen_reference.py", "nemo": nemo.__version__, "transformers": transformers.__version__,
        "peft": peft.__version__, "torch": torch.__version__, "machine": platform.machine(),
        "model": "tests/models/canary_qwen/tiny", "max_new_tokens": MAX_NEW, "num_beams": BEAMS,
        "audio_locator_id": model.audio_locator_tag_id, "eos_id": model.text_eos_id, "pad_id": model.text_pad_id,
        "prompt_ids": prompt_ids, "clips": {},
    }
    stages = {}
    for name in CLIPS:
        wav = load(name)
        audios, lens = wav[None], torch.tensor([len(wav)])
        with torch.no_grad():
            greedy = model.generate(prompts=[[dict(t) for t in prompt]], audios=audios, audio_lens=lens,
                                    max_new_tokens=MAX_NEW)[0].tolist()
            gen = GenerationConfig(bos_token_id=model.text_bos_id, eos_token_id=model.text_eos_id,
                                   pad_token_id=model.text_pad_id, num_beams=BEAMS, num_return_sequences=BEAMS,
                                   max_new_tokens=MAX_NEW, do_sample=False, return_dict_in_generate=True,
                                   output_scores=True)
            beam = model.generate(prompts=[[dict(t) for t in prompt]], audios=audios, audio_lens=lens,
                                  generation_config=gen)
            emb, emb_len, enc = model.perception(input_signal=audios, input_signal_length=lens, return_encoder_emb=True)
        row = {
            "audio_rows": int(emb_len[0]),
            "greedy_ids": greedy,
            "greedy_text": tok.ids_to_text([i for i in greedy if i != model.text_eos_id]),
            "beam_sequences": [s.tolist() for s in beam.sequences],
            "beam_scores": beam.sequences_scores.tolist(),
        }
        out["clips"][name] = row
        print(name, int(emb_len[0]), "|", row["greedy_text"])
        if name in STAGES:
            key = name.replace("/", "_").replace(".wav", "")
            with torch.no_grad():
                mel, mel_len = model.perception.preprocessor(input_signal=audios, length=lens)
                ids = torch.tensor([prompt_ids])
                embeds = model.embed_tokens(ids.where(ids != model.audio_locator_tag_id, 0))[0]
                at = prompt_ids.index(model.audio_locator_tag_id)
                x = torch.cat([embeds[:at], emb[0, :int(emb_len[0])], embeds[at + 1:]])[None]
                from nemo.collections.speechlm2.parts.pretrained import move_embedding

                with move_embedding(model):
                    logits = model.llm(inputs_embeds=x).logits[0, -1]
            stages[f"{key}.mel"] = mel[0, :, :int(mel_len[0])].contiguous()
            stages[f"{key}.encoder"] = enc[0, :int(emb_len[0])].contiguous()
            stages[f"{key}.audio_rows"] = emb[0, :int(emb_len[0])].contiguous()
            stages[f"{key}.first_logits"] = logits.float().contiguous()
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "tiny.json").write_text(json.dumps(out, indent=1) + "\n")
    save_file(stages, str(OUT / "tiny_stages.safetensors"))


if __name__ == "__main__":
    main()
