"""The HTTP server: OpenAI's audio API and live WebSocket streaming (`transcribe serve`).

Needs the optional extra: `pip install "transcribe[server]"` (FastAPI, uvicorn, python-multipart).
`create_app(Engine({"id": model}), api_key=..., max_upload_mb=..., access=security.Access(...),
stream_idle_s=...)` gives the ASGI application (the connection limits are uvicorn's: cli.build_server);
`transcribe.server.cli.main(argv)` is the command.
"""
from __future__ import annotations

__all__ = ["create_app", "Engine"]


def __getattr__(name):  # lazy: FastAPI is imported only when the server is used
    if name == "create_app":
        from .app import create_app

        return create_app
    if name == "Engine":
        from .engine import Engine

        return Engine
    raise AttributeError(name)
