"""Fault injection with figures: each scenario runs N times, its invariant is checked
after every run, and a table says how many runs broke it (docs/reliability.md).

- ``scenarios``: the framework (runs, checks, the table), the scenarios without a real
  agent or allocator process (api, inputs, interrupted-commands), the scenario list and
  ``main``, whose docstring describes every scenario;
- ``agent``: the agent's scenarios (agent-kill, agent-engine-restart, ...);
- ``allocator``: the allocator's (allocator-kill, allocator-engine-restart, ...).

Run it as ``python3 benchmarks/faults.py`` or, from the repo root,
``python3 -m benchmarks.faults``.
"""
