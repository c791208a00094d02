"""Scenario files: the shipped ones load, malformed ones name the bad field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from flowcon.replay.generate import random_scenario
from flowcon.replay.scenario import (
    ADAPT_ENV,
    ITERATIONS_ENV,
    THREADS_ENV,
    ScenarioError,
    dump_scenario,
    load_scenario,
    parse_scenario,
)

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def good() -> dict[str, Any]:
    return {
        "name": "t",
        "alpha": 0.05,
        "itval": 20,
        "jobs": [
            {"name": "a", "model": "vae", "start": 0},
            {"name": "b", "image": "flowcon/testbox:latest", "start": 5.5, "command": "echo hi"},
            {
                "name": "c",
                "model": "mnist",
                "start": 2,
                "iterations": 10,
                "env": {"FLOWCON_BATCH": 16},
            },
        ],
    }


def test_parse_good_scenario() -> None:
    sc = parse_scenario(good())
    assert [j.name for j in sc.jobs] == ["a", "c", "b"]  # ordered by start time
    a, c, b = sc.jobs
    assert a.image == "flowcon/train-vae:latest"
    assert b.command == ("/bin/sh", "-c", "echo hi")
    assert c.environment() == {"FLOWCON_BATCH": "16", ITERATIONS_ENV: "10"}
    assert sc.agent_config() == {"alpha": 0.05, "itval": 20.0}


def test_scaled_and_iterations_override() -> None:
    sc = parse_scenario(good()).scaled(0.1, iterations=3)
    assert [j.start for j in sc.jobs] == [0.0, 0.2, 0.55]
    assert all(j.environment()[ITERATIONS_ENV] == "3" for j in sc.jobs)


@pytest.mark.parametrize(
    ("mutate", "field", "words"),
    [
        (lambda d: d["jobs"][2].__setitem__("start", "soon"), "jobs[2].start", "number >= 0"),
        (lambda d: d["jobs"][0].__setitem__("start", -1), "jobs[0].start", "number >= 0"),
        (lambda d: d["jobs"][1].pop("start"), "jobs[1].start", "missing"),
        (lambda d: d["jobs"][1].pop("image"), "jobs[1].image", "missing"),
        (lambda d: d["jobs"][0].__setitem__("image", "x"), "jobs[0].image", "not both"),
        (lambda d: d["jobs"][0].__setitem__("name", "a b"), "jobs[0].name", "letters"),
        (lambda d: d["jobs"][1].__setitem__("name", "a"), "jobs[1].name", "duplicate"),
        (lambda d: d["jobs"][2].__setitem__("iterations", 0), "jobs[2].iterations", ">= 1"),
        (lambda d: d["jobs"][2].__setitem__("iterations", True), "jobs[2].iterations", ">= 1"),
        (lambda d: d["jobs"][2].__setitem__("env", ["A=1"]), "jobs[2].env", "mapping"),
        (lambda d: d["jobs"][2]["env"].__setitem__("X", None), "jobs[2].env.X", "string"),
        (lambda d: d["jobs"][1].__setitem__("command", 5), "jobs[1].command", "list of str"),
        (lambda d: d["jobs"][0].__setitem__("cpus", 2), "jobs[0].cpus", "unknown field"),
        (lambda d: d.__setitem__("jobs", []), "jobs", "non-empty list"),
        (lambda d: d["jobs"].__setitem__(1, "b"), "jobs[1]", "expected a mapping"),
        (lambda d: d.pop("alpha"), "alpha", "missing"),
        (lambda d: d.__setitem__("alpha", 5), "alpha", "fraction"),
        (lambda d: d.__setitem__("alpha", float("nan")), "alpha", "number > 0"),
        (lambda d: d.__setitem__("itval", 0), "itval", "number > 0"),
        (lambda d: d.__setitem__("itval", "20s"), "itval", "number > 0"),
        (lambda d: d.__setitem__("agent", {"alpha": 1}), "agent.alpha", "top level"),
        (lambda d: d.__setitem__("agent", [1]), "agent", "mapping"),
        (lambda d: d.__setitem__("jbos", []), "jbos", "unknown field"),
    ],
)
def test_malformed_names_the_field(mutate: Any, field: str, words: str) -> None:
    data = good()
    mutate(data)
    with pytest.raises(ScenarioError) as err:
        parse_scenario(data, "s.yaml")
    text = str(err.value)
    matching = [p for p in err.value.problems if p.startswith(f"{field}:")]
    assert matching, text
    assert any(words in p for p in matching), text
    assert text.startswith("s.yaml: invalid scenario")


def test_every_problem_is_reported() -> None:
    data = good()
    data["itval"] = -1
    data["jobs"][0]["start"] = "x"
    data["jobs"][1]["name"] = ""
    with pytest.raises(ScenarioError) as err:
        parse_scenario(data)
    fields = {p.split(":")[0] for p in err.value.problems}
    assert fields == {"itval", "jobs[0].start", "jobs[1].name"}


def test_not_a_mapping_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="top level"):
        parse_scenario([1, 2])
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\njobs: [\n")
    with pytest.raises(ScenarioError, match="not valid YAML at line"):
        load_scenario(bad)
    with pytest.raises(ScenarioError, match="cannot read"):
        load_scenario(tmp_path / "missing.yaml")


def test_name_defaults_to_file_stem(tmp_path: Path) -> None:
    data = good()
    del data["name"]
    path = tmp_path / "my-run.yaml"
    path.write_text(yaml.safe_dump(data))
    assert load_scenario(path).name == "my-run"


@pytest.mark.parametrize("name", ["fixed", "random-5", "random-10", "random-15"])
def test_shipped_scenarios_load(name: str) -> None:
    sc = load_scenario(SCENARIOS / f"{name}.yaml")
    assert sc.name == name
    assert 0 < sc.alpha <= 1
    assert sc.itval > 0
    assert all(j.image.startswith("flowcon/train-") for j in sc.jobs)


def test_fixed_matches_paper_schedule() -> None:
    sc = load_scenario(SCENARIOS / "fixed.yaml")
    assert [(j.name, j.start) for j in sc.jobs] == [("vae", 0), ("mnist", 40), ("mnist-mlp", 80)]


@pytest.mark.parametrize(
    ("n", "seed", "alpha", "itval"), [(5, 5, 0.03, 30), (10, 10, 0.1, 20), (15, 15, 0.1, 20)]
)
def test_random_scenarios_match_generator(n: int, seed: int, alpha: float, itval: float) -> None:
    shipped = load_scenario(SCENARIOS / f"random-{n}.yaml")
    generated = random_scenario(n, seed, alpha=alpha, itval=itval)
    assert shipped == generated
    starts = [j.start for j in shipped.jobs]
    assert starts == sorted(starts)
    assert starts[0] == 0
    assert starts[-1] < 200
    assert len(shipped.jobs) == n


def test_generator_is_seeded_and_roundtrips() -> None:
    a = random_scenario(7, seed=1)
    assert a == random_scenario(7, seed=1)
    assert a != random_scenario(7, seed=2)
    assert parse_scenario(yaml.safe_load(dump_scenario(a, "header"))) == a
    unshifted = random_scenario(7, seed=1, shift=False)
    assert [round(j.start - unshifted.jobs[0].start, 1) for j in unshifted.jobs] == [
        j.start for j in a.jobs
    ]
    five = random_scenario(5, seed=3)
    assert len({j.image for j in five.jobs}) == 5  # five different models


def test_work_scale_scales_default_iterations() -> None:
    sc = parse_scenario(good()).scaled(work_scale=0.5)
    its = {j.name: j.iterations for j in sc.jobs}
    assert its == {"a": 1000, "b": None, "c": 5}  # vae default 2000; testbox unknown
    assert parse_scenario(good()).scaled(work_scale=0.5, iterations=7).jobs[0].iterations == 7


def test_thread_modes_default_and_parse() -> None:
    sc = parse_scenario(good())
    assert sc.threads == "quota"
    assert sc.adapt_threads is True
    a = sc.jobs[0]
    # quota: the images' default pool; adaptation always said explicitly
    assert sc.job_environment(a, 8) == {ADAPT_ENV: "1"}
    data = good()
    data["threads"] = "pinned"
    data["adapt_threads"] = False
    data["jobs"][1]["env"] = {"FLOWCON_THREADS": 1, "FLOWCON_ADAPT_THREADS": "1"}
    sc = parse_scenario(data)
    assert (sc.threads, sc.adapt_threads) == ("pinned", False)
    by_name = {j.name: j for j in sc.jobs}
    assert sc.job_environment(by_name["a"], 8) == {
        THREADS_ENV: "8",
        ADAPT_ENV: "0",
    }
    # the job's own env wins
    assert sc.job_environment(by_name["b"], 8) == {THREADS_ENV: "1", ADAPT_ENV: "1"}
    c = sc.job_environment(by_name["c"], 2)
    assert c == {"FLOWCON_BATCH": "16", ITERATIONS_ENV: "10", THREADS_ENV: "2", ADAPT_ENV: "0"}
    # kept by scaling and by a dump/parse round trip
    assert sc.scaled(0.5).threads == "pinned"
    back = parse_scenario(yaml.safe_load(dump_scenario(sc)))
    assert (back.threads, back.adapt_threads) == ("pinned", False)
    assert "threads" not in parse_scenario(good()).to_dict()


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("threads", "all", "threads: expected one of quota, pinned, got 'all'"),
        ("threads", 2, "threads: expected one of quota, pinned, got 2"),
        ("threads", ["pinned"], "threads: expected one of quota, pinned, got ['pinned']"),
        ("adapt_threads", "off", "adapt_threads: expected true or false, got 'off'"),
        ("adapt_threads", 0, "adapt_threads: expected true or false, got 0"),
    ],
)
def test_malformed_thread_settings(key: str, value: Any, words: str) -> None:
    data = good()
    data[key] = value
    with pytest.raises(ScenarioError) as err:
        parse_scenario(data, "s.yaml")
    assert words in err.value.problems


def test_generator_threads_and_name() -> None:
    sc = random_scenario(5, seed=1001, threads="pinned", name="gen5-s1001")
    assert sc.threads == "pinned"
    assert sc.name == "gen5-s1001"
    assert parse_scenario(yaml.safe_load(dump_scenario(sc))) == sc
    shipped = load_scenario(SCENARIOS / "random-5.yaml")
    assert [j.start for j in sc.jobs] != [j.start for j in shipped.jobs]
