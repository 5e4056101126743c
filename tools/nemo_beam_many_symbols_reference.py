#!/usr/bin/env python
"""Write NeMo's default-beam, mAES and malsd_batch N-best lists on fitted RNN-T models whose best paths put more
than 10 tokens on one encoder frame, for tests/test_beam_many_symbols.py.

NeMo's default RNN-T beam (`BeamRNNTInfer.default_beam_search`) and its mAES put no bound on the
tokens a hypothesis emits on one frame (mAES: at most `maes_num_steps` rounds a frame, nothing else).
A model fitted to a few clips and run on speech it was not trained on tends to emit a memorised
transcript in a burst on one or two frames; these references hold such cases, so that our searches
are checked where a per-frame token cap (greedy's max_symbols, 10) would change the result.

Run from the repository root with the Python of a NeMo virtual environment (tools/setup_nemo_venv.sh):

    .venv-nemo/bin/python tools/nemo_beam_many_symbols_reference.py

Models (both fitted, both made by tools/ scripts; their builds are in tests/models/BUILD_LOG.json):
    built-rnnt-padto16-nonorm  tests/models/built-rnnt-padto16-nonorm.nemo: plain RNN-T, 128 mels,
                               `pad_to: 16`, `normalize: NA`, dw_striding 8x (tools/nemo_reference.py
                               --build), fitted to jfk and ls_2086-149220-0033;
    tiny-eou-many-symbols      tests/models/tiny-eou-many-symbols.nemo: cache-aware streaming RNN-T
                               with <EOU>/<EOB> (tools/train_tiny_eou.py --variant many-symbols),
                               fitted to three short dev clips without emission windows.
Clips: two dev clips per model that the model was NOT trained on, picked (by a survey of the 37 dev
clips) because NeMo's best hypothesis there puts more than 10 tokens on one frame.

Output: tests/references/nemo_beam/<stem>.json, the format of tools/nemo_beam_reference.py (whose
helpers this script uses), each run adding "best_max_tokens_per_frame": the largest number of tokens
NeMo's best hypothesis emits on one frame (its RNN-T timestamps are the emission frames), and the
document adding "trained_on" (the model's training clips, none of which is among "clips").
"""
from __future__ import annotations

import os

os.environ["OMP_NUM_THREADS"] = "1"
os.environ.setdefault("MKL_NUM_THREADS", "1")

import json
import sys
import time
from collections import Counter
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import nemo_beam_reference as nbr  # noqa: E402  (decode: NeMo's N-best list on given encoder frames)
import nemo_reference as nr  # noqa: E402  (audio, encoder, float formatting)

torch.set_num_threads(1)
torch.set_flush_denormal(True)

DEV = f"{nr.AUDIO_DIR_REL}/dev"
# stem -> (model path relative to the repository root, training clips, test clips)
MODELS = {
    "built-rnnt-padto16-nonorm": (
        "tests/models/built-rnnt-padto16-nonorm.nemo",
        [c["path"] for c in nr.TRAIN_CLIPS],
        ["cv_18933160", "cv_19172268"],
    ),
    "tiny-eou-many-symbols": (
        "tests/models/tiny-eou-many-symbols.nemo",
        [f"{DEV}/cv_17767698.wav", f"{DEV}/ls_61-70968-0002.wav", f"{DEV}/librivox_sns_0930.wav"],
        ["librivox_sns_0920", "librivox_sns_0890"],
    ),
}
MAES_DEFAULT = dict(maes_num_steps=2, maes_prefix_alpha=1, maes_expansion_beta=2, maes_expansion_gamma=2.3)


def runs() -> list[dict]:
    """NeMo's default beam at several sizes, ranked both ways, and mAES with NeMo's default knobs and
    with enough rounds (16) to put more than 10 tokens on a frame. Beam 1 is left out: NeMo's RNN-T
    beam 1 is its greedy search."""
    out = [dict(strategy="beam", beam_size=k, score_norm=True) for k in (2, 4, 8)]
    out += [dict(strategy="beam", beam_size=k, score_norm=False) for k in (2, 4)]
    out.append(dict(strategy="maes", beam_size=4, score_norm=True, options=dict(MAES_DEFAULT)))
    out.append(dict(strategy="maes", beam_size=2, score_norm=False, options=dict(MAES_DEFAULT)))
    out.append(dict(strategy="maes", beam_size=4, score_norm=True,
                    options=dict(MAES_DEFAULT, maes_num_steps=16)))
    # malsd_batch bounds the tokens per frame by beam.max_symbols (NeMo's default 10): that default, and
    # a bound (32) its best paths here go past 10 under
    out += [dict(strategy="malsd_batch", beam_size=k, score_norm=True, options=dict(max_symbols=10)) for k in (2, 4)]
    out.append(dict(strategy="malsd_batch", beam_size=4, score_norm=False, options=dict(max_symbols=10)))
    out += [dict(strategy="malsd_batch", beam_size=k, score_norm=True, options=dict(max_symbols=32)) for k in (2, 4)]
    return out


def max_tokens_per_frame(hyp: dict) -> int:
    return max(Counter(hyp["timestamp"]).values()) if hyp["tokens"] else 0


def main() -> int:
    nr.nemo_imports()
    import nemo

    out_dir = nr.repo_path(nbr.OUT_DIR_REL)
    out_dir.mkdir(parents=True, exist_ok=True)
    for stem, (model_rel, trained_on, clip_names) in MODELS.items():
        model = nr.ASRModel.restore_from(str(nr.repo_path(model_rel)), map_location="cpu")
        model.eval()
        doc = dict(format=1, nemo_version=nemo.__version__, torch_version=torch.__version__, model=model_rel,
                   heads=["rnnt"], blank=int(model.decoder.blank_idx), durations=[], trained_on=trained_on,
                   clips=[], runs=[])
        for name in clip_names:
            path = f"{DEV}/{name}.wav"
            assert path not in trained_on, path
            with torch.no_grad():
                _, _, (enc, length) = nr.features_and_encoder(model, nr.load_audio(path))
            doc["clips"].append(dict(name=name, path=path, length=length,
                                     encoder=nr.f32_list(enc[:, :length].t().double().numpy())))
            for run in runs():
                t0 = time.time()
                hyps = nbr.decode(model, "rnnt", run, enc, length)
                seconds = time.time() - t0
                best_max = max_tokens_per_frame(hyps[0])
                doc["runs"].append(dict(clip=name, head="rnnt", strategy=run["strategy"], beam_size=run["beam_size"],
                                        score_norm=run["score_norm"], options=run.get("options") or {},
                                        best_max_tokens_per_frame=best_max, hypotheses=hyps))
                print(stem, name, run["strategy"], run["beam_size"], run["score_norm"], run.get("options", ""),
                      f"best: {len(hyps[0]['tokens'])} tokens, {best_max} on one frame; {len(hyps)} hypotheses;"
                      f" {seconds:.2f} s", flush=True)
        (out_dir / f"{stem}.json").write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
