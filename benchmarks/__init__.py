"""Benchmarks and fault injection: scripts, each run as ``python3 benchmarks/NAME.py``
(flowcon from the installed package) or ``python3 -m benchmarks.NAME`` from the repo root;
a package so that the tests import them as ``benchmarks.NAME``."""
