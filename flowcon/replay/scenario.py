"""Replay scenarios: which training jobs start when, and the agent's parameters.

A scenario file is YAML::

    name: fixed
    alpha: 0.05          # the agent's alpha (a fraction: 0.05 = the paper's 5 %)
    itval: 20            # the agent's itval in seconds
    agent: {beta: 2}     # optional: further keys for the agent's config file
    threads: pinned      # optional: quota (default: the images size their torch pool
                         # from their CPU quota) or pinned (FLOWCON_THREADS = host CPUs)
    adapt_threads: true  # optional: false sets FLOWCON_ADAPT_THREADS=0 in every job
    jobs:
      - name: vae
        model: vae       # shorthand for image flowcon/train-vae:latest
        start: 0         # seconds after the replay starts
      - name: mnist
        image: flowcon/train-mnist:latest
        start: 40
        iterations: 300  # optional: FLOWCON_ITERATIONS for the job
        env: {FLOWCON_BATCH: 32}
        command: ["python3", "/opt/flowcon/train/mnist.py"]  # optional

Parsing is pure (no I/O besides reading the file) and reports every bad field by its
path, e.g. ``jobs[2].start: expected a number >= 0, got 'soon'``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from flowcon.engine.images import DEFAULT_ITERATIONS, image_tag, model_of
from flowcon.textfile import NotText, read_text, safe_load_yaml

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
ITERATIONS_ENV = "FLOWCON_ITERATIONS"
THREADS_ENV = "FLOWCON_THREADS"
ADAPT_ENV = "FLOWCON_ADAPT_THREADS"
THREAD_MODES = ("quota", "pinned")

TOP_KEYS = ("name", "description", "alpha", "itval", "agent", "threads", "adapt_threads", "jobs")
JOB_KEYS = ("name", "image", "model", "start", "iterations", "env", "command")


class ScenarioError(ValueError):
    """A scenario that cannot be replayed; the message names every bad field."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        listing = "\n".join(f"  {p}" for p in problems)
        super().__init__(f"{source}: invalid scenario\n{listing}")


@dataclass(frozen=True)
class Job:
    name: str
    image: str
    start: float  # seconds after the replay starts
    iterations: int | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    command: tuple[str, ...] | None = None

    def environment(self) -> dict[str, str]:
        env = dict(self.env)
        if self.iterations is not None:
            env[ITERATIONS_ENV] = str(self.iterations)
        return env


@dataclass(frozen=True)
class Scenario:
    name: str
    alpha: float
    itval: float
    jobs: tuple[Job, ...]
    description: str = ""
    agent: Mapping[str, Any] = field(default_factory=dict)
    threads: str = "quota"  # quota: the images' default; pinned: FLOWCON_THREADS = host CPUs
    adapt_threads: bool = True  # False: FLOWCON_ADAPT_THREADS=0 in every job

    def job_environment(self, job: Job, host_cpus: int) -> dict[str, str]:
        """A job's environment with the replay's thread settings; the job's own env wins.

        ``threads: pinned`` sets FLOWCON_THREADS to the host's CPUs (what an off-the-shelf
        script does); ``quota`` sets nothing (the images size their pool from the quota at
        start). FLOWCON_ADAPT_THREADS is always set, 1 or 0, so whether flowcon.report
        resizes the pool as the limit changes never depends on the images' own rule (they
        treat a FLOWCON_THREADS override without it as pinned for good)."""
        env = job.environment()
        if self.threads == "pinned":
            env.setdefault(THREADS_ENV, str(max(1, host_cpus)))
        env.setdefault(ADAPT_ENV, "1" if self.adapt_threads else "0")
        return env

    def scaled(
        self, time_scale: float = 1.0, iterations: int | None = None, work_scale: float = 1.0
    ) -> Scenario:
        """Start times multiplied by time_scale; every job's iterations replaced if given,
        else multiplied by work_scale (jobs of training images without explicit iterations
        scale their image's default)."""
        jobs = []
        for j in self.jobs:
            its = j.iterations
            if iterations is not None:
                its = iterations
            elif work_scale != 1.0:
                base = its
                if base is None:
                    model = model_of(j.image)
                    base = DEFAULT_ITERATIONS.get(model) if model else None
                if base is not None:
                    its = max(1, round(base * work_scale))
            jobs.append(replace(j, start=round(j.start * time_scale, 3), iterations=its))
        return replace(self, jobs=tuple(jobs))

    def agent_config(self) -> dict[str, Any]:
        """The agent's config mapping: the extra keys, then alpha and itval."""
        cfg = dict(self.agent)
        cfg["alpha"] = self.alpha
        cfg["itval"] = self.itval
        return cfg

    def to_dict(self) -> dict[str, Any]:
        jobs = []
        for j in self.jobs:
            d: dict[str, Any] = {"name": j.name, "image": j.image, "start": j.start}
            if j.iterations is not None:
                d["iterations"] = j.iterations
            if j.env:
                d["env"] = dict(j.env)
            if j.command is not None:
                d["command"] = list(j.command)
            jobs.append(d)
        out: dict[str, Any] = {"name": self.name}
        if self.description:
            out["description"] = self.description
        out["alpha"] = self.alpha
        out["itval"] = self.itval
        if self.agent:
            out["agent"] = dict(self.agent)
        if self.threads != "quota":
            out["threads"] = self.threads
        if not self.adapt_threads:
            out["adapt_threads"] = False
        out["jobs"] = jobs
        return out


def _is_number(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(float(value))
    )


class _Checker:
    def __init__(self) -> None:
        self.problems: list[str] = []

    def bad(self, where: str, msg: str) -> None:
        self.problems.append(f"{where}: {msg}")

    def unknown_keys(self, where: str, data: Mapping[str, Any], known: tuple[str, ...]) -> None:
        for key in data:
            if key not in known:
                prefix = f"{where}." if where else ""
                self.bad(f"{prefix}{key}", f"unknown field (known: {', '.join(known)})")

    def number(self, where: str, value: Any, minimum: float, strict: bool) -> float | None:
        ok = _is_number(value) and (value > minimum if strict else value >= minimum)
        if not ok:
            op = ">" if strict else ">="
            self.bad(where, f"expected a number {op} {minimum:g}, got {value!r}")
            return None
        return float(value)


def _job(chk: _Checker, where: str, raw: Any) -> Job | None:
    if not isinstance(raw, dict):
        chk.bad(where, f"expected a mapping with name, image or model, start; got {raw!r}")
        return None
    before = len(chk.problems)
    chk.unknown_keys(where, raw, JOB_KEYS)
    name = raw.get("name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        chk.bad(
            f"{where}.name",
            f"expected a name of letters, digits, '_', '.', '-' (max 63), got {name!r}",
        )
    image = raw.get("image")
    model = raw.get("model")
    _job_image(chk, where, image, model)
    if "start" not in raw:
        chk.bad(f"{where}.start", "missing (seconds after the replay starts)")
        start = None
    else:
        start = chk.number(f"{where}.start", raw["start"], 0, strict=False)
    iterations = raw.get("iterations")
    if iterations is not None and (
        not isinstance(iterations, int) or isinstance(iterations, bool) or iterations < 1
    ):
        chk.bad(f"{where}.iterations", f"expected an integer >= 1, got {iterations!r}")
    env = _job_env(chk, where, raw.get("env") or {})
    command = _job_command(chk, where, raw.get("command"))
    if len(chk.problems) > before:
        return None
    assert isinstance(name, str)
    assert start is not None
    ref = image.strip() if isinstance(image, str) else image_tag(str(model))
    return Job(name, ref, start, iterations, env, command)


def _job_image(chk: _Checker, where: str, image: Any, model: Any) -> None:
    """Exactly one of ``image`` (a reference) and ``model`` (a local training image)."""
    if image is not None and model is not None:
        chk.bad(f"{where}.image", "give either image or model, not both")
    elif image is None and model is None:
        chk.bad(f"{where}.image", "missing (or give model: vae|mnist|...)")
    elif image is not None and (not isinstance(image, str) or not image.strip()):
        chk.bad(f"{where}.image", f"expected an image reference, got {image!r}")
    elif model is not None and (not isinstance(model, str) or not NAME_RE.match(model)):
        chk.bad(f"{where}.model", f"expected a training image name like 'vae', got {model!r}")


def _job_env(chk: _Checker, where: str, env_raw: Any) -> dict[str, str]:
    env: dict[str, str] = {}
    if not isinstance(env_raw, dict):
        chk.bad(f"{where}.env", f"expected a mapping NAME: value, got {env_raw!r}")
        return env
    for key, value in env_raw.items():
        if not isinstance(key, str) or not _ENV_NAME.match(key):
            chk.bad(f"{where}.env", f"bad variable name {key!r}")
        elif not isinstance(value, str | int | float) or isinstance(value, bool):
            chk.bad(f"{where}.env.{key}", f"expected a string or number, got {value!r}")
        else:
            env[key] = str(value)
    return env


def _job_command(chk: _Checker, where: str, command_raw: Any) -> tuple[str, ...] | None:
    """A string runs under /bin/sh -c; a list is the argv."""
    if command_raw is None:
        return None
    if isinstance(command_raw, str) and command_raw.strip():
        return ("/bin/sh", "-c", command_raw)
    if (
        isinstance(command_raw, list)
        and command_raw
        and all(isinstance(c, str) for c in command_raw)
    ):
        return tuple(command_raw)
    chk.bad(f"{where}.command", f"expected a string or a list of strings, got {command_raw!r}")
    return None


def parse_scenario(data: Any, source: str = "<scenario>", default_name: str = "") -> Scenario:
    """Validate a loaded YAML document; ScenarioError lists every bad field."""
    chk = _Checker()
    if not isinstance(data, dict):
        raise ScenarioError(source, [f"(top level): expected a mapping, got {type(data).__name__}"])
    chk.unknown_keys("", data, TOP_KEYS)
    name = data.get("name", default_name)
    if not isinstance(name, str) or not NAME_RE.match(name):
        chk.bad("name", f"expected a name of letters, digits, '_', '.', '-', got {name!r}")
    description = data.get("description", "")
    if not isinstance(description, str):
        chk.bad("description", f"expected text, got {description!r}")
    alpha, itval, agent = _agent_settings(chk, data)
    threads, adapt = _thread_settings(chk, data)
    jobs = _jobs(chk, data.get("jobs"))
    if chk.problems:
        raise ScenarioError(source, chk.problems)
    assert isinstance(name, str)
    assert alpha is not None
    assert itval is not None
    ordered = tuple(sorted(jobs, key=lambda j: j.start))
    return Scenario(name, alpha, itval, ordered, str(description), dict(agent), threads, adapt)


def _thread_settings(chk: _Checker, data: dict[str, Any]) -> tuple[str, bool]:
    """``threads`` (quota|pinned, default quota) and ``adapt_threads`` (default true)."""
    threads = data.get("threads", "quota")
    if threads not in THREAD_MODES:
        chk.bad("threads", f"expected one of {', '.join(THREAD_MODES)}, got {threads!r}")
        threads = "quota"
    adapt = data.get("adapt_threads", True)
    if not isinstance(adapt, bool):
        chk.bad("adapt_threads", f"expected true or false, got {adapt!r}")
        adapt = True
    return str(threads), adapt


def _agent_settings(
    chk: _Checker, data: dict[str, Any]
) -> tuple[float | None, float | None, dict[str, Any]]:
    """alpha and itval (required, top level) and the other agent config keys."""
    alpha = None
    if "alpha" not in data:
        chk.bad("alpha", "missing (the agent's threshold, e.g. 0.05 for 5 %)")
    else:
        alpha = chk.number("alpha", data["alpha"], 0, strict=True)
        if alpha is not None and alpha >= 1:  # the agent's own range (flowcon.agent.config)
            chk.bad("alpha", f"expected a fraction in (0, 1) (0.05 = 5 %), got {data['alpha']!r}")
    itval = None
    if "itval" not in data:
        chk.bad("itval", "missing (the agent's interval in seconds)")
    else:
        itval = chk.number("itval", data["itval"], 0, strict=True)
    agent = data.get("agent") or {}
    if not isinstance(agent, dict) or not all(isinstance(k, str) for k in agent):
        chk.bad("agent", f"expected a mapping of agent config keys, got {agent!r}")
        agent = {}
    for key in ("alpha", "itval"):
        if key in agent:
            chk.bad(f"agent.{key}", f"set {key} at the top level of the scenario")
    return alpha, itval, agent


def _jobs(chk: _Checker, jobs_raw: Any) -> list[Job]:
    jobs: list[Job] = []
    if not isinstance(jobs_raw, list) or not jobs_raw:
        chk.bad("jobs", f"expected a non-empty list of jobs, got {jobs_raw!r}")
        return jobs
    seen: dict[str, int] = {}
    for i, raw in enumerate(jobs_raw):
        job = _job(chk, f"jobs[{i}]", raw)
        if job is None:
            continue
        if job.name in seen:
            chk.bad(f"jobs[{i}].name", f"duplicate {job.name!r} (also jobs[{seen[job.name]}])")
            continue
        seen[job.name] = i
        jobs.append(job)
    return jobs


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file."""
    p = Path(path)
    try:
        text = read_text(p)
    except OSError as exc:
        raise ScenarioError(str(p), [f"(file): cannot read: {exc.strerror or exc}"]) from None
    except NotText as exc:
        raise ScenarioError(str(p), [f"(file): {exc}"]) from None
    try:
        data = safe_load_yaml(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ScenarioError(str(p), [f"(yaml): not valid YAML{at}: {problem}"]) from None
    return parse_scenario(data, str(p), default_name=p.stem)


def dump_scenario(scenario: Scenario, header: str = "") -> str:
    """YAML text of a scenario (with an optional comment header)."""
    body = yaml.safe_dump(scenario.to_dict(), sort_keys=False, default_flow_style=None)
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]
    return ("\n".join(lines) + "\n" if lines else "") + body
