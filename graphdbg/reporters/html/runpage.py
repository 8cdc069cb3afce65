"""One run file as the page's body: what ran, the problems and their
source, compiled time per line, the graphs and their nodes, eager against
compiled node by node. Every section renders records of the query layer and
`graphdbg.analysis`, as `graphdbg report` does."""

from __future__ import annotations

from ...analysis.lines import LINE_COLUMNS, compiled_lines, line_cells, line_notes
from ...analysis.wording import compiled_before_text
from ...core.format import short
from ...runfile.query import Run
from ..report import counts_line, eager_steps_line, rank_line
from .graphs import diff_html, graphs_html
from .markup import esc, note, section, table
from .problems import problems_html

# compiled lines in the page (the report's --full table shows 10, its JSON 50)
LINES = 50


def run_body(run: Run, path: str, uid: str) -> str:
    """The sections of one run, in the report's order (problems first)."""
    findings = run.findings()
    graphs = run.graphs()
    return "".join((
        header_html(run, graphs, path),
        _nav(uid),
        problems_html(run, findings, uid),
        lines_html(run, uid),
        graphs_html(run, graphs, uid, path),
        diff_html(run, uid, path),
        f'<p class="dim">made by graphdbg report --html; every view of a run: '
        f'graphdbg report --full {esc(short(path))} · graphdbg tui {esc(short(path))}</p>'))


def header_html(run: Run, graphs: list, path: str) -> str:
    i = run.info
    status = i.exit_status
    how = f" ({i.status})" if i.status != "complete" else ""
    wall = f" after {i.wall_s:.1f} s" if i.wall_s else ""
    colour = "ok" if status == 0 else "err"
    counts = counts_line(graphs, run.finding_counts(), run.eager_totals()[0],
                         i.status == "interrupted")
    out = [f'<h1>graphdbg run {esc(" ".join(i.argv or []))}: '
           f'<span class="{colour}">exit {esc(status)}</span>{esc(how + wall)}</h1>',
           f"<p>{esc(counts)}</p>",
           note(f"run file {short(path)}; torch {i.torch or '?'}, values={i.values or '?'}, "
                f"device {i.device or '?'}")]
    if i.rank is not None:
        out.append(f"<p>{esc(rank_line(i.rank, i.host))}</p>")
    before = compiled_before_text(i.compiled_before)
    if before:   # a notebook's capture after the compile: as the report says it
        out.append(f'<p class="warn">{esc(before)}</p>')
    sampled = eager_steps_line(i.eager_steps)
    if sampled:
        out.append(note(sampled))
    return "".join(out)


def _nav(uid: str) -> str:
    links = (("problems", "Problems"), ("source", "Source"), ("lines", "Compiled time per line"),
             ("graphs", "Graphs and nodes"), ("diff", "Eager vs compiled"))
    return ('<p class="nav">' + " · ".join(f'<a href="#{uid}-{k}">{t}</a>' for k, t in links)
            + "</p>")


def lines_html(run: Run, uid: str) -> str:
    """Compiled time per user line (`graphdbg.analysis.lines`, the report's
    --full table), the first `LINES`."""
    lines = compiled_lines(run, LINES)
    if not lines:
        body = note("no compiled kernel was timed (inductor's kernels are; other backends' "
                    "time is per graph, in the graphs table)")
    else:
        body = (table(LINE_COLUMNS, map(line_cells, lines), "lines", numeric=(1, 2, 3, 4))
                + "".join(note(n) for n in line_notes(lines)))
    return section("Compiled time per line (inductor kernels)", body, f"{uid}-lines")
