#!/usr/bin/env python
"""Write NeMo's cache-aware streaming outputs on the tiny streaming models (issue 10's references).

Run from the repository root with the Python of a NeMo virtual environment (tools/setup_nemo_venv.sh):

    .venv-nemo/bin/python tools/nemo_streaming_reference.py
    .venv-nemo/bin/python tools/nemo_streaming_reference.py --models tiny-eou-streaming   # one file only

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

Models: the random tiny streaming TDT and CTC models of ../shared/models/parakeet-tiny (clips: jfk and
the shortest dev clip), and tests/models/tiny-eou-streaming.nemo (tools/train_tiny_eou.py), an RNN-T
whose vocabulary ends with <EOU> and <EOB> and which was trained to emit them.  Its file has the same
fields plus:
    top level: "eou_token", "eob_token", "eou_id", "eob_id", "blank_id", "vocabulary" (piece of every
        id), "nemo_eou_handling" (below), "training" (the tool and its NeMo-style EOU manifest),
        "two_utterances" (the fixture's recipe);
    each chunk: "tokens_after" (length of NeMo's hypothesis after the chunk);
    each run: "trained", "target" (training target text or null), "eou_positions" (indices in "tokens"
        of <EOU>/<EOB>), "eou_chunks" (chunk in which each of them appeared), "token_frames" (encoder
        frame of every streaming token: NeMo's timestamps, which count the frames of the earlier chunks),
        "encoded_frames" (sum of the chunks' encoded_len), "offline_eou_positions", "offline_token_frames",
        "offline_encoded_frames".
    clips: jfk and cv_20005990 (not trained on), cv_17767698 (trained as a backchannel: "...<EOB>"),
        mfa_thoughts (trained, "...<EOU>"), tests/fixtures/audio/two-utterances.wav (two training
        clips 1 s apart, trained as "...<EOU> ...<EOU>").

What NeMo does at <EOU> (NeMo 3.0.0): conformer_stream_step and the RNN-T greedy decoding treat <EOU>
and <EOB> as ordinary tokens.  Nothing is reset: the prediction network is fed the token, and the
hypothesis (tokens, decoder state) and the encoder caches carry on into the next utterance; these
references are recorded that way (one hypothesis over the whole clip).  Resetting is the application's
job: NeMo's voice agent (nemo/agents/voice_agent/pipecat/services/nemo/streaming_asr.py,
NemoStreamingASRService) marks a result final when its text contains <EOU> or <EOB> and then resets its
audio buffer, the encoder caches and the previous hypothesis.  The "EOU" of NeMo's streaming inference
pipelines (nemo.collections.asr.inference, endpointing `stop_history_eou`) is another thing: an end
point found from a run of blank frames, not the token.
"""
from __future__ import annotations

import os

os.environ["OMP_NUM_THREADS"] = "1"
os.environ.setdefault("MKL_NUM_THREADS", "1")

import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import nemo_reference as nr  # noqa: E402  (shared helpers: audio, config, formatting)

torch.set_num_threads(1)
torch.set_flush_denormal(True)

OUT_DIR_REL = "tests/references/nemo_streaming"
MODELS = ["tiny-tdt-streaming-random", "tiny-ctc-streaming-random"]
EOU_STEM = "tiny-eou-streaming"
EOU_MODEL_REL = f"tests/models/{EOU_STEM}.nemo"
EOU_HANDLING = (
    "NeMo 3.0.0: conformer_stream_step and the RNN-T greedy decoding treat <EOU> and <EOB> as ordinary tokens. "
    "Nothing is reset: the prediction network is fed the token, and the hypothesis (tokens, decoder state) "
    "and the encoder caches carry on into the next utterance; these runs are recorded that way (one "
    "hypothesis over the whole clip). Resetting is the application's job: NeMo's voice agent "
    "(nemo/agents/voice_agent/pipecat/services/nemo/streaming_asr.py, NemoStreamingASRService) marks a "
    "result final when its text contains <EOU> or <EOB> and then resets its audio buffer, the encoder "
    "caches and the previous hypothesis. The 'EOU' of NeMo's streaming inference pipelines "
    "(nemo.collections.asr.inference, endpointing stop_history_eou) is another thing: an end point found "
    "from a run of blank frames, not the token.")


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
def stream(model, head: str, audio, att, per_chunk: bool = False) -> dict:
    """NeMo's cache-aware streaming of one clip.  per_chunk (RNN-T only, used for the EOU model): each chunk
    also gets "tokens_after" (length of NeMo's hypothesis after that chunk) and the result also holds
    "hypothesis" (NeMo's final Hypothesis object, not JSON)."""
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
            if per_chunk:
                chunks[-1]["tokens_after"] = len(tokens_of(prev_hyp[0]))
    finally:
        del model.encoder.cache_aware_stream_step
    if head == "ctc":
        toks = ctc_collapse([int(v) for v in prev_pred[0].tolist()], model.decoder.num_classes_with_blank - 1)
    else:
        toks = tokens_of(prev_hyp[0])
    text = model.tokenizer.ids_to_text(toks)
    sc = {k: (v if isinstance(v, (int, float, list, bool)) or v is None else str(v)) for k, v in dict(cfg).items()} \
        if hasattr(cfg, "keys") else {k: getattr(cfg, k) for k in vars(cfg)}
    out = dict(streaming_cfg=json.loads(json.dumps(sc, default=str)), chunks=chunks, tokens=toks, text=text)
    if per_chunk:
        out["hypothesis"] = prev_hyp[0]
    return out


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


def set_greedy_batch(model, head: str) -> None:
    if head != "ctc":
        # greedy_batch without timestamps: with them NeMo's partial hypotheses fail to merge
        # (Hypothesis.merge_ extends a dict)
        from omegaconf import open_dict

        cfg = nr.decoding_cfg(model, head, "greedy_batch", None)
        with open_dict(cfg):
            cfg.compute_timestamps = False
            cfg.preserve_alignments = False
        model.change_decoding_strategy(cfg, verbose=False)


def write_model(stem: str, out_dir: Path) -> None:
    """One of the random tiny streaming models (MODELS): the original format, unchanged."""
    cl = clips()
    audios = {c["name"]: nr.load_audio(c["path"]) for c in cl}
    import nemo

    path_rel = f"{nr.TINY_DIR_REL}/{stem}.nemo"
    model = nr.ASRModel.restore_from(str(nr.repo_path(path_rel)), map_location="cpu")
    model.eval()
    head = nr.model_heads(model)[0]
    set_greedy_batch(model, head)
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


def eou_clips() -> list[dict]:
    """jfk (not trained on), two training clips (the backchannel one and one utterance), the two-utterance
    fixture (trained on) and a dev clip not trained on; `target`: the training target text, else None."""
    import train_tiny_eou as tte

    rows = {Path(r["audio_filepath"]).stem: r for r in tte.training_manifest()}
    picks = [("jfk", f"{nr.AUDIO_DIR_REL}/jfk.wav"),
             ("cv_17767698", f"{nr.AUDIO_DIR_REL}/dev/cv_17767698.wav"),
             ("mfa_thoughts", f"{nr.AUDIO_DIR_REL}/dev/mfa_thoughts.wav"),
             ("two-utterances", tte.FIXTURE_REL),
             ("cv_20005990", f"{nr.AUDIO_DIR_REL}/dev/cv_20005990.wav")]
    out = []
    for name, path in picks:
        row = rows.get(name)
        out.append(dict(name=name, path=path, trained=row is not None,
                        target=tte.target_text(row) if row is not None else None))
    return out


def token_frames(hyp, chunks: list[dict] | None = None) -> list[int] | None:
    """Encoder frame of each token of a NeMo hypothesis (its `timestamp`).  In streaming these are frames
    of the whole stream already: NeMo's label-looping decoding adds the frames decoded in earlier chunks
    (its state's `decoded_lengths`) to each chunk's timestamps.  With `chunks` (the run's chunk records:
    encoded_len, tokens_after) this is checked: a token that appeared in chunk k lies in chunk k's frames."""
    ts = hyp.timestamp
    if ts is None or isinstance(ts, dict):
        return None
    ts = [int(v) for v in (ts.tolist() if torch.is_tensor(ts) else ts)]
    if chunks is not None:
        offset, first = 0, 0
        for ch in chunks:
            assert all(offset <= t < offset + ch["encoded_len"] for t in ts[first: ch["tokens_after"]]), (ts, chunks)
            offset += ch["encoded_len"]
            first = ch["tokens_after"]
        assert first == len(ts)
    return ts


@torch.no_grad()
def offline_hyp(model, audio, att):
    model.encoder.set_default_att_context_size(att)
    x = torch.from_numpy(audio)[None]
    mel, mel_len = model.preprocessor(input_signal=x, length=torch.tensor([x.shape[1]]))
    enc, enc_len = model.encoder(audio_signal=mel, length=mel_len)
    hyp = model.decoding.rnnt_decoder_predictions_tensor(encoder_output=enc, encoded_lengths=enc_len,
                                                         return_hypotheses=True)
    hyp = hyp[0] if isinstance(hyp, tuple) else hyp
    return hyp[0], int(enc_len[0])


def write_eou_model(out_dir: Path) -> None:
    """tests/models/tiny-eou-streaming.nemo (tools/train_tiny_eou.py): the format of the other files plus
    the EOU fields (module docstring)."""
    import nemo
    import train_tiny_eou as tte

    model = nr.ASRModel.restore_from(str(nr.repo_path(EOU_MODEL_REL)), map_location="cpu")
    model.eval()
    head = nr.model_heads(model)[0]
    assert head == "rnnt", head
    set_greedy_batch(model, head)
    tok = model.tokenizer
    vocab = [tok.ids_to_tokens([i])[0] for i in range(tok.vocab_size)]
    eou_id, eob_id = tok.token_to_id(tte.EOU), tok.token_to_id(tte.EOB)
    specials = (eou_id, eob_id)
    if not nr.repo_path(tte.FIXTURE_REL).exists():  # git-ignored: built from ../shared/audio by the recipe
        tte.write_fixture()
    fixture = nr.load_audio(tte.FIXTURE_REL)
    assert np.array_equal(fixture, tte.make_two_utterances().astype(np.float32) / 32768.0), \
        f"{tte.FIXTURE_REL} is not the recipe's output: rerun tools/train_tiny_eou.py --fixture-only"
    atts = [list(a) for a in model.encoder.att_context_size_all]
    doc = dict(format=1, nemo_version=nemo.__version__, torch_version=torch.__version__, model=EOU_MODEL_REL,
               head=head, att_context_sizes=atts, eou_token=tte.EOU, eob_token=tte.EOB, eou_id=eou_id,
               eob_id=eob_id, blank_id=int(model.decoder.blank_idx), vocabulary=vocab,
               nemo_eou_handling=EOU_HANDLING,
               training=dict(tool="tools/train_tiny_eou.py", manifest=tte.training_manifest(),
                             note="targets: each utterance + <EOU> (<EOB> when is_backchannel), no space "
                                  "before the marker, utterances joined by a space (NeMo's EOU dataset rule)"),
               two_utterances=dict(path=tte.FIXTURE_REL, clips=[f"{tte.DEV_REL}/{c}" for c in tte.TWO_UTTERANCES],
                                   gap_s=tte.GAP_S, tail_s=tte.TAIL_S,
                                   recipe="int16 samples of clip 1, gap_s of zeros, clip 2, tail_s of zeros; "
                                          "16 kHz mono PCM16"),
               runs=[])
    for c in eou_clips():
        audio = nr.load_audio(c["path"])
        for att in atts:
            model.eval()
            run = stream(model, head, audio, att, per_chunk=True)
            hyp = run.pop("hypothesis")
            ohyp, n_frames = offline_hyp(model, audio, att)
            toks, otoks = run["tokens"], tokens_of(ohyp)
            pos = [i for i, t in enumerate(toks) if t in specials]
            after = [ch["tokens_after"] for ch in run["chunks"]]
            run.update(
                offline_tokens=otoks, offline_text=tok.ids_to_text(otoks), trained=c["trained"],
                target=c["target"], eou_positions=pos,
                eou_chunks=[next(k for k, n in enumerate(after) if n > i) for i in pos],
                token_frames=token_frames(hyp, run["chunks"]),
                encoded_frames=sum(ch["encoded_len"] for ch in run["chunks"]),
                offline_eou_positions=[i for i, t in enumerate(otoks) if t in specials],
                offline_token_frames=token_frames(ohyp), offline_encoded_frames=n_frames)
            doc["runs"].append(dict(clip=c["name"], path=c["path"], att_context_size=att, **run))
            print(EOU_STEM, c["name"], att, len(run["chunks"]), "chunks", repr(run["text"]),
                  "EOU/EOB at", pos, "frames", [run["token_frames"][i] for i in pos] if run["token_frames"] else None,
                  "equal offline" if toks == otoks else f"offline: {run['offline_text']!r}", flush=True)
    (out_dir / f"{EOU_STEM}.json").write_text(json.dumps(doc, separators=(",", ":")) + "\n")


def main() -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS + [EOU_STEM]),
                    help="comma-separated model stems to write (default: all)")
    ap.add_argument("--out-dir", default=OUT_DIR_REL, help="output folder, relative to the repository root")
    args = ap.parse_args()
    nr.nemo_imports()
    out_dir = nr.repo_path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for stem in args.models.split(","):
        if stem == EOU_STEM:
            write_eou_model(out_dir)
        elif stem in MODELS:
            write_model(stem, out_dir)
        else:
            raise SystemExit(f"unknown model {stem!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
