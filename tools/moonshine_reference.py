"""Reference outputs of a Moonshine model from transformers (MoonshineForConditionalGeneration.generate), for
tests/test_moonshine.py.

Run from the repository root with the transformers venv (transformers 5.25):

    OMP_NUM_THREADS=1 .venv-nemo/bin/python tools/moonshine_reference.py [MODEL_DIR] [OUT_JSON]

(defaults: tests/models/moonshine/tiny and tests/references/moonshine/reference.json).

The output bound: transformers' `generate` has no Moonshine rule of its own (without `max_length` it takes
generation_config.json's, 194 in the published models); the model card of UsefulSensors/moonshine-tiny and -base
bounds the output by the audio's length, `token_limit_factor = 6.5 / sampling_rate`,
`max_length = int((attention_mask.sum(-1) * token_limit_factor).max())`, `generate(..., max_length=max_length)`
(6.5 tokens a second; max_length counts the decoder's start token). Every case here runs that rule, one input at a
time; a max_length of 1 or less (under 0.31 s) leaves no token: generate raises ValueError (recorded).

Cases: jfk.wav whole (greedy, and beam search with 3 beams, all 3 returned with their sequences_scores), its first
2 s (the bound cuts the output), its first 0.5 s (2 tokens) and 0.25 s (max_length 1: generate refuses it), two dev clips; plus the encoder's output on the 2 s clip (first
8 frames) and the first step's logits on jfk.wav for float comparisons.
"""
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from speech_clips import clips  # noqa: E402


def main():
    model_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "tests" / "models" / "moonshine" / "tiny"
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else REPO / "tests" / "references" / "moonshine" / "reference.json"
    torch.set_num_threads(1)
    import transformers
    from transformers import MoonshineForConditionalGeneration, PreTrainedTokenizerFast, Wav2Vec2FeatureExtractor

    model = MoonshineForConditionalGeneration.from_pretrained(str(model_dir)).eval()
    fe = Wav2Vec2FeatureExtractor.from_pretrained(str(model_dir))
    tok = PreTrainedTokenizerFast(tokenizer_file=str(model_dir / "tokenizer.json"))
    data = clips()
    cases = [("jfk.wav", "jfk.wav", None), ("jfk_2s", "jfk.wav", 32000), ("jfk_0.5s", "jfk.wav", 8000),
             ("jfk_0.25s", "jfk.wav", 4000), (data[1][0], data[1][0], None), (data[5][0], data[5][0], None)]
    by_name = {n: w for n, w, _ in data}
    results = []
    for case, source, cut in cases:
        wav = by_name[source] if cut is None else by_name[source][:cut]
        inputs = fe(wav, sampling_rate=fe.sampling_rate, return_tensors="pt")
        factor = 6.5 / fe.sampling_rate
        max_length = int((inputs.attention_mask.sum(dim=-1) * factor).max().item())
        row = {"name": case, "source": source, "samples": len(wav), "max_length": max_length}
        try:
            with torch.no_grad():
                ids = model.generate(**inputs, max_length=max_length, num_beams=1, do_sample=False)[0].tolist()
        except ValueError as e:  # max_length 1: nothing left to generate after the start token
            row["error"] = str(e).split(".")[0]
            results.append(row)
            print(case, max_length, "error:", row["error"])
            continue
        row["greedy"] = {"ids": ids, "text": tok.decode(ids, skip_special_tokens=True)}
        if case == "jfk.wav":
            with torch.no_grad():
                g = model.generate(**inputs, max_length=max_length, num_beams=3, num_return_sequences=3,
                                   do_sample=False, output_scores=True, return_dict_in_generate=True)
            row["beam3"] = [{"ids": s.tolist(), "text": tok.decode(s.tolist(), skip_special_tokens=True),
                             "score": float(sc)} for s, sc in zip(g.sequences, g.sequences_scores)]
            with torch.no_grad():
                logits = model(**inputs, decoder_input_ids=torch.tensor([[model.config.decoder_start_token_id]])).logits
            row["first_logits"] = [round(float(x), 6) for x in logits[0, -1]]
        if case == "jfk_2s":
            with torch.no_grad():
                enc = model.model.encoder(inputs.input_values).last_hidden_state[0]
            row["encoder_frames"] = int(enc.shape[0])
            row["encoder_head"] = [[round(float(x), 6) for x in f] for f in enc[:8]]
        results.append(row)
        print(case, max_length, row["greedy"]["text"])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"transformers": transformers.__version__, "torch": torch.__version__,
                               "rule": "max_length = int(samples * (6.5 / 16000)) (model card), one input at a time",
                               "cases": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
