"""Who may talk to the server: the `Host` and `Origin` checks, and the API key's start-up checks.

A server on this machine is reachable by every web page the user opens: a page may open a
WebSocket to ws://127.0.0.1:8000 (browsers send its `Origin`, and do not apply CORS to WebSockets),
or POST a form to it; and a page whose own name the attacker points at 127.0.0.1 (DNS rebinding)
talks to it as its own origin, with that name in `Host`. So:

- `Host` (when sent) must name the server: localhost, 127.0.0.1, [::1], the address it listens on
  (for 0.0.0.0 or ::, any IP address and this machine's host name), or a name in --allowed-hosts
  ("*": any). DNS rebinding always comes with the attacker's name in `Host`.
- `Origin` (when sent: browsers) must be the server's own (http or https, a host as above, the
  port the request came to) or one in --allowed-origins ("*": any; "null": sandboxed pages and
  local files). Programs that are not browsers send no `Origin` and are not concerned.

Both hold with or without an API key.
"""
from __future__ import annotations

import ipaddress
import socket
from typing import Iterable, Optional
from urllib.parse import urlsplit

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
WILDCARD_HOSTS = ("0.0.0.0", "::", "")


def _ip(name: str) -> Optional[ipaddress._BaseAddress]:
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        return None


def split_host(value: str) -> tuple[str, Optional[int]]:
    """A Host header (or an origin's netloc) as (name, port): lower case, brackets and a final dot
    removed. Raises ValueError on a malformed one."""
    value = value.strip()
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            raise ValueError(value)
        name, rest = value[1:end], value[end + 1:]
        if rest and not rest.startswith(":"):
            raise ValueError(value)
        port = rest[1:] if rest else None
    else:
        name, _, port = value.partition(":")
        port = port if ":" in value else None
    if port is not None and not (port.isdigit() and len(port) <= 5):
        raise ValueError(value)
    name = name.lower().rstrip(".")
    if not name or any(c.isspace() or c in "/\\@?#" for c in name):
        raise ValueError(value)
    return name, int(port) if port is not None else None


class Access:
    """The Host and Origin allow-lists of one server (see the module's docstring)."""

    def __init__(self, bind_host: str = "127.0.0.1", allowed_hosts: Iterable[str] = (),
                 allowed_origins: Iterable[str] = ()):
        extra = [h.strip().lower() for h in allowed_hosts if h.strip()]
        self.any_host = "*" in extra
        names = set(LOOPBACK_NAMES) | {n for n in extra if n != "*"}
        bind = bind_host.strip().lower().strip("[]")
        self.any_ip = bind in WILDCARD_HOSTS
        if self.any_ip:
            for name in (socket.gethostname(), socket.getfqdn()):
                if name:
                    names.add(name.lower().rstrip("."))
        elif bind:
            names.add(bind.rstrip("."))
        self.names = frozenset(names)
        origins = [o.strip().lower().rstrip("/") for o in allowed_origins if o.strip()]
        self.any_origin = "*" in origins
        self.origins = frozenset(o for o in origins if o != "*")

    def host_ok(self, name: str) -> bool:
        if self.any_host or name in self.names:
            return True
        ip = _ip(name)
        return ip is not None and (ip.is_loopback or self.any_ip)

    def check_host(self, header: Optional[str]) -> Optional[str]:
        """Why a request with this Host header is refused, or None."""
        if header is None:
            return None  # not a browser's request (browsers always send it): nothing to rebind
        try:
            name, _ = split_host(header)
        except ValueError:
            return f"malformed Host header {header[:100]!r}"
        if self.host_ok(name):
            return None
        return (f"Host {header[:100]!r} is not a name of this server (DNS rebinding?): start it with "
                f"--allowed-hosts {name[:100]} to accept it")

    def check_origin(self, header: Optional[str], server_port: Optional[int]) -> Optional[str]:
        """Why a request with this Origin header, received on `server_port`, is refused, or None."""
        if header is None or self.any_origin:
            return None
        origin = header.strip().lower().rstrip("/")
        if origin in self.origins:
            return None
        refused = (f"Origin {header[:100]!r} is not allowed (a web page of another site): start the "
                   f"server with --allowed-origins {header[:100]} to accept it")
        parts = urlsplit(origin)
        if parts.scheme not in ("http", "https") or parts.path or parts.query:
            return refused
        try:
            name, port = split_host(parts.netloc)
        except ValueError:
            return refused
        port = port if port is not None else (443 if parts.scheme == "https" else 80)
        if self.host_ok(name) and (server_port is None or port == server_port):
            return None
        return refused


def key_problem(key: Optional[str], source: str) -> Optional[str]:
    """Why an API key cannot be used (empty, surrounding white space, characters a header cannot
    carry as they are), or None. `source` names where it came from (--api-key or the variable)."""
    if key is None:
        return None
    if not key:
        return (f"{source} is empty: give a key, or none at all (then unset it) to serve without one")
    if key != key.strip():
        return f"{source} has white space around it: a client could never send it; remove it"
    if not all(0x21 <= ord(c) <= 0x7E for c in key):
        return (f"{source} holds characters other than printable ASCII (no spaces): a client's "
                "'Authorization: Bearer' header could never match it")
    return None
