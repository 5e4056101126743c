"""The OpenAI audio API's request fields and response shapes, on our `Transcript`.

`request_options` turns the form fields of `POST /v1/audio/transcriptions` (and `translations`)
into the model's decoding options, raising `ApiError` (400) for a value the model cannot honour;
`render` turns a transcript into the body of each `response_format`. Fields the API defines that
mean nothing here (`chunking_strategy`, `include[]`, ...) and unknown fields are ignored. OpenAI's
`language` and `prompt` and the extra fields (`beam_size`, `hotwords`, ...) are the families' options
that declare a form field (`transcribe.surfaces.form_fields`, read from the registry).

Who spoke (`diarize_request`): the fields `diarize` (true/false) and `num_speakers` (1 to the
diarizer's most), and `response_format=diarized_json` (which implies `diarize`), run the server's
diarizer (`transcribe serve --diarizer M`) beside the model. `diarized_json` is OpenAI's shape, as its
API reference gives it (developers.openai.com/api/reference, audio/transcriptions and its streaming
events; OpenAPI document 2.3.0): CreateTranscriptionResponseDiarizedJson is `task` ("transcribe"),
`duration`, `text`, `segments`, `usage`; each segment a TranscriptionDiarizedSegment: `type`
"transcript.text.segment", `id` (OpenAI's are "seg_0", "seg_1", ...), `start`, `end`, `text`,
`speaker`; streamed, TranscriptTextSegmentEvent has the same fields, and each transcript.text.delta
names its segment (`segment_id`). Our labels are "speaker_0", ... in order of first appearance
(OpenAI's are "A", "B", ...), and `usage` is by duration, as for the other formats.
`verbose_json` of a diarized request adds `speaker` to its segments and words and `speakers` (who
spoke when: the diarizer's turns, `speaker`, `start`, `end`) to the body.
"""
from __future__ import annotations

import math
import zlib
from argparse import ArgumentTypeError
from typing import Any, Optional

from .. import surfaces
from ..options import parse_bool
from ..text.languages import LANGUAGE_NAMES

FORMATS = ("json", "text", "srt", "vtt", "verbose_json", "diarized_json")
# The form fields of diarization: the server's, never a family's option (a diarizer served as a model
# takes `num_speakers` as its own option: app.py).
DIARIZE_FIELDS = ("diarize", "num_speakers")
GRANULARITIES = ("word", "segment")


# OpenAI's `temperature` (0..1): 0, its default, asks for the model's own decoding; t > 0 falls back from t
# in steps of FALLBACK_STEP up to 1.0, as the command's --temperature T does. It is passed on as the
# option of the same name (a model whose family has none refuses it).
FALLBACK_STEP = 0.2


def fallback_from(t: float) -> tuple[float, ...]:
    out = [t]
    while out[-1] + FALLBACK_STEP <= 1.0 + 1e-6:
        out.append(round(out[-1] + FALLBACK_STEP, 6))
    return tuple(out)


class ApiError(Exception):
    """An error answered with OpenAI's error body: {"error": {"message", "type", "param", "code"}}."""

    def __init__(self, status: int, message: str, param: Optional[str] = None, code: Optional[str] = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.kind = "invalid_request_error" if status < 500 else "server_error"

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


def error_body(status: int, message: str, param: Optional[str] = None, code: Optional[str] = None) -> dict:
    return ApiError(status, message, param, code).body()


def request_options(fields: dict[str, list[str]], task: str) -> tuple[dict, str, set[str], bool]:
    """(decoding options, response_format, timestamp granularities, stream) from the form fields
    (each a list of the values given). Raises ApiError(400) on a bad value."""
    def one(name: str) -> Optional[str]:
        values = fields.get(name)
        return values[-1] if values else None

    fmt = (one("response_format") or "json").strip()
    if fmt not in FORMATS:
        raise ApiError(400, f"response_format must be one of {', '.join(FORMATS)}; got {fmt!r}",
                       "response_format", "invalid_value")
    grains = set()
    for name in ("timestamp_granularities[]", "timestamp_granularities"):
        for v in fields.get(name, []):
            for g in v.split(","):
                g = g.strip()
                if not g:
                    continue
                if g not in GRANULARITIES:
                    raise ApiError(400, f"timestamp_granularities must be word and/or segment; got {g!r}",
                                   "timestamp_granularities", "invalid_value")
                grains.add(g)
    if not grains:
        grains = {"segment"}
    stream_value = one("stream")
    try:
        stream = parse_bool(stream_value) if stream_value is not None and stream_value.strip() else False
    except ValueError:
        raise ApiError(400, f"stream must be true or false; got {stream_value!r}", "stream", "invalid_value") from None

    # Every option the request gives goes to the model, which refuses what it cannot honour (400, with
    # the words every surface uses); what OpenAI's API sends by default (temperature 0, the word
    # granularity) asks for nothing a model must refuse.
    options: dict[str, Any] = {}
    if task == "translate":
        options["task"] = task
    if "word" in grains and fmt == "verbose_json":
        options["word_timestamps"] = True

    temperature = one("temperature")
    if temperature is not None and temperature.strip():
        try:
            t = float(temperature)
        except ValueError:
            raise ApiError(400, f"temperature must be a number; got {temperature!r}", "temperature",
                           "invalid_value") from None
        if not (0.0 <= t <= 1.0) or math.isnan(t):
            raise ApiError(400, f"temperature must lie between 0 and 1; got {t}", "temperature", "invalid_value")
        if t > 0:
            options["temperature"] = fallback_from(t)
    options.update(extra_options(one))
    return options, fmt, grains, stream


def extra_options(one) -> dict:
    """The options given as form fields (every family's transcribe() options that have one:
    `transcribe.surfaces.form_fields`; `one(name)`: the field's last value or None), each parsed as its
    family declares; a blank field is not given. They go to every model: a model refuses the options it
    does not take (errors.OptionsNotTaken), as the command and the library refuse them."""
    out = {}
    for form, field in surfaces.form_fields().items():
        if form in DIARIZE_FIELDS:
            continue
        value = one(form)
        if value is None or not value.strip():
            continue
        try:
            out[field.option] = value if field.parse is None else field.parse(value)
        except (ValueError, TypeError, ArgumentTypeError):
            raise ApiError(400, f"{form}: invalid value {value!r}", form, "invalid_value") from None
    return out


def diarize_request(fields: dict[str, list[str]], fmt: str) -> tuple[bool, Optional[int]]:
    """(whether the request asks who spoke, its num_speakers or None) from the form fields: `diarize`
    true, or `response_format=diarized_json`. Raises ApiError(400) on a bad value, `diarize=false` with
    diarized_json, and num_speakers below 1 (its maximum is the diarizer's: app.py checks it)."""
    def one(name: str) -> Optional[str]:
        values = fields.get(name)
        return values[-1].strip() if values and values[-1].strip() else None

    given = one("diarize")
    try:
        diarize = parse_bool(given) if given is not None else None
    except ValueError:
        raise ApiError(400, f"diarize must be true or false; got {given!r}", "diarize", "invalid_value") from None
    if fmt == "diarized_json":
        if diarize is False:
            raise ApiError(400, "response_format diarized_json needs diarize (it is who spoke what): drop "
                                "diarize=false", "diarize", "invalid_value")
        diarize = True
    count = one("num_speakers")
    num_speakers = None
    if count is not None:
        try:
            num_speakers = int(count)
        except ValueError:
            raise ApiError(400, f"num_speakers must be an integer; got {count!r}", "num_speakers",
                           "invalid_value") from None
        if num_speakers < 1:
            raise ApiError(400, f"num_speakers must be at least 1; got {num_speakers}", "num_speakers",
                           "invalid_value")
    return bool(diarize), num_speakers


def model_name(model) -> str:
    return getattr(model, "name", "the model")


def duration_seconds(transcript) -> int:
    return int(math.ceil(float(transcript.duration or 0.0)))


def render(transcript, fmt: str, grains: set[str], task: str, model) -> tuple[Any, str]:
    """The response body (a dict for json kinds, a str otherwise) and its media type."""
    from ..writers import WRITERS

    if fmt == "json":
        return {"text": transcript.text, "usage": {"type": "duration", "seconds": duration_seconds(transcript)}}, \
            "application/json"
    if fmt == "text":
        return WRITERS["txt"](transcript), "text/plain; charset=utf-8"
    if fmt == "srt":
        return WRITERS["srt"](transcript), "text/plain; charset=utf-8"
    if fmt == "vtt":
        return WRITERS["vtt"](transcript), "text/vtt; charset=utf-8"
    if fmt == "diarized_json":
        return diarized(transcript, task), "application/json"
    return verbose(transcript, grains, task, model), "application/json"


def diarized(transcript, task: str) -> dict:
    """OpenAI's diarized_json body (module docstring): the transcript's segments (split at each change
    of speaker), each with its speaker (null where no speaker was active over it)."""
    return {
        "task": "translate" if task == "translate" else "transcribe",
        "duration": round(float(transcript.duration), 3),
        "text": transcript.text,
        "segments": [diarized_segment(i, s) for i, s in enumerate(transcript.segments)],
        "usage": {"type": "duration", "seconds": duration_seconds(transcript)},
    }


def diarized_segment(index: int, seg) -> dict:
    """One segment of diarized_json (and the `transcript.text.segment` event of its stream)."""
    return {"type": "transcript.text.segment", "id": f"seg_{index}", "start": round(float(seg.start), 3),
            "end": round(float(seg.end), 3), "text": seg.text, "speaker": getattr(seg, "speaker", None)}


def turns(transcript) -> Optional[list]:
    """Who spoke when (the transcript's `speakers`: `speaker`, `start`, `end` each), or None when the
    request was not diarized."""
    found = getattr(transcript, "speakers", None)
    if found is None:
        return None
    return [{"speaker": t.speaker, "start": round(float(t.start), 3), "end": round(float(t.end), 3)} for t in found]


def verbose(transcript, grains: set[str], task: str, model) -> dict:
    body: dict[str, Any] = {
        "task": "translate" if task == "translate" else "transcribe",
        "language": language_name(transcript.language),
        "duration": round(float(transcript.duration), 3),
        "text": transcript.text,
    }
    who = turns(transcript)
    if "segment" in grains:
        body["segments"] = [_segment(i, s, transcript, model) for i, s in enumerate(transcript.segments)]
        if who is not None:
            for seg, out in zip(transcript.segments, body["segments"]):
                out["speaker"] = getattr(seg, "speaker", None)
    if "word" in grains:
        body["words"] = [{"word": w.word, "start": round(float(w.start), 3), "end": round(float(w.end), 3)}
                         for w in transcript.words]
        if who is not None:
            for word, out in zip(transcript.words, body["words"]):
                out["speaker"] = getattr(word, "speaker", None)
    if who is not None:
        body["speakers"] = who
    body["usage"] = {"type": "duration", "seconds": duration_seconds(transcript)}
    return body


def _segment(index: int, seg, transcript, model) -> dict:
    """OpenAI's segment: Whisper's statistics where the model has them; for other families the
    mean log-prob of the segment's tokens (where the model gives one), no-speech 0 and temperature 0."""
    text = seg.text
    toks = [t for t in transcript.tokens if seg.start - 1e-6 <= 0.5 * (t.start + t.end) <= seg.end + 1e-6]
    if toks:
        ids = [int(t.id) for t in toks]
    else:  # Whisper without word times keeps no token list: the text's tokens
        encode = getattr(getattr(model, "tokenizer", None), "encode", None)
        ids = list(encode(text)) if callable(encode) and text.strip() else []
    avg = seg.avg_logprob
    if avg is None:
        lps = [t.logprob for t in toks if t.logprob is not None]
        avg = sum(lps) / len(lps) if lps else 0.0
    ratio = seg.compression_ratio
    if ratio is None:
        data = text.strip().encode("utf-8")
        ratio = len(data) / len(zlib.compress(data)) if data else 0.0
    return {
        "id": index,
        "seek": int(round(float(seg.start) * 100)),
        "start": round(float(seg.start), 3),
        "end": round(float(seg.end), 3),
        "text": text,
        "tokens": ids,
        "temperature": float(seg.temperature or 0.0),
        "avg_logprob": float(avg),
        "compression_ratio": float(ratio),
        "no_speech_prob": float(seg.no_speech_prob or 0.0),
    }


def field_name(option: str) -> str:
    """How the form names a decoding option (as its family declares it)."""
    return surfaces.form_name(option)


def language_name(code: Optional[str]) -> str:
    """OpenAI names the language in words ("english"); "unknown" when the model does not say."""
    if not code:
        return "unknown"
    return LANGUAGE_NAMES.get(code, code)
