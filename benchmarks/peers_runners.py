"""How benchmarks/peers.py loads and calls each system, inside that system's own child process.

Standard library only at module level: it is imported under the project's Python (ours) and under the
peers' venv (.venv-peers: transcribe.cpp, CrispASR, onnx-asr, sherpa-onnx, faster-whisper), each import
of a system happening inside its loader. load(system, path, threads) returns run(pcm float32 16 kHz) ->
(text, token ids or None): what the system gives for one call, with every system's defaults except
what is named below (greedy decoding everywhere, the thread count set through the system's own option).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Callable, Optional

REPO = Path(__file__).resolve().parent.parent

Run = Callable[[object], "tuple[str, Optional[list[int]]]"]


def _vocab_ids(vocab_file: Path) -> dict:
    """"piece id" lines (onnx-asr's vocab.txt, sherpa-onnx's tokens.txt) -> {piece as the peer returns it: id};
    the peers print SentencePiece's word mark as a space."""
    out = {}
    for line in vocab_file.read_text(encoding="utf-8").splitlines():
        piece, _, i = line.rpartition(" ")
        out.setdefault(piece.replace("\u2581", " "), int(i))
    return out


def _ours(path: str, threads: int, dtype: Optional[str]) -> Run:
    sys.path.insert(0, str(REPO))  # the package from this checkout
    import transcribe.runtime

    # what the command line, the server and the batch workers set before PyTorch is imported: OpenMP's idle
    # threads sleep after 1000 rounds of spinning (GOMP_SPINCOUNT, unless the environment chose)
    transcribe.runtime.openmp_waiting()
    import torch

    torch.set_num_threads(threads)
    torch.set_flush_denormal(True)
    import transcribe

    transcribe.runtime.tune_malloc()  # the command line does the same before it loads a model
    model = transcribe.load_model(path, threads=threads, dtype=dtype)

    def run(pcm):
        t = model.transcribe(pcm)
        return t.text, [tok.id for tok in t.tokens]

    return run


def _tcpp(path: str, threads: int) -> Run:
    import transcribe_cpp

    model = transcribe_cpp.Model(path, backend="cpu")
    session = model.session(n_threads=threads)
    run_kw = {"language": "en"} if "whisper" in str(getattr(model, "arch", "")).lower() else {}

    def run(pcm):
        r = session.run(pcm, **run_kw)
        ids = [t.id for t in r.tokens] if r.tokens else None
        return r.text, ids

    run.keep = (model, session)  # the session needs its model alive
    return run


def _crispasr(path: str, threads: int) -> Run:
    import crispasr

    session = crispasr.Session(path, n_threads=threads)

    def run(pcm):
        segs = session.transcribe(pcm, 16000)
        text = "".join(s.text for s in segs).strip()
        toks = [t for s in segs for t in s.tokens]
        ids = [int(t.id) for t in toks] if toks and all(hasattr(t, "id") for t in toks) else None
        return text, ids

    run.keep = session
    return run


def _onnx_asr(path: str, threads: int, quantization: Optional[str]) -> Run:
    import onnx_asr
    import onnxruntime as ort

    if Path(path).is_file():  # an int8 system names its encoder file; its folder holds the rest
        path = str(Path(path).parent)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    model = onnx_asr.load_model("nemo-conformer-tdt", path, quantization=quantization, sess_options=so,
                                providers=["CPUExecutionProvider"]).with_timestamps()
    vocab = _vocab_ids(Path(path) / "vocab.txt")

    def run(pcm):
        r = model.recognize(pcm, sample_rate=16000)
        ids = [vocab.get(t, -1) for t in r.tokens] if r.tokens is not None else None
        return r.text, ids

    return run


def _sherpa(path: str, threads: int, int8: bool) -> Run:
    import sherpa_onnx

    d = Path(path)
    if d.is_file():  # an int8 system names its encoder file; its folder holds the rest
        d = d.parent
    sfx = ".int8.onnx" if int8 else ".onnx"
    # sherpa-onnx reads each .onnx into memory and hands ONNX Runtime the bytes: the weights' side files
    # (<name>.onnx.data) are then found relative to the working directory, so the child runs in d
    os.chdir(d)
    feat = 128
    try:
        import onnx

        meta = {p.key: p.value for p in onnx.load(str(d / "encoder.onnx"), load_external_data=False).metadata_props}
        feat = int(meta.get("feat_dim", feat))
    except ImportError:
        pass
    rec = sherpa_onnx.OfflineRecognizer.from_transducer(
        encoder="encoder" + sfx, decoder="decoder" + sfx, joiner="joiner" + sfx, tokens="tokens.txt",
        num_threads=threads, feature_dim=feat, decoding_method="greedy_search", model_type="nemo_transducer",
        provider="cpu")
    vocab = _vocab_ids(d / "tokens.txt")

    def run(pcm):
        s = rec.create_stream()
        s.accept_waveform(16000, pcm)
        rec.decode_stream(s)
        r = s.result
        toks = list(getattr(r, "tokens", []) or [])
        return r.text, ([vocab.get(t, -1) for t in toks] if toks else None)

    return run


def _whisper(system: str, path: str, threads: int) -> Run:
    """Whisper systems as benchmarks/whisper_systems.py loads them (greedy, language en, temperature 0)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from whisper_systems import load_runner

    run = load_runner(system, threads, path, "")
    return lambda pcm: (run(pcm, None), None)


def prepare(system: str) -> None:
    """Import the system's runtime (timed apart from the model's load: a fresh process pays both, a server or
    an application that has imported it pays the load alone)."""
    kind = system.partition(":")[0]
    if kind in ("ours", "whisper") and system.partition(":")[2] in ("fp32", "bf16", "int8", "q8_0", "ours", "ours-int8"):
        sys.path.insert(0, str(REPO))  # the package from this checkout
        import transcribe.runtime

        transcribe.runtime.openmp_waiting()  # before PyTorch, as the command line
        import torch  # noqa: F401

        import transcribe  # noqa: F401
    elif kind == "transcribe.cpp":
        import transcribe_cpp  # noqa: F401
    elif kind == "crispasr":
        import crispasr  # noqa: F401
    elif kind == "onnx-asr":
        import onnx_asr  # noqa: F401
        import onnxruntime  # noqa: F401
    elif kind == "sherpa-onnx":
        import sherpa_onnx  # noqa: F401
    elif kind == "whisper":  # faster-whisper
        import faster_whisper  # noqa: F401


def load(system: str, path: str, threads: int) -> Run:
    """One system loaded; the caller times this call as its load."""
    kind, _, mode = system.partition(":")
    if kind == "ours":
        return _ours(path, threads, {"fp32": None, "bf16": "bfloat16", "int8": "int8", "q8_0": None}[mode])
    if kind == "transcribe.cpp":
        return _tcpp(path, threads)
    if kind == "crispasr":
        return _crispasr(path, threads)
    if kind == "onnx-asr":
        return _onnx_asr(path, threads, None if mode == "fp32" else mode)
    if kind == "sherpa-onnx":
        return _sherpa(path, threads, mode == "int8")
    if kind == "whisper":  # whisper:ours, whisper:ours-int8, whisper:faster-int8, whisper:faster-float32
        return _whisper(mode, path, threads)
    raise SystemExit(f"unknown system {system}")
