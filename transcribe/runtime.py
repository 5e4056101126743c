"""Process settings the speed depends on, applied only while a model runs (and then restored).

A library does not change its host process: `load_model(threads=N)` does not call
`torch.set_num_threads` for good, and no floating-point mode outlives a call. Instead every model
call runs inside `model_call(threads)`, which

- sets PyTorch's intra-op thread count to `threads` (when given) and restores the caller's count
  afterwards;
- turns on flush-denormal (denormal floats read and written as zero: some encoders slow down 4x
  on tiny values otherwise; results move by far less than the parity tolerances) and restores the
  caller's mode afterwards. The mode is per thread (the x86 MXCSR register): it is set in the
  calling thread and, where PyTorch runs its intra-op work on GNU OpenMP (the Linux wheels), in
  each thread of the calling thread's OpenMP team too (a parallel region that sets it in every
  member), since those threads were made before the call and do not follow the caller's mode.

The thread count is process-wide in PyTorch: while calls overlap in several threads, the count of
the first call that entered holds until the last one leaves, then the caller's count comes back.

Process-level tuning that cannot be scoped is explicit: `configure_process()` is what the command
line calls (threads for the whole run and glibc's malloc thresholds); a program may call it too.
"""
from __future__ import annotations

import contextlib
import os
import threading
from typing import Iterator, Optional

_lock = threading.Lock()
_depth = 0
_saved_threads: Optional[int] = None
_local = threading.local()


def _flush_denormal_is_on(torch) -> bool:
    """Whether denormals are flushed in this thread: a denormal input reads as zero then."""
    tiny = torch.tensor([1e-40], dtype=torch.float32, device="cpu")
    return bool((tiny * 2.0).item() == 0.0)


def _set_flush_denormal(torch, on: bool) -> bool:
    """Set flush-denormal in this thread and in its OpenMP team; False where the CPU has no such mode."""
    if not torch.set_flush_denormal(on):
        return False
    team = _openmp_team()
    if team is not None:
        team(on, torch.get_num_threads())
    return True


def torch_libgomp():
    """The path of the GNU OpenMP library PyTorch runs on, or None: the libgomp mapped into this
    process from PyTorch's own lib folder, else the only one mapped (other packages, such as
    sentencepiece, bring copies of their own, with thread teams of their own)."""
    import os

    import torch

    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            mapped = {line.split()[-1] for line in f if "libgomp" in line.rsplit("/", 1)[-1]}
    except OSError:
        return None
    own = os.path.join(os.path.dirname(os.path.realpath(torch.__file__)), "lib") + os.sep
    mine = sorted(p for p in mapped if os.path.realpath(p).startswith(own))
    if mine:
        return mine[0]
    return next(iter(mapped)) if len(mapped) == 1 else None


_team_runner = None  # None: not looked for yet; False: not available


def _openmp_team():
    """A function (on, n_threads) that sets flush-denormal in every thread of the calling thread's
    GNU OpenMP team, or None where PyTorch does not use libgomp (the mode then reaches the worker
    threads only when they are made after it is set)."""
    global _team_runner
    if _team_runner is None:
        _team_runner = False
        try:
            import ctypes
            import sys

            if not sys.platform.startswith("linux"):
                return None
            path = torch_libgomp()
            if path is None:
                return None
            gomp = ctypes.CDLL(path)
            parallel = gomp.GOMP_parallel
            parallel.restype = None
            parallel.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint]
            want = [False]

            def member(_data):
                import torch

                torch.set_flush_denormal(want[0])

            callback = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(member)

            def run(on: bool, n_threads: int) -> None:
                with _team_lock:
                    want[0] = on
                    parallel(ctypes.cast(callback, ctypes.c_void_p), None, max(1, int(n_threads)), 0)

            run.callback = callback  # kept alive with the runner
            _team_runner = run
        except (OSError, AttributeError, StopIteration):
            _team_runner = False
    return _team_runner or None


_team_lock = threading.Lock()


@contextlib.contextmanager
def model_call(threads: Optional[int] = None) -> Iterator[None]:
    """The settings a model call runs under (see the module's text); nests and overlaps safely."""
    import torch

    global _depth, _saved_threads
    with _lock:
        if _depth == 0:
            _saved_threads = None
            if threads is not None and torch.get_num_threads() != threads:
                _saved_threads = torch.get_num_threads()
                torch.set_num_threads(threads)
        _depth += 1
    depth = getattr(_local, "depth", 0)
    restore_flush = None
    if depth == 0:
        was_on = _flush_denormal_is_on(torch)
        if not was_on and _set_flush_denormal(torch, True):
            restore_flush = False
    _local.depth = depth + 1
    try:
        yield
    finally:
        _local.depth = depth
        if restore_flush is not None:
            _set_flush_denormal(torch, restore_flush)
        with _lock:
            _depth -= 1
            if _depth == 0 and _saved_threads is not None:
                torch.set_num_threads(_saved_threads)
                _saved_threads = None


def configure_process(threads: Optional[int] = None, malloc: bool = True) -> None:
    """Process-wide settings for a program that runs models and nothing else (the CLI, a server, a
    batch worker, a Ray actor): OpenMP's waiting (see `openmp_waiting`; it takes effect only when
    this is called before PyTorch is imported), PyTorch's thread count, and glibc's malloc thresholds
    (see `tune_malloc`)."""
    openmp_waiting()
    if threads is not None:
        import torch

        torch.set_num_threads(int(threads))
    if malloc:
        tune_malloc()


# What a process of the package's own sets for OpenMP unless the user chose (benchmarks/README.md, "OpenMP's
# waiting"): idle threads of PyTorch's OpenMP team (libgomp) spin 1000 rounds, not 300000, before they sleep.
OPENMP_SPINCOUNT = "1000"


def openmp_waiting(environ=None) -> bool:
    """Let OpenMP's idle threads sleep soon instead of spinning in this process: GOMP_SPINCOUNT=1000 in the
    environment, read by GNU OpenMP (libgomp, PyTorch's on Linux) once, when PyTorch is imported. True when it
    was set now (and so takes effect, child processes inheriting it).

    Nothing is changed when the user chose (OMP_WAIT_POLICY or GOMP_SPINCOUNT already set; GOMP_SPINCOUNT=300000
    is libgomp's own default) or when PyTorch is already imported (too late for this process; the environment
    of a program that imported it is left as it is). By default libgomp's idle threads spin some 300000
    rounds after each parallel region; when every core is busy that spinning takes the core the work itself
    needs. Measured on 2 cores, 2 threads, a 10 s Parakeet 0.6B call beside one busy process: 3.35 s with the
    default spin, 2.18 s with 1000 rounds, 2.21 s with no spin at all (OMP_WAIT_POLICY=PASSIVE); alone on
    the machine 1.17, 1.20 and 1.31 s (benchmarks/contention.py). Only for processes that run models and
    nothing else: the command line, the server, batch workers and Ray actors call it through
    `configure_process`; an application embedding the library sets GOMP_SPINCOUNT=1000 (or
    OMP_WAIT_POLICY=PASSIVE) itself, before it imports torch (README)."""
    import sys

    env = os.environ if environ is None else environ
    if "OMP_WAIT_POLICY" in env or "GOMP_SPINCOUNT" in env or "torch" in sys.modules:
        return False
    env["GOMP_SPINCOUNT"] = OPENMP_SPINCOUNT
    return True


_MALLOC_TUNED = False


def tune_malloc() -> bool:
    """Let glibc keep activation-sized buffers in its heap between calls; True when it did.

    By default glibc maps every block above 128 KiB anew and hands back heap memory above 128 KiB
    at its top; each fresh page is then paid in a page fault on first touch, on every call: about
    15% of a 0.6B encoder's time on a CPU. Raising the mmap threshold to its maximum (32 MiB) and
    the trim threshold to 1 GiB lets later calls reuse the same memory. Process-wide and lasting,
    glibc only: the command line does it; a library caller opts in by calling this.
    TRANSCRIBE_MALLOC_TUNING=0 turns it off.
    """
    global _MALLOC_TUNED
    if _MALLOC_TUNED:
        return True
    if os.environ.get("TRANSCRIBE_MALLOC_TUNING", "1") == "0":
        return False
    import ctypes
    import platform

    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3
        libc.mallopt(m_mmap_threshold, 32 << 20)
        libc.mallopt(m_trim_threshold, 1 << 30)
    except (OSError, AttributeError):  # pragma: no cover - no glibc after all
        return False
    _MALLOC_TUNED = True
    return True


def release_memory() -> bool:
    """Hands the heap's free memory back to the system (glibc's malloc_trim, every arena); True
    when it ran. For a long-running program between bursts of work (the server calls it when its
    queue runs dry): with `tune_malloc` the heap otherwise stays at its high-water mark."""
    libc = _glibc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True


_GLIBC: list = []


def _glibc():
    """glibc through ctypes (with malloc_trim), or None elsewhere; looked up once."""
    if not _GLIBC:
        import ctypes
        import platform

        lib = None
        if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
            try:
                lib = ctypes.CDLL("libc.so.6")
                lib.malloc_trim  # noqa: B018 - present in every glibc; AttributeError otherwise
            except (OSError, AttributeError):  # pragma: no cover - no glibc after all
                lib = None
        _GLIBC.append(lib)
    return _GLIBC[0]


def scoped(method):
    """Run a recognizer's method under `model_call(self.threads)`."""
    import functools

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with model_call(getattr(self, "threads", None)):
            return method(self, *args, **kwargs)

    return wrapper
