"""flowcon.web.static: pages and vendored files, nothing else (no traversal)."""

from __future__ import annotations

import pytest

from flowcon.web.static import static_response


def test_pages_and_files() -> None:
    for path in ("/ui", "/ui/"):
        found = static_response(path, "allocator.html")
        assert found is not None
        assert found[0] == 200
        assert found[2].startswith("text/html")
        assert b"/static/uPlot.iife.min.js" in found[1]
    js = static_response("/static/uPlot.iife.min.js", "agent.html")
    assert js is not None
    assert js[0] == 200
    assert "javascript" in js[2]
    assert len(js[1]) > 40000
    css = static_response("/static/uPlot.min.css", "agent.html")
    assert css is not None
    assert css[2].startswith("text/css")
    assert static_response("/api/v1/jobs", "allocator.html") is None


@pytest.mark.parametrize(
    "path",
    [
        "/static/../static.py",
        "/static/..%2fstatic.py",
        "/static/static.py",
        "/static/uPlot.LICENSE",
        "/static/.hidden.js",
        "/static/sub/x.js",
        "/static/",
        "/static/missing.js",
    ],
)
def test_refuses_anything_else(path: str) -> None:
    found = static_response(path, "agent.html")
    assert found is not None
    assert found[0] == 404


def test_vendored_uplot_has_its_licence() -> None:
    from importlib import resources

    lic = resources.files("flowcon.web").joinpath("static", "uPlot.LICENSE").read_text()
    assert "MIT License" in lic
    assert "Leon Sorokin" in lic
