"""A stand-in for the CUDA MPS control daemon (``flowcon.agent.gpu_share.MpsControl``)."""

from __future__ import annotations


class FakeMps:
    """``running``: whether the daemon answers; ``why``: what the real one says when not."""

    def __init__(self, running: bool = True, why: str = "nvidia-cuda-mps-control not found"):
        self.up = running
        self.why = why
        self.asked = 0

    def running(self) -> tuple[bool, str]:
        self.asked += 1
        return (True, "") if self.up else (False, self.why)
