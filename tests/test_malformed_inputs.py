"""Inputs: every file of the malformed corpus (tests/data/malformed/) goes through
the real loader and is refused with that loader's error, whose message names the file and
the field or line; never a traceback-type exception (KeyError, TypeError, AttributeError,
IndexError, UnicodeDecodeError, RecursionError, csv.Error). The loaders return a value or
raise: nothing is applied from a file they refuse."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest

from flowcon.agent import config as agent_config
from flowcon.allocator.config import ConfigError, load_config
from flowcon.client.commands import InvalidInput, read_spec_file
from flowcon.jobspec.spec import JobSpecError, load_jobspec
from flowcon.replay.scenario import ScenarioError, load_scenario
from flowcon.sim.loaders import InputError, load_throughputs, load_trace

CORPUS = Path(__file__).parent / "data" / "malformed"
GOOD_TABLES = CORPUS / "throughput" / "good"

# file (relative to CORPUS) -> what its error message must name besides the file
EXPECT: dict[str, list[str]] = {
    "agent/bad-yaml.yaml": ["not valid YAML", "line 2"],
    "agent/deep.yaml": ["nested too deeply"],
    "agent/match-labels-list.yaml": ["match_labels"],
    "agent/nan.yaml": ["itval"],
    "agent/nested-wrong.yaml": ["allocator.url"],
    "agent/not-mapping.yaml": ["mapping"],
    "agent/not-utf8.yaml": ["line 2", "not UTF-8"],
    "agent/out-of-range.yaml": ["alpha"],
    "agent/tab-indent.yaml": ["not valid YAML", "line 2"],
    "agent/unknown-key.yaml": ["itvall", "unknown key"],
    "agent/wrong-type.yaml": ["alpha"],
    "allocator/bad-policy.yaml": ["allocator.policy"],
    "allocator/bad-port.yaml": ["allocator.listen"],
    "allocator/bad-yaml.yaml": ["invalid YAML", "line 2"],
    "allocator/deep.yaml": ["nested too deeply"],
    "allocator/not-mapping.yaml": ["top level must be a mapping"],
    "allocator/not-utf8.yaml": ["line 2", "not UTF-8"],
    "allocator/section-list.yaml": ["allocator"],
    "allocator/unknown-key.yaml": ["allocator.slot_secs", "unknown key"],
    "allocator/unknown-section.yaml": ["alocator", "unknown key"],
    "allocator/wrong-type.yaml": ["allocator.slot_seconds"],
    "jobspec/bad-name.yaml": ["name"],
    "jobspec/bad-yaml.yaml": ["yaml", "line 9"],
    "jobspec/deadline-and-best-effort.yaml": ["deadline"],
    "jobspec/deep.yaml": ["yaml"],
    "jobspec/env-nested.yaml": ["env.A"],
    "jobspec/key-not-string.yaml": ["unknown field"],
    "jobspec/missing-image.yaml": ["image", "required"],
    "jobspec/not-mapping.yaml": ["mapping"],
    "jobspec/not-utf8.yaml": ["line 1", "not UTF-8"],
    "jobspec/profile-bad-csv.yaml": ["profile[1]", "fast"],
    "jobspec/profile-escape.yaml": ["profile", ".."],
    "jobspec/profile-list-yaml.yaml": ["profile", "gpus"],
    "jobspec/profile-missing.yaml": ["profile", "no-such-profile.csv"],
    "jobspec/profile-negative.yaml": ["profile[1]"],
    "jobspec/profile-notutf8.yaml": ["profile", "profile-notutf8.csv, line 2"],
    "jobspec/shell-image.yaml": ["image"],
    "jobspec/unknown-key.yaml": ["privileged", "unknown key"],
    "jobspec/wrong-type.yaml": ["iterations"],
    "scenario/alpha-string.yaml": ["alpha"],
    "scenario/bad-yaml.yaml": ["(yaml)", "line 7"],
    "scenario/deep.yaml": ["nested too deeply"],
    "scenario/duplicate-job.yaml": ["jobs[1].name", "duplicate"],
    "scenario/job-bad-start.yaml": ["jobs[1].start"],
    "scenario/job-missing-image.yaml": ["jobs[1].image"],
    "scenario/job-not-mapping.yaml": ["jobs[1]"],
    "scenario/jobs-not-list.yaml": ["jobs"],
    "scenario/not-mapping.yaml": ["top level"],
    "scenario/not-utf8.yaml": ["line 6", "not UTF-8"],
    "scenario/unknown-key.yaml": ["speed", "unknown field"],
    "throughput/bad-batch/m.csv": ["row 2", "global_batch_size"],
    "throughput/bad-cell/m.csv": ["row 2", "column '2'"],
    "throughput/bad-count/m.csv": ["row 1", "'two'"],
    "throughput/bad-header/m.csv": ["row 1", "global_batch_size"],
    "throughput/empty/m.csv": ["empty"],
    "throughput/extra-cells/m.csv": ["row 2"],
    "throughput/negative/m.csv": ["row 2", "column '2'"],
    "throughput/no-throughput/m.csv": ["row 2"],
    "throughput/not-utf8/m.csv": ["line 2", "not UTF-8"],
    "throughput/nul/m.csv": ["row 2", "column '1'"],
    "trace/bad-number.csv": ["row 2", "num_iteration"],
    "trace/duplicate-id.csv": ["row 3", "job_id"],
    "trace/empty-id.csv": ["row 2", "job_id"],
    "trace/empty.csv": ["row 1", "job_id"],
    "trace/extra-cells.csv": ["row 2"],
    "trace/fractional-gpus.csv": ["row 2", "num_gpu"],
    "trace/inf.csv": ["row 2", "submission_time"],
    "trace/missing-column.csv": ["row 1", "num_gpu"],
    "trace/not-utf8.csv": ["line 2", "not UTF-8"],
    "trace/nul.csv": ["row 2", "job_id"],
    "trace/unknown-batch.csv": ["row 2", "batch_size"],
    "trace/unknown-model.csv": ["row 2", "model_name"],
    "trace/zero-iterations.csv": ["row 2", "num_iteration"],
}
# files the cases above use without being cases themselves
HELPERS = {
    "throughput/good/m.csv",
    "jobspec/profile-bad.csv",
    "jobspec/profile-notutf8.csv",
    "jobspec/profile-list.yml",
}


def load(rel: str, path: Path) -> Any:
    """The real loader of that kind of file, with its own error type."""
    kind = rel.split("/")[0]
    if kind == "agent":
        return agent_config.load(path, environ={})
    if kind == "allocator":
        return load_config(path, environ={}, secrets_dir=path.parent / "no-secrets")
    if kind == "jobspec":
        return load_jobspec(path, now=0.0)
    if kind == "scenario":
        return load_scenario(path)
    if kind == "throughput":
        return load_throughputs(path.parent)
    return load_trace(path, load_throughputs(GOOD_TABLES))


ERRORS = {
    "agent": agent_config.ConfigError,
    "allocator": ConfigError,
    "jobspec": JobSpecError,
    "scenario": ScenarioError,
    "throughput": InputError,
    "trace": InputError,
}


def test_every_corpus_file_has_an_expectation() -> None:
    files = {str(p.relative_to(CORPUS)) for p in CORPUS.rglob("*") if p.is_file()}
    assert files == set(EXPECT) | HELPERS


@pytest.mark.parametrize("rel", sorted(EXPECT))
def test_malformed_file_is_refused_naming_file_and_field(rel: str) -> None:
    path = CORPUS / rel
    with pytest.raises(ERRORS[rel.split("/")[0]]) as info:
        load(rel, path)
    assert not isinstance(info.value, UnicodeDecodeError)
    message = str(info.value)
    assert str(path) in message, message
    for part in EXPECT[rel]:
        assert part in message, f"{part!r} not in {message!r}"


@pytest.mark.parametrize("rel", sorted(r for r in EXPECT if r.startswith("jobspec/")))
def test_cli_refuses_malformed_spec_before_any_request(rel: str) -> None:
    """``flowcon submit FILE`` checks the file locally first: the same corpus is a clean
    InvalidInput (exit code 2) naming the file."""
    path = CORPUS / rel
    with pytest.raises(InvalidInput) as info:
        read_spec_file(path)
    assert str(path) in info.value.message


def _huge_cell(tmp_path: Path, name: str, header: str, row: str) -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    big = '"' + "9" * (csv.field_size_limit() + 10) + '"'
    path.write_text(header + "\n" + row.replace("BIG", big) + "\n")
    return path


def test_cell_over_the_csv_field_limit_is_an_input_error(tmp_path: Path) -> None:
    """csv.Error ("field larger than field limit") was a traceback in every CSV loader."""
    table = _huge_cell(tmp_path, "t/m.csv", "global_batch_size,1,2", "32,10,BIG")
    with pytest.raises(InputError, match=r"m\.csv, row 2: not a CSV table"):
        load_throughputs(table.parent)
    trace = _huge_cell(
        tmp_path,
        "trace.csv",
        "job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu",
        "BIG,0,1000,m,3600,32,1",
    )
    with pytest.raises(InputError, match=r"trace\.csv, row 2: not a CSV table"):
        load_trace(trace, load_throughputs(GOOD_TABLES))
    _huge_cell(tmp_path, "spec/prof.csv", "gpus,iterations_per_s", "1,BIG")
    spec = (CORPUS / "jobspec/profile-bad-csv.yaml").read_text()
    (tmp_path / "spec/job.yaml").write_text(spec.replace("profile-bad.csv", "prof.csv"))
    with pytest.raises(JobSpecError, match=r"job\.yaml: profile: prof\.csv: not a CSV table"):
        load_jobspec(tmp_path / "spec/job.yaml", now=0.0)


def test_one_bad_table_refuses_the_whole_directory(tmp_path: Path) -> None:
    """Nothing partially applied: a directory with a good and a bad table gives no tables."""
    for name, src in (("a", "good"), ("b", "bad-cell")):
        (tmp_path / f"{name}.csv").write_text((CORPUS / "throughput" / src / "m.csv").read_text())
    with pytest.raises(InputError, match=r"b\.csv, row 2"):
        load_throughputs(tmp_path)


def test_faults_inputs_scenario_counts_every_corpus_file() -> None:
    """benchmarks/faults.py --scenario inputs: the same corpus, one run per file."""

    from benchmarks.faults import scenarios as faults

    assert {str(p.relative_to(CORPUS)) for _, p in faults.corpus_files()} == set(EXPECT)
    scenario = next(s for s in faults.SCENARIOS if s.name == "inputs")
    summary = faults.run_scenario(scenario, len(EXPECT), seed=1)
    assert (summary.runs, summary.violations) == (len(EXPECT), 0), summary.messages
