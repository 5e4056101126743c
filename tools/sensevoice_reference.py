"""Reference outputs of a SenseVoice model from funasr itself (AutoModel.generate -> SenseVoiceSmall.inference),
for tests/test_sensevoice.py.

Run from the repository root with the funasr venv (tools/setup_funasr_venv.sh):

    OMP_NUM_THREADS=1 nice .venv-funasr/bin/python tools/sensevoice_reference.py

funasr's WavFrontend dithers by default (dither 1.0 in its code; the published config.yaml does not set it), so
two runs of the published model differ in the last bits; the reference runs with dither 0 (AutoModel(...,
frontend_conf={"dither": 0.0}), merged into the config.yaml's frontend_conf): the deterministic front end that
this package implements and the tests compare with.
Without torchaudio (no wheel for this CPU torch), funasr computes its fbank with kaldi-native-fbank.

Writes into --out (default tests/references/sensevoice):
  tiny.json: per clip and per request (language, use_itn): the greedy ids (every id, tags included), funasr's raw
    text (with the tags) and its `rich_transcription_postprocess` text, the per-frame maximum log-prob and the
    frame count; funasr's timestamps (output_timestamp=True) for jfk.wav;
  tiny_frames.npz: for the first 1.5 s of jfk.wav: funasr's 80-bin fbank (kaldi.fbank as WavFrontend calls it),
    its LFR + CMVN features (WavFrontend) and the encoder's output (SenseVoiceSmall.encoder, prompts included).
"""

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from speech_clips import clips  # noqa: E402

REQUESTS = [("auto", False), ("en", True), ("en", False), ("zh", False)]
CLIPS = ["jfk.wav", "dev/ls_61-70968-0002.wav", "dev/ls_1089-134691-0001.wav"]
SHORT = 24000  # 1.5 s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", type=Path, default=REPO / "tests" / "models" / "sensevoice" / "tiny")
    ap.add_argument("--out", type=Path, default=REPO / "tests" / "references" / "sensevoice")
    args = ap.parse_args()
    torch.set_num_threads(1)
    import funasr
    from funasr import AutoModel
    from funasr.utils import fbank as kaldi
    from funasr.utils.postprocess_utils import rich_transcription_postprocess

    am = AutoModel(model=str(args.model), device="cpu", disable_update=True, disable_pbar=True, disable_log=True,
                   frontend_conf={"dither": 0.0})
    fe = am.kwargs["frontend"]
    if fe.dither != 0.0:
        raise SystemExit("the frontend_conf dither=0 did not reach funasr's frontend")
    model = am.model
    tok = am.kwargs["tokenizer"]
    captured = {}
    model.encoder.register_forward_hook(lambda m, i, o: captured.__setitem__("enc", o))

    wavs = {name: wav for name, wav, _ in clips()}
    out = {"funasr": funasr.__version__, "torch": torch.__version__, "dither": 0.0, "clips": {}}
    for name in CLIPS:
        rows = []
        for lang, itn in REQUESTS:
            res = am.generate(input=wavs[name], language=lang, use_itn=itn)[0]
            enc, lens = captured["enc"]
            logp = model.ctc.log_softmax(enc)[0, : int(lens[0])]
            best = logp.argmax(-1)
            ids = [int(i) for i in torch.unique_consecutive(best) if int(i) != 0]
            if tok.decode(ids) != res["text"]:
                raise SystemExit(f"{name}: the captured ids do not decode to funasr's text")
            rows.append({"language": lang, "use_itn": itn, "ids": ids, "text": res["text"],
                         "postprocessed": rich_transcription_postprocess(res["text"]),
                         "frames": int(lens[0]), "max_logprob": [round(float(v), 5) for v in logp.max(-1).values]})
        out["clips"][name] = rows
    try:  # funasr's timestamps re-tokenize the text; they fail on some outputs (an IndexError)
        res = am.generate(input=wavs["jfk.wav"], language="auto", use_itn=False, output_timestamp=True)[0]
        out["jfk_timestamps"] = {"words": res.get("words"), "timestamp": res.get("timestamp")}
    except IndexError as e:
        out["jfk_timestamps"] = {"error": f"IndexError: {e}"}

    short = torch.from_numpy(wavs["jfk.wav"][:SHORT].copy())
    fb = kaldi.fbank(short[None] * (1 << 15), num_mel_bins=80, frame_length=25, frame_shift=10, dither=0.0,
                     energy_floor=0.0, window_type="hamming", sample_frequency=16000, snip_edges=True)
    feats, _ = fe(short[None], torch.tensor([SHORT]))
    am.generate(input=wavs["jfk.wav"][:SHORT], language="auto", use_itn=False)
    enc = captured["enc"][0][0]
    args.out.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(args.out / "tiny_frames.npz", fbank=fb.numpy().astype(np.float32),
                        features=feats[0].numpy().astype(np.float32), encoder=enc.detach().numpy().astype(np.float32))
    (args.out / "tiny.json").write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    for name, rows in out["clips"].items():
        for r in rows:
            print(name, r["language"], r["use_itn"], r["text"])


if __name__ == "__main__":
    main()
