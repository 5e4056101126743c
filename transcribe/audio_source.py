"""Where audio comes from: which paths can be read (a regular file, or a stream: a named pipe, `<(...)`'s
/dev/fd/N, a socket), a named pipe opened without waiting forever for its writer, and a stream that cannot
seek read whole within a bound. No numpy: the CLI checks its inputs with these before it imports any."""
from __future__ import annotations

import os
from typing import Optional

from .errors import AudioError

# The most bytes read from a stream that cannot seek (standard input, a pipe), which is held in
# memory whole: 2 GiB, about 18 hours of 16 kHz 16-bit mono or 3 hours of 48 kHz stereo WAV.
MAX_STREAM_BYTES = 2 << 30

# How long a named pipe given by path is waited on for its writer's first bytes.
STREAM_WAIT_S = 10.0


def source_problem(path: str) -> "tuple[Optional[str], bool]":
    """Why the file `path` cannot be read as audio (None when it can: a regular file, or a stream), and
    whether it is a stream (a named pipe, `<(...)`'s /dev/fd/N, a socket: read whole, bounded by
    MAX_STREAM_BYTES, then decoded). Only stat()s it: a named pipe without a writer is not waited on."""
    import errno
    import stat

    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        if e.errno == errno.ENOENT and os.path.islink(path):
            return "a symbolic link to a file that does not exist", False
        if e.errno == errno.ENOENT:
            return "no such file", False
        return (e.strerror or str(e)).lower(), False  # too many levels of symbolic links, permission denied
    if stat.S_ISREG(mode):
        return None, False
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
        return None, True
    if stat.S_ISDIR(mode):
        return "is a directory, not an audio file", False
    kind = "a character device" if stat.S_ISCHR(mode) else "a block device" if stat.S_ISBLK(mode) else "special"
    return f"not a regular file ({kind}); give an audio file, or pipe it to '-'", False


def open_pipe(path: str):
    """A named pipe opened for reading, waiting at most STREAM_WAIT_S for a writer's first bytes (or its
    closing the pipe): a pipe no one writes to is an AudioError, never a hang."""
    import fcntl
    import select

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # does not wait for a writer
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        if not poller.poll(STREAM_WAIT_S * 1000):  # data, or a writer that came and went (POLLHUP)
            raise AudioError(f"{path}: nothing was written to this pipe in {STREAM_WAIT_S:g} s")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)  # then block for data
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bounded(f, name: str, limit: Optional[int] = None) -> bytes:
    """All of a non-seekable stream, or an AudioError once it passes `limit` bytes."""
    limit = MAX_STREAM_BYTES if limit is None else limit
    chunks, n = [], 0
    while True:
        chunk = f.read(min(1 << 20, limit + 1 - n))
        if not chunk:
            break
        if isinstance(chunk, str):
            raise AudioError(f"{name}: file object is open in text mode; open it with 'rb'")
        chunks.append(chunk)
        n += len(chunk)
        if n > limit:
            raise AudioError(f"{name}: more than {limit / (1 << 30):.3g} GiB from a stream that cannot seek; "
                             "save it to a file and give its path")
    return b"".join(chunks)


