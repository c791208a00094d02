"""FlowCon: growth-efficiency resource control for deep-learning training containers.

This top-level module stays stdlib-only: training images import ``flowcon.report``
without installing the agent's dependencies.
"""

from flowcon.report import report

__all__ = ["__version__", "report"]
__version__ = "0.1.0"
