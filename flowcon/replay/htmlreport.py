"""``flowcon replay report DIR...``: one self-contained HTML page and a Markdown twin
from any set of replay output folders.

Runs are found by looking for ``result.json`` recursively under every DIR (a single
run, a ``--compare`` folder with none/ and flowcon/, folders of repeated compares such
as rep1-none/ rep1-flowcon/ ...). They are grouped by scenario and by label: the
run's ``variant`` (or ``label``) from result.json when it has one, else its policy;
flowcon runs of one scenario with different alpha/itval get them in the label.

Per scenario: a table of JCT per job and label (median, and min-max when repeated),
the makespan, CPU-seconds per job, the mean CPUs used, the host load when recorded;
the agent's own CPU-seconds (dry-run under none);
the JCT plot, and the CPU and growth timelines of each label's first run. The HTML
embeds the plots as base64 PNG (no external file or URL); the Markdown twin links PNG
files written next to it. Plain string building with ``html.escape``: no template
engine is needed for one page.
"""

from __future__ import annotations

import base64
import html
import io
import json
import logging
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from flowcon.replay.model import RunResult
from flowcon.replay.recorder import change_pct, mean_cpus_used, read_run

log = logging.getLogger(__name__)


@dataclass
class RunEntry:
    path: Path  # the folder holding result.json
    result: RunResult
    data: dict[str, Any]  # result.json as written (keys other helpers add included)
    label: str = ""


@dataclass
class Table:
    title: str
    header: list[str]
    rows: list[list[str]]


@dataclass
class Section:
    scenario: str
    runs: int
    tables: list[Table] = field(default_factory=list)
    figures: list[tuple[str, str, bytes]] = field(default_factory=list)  # caption, slug, PNG
    notes: list[str] = field(default_factory=list)


# -- discovery and grouping ------------------------------------------------------------


def discover(dirs: Sequence[Path]) -> tuple[list[RunEntry], list[str]]:
    """Every run under ``dirs`` (result.json found recursively, each folder once), and
    a message per folder that could not be read (skipped, logged)."""
    entries: list[RunEntry] = []
    skipped: list[str] = []
    seen: set[Path] = set()
    for top in dirs:
        found = [top / "result.json"] if (top / "result.json").is_file() else []
        found += sorted(p for p in top.rglob("result.json") if p.parent != top)
        for path in found:
            folder = path.parent.resolve()
            if folder in seen:
                continue
            seen.add(folder)
            try:
                data = json.loads(path.read_text())
                result = read_run(path.parent)
            except (OSError, ValueError, KeyError, TypeError) as exc:
                msg = f"{path.parent}: skipped ({type(exc).__name__}: {exc})"
                log.warning("%s", msg)
                skipped.append(msg)
                continue
            entries.append(RunEntry(path.parent, result, data))
    _label(entries)
    return entries, skipped


def _label(entries: list[RunEntry]) -> None:
    """Label = variant/label from result.json, else the policy with its control mode
    (``flowcon[weights]``); + alpha/itval where one scenario's flowcon runs used several
    settings, + the thread mode where its runs used several."""
    settings: dict[str, set[tuple[float, float]]] = {}
    threads: dict[str, set[tuple[str, bool]]] = {}
    for e in entries:
        if e.result.policy != "none":
            settings.setdefault(e.result.scenario, set()).add((e.result.alpha, e.result.itval))
        threads.setdefault(e.result.scenario, set()).add(_thread_mode(e))
    for e in entries:
        variant = e.data.get("variant") or e.data.get("label")
        control = e.data.get("control")
        if variant:
            label = str(variant)
        elif control and e.result.policy != "none":
            label = f"{e.result.policy}[{control}]"
        else:
            label = e.result.policy
        if e.result.policy != "none" and len(settings.get(e.result.scenario, ())) > 1:
            label += f" a={100 * e.result.alpha:g}% i={e.result.itval:g}s"
        if len(threads.get(e.result.scenario, ())) > 1:
            mode, adapt = _thread_mode(e)
            label += f" threads={mode}{'' if adapt else ' no-adapt'}"
        e.label = label


def _thread_mode(e: RunEntry) -> tuple[str, bool]:
    return str(e.data.get("threads") or "quota"), bool(e.data.get("adapt_threads", True))


def group(entries: list[RunEntry]) -> dict[str, dict[str, list[RunEntry]]]:
    """scenario -> label -> runs, in the order found; none first within a scenario."""
    out: dict[str, dict[str, list[RunEntry]]] = {}
    for e in entries:
        out.setdefault(e.result.scenario, {}).setdefault(e.label, []).append(e)
    for scenario, labels in out.items():
        out[scenario] = dict(sorted(labels.items(), key=lambda kv: (kv[0] != "none", kv[0])))
    return out


# -- figures of one scenario --------------------------------------------------------------


def cpu_seconds(result: RunResult) -> dict[str, float]:
    """CPU-seconds each job used: each sample's rate times the time since that job's
    previous sample (the first sample of a job only starts its clock)."""
    last: dict[str, float] = {}
    out: dict[str, float] = {}
    for s in sorted(result.samples, key=lambda s: s.t):
        if s.job in last:
            out[s.job] = out.get(s.job, 0.0) + s.cpu * (s.t - last[s.job])
        last[s.job] = s.t
    return out


def _stats(values: list[float]) -> tuple[float | None, float | None, float | None]:
    if not values:
        return None, None, None
    return statistics.median(values), min(values), max(values)


def _cell(values: list[float], unit: str = " s", digits: int = 1) -> str:
    med, lo, hi = _stats(values)
    if med is None or lo is None or hi is None:
        return "-"
    text = f"{med:.{digits}f}{unit}"
    if len(values) > 1:
        text += f" ({lo:.{digits}f}–{hi:.{digits}f}, n={len(values)})"
    return text


def _png(fig: Any) -> bytes:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "x"


def _job_names(labels: dict[str, list[RunEntry]]) -> list[str]:
    names: list[str] = []
    for runs in labels.values():
        for e in runs:
            for j in e.result.jobs:
                if j.name not in names:
                    names.append(j.name)
    return names


def _jct_values(runs: list[RunEntry], job: str) -> list[float]:
    return [j.jct for e in runs for j in e.result.jobs if j.name == job and j.jct is not None]


def _makespans(runs: list[RunEntry]) -> list[float]:
    return [e.result.makespan for e in runs if e.result.makespan is not None]


def _jct_table(names: list[str], labels: dict[str, list[RunEntry]]) -> Table:
    base = labels.get("none")
    others = [lb for lb in labels if lb != "none"] if base else []
    header = ["job", *(f"JCT {lb}" for lb in labels), *(f"change {lb} vs none" for lb in others)]
    rows = []
    for name in [*names, "(makespan)"]:
        values = {
            lb: (_makespans(runs) if name == "(makespan)" else _jct_values(runs, name))
            for lb, runs in labels.items()
        }
        row = [name, *(_cell(values[lb]) for lb in labels)]
        for lb in others:
            ch = change_pct(_stats(values["none"])[0], _stats(values[lb])[0])
            row.append("-" if ch is None else f"{ch:+.1f} %")
        rows.append(row)
    title = "Job completion time (median; min–max and n when repeated)"
    if others:
        title += "; change of the medians against none, negative = faster"
    return Table(title, header, rows)


def _cpu_table(names: list[str], labels: dict[str, list[RunEntry]]) -> Table:
    per_run = {lb: [cpu_seconds(e.result) for e in runs] for lb, runs in labels.items()}
    rows = []
    for name in names:
        rows.append(
            [name, *(_cell([c[name] for c in per_run[lb] if name in c], " CPU-s") for lb in labels)]
        )
    rows.append(
        ["(all jobs)", *(_cell([sum(c.values()) for c in per_run[lb]], " CPU-s") for lb in labels)]
    )
    mean_used = {
        lb: [v for v in (mean_cpus_used(e.result) for e in runs) if v is not None]
        for lb, runs in labels.items()
    }
    rows.append(["(mean CPUs used)", *(_cell(mean_used[lb], "", digits=2) for lb in labels)])
    agent = {
        lb: [
            float(e.result.agent["cpu_seconds"]) for e in runs if e.result.agent.get("cpu_seconds")
        ]
        for lb, runs in labels.items()
    }
    rows.append(["(the agent's own)", *(_cell(agent[lb], " CPU-s", digits=2) for lb in labels)])
    return Table(
        "CPU-seconds per job, and CPUs used on average over the makespan", ["job", *labels], rows
    )


def _load_notes(labels: dict[str, list[RunEntry]]) -> list[str]:
    """Host load recorded by the run (any result.json key with 'load' in its name)."""
    notes = []
    for lb, runs in labels.items():
        for e in runs:
            loads = {k: v for k, v in e.data.items() if "load" in k.lower()}
            if loads:
                notes.append(f"host load, {lb} ({e.path.name}): {json.dumps(loads)}")
    return notes


def build_section(scenario: str, labels: dict[str, list[RunEntry]]) -> Section:
    from flowcon.replay.plots import cpu_figure, growth_figure, jct_bars_figure

    names = _job_names(labels)
    sec = Section(scenario, sum(len(r) for r in labels.values()))
    sec.tables = [_jct_table(names, labels), _cpu_table(names, labels)]
    series = {lb: {n: _stats(_jct_values(runs, n)) for n in names} for lb, runs in labels.items()}
    spans = {lb: _stats(_makespans(runs))[0] for lb, runs in labels.items()}
    sec.figures.append(
        ("Completion time per job", "jct", _png(jct_bars_figure(scenario, names, series, spans)))
    )
    for lb, runs in labels.items():
        first = runs[0]
        which = f"{lb}, {first.path.name}" + (f" (1 of {len(runs)})" if len(runs) > 1 else "")
        sec.figures.append((f"CPU usage, {which}", f"cpu-{lb}", _png(cpu_figure(first.result))))
        if first.result.growth:
            sec.figures.append(
                (f"Growth efficiency, {which}", f"growth-{lb}", _png(growth_figure(first.result)))
            )
    sec.notes = _load_notes(labels)
    for lb, runs in labels.items():
        for e in runs:
            sec.notes += [f"{lb} ({e.path.name}): {err}" for err in e.result.errors]
    return sec


def build_sections(entries: list[RunEntry]) -> list[Section]:
    return [build_section(sc, labels) for sc, labels in group(entries).items()]


# -- rendering ---------------------------------------------------------------------------

STYLE = """
body { font-family: sans-serif; max-width: 1100px; margin: 2em auto; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #bbb; padding: 0.25em 0.6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { background: #eee; }
figure { margin: 1em 0; } img { max-width: 100%; }
.note { color: #a40; font-size: 0.9em; }
"""


def render_html(sections: list[Section], title: str, skipped: list[str]) -> str:
    """One page, no external asset: the plots are data: URIs."""
    e = html.escape
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{e(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{e(title)}</h1>",
    ]
    for sec in sections:
        out.append(f'<h2 id="{e(_slug(sec.scenario))}">{e(sec.scenario)} ({sec.runs} runs)</h2>')
        for t in sec.tables:
            out.append(f"<h3>{e(t.title)}</h3><table><tr>")
            out += [f"<th>{e(h)}</th>" for h in t.header]
            out.append("</tr>")
            for row in t.rows:
                out.append("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>")
            out.append("</table>")
        for caption, _, png in sec.figures:
            data = base64.b64encode(png).decode("ascii")
            out.append(
                f'<figure><img alt="{e(caption)}" src="data:image/png;base64,{data}">'
                f"<figcaption>{e(caption)}</figcaption></figure>"
            )
        out += [f'<p class="note">{e(n)}</p>' for n in sec.notes]
    if skipped:
        out.append("<h2>Skipped folders</h2><ul>")
        out += [f"<li>{e(s)}</li>" for s in skipped]
        out.append("</ul>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(
    sections: list[Section], title: str, skipped: list[str], images: dict[tuple[str, str], str]
) -> str:
    """The same content; ``images`` maps (scenario, figure slug) to a relative PNG path."""
    out = [f"# {title}", ""]
    for sec in sections:
        out += [f"## {sec.scenario} ({sec.runs} runs)", ""]
        for t in sec.tables:
            out += [f"**{t.title}**", ""]
            out.append("| " + " | ".join(_md_cell(h) for h in t.header) + " |")
            out.append("|" + "|".join(["---"] + ["---:"] * (len(t.header) - 1)) + "|")
            out += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in t.rows]
            out.append("")
        for caption, slug, _ in sec.figures:
            out += [f"![{caption}]({images[(sec.scenario, slug)]})", ""]
        out += [f"- {n}" for n in sec.notes]
        if sec.notes:
            out.append("")
    if skipped:
        out += ["## Skipped folders", "", *(f"- {s}" for s in skipped), ""]
    return "\n".join(out)


def write_report(dirs: Sequence[Path], out: Path, title: str | None = None) -> tuple[Path, Path]:
    """Write ``out`` (HTML) and its Markdown twin (same name, .md) with the PNGs the
    twin links next to it; returns both paths. ValueError if no run was found."""
    entries, skipped = discover(dirs)
    if not entries:
        names = ", ".join(str(d) for d in dirs)
        raise ValueError(f"no replay result (result.json) under {names}")
    title = title or "FlowCon replay report: " + ", ".join(
        sorted({e.result.scenario for e in entries})
    )
    sections = build_sections(entries)
    out.parent.mkdir(parents=True, exist_ok=True)
    images: dict[tuple[str, str], str] = {}
    for sec in sections:
        for _, slug, png in sec.figures:
            name = f"{out.stem}-{_slug(sec.scenario)}-{_slug(slug)}.png"
            (out.parent / name).write_bytes(png)
            images[(sec.scenario, slug)] = name
    out.write_text(render_html(sections, title, skipped))
    md = out.with_suffix(".md")
    md.write_text(render_markdown(sections, title, skipped, images))
    return out, md


@click.command()
@click.argument(
    "dirs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False, path_type=Path)
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="HTML file to write (default: report.html in the first DIR); FILE.md and the "
    "PNGs it links go next to it.",
)
@click.option("--title", help="Page title (default: names the scenarios).")
def report(dirs: tuple[Path, ...], out: Path | None, title: str | None) -> None:
    """Render one self-contained HTML page (plots embedded) and a Markdown twin from
    replay output folders DIR... (single runs, --compare folders, repeated compares)."""
    target = out or dirs[0] / "report.html"
    if target.suffix.lower() != ".html":
        raise click.BadParameter("the file name must end in .html", param_hint="--out")
    try:
        page, md = write_report(list(dirs), target, title)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"wrote {page} and {md}")
