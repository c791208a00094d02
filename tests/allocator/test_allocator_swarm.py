"""The allocator daemon on the two-node swarm (scripts/swarm-up.sh), real swarm executor.

Same checks as the engine scenario, shorter: decisions as the core makes them, services on
the nodes of their placement with the allocation in their environment, completion.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from flowcon.alloc.admission import admit
from flowcon.alloc.model import Job, ThroughputCurve
from flowcon.allocator.config import load_config
from flowcon.allocator.daemon import Allocator
from flowcon.allocator.target import ExecutorTarget
from flowcon.client.http import AllocatorClient
from flowcon.testing.ratejob import rate_job_spec

pytest.register_assert_rewrite("support.swarm_fixtures")
from support.swarm_fixtures import swarm_executor_for  # noqa: E402
from support.waiting import wait_for  # noqa: E402

pytest_plugins = ("support.swarm_fixtures",)
pytestmark = [pytest.mark.swarm, pytest.mark.docker]

PROFILE = {1: 2.0, 2: 3.6, 4: 6.4, 8: 10.0}


def test_scenario_on_the_swarm(swarm, labeled, test_run_id, tmp_path: Path):

    (tmp_path / "a.yaml").write_text(
        "allocator: {listen: '127.0.0.1:0', state_dir: state, slot_seconds: 2}\n"
    )
    cfg = load_config(tmp_path / "a.yaml")
    ex = swarm_executor_for(swarm, labeled(), str(tmp_path / "ckpt"), 5.0, gpus_per_node=4)
    inv = ex.inventory
    alloc = Allocator(cfg, ExecutorTarget(ex, inv))
    alloc.start(port=0)
    try:
        client = AllocatorClient(alloc.url, alloc.token)
        now = time.time()
        rid = test_run_id
        trace = [(f"sa{rid}", 60, 90), (f"sb{rid}", 150, 60), (f"sc{rid}", 10000, 30)]
        admitted: list[Job] = []
        for name, its, dl in trace:
            core = Job(name, now, float(its), now + dl, ThroughputCurve(PROFILE))
            expected = admit(core, admitted, now, 8, cfg.slot_seconds).admitted
            assert client.submit(rate_job_spec(name, its, dl, PROFILE))["admitted"] is expected
            if expected:
                admitted.append(core)
        names = [j.job_id for j in admitted]
        assert len(names) == 2

        def running():
            out = {}
            for n in names:
                st = ex.job(n)
                rec = alloc.store.get_job(n)
                if st is None or st.status != "running" or rec is None or rec.gpus == 0:
                    return None
                out[n] = (st, rec)
            return out

        states = wait_for(running, timeout=90)
        for st, rec in states.values():
            nodes = {inv.nodes[int(p[0])].name for p in rec.placement}
            assert set(st.placement) == nodes  # one service per placed node
            assert st.gpus == rec.gpus

        def finished():
            js = {j["name"]: j for j in client.jobs()}
            return js if all(js[n]["state"] == "completed" for n in names) else None

        js = wait_for(finished, timeout=120, every=1.0)
        assert all(js[n]["deadline_met"] for n in names), js
    finally:
        alloc.stop(stop_jobs=True)
        for name in list(ex.jobs()):
            ex.remove(name, grace_s=1.0)
