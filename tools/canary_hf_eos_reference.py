"""transformers' greedy and beam search on tests/models/canary-hf-tiny with the EOS logit raised, so that
hypotheses end on EOS (tests/references/canary_hf/ has none that do in its beams): the rules a beam search
re-implementation must match there (EOS counted in the length, length_penalty's exponent, the early-stop
heuristic) are then exercised. Writes tests/references/canary_hf_eos/reference.json.

Run from the repository root with the venv that holds transformers 5.24.0 (torch 2.13.0 CPU, soundfile):

    OMP_NUM_THREADS=1 .venv-nemo/bin/python tools/canary_hf_eos_reference.py

The model is the committed one with `proj_out.bias[3]` (EOS) raised by `BUMP` (each value in BUMPS), in a
temporary copy; the test makes the same copy (the bias read, BUMP added in float32, saved) and compares.
Audio: ../shared/audio (jfk.wav and three dev clips), read with soundfile as float32.
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import soundfile as sf  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers import AutoProcessor, CanaryForConditionalGeneration  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
MODEL = REPO / "tests" / "models" / "canary-hf-tiny"
AUDIO = REPO.parent / "shared" / "audio"
OUT = REPO / "tests" / "references" / "canary_hf_eos" / "reference.json"
CLIPS = ["jfk.wav", "dev/ls_61-70968-0002.wav", "dev/cv_18933160.wav", "dev/fleurs_en_004.wav"]
TASKS = [("en", True), ("en", False), ("de", True)]
SEARCHES = [(1, 1.0), (4, 1.0), (4, 0.5), (3, 2.0)]  # (num_beams, length_penalty)
BUMPS = [2.0, 3.0]
MAX_NEW = 40


def bumped_copy(folder: Path, bump: float) -> None:
    shutil.copytree(MODEL, folder)
    sd = load_file(str(folder / "model.safetensors"))
    sd["proj_out.bias"][3] += bump
    save_file(sd, str(folder / "model.safetensors"), metadata={"format": "pt"})


def main() -> None:
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    runs = []
    for bump in BUMPS:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / "model"
            bumped_copy(folder, bump)
            proc = AutoProcessor.from_pretrained(str(folder))
            model = CanaryForConditionalGeneration.from_pretrained(str(folder)).eval()
            for clip in CLIPS:
                wav, _ = sf.read(str(AUDIO / clip), dtype="float32")
                for target, pnc in TASKS:
                    inputs = proc.apply_transcription_request(audio=wav, source_language="en",
                                                              target_language=target, punctuation=pnc)
                    prompt = inputs["decoder_input_ids"].shape[1]
                    for beams, penalty in SEARCHES:
                        with torch.inference_mode():
                            out = model.generate(**inputs, max_new_tokens=MAX_NEW, num_beams=beams, do_sample=False,
                                                 length_penalty=penalty, return_dict_in_generate=True,
                                                 output_scores=True)
                        ids = out.sequences[0, prompt:].tolist()
                        runs.append({"bump": bump, "clip": clip, "target_language": target, "punctuation": pnc,
                                     "num_beams": beams, "length_penalty": penalty, "generated_ids": ids,
                                     "sequence_score": float(out.sequences_scores[0]) if beams > 1 else None,
                                     "text": proc.batch_decode([out.sequences[0, prompt:]],
                                                               skip_special_tokens=True)[0]})
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({
        "made_by": "tools/canary_hf_eos_reference.py",
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__},
        "model": "tests/models/canary-hf-tiny with proj_out.bias[3] += bump (float32)",
        "max_new_tokens": MAX_NEW,
        "calls": "processor.apply_transcription_request(audio, source_language='en', target_language, punctuation); "
                 "model.generate(**inputs, max_new_tokens, num_beams, do_sample=False, length_penalty, "
                 "return_dict_in_generate=True, output_scores=True)",
        "runs": runs,
    }, indent=1) + "\n")
    ended = sum(1 for r in runs if 3 in r["generated_ids"] and r["num_beams"] > 1)
    print(f"{len(runs)} runs, {ended} beam runs end on EOS -> {OUT.relative_to(REPO)}")


if __name__ == "__main__":
    main()
