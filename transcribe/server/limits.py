"""Connections: how many, how long one may take to send its request, and logging floods once.

Every connection holds a file descriptor; a process has about a thousand by default. Idle
connections that never send a request (a flood, or slow clients) used to take them all: the
listening socket's accepts then failed with EMFILE, /health and every transcription waited, and each
failed accept logged a traceback. Now:

- at most `max_connections` connections are held (HTTP and WebSocket together); one more is answered
  503 at once and closed, before it sends anything;
- a connection that has not sent a request's headers `header_timeout_s` after it opened (or after its
  previous response) is closed; an idle keep-alive connection is closed after `keep_alive_s`
  (uvicorn's timeout_keep_alive); request headers are bounded by h11 (uvicorn's 16 KiB default);
- at start the process's file-descriptor limit is raised to fit `max_connections` where the system
  allows, and the server refuses to start where it cannot;
- the log says such things once a minute, with a count of those not written (OnceAMinute).
"""
from __future__ import annotations

import errno
import json
import logging
import time
from typing import Optional

log = logging.getLogger("transcribe.server")

MAX_CONNECTIONS = 500
HEADER_TIMEOUT_S = 10.0
KEEP_ALIVE_S = 5.0
SPARE_FDS = 32  # descriptors besides the connections: models, spooled uploads, the listening socket
# Connections accepted in one go (asyncio accepts up to its `backlog` at each wake-up, before the
# over-limit ones are answered and closed: their descriptors are freed a few loop turns later, while
# more batches come in); eight times that is kept free for them. The kernel's queue of
# connections not yet accepted is LISTEN_BACKLOG long (a short one would make clients retry their SYN).
ACCEPT_BATCH = 16
LISTEN_BACKLOG = 1024

_BUSY_BODY = json.dumps({"error": {"message": "the server has too many connections: try again later",
                                   "type": "server_error", "param": None, "code": "too_many_connections"}}).encode()
BUSY = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n"
        b"connection: close\r\ncontent-length: " + str(len(_BUSY_BODY)).encode() + b"\r\n\r\n" + _BUSY_BODY)

_RESOURCE_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}


def limited_protocol(base: type, max_connections: int, header_timeout_s: float) -> type:
    """A subclass of uvicorn's HTTP protocol `base` holding at most `max_connections` connections
    and closing those that send no request's headers within `header_timeout_s`."""

    class Limited(base):  # type: ignore[misc, valid-type]
        _header_timer = None
        _armed_cycle = None

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            if len(self.connections) > max_connections:
                log.warning("over the connection limit (--max-connections %d): new connections get 503",
                            max_connections, extra={"once_a_minute": "connections"})
                transport.write(BUSY)
                transport.close()
                return
            self._arm()

        def _arm(self) -> None:
            self._disarm()
            self._armed_cycle = self.cycle
            self._header_timer = self.loop.call_later(header_timeout_s, self._header_timeout)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _header_timeout(self) -> None:
            self._header_timer = None
            if self.cycle is self._armed_cycle and not self.transport.is_closing():
                log.warning("closed a connection that sent no request within %g s (--header-timeout-s)",
                            header_timeout_s, extra={"once_a_minute": "header-timeout"})
                self.transport.close()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()

        def handle_websocket_upgrade(self, *args) -> None:
            self._disarm()  # the socket is the WebSocket's now (its own idle timeout)
            return super().handle_websocket_upgrade(*args)

        def connection_lost(self, exc) -> None:
            self._disarm()
            super().connection_lost(exc)

    Limited.__name__ = Limited.__qualname__ = f"Limited{base.__name__}"
    return Limited


def server_class() -> type:
    """uvicorn.Server, whose listening sockets keep a long kernel queue (LISTEN_BACKLOG) while asyncio
    accepts ACCEPT_BATCH connections at a time (uvicorn gives both the one `backlog`)."""
    import uvicorn

    class Server(uvicorn.Server):
        async def startup(self, sockets=None) -> None:
            await super().startup(sockets=sockets)
            for sock in sockets or ():
                try:
                    sock.listen(LISTEN_BACKLOG)
                except OSError:  # the shorter queue stays
                    pass

    return Server


def fit_fd_limit(max_connections: int) -> Optional[str]:
    """Raises this process's file-descriptor limit to fit `max_connections` where the hard limit
    allows; why it cannot, or None."""
    try:
        import resource
    except ImportError:  # not on POSIX: the system's own limits apply
        return None
    need = max_connections + SPARE_FDS + 8 * ACCEPT_BATCH
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return None
    if hard != resource.RLIM_INFINITY and hard < need:
        return (f"--max-connections {max_connections} needs {need} file descriptors and this process may "
                f"open {hard} at most (ulimit -Hn): lower --max-connections to {max(1, hard - SPARE_FDS)}")
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    except (OSError, ValueError) as e:
        return f"cannot raise the file-descriptor limit to {need} for --max-connections: {e}"
    return None


class OnceAMinute(logging.Filter):
    """Lets through one record a minute of each flood kind (a record's `once_a_minute` extra, or the
    system running out of descriptors or buffers, as asyncio and uvicorn log it per socket), telling
    how many of that kind were not written since; other records pass."""

    def __init__(self, period_s: float = 60.0, clock=time.monotonic):
        super().__init__()
        self.period_s = period_s
        self.clock = clock
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        kind = _flood_kind(record)
        if kind is None:
            return True
        now = self.clock()
        last = self._last.get(kind)
        if last is not None and now - last < self.period_s:
            self._held[kind] = self._held.get(kind, 0) + 1
            return False
        self._last[kind] = now
        held = self._held.pop(kind, 0)
        if kind == "resources":
            error = record.exc_info[1] if record.exc_info else None
            record.msg = f"out of system resources ({error or record.getMessage()}): lower --max-connections " \
                         "or raise the descriptor limit (ulimit -n)"
            record.args = ()
            record.exc_info = record.exc_text = None  # one line, not a traceback per socket
        if held:
            record.msg = f"{record.getMessage()} ({held} more like it in the last minute not logged)"
            record.args = ()
        return True

    def install(self, *names: str) -> "OnceAMinute":
        for name in names or ("asyncio", "uvicorn.error", "transcribe.server"):
            if self not in logging.getLogger(name).filters:
                logging.getLogger(name).addFilter(self)
        return self


def _flood_kind(record: logging.LogRecord) -> Optional[str]:
    kind = getattr(record, "once_a_minute", None)
    if kind:
        return str(kind)
    error = record.exc_info[1] if record.exc_info else None
    if isinstance(error, OSError) and error.errno in _RESOURCE_ERRNOS:
        return "resources"
    message = record.getMessage() if record.args or isinstance(record.msg, str) else ""
    if "out of system resource" in message or "Too many open files" in message:
        return "resources"
    if message.startswith("Invalid HTTP request"):
        return "invalid-http"
    return None


FLOODS = OnceAMinute()  # the server's: one per process
