"""transcribe: local speech-to-text with OpenAI Whisper, NVIDIA Parakeet and IBM Granite Speech NAR models.

    import transcribe
    model = transcribe.load_model()                      # Whisper tiny.en, installed with the package
    result = model.transcribe("audio.wav")
    print(result.text, result.words[0].start)

    with model.stream() as live:                         # live input: any model, any piece size
        live.feed(pcm_piece)                             # float samples, int16 or s16le bytes
        print(live.take_new_text(), end="", flush=True)  # committed text: append-only

Importing the package is cheap: PyTorch is imported when a model is loaded, not before.
"""
from .errors import AudioError, ModelError, TranscribeError
from .loading import load_model
from .diarization import Diarization
from .results import Segment, SpeakerTurn, Token, Transcript, Word
from .streaming import Latency, StreamEvent, StreamingSession

__version__ = "0.1.0"


def load_audio(source, sample_rate: int = 16000, **kw):
    """Decode any common audio container, bytes, file object or array to mono float32."""
    from .audio import load_audio as _load

    return _load(source, sample_rate, **kw)


def batch(inputs=(), output_dir: str = "transcripts", **options):
    """Transcribe many files into `output_dir`, resumably, here or on Ray (transcribe/jobs/runner.py)."""
    from .jobs.runner import batch as _batch

    return _batch(inputs, output_dir, **options)


__all__ = [
    "load_model", "load_audio", "batch", "Transcript", "Segment", "Word", "Token", "SpeakerTurn", "Diarization",
    "StreamingSession", "StreamEvent", "Latency",
    "TranscribeError", "AudioError", "ModelError", "__version__",
]
