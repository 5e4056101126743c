"""Helpers shared by the Sortformer reference tools (run in NeMo's virtual environment, never imported by tests).

Used by tools/sortformer_v1_tiny.py, tools/sortformer_streaming_shapes.py and
tools/sortformer_postprocessing_reference.py. Paths are found from this file: the repository root is its parent's
parent, the shared folder is <repo>/../shared (the tiny streaming Sortformer, its mixtures and its maker script live
in <shared>/models/sortformer-tiny).
"""
import importlib.util
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
SHARED = os.path.normpath(os.path.join(REPO, "..", "shared"))
SHARED_TINY = os.path.join(SHARED, "models", "sortformer-tiny")
SHARED_NEMO = os.path.join(SHARED_TINY, "sortformer-tiny.nemo")
MODELS_OUT = os.path.join(REPO, "tests", "models", "sortformer")
REFS_OUT = os.path.join(REPO, "tests", "references", "sortformer")
MIXES = ["mix0", "mix1", "mix2"]

STREAMING_KEYS = ["spkcache_len", "fifo_len", "chunk_len", "spkcache_update_period", "chunk_left_context",
                  "chunk_right_context", "spkcache_sil_frames_per_spk", "scores_boost_latest", "sil_threshold",
                  "pred_score_threshold", "strong_boost_rate", "weak_boost_rate", "min_pos_scores_rate",
                  "max_index", "subsampling_factor"]


def shared_maker():
    """The shared folder's make_sortformer_tiny.py as a module (its mixing, VAD-target and WAV helpers)."""
    path = os.path.join(SHARED_TINY, "make_sortformer_tiny.py")
    spec = importlib.util.spec_from_file_location("make_sortformer_tiny", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def versions():
    import nemo
    import torch

    return {"nemo": nemo.__version__, "torch": torch.__version__}


def rel(path):
    """A path relative to the repository's parent (so ../shared/... or <repo name>/... style, no machine paths)."""
    return os.path.relpath(path, REPO).replace(os.sep, "/")


def streaming_params(model):
    sm = model.sortformer_modules
    return {k: getattr(sm, k) for k in STREAMING_KEYS}


def probs_json(p):
    """[T, n_spk] tensor -> nested lists with 7 significant digits (the safetensors keep exact float32)."""
    return [[float(f"{x:.7g}") for x in row] for row in p.tolist()]


class Tracer:
    """Wraps model.forward_streaming_step to record one entry per chunk (the shared references' trace format)."""

    def __init__(self, model):
        self.model = model
        self.trace = []
        self.last_state = None
        self.orig = model.forward_streaming_step
        model.forward_streaming_step = self.step

    def _lens(self, st, which):
        if self.model.async_streaming:
            return [int(x) for x in getattr(st, f"{which}_lengths")]
        return int(getattr(st, which).shape[1])

    def step(self, processed_signal, processed_signal_length, streaming_state, total_preds, **kw):
        entry = dict(chunk_feat_frames=int(processed_signal.shape[1]),
                     chunk_feat_len=[int(x) for x in processed_signal_length],
                     left_offset=int(kw.get("left_offset", 0)), right_offset=int(kw.get("right_offset", 0)),
                     spkcache_len_before=self._lens(streaming_state, "spkcache"),
                     fifo_len_before=self._lens(streaming_state, "fifo"))
        st, tp = self.orig(processed_signal=processed_signal, processed_signal_length=processed_signal_length,
                           streaming_state=streaming_state, total_preds=total_preds, **kw)
        entry["new_pred_frames"] = int(tp.shape[1] - total_preds.shape[1])
        entry["spkcache_len_after"] = self._lens(st, "spkcache")
        entry["fifo_len_after"] = self._lens(st, "fifo")
        entry["spkcache_preds_set"] = st.spkcache_preds is not None
        self.trace.append(entry)
        self.last_state = st
        return st, tp

    def restore(self):
        self.model.forward_streaming_step = self.orig


def run_diarize(model, wav, mode, tracer=None, postprocessing_yaml=None):
    """NeMo's diarize() on one file in mode offline / streaming_sync / streaming_async -> (segments, probs [T, n])."""
    model.streaming_mode = mode != "offline"
    model.async_streaming = mode == "streaming_async"
    if tracer is not None:
        tracer.trace = []
        tracer.last_state = None
    segs, preds = model.diarize(audio=[wav], batch_size=1, include_tensor_outputs=True, verbose=False,
                                num_workers=0, postprocessing_yaml=postprocessing_yaml)
    return list(segs[0]), preds[0][0].float().contiguous()


def state_tensors(st, prefix):
    import torch

    out = {}
    for k in ["spkcache", "spkcache_lengths", "spkcache_preds", "fifo", "fifo_lengths", "fifo_preds",
              "mean_sil_emb", "n_sil_frames"]:
        t = getattr(st, k)
        if t is None:
            continue
        t = t.detach()
        out[f"{prefix}.{k}"] = (t.to(torch.int64) if not t.is_floating_point() else t.float()).contiguous()
    return out
