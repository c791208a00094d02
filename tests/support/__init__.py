"""What the tests share besides fixtures (those stay in tests/conftest.py).

``tests/`` is on the path (pyproject: ``[tool.pytest.ini_options] pythonpath``), so a test
imports these as ``from support.session import REPO``. What benchmarks also need at run
time lives in the product, in ``flowcon.testing`` (free_port, the private engine, the step
job), and is imported from there.

- ``session``: the repo's path, the label on everything a test creates, this session's id.
- ``scripts``: a Python file outside any package (a job's script) imported by its path.
- ``waiting``: ``wait_for``, the poll every engine test uses.
- ``no_store``: a rendezvous store that fails any call.
- ``stub_engine``: a fake Docker engine API on a socket (engine version checks).
- ``swarm_fixtures``: executor and swarm fixtures (a pytest plugin) and the step job spec.
- ``allocator_daemon``: the allocator daemon on the real engine, as the engine tests run it.
- ``launcher_procs``: stop-free launchers started in their own sessions, and their logs.
- ``small_trace``: the small hand-checked traces of the baseline tests.
- ``stopfree_job.py``: a script, not imported: the stop-free tests' worker processes.
"""
