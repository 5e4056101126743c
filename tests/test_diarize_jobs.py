"""Diarization through the command's and the batch jobs' paths, with the real tiny models (the shared tiny
Parakeet and the tiny streaming Sortformer, on its two-speaker mixtures):

- the diarizer's own options: `--diarize --diarizer-mode offline` (the command routes the options the
  diarizer's family takes, and the recognizer's does not, to `diarizer_options`) gives the diarizer's offline
  turns; `diarizer_options=` in the API; refusals before any work, one line, exit 2;
- batch jobs with `diarize=True` / `transcribe batch --diarize`: whole inputs (never cut: speaker labels do not
  join across pieces), the diarizer loaded once a worker, outputs (json, rttm, srt, vtt) equal to
  `model.transcribe(path, diarize=True)` rendered, in one process and in two worker processes, resumable;
- `transcribe AUDIO... -o DIR --diarize` (the jobs' executor in this process) writing the same files.

The same code runs on the same decoded audio with one thread in every path: outputs are equal, but for
scores (confidences, log-probabilities) within 1e-5 where a job batches inputs the API ran alone (`same_document`)."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import transcribe
from transcribe.writers import render

from .conftest import SHARED

SF = SHARED / "models" / "sortformer-tiny"
SF_MODEL = SF / "sortformer-tiny.nemo"
MIXES = [SF / "mix0.wav", SF / "mix1.wav"]
PARAKEET = SHARED / "models" / "parakeet-tiny" / "tiny-tdt-fit.nemo"

pytestmark = pytest.mark.skipif(not (SF_MODEL.is_file() and PARAKEET.is_file() and all(m.is_file() for m in MIXES)),
                                reason="the shared tiny Sortformer, its mixtures and the tiny Parakeet are not in "
                                       "../shared/models")

FORMATS = ["json", "rttm", "srt", "vtt", "txt"]


@pytest.fixture(scope="module")
def models():
    asr = transcribe.load_model(str(PARAKEET), threads=1)
    diar = transcribe.load_model(str(SF_MODEL), threads=1)
    return asr, diar


@pytest.fixture(scope="module")
def expected(models):
    """mix stem -> model.transcribe(path, diarize=True) with the tiny Sortformer (default options)."""
    asr, diar = models
    return {m.stem: asr.transcribe(str(m), diarize=True, diarizer=diar) for m in MIXES}


def cli(capsys, *argv):
    from transcribe import cli as command

    code = command.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


SCORES = ("confidence", "logprob", "avg_logprob")


def _split_scores(doc, scores: list):
    """`doc` without its scores (confidences and log-probabilities, collected in `scores` in order)."""
    if isinstance(doc, dict):
        out = {}
        for k, v in doc.items():
            if k in SCORES and isinstance(v, float):
                scores.append(v)
            else:
                out[k] = _split_scores(v, scores)
        return out
    if isinstance(doc, list):
        return [_split_scores(v, scores) for v in doc]
    return doc


def same_document(got: dict, want: dict) -> None:
    """Equal, scores within 1e-5: a job runs the inputs of a task as one padded batch, where the API call
    above ran each alone, and the padded rows' sums differ in the last float bits (everything else, texts,
    times, speakers, turns, is exact: the tiny model's decisions are far from ties)."""
    a, b = [], []
    assert _split_scores(got, a) == _split_scores(json.loads(json.dumps(want)), b)
    assert np.allclose(a, b, rtol=0, atol=1e-5)


def _check_files(folder, expected: dict, formats=FORMATS) -> None:
    for stem, t in expected.items():
        for fmt in formats:
            got = (folder / f"{stem}.{fmt}").read_text(encoding="utf-8")
            if fmt == "json":
                same_document(json.loads(got), t.to_dict())
            else:
                assert got == render(t, fmt, file_id=stem), (stem, fmt)


# ------------------------------------------------------------------------------ the diarizer's options

def test_the_command_gives_the_diarizer_its_own_options(models, capsys):
    asr, diar = models
    pcm = transcribe.load_audio(str(MIXES[0]), diar.sample_rate)
    offline = diar.diarize(pcm, mode="offline").turns
    streaming = diar.diarize(pcm).turns
    assert offline != streaming  # the option is seen in the result (the tiny model's two paths differ here)
    code, out, err = cli(capsys, MIXES[0], "--model", PARAKEET, "--diarize", "--diarizer", SF_MODEL,
                         "--diarizer-mode", "offline", "--threads", "1", "-f", "json")
    assert (code, err) == (0, "")
    doc = json.loads(out)
    assert doc["speakers"] == [t.to_dict() for t in offline]
    assert doc == asr.transcribe(str(MIXES[0]), diarize=True, diarizer=diar,
                                 diarizer_options={"mode": "offline"}).to_dict()
    # NeMo's asynchronous cache update, a boolean flag of the same family
    code, out, _ = cli(capsys, MIXES[0], "--model", PARAKEET, "--diarize", "--diarizer", SF_MODEL, "--async-update",
                       "--threads", "1", "-f", "rttm")
    assert code == 0 and out == render(transcribe.Transcript("", 0.0, speakers=diar.diarize(pcm, async_update=True).turns),
                                       "rttm", file_id="mix0")
    # a diarizer as the model takes the same flag as its own option
    code, out, _ = cli(capsys, MIXES[0], "--model", SF_MODEL, "--diarizer-mode", "offline", "-f", "rttm")
    assert code == 0 and out == render(transcribe.Transcript("", 0.0, speakers=offline), "rttm", file_id="mix0")


def test_diarizer_options_in_the_api(models):
    asr, diar = models
    pcm = transcribe.load_audio(str(MIXES[1]), diar.sample_rate)
    own = {"mode": "offline", "min_duration_on": 0.4, "pad_offset": 0.08}
    want = diar.diarize(pcm, **own).turns
    got = asr.transcribe(pcm, diarize=True, diarizer=str(SF_MODEL), diarizer_options=own)
    assert got.speakers == want and all(w.speaker is not None for w in got.words)
    assert got.text == asr.transcribe(pcm).text
    with pytest.raises(transcribe.TranscribeError, match=r"^onset must lie in \[0, 1\] \(a probability\), got 2 "
                                                         r"\(an option of the diarizer sortformer-tiny.nemo\)$"):
        asr.transcribe(pcm, diarize=True, diarizer=diar, diarizer_options={"onset": 2})
    with pytest.raises(transcribe.TranscribeError, match="^sortformer-tiny.nemo is a Sortformer model and does not "
                                                         "take beam_size$"):
        asr.check_options(diarize=True, diarizer=diar, diarizer_options={"beam_size": 2})


def test_the_call_keywords_are_recognizer_transcribe_s():
    import inspect

    from transcribe.loading import CALL_KEYWORDS
    from transcribe.recognizer import Recognizer

    params = inspect.signature(Recognizer.transcribe).parameters
    assert [n for n, p in params.items() if p.kind == p.POSITIONAL_OR_KEYWORD][2:] == list(CALL_KEYWORDS)


@pytest.mark.parametrize("argv, said", [
    (["--model", PARAKEET, "--diarizer-mode", "offline"],
     "tiny-tdt-fit.nemo is a Parakeet model and does not take --diarizer-mode (it is not a diarizer: add --diarize"),
    (["--model", PARAKEET, "--diarize", "--diarizer", SF_MODEL, "--num-speakers", "5", "--diarizer-mode", "offline"],
     "--num-speakers must be at most 4 (the diarizer's speakers), got 5"),
    (["--model", PARAKEET, "--diarize", "--diarizer", PARAKEET, "--diarizer-mode", "offline"],
     "tiny-tdt-fit.nemo is a Parakeet recognizer, not a diarizer"),
])
def test_the_command_s_refusals_of_diarizer_options_are_one_line(capsys, argv, said):
    code, out, err = cli(capsys, MIXES[0], *argv)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and said in err, err


# ------------------------------------------------------------------------------------------ batch jobs

def test_batch_diarizes_whole_inputs_like_the_api_and_resumes(models, expected, tmp_path):
    asr, diar = models
    out = tmp_path / "job"
    s = transcribe.batch([str(m) for m in MIXES], str(out), model=str(PARAKEET), formats=FORMATS, workers=1,
                         threads=1, diarize=True, diarizer=str(SF_MODEL))
    assert (s.ok, s.failed) == (2, 0), s.errors
    _check_files(out, expected)
    lines = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert sorted(x["id"] for x in lines) == ["mix0", "mix1"] and all(x["status"] == "ok" for x in lines)
    again = transcribe.batch([str(m) for m in MIXES], str(out), model=str(PARAKEET), formats=FORMATS, workers=1,
                             threads=1, diarize=True, diarizer=str(SF_MODEL), resume=True)
    assert (again.skipped, again.ok) == (2, 0)
    # the diarizer's options and speaker limit ride along
    s = transcribe.batch([str(MIXES[0])], str(tmp_path / "one"), model=str(PARAKEET), formats=["json"], workers=1,
                         threads=1, diarize=True, diarizer=str(SF_MODEL), num_speakers=1,
                         diarizer_options={"mode": "offline"})
    assert s.ok == 1
    want = asr.transcribe(str(MIXES[0]), diarize=True, diarizer=diar, num_speakers=1, diarizer_options={"mode": "offline"})
    same_document(json.loads((tmp_path / "one" / "mix0.json").read_text()), want.to_dict())


def test_a_long_diarized_input_is_not_cut(models, tmp_path):
    """Longer than Parakeet's pieces (120 s): one transcript, its speakers from one diarizer run."""
    asr, diar = models
    import soundfile as sf

    pcm = np.concatenate([transcribe.load_audio(str(m), 16000) for m in MIXES * 6])
    assert len(pcm) / 16000 > 130
    path = tmp_path / "long.wav"
    sf.write(str(path), pcm, 16000)
    s = transcribe.batch([str(path)], str(tmp_path / "job"), model=str(PARAKEET), formats=["json"], workers=1,
                         threads=1, diarize=True, diarizer=str(SF_MODEL))
    assert s.ok == 1
    want = asr.transcribe(str(path), diarize=True, diarizer=diar)
    same_document(json.loads((tmp_path / "job" / "long.json").read_text()), want.to_dict())


def test_batch_with_a_diarizer_as_the_model_writes_its_turns(models, tmp_path):
    _, diar = models
    s = transcribe.batch([str(m) for m in MIXES], str(tmp_path / "job"), model=str(SF_MODEL), formats=["rttm"],
                         workers=1, threads=1, mode="offline")
    assert s.ok == 2
    _check_files(tmp_path / "job", {m.stem: diar.transcribe(str(m), mode="offline") for m in MIXES}, ["rttm"])


def test_batch_refusals_come_before_any_work(tmp_path):
    cases = [
        (dict(model=str(PARAKEET), diarize=True, piece_s=30), "speaker labels do not join across pieces"),
        (dict(model=str(PARAKEET), formats=["rttm"]), "rttm needs a diarized transcript (--diarize, or a diarizer "
                                                      "model): tiny-tdt-fit.nemo is not a diarizer"),
        (dict(model=str(PARAKEET), diarize=True, diarizer=str(PARAKEET)), "tiny-tdt-fit.nemo is a Parakeet "
                                                                           "recognizer, not a diarizer"),
        (dict(model=str(SF_MODEL), diarize=True), "sortformer-tiny.nemo is a diarizer: give it as diarizer="),
        (dict(model=str(SF_MODEL), piece_s=30, formats=["rttm"]), "sortformer-tiny.nemo is a diarizer, whose inputs "
                                                                  "are not cut into pieces"),
        (dict(model=str(PARAKEET), diarize=True, diarizer=str(SF_MODEL), diarizer_options={"onset": 2}),
         "onset must lie in [0, 1] (a probability), got 2 (an option of the diarizer sortformer-tiny.nemo)"),
        (dict(model=str(PARAKEET), diarize=True, diarizer=str(SF_MODEL), diarizer_options={"bogus": 1}),
         "sortformer-tiny.nemo is a Sortformer model and does not take bogus"),
    ]
    cases.append((dict(model=str(PARAKEET), diarize=True, diarizer=transcribe.load_model(str(SF_MODEL))),
                  "diarizer: give a batch job the diarizer's name or path (each worker loads it once), not a loaded "
                  "model (SortformerDiarizer)"))
    for kw, said in cases:
        with pytest.raises(transcribe.TranscribeError) as e:
            transcribe.batch([str(MIXES[0])], str(tmp_path / "job"), workers=1, **kw)
        assert said in str(e.value)
        assert not (tmp_path / "job" / "results.jsonl").exists()


def test_the_batch_command_in_two_worker_processes(expected, tmp_path):
    """Each worker process loads the recognizer and its diarizer once; the files equal the API's."""
    out = tmp_path / "job"
    r = subprocess.run([sys.executable, "-m", "transcribe", "batch", *map(str, MIXES), "-o", str(out), "--model",
                        str(PARAKEET), "--diarize", "--diarizer", str(SF_MODEL), "-f", "all", "--workers", "2",
                        "--threads", "1", "-q"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    _check_files(out, expected)
    r = subprocess.run([sys.executable, "-m", "transcribe", "batch", str(MIXES[0]), "-o", str(tmp_path / "x"),
                        "--model", str(PARAKEET), "--diarize", "--diarizer", str(SF_MODEL), "--num-speakers", "5"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "transcribe batch: error: --num-speakers must be at most 4 (the diarizer's speakers), got 5"], r.stderr


def test_the_command_with_an_output_dir_runs_through_the_jobs(expected, capsys, tmp_path):
    code, out, err = cli(capsys, *MIXES, "--model", PARAKEET, "--diarize", "--diarizer", SF_MODEL, "-f", "all",
                         "-o", tmp_path / "out", "--threads", "1")
    assert (code, out, err) == (0, "", "")
    _check_files(tmp_path / "out", expected)
