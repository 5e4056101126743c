#!/usr/bin/env python
"""Train tests/models/tiny-eou-streaming.nemo: a tiny cache-aware streaming RNN-T that emits <EOU> and <EOB>.

What it is: a miniature of NVIDIA's `parakeet_realtime_eou_120m-v1` (cache-aware streaming FastConformer
RNN-T whose vocabulary ends with the special pieces `<EOU>`, end of utterance, and `<EOB>`, end of
backchannel).  Same architecture family, only tiny, and overfitted on a handful of dev clips so that NeMo's
greedy decoding really emits the end-of-utterance tokens.  It exists to test our streaming decoder's
end-of-utterance events against NeMo (tools/nemo_streaming_reference.py records NeMo's outputs for it).

Run from the repository root with the Python of the NeMo virtual environment (tools/setup_nemo_venv.sh):

    .venv-nemo/bin/python tools/train_tiny_eou.py            # train, check, save model + fixture
    .venv-nemo/bin/python tools/train_tiny_eou.py --fixture-only
    .venv-nemo/bin/python tools/train_tiny_eou.py --variant many-symbols   # the variant below

Writes (paths relative to the repository root; shared data is read from ../shared):
    tests/models/tiny-eou-streaming.nemo       the model (NeMo 3.0.0 `save_to()`, 1.4 MB)
    tests/fixtures/audio/two-utterances.wav    two training clips joined by 1.0 s of digital silence,
                                               0.3 s of silence after (16 kHz mono PCM16)
and prints a summary (steps, seconds, the checks).  Everything runs on the CPU with one thread and fixed
seeds, so a rerun gives the same training run (the .nemo archive's member names and mtimes differ).
Last run (NeMo 3.0.0, torch 2.13.0 CPU, a busy 2-core machine): fitted at step 475, 584 s, final loss
0.0013 a token.  Then regenerate the references: .venv-nemo/bin/python tools/nemo_streaming_reference.py
--models tiny-eou-streaming.

Model
    Encoder: the streaming encoder of ../shared/models/parakeet-tiny/tiny-tdt-streaming-random.nemo
    (2 conformer layers, d_model 64, 2 heads, dw_striding 8x with causal downsampling, `chunked_limited`
    attention with att_context_size [[70,13],[70,6],[70,1],[70,0]], causal depthwise convolutions, kernel 9,
    layer_norm conv norm, 128 mels, `normalize: NA`, dither 0).  RNN-T head: LSTM predictor 1 x 64,
    joint hidden 64 (relu), blank = last index.  Class: EncDecRNNTBPEModel (NVIDIA's EOU training class,
    EncDecRNNTBPEEOUModel, adds the EOU dataset, EOU metrics and timestamps/alignments in its decoding
    config to it; the network is the same).  Decoding config saved: greedy_batch, max_symbols 10.

Tokenizer (as NVIDIA's EOU model holds the special tokens)
    SentencePiece BPE with 126 pieces trained here on the lower-case transcripts (`text_norm`) of the
    dev manifest (../shared/audio/dev/manifest.jsonl: the 37 dev transcripts, which include the training
    transcripts; `unk` = 0, no bos/eos/pad, `identity` normalisation: no 240 kB NFKC table in the
    model file), then `<EOU>` and `<EOB>` appended to the model proto as
    USER_DEFINED pieces with score 0: 128 pieces, `<EOU>` = 126, `<EOB>` = 127, blank = 128.  This is how
    NeMo's scripts/asr_end_of_utterance/tokenizers/add_special_tokens_to_sentencepiece.py extends a
    tokenizer (the published model: 1024 BPE pieces, `<EOU>` 1024, `<EOB>` 1025, blank 1026), and NeMo's
    EOU dataset checks that the two special pieces are the last two of the vocabulary.  As user-defined
    pieces, SentencePiece cuts them out of the text before BPE: "upset<EOB>" -> "▁u p se t <EOB>".

Targets (as NeMo's EOU manifests mark them)
    NeMo's EOU dataset (nemo.collections.asr.data.audio_to_eou_label_lhotse) reads manifest rows with
    `text`, or `utterances` + `sou_time` + `eou_time` + `is_backchannel` for several utterances in one
    file, and builds the target text as each utterance + "<EOU>" (or "<EOB>" when `is_backchannel`),
    with NO space before the marker (its default `add_sep_before_eou: false`), utterances joined by one
    space.  The same is done here (training_manifest(), rows in that multi-utterance format; it is
    also written into the reference json):
        6 single-utterance rows (SINGLE_CLIPS): five short dev clips ending in <EOU>, the shortest dev
          clip ("ruth is upset", cv_17767698, 2.0 s) marked as a backchannel, ending in <EOB>;
        1 two-utterance row: the fixture two-utterances.wav,
          "a golden fortune and a happy life<EOU> he might even have been made amiable himself<EOU>".
    Text: the manifest's `text_norm` (lower case, no punctuation; apostrophes kept).  sou_time / eou_time:
    speech start / end found by a plain energy detector (speech_span()).  Not trained on: jfk and every
    other dev clip (e.g. cv_20005990, where the model says only "<EOU>", at the end of the speech).

Fixture recipe (tests/fixtures/audio/two-utterances.wav, deterministic)
    int16 samples of ../shared/audio/dev/ls_61-70968-0002.wav, then 16000 zeros (1.0 s), then the int16
    samples of ../shared/audio/dev/librivox_sns_0930.wav, then 4800 zeros (0.3 s); written as 16 kHz mono
    PCM16 WAV (make_two_utterances() below). The file is git-ignored (../shared/audio's clips are not
    copied into the project); the reference tool writes it when absent, the tests build their own copy
    from the recipe recorded in the json (tests/conftest.py, two_utterances_wav).

Training
    Adam (lr 3e-3 halved every 200 steps down to 3e-4, grad-norm clip 5), one padded batch of all 7 rows
    per step, the summed RNN-T loss (own vectorised implementation of the RNN-T lattice, per-token
    normalised; NeMo's numba loss gives the same numbers but is slow on a CPU) over all four lookaheads:
    the model is kept in eval mode (dropout is 0 anyway) and the encoder's lookahead is set with
    set_default_att_context_size() for each, instead of NeMo's random pick per step in train mode
    (att_context_probs), so every step trains every lookahead and the run is deterministic.
    The lattice is constrained (emission_windows()): each word piece may only be emitted in a window of
    frames around its share of its utterance's speech span, and <EOU>/<EOB> only from the utterance's
    speech end to 6 frames (480 ms) after.  Without this, a model that memorises 7 clips emits a whole
    transcript in one or two frames (it knows the clip from its first frames); NeMo's greedy decoding
    stops at 10 symbols a frame and then lands in untrained states (a clip decoded as another clip's
    transcript, the second utterance of the fixture dropped) although the loss is near 0.  Every 25 steps
    NeMo's offline greedy_batch decoding is checked for every row and lookahead; when all are right, the
    cache-aware streaming decoding (CacheAwareStreamingAudioBuffer + conformer_stream_step, greedy_batch,
    as tools/nemo_streaming_reference.py runs it) is checked too, and training stops once both have been
    right at every check for MARGIN (100) steps.  Seeds fixed (torch, numpy, random), one CPU thread.

Variant `--variant many-symbols` (tests/models/tiny-eou-many-symbols.nemo, for the beam parity tests of
tests/test_beam_many_symbols.py): the same network, tokenizer and targets, fitted to three single-utterance
rows only (MANY_SYMBOLS_CLIPS) WITHOUT the emission windows, at the default lookahead [70,13] only, seed
MANY_SYMBOLS_SEED, for MANY_SYMBOLS_STEPS steps (no streaming check).  Unconstrained, the model learns to
emit a transcript in a burst of tokens on one or two frames, which NeMo's greedy decoding (10 symbols a
frame) truncates, so its check cannot pass: the run length is fixed instead.  On dev clips it was not
trained on, NeMo's default beam search then puts more than 10 tokens on one frame (the case this variant
exists for; NeMo's beam has no per-frame bound).
"""
from __future__ import annotations

import os

os.environ["OMP_NUM_THREADS"] = "1"
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse
import io
import json
import random
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf
import torch
import yaml

torch.set_num_threads(1)
torch.set_flush_denormal(True)

REPO = Path(__file__).resolve().parents[1]
AUDIO_REL = "../shared/audio"
DEV_REL = f"{AUDIO_REL}/dev"
TEMPLATE_REL = "../shared/models/parakeet-tiny/tiny-tdt-streaming-random.nemo"
MODEL_REL = "tests/models/tiny-eou-streaming.nemo"
FIXTURE_REL = "tests/fixtures/audio/two-utterances.wav"

SEED = 2026
SR = 16000
LR = 3e-3  # halved every LR_HALF_LIFE steps, down to LR * LR_FLOOR
LR_HALF_LIFE = 200
LR_FLOOR = 0.1
MAX_STEPS = 3000
CHECK_EVERY = 25
MARGIN = 100
BPE_PIECES = 126
EOU, EOB = "<EOU>", "<EOB>"

# (dev clip, is_backchannel); the transcripts come from the dev manifest's text_norm
SINGLE_CLIPS = [
    ("cv_17767698.wav", True),  # "ruth is upset", 2.0 s, the shortest dev clip: the backchannel
    ("ls_61-70968-0002.wav", False),
    ("librivox_sns_0930.wav", False),
    ("mfa_thoughts.wav", False),
    ("ds_new_home_in_the_stars.wav", False),
    ("cv_18820498.wav", False),
]
TWO_UTTERANCES = ("ls_61-70968-0002.wav", "librivox_sns_0930.wav")
# The many-symbols variant (module docstring): three rows, no emission windows, one lookahead.
MANY_SYMBOLS_CLIPS = [
    ("cv_17767698.wav", True),
    ("ls_61-70968-0002.wav", False),
    ("librivox_sns_0930.wav", False),
]
MANY_SYMBOLS_SEED = 2027
MANY_SYMBOLS_STEPS = 400  # a fixed length: NeMo's greedy check cannot pass (it stops at 10 symbols a frame)
MANY_SYMBOLS_MODEL_REL = "tests/models/tiny-eou-many-symbols.nemo"
GAP_S, TAIL_S = 1.0, 0.3
FRAME_SAMPLES = 160 * 8  # one encoder frame: 8 mel frames of 10 ms
EOU_SLACK = 6  # frames after the speech end within which <EOU>/<EOB> may be emitted in training


def repo_path(rel: str) -> Path:
    return (REPO / rel).resolve()


def manifest_texts() -> dict[str, str]:
    rows = [json.loads(l) for l in open(repo_path(f"{DEV_REL}/manifest.jsonl")) if l.strip()]
    return {r["audio"]: clean(r["text_norm"]) for r in rows}


def clean(text: str) -> str:
    text = "".join(c for c in text.lower() if c.isalnum() or c in " '")
    return " ".join(text.split())


def read_int16(rel: str) -> np.ndarray:
    data, sr = sf.read(str(repo_path(rel)), dtype="int16", always_2d=True)
    assert sr == SR and data.shape[1] == 1, (rel, sr, data.shape)
    return data[:, 0]


def make_two_utterances() -> np.ndarray:
    """The fixture's int16 samples (recipe in the module docstring)."""
    a, b = (read_int16(f"{DEV_REL}/{c}") for c in TWO_UTTERANCES)
    return np.concatenate([a, np.zeros(int(GAP_S * SR), np.int16), b, np.zeros(int(TAIL_S * SR), np.int16)])


def write_fixture() -> Path:
    out = repo_path(FIXTURE_REL)
    out.parent.mkdir(parents=True, exist_ok=True)
    sf.write(str(out), make_two_utterances(), SR, subtype="PCM_16", format="WAV")
    return out


def speech_span(pcm: np.ndarray) -> tuple[float, float]:
    """(start, end) of the speech in a clip, seconds: a plain energy detector (25 ms windows, 10 ms hop;
    speech = windows louder than max(95th percentile - 30 dB, 10th percentile + 35 % of the range))."""
    a = pcm.astype(np.float64) / 32768.0
    hop, win = SR // 100, SR // 40
    n = 1 + max(0, (len(a) - win) // hop)
    db = np.array([10 * np.log10(np.mean(a[i * hop: i * hop + win] ** 2) + 1e-18) for i in range(n)])
    hi, lo = np.percentile(db, 95), np.percentile(db, 10)
    on = np.flatnonzero(db > max(hi - 30.0, lo + 0.35 * (hi - lo)))
    return round(on[0] * hop / SR, 2), round((on[-1] * hop + win) / SR, 2)


def training_manifest(single=SINGLE_CLIPS, two_utterances: bool = True) -> list[dict]:
    """NeMo EOU-dataset rows, multi-utterance form (audio paths relative to the repository root).

    sou_time / eou_time: speech start / end of each utterance from speech_span()."""
    texts = manifest_texts()
    rows = []
    for clip, bc in single:
        pcm = read_int16(f"{DEV_REL}/{clip}")
        s, e = speech_span(pcm)
        rows.append(dict(audio_filepath=f"{DEV_REL}/{clip}", offset=0.0, duration=len(pcm) / SR,
                         sou_time=[s], eou_time=[e], utterances=[texts[clip]], is_backchannel=[bc]))
    if not two_utterances:
        return rows
    a, b = (read_int16(f"{DEV_REL}/{c}") for c in TWO_UTTERANCES)
    (s1, e1), (s2, e2) = speech_span(a), speech_span(b)
    off = len(a) / SR + GAP_S
    rows.append(dict(audio_filepath=FIXTURE_REL, offset=0.0, duration=off + (len(b) / SR) + TAIL_S,
                     sou_time=[s1, round(off + s2, 4)], eou_time=[e1, round(off + e2, 4)],
                     utterances=[texts[c] for c in TWO_UTTERANCES], is_backchannel=[False, False]))
    return rows


def utterance_targets(row: dict) -> list[str]:
    """NeMo's EOU dataset rule: utterance + marker (no space before it); target_text() joins them with a space."""
    utts = row.get("utterances", [row.get("text")])
    bcs = row.get("is_backchannel", False)
    bcs = bcs if isinstance(bcs, list) else [bcs] * len(utts)
    return [u + (EOB if bc else EOU) for u, bc in zip(utts, bcs) if u]


def target_text(row: dict) -> str:
    return " ".join(utterance_targets(row))


def frame_of(seconds: float) -> int:
    return int(seconds * SR) // FRAME_SAMPLES


def emission_windows(row: dict, tokenizer) -> tuple[list[int], list[tuple[int, int]]]:
    """Token ids of the row's target and, per token, the encoder frames [lo, hi] where the training
    lattice lets it be emitted.  The k-th of the N word pieces of an utterance whose speech spans frames
    [s, e] centres on s + (e - s) (k + 1/2) / N, give or take max(2, (e - s) / 6) frames, within
    [s - 1, e + 2] (spread, so that greedy decoding never needs more than its 10 symbols in one frame);
    its <EOU>/<EOB> may come from the speech end e to e + EOU_SLACK."""
    ids, wins = [], []
    for k, (text, s, e) in enumerate(zip(utterance_targets(row), row["sou_time"], row["eou_time"])):
        piece_ids = tokenizer.text_to_ids(text if k == 0 else " " + text)
        fs, fe = frame_of(s), frame_of(e)
        n = len(piece_ids) - 1
        half = max(2.0, (fe - fs) / 6)
        for j in range(n):
            c = fs + (fe - fs) * (j + 0.5) / n
            wins.append((max(fs - 1, int(np.floor(c - half))), min(fe + 2, int(np.ceil(c + half)))))
        wins.append((fe, fe + EOU_SLACK))
        ids += piece_ids
    assert ids == tokenizer.text_to_ids(target_text(row)), row
    return ids, wins


def load_row_audio(row: dict) -> np.ndarray:
    if row["audio_filepath"] == FIXTURE_REL:
        pcm = make_two_utterances()
    else:
        pcm = read_int16(row["audio_filepath"])
    return pcm.astype(np.float32) / 32768.0


# ---------------------------------------------------------------------------------------------------
# tokenizer
# ---------------------------------------------------------------------------------------------------


def build_tokenizer(out_dir: Path) -> list[str]:
    """SentencePiece BPE (126 pieces) + <EOU>, <EOB> appended as user-defined pieces; writes the three
    files NeMo's SentencePiece tokenizer setup reads (tokenizer.model, tokenizer.vocab, vocab.txt)."""
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2 as pb

    rows = [json.loads(l) for l in open(repo_path(f"{DEV_REL}/manifest.jsonl")) if l.strip()]
    corpus = [clean(r["text_norm"]) for r in rows]
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(corpus), model_writer=buf, model_type="bpe",
                                   vocab_size=BPE_PIECES, character_coverage=1.0, unk_id=0, bos_id=-1,
                                   eos_id=-1, pad_id=-1, split_by_whitespace=True, num_threads=1,
                                   normalization_rule_name="identity", minloglevel=2)
    proto = pb.ModelProto()
    proto.ParseFromString(buf.getvalue())
    for tok in (EOU, EOB):
        assert all(p.piece != tok for p in proto.pieces)
        p = proto.pieces.add()
        p.piece, p.score, p.type = tok, 0.0, pb.ModelProto.SentencePiece.USER_DEFINED
    blob = proto.SerializeToString()
    sp = spm.SentencePieceProcessor(model_proto=blob)
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    assert pieces[-2:] == [EOU, EOB] and len(pieces) == BPE_PIECES + 2
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "tokenizer.model").write_bytes(blob)
    (out_dir / "tokenizer.vocab").write_text("".join(f"{p}\t{sp.get_score(i)}\n" for i, p in enumerate(pieces)),
                                             encoding="utf-8")
    # vocab.txt in NeMo's word-piece spelling (leading "▁" dropped, other pieces "##"-prefixed), no specials
    lines = [(p[1:] if p.startswith("▁") else "##" + p) or p for p in pieces if p not in ("<unk>", EOU, EOB)]
    (out_dir / "vocab.txt").write_text("".join(l + "\n" for l in lines), encoding="utf-8")
    return pieces


# ---------------------------------------------------------------------------------------------------
# model
# ---------------------------------------------------------------------------------------------------


def template_config() -> dict:
    with tarfile.open(repo_path(TEMPLATE_REL)) as tf:
        member = next(m for m in tf.getmembers() if m.name.endswith("model_config.yaml"))
        return yaml.safe_load(tf.extractfile(member).read())


def model_config(tok_dir: Path, vocab_size: int) -> dict:
    cfg = template_config()
    for k in ("labels", "nemo_version", "target"):
        cfg.pop(k, None)
    cfg["tokenizer"] = {"dir": str(tok_dir), "type": "bpe"}
    cfg["preprocessor"].update(normalize="NA", dither=0.0, pad_to=0, features=128)
    hid = 64
    cfg["model_defaults"] = {"enc_hidden": cfg["encoder"]["d_model"], "pred_hidden": hid, "joint_hidden": hid}
    cfg["decoder"]["prednet"].update(pred_hidden=hid, pred_rnn_layers=1)
    cfg["decoder"]["vocab_size"] = vocab_size
    joint = cfg["joint"]
    joint.pop("vocabulary", None)
    joint.pop("num_extra_outputs", None)
    joint["num_classes"] = vocab_size
    joint["jointnet"].update(joint_hidden=hid, pred_hidden=hid, encoder_hidden=cfg["encoder"]["d_model"])
    cfg["decoding"] = {"strategy": "greedy_batch", "greedy": {"max_symbols": 10}}
    cfg["loss"] = {"loss_name": "default", "warprnnt_numba_kwargs": {"fastemit_lambda": 0.0, "clamp": -1.0}}
    cfg["target"] = "nemo.collections.asr.models.rnnt_bpe_models.EncDecRNNTBPEModel"
    return cfg


def set_greedy_batch(model) -> None:
    """greedy_batch without timestamps/alignments (streaming merges partial hypotheses)."""
    from nemo.collections.asr.parts.submodules.rnnt_decoding import RNNTBPEDecodingConfig
    from omegaconf import OmegaConf, open_dict

    cfg = OmegaConf.structured(RNNTBPEDecodingConfig())
    with open_dict(cfg):
        cfg.strategy = "greedy_batch"
        cfg.model_type = "rnnt"
        cfg.greedy.max_symbols_per_step = 10
        cfg.greedy.loop_labels = True
        cfg.greedy.use_cuda_graph_decoder = False
        cfg.compute_timestamps = False
        cfg.preserve_alignments = False
    model.change_decoding_strategy(cfg, verbose=False)


# ---------------------------------------------------------------------------------------------------
# loss
# ---------------------------------------------------------------------------------------------------


def rnnt_nll(logp: torch.Tensor, targets: torch.Tensor, T: torch.Tensor, U: torch.Tensor,
             allow: torch.Tensor | None = None) -> torch.Tensor:
    """Per-utterance negative log-likelihood of the standard RNN-T lattice, batched.

    logp: [B, Tmax, Umax+1, V+1] log-probabilities, blank last; targets: [B, Umax]; T, U: [B] lengths;
    allow: optional [B, Tmax, Umax] bool, where label u may be emitted at frame t (the others are cut
    from the lattice: a constrained RNN-T loss).
    alpha_t[u] is the log-probability of having emitted u labels and being at frame t.  Within a frame
    the label steps u -> u+1 form a linear chain, done at once with a cumulative sum and logcumsumexp;
    between frames a blank moves t -> t+1.  The result is alpha_{T-1}[U] + blank(T-1, U).
    """
    B, Tm, U1, _ = logp.shape
    blank = logp[..., -1]  # [B, Tm, U1]
    lab = logp[:, :, : U1 - 1, :].gather(3, targets[:, None, : U1 - 1, None].expand(B, Tm, U1 - 1, 1))[..., 0]
    if allow is not None:
        lab = lab.masked_fill(~allow, -1.0e4)
    zero = logp.new_zeros(B, 1)
    alpha = torch.cat([zero, logp.new_full((B, U1 - 1), -1.0e4)], dim=1)
    final = logp.new_zeros(B)
    for t in range(Tm):
        if t > 0:
            alpha = alpha + blank[:, t - 1]
        s = torch.cat([zero, torch.cumsum(lab[:, t], dim=1)], dim=1)
        alpha = s + torch.logcumsumexp(alpha - s, dim=1)
        end = alpha.gather(1, U[:, None])[:, 0] + blank[:, t].gather(1, U[:, None])[:, 0]
        final = torch.where(T == t + 1, end, final)
    return -final


# ---------------------------------------------------------------------------------------------------
# checks
# ---------------------------------------------------------------------------------------------------


@torch.no_grad()
def offline_ids(model, mel, mel_len, att) -> list[list[int]]:
    model.encoder.set_default_att_context_size(att)
    enc, enc_len = model.encoder(audio_signal=mel, length=mel_len)
    hyps = model.decoding.rnnt_decoder_predictions_tensor(encoder_output=enc, encoded_lengths=enc_len,
                                                          return_hypotheses=True)
    hyps = hyps[0] if isinstance(hyps, tuple) else hyps
    return [[int(v) for v in h.y_sequence.tolist()] for h in hyps]


def streaming_ids(model, audio: np.ndarray, att) -> list[int]:
    import nemo_streaming_reference as nsr

    return nsr.stream(model, "rnnt", audio, att)["tokens"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fixture-only", action="store_true", help="only write the two-utterance fixture")
    ap.add_argument("--variant", choices=("streaming", "many-symbols"), default="streaming",
                    help="streaming: tiny-eou-streaming.nemo (default); many-symbols: tiny-eou-many-symbols.nemo")
    args = ap.parse_args()
    many = args.variant == "many-symbols"
    seed = MANY_SYMBOLS_SEED if many else SEED
    fixture = write_fixture()
    print("wrote", os.path.relpath(fixture, REPO))
    if args.fixture_only:
        return 0

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import logging

    from nemo.utils import logging as nemo_logging

    nemo_logging.setLevel(logging.ERROR)
    from nemo.collections.asr.models import EncDecRNNTBPEModel
    from omegaconf import OmegaConf

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    rows = training_manifest(MANY_SYMBOLS_CLIPS, two_utterances=False) if many else training_manifest()
    with tempfile.TemporaryDirectory() as tmp:
        pieces = build_tokenizer(Path(tmp) / "tokenizer")
        cfg = OmegaConf.create(model_config(Path(tmp) / "tokenizer", len(pieces)))
        model = EncDecRNNTBPEModel(cfg=cfg).cpu()
        set_greedy_batch(model)
        eou_id, eob_id = model.tokenizer.token_to_id(EOU), model.tokenizer.token_to_id(EOB)
        print("vocabulary", len(pieces), "EOU", eou_id, "EOB", eob_id, "blank", model.decoder.blank_idx,
              "parameters", sum(p.numel() for p in model.parameters()))

        texts = [target_text(r) for r in rows]
        ids, wins = zip(*(emission_windows(r, model.tokenizer) for r in rows))
        for t, i, w in zip(texts, ids, wins):
            print(f"  {t!r} -> {len(i)} tokens, last {i[-1]}, windows {w}")
        audios = [load_row_audio(r) for r in rows]
        x = torch.zeros(len(audios), max(map(len, audios)))
        for b, a in enumerate(audios):
            x[b, : len(a)] = torch.from_numpy(a)
        n = torch.tensor([len(a) for a in audios])
        y = torch.zeros(len(ids), max(map(len, ids)), dtype=torch.long)
        for b, seq in enumerate(ids):
            y[b, : len(seq)] = torch.tensor(seq)
        ylen = torch.tensor([len(s) for s in ids])
        model.eval()  # eval mode throughout: fixed lookahead per forward, no dropout (all 0 anyway)
        with torch.no_grad():
            mel, mel_len = model.preprocessor(input_signal=x, length=n)
        atts = [list(a) for a in model.encoder.att_context_size_all]
        if many:
            atts = atts[:1]  # the default lookahead, which the offline encoder uses
        with torch.no_grad():
            _, enc_len = model.encoder(audio_signal=mel, length=mel_len)
        allow = torch.zeros(len(ids), int(enc_len.max()), int(ylen.max()), dtype=torch.bool)
        t_idx = torch.arange(allow.shape[1])[:, None]
        for b, w in enumerate(wins):
            lo = torch.tensor([min(max(a, 0), int(enc_len[b]) - 1) for a, _ in w])
            hi = torch.tensor([min(z, int(enc_len[b]) - 1) for _, z in w])
            allow[b, :, : len(w)] = (t_idx >= lo) & (t_idx <= hi)

        opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=LR)
        t0 = time.time()
        ok_since, step, loss = None, 0, float("nan")
        for step in range(1, MAX_STEPS + 1):
            lr = LR * max(LR_FLOOR, 0.5 ** (step / LR_HALF_LIFE))
            for g in opt.param_groups:
                g["lr"] = lr
            opt.zero_grad()
            dec, _, _ = model.decoder(targets=y, target_length=ylen)
            total = 0.0
            for att in atts:
                model.encoder.set_default_att_context_size(att)
                enc, enc_len = model.encoder(audio_signal=mel, length=mel_len)
                logits = model.joint(encoder_outputs=enc, decoder_outputs=dec)
                nll = rnnt_nll(logits.log_softmax(-1), y, enc_len, ylen, None if many else allow)
                total = total + (nll / ylen).mean()
            total.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            opt.step()
            loss = float(total) / len(atts)
            if many and step >= MANY_SYMBOLS_STEPS:
                break
            if step % CHECK_EVERY:
                continue
            bad = [(att[1], b, model.tokenizer.ids_to_text(got)) for att in atts
                   for b, got in enumerate(offline_ids(model, mel, mel_len, att)) if got != ids[b]]
            msg = f"step {step} loss {loss:.4f} lr {lr:.2g} {time.time() - t0:.0f}s offline wrong {len(bad)} {bad[:4]}"
            if not bad and not many:
                bad = [(att[1], b) for att in atts for b in range(len(ids))
                       if streaming_ids(model, audios[b], att) != ids[b]]
                msg += f", streaming wrong {len(bad)} {bad[:4]}"
            print(msg, flush=True)
            if bad:
                ok_since = None
            elif ok_since is None:
                ok_since = step
            elif step >= ok_since + MARGIN:
                break
        else:
            raise SystemExit(f"did not fit in {MAX_STEPS} steps")
        seconds = time.time() - t0
        print(f"fitted: {step} steps, {seconds:.0f} s, final loss {loss:.4f}")
        model.encoder.set_default_att_context_size(atts[0])
        out = repo_path(MANY_SYMBOLS_MODEL_REL if many else MODEL_REL)
        out.parent.mkdir(parents=True, exist_ok=True)
        model.cfg.tokenizer.dir = "tokenizer"  # the temporary build directory is not part of the model
        model.save_to(str(out))
    print("wrote", os.path.relpath(out, REPO), out.stat().st_size, "bytes")
    print(json.dumps(dict(seed=seed, steps=step, seconds=round(seconds, 1), final_loss=loss, eou_id=eou_id,
                          eob_id=eob_id, manifest=rows, targets=texts)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
