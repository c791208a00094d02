"""The live view's files (``flowcon/web/static``, package data) for ``/ui`` and
``/static/*``: plain HTML + JS with uPlot vendored (no CDN at run time)."""

from __future__ import annotations

from importlib import resources

_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "application/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}

Response = tuple[int, bytes, str]


def _read(name: str) -> bytes | None:
    if not name or "/" in name or "\\" in name or name.startswith("."):
        return None
    ext = name[name.rfind(".") :] if "." in name else ""
    if ext not in _TYPES:
        return None
    f = resources.files("flowcon.web").joinpath("static", name)
    if not f.is_file():
        return None
    return f.read_bytes()


def static_response(path: str, page: str) -> Response | None:
    """``/ui`` (and ``/ui/``) -> the service's page ``page`` (e.g. ``allocator.html``),
    ``/static/NAME`` -> that file; None for any other path (the caller's own routes)."""
    if path.rstrip("/") == "/ui":
        name = page
    elif path.startswith("/static/"):
        name = path[len("/static/") :]
    else:
        return None
    data = _read(name)
    if data is None:
        return 404, b'{"error": "no such file"}', "application/json"
    return 200, data, _TYPES[name[name.rfind(".") :]]
