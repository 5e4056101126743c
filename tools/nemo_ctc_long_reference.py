#!/usr/bin/env python
"""Write NeMo's CTC `beam_batch` N-best lists on long inputs (25 s to 2 min of real speech), for
tests/test_ctc_beam_long.py.

Run from the repository root with the Python of a NeMo virtual environment (tools/setup_nemo_venv.sh):

    .venv-nemo/bin/python tools/nemo_ctc_long_reference.py [--dump DIR]

The inputs are made, not stored: benchmarks/speech_clip.py's dev utterances joined end to end, cut
to SECONDS (the test makes them again and checks their sha256). The lengths are chosen so that some
have one encoder frame more than their encoded length and some do not (see `pad_frames` below).

Output: tests/references/nemo_ctc_long.json
    {"format": 1, "nemo_version", "torch_version", "joiner": "benchmarks/speech_clip.py",
     "inputs": [{"seconds", "samples", "sha256" (of the float32 samples), "utterances"}],
     "models": [{"stem", "model", "blank", "subsampling",
        "clips": [{"seconds", "frames" (T', the encoder's output frames), "length" (L, its encoded length),
                   "greedy": {"labels": [L ints], "logp": [L floats]}  (per frame: the best label, its log-prob),
                   "pad_frames": [{"frame", "label", "logp", "blank_logp"}]  (frames L..T'-1),
                   "runs": [{"beam_size", "beam_beta", "beam_threshold",
                             "hypotheses": [{"tokens", "score", "timestamp"}],  (the search over the L frames)
                             "pipeline": [{"tokens", "score"}]}]}]}]}  (the search over all T' frames)

`hypotheses` is what NeMo's beam_batch returns on the log-probs cut to the encoded length, as
tools/nemo_beam_reference.py runs it; `pipeline` is what it returns on the CTC head's whole output
with the encoded length, as NeMo's own transcribe() calls it. NeMo's search keeps scoring frames
past an utterance's length (the scores move, the labels are not recorded), so the two differ when
T' > L: every `pipeline` score is then the `hypotheses` score plus the best candidate of the extra
frame (and a hypothesis can fall out of the list). With --dump DIR, NeMo's mel features, encoder
output and log-probs of every clip are written to DIR as .npy (for measurements; not committed).
Everything runs on one CPU thread.
"""
from __future__ import annotations

import os

os.environ["OMP_NUM_THREADS"] = "1"
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import torch

TOOLS = Path(__file__).resolve().parent
sys.path.insert(0, str(TOOLS))
sys.path.insert(0, str(TOOLS.parent / "benchmarks"))
import nemo_beam_reference as nbr  # noqa: E402  (beam_cfg, listify)
import nemo_reference as nr  # noqa: E402  (model paths, NeMo imports, float formatting)
from speech_clip import speech_clip  # noqa: E402  (the deterministic joiner of dev utterances)

torch.set_num_threads(1)
torch.set_flush_denormal(True)

OUT_REL = "tests/references/nemo_ctc_long.json"
# 24.64 s and 120 s: the sample count is a multiple of 80 ms, so an 8x model's encoder yields one
# frame past the encoded length; 60.04 s: it does not (4x models: all four do).
SECONDS = [24.64, 60.0, 60.04, 120.0]
MODELS = [("tiny-ctc-fit", nr.TINY_DIR_REL), ("tiny-hybrid-tdt-ctc-fit", nr.TINY_DIR_REL),
          ("built-ctc-80mel-sub4", nr.BUILT_DIR_REL)]
RUNS = [dict(beam_size=4, beam_beta=1.0, beam_threshold=20.0), dict(beam_size=8, beam_beta=1.0, beam_threshold=20.0)]


def pcm_sha256(pcm: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(pcm, dtype="<f4").tobytes()).hexdigest()


def ctc_parts(model):
    """(CTC head, CTC decoding object, change_decoding_strategy keyword) of a CTC or hybrid model."""
    if hasattr(model, "joint"):
        return model.ctc_decoder, lambda: model.ctc_decoding, dict(decoder_type="ctc")
    return model.decoder, lambda: model.decoding, {}


@torch.no_grad()
def nbest(model, run: dict, logp: torch.Tensor, length: int) -> list[dict]:
    """NeMo's beam_batch N-best list for log-probs [1, T, V+1] with encoded length `length`."""
    _, decoding, kw = ctc_parts(model)
    spec = dict(strategy="beam_batch", beam_size=run["beam_size"], score_norm=True,
                options=dict(beam_beta=run["beam_beta"], beam_threshold=run["beam_threshold"]))
    model.change_decoding_strategy(nbr.beam_cfg(model, "ctc", spec), verbose=False, **kw)
    model.eval()
    out = decoding().ctc_decoder_predictions_tensor(logp, torch.tensor([length]), return_hypotheses=True)
    out = out[0] if isinstance(out, tuple) else out
    nb = out[0]
    hyps = nb.n_hypotheses if hasattr(nb, "n_hypotheses") else list(nb)
    return [dict(tokens=nbr.listify(h.y_sequence), score=float(h.score), timestamp=nbr.listify(h.timestamp)) for h in hyps]


@torch.no_grad()
def clip_record(model, seconds: float, pcm: np.ndarray, dump: Path | None, stem: str) -> dict:
    model.eval()
    head, _, _ = ctc_parts(model)
    x = torch.from_numpy(pcm)[None]
    mel, mel_len = model.preprocessor(input_signal=x, length=torch.tensor([len(pcm)]))
    enc, enc_len = model.encoder(audio_signal=mel, length=mel_len)
    logp = head(encoder_output=enc)  # [1, T', V+1]
    frames, length = int(logp.shape[1]), int(enc_len[0])
    if dump is not None:
        for name, a in (("mel", mel[0]), ("enc", enc[0]), ("logp", logp[0])):
            np.save(dump / f"{stem}_{seconds}_{name}.npy", a.numpy())
    best = logp[0].max(dim=-1)
    blank = logp.shape[-1] - 1
    rec = dict(seconds=seconds, frames=frames, length=length,
               greedy=dict(labels=[int(v) for v in best.indices[:length]], logp=nr.f32_list(best.values[:length].numpy())),
               pad_frames=[dict(frame=t, label=int(best.indices[t]), logp=nr.f32(best.values[t]),
                                blank_logp=nr.f32(logp[0, t, blank])) for t in range(length, frames)],
               runs=[])
    for run in RUNS:
        cut = nbest(model, run, logp[:, :length].contiguous(), length)
        whole = nbest(model, run, logp, length)
        rec["runs"].append(dict(run, hypotheses=cut, pipeline=[dict(tokens=h["tokens"], score=h["score"]) for h in whole]))
        print(f"{stem} {seconds:g}s T'={frames} L={length} k={run['beam_size']}: "
              f"{[(len(h['tokens']), round(h['score'], 6)) for h in cut][:4]}; pipeline - cut: "
              f"{[round(w['score'] - c['score'], 6) for w, c in zip(whole, cut)][:4]} ({len(whole)}/{len(cut)})", flush=True)
    return rec


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dump", type=Path, help="also write NeMo's mel, encoder output and log-probs as .npy here")
    args = ap.parse_args(argv)
    if args.dump is not None:
        args.dump.mkdir(parents=True, exist_ok=True)
    nr.nemo_imports()
    import nemo

    inputs, pcms = [], {}
    for s in SECONDS:
        pcm, names = speech_clip(s)
        pcms[s] = pcm
        inputs.append(dict(seconds=s, samples=int(len(pcm)), sha256=pcm_sha256(pcm), utterances=names))
    doc = dict(format=1, nemo_version=nemo.__version__, torch_version=torch.__version__,
               joiner="benchmarks/speech_clip.py", inputs=inputs, models=[])
    for stem, folder in MODELS:
        path_rel = f"{folder}/{stem}.nemo"
        model = nr.ASRModel.restore_from(str(nr.repo_path(path_rel)), map_location="cpu")
        model.eval()
        entry = dict(stem=stem, model=path_rel, blank=int(model.tokenizer.vocab_size),
                     subsampling=int(model.encoder.subsampling_factor), clips=[])
        for s in SECONDS:
            entry["clips"].append(clip_record(model, s, pcms[s], args.dump, stem))
        doc["models"].append(entry)
    out = nr.repo_path(OUT_REL)
    out.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    print(f"wrote {OUT_REL} ({out.stat().st_size // 1024} kB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
