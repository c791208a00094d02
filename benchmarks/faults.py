"""``python3 benchmarks/faults.py [options]``: runs the package ``benchmarks/faults/`` (the
fault injection benchmark) as ``python3 -m benchmarks.faults`` would.

Run as a file, this folder is first on the path, so ``faults`` here is that package (a
folder wins over a module of the same name); flowcon comes from the installed package.
"""

from __future__ import annotations

import runpy

if __name__ == "__main__":
    runpy.run_module("faults", run_name="__main__")
