#!/usr/bin/env python
"""Write NeMo's cache-aware streaming outputs on the tiny streaming models (issue 10's references).

Run from the repository root with the Python of a NeMo virtual environment (tools/setup_nemo_venv.sh):

    .venv-nemo/bin/python tools/nemo_streaming_reference.py

Output: tests/references/nemo_streaming/<model stem>.json, one file per model:
    {"format": 1, "nemo_version", "torch_version", "model", "head", "att_context_sizes",
     "runs": [{"clip", "path", "att_context_size", "streaming_cfg": {...NeMo's schedule...},
               "chunks": [{"input_frames", "drop_extra_pre_encoded", "keep_all_outputs",
                           "encoded_len", "encoded": [[d_model floats] x encoded_len]}],
               "tokens": [...], "text": str, "offline_tokens": [...], "offline_text": str}]}

For each model, clip and lookahead (every `att_context_size` the model has), the canonical NeMo loop
runs: `CacheAwareStreamingAudioBuffer` over the clip's features (NeMo computes them for the whole
file first), `conformer_stream_step` chunk by chunk with greedy_batch decoding and the caches carried,
`keep_all_outputs` on the last chunk. Each chunk's encoder output (`cache_aware_stream_step`) is
recorded, as are the final tokens, and the tokens of NeMo's offline decoding of the same clip with the
same lookahead. One CPU thread.
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

OUT_DIR_REL = "tests/references/nemo_streaming"
MODELS = ["tiny-tdt-streaming-random", "tiny-ctc-streaming-random"]


def clips() -> list[dict]:
    """jfk and the shortest dev clip."""
    c = nr.pick_clips()
    return [c[0], c[2]]


def tokens_of(h) -> list[int]:
    ys = h.y_sequence
    return [int(v) for v in (ys.tolist() if torch.is_tensor(ys) else ys)]


def ctc_collapse(labels: list[int], blank: int) -> list[int]:
    out, prev = [], None
    for p in labels:
        if p != blank and p != prev:
            out.append(p)
        prev = p
    return out


@torch.no_grad()
def stream(model, head: str, audio, att) -> dict:
    from nemo.collections.asr.parts.utils.streaming_utils import CacheAwareStreamingAudioBuffer

    model.encoder.set_default_att_context_size(att)
    model.encoder.setup_streaming_params()
    cfg = model.encoder.streaming_cfg
    buf = CacheAwareStreamingAudioBuffer(model=model, online_normalization=False, pad_and_drop_preencoded=False)
    buf.append_audio(audio, stream_id=-1)
    c_ch, c_t, c_len = model.encoder.get_initial_cache_state(batch_size=1)

    chunks = []
    real_step = model.encoder.cache_aware_stream_step

    def recording_step(**kw):
        out = real_step(**kw)
        enc, enc_len = out[0], out[1]
        n = int(enc_len[0])
        chunks.append(dict(input_frames=int(kw["processed_signal"].shape[-1]),
                           drop_extra_pre_encoded=int(kw.get("drop_extra_pre_encoded") or 0),
                           keep_all_outputs=bool(kw.get("keep_all_outputs")), encoded_len=n,
                           encoded=nr.f32_list(enc[0, :, :n].t().double().numpy())))
        return out

    model.encoder.cache_aware_stream_step = recording_step
    prev_hyp, prev_pred = None, None
    try:
        for step, (chunk, chunk_len) in enumerate(iter(buf)):
            drop = 0 if step == 0 else cfg.drop_extra_pre_encoded
            out = model.conformer_stream_step(
                processed_signal=chunk, processed_signal_length=chunk_len, cache_last_channel=c_ch,
                cache_last_time=c_t, cache_last_channel_len=c_len, keep_all_outputs=buf.is_buffer_empty(),
                previous_hypotheses=prev_hyp, previous_pred_out=prev_pred, drop_extra_pre_encoded=drop,
                return_transcription=True)
            prev_pred, texts, c_ch, c_t, c_len, prev_hyp = out[:6]
    finally:
        del model.encoder.cache_aware_stream_step
    if head == "ctc":
        toks = ctc_collapse([int(v) for v in prev_pred[0].tolist()], model.decoder.num_classes_with_blank - 1)
    else:
        toks = tokens_of(prev_hyp[0])
    text = model.tokenizer.ids_to_text(toks)
    sc = {k: (v if isinstance(v, (int, float, list, bool)) or v is None else str(v)) for k, v in dict(cfg).items()} \
        if hasattr(cfg, "keys") else {k: getattr(cfg, k) for k in vars(cfg)}
    return dict(streaming_cfg=json.loads(json.dumps(sc, default=str)), chunks=chunks, tokens=toks, text=text)


@torch.no_grad()
def offline(model, head: str, audio, att) -> tuple[list[int], str]:
    model.encoder.set_default_att_context_size(att)
    x = torch.from_numpy(audio)[None]
    mel, mel_len = model.preprocessor(input_signal=x, length=torch.tensor([x.shape[1]]))
    enc, enc_len = model.encoder(audio_signal=mel, length=mel_len)
    if head == "ctc":
        lp = model.decoder(encoder_output=enc)
        toks = ctc_collapse(lp[0, : int(enc_len[0])].argmax(-1).tolist(), lp.shape[-1] - 1)
    else:
        hyp = model.decoding.rnnt_decoder_predictions_tensor(encoder_output=enc, encoded_lengths=enc_len,
                                                             return_hypotheses=True)
        hyp = hyp[0] if isinstance(hyp, tuple) else hyp
        toks = tokens_of(hyp[0])
    return toks, model.tokenizer.ids_to_text(toks)


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
        head = nr.model_heads(model)[0]
        if head != "ctc":
            # greedy_batch without timestamps: with them NeMo's partial hypotheses fail to merge
            # (Hypothesis.merge_ extends a dict)
            from omegaconf import open_dict

            cfg = nr.decoding_cfg(model, head, "greedy_batch", None)
            with open_dict(cfg):
                cfg.compute_timestamps = False
                cfg.preserve_alignments = False
            model.change_decoding_strategy(cfg, verbose=False)
        atts = [list(a) for a in model.encoder.att_context_size_all]
        doc = dict(format=1, nemo_version=nemo.__version__, torch_version=torch.__version__, model=path_rel,
                   head=head, att_context_sizes=atts, runs=[])
        for c in cl:
            for att in atts:
                model.eval()
                run = stream(model, head, audios[c["name"]], att)
                toks, text = offline(model, head, audios[c["name"]], att)
                doc["runs"].append(dict(clip=c["name"], path=c["path"], att_context_size=att, **run,
                                        offline_tokens=toks, offline_text=text))
                print(stem, c["name"], att, len(run["chunks"]), "chunks", len(run["tokens"]), "tokens",
                      "equal offline" if run["tokens"] == toks else "differs from offline", flush=True)
        (out_dir / f"{stem}.json").write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
