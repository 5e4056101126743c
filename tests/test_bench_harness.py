"""benchmarks/side_by_side.py and benchmarks/compact_speed.py: what they compute from the children's figures
(no timing is run here; the figures are made up)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def mods():
    sys.path.insert(0, str(BENCH))
    try:
        import compact_speed
        import side_by_side
        yield side_by_side, compact_speed
    finally:
        sys.path.remove(str(BENCH))


def engine(times, rss, ids, load=1.0):
    return dict(times_s=list(times), audio_s=60.0, peak_rss_mb=rss, token_ids=list(ids), tokens=len(ids), load_s=load)


def test_summarize_takes_the_best_and_the_median_call(mods):
    sbs, _ = mods
    r = sbs.summarize(engine([3.0, 2.0, 6.0], 100, []))
    assert (r["best_s"], r["median_s"], r["rtfx_best"], r["rtfx_median"]) == (2.0, 3.0, 30.0, 20.0)


def test_same_ids_names_the_first_differing_token(mods):
    sbs, _ = mods
    assert sbs.same_ids({"token_ids": [1, 2, 3]}, {"token_ids": [1, 2, 3]}) == "yes"
    assert sbs.same_ids({"token_ids": [1, 2, 3]}, {"token_ids": [1, 5, 3]}) == "no (from token 1)"
    assert sbs.same_ids({"token_ids": [1, 2]}, {"token_ids": [1, 2, 3]}) == "no (from token 2)"


def test_collapse_is_ctc_greedy(mods):
    sbs, _ = mods
    assert sbs.collapse([0, 5, 5, 0, 5, 7, 7, 0], blank=0) == [5, 5, 7]


def test_table_marks_the_reference_in_fp32_and_a_row_without_it(mods):
    sbs, _ = mods
    bench = sbs.Bench(family="X", script=__file__, title=str, ref="hf", ref_label="transformers",
                      ref_python_option="--hf-python", ref_python_default="", ref_setup="", load_ref=None,
                      load_ours=None, ref_runs_fp32=("int8",), load_columns=True)
    h = sbs.summarize(engine([2.0], 200, [1, 2]))
    o = sbs.summarize(engine([1.0], 100, [1, 2]))
    text = sbs.table(bench, [{"precision": "int8", "hf": h, "ours": o, "round_ratio_median": 2.0},
                             {"precision": "bf16", "ours": o}])
    head, _, int8, bf16 = text.splitlines()
    assert "transformers load" in head
    cells = [c.strip() for c in int8.split("|")]
    assert cells[0] == "int8 (transformers fp32)" and cells[3] == "2.00x" and cells[-1] == "yes"
    assert [c.strip() for c in bf16.split("|")][1] == "-"


def test_compact_summary_ratios_and_ids(mods):
    sbs, compact = mods
    ref = {p: sbs.summarize(engine([t], 400, [1, 2, 3])) for p, t in (("fp32", 6.0), ("bf16", 4.0), ("int8", 6.0))}
    ours = {"fp32": sbs.summarize(engine([3.0], 200, [1, 2, 3])),
            "bf16": sbs.summarize(engine([2.5], 220, [1, 9, 3])),
            "int8": sbs.summarize(engine([1.0], 150, [1, 2, 3]))}
    result = dict(family="Moonshine", reference="transformers", ref_impl="hf", complete=True,
                  results=[{"precision": p, "hf": ref[p], "ours": ours[p]} for p in ("fp32", "bf16", "int8")])
    row = compact.summary("moonshine", result)
    # the reference's int8 row is its float32: left out of its RTFx; the best of each side: 15 and 60
    assert row["reference_rtfx"] == {"fp32": 10.0, "bf16": 15.0}
    assert row["best_ratio"] == 4.0
    assert row["peak_rss_ratio"] == 0.5  # fp32: 200 / 400
    assert row["ids_equal"] == {"fp32": "yes", "bf16": "no (from token 1 of 3)", "int8": "yes"}
    assert "clip" not in row["size"]  # no clip length recorded: nothing said about it
    short = compact.summary("kyutai", {**result, "clip_seconds": 10.0, "rounds": 1})
    assert short["size"].endswith("(10 s clip, 1 round(s))")
    table = compact.markdown([row, compact.summary("medasr", None, "failed (exit 2)")])
    lines = table.splitlines()
    assert len(lines) == 4 and "4.00x" in lines[2] and "failed (exit 2)" in lines[3]
