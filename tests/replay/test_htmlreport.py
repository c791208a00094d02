"""``flowcon replay report`` on a hand-made tree of replay outputs, without an engine."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from flowcon.replay.growth import GrowthPoint
from flowcon.replay.htmlreport import cpu_seconds, discover, group, report, write_report
from flowcon.replay.model import JobRecord, RunResult, Sample
from flowcon.replay.recorder import write_run


def make_run(
    scenario: str, policy: str, jcts: dict[str, float], *, alpha: float = 0.05, itval: float = 20
) -> RunResult:
    r = RunResult(
        scenario, policy, f"{scenario}-{policy}-{sum(jcts.values()):.0f}", 0.0, 2, alpha, itval
    )
    for i, (name, jct) in enumerate(jcts.items()):
        r.jobs.append(JobRecord(name, "img", 5.0 * i, 5.0 * i, 5.0 * i + jct, 0))
        for t in range(6):  # 1 CPU for 5 s per job: 5 CPU-seconds
            r.samples.append(Sample(5.0 * i + t, name, 1.0, None, 1024))
        r.growth.append(GrowthPoint(5.0 * i + 1, name, 0.5, "NL", "dry-run"))
    return r


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """fixed: a --compare folder; random-5: three repeated compares; one broken folder."""
    root = tmp_path / "runs"
    none = make_run("fixed", "none", {"vae": 100, "mnist-cnn": 200})
    none.agent = {"cpu_seconds": 0.45, "dry_run": True}
    write_run(none, root / "cmp" / "none")
    write_run(make_run("fixed", "flowcon", {"vae": 60, "mnist-cnn": 210}), root / "cmp" / "flowcon")
    for k, (n, f) in enumerate([(300, 240), (310, 260), (290, 250)], start=1):
        write_run(make_run("random-5", "none", {"lstm": n}), root / "rep" / f"rep{k}-none")
        flow = make_run("random-5", "flowcon", {"lstm": f})
        write_run(flow, root / "rep" / f"rep{k}-flowcon")
    data = json.loads((root / "rep" / "rep1-none" / "result.json").read_text())
    data["host_load"] = {"before": 0.4, "after": 1.9}
    (root / "rep" / "rep1-none" / "result.json").write_text(json.dumps(data))
    (root / "broken").mkdir()
    (root / "broken" / "result.json").write_text("{not json")
    return root


def test_discovery_groups_by_scenario_and_label(tree: Path) -> None:
    entries, skipped = discover([tree])
    assert len(entries) == 8
    assert len(skipped) == 1
    assert "broken" in skipped[0]
    groups = group(entries)
    assert sorted(groups) == ["fixed", "random-5"]
    assert list(groups["random-5"]) == ["none", "flowcon"]
    assert [e.path.name for e in groups["random-5"]["flowcon"]] == [
        "rep1-flowcon",
        "rep2-flowcon",
        "rep3-flowcon",
    ]
    # the same folder given twice (and nested) is read once
    again, _ = discover([tree, tree / "cmp"])
    assert len(again) == 8


def test_variant_and_alpha_itval_labels(tmp_path: Path) -> None:
    write_run(make_run("fixed", "none", {"a": 10}), tmp_path / "n")
    write_run(make_run("fixed", "flowcon", {"a": 8}, alpha=0.01, itval=10), tmp_path / "f1")
    write_run(make_run("fixed", "flowcon", {"a": 9}, alpha=0.15, itval=60), tmp_path / "f2")
    write_run(make_run("other", "flowcon", {"a": 9}), tmp_path / "w")
    data = json.loads((tmp_path / "w" / "result.json").read_text())
    data["variant"] = "flowcon-weights"
    (tmp_path / "w" / "result.json").write_text(json.dumps(data))
    labels = {e.path.name: e.label for e in discover([tmp_path])[0]}
    assert labels == {
        "n": "none",
        "f1": "flowcon a=1% i=10s",
        "f2": "flowcon a=15% i=60s",
        "w": "flowcon-weights",
    }


def test_control_modes_and_thread_modes_label_runs_apart(tmp_path: Path) -> None:
    """A compare with --control writes the mode as ``control`` in result.json (no
    variant): each mode is its own label, and a scenario replayed with pinned and with
    quota threads keeps the two apart."""
    runs = {
        "n": make_run("fixed", "none", {"a": 10}),
        "q": make_run("fixed", "flowcon", {"a": 8}),
        "w": make_run("fixed", "flowcon", {"a": 7}),
        "p": make_run("fixed", "none", {"a": 12}),
    }
    runs["q"].control, runs["w"].control = "quota", "weights"
    runs["p"].threads, runs["p"].adapt_threads = "pinned", False
    for name, run in runs.items():
        write_run(run, tmp_path / name)
    labels = {e.path.name: e.label for e in discover([tmp_path])[0]}
    assert labels == {
        "n": "none threads=quota",
        "q": "flowcon[quota] threads=quota",
        "w": "flowcon[weights] threads=quota",
        "p": "none threads=pinned no-adapt",
    }


def test_cpu_seconds_per_job() -> None:
    r = make_run("fixed", "none", {"a": 10, "b": 10})
    assert cpu_seconds(r) == {"a": pytest.approx(5.0), "b": pytest.approx(5.0)}


def test_html_is_self_contained_with_every_scenario_and_job(tree: Path, tmp_path: Path) -> None:
    page, _md = write_report([tree], tmp_path / "out" / "report.html")
    text = page.read_text()
    assert "http://" not in text
    assert "https://" not in text
    srcs = re.findall(r'src="([^"]*)"', text)
    assert srcs
    assert all(s.startswith("data:image/png;base64,") for s in srcs)
    assert "<link" not in text
    assert "<script" not in text
    for needle in ("fixed", "random-5", "vae", "mnist-cnn", "lstm", "(makespan)"):
        assert needle in text
    # repeated runs: median and min-max with n; the change of the medians
    assert "300.0 s (290.0–310.0, n=3)" in text
    assert "250.0 s (240.0–260.0, n=3)" in text
    assert "-16.7 %" in text  # 250 vs 300
    assert "-40.0 %" in text  # fixed vae: 60 vs 100
    assert "5.0 CPU-s" in text
    assert "0.45 CPU-s" in text  # the dry-run agent's own CPU
    assert "&quot;before&quot;: 0.4" in text  # the host load recorded by rep1-none
    assert "broken" in text  # the skipped folder is named
    # figures: JCT per scenario, CPU and growth per label
    assert len(srcs) == 2 * (1 + 2 + 2)


def test_markdown_twin_links_pngs_beside_it(tree: Path, tmp_path: Path) -> None:
    _page, md = write_report([tree], tmp_path / "out" / "report.html", title="Study")
    assert md == tmp_path / "out" / "report.md"
    text = md.read_text()
    assert text.startswith("# Study\n")
    assert "## fixed (2 runs)" in text
    assert "## random-5 (6 runs)" in text
    assert "| vae | 100.0 s | 60.0 s | -40.0 % |" in text
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert len(links) == 10
    for link in links:
        assert "/" not in link
        assert (tmp_path / "out" / link).stat().st_size > 3000


def test_report_command(tree: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    res = CliRunner().invoke(report, [str(tree / "rep"), str(tree / "cmp"), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert out.exists()
    assert (tmp_path / "r.md").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    res = CliRunner().invoke(report, [str(empty)])
    assert res.exit_code == 1
    assert "no replay result (result.json)" in res.output
    res = CliRunner().invoke(report, [str(tree), "--out", str(tmp_path / "r.txt")])
    assert res.exit_code == 2
    assert "must end in .html" in res.output
