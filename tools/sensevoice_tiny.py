"""Make a tiny SenseVoice model in the published `FunAudioLLM/SenseVoiceSmall` layout (funasr's SenseVoiceSmall).

Run from the repository root with the funasr venv (tools/setup_funasr_venv.sh):

    OMP_NUM_THREADS=1 nice .venv-funasr/bin/python tools/sensevoice_tiny.py --max-seconds 420

What it writes into --out (default tests/models/sensevoice/tiny), the published file names:
  config.yaml (the published one scaled down), configuration.json (funasr's file_path_metas),
  model.pt (a plain state dict, float32), am.mvn (Kaldi nnet CMVN: <AddShift>/<Rescale> over the 560 LFR
  features), chn_jpn_yue_eng_ko_spectok.bpe.model (SentencePiece BPE) and train_log.json.

Steps:
 1. a SentencePiece BPE (vocabulary 240, identity normalization: a small file) trained on the dev transcripts + JFK in both forms (as written: the
    "withitn" targets; lower case without punctuation: the "woitn" targets), with the rich tags (languages,
    emotions, events, <|withitn|>/<|woitn|>) as user-defined pieces; <unk>=0 (the CTC blank), <s>=1, </s>=2;
 2. the published config.yaml with the encoder scaled down and every structural switch kept: SAN-M blocks with
    their FSMN memory (kernel 11, shift 0), the 560 -> d first block (encoders0), the main tier + after_norm, the
    tp tier + tp_norm, sinusoidal positions, LFR 7/6 over 80 kaldi fbank bins, CMVN, the 16-row prompt embedding;
 3. features by funasr's own WavFrontend (dither 0), CMVN stats from them;
 4. a short training run (AdamW, one thread, batches of jfk.wav + 3 clips) on jfk.wav and the dev clips of at
    most 12 s, each with the four prompts prepended as funasr's
    inference does ([language, event, emotion, text norm] embeddings): CTC on the frames after the prompts
    (target the transcript in the prompt's text-norm form), cross entropy on the four prompt frames (targets
    <|en|>, <|NEUTRAL|>, <|Speech|>, <|withitn|> or <|woitn|>), the language prompt "auto" or "en" at random;
 5. the model saved as funasr saves it, and funasr's AutoModel run on jfk.wav at the end as a check.
"""

import argparse
import json
import os
import random
import re
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from speech_clips import clips  # noqa: E402

LANGS = ["<|zh|>", "<|en|>", "<|yue|>", "<|ja|>", "<|ko|>", "<|nospeech|>"]
EMOTIONS = ["<|HAPPY|>", "<|SAD|>", "<|ANGRY|>", "<|NEUTRAL|>", "<|FEARFUL|>", "<|DISGUSTED|>", "<|SURPRISED|>",
            "<|EMO_UNKNOWN|>"]
EVENTS = ["<|Speech|>", "<|BGM|>", "<|Applause|>", "<|Laughter|>", "<|Cry|>", "<|Sneeze|>", "<|Breath|>",
          "<|Cough|>", "<|Event_UNK|>"]
NORMS = ["<|withitn|>", "<|woitn|>"]
TAGS = LANGS + EMOTIONS + EVENTS + NORMS
BPE_NAME = "chn_jpn_yue_eng_ko_spectok.bpe.model"

CONFIG = """\
encoder: SenseVoiceEncoderSmall
encoder_conf:
    output_size: {d}
    attention_heads: 4
    linear_units: {ff}
    num_blocks: {blocks}
    tp_blocks: {tp}
    dropout_rate: 0.1
    positional_dropout_rate: 0.1
    attention_dropout_rate: 0.1
    input_layer: pe
    pos_enc_class: SinusoidalPositionEncoder
    normalize_before: true
    kernel_size: 11
    sanm_shfit: 0
    selfattention_layer_type: sanm


model: SenseVoiceSmall
model_conf:
    length_normalized_loss: true
    sos: 1
    eos: 2
    ignore_id: -1

tokenizer: SentencepiecesTokenizer
tokenizer_conf:
  bpemodel: null
  unk_symbol: <unk>
  split_with_space: true

frontend: WavFrontend
frontend_conf:
    fs: 16000
    window: hamming
    n_mels: 80
    frame_length: 25
    frame_shift: 10
    lfr_m: 7
    lfr_n: 6
    cmvn_file: null


specaug: SpecAugLFR
specaug_conf:
    apply_time_warp: false
    time_warp_window: 5
    time_warp_mode: bicubic
    apply_freq_mask: true
    freq_mask_width_range:
    - 0
    - 30
    lfr_rate: 6
    num_freq_mask: 1
    apply_time_mask: true
    time_mask_width_range:
    - 0
    - 12
    num_time_mask: 1
"""

CONFIGURATION = {
    "framework": "pytorch",
    "task": "auto-speech-recognition",
    "model": {"type": "funasr"},
    "pipeline": {"type": "funasr-pipeline"},
    "model_name_in_hub": {"ms": "", "hf": ""},
    "file_path_metas": {
        "init_param": "model.pt",
        "config": "config.yaml",
        "tokenizer_conf": {"bpemodel": BPE_NAME},
        "frontend_conf": {"cmvn_file": "am.mvn"},
    },
}


def plain(text: str) -> str:
    """The "woitn" form of a transcript: lower case, no punctuation."""
    return " ".join(re.sub(r"[^\w' ]+", " ", text.lower()).split())


def train_tokenizer(texts: list, out: Path, vocab: int) -> None:
    import sentencepiece as spm

    corpus = out / "corpus.txt"
    corpus.write_text("\n".join(texts) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(out / BPE_NAME[: -len(".model")]), vocab_size=vocab,
        model_type="bpe", character_coverage=1.0, user_defined_symbols=TAGS, unk_id=0, bos_id=1, eos_id=2,
        pad_id=-1, normalization_rule_name="identity", minloglevel=2)
    corpus.unlink()
    (out / BPE_NAME.replace(".model", ".vocab")).unlink()


def write_cmvn(path: Path, feats: list) -> None:
    x = torch.cat(feats).double()
    mean, std = x.mean(0), x.std(0).clamp_min(1e-3)
    fmt = lambda v: " ".join(f"{float(a):.6g}" for a in v)  # noqa: E731
    n = x.shape[1]
    path.write_text(
        f"<Nnet>\n<Splice> {n} {n}\n[ 0 ]\n<AddShift> {n} {n}\n<LearnRateCoef> 0 [ {fmt(-mean)} ]\n"
        f"<Rescale> {n} {n}\n<LearnRateCoef> 0 [ {fmt(1.0 / std)} ]\n</Nnet>\n", encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=REPO / "tests" / "models" / "sensevoice" / "tiny")
    ap.add_argument("--d", type=int, default=40)
    ap.add_argument("--ff", type=int, default=96)
    ap.add_argument("--blocks", type=int, default=3)
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=240)
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--max-seconds", type=float, default=420.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=5e-3)
    ap.add_argument("--max-clip-s", type=float, default=12.0, help="train on the clips up to this long (+ jfk.wav)")
    ap.add_argument("--resume", action="store_true", help="continue from --out's model.pt (same tokenizer "
                    "and CMVN: steps 1-3 are kept)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)

    data = clips()
    if not args.resume:
        train_tokenizer([t for _, _, t in data] + [plain(t) for _, _, t in data], out, args.vocab)
    (out / "config.yaml").write_text(CONFIG.format(d=args.d, ff=args.ff, blocks=args.blocks, tp=args.tp))
    (out / "configuration.json").write_text(json.dumps(CONFIGURATION, indent=2) + "\n")

    import sentencepiece as spm
    from funasr.frontends.wav_frontend import WavFrontend
    from funasr.models.sense_voice.model import SenseVoiceSmall

    sp = spm.SentencePieceProcessor(model_file=str(out / BPE_NAME))
    fe = WavFrontend(fs=16000, window="hamming", n_mels=80, frame_length=25, frame_shift=10, lfr_m=7, lfr_n=6,
                     dither=0.0)
    feats = []
    for _, wav, _ in data:
        x = torch.from_numpy(wav)[None]
        f, _ = fe(x, torch.tensor([x.shape[1]]))
        feats.append(f[0])
    if not args.resume:
        write_cmvn(out / "am.mvn", feats)
    fe_cmvn = WavFrontend(cmvn_file=str(out / "am.mvn"), fs=16000, window="hamming", n_mels=80, frame_length=25,
                          frame_shift=10, lfr_m=7, lfr_n=6, dither=0.0)
    feats = []
    for _, wav, _ in data:
        x = torch.from_numpy(wav)[None]
        f, _ = fe_cmvn(x, torch.tensor([x.shape[1]]))
        feats.append(f[0])

    import yaml

    conf = yaml.safe_load(CONFIG.format(d=args.d, ff=args.ff, blocks=args.blocks, tp=args.tp))
    model = SenseVoiceSmall(encoder=conf["encoder"], encoder_conf=conf["encoder_conf"], input_size=560,
                            vocab_size=sp.get_piece_size(), **conf["model_conf"])
    if args.resume:
        model.load_state_dict(torch.load(out / "model.pt", weights_only=True))
        prior = json.loads((out / "train_log.json").read_text())
    tag = {t: sp.piece_to_id(t) for t in TAGS}
    targets = []
    for _, _, text in data:
        targets.append({14: sp.encode(text), 15: sp.encode(plain(text))})
    n_params = sum(p.numel() for p in model.parameters())
    print(f"params {n_params}, vocab {sp.get_piece_size()}", flush=True)

    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr, total_steps=args.steps,
                                                pct_start=0.05 if not args.resume else 0.01)
    model.train()
    t0 = time.time()
    log = []
    order = [i for i in range(1, len(data)) if len(data[i][1]) <= args.max_clip_s * 16000]
    batch = 4
    step = 0
    for step in range(args.steps):
        idx = random.sample(order, batch - 1) + [0]  # jfk.wav in every batch
        norms = [random.choice([14, 15]) for _ in idx]
        langs = [random.choice([0, 4]) for _ in idx]
        xs = [feats[i] for i in idx]
        t_max = max(x.shape[0] for x in xs)
        speech = torch.zeros(len(idx), t_max, 560)
        for j, x in enumerate(xs):
            speech[j, : x.shape[0]] = x
        lens = torch.tensor([x.shape[0] for x in xs])
        prompt = model.embed(torch.tensor([[lg, 1, 2, nm] for lg, nm in zip(langs, norms)]))
        enc, enc_lens = model.encoder(torch.cat([prompt, speech], 1), lens + 4)
        logp = model.ctc.log_softmax(enc)
        ys = [targets[i][nm] for i, nm in zip(idx, norms)]
        ctc = F.ctc_loss(logp[:, 4:].transpose(0, 1), torch.tensor([t for y in ys for t in y]), enc_lens - 4,
                         torch.tensor([len(y) for y in ys]), blank=0, reduction="mean", zero_infinity=True)
        rich_t = torch.tensor([[tag["<|en|>"], tag["<|NEUTRAL|>"], tag["<|Speech|>"],
                                tag["<|withitn|>" if nm == 14 else "<|woitn|>"]] for nm in norms])
        rich = F.nll_loss(logp[:, :4].reshape(-1, logp.shape[-1]), rich_t.reshape(-1))
        loss = ctc + rich
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        opt.step()
        sched.step()
        if step % 50 == 0:
            log.append({"step": step, "ctc": round(float(ctc), 4), "rich": round(float(rich), 4),
                        "s": round(time.time() - t0, 1)})
            print(log[-1], flush=True)
        if time.time() - t0 > args.max_seconds:
            break
    model.eval()
    torch.save(model.state_dict(), out / "model.pt")
    run = {"args": {k: v for k, v in vars(args).items() if k != "out"}, "steps_run": step + 1, "loss": log}
    runs = (prior.get("runs", [prior]) if args.resume else []) + [run]
    (out / "train_log.json").write_text(json.dumps({"params": n_params, "runs": runs}, indent=1) + "\n")

    from funasr import AutoModel

    am = AutoModel(model=str(out), device="cpu", disable_update=True, disable_pbar=True, disable_log=True,
                   frontend_conf={"dither": 0.0})
    for lang, itn in (("auto", False), ("en", True)):
        res = am.generate(input=str(REPO.parent / "shared" / "audio" / "jfk.wav"), language=lang, use_itn=itn)
        print(lang, itn, res[0]["text"])


if __name__ == "__main__":
    main()
