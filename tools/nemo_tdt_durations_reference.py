#!/usr/bin/env python
"""NeMo's TDT searches on models whose duration tables are not 0, 1, ..., D-1.

Run from the repository root with the Python of a NeMo virtual environment (tools/setup_nemo_venv.sh):

    .venv-nemo/bin/python tools/nemo_tdt_durations_reference.py            # build missing models, write references
    .venv-nemo/bin/python tools/nemo_tdt_durations_reference.py --rebuild  # rebuild the models too

Models (tests/models/, built here with a fixed seed; DURATION_MODELS below, record in
tests/models/BUILD_LOG_DURATIONS.json):
    built-tdt-random-d01248   the tiny TDT architecture (../shared/models/parakeet-tiny), durations
                              [0, 1, 2, 4, 8], random weights
    built-tdt-random-d024     the same with durations [0, 2, 4], random weights
    built-tdt-fit-d013        durations [0, 1, 3], fitted to the two training clips of
                              tools/nemo_reference.py (its TRAIN_CLIPS, tdt_loss, train_model;
                              that loss needs a duration 1, so no fitted [0, 2, 4])
and, already built by tools/nemo_reference.py, built-tdt-80mel-lstm2-sub4 (durations [0, 1, 2, 4, 8],
fitted).

Output: tests/references/nemo_beam/<model stem>.json, in tools/nemo_beam_reference.py's format
(its `decode` and clips are used as they are), with the runs of `runs()`: NeMo's greedy_batch,
its default `beam` and its `malsd_batch`, each on NeMo's own encoder output for the clip.
Everything runs on one CPU thread.
"""
from __future__ import annotations

import os

os.environ["OMP_NUM_THREADS"] = "1"
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import nemo_beam_reference as nbr  # noqa: E402  (decode, clips)
import nemo_reference as nr  # noqa: E402  (config template, tokenizer, training, audio)

torch.set_num_threads(1)
torch.set_flush_denormal(True)

BUILD_LOG_REL = f"{nr.BUILT_DIR_REL}/BUILD_LOG_DURATIONS.json"


def cfg_tdt_durations(durs: list[int]):
    """The tiny TDT model's config (tiny-tdt-fit: 128 mels, 8x, 2 layers, d_model 64, LSTM 32) with
    the duration table `durs` everywhere NeMo reads one."""

    def build(tok: Path) -> dict:
        cfg = nr.template_config()
        cfg["tokenizer"] = {"dir": str(tok), "type": "bpe"}
        cfg["model_defaults"].update(tdt_durations=list(durs), num_tdt_durations=len(durs))
        cfg["joint"]["num_extra_outputs"] = len(durs)
        cfg["decoding"]["durations"] = list(durs)
        cfg["loss"]["tdt_kwargs"]["durations"] = list(durs)
        cfg["target"] = "nemo.collections.asr.models.rnnt_bpe_models.EncDecRNNTBPEModel"
        return cfg

    return build


# name -> (durations, seed, fitted: max training steps or None for random weights)
DURATION_MODELS = {
    "built-tdt-random-d01248": ([0, 1, 2, 4, 8], 2101, None),
    "built-tdt-random-d024": ([0, 2, 4], 2102, None),
    "built-tdt-fit-d013": ([0, 1, 3], 2103, 800),
}
# references only (the model is built by tools/nemo_reference.py)
OTHER_MODELS = ["built-tdt-80mel-lstm2-sub4"]


def build(name: str, out_path: Path) -> dict:
    durs, seed, steps = DURATION_MODELS[name]
    if steps is not None:  # tools/nemo_reference.py's builder and training loop, as they are
        nr.BUILT_MODELS[name] = (cfg_tdt_durations(durs), seed, "tdt", steps)
        info = nr.build_model(name, out_path)
    else:
        from nemo.collections.asr.models import EncDecRNNTBPEModel

        with tempfile.TemporaryDirectory() as tmp:
            cfg = nr.OmegaConf.create(cfg_tdt_durations(durs)(nr.tokenizer_dir(Path(tmp))))
            torch.manual_seed(seed)
            np.random.seed(seed)
            model = EncDecRNNTBPEModel(cfg=cfg).cpu().eval()
            out_path.parent.mkdir(parents=True, exist_ok=True)
            model.save_to(str(out_path))
        info = dict(seed=seed, kind="tdt", weights="random (NeMo's initialisation after torch.manual_seed(seed))")
    info.update(durations=durs, sha256=nr.sha256(out_path), nemo_version=__import__("nemo").__version__,
                torch_version=torch.__version__)
    return info


def runs() -> list[dict]:
    out = [dict(strategy="greedy_batch", beam_size=1, score_norm=True)]
    out += [dict(strategy="beam", beam_size=k, score_norm=True) for k in (1, 2, 4)]
    out.append(dict(strategy="beam", beam_size=4, score_norm=False))
    ms = dict(max_symbols=10)
    out += [dict(strategy="malsd_batch", beam_size=k, score_norm=True, options=ms) for k in (1, 2, 4, 8)]
    out += [dict(strategy="malsd_batch", beam_size=k, score_norm=False, options=ms) for k in (2, 4)]
    return out


def reference(stem: str, path_rel: str, clips: list[dict], audios: dict, build_info: dict | None) -> dict:
    import nemo

    model = nr.ASRModel.restore_from(str(nr.repo_path(path_rel)), map_location="cpu")
    model.eval()
    durations = list(model.cfg.decoding.durations)
    doc = dict(format=1, nemo_version=nemo.__version__, torch_version=torch.__version__, model=path_rel,
               heads=["tdt"], blank=int(model.tokenizer.vocab_size), durations=durations, build=build_info,
               clips=[], runs=[])
    for c in clips:
        _, _, (enc, length) = nr.features_and_encoder(model, audios[c["name"]])
        doc["clips"].append(dict(name=c["name"], path=c["path"], length=length,
                                 encoder=nr.f32_list(enc[:, :length].t().double().numpy())))
        for run in runs():
            hyps = nbr.decode(model, "tdt", run, enc, length)
            doc["runs"].append(dict(clip=c["name"], head="tdt", strategy=run["strategy"], beam_size=run["beam_size"],
                                    score_norm=run["score_norm"], options=run.get("options") or {}, hypotheses=hyps))
            print(stem, c["name"], run["strategy"], run["beam_size"], run["score_norm"],
                  [(len(h["tokens"]), round(h["score"], 3)) for h in hyps][:3], len(hyps), flush=True)
    return doc


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rebuild", action="store_true", help="rebuild the models of DURATION_MODELS")
    ap.add_argument("--models", help="comma-separated stems (default: all)")
    args = ap.parse_args(argv)
    nr.nemo_imports()
    log_path = nr.repo_path(BUILD_LOG_REL)
    build_log = json.loads(log_path.read_text()) if log_path.exists() else {}
    stems = list(DURATION_MODELS) + OTHER_MODELS
    wanted = args.models.split(",") if args.models else stems
    cl = nbr.clips()
    audios = {c["name"]: nr.load_audio(c["path"]) for c in cl}
    out_dir = nr.repo_path(nbr.OUT_DIR_REL)
    for stem in wanted:
        path_rel = f"{nr.BUILT_DIR_REL}/{stem}.nemo"
        if stem in DURATION_MODELS and (args.rebuild or not nr.repo_path(path_rel).exists()):
            build_log[stem] = build(stem, nr.repo_path(path_rel))
            log_path.write_text(json.dumps(build_log, indent=1, sort_keys=True) + "\n")
        info = build_log.get(stem) if stem in DURATION_MODELS else dict(see=f"{nr.BUILT_DIR_REL}/BUILD_LOG.json")
        doc = reference(stem, path_rel, cl, audios, info)
        text = json.dumps(doc, separators=(",", ":")) + "\n"
        (out_dir / f"{stem}.json").write_text(text)
        print(f"wrote {nbr.OUT_DIR_REL}/{stem}.json ({len(text) // 1024} kB)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
