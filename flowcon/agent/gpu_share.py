"""GPU shares under CUDA MPS for containers that share a GPU (docs/agent.md, "GPU shares").

The engine cannot change a running container's GPU share, and MPS takes a client's share
(``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``, ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``) only when the
client starts. So, once a round, for the opted-in containers (``flowcon.gpu.share=true``)
found on one GPU together (by the agent's GPU measurement):

1. ``flowcon.core.gpu_share.decide`` turns their Algorithm 1 limits into shares and says
   whether the predicted gain over the next interval exceeds the measured restart cost;
2. if it does, the agent writes each changed container's share to
   ``<share_dir>/<short id>.json`` (the container mounts ``share_dir`` read-only at
   ``/flowcon/gpu-share``; ``flowcon.elastic`` reads its file at start and sets the two
   variables before CUDA starts) and restarts it (``docker restart``: SIGTERM, the job
   checkpoints, the same container starts again and resumes); otherwise nothing changes
   and the agent's back-off decides when it looks again (the next round, itval later);
3. the restart cost is measured: the container's last step line before the restart to its
   first after, used for its next decision.

Where the MPS control daemon is not running the agent says so once and controls CPU only.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from flowcon.agent.limit_executor import Tracked
from flowcon.core.gpu_share import Decision, Share, Tenant, decide, env

log = logging.getLogger("flowcon.agent.gpu_share")


class MpsControl(Protocol):
    """Whether the host runs the MPS control daemon (and why not)."""

    def running(self) -> tuple[bool, str]: ...


class MpsDaemon:
    """The real one: asks ``nvidia-cuda-mps-control`` (``get_server_list``) over the pipe
    directory clients use (``CUDA_MPS_PIPE_DIRECTORY``, default /tmp/nvidia-mps)."""

    def __init__(self, pipe_dir: str | None = None, exe: str = "nvidia-cuda-mps-control") -> None:
        self.pipe_dir = pipe_dir
        self.exe = exe

    def running(self) -> tuple[bool, str]:
        path = shutil.which(self.exe)
        if path is None:
            return False, f"{self.exe} not found"
        e = dict(os.environ)
        if self.pipe_dir:
            e["CUDA_MPS_PIPE_DIRECTORY"] = self.pipe_dir
        try:
            out = subprocess.run(
                [path],
                input="get_server_list\n",
                env=e,
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return False, f"{self.exe}: {exc}"
        if out.returncode != 0:
            why = (out.stderr or out.stdout).strip()[:200] or f"exit {out.returncode}"
            return False, f"the MPS control daemon does not answer ({why})"
        return True, ""


@dataclass
class _Restart:
    last_step: int | None
    last_step_ts: float | None
    share: Share


def share_file(share_dir: Path, cid: str) -> Path:
    return share_dir / f"{cid[:12]}.json"


def write_share(path: Path, share: Share, gpu_uuid: str) -> None:
    """The container's share, atomically (what flowcon.elastic reads at start)."""
    body = {
        "env": env(share),
        "pct": share.pct,
        "mem_limit_bytes": share.mem_limit,
        "gpu": gpu_uuid,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w") as fh:
        json.dump(body, fh)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def read_share(path: Path) -> Share | None:
    try:
        raw = json.loads(path.read_text())
        return Share(int(raw["pct"]), int(raw["mem_limit_bytes"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


class GpuShares:
    """The per-round MPS decisions (see the module docstring)."""

    def __init__(
        self,
        mps: MpsControl,
        share_dir: str | Path,
        restart: Callable[[str], None],
        default_cost_s: float = 60.0,
        min_pct: int = 5,
        background: bool = True,
    ) -> None:
        self.mps = mps
        self.share_dir = Path(share_dir)
        self.restart = restart
        self.default_cost_s = default_cost_s
        self.min_pct = min_pct
        self.background = background
        self.cost_s: dict[str, float] = {}  # measured restart cost per container
        self.in_effect: dict[str, Share] = {}  # what each container started with
        self._restarting: dict[str, _Restart] = {}
        self._checked: bool | None = None
        self.decisions: list[tuple[str, Decision]] = []  # (GPU UUID, decision), last round

    def available(self) -> bool:
        """Whether MPS shares can be applied here (asked once, said once)."""
        if self._checked is None:
            ok, why = self.mps.running()
            self._checked = ok
            if not ok:
                log.warning(
                    "GPU shares off: %s; the agent controls CPU only (flowcon.gpu.share is "
                    "ignored until the agent restarts with the MPS control daemon running)",
                    why,
                )
        return self._checked

    def _settle(self, tracked: Mapping[str, Tracked]) -> None:
        """Restarted containers that stepped again: their share is in effect, and the time
        without a step is their restart cost."""
        for cid in list(self._restarting):
            t = tracked.get(cid)
            if t is None:
                del self._restarting[cid]
                continue
            r = self._restarting[cid]
            p = t.monitor.progress
            first = p.first_step_ts  # the first step line of this round
            if first is None or (r.last_step_ts is not None and first <= r.last_step_ts):
                continue
            if r.last_step_ts is not None:
                self.cost_s[cid] = first - r.last_step_ts
            self.in_effect[cid] = r.share
            del self._restarting[cid]
            log.info(
                "GPU share in effect container=%s pct=%d restart_cost_s=%s",
                t.name,
                r.share.pct,
                f"{self.cost_s.get(cid, 0):.1f}",
            )

    def tenants(self, tracked: Mapping[str, Tracked]) -> dict[str, list[tuple[Tracked, int]]]:
        """GPU UUID -> the opted-in containers on it (with their memory there)."""
        by_gpu: dict[str, list[tuple[Tracked, int]]] = {}
        for t in tracked.values():
            if not (t.managed and t.policy.gpu_share and t.list is not None):
                continue
            for g in t.monitor.usage.gpus:
                by_gpu.setdefault(g.uuid, []).append((t, g.mem_bytes))
        return by_gpu

    def round(
        self, tracked: Mapping[str, Tracked], horizon_s: float, dry_run: bool = False
    ) -> list[tuple[str, Decision]]:
        """Decide for every shared GPU; apply where it pays. Returns the decisions."""
        self.decisions = []
        if not self.available():
            return []
        self._settle(tracked)
        for gone in (set(self.in_effect) | set(self.cost_s)) - set(tracked):
            self.in_effect.pop(gone, None)
            self.cost_s.pop(gone, None)
        for uuid, users in sorted(self.tenants(tracked).items()):
            if len(users) < 2 or any(t.monitor.cid in self._restarting for t, _ in users):
                continue  # alone on its GPU, or a share change still under way
            d = decide(
                [self._tenant(t, mem) for t, mem in users],
                self._gpu_total(users, uuid),
                horizon_s,
                self.default_cost_s,
                self.min_pct,
            )
            self.decisions.append((uuid, d))
            log.info(
                "GPU share decision gpu=%s apply=%s gain_s=%.1f cost_s=%.1f shares=%s (%s)",
                uuid,
                d.apply,
                d.gain_s,
                d.cost_s,
                {t.name: d.shares[t.monitor.cid].pct for t, _ in users},
                d.reason,
            )
            if d.apply and not dry_run:
                self._apply(uuid, d, [t for t, _ in users])
        return self.decisions

    def _tenant(self, t: Tracked, mem: int) -> Tenant:
        cid = t.monitor.cid
        if cid not in self.in_effect:  # an agent restarted since: the file it started with
            found = read_share(share_file(self.share_dir, cid))
            if found is not None:
                self.in_effect[cid] = found
        now = self.in_effect.get(cid)
        return Tenant(
            cid,
            t.limit,
            t.monitor.tracker.current(),
            mem,
            pct=now.pct if now else None,
            mem_limit=now.mem_limit if now else None,
            restart_cost_s=self.cost_s.get(cid),
        )

    @staticmethod
    def _gpu_total(users: list[tuple[Tracked, int]], uuid: str) -> int:
        """The GPU's memory, from the agent's last sample of it (0: unknown)."""
        return max(
            (g.mem_total for t, _ in users for g in t.monitor.usage.gpus if g.uuid == uuid),
            default=0,
        )

    def _apply(self, uuid: str, d: Decision, users: list[Tracked]) -> None:
        for t in users:
            cid = t.monitor.cid
            share = d.shares[cid]
            if self.in_effect.get(cid) == share:
                continue
            write_share(share_file(self.share_dir, cid), share, uuid)
            p = t.monitor.progress
            self._restarting[cid] = _Restart(p.step, p.step_ts, share)
            log.info("GPU share container=%s pct=%d: restarting it to apply", t.name, share.pct)
            if self.background:
                threading.Thread(target=self._restart, args=(cid,), daemon=True).start()
            else:
                self._restart(cid)

    def _restart(self, cid: str) -> None:
        try:
            self.restart(cid)
        except Exception as exc:  # the next round sees it did not come back
            log.warning("restart of %s to apply its GPU share failed: %s", cid[:12], exc)
