"""The live views in a real headless Chromium: the allocator's /ui against a running
allocator (in-process, plan-only) with three jobs, the agent's /ui against its endpoints
with recorded rounds. Checks that the jobs / containers and their numbers are in the
rendered DOM and saves screenshots under the test's tmp_path (FLOWCON_SCREENSHOT_DIR: also
copied there). Skips only when no chromium is installed (scripts/install.sh installs it;
FLOWCON_NO_CHROMIUM=1 skips it there)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from flowcon.agent.exporter import Exporter
from flowcon.agent.webview import AgentWeb
from flowcon.allocator.config import AllocatorConfig
from flowcon.allocator.daemon import Allocator
from flowcon.client.http import AllocatorClient
from flowcon.web.health import Liveness
from flowcon.web.history import History
from flowcon.web.server import HttpServer

pytestmark = pytest.mark.browser

CHROMIUM = next(
    (p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if p),
    None,
)
if CHROMIUM is None or os.environ.get("FLOWCON_NO_CHROMIUM") == "1":
    pytestmark = [  # type: ignore[assignment]
        pytest.mark.browser,
        pytest.mark.skip(
            reason="no chromium on PATH (apt-get install chromium) or FLOWCON_NO_CHROMIUM=1"
        ),
    ]

PROFILE = {"1": 10.0, "2": 18.0, "4": 32.0, "8": 50.0}


def chromium(url: str, *args: str, timeout: float = 90) -> str:
    assert CHROMIUM is not None
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",  # tests run as root in CI containers
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--hide-scrollbars",
        "--window-size=1280,1100",
        "--virtual-time-budget=8000",
        *args,
        url,
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


class Cells(HTMLParser):
    """Rows of a table body by their data-* key: {key: [cell texts]}."""

    def __init__(self, attr: str) -> None:
        super().__init__()
        self.attr = attr
        self.rows: dict[str, list[str]] = {}
        self._row: str | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "tr" and a.get(self.attr):
            self._row = a[self.attr]
            self.rows[self._row] = []  # type: ignore[index]
        elif tag == "td" and self._row is not None:
            self._cell = []

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._cell is not None and self._row is not None:
            self.rows[self._row].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr":
            self._row = None


def keep_screenshot(src: Path, name: str) -> None:
    out = os.environ.get("FLOWCON_SCREENSHOT_DIR")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        shutil.copy(src, Path(out) / name)


def job(name: str, iterations: int, deadline: float | None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": name,
        "image": "flowcon/testbox:latest",
        "command": ["true"],
        "global_batch_size": 16,
        "iterations": iterations,
        "profile": PROFILE,
    }
    if deadline is None:
        out["best_effort"] = True
    else:
        out["deadline"] = deadline
    return out


@pytest.fixture
def allocator(tmp_path: Path) -> Any:
    cfg = AllocatorConfig(
        state_dir=tmp_path / "state",
        slot_seconds=1.0,
        listen="127.0.0.1:0",
        read_token="a-read-only-token",
    )
    alloc = Allocator(cfg, target=None, total_gpus=8)
    alloc.start(port=0)
    yield alloc
    alloc.stop()


def test_allocator_view_shows_the_jobs_and_their_numbers(allocator: Any, tmp_path: Path) -> None:
    client = AllocatorClient(allocator.url, allocator.token, timeout=10)
    client.submit(job("resnet-a", 20000, 3600))
    time.sleep(1.5)  # a few planning rounds: GPUs over time
    client.submit(job("bert-b", 9000, 1800))
    client.submit(job("too-tight-c", 10**7, 120))  # dropped: cannot meet its deadline
    time.sleep(2.5)
    jobs = {j["name"]: j for j in client.jobs()}
    # reads need a token: the page takes a read token from its URL's fragment
    read_token = "a-read-only-token"
    dom = chromium(allocator.url + f"/ui#token={read_token}", "--dump-dom")
    assert 'data-loaded="1"' in dom, dom[-1500:]
    rows = Cells("data-job")
    rows.feed(dom)
    assert set(rows.rows) == {"resnet-a", "bert-b", "too-tight-c"}
    for name, cells in rows.rows.items():
        j = jobs[name]
        assert cells[0] == name
        assert cells[1] == j["state"]
        # GPUs may move on between the API call and the page's poll: same plan, same slot
        assert cells[2] == str(allocator.store.get_job(name).gpus)
        assert cells[3].endswith("%")
    assert rows.rows["too-tight-c"][1] == "dropped"
    assert int(rows.rows["resnet-a"][2]) >= 1
    assert int(rows.rows["bert-b"][2]) >= 1
    # deadline vs predicted finish: a positive slack in seconds for an admitted job
    assert re.fullmatch(r"\d+", rows.rows["resnet-a"][7])
    assert "dropped" in dom
    assert "admitted" in dom  # the decisions table
    assert dom.count("<canvas") >= 1  # uPlot drew the GPUs-per-job chart
    shot = tmp_path / "dashboard.png"
    chromium(allocator.url + f"/ui#token={read_token}", f"--screenshot={shot}")
    assert shot.stat().st_size > 10_000
    keep_screenshot(shot, "dashboard.png")


def test_agent_view_shows_lists_and_limits(tmp_path: Path) -> None:
    web = AgentWeb(Exporter(), Liveness(20.0), History(), 4, node="node1")
    ids = {"vae": "a" * 64, "mnist": "b" * 64, "mlp": "c" * 64}
    t0 = time.time() - 200
    rounds = [
        {"vae": ("NL", 1.0, 2.0), "mnist": ("NL", 1.0, 2.0), "mlp": ("NL", 1.0, 2.0)},
        {"vae": ("NL", 0.8, 1.6), "mnist": ("WL", 0.3, 1.4), "mlp": ("NL", 0.9, 1.0)},
        {"vae": ("NL", 0.7, 2.0), "mnist": ("CL", 0.02, 0.5), "mlp": ("WL", 0.2, 1.5)},
    ]
    for i, r in enumerate(rounds):
        views = [
            {
                "container_id": ids[name],
                "name": name,
                "job": f"job-{name}",
                "list": lst,
                "managed": True,
                "g": g,
                "limit": cpus / 4,
                "cpus": cpus,
                "cpu_share": cpus / 4 * 0.9,
                "step": 100 * (i + 1),
            }
            for name, (lst, g, cpus) in r.items()
        ]
        web.record_round(views, 20.0)
        # spread the points over time as real rounds would be
        web.history._points[-1]["ts"] = t0 + 20 * i
    srv = HttpServer(web.route, "127.0.0.1", 0)
    srv.start()
    try:
        url = f"http://127.0.0.1:{srv.port}/ui"
        dom = chromium(url, "--dump-dom")
        shot = tmp_path / "agent-dashboard.png"
        chromium(url, f"--screenshot={shot}")
    finally:
        srv.stop()
    assert 'data-loaded="1"' in dom, dom[-1500:]
    lists = {
        lst: re.search(rf'id="list-{lst}">(.*?)</div>\s*(?:<div id="list-|</div>)', dom, re.S)
        for lst in ("NL", "WL", "CL")
    }
    assert all(lists.values()), dom[:3000]
    assert 'data-container="vae"' in lists["NL"].group(1)  # type: ignore[union-attr]
    assert 'data-container="mlp"' in lists["WL"].group(1)  # type: ignore[union-attr]
    assert 'data-container="mnist"' in lists["CL"].group(1)  # type: ignore[union-attr]
    assert "node node1" in dom
    assert "4 CPUs" in dom
    rows = Cells("data-row")
    rows.feed(dom)
    # container, job, list, G, limit L, CPU limit, CPU used, step
    mnist = ["mnist", "job-mnist", "CL", "0.020", "0.125", "0.50", "11.3 %", "300"]
    assert rows.rows["mnist"] == mnist
    assert rows.rows["vae"][2:6] == ["NL", "0.700", "0.500", "2.00"]
    assert dom.count("<canvas") >= 2  # G and CPU limit over time
    assert shot.stat().st_size > 10_000
    keep_screenshot(shot, "agent-dashboard.png")


def test_allocator_view_shows_drained_nodes_and_avoided_gpus(tmp_path: Path) -> None:
    from flowcon.alloc.model import Topology
    from flowcon.alloc.placement import BuddyPlacer

    cfg = AllocatorConfig(
        state_dir=tmp_path / "state",
        slot_seconds=1.0,
        listen="127.0.0.1:0",
        read_token="a-read-only-token",
    )
    alloc = Allocator(cfg, target=None, total_gpus=8)
    alloc.planner.nodes = [("n0", 4), ("n1", 4)]
    alloc.planner.placer = BuddyPlacer(Topology(2, 4))
    alloc.start(port=0)
    try:
        client = AllocatorClient(alloc.url, alloc.token, timeout=10)
        client.submit({**job("resnet-a", 10**6, None), "max_gpus": 2})
        time.sleep(1.5)
        client.drain("n1")
        now = time.time()
        assert alloc.elasticity.avoid("resnet-a", "n0", ("3",), "straggler", 600.0, now) == [3]
        time.sleep(1.5)
        dom = chromium(alloc.url + "/ui#token=a-read-only-token", "--dump-dom")
        assert 'data-loaded="1"' in dom, dom[-1500:]
        rows = Cells("data-node")
        rows.feed(dom)
        assert set(rows.rows) == {"n0", "n1"}
        assert rows.rows["n1"][1] == "Drained"
        assert rows.rows["n0"][1] == "Avoided"
        assert rows.rows["n0"][4] == "resnet-a"
        assert "GPU 3 (straggler of resnet-a" in rows.rows["n0"][5]
        shot = tmp_path / "nodes.png"
        chromium(alloc.url + "/ui#token=a-read-only-token", f"--screenshot={shot}")
        keep_screenshot(shot, "nodes.png")
    finally:
        alloc.stop()
