"""The web page: `GET /` and its files under `/ui/` (transcribe/server/static/, shipped in the package).

Plain HTML, CSS and JavaScript, no build step and nothing fetched from elsewhere (the page works with
no network but the server's). The page holds nothing secret, so it is served without the API key
(the guard lets `is_ui_path` through); every call it makes sends the key the user typed, kept in the
browser's sessionStorage. Caching: the page itself is `no-cache` (revalidated by its ETag each time),
and names its files with their content hash (`ui/app.js?v=HASH`), which are then served as immutable;
a file asked for without its current hash is `no-cache` too. `transcribe serve --no-ui` leaves it out.
"""
from __future__ import annotations

import hashlib
from importlib import resources
from typing import Optional

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .openai_api import error_body

# the files under /ui/ and their content types
FILES = {
    "app.js": "text/javascript; charset=utf-8",
    "mic.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
}
PAGE = "index.html"
IMMUTABLE = "public, max-age=31536000, immutable"
# The page may load its own files, talk to its own server (HTTP and WebSocket) and play the file the
# user picked (a blob: URL); nothing else.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; media-src 'self' blob:; "
       "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
PAGE_HEADERS = {"content-security-policy": CSP, "x-frame-options": "DENY", "referrer-policy": "no-referrer"}


def is_ui_path(path: str) -> bool:
    """Whether a request path is the page or one of its files (served without the API key)."""
    return path == "/" or path.startswith("/ui/")


def _read(name: str) -> bytes:
    return (resources.files("transcribe.server") / "static" / name).read_bytes()


def _etag(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:20]


class Assets:
    """The page and its files, read once from the package, with their hashes."""

    def __init__(self):
        self.files = {name: _read(name) for name in FILES}
        self.tags = {name: _etag(data) for name, data in self.files.items()}
        page = _read(PAGE).decode("utf-8")
        for name, tag in self.tags.items():  # {{app.js}} -> ui/app.js?v=HASH
            page = page.replace("{{" + name + "}}", f"ui/{name}?v={tag}")  # relative: a proxy's prefix holds
        if "{{" in page:
            raise RuntimeError(f"the page names a file that is not served: {page[page.index('{{'):][:40]}")
        self.page = page.encode("utf-8")
        self.page_tag = _etag(self.page)

    def size(self) -> int:
        """Bytes of JavaScript and CSS the page loads."""
        return sum(len(d) for d in self.files.values())


def _answer(request: Request, body: bytes, tag: str, media_type: str, cache: str,
            extra: Optional[dict] = None) -> Response:
    headers = {"etag": f'"{tag}"', "cache-control": cache, "x-content-type-options": "nosniff", **(extra or {})}
    match = request.headers.get("if-none-match", "")
    if f'"{tag}"' in [t.strip().removeprefix("W/") for t in match.split(",")]:
        return Response(status_code=304, headers=headers)
    if request.method == "HEAD":
        return Response(status_code=200, headers={**headers, "content-length": str(len(body))},
                        media_type=media_type)
    return Response(body, media_type=media_type, headers=headers)


def add_ui_routes(app) -> Assets:
    """Adds GET (and HEAD) `/` and `/ui/{name}` to the FastAPI `app`; returns the assets served."""
    assets = Assets()

    @app.api_route("/", methods=["GET", "HEAD"], include_in_schema=False)
    async def page(request: Request):
        return _answer(request, assets.page, assets.page_tag, "text/html; charset=utf-8", "no-cache", PAGE_HEADERS)

    @app.api_route("/ui/{name}", methods=["GET", "HEAD"], include_in_schema=False)
    async def asset(name: str, request: Request):
        if name not in FILES:
            return JSONResponse(error_body(404, f"no such file: /ui/{name[:100]}"), status_code=404)
        tag = assets.tags[name]
        cache = IMMUTABLE if request.query_params.get("v") == tag else "no-cache"
        return _answer(request, assets.files[name], tag, FILES[name], cache)

    return assets
