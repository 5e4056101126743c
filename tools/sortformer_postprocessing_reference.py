#!/usr/bin/env python
"""NeMo's Sortformer post-processing (probabilities -> speaker segments) with non-default parameters.

Run from anywhere with the Python of NeMo's virtual environment (tools/setup_nemo_venv.sh), one thread:

    .venv-nemo/bin/python tools/sortformer_postprocessing_reference.py            # writes the reference
    .venv-nemo/bin/python tools/sortformer_postprocessing_reference.py --verify   # regenerates, compares

For every parameter set and every shared mixture (mix1 is the one the brief names; mix0 and mix2 are extra),
on the SHARED tiny model's OFFLINE probabilities (../shared/models/sortformer-tiny/sortformer-tiny.nemo,
restore_from, streaming_mode False), this writes:
  - `segments`: NeMo's diarize() strings with the parameters given as a postprocessing YAML
    (`{"parameters": {...}}`, the file format `load_postprocessing_from_yaml` reads);
  - `raw_segments`: per speaker, the [start, end] pairs `ts_vad_post_processing` returns (float32, before
    diarize()'s round(x, 2) and interval merge), called directly on the same probabilities;
  - `segments_direct`: diarize()'s output rebuilt from `raw_segments` the way `_diarize_output_processing`
    does (round to 2 decimals, `generate_diarization_output_lines`); checked equal to `segments`.
Also `synthetic`: hand-made probability columns (4 speakers, 80 ms frames) that hit the edge cases (a segment
still open at the end, probabilities equal to the thresholds, durations and gaps equal to min_duration_on/off,
padding that makes segments overlap or touch, pad_onset clipped at 0) through `ts_vad_post_processing` and the
same rounding + `generate_diarization_output_lines` that diarize() applies; and `output_lines`: what
`generate_diarization_output_lines` makes of given rounded intervals (touching / overlapping / empty intervals, and
times past 20,000 s, where its float32 and int32 arithmetic shows).
Output: tests/references/sortformer/postprocessing.json.
"""
import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sortformer_nemo_common as C  # noqa: E402

JSON_PATH = os.path.join(C.REFS_OUT, "postprocessing.json")

PARAM_SETS = {
    "default": {},
    "onset06_offset04": dict(onset=0.6, offset=0.4),
    "pad01_02": dict(pad_onset=0.1, pad_offset=0.2),
    "min_on03_off025": dict(min_duration_on=0.3, min_duration_off=0.25),
    "combined": dict(onset=0.6, offset=0.4, pad_onset=0.1, pad_offset=0.2, min_duration_on=0.3,
                     min_duration_off=0.25),
    "aggressive": dict(onset=0.7, offset=0.3, pad_onset=0.05, pad_offset=0.15, min_duration_on=0.5,
                       min_duration_off=0.5),
}


def _col(spec, n):
    """spec: list of (first_frame, last_frame_exclusive, value) on a 0.0 background."""
    v = [0.0] * n
    for a, b, x in spec:
        for i in range(a, b):
            v[i] = x
    return v


SYNTHETIC = {
    # speaker 0 column, speaker 1 column (speakers 2, 3 silent), number of frames, parameters
    "open_at_end": dict(n=20, cols=[[(5, 20, 0.9)], [(18, 20, 0.8)]], params={}),
    "open_at_end_pad": dict(n=20, cols=[[(5, 20, 0.9)], [(0, 3, 0.8)]], params=dict(pad_onset=0.1, pad_offset=0.2)),
    "equal_to_thresholds": dict(n=20, cols=[[(2, 5, 0.5)], [(2, 5, 0.9), (5, 8, 0.5), (8, 12, 0.2)]], params={}),
    "equal_to_thresholds_06_04": dict(n=20, cols=[[(2, 5, 0.6)], [(2, 5, 0.9), (5, 8, 0.4), (8, 12, 0.2)]],
                                      params=dict(onset=0.6, offset=0.4)),
    "min_duration_on_boundary": dict(n=40, cols=[[(5, 9, 0.9), (15, 18, 0.9), (25, 30, 0.9)], [(2, 6, 0.9)]],
                                     params=dict(min_duration_on=0.32)),
    "min_duration_off_boundary": dict(n=40, cols=[[(2, 6, 0.9), (9, 14, 0.9), (18, 22, 0.9), (26, 30, 0.9)], []],
                                      params=dict(min_duration_off=0.24)),
    # durations / gaps exactly equal to the threshold: kept or not depending on float32 rounding of the times
    "min_duration_on_float32": dict(n=30, cols=[[(9, 13, 0.9)], [(0, 4, 0.9)], [(15, 19, 0.9)], [(1, 5, 0.9)]],
                                    params=dict(min_duration_on=0.32)),
    "min_duration_off_float32": dict(n=30, cols=[[(2, 9, 0.9), (13, 20, 0.9)], [(0, 2, 0.9), (6, 10, 0.9)]],
                                     params=dict(min_duration_off=0.32)),
    "pad_touch": dict(n=40, cols=[[(2, 6, 0.9), (7, 12, 0.9)], [(2, 6, 0.9), (8, 12, 0.9)]],
                      params=dict(pad_onset=0.04, pad_offset=0.04)),
    "pad_overlap": dict(n=40, cols=[[(2, 6, 0.9), (8, 12, 0.9)], [(2, 6, 0.9), (9, 12, 0.9)]],
                        params=dict(pad_onset=0.1, pad_offset=0.1)),
    "pad_onset_clipped": dict(n=20, cols=[[(0, 4, 0.9)], [(1, 4, 0.9)]], params=dict(pad_onset=0.25)),
    "short_removed_then_gap_filled": dict(n=50, cols=[[(2, 8, 0.9), (10, 11, 0.9), (13, 20, 0.9)], []],
                                          params=dict(min_duration_on=0.1, min_duration_off=0.5)),
    "one_frame_blips": dict(n=20, cols=[[(3, 4, 0.9), (5, 6, 0.9)], [(19, 20, 0.9)]], params={}),
}


def synthetic(ts_vad_post_processing, generate_diarization_output_lines, pp_from_params):
    import torch

    out = {}
    for name, case in SYNTHETIC.items():
        n = case["n"]
        cols = [_col(c, n) for c in case["cols"]] + [[0.0] * n] * (4 - len(case["cols"]))
        probs = torch.tensor(cols, dtype=torch.float32).T.contiguous()  # [n, 4]
        raw, rounded = [], []
        for spk in range(4):
            ts = ts_vad_post_processing(probs[:, spk], cfg_vad_params=pp_from_params(case["params"]),
                                        unit_10ms_frame_count=8, bypass_postprocessing=False)
            lst = ts.tolist()
            raw.append(lst)
            rounded.append([[round(s, 2), round(e, 2)] for s, e in lst])
        lines = generate_diarization_output_lines(speaker_timestamps=rounded, model_spk_num=4)
        out[name] = dict(params_given=case["params"], n_frames=n, probs=probs.tolist(), raw_segments=raw,
                         segments=lines)
        print("synthetic", name, lines, flush=True)
    return out


OUTPUT_LINE_INPUTS = [  # per-speaker [start, end] lists (already rounded to 2 decimals) -> NeMo's strings
    [[[1.0, 2.0], [2.0, 3.0]]],  # touching: not merged (margin 2 x 1e-5 s)
    [[[1.0, 2.0], [1.99, 3.0]]],  # overlapping: merged
    [[[1.0, 1.0], [4.0, 4.00001]]],  # empty / shorter than 2e-5 s: dropped
    [[[2.5, 3.0], [0.5, 1.0]], [[0.0, 0.3]]],  # unsorted input: sorted per speaker, speakers in index order
    [[[3600.08, 3601.12]], [[7200.56, 7201.6]]],
    [[[20000.08, 20001.12]]],  # float32 in fl2int/int2fl: printed 20001.119
    [[[21474.8, 21474.83]], [[21474.84, 21475.0]]],  # x * 1e5 past 2**31: int32 overflow
    [[[36000.4, 36001.44]]],  # dropped (overflow)
]


def output_line_cases(generate_diarization_output_lines):
    out = []
    for spk_ts in OUTPUT_LINE_INPUTS:
        lines = generate_diarization_output_lines(speaker_timestamps=[list(map(list, t)) for t in spk_ts],
                                                  model_spk_num=len(spk_ts))
        out.append(dict(speaker_timestamps=spk_ts, lines=lines))
        print("lines", spk_ts, lines, flush=True)
    return out


def generate():
    import torch
    import yaml

    torch.set_num_threads(1)
    from nemo.collections.asr.models import SortformerEncLabelModel
    from nemo.collections.asr.parts.utils.speaker_utils import generate_diarization_output_lines
    from nemo.collections.asr.parts.utils.vad_utils import load_postprocessing_from_yaml, ts_vad_post_processing

    model = SortformerEncLabelModel.restore_from(C.SHARED_NEMO, map_location="cpu")
    model.eval()
    res = {}
    with tempfile.TemporaryDirectory() as td:
        for name, params in PARAM_SETS.items():
            ypath = os.path.join(td, f"{name}.yaml")
            with open(ypath, "w") as f:
                yaml.safe_dump({"parameters": params}, f)
            pp = load_postprocessing_from_yaml(ypath)
            full = {k: float(pp[k]) for k in ["onset", "offset", "pad_onset", "pad_offset", "min_duration_on",
                                               "min_duration_off"]}
            per_mix = {}
            for mix in C.MIXES:
                wav = os.path.join(C.SHARED_TINY, f"{mix}.wav")
                segs, probs = C.run_diarize(model, wav, "offline", postprocessing_yaml=ypath)
                raw, rounded = [], []
                for spk in range(probs.shape[1]):
                    ts = ts_vad_post_processing(probs[:, spk], cfg_vad_params=load_postprocessing_from_yaml(ypath),
                                                unit_10ms_frame_count=8, bypass_postprocessing=False)
                    lst = ts.tolist()
                    raw.append(lst)
                    rounded.append([[round(s, 2), round(e, 2)] for s, e in lst])
                direct = generate_diarization_output_lines(speaker_timestamps=rounded, model_spk_num=len(rounded))
                assert direct == segs, (name, mix, direct, segs)
                per_mix[mix] = dict(n_frames=int(probs.shape[0]), segments=segs, raw_segments=raw,
                                    segments_direct_equal=direct == segs)
                print(name, mix, segs, flush=True)
            res[name] = dict(params_given=params, params=full, mixtures=per_mix)

        def pp_from_params(params):
            ypath = os.path.join(td, "synthetic.yaml")
            with open(ypath, "w") as f:
                yaml.safe_dump({"parameters": params}, f)
            return load_postprocessing_from_yaml(ypath)

        syn = synthetic(ts_vad_post_processing, generate_diarization_output_lines, pp_from_params)
    return res, syn, output_line_cases(generate_diarization_output_lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--verify", action="store_true")
    args = ap.parse_args()
    res, syn, lines = generate()
    if args.verify:
        saved = json.load(open(JSON_PATH))
        ok = saved["param_sets"] == json.loads(json.dumps(res)) and saved["synthetic"] == json.loads(json.dumps(syn))
        ok = ok and saved["output_lines"] == json.loads(json.dumps(lines))
        print("VERIFY", "OK" if ok else "DIFFERENT", flush=True)
        sys.exit(0 if ok else 1)
    out = dict(
        made_by=f"tools/sortformer_postprocessing_reference.py ({C.versions()}, CPU, 1 thread)",
        model=C.rel(C.SHARED_NEMO), audio_dir=C.rel(C.SHARED_TINY),
        probabilities=("offline (streaming_mode False) diarize() probabilities, equal to the shared "
                       "references.json mixtures.<mix>.offline.probs / sortformer-tiny_refs.safetensors "
                       "<mix>.offline.probs"),
        call=("segments = model.diarize(audio=[wav], batch_size=1, include_tensor_outputs=True, verbose=False, "
              "num_workers=0, postprocessing_yaml=<yaml {'parameters': params_given}>)[0][0]; raw_segments[k] = "
              "ts_vad_post_processing(probs[:, k], load_postprocessing_from_yaml(yaml), unit_10ms_frame_count=8)"),
        param_sets=res,
        synthetic=syn,
        output_lines=lines,
    )
    os.makedirs(C.REFS_OUT, exist_ok=True)
    json.dump(out, open(JSON_PATH, "w"), indent=1)
    print("wrote", JSON_PATH, flush=True)


if __name__ == "__main__":
    main()
