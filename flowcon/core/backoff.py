"""itval and its exponential back-off (Algorithm 1 line 17, Algorithm 2 lines 8 and 16)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Itval:
    initial: float
    cap: float
    value: float = 0.0

    def __post_init__(self) -> None:
        if self.initial <= 0 or self.cap < self.initial:
            raise ValueError(f"need 0 < itval ({self.initial}) <= itval_max ({self.cap})")
        if self.value <= 0:
            self.value = self.initial

    def double(self) -> float:
        """All containers in CL: run less often, up to the cap."""
        self.value = min(self.value * 2.0, self.cap)
        return self.value

    def reset(self) -> float:
        """A container arrived or left: back to the initial interval."""
        self.value = self.initial
        return self.value
