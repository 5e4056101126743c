#!/usr/bin/env python
"""Write NeMo's N-best beam-search lists on the tiny Parakeet models, for the beam parity tests.

Run from the repository root with the Python of a NeMo virtual environment (tools/setup_nemo_venv.sh):

    .venv-nemo/bin/python tools/nemo_beam_reference.py

Output: tests/references/nemo_beam/<model stem>.json, one file per model:
    {"format": 1, "nemo_version", "torch_version", "model", "heads", "blank", "durations",
     "clips": [{"name", "path", "length", "encoder": [[d_model floats] x length]}],
     "runs": [{"clip", "head", "strategy", "beam_size", "score_norm", "options",
               "hypotheses": [{"tokens", "score", "timestamp", "token_duration"}]}]}

`encoder` is NeMo's own encoder output for the clip (float32, frames x d_model), so the tests can
run our search on exactly the frames NeMo's search saw. `hypotheses` are NeMo's N-best list in
NeMo's order (best first under its `score_norm` ranking); `tokens` excludes the leading blank
sentinel, `score` is NeMo's raw hypothesis score, `timestamp`/`token_duration` are what NeMo
returned for the strategy (null where it returns none). Everything runs on one CPU thread.
"""
from __future__ import annotations

import os

os.environ["OMP_NUM_THREADS"] = "1"
os.environ.setdefault("MKL_NUM_THREADS", "1")

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import nemo_reference as nr  # noqa: E402  (shared helpers: audio, config, formatting)

torch.set_num_threads(1)
torch.set_flush_denormal(True)

OUT_DIR_REL = "tests/references/nemo_beam"
MODELS = ["tiny-tdt-fit", "tiny-rnnt-fit", "tiny-ctc-fit", "tiny-hybrid-tdt-ctc-fit", "tiny-tdt-random"]


def clips() -> list[dict]:
    """jfk (what the fit models learned) and the shortest dev clip (unseen speech: a less peaked case)."""
    return nr.pick_clips()[:1] + nr.pick_clips()[2:3]


def transducer_runs(head: str) -> list[dict]:
    runs = [dict(strategy="beam", beam_size=k, score_norm=True) for k in (1, 2, 4, 8)]
    runs.append(dict(strategy="beam", beam_size=4, score_norm=False))
    runs.append(dict(strategy="maes", beam_size=4, score_norm=True,
                     options=dict(maes_num_steps=2, maes_prefix_alpha=1, maes_expansion_beta=2, maes_expansion_gamma=2.3)))
    runs.append(dict(strategy="maes", beam_size=2, score_norm=True,
                     options=dict(maes_num_steps=3, maes_prefix_alpha=2, maes_expansion_beta=1, maes_expansion_gamma=4.0)))
    runs.append(dict(strategy="malsd_batch", beam_size=4, score_norm=True, options=dict(max_symbols=10)))
    runs.append(dict(strategy="malsd_batch", beam_size=2, score_norm=False, options=dict(max_symbols=10)))
    return runs


def ctc_runs() -> list[dict]:
    # beam_beta (a bonus per token, NeMo's default 1.0) and beam_threshold are NeMo's config defaults;
    # one run without the bonus and with a tight threshold.
    runs = [dict(strategy="beam_batch", beam_size=k, score_norm=True, options=dict(beam_beta=1.0, beam_threshold=20.0))
            for k in (1, 4, 8)]
    runs.append(dict(strategy="beam_batch", beam_size=4, score_norm=True, options=dict(beam_beta=0.0, beam_threshold=5.0)))
    return runs


def beam_cfg(model, head: str, run: dict):
    from omegaconf import open_dict

    cfg = nr.decoding_cfg(model, head, "greedy_batch", None)
    with open_dict(cfg):
        cfg.strategy = run["strategy"]
        cfg.compute_timestamps = False
        cfg.preserve_alignments = False
    with open_dict(cfg.beam):
        cfg.beam.beam_size = run["beam_size"]
        cfg.beam.return_best_hypothesis = False
        cfg.beam.allow_cuda_graphs = False
        if head != "ctc":
            cfg.beam.score_norm = run["score_norm"]
        else:
            cfg.beam.ngram_lm_model = None
        for k, v in (run.get("options") or {}).items():
            cfg.beam[k] = v
    return cfg


def listify(x):
    if x is None:
        return None
    if torch.is_tensor(x):
        return [int(v) for v in x.tolist()]
    if isinstance(x, dict):
        return None
    return [int(v) for v in x]


@torch.no_grad()
def decode(model, head: str, run: dict, enc: torch.Tensor, length: int) -> list[dict]:
    cfg = beam_cfg(model, head, run)
    if hasattr(model, "ctc_decoder") and hasattr(model, "joint"):
        model.change_decoding_strategy(cfg, decoder_type="ctc" if head == "ctc" else "rnnt", verbose=False)
    else:
        model.change_decoding_strategy(cfg, verbose=False)
    model.eval()
    x = enc[None, :, :length]  # [1, D, T]
    n = torch.tensor([length])
    if head == "ctc":
        logp = (model.ctc_decoder if hasattr(model, "joint") else model.decoder)(encoder_output=x)
        dec = model.ctc_decoding if hasattr(model, "joint") else model.decoding
        out = dec.ctc_decoder_predictions_tensor(logp, n, return_hypotheses=True)
    else:
        out = model.decoding.rnnt_decoder_predictions_tensor(encoder_output=x, encoded_lengths=n, return_hypotheses=True)
    if isinstance(out, tuple):
        out = out[0]
    nb = out[0]
    hyps = nb.n_hypotheses if hasattr(nb, "n_hypotheses") else (list(nb) if isinstance(nb, list) else [nb])
    rows = []
    for h in hyps:
        ys = listify(h.y_sequence)
        ts = h.timestamp if not isinstance(h.timestamp, dict) else None
        rows.append(dict(
            tokens=ys,
            score=float(h.score),
            timestamp=listify(ts) if ts is not None and len(ts) else ([] if ts is not None else None),
            token_duration=listify(getattr(h, "token_duration", None)) if getattr(h, "token_duration", None) is not None else None,
        ))
    return rows


def main() -> int:
    nr.nemo_imports()
    import nemo

    out_dir = nr.repo_path(OUT_DIR_REL)
    out_dir.mkdir(parents=True, exist_ok=True)
    cl = clips()
    audios = {c["name"]: nr.load_audio(c["path"]) for c in cl}
    for stem in MODELS:
        path_rel = f"{nr.TINY_DIR_REL}/{stem}.nemo"
        model = nr.ASRModel.restore_from(str(nr.repo_path(path_rel)), map_location="cpu")
        model.eval()
        heads = nr.model_heads(model)
        durations = list(model.cfg.decoding.get("durations", []) or []) if "tdt" in heads else []
        doc = dict(format=1, nemo_version=nemo.__version__, torch_version=torch.__version__, model=path_rel,
                   heads=heads, blank=int(model.tokenizer.vocab_size), durations=durations, clips=[], runs=[])
        for c in cl:
            _, _, (enc, length) = nr.features_and_encoder(model, audios[c["name"]])
            doc["clips"].append(dict(name=c["name"], path=c["path"], length=length,
                                     encoder=nr.f32_list(enc[:, :length].t().double().numpy())))
            for head in heads:
                for run in (ctc_runs() if head == "ctc" else transducer_runs(head)):
                    hyps = decode(model, head, run, enc, length)
                    doc["runs"].append(dict(clip=c["name"], head=head, strategy=run["strategy"], beam_size=run["beam_size"],
                                            score_norm=run["score_norm"], options=run.get("options") or {}, hypotheses=hyps))
                    print(stem, c["name"], head, run["strategy"], run["beam_size"], run["score_norm"],
                          [(len(h["tokens"]), round(h["score"], 3)) for h in hyps][:3], flush=True)
        (out_dir / f"{stem}.json").write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
