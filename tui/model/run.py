"""The terminal UI's view state, as plain classes: no textual here.

Everything the UI decides (which rows a table shows and in what order, which
page of nodes to load next, what `/` matches, which problem `n` selects, what
the source gutter says) is decided here and unit-tested without a terminal
(tests/e2e/test_tui_model.py); the widgets in `views/` only render it.

Split by job: `common` (labels, find, sort, detail lines), `problems`,
`graphs` (graphs, nodes, `NodePager`), `source` (source view, hot spots);
this module holds the run info and the status line, and re-exports them all
(`from graphdbg.tui.model import run as m`; `m.ProblemsModel`, ...).

Reads the run file only through `graphdbg.runfile.query.Run`. Methods that query the
run (`NodePager.fetch`, `SourceModel.load`, `HotSpots.load`, ...) are meant
for worker threads; the rest is cheap and runs on the UI thread.
"""

from __future__ import annotations

from collections.abc import Sequence

from graphdbg.analysis.wording import backend_label
from graphdbg.core.format import brief, short
from graphdbg.runfile.query import Run
from .common import (FindState, ICONS, KIND_LABELS, KIND_MARKS, Line, SortState, VIEWS,
                     VIEW_TITLES, bar, heat, one_line, source_excerpt, where)
from .problems import (PROBLEM_COLUMNS, RUN_LABELS, TWO_RUN_PROBLEM_COLUMNS, ProblemsModel,
                       divergence_numbers, export_numbers, finding_detail, problem_preview)
from .graphs import (EXPORT_GRAPH_COLUMNS, GRAPH_COLUMNS, NODE_COLUMNS, NODE_WIDTHS, NodePager,
                     ONNX_VALUE_NODE_COLUMNS, STATUS_LEVELS, VALUE_NODE_COLUMNS,
                     compile_summary, export_summary, graph_cells, graph_columns, graph_sort,
                     node_cells, node_detail, onnx_ops_text, sort_graphs)
from .source import (HOT_LINE_COLUMNS, HOT_NODE_COLUMNS, HOT_OP_COLUMNS, HotSpots, SourceModel,
                     SourceRow)

__all__ = ['backend_label', 'FindState', 'ICONS', 'KIND_LABELS', 'KIND_MARKS', 'Line', 'SortState',
           'VIEWS', 'VIEW_TITLES', 'bar', 'heat', 'one_line', 'source_excerpt', 'where',
           'PROBLEM_COLUMNS', 'RUN_LABELS', 'TWO_RUN_PROBLEM_COLUMNS', 'ProblemsModel',
           'divergence_numbers', 'export_numbers',
           'finding_detail', 'problem_preview', 'EXPORT_GRAPH_COLUMNS', 'GRAPH_COLUMNS',
           'NODE_COLUMNS', 'NODE_WIDTHS', 'NodePager', 'ONNX_VALUE_NODE_COLUMNS',
           'STATUS_LEVELS', 'VALUE_NODE_COLUMNS', 'compile_summary', 'export_summary',
           'graph_cells', 'graph_columns', 'graph_sort', 'node_cells', 'node_detail',
           'onnx_ops_text', 'sort_graphs', 'HOT_LINE_COLUMNS', 'HOT_NODE_COLUMNS',
           'HOT_OP_COLUMNS', 'HotSpots', 'SourceModel', 'SourceRow', 'STATUS_NOTES', 'run_info',
           'runs_info', 'status_line', 'status_lines', 'source_target']


# -- run info ------------------------------------------------------------------------------

STATUS_NOTES = {
    "complete": "the program ran to its end",
    "failed": "the program raised: see the runtime_error finding",
    "interrupted": "stopped with Ctrl-C",
    "ended without closing": "the process that wrote it is gone and never closed the run file: "
                             "it holds what was committed until about a second before the end",
    "running": "still being written (or written on another host)",
}


def run_info(run: Run, counts: dict | None = None) -> list[tuple[str, str]]:
    """(label, value) lines of the Run info view (no clock: times as stored)."""
    i = run.info
    out = [("file", short(i.file)),
           ("command", ("-m " if i.module else "") + " ".join(map(str, i.argv or []))),
           ("cwd", i.cwd or "-"),
           ("exit status", "-" if i.exit_status is None else str(i.exit_status)),
           ("status", f"{i.status or '-'}" + (f" ({STATUS_NOTES[i.status]})"
                                              if i.status in STATUS_NOTES else "")),
           ("wall time", f"{i.wall_s:.2f} s" if i.wall_s else "-"),
           ("values", i.values or "-"), ("device", i.device or "-"),
           ("stance", i.stance or "-")]
    out += [(k, v or "-") for k, v in i.versions.items()]
    out.append(("run-file schema", str(i.schema_version)))
    if i.pid is not None or i.host:
        out.append(("written by", f"pid {i.pid} on {i.host or '?'}"))
    if i.ops_dropped:
        dropped = f"{i.ops_dropped} (past --max-ops: counted and timed, not kept one by one)"
        out.append(("ops dropped", dropped))
    for k, v in sorted((i.counts or {}).items()):
        out.append((f"count: {k}", str(v)))
    for k, v in sorted((i.torch_counters or {}).items()):
        out.append((f"torch: {k}", str(v)))
    for k, v in sorted((counts or {}).items()):
        out.append((f"findings: {KIND_LABELS.get(k, k)}", str(v)))
    errors = i.internal_errors or []
    out.append(("internal errors", str(len(errors)) if errors else "none"))
    for e in errors:
        text = e if isinstance(e, str) else "; ".join(f"{k}: {v}" for k, v in e.items()) \
            if isinstance(e, dict) else str(e)
        out.append(("  graphdbg error", one_line(text, 400)))
    return out


def runs_info(runs: Sequence[Run], counts: Sequence[dict | None]) -> list[tuple[str, str]]:
    """The Run info view of two runs open: A's lines, then B's, each under
    its name."""
    out: list[tuple[str, str]] = []
    for k, (run, c) in enumerate(zip(runs, counts)):
        if k:
            out.append(("", ""))
        out.append((f"run {RUN_LABELS[k]}", short(run.path) + (" (the reference)" if k == 0 else "")))
        out += run_info(run, c)
    return out


def _ended(run: Run) -> str:
    i = run.info
    argv = " ".join(map(str, i.argv or [])) or brief(i.file)
    return f"exit {i.exit_status if i.exit_status is not None else '-'} ({i.status}) · {argv}"


def status_line(run: Run, problems: ProblemsModel | None) -> str:
    """The one line above the views: what ran, how it ended, what was found."""
    found = problems.summary() if problems is not None else "loading…"
    return f"{found} · {_ended(run)}"


def status_lines(runs: Sequence[Run], problems: ProblemsModel | None) -> list[str]:
    """The lines above the views: one run's `status_line`; two runs open,
    a line each: A the reference, each one's stance (how it ran, e.g.
    force_eager), problems, exit, run file and command (what a narrow
    screen cuts last first; Run info has it all)."""
    if len(runs) == 1:
        return [status_line(runs[0], problems)]
    out = []
    for k, run in enumerate(runs):
        how = ["the reference"] if k == 0 else []
        if run.info.stance:
            how.append(f"stance {run.info.stance}")
        found = problems.summary(k) if problems is not None else "loading…"
        i = run.info
        out.append(f"{'Two runs' if k == 0 else '':<9} {RUN_LABELS[k]}"
                   f"{' (' + ', '.join(how) + ')' if how else ''}: {found} · exit "
                   f"{i.exit_status if i.exit_status is not None else '-'} ({i.status}) · "
                   f"{short(run.path)} · {' '.join(map(str, i.argv or []))}")
    return out


# -- where `s` goes ---------------------------------------------------------------------

def source_target(item) -> tuple[str, int] | None:
    """The (file, line) to open for a finding, node, op stat or line time."""
    file, line = getattr(item, "file", None), getattr(item, "line", None)
    if not file:
        return None
    return file, line
