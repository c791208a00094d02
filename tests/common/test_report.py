"""flowcon.report: metric lines, and the job side of thread-aware control (the pool
follows the container's CPU limit while torch is imported)."""

from __future__ import annotations

import importlib
import io
import json
import sys
import types
from pathlib import Path

import pytest

# The module, not the function that flowcon/__init__.py re-exports under the same name.
rp = importlib.import_module("flowcon.report")


class FakeTorch(types.ModuleType):
    """Only what the adapter touches: the intra-op pool size."""

    def __init__(self, threads: int = 2) -> None:
        super().__init__("torch")
        self.threads = threads
        self.set_calls: list[int] = []

    def get_num_threads(self) -> int:
        return self.threads

    def set_num_threads(self, n: int) -> None:
        self.set_calls.append(n)
        self.threads = n


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def torch_mod(monkeypatch: pytest.MonkeyPatch) -> FakeTorch:
    fake = FakeTorch()
    monkeypatch.setitem(sys.modules, "torch", fake)
    return fake


@pytest.fixture
def no_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "torch", raising=False)


def line_of(adapter: rp.ThreadAdapter | bool, **metrics: object) -> dict[str, object]:  # type: ignore[name-defined]
    out = io.StringIO()
    rp.report(out, adapt_threads=adapter, **metrics)
    data = json.loads(out.getvalue())
    assert isinstance(data, dict)
    return data


def test_names_match_the_contract() -> None:
    from flowcon import contract

    # report.py stays self-contained (the images embed it alone), so it repeats them.
    assert rp.THREADS_FIELD == contract.LINE_THREADS
    assert rp.ADAPT_ENV == contract.ENV_ADAPT_THREADS


# -- the CPU limit ---------------------------------------------------------------------------


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def test_cgroup_v2_cpu_max(tmp_path: Path) -> None:
    f = tmp_path / "cpu.max"
    assert rp.cpu_quota(write(f, "50000 100000\n")) == 0.5
    assert rp.cpu_quota(write(f, "250000 100000\n")) == 2.5
    assert rp.cpu_quota(write(f, "max 100000\n")) is None


def test_cgroup_v1_cfs_files(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-cpu.max")
    quota, period = tmp_path / "cpu.cfs_quota_us", tmp_path / "cpu.cfs_period_us"
    write(period, "100000\n")
    assert rp.cpu_quota(missing, write(quota, "150000\n"), str(period)) == 1.5
    assert rp.cpu_quota(missing, write(quota, "-1\n"), str(period)) is None
    write(period, "0\n")
    assert rp.cpu_quota(missing, write(quota, "50000\n"), str(period)) is None


def test_unreadable_or_garbled_limit_is_no_limit(tmp_path: Path) -> None:
    missing = str(tmp_path / "absent")
    assert rp.cpu_quota(missing, missing, missing) is None
    garbled = write(tmp_path / "cpu.max", "lots\n")
    assert rp.cpu_quota(garbled, missing, missing) is None
    assert rp.cpu_quota(write(tmp_path / "empty", ""), missing, missing) is None


def test_default_paths_are_the_module_constants(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rp, "CGROUP_V2_CPU_MAX", str(tmp_path / "absent"))
    monkeypatch.setattr(rp, "CGROUP_V1_QUOTA", write(tmp_path / "q", "75000"))
    monkeypatch.setattr(rp, "CGROUP_V1_PERIOD", write(tmp_path / "p", "100000"))
    assert rp.cpu_quota() == 0.75
    monkeypatch.setattr(rp, "CGROUP_V2_CPU_MAX", write(tmp_path / "cpu.max", "300000 100000"))
    assert rp.cpu_quota() == 3.0


def test_target_is_quota_rounded_up_within_the_cpus() -> None:
    assert rp.target_threads(0.5, 2) == 1
    assert rp.target_threads(1.2, 4) == 2
    assert rp.target_threads(8.0, 2) == 2  # a quota above the cpuset cannot use more
    assert rp.target_threads(None, 3) == 3
    assert rp.target_threads(0.01, 0) == 1


def test_affinity_counts_this_process_cpus() -> None:
    assert rp.affinity_cpus() >= 1


# -- adaptation ------------------------------------------------------------------------------


def test_recheck_is_time_based(torch_mod: FakeTorch) -> None:
    clock, limit = Clock(), {"q": None}
    reads: list[float] = []

    def quota() -> float | None:
        reads.append(clock.now)
        return limit["q"]

    a = rp.ThreadAdapter(interval=2.0, clock=clock, quota=quota, cpus=lambda: 2, enabled=True)
    assert line_of(a, step=1)["threads"] == 2
    limit["q"] = 0.5  # type: ignore[assignment]
    clock.now = 1.9
    assert line_of(a, step=2)["threads"] == 2  # not yet re-read
    clock.now = 2.0
    assert line_of(a, step=3)["threads"] == 1
    assert reads == [0.0, 2.0]
    clock.now = 3.0
    line_of(a, step=4)
    assert reads == [0.0, 2.0]


def test_set_num_threads_only_when_the_target_changes(torch_mod: FakeTorch) -> None:
    clock, limit = Clock(), {"q": 2.0}
    a = rp.ThreadAdapter(clock=clock, quota=lambda: limit["q"], cpus=lambda: 4, enabled=True)
    for q in (2.0, 2.0, 0.5, 0.7, 0.25, 1.5, 1.5, None):
        limit["q"] = q  # type: ignore[assignment]
        line_of(a, step=1)
        clock.now += 10
    # 2 is already the pool size: no call; 0.5/0.7/0.25 all mean 1; then 2; then 4.
    assert torch_mod.set_calls == [1, 2, 4]
    assert torch_mod.threads == 4


def test_the_caller_own_resize_is_not_fought_while_the_limit_stays(
    torch_mod: FakeTorch,
) -> None:
    clock = Clock()
    a = rp.ThreadAdapter(clock=clock, quota=lambda: 1.0, cpus=lambda: 2, enabled=True)
    assert line_of(a, step=1)["threads"] == 1
    torch_mod.threads = 3  # the script sized it itself
    clock.now = 5
    assert line_of(a, step=2)["threads"] == 3  # reported as is
    assert torch_mod.set_calls == [1]


def test_threads_field_only_while_adapting(torch_mod: FakeTorch) -> None:
    on = rp.ThreadAdapter(quota=lambda: 0.5, cpus=lambda: 2, enabled=True)
    off = rp.ThreadAdapter(quota=lambda: 0.5, cpus=lambda: 2, enabled=False)
    adapting = line_of(on, step=1, loss=0.5)
    assert isinstance(adapting.pop("ts"), float)
    assert adapting == {"step": 1, "loss": 0.5, "threads": 1}
    assert "threads" not in line_of(off, step=1)
    assert "threads" not in line_of(False, step=1)
    assert torch_mod.set_calls == [1]


def test_torch_absent_means_no_adaptation(no_torch: None) -> None:
    reads: list[int] = []
    a = rp.ThreadAdapter(quota=lambda: reads.append(1) or 0.5, enabled=True)  # type: ignore[func-returns-value]
    assert "threads" not in line_of(a, step=1)
    assert reads == []
    assert "torch" not in sys.modules  # never imported by report


def test_torch_imported_later_is_picked_up(no_torch: None, monkeypatch: pytest.MonkeyPatch) -> None:
    a = rp.ThreadAdapter(quota=lambda: 0.5, cpus=lambda: 2, enabled=True)
    assert "threads" not in line_of(a, step=1)
    monkeypatch.setitem(sys.modules, "torch", FakeTorch())
    assert line_of(a, step=2)["threads"] == 1


def test_opt_out_env(torch_mod: FakeTorch, monkeypatch: pytest.MonkeyPatch) -> None:
    for value in ("0", "false", "off", " No "):
        monkeypatch.setenv("FLOWCON_ADAPT_THREADS", value)
        a = rp.ThreadAdapter(quota=lambda: 0.5, cpus=lambda: 2)
        assert not a.enabled
        assert "threads" not in line_of(a, step=1)
    for value in ("1", "yes", ""):
        monkeypatch.setenv("FLOWCON_ADAPT_THREADS", value)
        assert rp.ThreadAdapter().enabled
    assert torch_mod.set_calls == []


def test_bad_env_value_is_named_and_means_the_default(
    torch_mod: FakeTorch, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FLOWCON_ADAPT_THREADS", "sometimes")
    a = rp.ThreadAdapter(quota=lambda: 0.5, cpus=lambda: 2)
    assert line_of(a, step=1)["threads"] == 1
    line_of(a, step=2)
    err = capsys.readouterr().err
    assert err.count("FLOWCON_ADAPT_THREADS='sometimes'") == 1
    assert "adapting threads (the default)" in err


def test_errors_never_break_reporting(
    torch_mod: FakeTorch, capsys: pytest.CaptureFixture[str]
) -> None:
    clock, fail = Clock(), {"on": False}

    def quota() -> float | None:
        if fail["on"]:
            raise PermissionError("cpu.max")
        return 0.5

    a = rp.ThreadAdapter(clock=clock, quota=quota, cpus=lambda: 2, enabled=True)
    assert line_of(a, step=1)["threads"] == 1
    fail["on"] = True
    clock.now = 10
    second = line_of(a, step=2)
    assert second["step"] == 2
    assert second["threads"] == 1  # the last size in use

    def broken(n: int) -> None:
        raise RuntimeError("no pool")

    torch_mod.set_num_threads = broken  # type: ignore[method-assign]  # a failing torch
    b = rp.ThreadAdapter(quota=lambda: 0.5, cpus=lambda: 2, enabled=True)
    assert line_of(b, step=3)["step"] == 3
    assert "thread adaptation" in capsys.readouterr().err


def test_report_stays_backward_compatible(torch_mod: FakeTorch) -> None:
    out = io.StringIO()
    line = rp.report(out, step=7, loss=float("nan"))
    assert out.getvalue() == line + "\n"
    assert json.loads(line)["loss"] is None


# -- with the real torch ---------------------------------------------------------------------


def test_real_torch_pool_follows_the_quota_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch = pytest.importorskip("torch")
    cpu_max = tmp_path / "cpu.max"
    monkeypatch.setattr(rp, "CGROUP_V2_CPU_MAX", write(cpu_max, "max 100000"))
    clock = Clock()
    a = rp.ThreadAdapter(clock=clock, cpus=lambda: 2, enabled=True)
    before = torch.get_num_threads()
    try:
        assert line_of(a, step=1)["threads"] == 2 == torch.get_num_threads()
        cpu_max.write_text("50000 100000\n")
        clock.now = 3
        assert line_of(a, step=2)["threads"] == 1 == torch.get_num_threads()
        cpu_max.write_text("200000 100000\n")
        clock.now = 6
        assert line_of(a, step=3)["threads"] == 2 == torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
