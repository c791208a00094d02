"""A stand-in for the rendezvous store where a test expects no store call."""

from __future__ import annotations


class NoStore:
    """A stand-in for the rendezvous store where a test expects no store call."""

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"no store call expected ({name})")
