#!/usr/bin/env python
"""NeMo's streaming Sortformer outputs on the SHARED tiny model with other streaming shapes (no training).

Run from anywhere with the Python of NeMo's virtual environment (tools/setup_nemo_venv.sh), one thread:

    .venv-nemo/bin/python tools/sortformer_streaming_shapes.py            # writes the references
    .venv-nemo/bin/python tools/sortformer_streaming_shapes.py --verify   # regenerates, compares, VERIFY OK

The model is ../shared/models/sortformer-tiny/sortformer-tiny.nemo (restore_from), its streaming parameters
changed on `model.sortformer_modules` after loading (then `_check_streaming_parameters()` is called, as NeMo's
__init__ does for streaming models). For every case and input, NeMo's diarize() runs in synchronous
(`streaming_update`) and asynchronous (`streaming_update_async`) mode; a wrapper around
`forward_streaming_step` records one trace entry per chunk.

Cases (shared model's parameters: spkcache_len 24, fifo_len 8, chunk_len 12, spkcache_update_period 10,
chunk_left_context 1, chunk_right_context 2, spkcache_sil_frames_per_spk 3):
  lc0_rc0        chunk_left_context 0, chunk_right_context 0                                      (mix0-2)
  fifo0_period20 fifo_len 0, spkcache_update_period 20 (> chunk_len; NeMo warns, effective 12)    (mix0-2)
  fifo16_period18 fifo_len 16, spkcache_update_period 18 (> chunk_len, < fifo_len + chunk_len: the FIFO pops
                 18 frames at a time and keeps frames between pops)                              (mix0-2)
  long           shared parameters, input long_mix0120.wav = mix0 + mix1 + mix2 + mix0           (also offline)
  short_tail     shared parameters, inputs mix0_cut<N> = the first N int16 samples of mix0.wav, N = 169120,
                 169760, 170880 (1057, 1061, 1068 mel frames: last chunk 1, 5, 12 mel frames)   (also offline)

Writes tests/references/sortformer/streaming_shapes.json, streaming_shapes.safetensors and long_mix0120.wav
(the 16-bit samples of the four shared WAVs concatenated, nothing between them; the mix0_cut<N> inputs are only
written to a temporary folder).
"""
import argparse
import hashlib
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sortformer_nemo_common as C  # noqa: E402

JSON_PATH = os.path.join(C.REFS_OUT, "streaming_shapes.json")
ST_PATH = os.path.join(C.REFS_OUT, "streaming_shapes.safetensors")
LONG_WAV = os.path.join(C.REFS_OUT, "long_mix0120.wav")
LONG_PARTS = ["mix0", "mix1", "mix2", "mix0"]

CASES = {
    "lc0_rc0": dict(params=dict(chunk_left_context=0, chunk_right_context=0), inputs=C.MIXES,
                    modes=["streaming_sync", "streaming_async"]),
    "fifo0_period20": dict(params=dict(fifo_len=0, spkcache_update_period=20), inputs=C.MIXES,
                           modes=["streaming_sync", "streaming_async"]),
    "fifo16_period18": dict(params=dict(fifo_len=16, spkcache_update_period=18), inputs=C.MIXES,
                     modes=["streaming_sync", "streaming_async"]),
    "long": dict(params={}, inputs=["long_mix0120"], modes=["offline", "streaming_sync", "streaming_async"]),
    # mix0 cut to N samples (N // 160 mel frames = 1056 + r): the last chunk has r < 16 mel frames, so the
    # chunk before it gets a partial right context of r mel frames (rc = ceil(r / 8))
    "short_tail": dict(params={}, inputs=["mix0_cut169120", "mix0_cut169760", "mix0_cut170880"],
                       modes=["offline", "streaming_sync", "streaming_async"]),
}
TMP = {}


def long_samples():
    import numpy as np
    import soundfile as sf

    parts = []
    for m in LONG_PARTS:
        x, sr = sf.read(os.path.join(C.SHARED_TINY, f"{m}.wav"), dtype="int16")
        assert sr == 16000 and x.ndim == 1
        parts.append(x)
    return np.concatenate(parts), [len(p) for p in parts]


def write_long():
    import soundfile as sf

    y, lens = long_samples()
    sf.write(LONG_WAV, y, 16000, subtype="PCM_16")
    return dict(file=os.path.basename(LONG_WAV), parts=[f"{m}.wav" for m in LONG_PARTS], part_samples=lens,
                n_samples=int(len(y)), duration_sec=len(y) / 16000,
                pcm16_sha256=hashlib.sha256(y.tobytes()).hexdigest(),
                recipe=("int16 samples of ../shared/models/sortformer-tiny/{mix0,mix1,mix2,mix0}.wav concatenated "
                        "in that order with nothing between them, written as 16 kHz mono PCM_16 WAV"))


def wav_for(name):
    if name == "long_mix0120":
        return LONG_WAV
    if name.startswith("mix0_cut"):
        import soundfile as sf

        n = int(name[len("mix0_cut"):])
        path = os.path.join(TMP["dir"], f"{name}.wav")
        if not os.path.exists(path):
            x, sr = sf.read(os.path.join(C.SHARED_TINY, "mix0.wav"), dtype="int16")
            sf.write(path, x[:n], 16000, subtype="PCM_16")
        return path
    return os.path.join(C.SHARED_TINY, f"{name}.wav")


def generate():
    import tempfile

    import torch

    td = tempfile.TemporaryDirectory()
    TMP["dir"] = td.name

    torch.set_num_threads(1)
    from nemo.collections.asr.models import SortformerEncLabelModel

    res, tensors = {}, {}
    for case, spec in CASES.items():
        model = SortformerEncLabelModel.restore_from(C.SHARED_NEMO, map_location="cpu")
        model.eval()
        for k, v in spec["params"].items():
            setattr(model.sortformer_modules, k, v)
        model.sortformer_modules._check_streaming_parameters()
        tracer = C.Tracer(model)
        out = {"changed": spec["params"], "streaming_params": C.streaming_params(model), "inputs": {}}
        for name in spec["inputs"]:
            per = {}
            for mode in spec["modes"]:
                segs, p = C.run_diarize(model, wav_for(name), mode, tracer=tracer)
                per[mode] = dict(n_frames=int(p.shape[0]), segments=segs, probs=C.probs_json(p))
                tensors[f"{case}.{name}.{mode}.probs"] = p
                if mode != "offline":
                    per[mode]["trace"] = list(tracer.trace)
                    per[mode]["n_chunks"] = len(tracer.trace)
                    per[mode]["n_compressions"] = sum(
                        _compressed(e, model.sortformer_modules.spkcache_len) for e in tracer.trace)
                    if name == spec["inputs"][0]:
                        tensors.update(C.state_tensors(tracer.last_state, f"{case}.{name}.{mode}.final_state"))
                print(case, name, mode, p.shape[0], len(segs), flush=True)
            out["inputs"][name] = per
        tracer.restore()
        res[case] = out
    return res, {k: t.contiguous() for k, t in tensors.items()}


def _compressed(e, spkcache_len):
    """A chunk whose update compressed the cache: the cache would have exceeded spkcache_len (after == len)."""
    before = e["spkcache_len_before"]
    after = e["spkcache_len_after"]
    fifo_b, fifo_a = e["fifo_len_before"], e["fifo_len_after"]
    if isinstance(before, list):
        before, after, fifo_b, fifo_a = before[0], after[0], fifo_b[0], fifo_a[0]
    popped = fifo_b + e["new_pred_frames"] - fifo_a
    return before + popped > spkcache_len


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--verify", action="store_true")
    args = ap.parse_args()
    os.makedirs(C.REFS_OUT, exist_ok=True)
    if args.verify:
        import torch
        from safetensors.torch import load_file

        y, _ = long_samples()
        saved = json.load(open(JSON_PATH))
        errs = []
        if hashlib.sha256(y.tobytes()).hexdigest() != saved["long_input"]["pcm16_sha256"]:
            errs.append("long input recipe gives other samples")
        import soundfile as sf

        if not (sf.read(LONG_WAV, dtype="int16")[0] == y).all():
            errs.append("long_mix0120.wav differs from the recipe")
        res, tensors = generate()
        for case, out in res.items():
            for name, per in out["inputs"].items():
                for mode, r in per.items():
                    s = saved["cases"][case]["inputs"][name][mode]
                    for k in ["segments", "n_frames", "trace"]:
                        if r.get(k) != s.get(k):
                            errs.append(f"{case}.{name}.{mode}.{k} differs")
        st = load_file(ST_PATH)
        for k, t in tensors.items():
            if not torch.equal(st[k], t):
                errs.append(f"{k}: max diff {float((st[k].double() - t.double()).abs().max())}")
        print("VERIFY", "OK" if not errs else errs, flush=True)
        sys.exit(1 if errs else 0)
    long_meta = write_long()
    res, tensors = generate()
    from safetensors.torch import save_file

    out = dict(
        made_by=f"tools/sortformer_streaming_shapes.py ({C.versions()}, CPU, 1 thread)",
        model=C.rel(C.SHARED_NEMO), audio_dir=C.rel(C.SHARED_TINY), long_input=long_meta,
        call=("model = SortformerEncLabelModel.restore_from(nemo, map_location='cpu'); model.eval(); "
              "setattr(model.sortformer_modules, k, v) for the case; model.sortformer_modules."
              "_check_streaming_parameters(); model.streaming_mode = mode != 'offline'; "
              "model.async_streaming = mode == 'streaming_async'; segments, probs = model.diarize(audio=[wav], "
              "batch_size=1, include_tensor_outputs=True, verbose=False, num_workers=0)"),
        cases=res,
    )
    json.dump(out, open(JSON_PATH, "w"), indent=1)
    save_file(tensors, ST_PATH)
    print("wrote", JSON_PATH, ST_PATH, LONG_WAV, flush=True)


if __name__ == "__main__":
    main()
