"""Batch jobs (`transcribe batch`, `transcribe.batch`): inputs, results.jsonl, resume after kill -9,
failures, cutting long inputs at pauses, local worker processes and Ray Data."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

import transcribe
from transcribe.jobs import inputs as jin
from transcribe.jobs.job import Assembler, Results, plan
from transcribe.jobs.work import GRANULE_S, Options, Worker, cut_points, join

HERE = Path(__file__).resolve().parent
SHARED = HERE.parent.parent / "shared"
DEV = SHARED / "audio" / "dev"
JFK = SHARED / "audio" / "jfk.wav"
TINY = SHARED / "models" / "parakeet-tiny" / "tiny-tdt-fit.nemo"

pytestmark = pytest.mark.skipif(not DEV.is_dir() or not TINY.is_file(), reason="needs ../shared (audio and models)")


def _cli(*args, timeout=600, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "transcribe", "batch", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, **kw)


def _lines(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def _texts(out: Path) -> dict:
    return {d["id"]: json.loads((out / d["outputs"][0]).read_text())["text"] for d in _lines(out)
            if d["status"] == "ok"}


# ------------------------------------------------------------------------------------------ inputs

def test_inputs_from_directories_globs_files_and_manifests(tmp_path):
    (tmp_path / "a" / "deep").mkdir(parents=True)
    for rel in ("a/x.wav", "a/deep/y.flac", "a/notes.txt", "b.wav", "c/x.wav"):
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"")
    items = jin.collect([str(tmp_path / "a"), str(tmp_path / "b.wav"), str(tmp_path / "c" / "*.wav")])
    assert [it.id for it in items] == ["deep/y", "x", "b", "x-2"]  # the directory's relative paths; clashes numbered
    assert all(it.path.endswith((".wav", ".flac")) for it in items)  # notes.txt is not audio
    assert all(it.manifest is None for it in items)  # no manifest: nothing carried

    man = tmp_path / "m.jsonl"
    man.write_text('{"audio": "b.wav", "id": "first", "speaker": "s1", "duration": 9}\n\n'
                   '{"audio": "a/x.wav", "lang": "en"}\n')
    items = jin.collect([], str(man))
    assert [(it.id, it.audio, it.manifest) for it in items] == [("first", "b.wav", {"speaker": "s1", "duration": 9}),
                                                             ("x", "a/x.wav", {"lang": "en"})]
    assert items[0].path == str(tmp_path / "b.wav")  # relative to the manifest's folder


@pytest.mark.parametrize("text, message", [
    ('{"audio": "a.wav"}\nnot json\n', "m.jsonl:2: not a JSON object"),
    ('{"id": "a"}\n', 'needs "audio"'),
    ('{"audio": "a.wav", "id": "k"}\n{"audio": "b.wav", "id": "k"}\n', "same id"),
    ('{"audio": "a.wav", "id": "../up"}\n', "below the output folder"),
    ('\n', "no lines"),
])
def test_bad_manifests_are_refused_before_any_work(tmp_path, text, message):
    man = tmp_path / "m.jsonl"
    man.write_text(text)
    with pytest.raises(jin.JobError, match=message.replace("(", r"\(")):
        jin.collect([], str(man))


def test_missing_inputs_are_refused(tmp_path):
    with pytest.raises(jin.JobError, match="no such file"):
        jin.collect([str(tmp_path / "nope.wav")])
    with pytest.raises(jin.JobError, match="no file matches"):
        jin.collect([str(tmp_path / "*.flac")])
    (tmp_path / "empty").mkdir()
    with pytest.raises(jin.JobError, match="no audio files"):
        jin.collect([str(tmp_path / "empty")])


def test_durations_come_from_headers_and_order_the_work(tmp_path):
    for name, seconds in (("s.wav", 1.0), ("l.wav", 3.0), ("m.flac", 2.0)):
        sf.write(tmp_path / name, np.zeros(int(seconds * 16000), np.float32), 16000)
    (tmp_path / "bad.wav").write_bytes(b"RIFF....not really")
    items = jin.collect([str(tmp_path)])
    jin.probe(items)
    got = {it.id: it.duration for it in items}
    assert got == {"bad": None, "l": 3.0, "m": 2.0, "s": 1.0}
    long, groups = plan(items, piece_s=2.5, group=2)
    assert [it.id for it in long] == ["l"]  # longer than the pieces: split first
    assert [[it.id for it in g] for g in groups] == [["m", "s"], ["bad"]]  # longest first, unknown last


# ------------------------------------------------------------------------------- cuts and joins

def test_cuts_fall_on_the_grid_in_pauses_and_cover_everything():
    rate = 16000
    rng = np.random.default_rng(0)
    speech = [(0.1 * rng.standard_normal(int(s * rate))).astype(np.float32) for s in (8.0, 9.0, 7.0)]
    gap = np.zeros(rate, np.float32)
    x = np.concatenate([speech[0], gap, speech[1], gap, speech[2]])
    spans = cut_points(x, rate, 12.0, "energy")
    assert spans[0][0] == 0 and spans[-1][1] == len(x)
    assert all(a == b for (_, a), (b, _) in zip(spans[:-1], spans[1:]))  # contiguous
    grain = int(GRANULE_S * rate)
    for a, _ in spans[1:]:
        assert a % grain == 0
        assert not np.any(x[a - 100:a + 100])  # inside a gap: silence on both sides of the cut
    assert all((b - a) <= 12.0 * rate for a, b in spans)
    assert cut_points(x, rate, 0, "energy") == [(0, len(x))]  # 0: never cut


def test_join_places_pieces_at_their_starts():
    a = transcribe.Transcript(text="hello there", duration=2.0, model="m",
                              words=[transcribe.Word("hello", 0.1, 0.5), transcribe.Word("there", 0.6, 1.0)],
                              segments=[transcribe.Segment("hello there", 0.1, 1.0)],
                              tokens=[transcribe.Token(5, " hello", 0.08, 0.48, frame=1, duration_frames=5)])
    b = transcribe.Transcript(text="again", duration=1.0, words=[transcribe.Word("again", 0.2, 0.6)],
                              tokens=[transcribe.Token(6, " again", 0.16, 0.56, frame=2, duration_frames=5)])
    d = join([a.to_dict(), b.to_dict()], [0, 32000], 48000, 16000, frame_s=0.08)
    t = transcribe.Transcript.from_dict(d)
    assert t.text == "hello there again" and t.duration == 3.0 and t.model == "m"
    assert [(w.word, w.start, w.end) for w in t.words] == [("hello", 0.1, 0.5), ("there", 0.6, 1.0),
                                                           ("again", 2.2, 2.6)]
    assert [(k.frame, k.start) for k in t.tokens] == [(1, 0.08), (27, 2.16)]  # 2 s = 25 frames of 80 ms


def test_a_piece_that_failed_fails_its_input():
    asm = Assembler()
    ok = {"index": 4, "pieces": 2, "piece": 0, "start": 0, "end": 16000, "rate": 16000,
          "result": transcribe.Transcript("a", 1.0).to_dict()}
    assert asm.add(ok) is None
    index, result, error, _, _ = asm.add(dict(ok, piece=1, start=16000, end=32000, result=None, error="boom"))
    assert index == 4 and result is None and error == "piece 2/2 (1.00-2.00 s): boom"


def test_a_long_parakeet_input_is_cut_in_silence_and_each_piece_is_its_own_transcript():
    """The tiny model is fit to jfk.wav alone: any other audio, jfk.wav with silence added
    included, gives it other words, so "the same words as the unsplit file" cannot be asked of it
    (test_split_equals_unsplit_on_a_real_parakeet does, with real weights). Here: the cut lies in the
    gap, and the joined transcript is exactly the pieces' own transcripts placed at their starts."""
    w = Worker(Options(model=str(TINY), piece_s=12.0, detector="energy"))
    jfk = transcribe.load_audio(str(JFK))
    x = np.concatenate([jfk, np.zeros(16000, np.float32), jfk])
    spans = w.cuts(x)
    assert len(spans) == 2
    cut = spans[1][0]
    assert len(jfk) < cut < len(jfk) + 16000  # in the added second of silence
    d, err, _ = w.transcribe_whole(x, spans)
    assert err is None
    alone = [w.model.transcribe(x[a:b]) for a, b in spans]
    want = [(wd.word, wd.start + a / 16000) for t, (a, _) in zip(alone, spans) for wd in t.words]
    assert [wd["word"] for wd in d["words"]] == [x for x, _ in want]
    np.testing.assert_allclose([wd["start"] for wd in d["words"]], [s for _, s in want], atol=1e-6)
    frames = [t["frame"] for t in d["tokens"]]
    assert frames == sorted(frames) and frames[-1] < len(x) / 16000 / w.frame_s
    assert d["text"] == " ".join(t.text for t in alone)


def test_split_equals_unsplit_on_a_real_parakeet(tmp_path):
    """With real weights: a 4-clip file with 2 s of silence between the clips, cut at 30 s, gives the
    unsplit transcription's words, each within 0.1 s. Needs a real Parakeet model:
    TRANSCRIBE_TEST_PARAKEET=path/to/parakeet.nemo (none can be downloaded here)."""
    model = os.environ.get("TRANSCRIBE_TEST_PARAKEET")
    if not model:
        pytest.skip("needs a real Parakeet model: set TRANSCRIBE_TEST_PARAKEET to a .nemo file or hub id")
    man = [json.loads(line) for line in (DEV / "manifest.jsonl").read_text().splitlines()]
    clips = [d for d in man if d["audio"].startswith("ls_") and "8k" not in d["audio"] and 5 < d["duration"] < 20][:4]
    gap = np.zeros(32000, np.float32)
    x = np.concatenate([p for c in clips for p in (transcribe.load_audio(str(DEV / c["audio"])), gap)][:-1])
    w = Worker(Options(model=model, piece_s=30.0))
    assert len(w.cuts(x)) >= 2
    whole = w.model.transcribe(x)
    d, err, _ = w.transcribe_whole(x)
    assert err is None
    assert [wd["word"] for wd in d["words"]] == [wd.word for wd in whole.words]
    np.testing.assert_allclose([wd["start"] for wd in d["words"]], [wd.start for wd in whole.words], atol=0.1)
    np.testing.assert_allclose([wd["end"] for wd in d["words"]], [wd.end for wd in whole.words], atol=0.1)


# ----------------------------------------------------------------------------------- whole jobs

def _long_file(tmp_path) -> Path:
    jfk = transcribe.load_audio(str(JFK))
    x = np.concatenate([jfk, np.zeros(16000, np.float32), jfk, np.zeros(16000, np.float32), jfk])
    path = tmp_path / "long.wav"
    sf.write(path, x, 16000)
    return path


def test_long_inputs_give_the_same_result_in_one_process_and_spread_over_workers(tmp_path):
    """Two workers: the long file is cut by one, its pieces run on both, and the join equals the
    one-process job's (where the pieces run in one call)."""
    path = _long_file(tmp_path)
    short = tmp_path / "jfk.wav"
    short.write_bytes(JFK.read_bytes())
    one = transcribe.batch([str(path), str(short)], str(tmp_path / "one"), model=str(TINY), workers=1,
                           piece_s=12.0, detector="energy")
    two = transcribe.batch([str(path), str(short)], str(tmp_path / "two"), model=str(TINY), workers=2,
                           threads=1, piece_s=12.0, detector="energy")
    assert (one.ok, one.failed, two.ok, two.failed) == (2, 0, 2, 0)
    a = json.loads((tmp_path / "one" / "long.json").read_text())
    b = json.loads((tmp_path / "two" / "long.json").read_text())
    assert a["text"] == b["text"] and a["duration"] == b["duration"] == 35.0
    assert [w["word"] for w in a["words"]] == [w["word"] for w in b["words"]]
    np.testing.assert_allclose([w["start"] for w in a["words"]], [w["start"] for w in b["words"]], atol=1e-6)
    assert not (tmp_path / "two" / ".transcribe-work").exists()  # the decoded audio saved for the pieces is gone


def test_a_corrupt_file_is_recorded_and_the_others_succeed(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    good = sorted(DEV.glob("ls_*.wav"))[:2]
    for g in good:
        (src / g.name).write_bytes(g.read_bytes())
    (src / "broken.wav").write_bytes(b"RIFF\x10\x00\x00\x00WAVEfmt garbage that is not audio" * 3)
    (src / "notes.mp3").write_text("just some text, not an mp3\n" * 20)
    out = tmp_path / "out"
    r = _cli(src, "-o", out, "--model", TINY, "-f", "json,txt", "--workers", "1")
    assert r.returncode == 3, r.stderr  # 3: the job ran to its end, some inputs failed
    lines = {d["id"]: d for d in _lines(out)}
    assert sorted(lines) == sorted(["broken", "notes"] + [g.stem for g in good])
    for bad in ("broken", "notes"):
        assert lines[bad]["status"] == "error" and lines[bad]["outputs"] == []
        assert lines[bad]["error"] and f"{bad}." in lines[bad]["error"]  # the reason names the file
        assert f"error: {bad}:" in r.stderr
    for g in good:
        d = lines[g.stem]
        assert d["status"] == "ok" and d["error"] is None and d["outputs"] == [f"{g.stem}.json", f"{g.stem}.txt"]
        assert json.loads((out / d["outputs"][0]).read_text())["duration"] == pytest.approx(d["duration"], abs=1e-3)
    assert "2 ok, 2 failed" in r.stderr
    # Run again with --resume: only the failed are retried (and fail again); the good lines stay.
    r2 = _cli(src, "-o", out, "--model", TINY, "-f", "json,txt", "--resume")
    assert r2.returncode == 3 and "2 ok, 2 failed, 2 already done" not in r2.stderr
    assert "0 ok, 2 failed, 2 already done" in r2.stderr
    assert sorted(d["id"] for d in _lines(out)) == sorted(lines)


def test_usage_errors_exit_2_before_any_work(tmp_path):
    out = tmp_path / "out"
    assert _cli(tmp_path / "missing.wav", "-o", out).returncode == 2
    r = _cli(JFK, "-o", out, "--format", "json,doc")
    assert r.returncode == 2 and "--format" in r.stderr
    r = _cli(JFK, "-o", out, "--workers", "64", "--threads", "64")
    assert r.returncode == 2 and "cores" in r.stderr
    r = _cli(JFK, "-o", out, "--model", tmp_path)  # a folder that holds no model
    assert r.returncode == 2 and "error:" in r.stderr
    assert not (out / "results.jsonl").exists() or (out / "results.jsonl").read_text() == ""
    assert _cli("--help").returncode == 0


def test_a_finished_job_is_not_overwritten_without_resume(tmp_path):
    out = tmp_path / "out"
    r = _cli(JFK, "-o", out, "--model", TINY)
    assert r.returncode == 0, r.stderr
    r = _cli(JFK, "-o", out, "--model", TINY)
    assert r.returncode == 2 and "--resume" in r.stderr
    r = _cli(JFK, "-o", out, "--model", TINY, "--resume")
    assert r.returncode == 0 and "0 ok, 0 failed, 1 already done" in r.stderr
    assert len(_lines(out)) == 1


def test_resume_after_kill_9_gives_every_result_once(tmp_path):
    """A job killed (SIGKILL) part-way, then resumed: every input has exactly one ok line, every
    output file is whole, the lines written before the kill are kept as they were."""
    clips = sorted(DEV.glob("*.wav"))[:20]
    man = tmp_path / "m.jsonl"
    man.write_text("".join(json.dumps({"audio": str(c), "id": f"r{k}/{c.stem}", "k": k}) + "\n"
                           for k in range(3) for c in clips))
    out = tmp_path / "out"
    args = [sys.executable, "-m", "transcribe", "batch", "--manifest", str(man), "-o", str(out), "--model",
            str(TINY), "-f", "json,srt", "--batch-size", "1", "--workers", "1", "-q"]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    results = out / "results.jsonl"
    t0 = time.monotonic()
    try:
        while time.monotonic() - t0 < 300:
            if results.exists() and results.read_text().count("\n") >= 6:
                break
            if proc.poll() is not None:
                pytest.fail(f"the job ended before it could be killed: {proc.stderr.read().decode()}")
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    before = [line for line in results.read_text().split("\n") if line]
    assert 6 <= len(before) < 60
    kept = [json.loads(line) for line in before[:-1]]  # the last may be cut short by the kill
    r = _cli("--manifest", man, "-o", out, "--model", TINY, "-f", "json,srt", "--resume")
    assert r.returncode == 0, r.stderr
    lines = _lines(out)
    ids = [d["id"] for d in lines]
    assert len(ids) == len(set(ids)) == 60
    assert all(d["status"] == "ok" for d in lines)
    assert all(d in lines for d in kept)  # not run again
    assert {d["manifest"]["k"] for d in lines} == {0, 1, 2}  # the manifest's fields carried
    for d in lines:
        for o in d["outputs"]:
            text = (out / o).read_text()
            if o.endswith(".json"):
                assert json.loads(text)["duration"] == pytest.approx(d["duration"], abs=1e-3)
            else:
                assert text == "" or text.rstrip().split("\n")[-1].strip()  # whole, not cut
    left = [p for p in out.rglob("*") if p.name.endswith(".tmp") or p.name == ".transcribe-work"]
    assert left == []


def test_a_killed_jobs_half_written_files_are_removed(tmp_path):
    """A job killed while writing an output leaves its temporary (`.<name>.<pid>.tmp`); the next job in
    the folder (which holds its lock) removes it, and leaves other files alone. (The kill -9 test above
    hits this only when the kill lands inside a write.)"""
    out = tmp_path / "out"
    (out / "sub").mkdir(parents=True)
    stale = [out / ".a.json.4242.tmp", out / "sub" / ".b.srt.17.tmp", out / ".results.jsonl.99.tmp"]
    keep = [out / "notes.tmp", out / ".hidden", out / "sub" / "c.json"]
    for p in stale + keep:
        p.write_text("x")
    s = transcribe.batch([str(SHARED / "audio" / "jfk.wav")], out, model=str(TINY), workers=1)
    assert s.ok == 1
    assert [p for p in stale if p.exists()] == [] and all(p.exists() for p in keep)


def test_results_log_drops_a_line_cut_short(tmp_path):
    ok = {"id": "a", "audio": "a.wav", "status": "ok", "outputs": []}
    bad = {"id": "b", "audio": "b.wav", "status": "error", "error": "x", "outputs": []}
    (tmp_path / "results.jsonl").write_text(json.dumps(ok) + "\n" + json.dumps(bad) + '\n{"id": "c", "sta')
    r = Results(tmp_path, resume=True)
    assert sorted(r.done) == ["a"]  # the failed input runs again; the cut line is no line
    r.keep(set(r.done))
    r.append({"id": "c", "status": "ok"})
    r.close()
    assert [json.loads(x)["id"] for x in (tmp_path / "results.jsonl").read_text().splitlines()] == ["a", "c"]


# ------------------------------------------------------------------------- same texts everywhere

# Four short dev clips of four sources (2-3.6 s, different texts): two per worker or Ray actor, so
# a text landing under another input's name, or a worker's one thread changing a text, shows.
SAME_TEXT_CLIPS = ["cv_17767698", "ls_61-70968-0002", "librivox_sns_0930", "ds_new_home_in_the_stars"]


def test_ray_and_local_workers_give_the_single_process_texts(tmp_path):
    """Four dev clips (a folder of them) with the default model: one process transcribing one file
    at a time, a job with two local worker processes (the command), and a job on a local Ray
    instance with 2 CPUs give the same texts, exactly."""
    ray = pytest.importorskip("ray", reason="needs Ray: pip install 'transcribe[ray]'")
    folder = tmp_path / "in"
    folder.mkdir()
    for stem in SAME_TEXT_CLIPS:
        (folder / f"{stem}.wav").write_bytes((DEV / f"{stem}.wav").read_bytes())
    clips = sorted(folder.glob("*.wav"))
    model = transcribe.load_model()
    single = {c.stem: model.transcribe(str(c)).text for c in clips}
    del model
    assert len(set(single.values())) == len(clips)  # four different texts: a mix-up cannot hide
    r = _cli(folder, "-o", tmp_path / "local", "--workers", "2", "--threads", "1")
    assert r.returncode == 0, r.stderr
    assert _texts(tmp_path / "local") == single
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        s = transcribe.batch([str(folder)], str(tmp_path / "ray"), ray="local", threads=1)
        with pytest.raises(jin.JobError, match="needs a node with as many CPUs"):  # it would wait forever
            transcribe.batch([str(JFK)], str(tmp_path / "ray3"), ray="local", threads=3)
    finally:
        ray.shutdown()
    assert (s.ok, s.failed, s.mode, s.workers) == (len(clips), 0, "ray", 2)
    assert _texts(tmp_path / "ray") == single


def test_the_progress_line_says_files_hours_speed_and_eta():
    import io

    from transcribe.jobs.progress import Progress
    from transcribe.jobs.runner import total_audio

    items = [jin.Item(i, str(i), "a.wav", "a.wav", duration=900.0) for i in range(4)]  # an hour in all
    out = io.StringIO()
    p = Progress(len(items), total_audio(items), enabled=True, stream=out)
    p.t0 -= 100.0  # 100 s in
    p.update(1, 900.0)
    p.close()
    line = p.line()
    assert "1/4 files" in line and "0.25/1.00 h audio" in line
    speed = float(line.split("h audio")[1].split("x")[0])
    assert 8.5 < speed <= 9.0  # 900 s of audio in a little over 100 s
    eta = line.split("ETA ")[1]
    h, m, s = map(int, eta.split(":"))
    assert 290 <= h * 3600 + m * 60 + s <= 300  # 2700 s left at 9x
    assert "\r" in out.getvalue()


def test_nbest_needs_whole_inputs(tmp_path):
    with pytest.raises(jin.JobError, match="piece_s=0"):
        transcribe.batch([str(JFK)], str(tmp_path / "o"), model=str(TINY), beam_size=2, nbest=2)


def test_resume_makes_a_format_asked_for_later_and_keeps_one_line_an_input(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    for g in sorted(DEV.glob("ls_*.wav"))[:2]:
        (src / g.name).write_bytes(g.read_bytes())
    out = tmp_path / "out"
    first = transcribe.batch([str(src)], str(out), model=str(TINY), workers=1)
    assert first.ok == 2
    again = transcribe.batch([str(src)], str(out), model=str(TINY), workers=1, formats=["json", "vtt"], resume=True)
    assert (again.ok, again.skipped) == (2, 0)  # the vtt files were missing: both made again
    assert sorted(p.name for p in out.iterdir() if p.suffix == ".vtt") == sorted(p.stem + ".vtt" for p in src.iterdir())
    lines = _lines(out)
    assert len(lines) == 2 and all(d["outputs"][1].endswith(".vtt") for d in lines)
    last = transcribe.batch([str(src)], str(out), model=str(TINY), workers=1, formats=["json", "vtt"], resume=True)
    assert (last.ok, last.skipped) == (0, 2) and len(_lines(out)) == 2


def test_a_single_file_gets_one_worker_with_every_core(tmp_path, monkeypatch):
    from transcribe.jobs import runner

    monkeypatch.setattr(runner, "cores", lambda: 2)
    s = transcribe.batch([str(JFK)], str(tmp_path / "o"), model=str(TINY))
    assert (s.ok, s.workers, s.threads) == (1, 1, 2)  # not a second process for nothing


# ------------------------------------------------------------------------ from a script, as a user

README = HERE.parent / "README.md"


def _readme_batch_example() -> str:
    """The Python example of README.md's "## Batch jobs" section, as written."""
    text = README.read_text()
    section = text.split("\n## Batch jobs\n", 1)[1].split("\n## ", 1)[0]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def _clips(folder: Path, n: int = 2) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    clips = sorted(DEV.glob("cv_*.wav"))[:n]
    for c in clips:
        (folder / c.name).write_bytes(c.read_bytes())
    return clips


def test_the_readme_python_example_runs_as_a_plain_script(tmp_path):
    """The README's example, written to a file as it stands (no `if __name__ == "__main__":`) and run
    with `python script.py` where `samples/` holds two clips: worker processes started with spawn
    would run the script again, so the job runs in the script's own process, says so in one warning,
    and every input is done."""
    code = _readme_batch_example()
    assert "__main__" not in code and "workers=2" in code  # the case of the issue: no guard, workers asked for
    clips = _clips(tmp_path / "samples")
    (tmp_path / "script.py").write_text(code)
    r = subprocess.run([sys.executable, "script.py"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    ok, failed, skipped = r.stdout.split()[:3]
    assert (ok, failed, skipped) == ("2", "0", "0"), r.stdout + r.stderr
    lines = _lines(tmp_path / "out")
    assert sorted(d["id"] for d in lines) == sorted(c.stem for c in clips)
    assert all(d["status"] == "ok" and d["outputs"] == [f"{d['id']}.json", f"{d['id']}.srt"] for d in lines)
    assert "died" not in r.stderr and "start-up" not in r.stderr and "Traceback" not in r.stderr  # no worker ran it
    warned = [line for line in r.stderr.splitlines() if "Warning:" in line]
    assert len(warned) == 1 and 'if __name__ == "__main__":' in warned[0] and "this process" in warned[0]


def test_workers_that_fail_at_start_up_are_recorded_with_the_cause(tmp_path):
    """A guarded script whose top-level code fails when a worker process runs it again: the workers
    die at start-up; each input gets its line in results.jsonl with that cause, not "out of memory"."""
    _clips(tmp_path / "in")
    (tmp_path / "script.py").write_text(
        "import sys\n"
        "import transcribe\n"
        "\n"
        "if __name__ != '__main__':  # what a worker process runs again\n"
        "    raise RuntimeError('this script cannot run in a worker')\n"
        "\n"
        "if __name__ == '__main__':\n"
        "    s = transcribe.batch(['in'], 'out', model=sys.argv[1], workers=2, threads=1)\n"
        "    print(s.ok, s.failed)\n")
    r = subprocess.run([sys.executable, "script.py", str(TINY)], cwd=tmp_path, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0", "2"], r.stdout + r.stderr
    lines = _lines(tmp_path / "out")
    assert len(lines) == 2 and all(d["status"] == "error" for d in lines)
    for d in lines:
        assert "start-up" in d["error"] and "status 1" in d["error"], d["error"]
        assert "memory" not in d["error"] and "killed" not in d["error"]
        assert "\n" not in d["error"]
    assert "this script cannot run in a worker" in r.stderr  # the worker's own error, on stderr


@pytest.mark.parametrize("source, line, guarded", [
    ("import t\nt.batch()\n", 2, False),
    ("import t\nif __name__ == '__main__':\n    t.batch()\n", 3, True),
    ("import t\nif '__main__' == __name__:\n    x = 1\n    t.batch(\n        1)\n", 4, True),
    ("import t\nif __name__ != '__main__':\n    pass\nelse:\n    t.batch()\n", 5, True),
    ("import t\nif __name__ != '__main__':\n    t.batch()\n", 3, False),
    ("try:\n    if __name__ == \"__main__\":\n        main()\nexcept KeyboardInterrupt:\n    pass\n", 3, True),
    ("if __name__ == '__main__':\n    pass\nmain()\n", 3, False),
    ("if x == '__main__':\n    main()\n", 2, False),
])
def test_a_line_under_the_main_guard_is_told_from_one_outside(source, line, guarded):
    from transcribe.jobs.local import under_main_guard

    assert under_main_guard(source, line) is guarded


def test_one_job_at_a_time_in_an_output_folder(tmp_path):
    """A second job in a folder where one runs would rewrite the first one's results.jsonl: refused."""
    fcntl = pytest.importorskip("fcntl")
    out = tmp_path / "out"
    out.mkdir()
    fd = os.open(out, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a running job holds it
        with pytest.raises(jin.JobError, match="another job is running"):
            transcribe.batch([str(JFK)], str(out), model=str(TINY), workers=1)
    finally:
        os.close(fd)
    s = transcribe.batch([str(JFK)], str(out), model=str(TINY), workers=1)
    assert s.ok == 1 and len(_lines(out)) == 1


def test_manifest_fields_are_carried_under_manifest(tmp_path):
    """A manifest's reference `text` (or any field) never sits beside the transcript's fields."""
    man = tmp_path / "m.jsonl"
    man.write_text(json.dumps({"audio": str(JFK), "id": "j", "text": "the reference", "duration": 99,
                               "speaker": "jfk"}) + "\n")
    out = tmp_path / "out"
    s = transcribe.batch([str(JFK)], str(out), manifest=str(man), model=str(TINY), workers=1)
    assert s.ok == 2
    lines = {d["id"]: d for d in _lines(out)}
    assert lines["j"]["manifest"] == {"text": "the reference", "duration": 99, "speaker": "jfk"}
    assert "text" not in lines["j"] and "speaker" not in lines["j"]
    assert lines["j"]["duration"] == pytest.approx(11.0, abs=0.01)  # the audio's, not the manifest's
    assert "manifest" not in lines["jfk"]  # an input given by name has no manifest


@pytest.mark.parametrize("argv, inputs, ray", [
    (["--ray", "in/", "-o", "out"], ["in/"], "local"),
    (["a.wav", "--ray", "b.wav", "-o", "out"], ["a.wav", "b.wav"], "local"),
    (["--ray", "b.wav", "a.wav", "-o", "out"], ["b.wav", "a.wav"], "local"),
    (["a.wav", "-o", "out", "--ray"], ["a.wav"], "local"),
    (["a.wav", "--ray", "auto", "-o", "out"], ["a.wav"], "auto"),
    (["--ray", "head-1.example:6379", "a.wav", "-o", "out"], ["a.wav"], "head-1.example:6379"),
    (["--ray", "ray://10.0.0.2:10001", "a.wav", "-o", "out"], ["a.wav"], "ray://10.0.0.2:10001"),
    (["--ray=[::1]:6379", "a.wav", "-o", "out"], ["a.wav"], "[::1]:6379"),
    (["a.wav", "-o", "out"], ["a.wav"], None),
])
def test_ray_takes_an_address_only_when_it_is_one(argv, inputs, ray):
    from transcribe.jobs.cli import parse

    args = parse(argv)
    assert (args.inputs, args.ray, args.output_dir) == (inputs, ray, "out")


def test_ray_followed_by_an_input_runs_it_without_ray_log_lines(tmp_path):
    """`transcribe batch --ray INPUT -o out`: INPUT is the input, Ray runs here (one actor: no more
    than the inputs), and nothing of Ray's own logging reaches stderr: only the summary line."""
    pytest.importorskip("ray", reason="needs Ray: pip install 'transcribe[ray]'")
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    r = _cli("--ray", JFK, "-o", out, "--model", TINY, env=env)
    assert r.returncode == 0, r.stderr
    assert [d["status"] for d in _lines(out)] == ["ok"]
    assert "logging.cc" not in r.stderr and "Set ray log level" not in r.stderr and ".cc:" not in r.stderr
    assert len(r.stderr.splitlines()) == 1 and r.stderr.startswith("transcribe batch: 1 ok"), r.stderr
    assert "1 Ray actor x" in r.stderr


def test_an_option_the_model_cannot_honour_stops_the_job_in_the_commands_words(tmp_path, capsys):
    """Batch jobs refuse what the command refuses, in the same sentence, before any work (no output
    folder is made), with one worker or several; the library names the option, the command its flag."""
    from transcribe.errors import OptionsNotTaken
    from transcribe.jobs.cli import main

    clip = str(SHARED / "audio" / "jfk.wav")
    with pytest.raises(OptionsNotTaken) as e:
        transcribe.batch([clip], tmp_path / "a", model=str(TINY), language="de")
    assert str(e.value) == "tiny-tdt-fit.nemo is a Parakeet model and does not take language"
    for workers in ("1", "2"):
        code = main([clip, "--output-dir", str(tmp_path / workers), "--model", str(TINY), "--workers", workers,
                     "--language", "de", "--temperature", "0.2"])
        err = capsys.readouterr().err
        assert code == 2 and err == ("transcribe batch: error: tiny-tdt-fit.nemo is a Parakeet model and does not "
                                     "take --language or --temperature\n")
        assert not (tmp_path / workers).exists()
