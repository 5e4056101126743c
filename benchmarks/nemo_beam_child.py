#!/usr/bin/env python
"""NeMo's side of benchmarks/parakeet_beam.py: NeMo's greedy_batch and malsd_batch decode times on
the same model and clip. Run by parakeet_beam.py with the NeMo virtual environment's Python:

    .venv-nemo/bin/python benchmarks/nemo_beam_child.py MODEL.nemo CLIP.wav THREADS ROUNDS BEAM

It encodes the clip once (not timed), then times model.decoding.rnnt_decoder_predictions_tensor
on that encoder output, strategy by strategy, one round after the other (best round counts), and
prints one JSON line: {"greedy": s, "malsd": s, "tokens": {...}}.
"""
from __future__ import annotations

import json
import logging
import os
import sys
import time


def main() -> int:
    model_path, clip, threads, rounds, beam = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    os.environ["OMP_NUM_THREADS"] = str(threads)
    import soundfile as sf
    import torch

    torch.set_num_threads(threads)
    torch.set_flush_denormal(True)
    from nemo.utils import logging as nemo_logging

    nemo_logging.setLevel(logging.ERROR)
    from nemo.collections.asr.models import ASRModel
    from nemo.collections.asr.parts.submodules.rnnt_decoding import RNNTBPEDecodingConfig
    from omegaconf import OmegaConf, open_dict

    model = ASRModel.restore_from(model_path, map_location="cpu")
    model.eval()
    pcm, _ = sf.read(clip, dtype="float32")

    def set_strategy(strategy: str):
        cfg = OmegaConf.structured(RNNTBPEDecodingConfig())
        with open_dict(cfg):
            cfg.strategy = strategy
            cfg.model_type = "tdt"
            cfg.durations = list(model.cfg.decoding.durations)
            cfg.greedy.max_symbols_per_step = 10
            cfg.greedy.use_cuda_graph_decoder = False
            cfg.compute_timestamps = False
            cfg.beam.beam_size = beam
            cfg.beam.return_best_hypothesis = True
            cfg.beam.allow_cuda_graphs = False
        model.change_decoding_strategy(cfg, verbose=False)

    with torch.inference_mode():
        x = torch.from_numpy(pcm)[None]
        mel, mel_len = model.preprocessor(input_signal=x, length=torch.tensor([x.shape[1]]))
        enc, enc_len = model.encoder(audio_signal=mel, length=mel_len)
        best, tokens = {}, {}
        for strategy, name in (("greedy_batch", "greedy"), ("malsd_batch", "malsd")):
            set_strategy(strategy)
            model.decoding.rnnt_decoder_predictions_tensor(encoder_output=enc, encoded_lengths=enc_len)  # warm-up
            for _ in range(rounds):
                t0 = time.perf_counter()
                out = model.decoding.rnnt_decoder_predictions_tensor(encoder_output=enc, encoded_lengths=enc_len)
                best[name] = min(best.get(name, float("inf")), time.perf_counter() - t0)
            hyp = (out[0] if isinstance(out, tuple) else out)[0]
            tokens[name] = len(hyp.y_sequence)
    print(json.dumps(dict(best, tokens=tokens, frames=int(enc_len[0]))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
