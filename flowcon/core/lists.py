"""The three lists of Algorithm 1 (paper section 4.2)."""

from __future__ import annotations

from enum import StrEnum


class ListName(StrEnum):
    """NL: young and growing fast; WL: near convergence; CL: converging, growing slowly."""

    NL = "NL"
    WL = "WL"
    CL = "CL"
