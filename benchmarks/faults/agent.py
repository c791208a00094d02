"""The agent's fault scenarios for benchmarks/faults.py ("Agent").

agent-kill: six managed and two unmanaged testbox containers run real metric loops; the
agent (a real ``flowcon agent`` subprocess, itval 1 s) is killed with SIGKILL at a random
moment, its state file is checked, it is restarted, and after its next round the engine's
settings are compared with what it recorded. Invariants, checked after every kill:

* the state file parses (``agent.state.from_json``) whenever it exists;
* each managed container's recorded original settings equal the settings it was created
  with, and never change from one run to the next;
* after the restarted agent's next round, each managed container's CPU limit in the
  engine is the one the agent's state says it applied (Algorithm 1's, ``min_update_cpus``
  0 so no deadband hides a difference);
* the unmanaged containers' CPU settings are never touched;
* at the end a SIGTERM gives every managed container its original settings back
  (an originally unlimited one: the whole host, see docs/agent.md).

Recovery: seconds from the restart to the end of the agent's first complete round.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

Outcome = tuple[list[str], float | None]  # (violations, recovery seconds)

REPO = Path(__file__).resolve().parents[2]
NANO = 10**9
TESTBOX = "flowcon/testbox:latest"
CPU_KEYS = ("NanoCpus", "CpuQuota", "CpuPeriod", "CpuShares")


def metric_loop(loss_expr: str, busy: int = 40, nap: str = "0.3") -> list[str]:
    """A light testbox training loop: a little CPU, one metric line per step."""
    return [
        "sh",
        "-c",
        "i=0; while true; do i=$((i+1)); j=0; "
        f"while [ $j -lt {busy} ]; do j=$((j+1)); done; "
        f'printf \'{{"step":%d,"loss":%d}}\\n\' $i $(({loss_expr})); sleep {nap}; done',
    ]


# name -> (loss expression, creation kwargs, managed); the originals cover every form
# the agent must give back: none, NanoCpus, CpuShares, quota and period.
CONTAINERS: dict[str, tuple[str, dict[str, Any], bool]] = {
    "m-flat": ("100000/(i*5000+10)", {}, True),
    "m-steady": ("1000000-i*10", {}, True),
    "m-decay": ("100000/(i+10)", {}, True),
    "m-nano": ("100000/(i+20)", {"nano_cpus": 3 * NANO // 2}, True),
    "m-shares": ("1000000-i*7", {"cpu_shares": 512}, True),
    "m-quota": ("100000/(i+5)", {"cpu_quota": 150_000, "cpu_period": 100_000}, True),
    "u-limited": ("1000000-i", {"nano_cpus": NANO}, False),
    "u-plain": ("1000000-i", {}, False),
}


def cpu_settings(container: Any) -> dict[str, int]:
    container.reload()
    hc = container.attrs["HostConfig"]
    return {k: int(hc.get(k) or 0) for k in CPU_KEYS}


class Agent:
    """A ``flowcon agent`` subprocess on a private config and state file."""

    def __init__(self, folder: Path, run_id: str, docker_host: str | None = None) -> None:
        self.state = folder / "state.json"
        self.log = folder / "agent.log"
        self.cfg = folder / "agent.yaml"
        self.cfg.write_text(
            json.dumps(  # JSON is YAML
                {
                    "state_file": str(self.state),
                    "itval": 1,
                    "itval_max": 2,
                    "alpha": 0.05,
                    "beta": 2,
                    "reference_intervals": 2,
                    "min_update_cpus": 0,
                    "control": "quota",  # the checks compare CFS quotas
                    "match_labels": {"flowcon.faults": run_id},
                    "reconnect_max": 1,
                    **({"docker_host": docker_host} if docker_host else {}),
                }
            )
        )
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO), "FLOWCON_LOG_LEVEL": "INFO"}
        with self.log.open("a") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "flowcon.cli", "agent", "--config", str(self.cfg)],
                stdout=subprocess.DEVNULL,
                stderr=log,
                env=env,
                cwd=str(REPO),
                start_new_session=True,
            )

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def read_state(self) -> tuple[dict[str, Any] | None, str]:
        """(the state as a dict, "") or (None, why it is not valid); missing = (None, "")."""
        from flowcon.agent.state_file import from_json

        try:
            text = self.state.read_text()
        except FileNotFoundError:
            return None, ""
        try:
            from_json(text)
            return json.loads(text), ""
        except (ValueError, TypeError) as exc:
            return None, f"state file invalid: {exc}"


def _expected_original(kwargs: dict[str, Any]) -> dict[str, int]:
    return {
        "NanoCpus": int(kwargs.get("nano_cpus", 0)),
        "CpuQuota": int(kwargs.get("cpu_quota", 0)),
        "CpuPeriod": int(kwargs.get("cpu_period", 0)),
        "CpuShares": int(kwargs.get("cpu_shares", 0)),
    }


def _original_from_state(raw: dict[str, Any]) -> dict[str, int]:
    """The state file's snake_case CpuSettings as HostConfig keys."""
    keys = {"nano_cpus": "NanoCpus", "cpu_quota": "CpuQuota", "cpu_period": "CpuPeriod"}
    out = {key: int(raw.get(field) or 0) for field, key in keys.items()}
    out["CpuShares"] = int(raw.get("cpu_shares") or 0)
    return out


def _engine_cpus(settings: dict[str, int]) -> float | None:
    if settings["NanoCpus"]:
        return settings["NanoCpus"] / NANO
    if settings["CpuQuota"] > 0:
        return settings["CpuQuota"] / (settings["CpuPeriod"] or 100_000)
    return None


class KillSession:
    """Set-up, one kill-and-restart per run, and the final SIGTERM check."""

    def __init__(
        self,
        client: Any,
        rng: Any,
        folder: Path,
        labels: dict[str, str] | None = None,
        docker_host: str | None = None,
    ) -> None:
        self.client = client
        self.extra_labels = dict(labels or {})
        self.rng = rng
        self.run_id = f"k{uuid.uuid4().hex[:8]}"
        self.agent = Agent(folder, self.run_id, docker_host)
        self.containers: dict[str, Any] = {}
        self.unmanaged_before: dict[str, dict[str, int]] = {}
        self.host_cpus = int(client.info()["NCPU"])
        # managed containers the agent has let go (someone else changed their CPU
        # settings: docs/agent.md), left out of the managed checks
        self.away: set[str] = set()

    def start_container(self, name: str, suffix: str = "") -> None:
        loss, kwargs, managed = CONTAINERS[name]
        labels = {
            **self.extra_labels,
            "flowcon.faults": self.run_id,
            "flowcon.metric": "loss",
        }
        if managed:
            labels["flowcon.enable"] = "true"
        self.containers[name] = self.client.containers.run(
            TESTBOX,
            metric_loop(loss),
            detach=True,
            name=f"fc-{self.run_id}-{name}{suffix}",
            labels=labels,
            network_mode="none",
            **kwargs,
        )

    def start_containers(self) -> None:
        for name in CONTAINERS:
            self.start_container(name)
        for name, (_, _, managed) in CONTAINERS.items():
            if not managed:
                self.unmanaged_before[name] = cpu_settings(self.containers[name])

    def start(self) -> None:
        """The containers, then the agent, until its first complete round."""
        self.start_containers()
        t0 = time.time()
        self.agent.start()
        state, why = self.wait_round(after=t0)
        if state is None:
            raise RuntimeError(f"the agent never completed a first round: {why}")

    def remove_containers(self) -> None:
        for c in self.client.containers.list(
            all=True, sparse=True, filters={"label": f"flowcon.faults={self.run_id}"}
        ):
            c.remove(force=True)

    def managed_ids(self) -> dict[str, str]:
        return {
            n: self.containers[n].id
            for n, (_, _, m) in CONTAINERS.items()
            if m and n not in self.away
        }

    def wait_round(self, after: float, timeout: float = 30.0) -> tuple[dict[str, Any] | None, str]:
        """The state once a round that ended after ``after`` recorded every managed
        container with its list; (None, why) on a timeout or an invalid file."""
        end = time.monotonic() + timeout
        ids = set(self.managed_ids().values())
        while time.monotonic() < end:
            state, bad = self.agent.read_state()
            if bad:
                return None, bad
            if state and state.get("updated_at", 0) > after:
                recs = state.get("containers", {})
                if all(cid in recs and recs[cid].get("list") for cid in ids):
                    return state, ""
            time.sleep(0.1)
        return None, "no complete round within 30 s of the restart"

    def check_state(self, state: dict[str, Any]) -> list[str]:
        problems: list[str] = []
        for name, cid in self.managed_ids().items():
            rec = state.get("containers", {}).get(cid) or {}
            want = _expected_original(CONTAINERS[name][1])
            got = rec.get("original")
            # NanoCpus = the whole host is "no limit" (the engine cannot clear NanoCpus, so
            # a container the agent released and re-adopted, e.g. after a pause, shows it)
            if got is not None and self._unlimited(_original_from_state(got)) != want:
                problems.append(f"{name}: recorded original {got} != created with {want}")
        mismatch = self._applied_mismatch(state)
        # The agent keeps acting (a round a second, engine calls in parallel): a
        # difference must persist across fresh snapshots to count.
        end = time.monotonic() + 5
        while mismatch and time.monotonic() < end:
            time.sleep(0.3)
            fresh, bad = self.agent.read_state()
            if bad:
                return [*problems, bad]
            mismatch = self._applied_mismatch(fresh or {})
        return problems + mismatch + self.check_unmanaged()

    def _unlimited(self, settings: dict[str, int]) -> dict[str, int]:
        if settings["NanoCpus"] == self.host_cpus * NANO:
            return {**settings, "NanoCpus": 0}
        return settings

    def _applied_mismatch(self, state: dict[str, Any]) -> list[str]:
        out = []
        recs = state.get("containers", {})
        for name, cid in self.managed_ids().items():
            applied = (recs.get(cid) or {}).get("applied_cpus")
            engine = _engine_cpus(cpu_settings(self.containers[name]))
            if applied is not None and (engine is None or abs(engine - applied) > 0.0015):
                out.append(f"{name}: state says {applied} CPUs applied, engine has {engine}")
        return out

    def check_unmanaged(self) -> list[str]:
        return [
            f"unmanaged {name} touched: {before} -> {cpu_settings(self.containers[name])}"
            for name, before in self.unmanaged_before.items()
            if cpu_settings(self.containers[name]) != before
        ]

    def one_kill(self, i: int) -> Outcome:
        # Kill at a random moment: rounds are 1 s apart, so 0-3 s lands anywhere in one.
        time.sleep(self.rng.uniform(0.0, 3.0))
        self.agent.kill()
        state, bad = self.agent.read_state()
        problems = [f"after kill {i}: {bad}"] if bad else []
        t0 = time.time()
        self.agent.start()
        state, why = self.wait_round(after=t0)
        took = time.time() - t0
        if state is None:
            return [*problems, f"after restart {i}: {why}"], None
        return problems + [f"run {i}: {p}" for p in self.check_state(state)], took

    def final_check(self) -> list[str]:
        code = self.agent.stop()
        problems = [] if code == 0 else [f"final SIGTERM: agent exited {code}"]
        for name, cid in self.managed_ids().items():
            _, kwargs, _ = CONTAINERS[name]
            want = _expected_original(kwargs)
            got = cpu_settings(self.containers[name])
            if not want["NanoCpus"] and not want["CpuQuota"]:
                want["NanoCpus"] = self.host_cpus * NANO  # unlimited: the whole host
            if any(got[k] != want[k] for k in CPU_KEYS if want[k]):
                problems.append(f"after SIGTERM {name} ({cid[:12]}): {got}, want {want}")
        return problems + self.check_unmanaged()


@contextmanager
def agent_kill_session(
    rng: Any, labels: dict[str, str] | None = None
) -> Iterator[tuple[Callable[[int], Outcome], Callable[[], list[str]]]]:
    """The ``agent-kill`` scenario: (one kill and restart, the final SIGTERM check)."""
    import docker

    client = docker.from_env()
    with tempfile.TemporaryDirectory(prefix="flowcon-faults-agent-") as tmp:
        sess = KillSession(client, rng, Path(tmp), labels)
        try:
            sess.start()
            yield sess.one_kill, sess.final_check
        finally:
            sess.agent.kill()
            sess.remove_containers()
            client.close()


# -- someone else changes a managed container ------------------------------------------

FOREIGN_FAULTS = ("update", "pause", "remove")
FOREIGN_NANO = 700_000_000  # 0.7 CPUs: a value Algorithm 1 would not pick by chance
FOREIGN_QUOTA = 70_000  # the same for a container created with --cpu-quota


class ForeignSession(KillSession):
    """agent-foreign-change: with the agent running (itval 1 s), one managed container
    is changed by someone else at a random moment of a round, the faults in turn:

    * ``update``: ``docker update`` of its CPU limit (the docker CLI, as an operator
      would). Rule (docs/agent.md, "Changes made by someone else"): the change wins; the
      agent lets the container go (its state record says ``hands_off``), never writes
      its settings again, and the others get Algorithm 1's limits. The container is then
      replaced by a fresh one, which the agent manages.
    * ``pause``: paused for 2-3 rounds, then unpaused. A paused container is not
      running (the engine does not list it as such): the agent releases it (its share
      goes to the others, its originals go back) and it rejoins NL when unpaused, as a
      new container would (docs/agent.md).
    * ``remove``: removed (``docker rm -f``): it leaves the state; a fresh one replaces it.

    Checks after each: the agent is alive, the state file valid, the invariants of
    agent-kill for every managed container, the unmanaged ones untouched. Recovery: the
    fault to the round that shows its effect (hands off, released, or back in its list).
    """

    replaced = 0

    def _alive(self) -> list[str]:
        proc = self.agent.proc
        if proc is not None and proc.poll() is None:
            return []
        return [f"the agent died: {self.agent.log.read_text(errors='replace')[-500:]}"]

    def _record(self, cid: str) -> dict[str, Any] | None:
        state, _ = self.agent.read_state()
        return ((state or {}).get("containers") or {}).get(cid)

    def _wait(self, until: Callable[[], bool], timeout: float = 15.0) -> float | None:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if until():
                return time.monotonic() - t0
            time.sleep(0.1)
        return None

    def _replace(self, name: str) -> None:
        """A fresh container in place of ``name`` (same settings, new id)."""
        with contextlib.suppress(Exception):
            self.containers[name].remove(force=True)
        self.replaced += 1
        self.start_container(name, suffix=f"-r{self.replaced}")
        self.away.discard(name)

    def one_fault(self, i: int) -> Outcome:
        fault = FOREIGN_FAULTS[i % len(FOREIGN_FAULTS)]
        name = self.rng.choice(sorted(self.managed_ids()))
        c = self.containers[name]
        time.sleep(self.rng.uniform(0.0, 2.0))  # anywhere in a round
        problems: list[str] = []
        took: float | None
        if fault == "update":
            quota = bool(CONTAINERS[name][1].get("cpu_quota"))
            flag = ["--cpu-quota", str(FOREIGN_QUOTA)] if quota else ["--cpus", "0.7"]
            subprocess.run(["docker", "update", *flag, c.id], check=True, capture_output=True)
            self.away.add(name)
            took = self._wait(lambda: bool((self._record(c.id) or {}).get("hands_off")))
            if took is None:
                problems.append(f"{name}: never handed off after a foreign docker update")
            time.sleep(2.5)  # two more rounds: nothing may write the limit back
            got = cpu_settings(c)
            key, want = ("CpuQuota", FOREIGN_QUOTA) if quota else ("NanoCpus", FOREIGN_NANO)
            if got[key] != want:
                problems.append(f"{name}: the foreign {key}={want} was overwritten: {got}")
            rec = self._record(c.id) or {}
            if rec.get("managed") or rec.get("list"):
                problems.append(f"{name}: still managed after the foreign change: {rec}")
            t0 = time.time()
            self._replace(name)
        elif fault == "pause":
            c.pause()
            self.away.add(name)
            time.sleep(self.rng.uniform(2.0, 3.0))
            problems += self._alive()
            paused = self._record(c.id)
            if paused is not None and paused.get("list"):
                problems.append(f"{name}: still in list {paused['list']} after 2 s paused")
            c.unpause()
            self.away.discard(name)
            t0 = time.time()
        else:
            c.remove(force=True)
            self.away.add(name)
            took = self._wait(lambda: self._record(c.id) is None)
            if took is None:
                problems.append(f"{name}: still in the state 15 s after its removal")
            t0 = time.time()
            self._replace(name)
        state, why = self.wait_round(after=t0)
        if fault == "pause":
            took = time.time() - t0 if state is not None else None
        problems += self._alive()
        if state is None:
            return [*problems, f"{fault} {i}: {why}"], None
        return problems + [f"{fault} {i}: {p}" for p in self.check_state(state)], took


@contextmanager
def agent_foreign_change_session(
    rng: Any, labels: dict[str, str] | None = None
) -> Iterator[tuple[Callable[[int], Outcome], Callable[[], list[str]]]]:
    """The ``agent-foreign-change`` scenario: (one fault, the final SIGTERM check)."""
    import docker

    client = docker.from_env()
    with tempfile.TemporaryDirectory(prefix="flowcon-faults-foreign-") as tmp:
        sess = ForeignSession(client, rng, Path(tmp), labels)
        try:
            sess.start()
            yield sess.one_fault, sess.final_check
        finally:
            sess.agent.kill()
            sess.remove_containers()
            client.close()


# -- hostile output ----------------------------------------------------------------------

DONE_STEP = 999_999  # every generator's last line: {"step": 999999, "loss": 1}
BACKTRACKING_REGEX = r"(?P<value>(a|aa)+)$"  # Fibonacci(n) splits of n a's before a "b"
RSS_LIMIT_MB = 256.0


def _awk(program: str) -> list[str]:
    """A testbox container command: run an awk program, then print the done line and
    stay up (so the agent keeps reading it to the end)."""
    done = f'printf \'{{"step":{DONE_STEP},"loss":1}}\\n\''
    return ["sh", "-c", f"awk '{program}'; {done}; sleep 3600"]


# name -> (labels beyond flowcon.enable, command); about 10^5 lines in all.
HOSTILE: dict[str, tuple[dict[str, str], list[str]]] = {
    # JSON that is not ours: truncated, nested deeply, wrong types, arrays, huge numbers.
    "garbage": (
        {"flowcon.metric": "loss"},
        _awk(
            "BEGIN { for (i = 0; i < 40000; i++) { k = i % 8;"
            ' if (k == 0) print "{\\"step\\":" i ",\\"loss\\":";'
            ' else if (k == 1) { s = ""; for (j = 0; j < 200; j++) s = s "["; print s }'
            ' else if (k == 2) print "{\\"step\\":\\"x\\",\\"loss\\":\\"abc\\"}";'
            ' else if (k == 3) print "[1,2,3]";'
            ' else if (k == 4) print "{\\"step\\":1e400,\\"loss\\":1e400}";'
            ' else if (k == 5) print "{\\"loss\\":{\\"a\\":1}}";'
            ' else if (k == 6) print "\\377\\376\\375 not utf-8 {\\"loss\\":1}";'
            ' else print "plain text " i } }'
        ),
    ),
    # NaN/inf/null values and lines written in pieces (partial lines interleaved).
    "nonfinite": (
        {"flowcon.metric": "loss"},
        _awk(
            "BEGIN { for (i = 0; i < 40000; i++) { k = i % 5;"
            ' if (k == 0) print "{\\"step\\":" i ",\\"loss\\":NaN}";'
            ' else if (k == 1) print "{\\"step\\":" i ",\\"loss\\":Infinity}";'
            ' else if (k == 2) print "{\\"step\\":" i ",\\"loss\\":null}";'
            ' else if (k == 3) { printf "{\\"step\\":%d,", i; fflush();'
            ' printf "\\"loss\\":%d}\\n", i }'
            ' else print "{\\"step\\":" i ",\\"loss\\":" 1 / (i + 1) "}" } }'
        ),
    ),
    # Two 10 MB lines among ordinary ones: over max_line_bytes, dropped with bounded memory.
    "huge": (
        {"flowcon.metric": "loss"},
        _awk(
            'BEGIN { s = "a"; for (j = 0; j < 24; j++) s = s s; s = substr(s, 1, 10000000);'
            ' for (i = 0; i < 100; i++) { print "{\\"step\\":" i ",\\"loss\\":" 100 - i "}";'
            ' if (i == 30 || i == 60) print "{\\"loss\\":\\"" s "\\"}" } }'
        ),
    ),
    # A regex label built to backtrack, and lines that make it do so.
    "regex": (
        {"flowcon.metric.regex": BACKTRACKING_REGEX},
        _awk(
            'BEGIN { s = "a"; for (j = 0; j < 6; j++) s = s s;'
            ' for (i = 0; i < 20000; i++) print s "b" }'
        ),
    ),
}


class RunSession:
    """A scenario whose runs each start their own containers (label flowcon.faults=<run>)
    and their own agent."""

    def __init__(self, client: Any, folder: Path, labels: dict[str, str] | None = None) -> None:
        self.client = client
        self.folder = folder
        self.extra_labels = dict(labels or {})
        self.run_id = ""

    def remove_containers(self) -> None:
        """Remove this run's containers, retrying: at this scale the engine's answers
        can time out, and nothing may be left behind."""
        if not self.run_id:
            return
        from concurrent.futures import ThreadPoolExecutor

        selector = {"label": f"flowcon.faults={self.run_id}"}

        def remove(c: Any) -> None:
            with contextlib.suppress(Exception):
                c.remove(force=True)

        for _ in range(5):
            try:
                found = self.client.containers.list(all=True, sparse=True, filters=selector)
            except Exception:  # the engine is slow to answer: try again
                time.sleep(5)
                continue
            if not found:
                return
            with ThreadPoolExecutor(4) as pool:
                list(pool.map(remove, found))


class HostileSession(RunSession):
    """Each run: the hostile containers and a fresh agent; the agent must read them to
    the end without dying, within RSS_LIMIT_MB, and switch the regex off."""

    def one_run(self, i: int) -> tuple[list[str], float | None, float]:
        """(violations, seconds to read everything, peak RSS in MB)."""
        import psutil

        self.run_id = f"h{uuid.uuid4().hex[:8]}"
        run_dir = self.folder / self.run_id
        run_dir.mkdir()
        agent = Agent(run_dir, self.run_id)
        names: dict[str, str] = {}
        try:
            agent.start()
            assert agent.proc is not None
            proc = psutil.Process(agent.proc.pid)
            t0 = time.monotonic()
            for name, (labels, cmd) in HOSTILE.items():
                c = self.client.containers.run(
                    TESTBOX,
                    cmd,
                    detach=True,
                    name=f"fc-{self.run_id}-{name}",
                    labels={
                        **self.extra_labels,
                        "flowcon.faults": self.run_id,
                        "flowcon.enable": "true",
                        **labels,
                    },
                    network_mode="none",
                )
                names[name] = c.id
            peak, done = 0.0, False
            end = t0 + 300
            while time.monotonic() < end and agent.proc.poll() is None:
                peak = max(peak, proc.memory_info().rss / 2**20)
                if self._read_to_the_end(agent, names):
                    done = True
                    break
                time.sleep(0.2)
            took = time.monotonic() - t0
            return self._problems(agent, done, peak), took if done else None, peak
        finally:
            agent.kill()
            self.remove_containers()

    def _read_to_the_end(self, agent: Agent, names: dict[str, str]) -> bool:
        state, _ = agent.read_state()
        if not state:
            return False
        recs = state.get("containers", {})
        for name, cid in names.items():
            if name == "regex":
                continue
            if ((recs.get(cid) or {}).get("view") or {}).get("step") != DONE_STEP:
                return False
        return "metric regex switched off" in agent.log.read_text(errors="replace")

    def _problems(self, agent: Agent, done: bool, peak: float) -> list[str]:
        out: list[str] = []
        text = agent.log.read_text(errors="replace")
        if agent.proc is not None and agent.proc.poll() is not None:
            out.append(f"the agent died (exit {agent.proc.returncode}): {text[-500:]}")
        if not done:
            out.append("the agent did not read every container to its last line in 300 s")
        if peak > RSS_LIMIT_MB:
            out.append(f"agent peak RSS {peak:.0f} MB > {RSS_LIMIT_MB:.0f} MB")
        if "Traceback" in text:
            out.append("a traceback in the agent's log: " + text[text.index("Traceback") :][:500])
        if "metric regex switched off" not in text:
            out.append("the backtracking regex was never switched off")
        return out


@contextmanager
def _run_sessions(
    make: Callable[[Any, Path], RunSession], prefix: str, timeout: int = 60
) -> Iterator[RunSession]:
    """A client and a scratch folder for a RunSession scenario; its containers are
    removed and the client closed, pass or fail."""
    import docker

    client = docker.from_env(timeout=timeout)
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        sess = make(client, Path(tmp))
        try:
            yield sess
        finally:
            sess.remove_containers()
            client.close()


@contextmanager
def agent_hostile_session(
    rng: Any, labels: dict[str, str] | None = None
) -> Iterator[Callable[[int], tuple[list[str], float | None, float]]]:
    """The ``agent-hostile-output`` scenario: one run = the generators read to the end."""
    del rng  # every run is the same input; the engine's timing varies

    def make(client: Any, folder: Path) -> HostileSession:
        return HostileSession(client, folder, labels)

    with _run_sessions(make, "flowcon-faults-hostile-") as sess:
        assert isinstance(sess, HostileSession)
        yield sess.one_run


# -- the engine restarted under the agent ---------------------------------------------------

RESUME_WITHIN_S = 5.0


@contextmanager
def agent_engine_restart_session(
    rng: Any, labels: dict[str, str] | None = None
) -> Iterator[tuple[Callable[[int], Outcome], Callable[[], list[str]]]]:
    """The ``agent-engine-restart`` scenario on a private dockerd with --live-restore
    (containers keep running while it is down): each run stops the engine, starts it
    again 1-3 s later, and waits for the agent's first complete round after the engine
    answers. Violations: the agent died, it took more than RESUME_WITHIN_S, a managed
    container left its lists, or the engine's limits differ from the state's; the final
    check as in agent-kill. Recovery: engine answering -> first complete round."""
    import docker

    from flowcon.testing.private_engine import PRIVATE_HOST, setup_private, teardown_private

    with tempfile.TemporaryDirectory(prefix="flowcon-faults-restart-") as tmp:
        engine, created_bridge = setup_private(Path(tmp) / "dockerd.log", live_restore=True)
        client = docker.DockerClient(base_url=PRIVATE_HOST, timeout=30)
        sess = KillSession(client, rng, Path(tmp), labels, docker_host=PRIVATE_HOST)
        try:
            sess.start()

            def seen_back() -> int:
                return sess.agent.log.read_text(errors="replace").count("engine answers again")

            def one_restart(i: int) -> Outcome:
                time.sleep(rng.uniform(0.0, 2.0))  # anywhere in a round
                back = seen_back()
                engine.stop()
                time.sleep(rng.uniform(1.0, 3.0))
                engine.start(live_restore=True)
                up = time.time()
                state, why = sess.wait_round(after=up, timeout=30)
                took = time.time() - up
                problems = (
                    []
                    if sess.agent.proc and sess.agent.proc.poll() is None
                    else [f"the agent died: {sess.agent.log.read_text()[-500:]}"]
                )
                if state is None:
                    return [*problems, f"restart {i}: {why}"], None
                if seen_back() <= back:  # the round must be one after the outage
                    problems.append(f"restart {i}: the agent never logged the engine back")
                if took > RESUME_WITHIN_S:
                    problems.append(f"restart {i}: control resumed {took:.1f} s after the engine")
                return problems + [f"restart {i}: {p}" for p in sess.check_state(state)], took

            yield one_restart, sess.final_check
        finally:
            sess.agent.kill()
            try:
                sess.remove_containers()
            finally:
                client.close()
                teardown_private(engine, created_bridge)


# -- scale: many containers started and stopped in bursts -------------------------------

SCALE_TOTAL = 300
SCALE_LABELED_EVERY = 3  # every third container opts in: 100 of 300
SCALE_BURST = 50


def _sleeper(i: int) -> list[str]:
    """An idle container that still reports now and then (a metric line every 5 s)."""
    return [
        "sh",
        "-c",
        f'i=0; while true; do i=$((i+1)); printf \'{{"step":%d,"loss":%d}}\\n\' $i '
        f"$((100000/(i+{i % 7 + 1}))); sleep 5; done",
    ]


class ScaleSession(RunSession):
    """One run: SCALE_TOTAL containers started in bursts of SCALE_BURST under a running
    agent, then removed in bursts. Violations: an unlabeled container touched, a labeled
    one never limited, the agent dead or a traceback in its log, the state keeping removed
    containers. Figures: seconds until every labeled container was limited after the
    last burst, the agent's CPU seconds per round, its peak RSS."""

    def _start(self, i: int) -> Any:
        labels = {**self.extra_labels, "flowcon.faults": self.run_id, "flowcon.metric": "loss"}
        if i % SCALE_LABELED_EVERY == 0:
            labels["flowcon.enable"] = "true"
        return self.client.containers.run(
            TESTBOX,
            _sleeper(i),
            detach=True,
            name=f"fc-{self.run_id}-{i:03d}",
            labels=labels,
            network_mode="none",
        )

    def one_run(self, i: int) -> tuple[list[str], float | None, dict[str, float]]:
        from concurrent.futures import ThreadPoolExecutor

        import psutil

        self.run_id = f"s{uuid.uuid4().hex[:8]}"
        run_dir = self.folder / self.run_id
        run_dir.mkdir()
        agent = Agent(run_dir, self.run_id)
        problems: list[str] = []
        try:
            agent.start()
            assert agent.proc is not None
            proc = psutil.Process(agent.proc.pid)
            peak = 0.0
            started: list[Any] = []
            with ThreadPoolExecutor(4) as pool:
                for first in range(0, SCALE_TOTAL, SCALE_BURST):
                    burst = range(first, min(first + SCALE_BURST, SCALE_TOTAL))
                    started += list(pool.map(self._start, burst))
                    peak = max(peak, proc.memory_info().rss / 2**20)
            last_burst = time.monotonic()
            labeled = [c for k, c in enumerate(started) if k % SCALE_LABELED_EVERY == 0]
            plain = [c for k, c in enumerate(started) if k % SCALE_LABELED_EVERY]
            cpu0, rounds0 = proc.cpu_times(), self._rounds(agent)
            limited_after = self._wait_limited(labeled, proc, timeout=120)
            peak = max(peak, proc.memory_info().rss / 2**20)
            time.sleep(10)  # steady state: rounds over 100 managed containers
            cpu1, rounds1 = proc.cpu_times(), self._rounds(agent)
            per_round = (cpu1.user + cpu1.system - cpu0.user - cpu0.system) / max(
                1, rounds1 - rounds0
            )
            if limited_after is None:
                problems.append("not every labeled container was limited within 120 s")
            problems += [
                f"unlabeled {c.name} touched: {s}"
                for c in plain
                if (s := cpu_settings(c)) != {k: 0 for k in CPU_KEYS}
            ]
            self.remove_containers()  # stop in bursts (8 at a time), under the agent
            time.sleep(5)
            state, bad = agent.read_state()
            left = [cid for cid in (state or {}).get("containers", {})]
            if bad:
                problems.append(bad)
            if left:
                problems.append(f"the state still holds {len(left)} removed containers")
            if agent.proc.poll() is not None:
                problems.append(f"the agent died (exit {agent.proc.returncode})")
            text = agent.log.read_text(errors="replace")
            if "Traceback" in text:
                problems.append("traceback: " + text[text.index("Traceback") :][:500])
            figures = {
                "limited_all_s": -1.0 if limited_after is None else limited_after - last_burst,
                "round_cpu_s": per_round,
                "peak_rss_mb": peak,
            }
            return problems, figures["limited_all_s"] if limited_after else None, figures
        finally:
            agent.kill()
            self.remove_containers()

    @staticmethod
    def _rounds(agent: Agent) -> int:
        state, _ = agent.read_state()
        return int((state or {}).get("rounds") or 0)

    @staticmethod
    def _wait_limited(labeled: list[Any], proc: Any, timeout: float) -> float | None:
        end = time.monotonic() + timeout
        pending = list(labeled)
        while pending and time.monotonic() < end:
            pending = [c for c in pending if not cpu_settings(c)["NanoCpus"]]
            if pending:
                time.sleep(1.0)
        return None if pending else time.monotonic()


@contextmanager
def agent_scale_session(
    rng: Any, labels: dict[str, str] | None = None
) -> Iterator[Callable[[int], tuple[list[str], float | None, dict[str, float]]]]:
    """The ``agent-scale`` scenario (see ``ScaleSession``)."""
    del rng

    def make(client: Any, folder: Path) -> ScaleSession:
        return ScaleSession(client, folder, labels)

    with _run_sessions(make, "flowcon-faults-scale-", timeout=120) as sess:
        assert isinstance(sess, ScaleSession)
        yield sess.one_run
