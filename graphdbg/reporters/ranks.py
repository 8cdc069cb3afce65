"""A distributed job's ranks rendered on a rich console: `graphdbg report
DIR` (`render`: header, where ranks differ, where each stopped rank was, one
row per rank), its `--json` document (`document`, schema graphdbg-job/1) and
`graphdbg diff DIR` (`render_diff`).

What is said comes from graphdbg.analysis: the comparison (`analysis.ranks`),
rank against rank (`analysis.rankdiff`), the job's header (`analysis.jobtext`).
Only rendering here: no SQL, no torch; rich only inside the render functions;
the commands make the console and print the JSON.
"""

from __future__ import annotations

from ..analysis.jobtext import CLOSED, header_lines, job_info, position_lines, rank_list
from ..analysis.rankdiff import JobDiff
from ..analysis.ranks import KIND_LABELS, Comparison, Difference
from ..core.format import short
from ..runfile.job import Job
from .json import document as run_document

JSON_SCHEMA = "graphdbg-job/1"


def document(job: Job, c: Comparison) -> dict:
    """`graphdbg report --json DIR` (docs/report-json.md, schema graphdbg-job/1):
    the comparison's records (`analysis.ranks.compare`) and each rank's own
    report document."""
    return {"schema": JSON_SCHEMA, "job": job_info(job),
            "ranks": [s.as_dict() for s in c.ranks],
            "differences": [d.as_dict() for d in c.differences],
            "runs": {str(r): run_document(run, nodes=False) for r, run in job.runs.items()}}


_ICONS = {"error": "[red]✖[/]", "warning": "[yellow]▲[/]", "info": "[blue]●[/]"}


def header_markup(job: Job, c: Comparison) -> list[str]:
    """The job's header lines (`analysis.jobtext.header_lines`) as rich markup."""
    from rich.markup import escape
    return [f"[{style}]{escape(text)}[/]" for style, text in header_lines(job, c)]


def render(job: Job, c: Comparison, console) -> None:
    """The job on a rich console: header, where ranks differ, where each
    stopped rank was, then one row per rank."""
    from rich.console import Group, NewLine
    from rich.markup import escape
    from rich.padding import Padding
    from rich.rule import Rule
    from rich.table import Table
    from rich.text import Text

    out: list = header_markup(job, c)

    def indented(markup: str) -> None:
        out.append(Padding(Text.from_markup(markup, emoji=False), (0, 0, 0, 4), expand=False))

    def head(d: Difference) -> None:
        fn = f" in {escape(d.function)}" if d.function else ""
        out.append(f"{_ICONS.get(d.severity, '?')} [bold]{KIND_LABELS.get(d.kind, d.kind)}[/] "
                   f"[cyan]{escape(short(d.file))}:{d.line}[/]{fn}  [dim]{rank_list(d.ranks)}[/]")
        if d.code:
            out.append(f"    [dim]{d.line:>5} │[/] {escape(d.code)}")

    between = c.between
    out.append(NewLine())
    out.append(Rule(f"Where ranks differ ({len(between)})", align="left"))
    if len(job.runs) - len(job.stale) < 2:
        out.append("[dim]one rank's file only: nothing to compare[/]")
    elif not between:
        out.append("[green]● no difference between the ranks' compiled graphs, graph breaks, "
                   "recompiles, collectives, compile times and calls[/]")
    for d in between:
        head(d)
        indented(escape(d.message))

    if c.stopped:
        out.append(NewLine())
        out.append(Rule("Where each rank was", align="left"))
        for d in c.stopped:
            head(d)
            status = d.detail.get("status") or "stopped"
            if d.severity == "error" and d.detail.get("finding") is not None:
                indented(escape(d.message))
            lines = position_lines(d.detail.get("position"))
            for line in lines:
                indented(f"[yellow]{escape(line)}[/]")
            if not lines:
                indented(f"[dim]rank {d.ranks[0]} {escape(status)}; no position recorded[/]")
        placed = {d.ranks[0] for d in c.stopped}
        for s in c.ranks:
            if s.status not in CLOSED and s.rank not in placed:
                out.append(f"[yellow]rank {s.rank} {escape(s.status or 'stopped')}[/]: "
                           f"[dim]no position recorded[/]")

    out.append(NewLine())
    out.append(Rule(f"Ranks ({len(c.ranks)})", align="left"))
    t = Table(box=None, header_style="bold", pad_edge=False)
    for col, just in (("rank", "right"), ("host", "left"), ("status", "left"),
                      ("graphs", "right"), ("breaks", "right"), ("recompiles", "right"),
                      ("eager ops", "right"), ("compile", "right"), ("file", "left")):
        t.add_column(col, justify=just)
    for s in c.ranks:
        status = (s.status or "?") + (f", exit {s.exit_status}"
                                      if s.exit_status is not None else "")
        colour = "green" if s.status in CLOSED and s.exit_status == 0 else \
            "red" if s.status == "failed" else "yellow"
        t.add_row(str(s.rank), escape(s.host or "?"), f"[{colour}]{escape(status)}[/]"
                  + (" [yellow](other job)[/]" if s.stale else ""),
                  str(s.graphs), str(s.graph_breaks), str(s.recompiles), str(s.eager_ops),
                  f"{s.compile_s:.1f} s", escape(short(s.file)))
    out.append(t)
    example = c.ranks[-1].file if c.ranks else f"{job.folder}/rank0.run"
    out.append(f"[dim]a rank's full report: [bold]graphdbg report {escape(short(example))}[/]; "
               f"ops aligned rank against rank: "
               f"[bold]graphdbg diff {escape(short(job.folder))}[/][/]")
    console.print(Group(*out))


def render_diff(job: Job, d: JobDiff, console) -> None:
    """`graphdbg diff DIR` on a rich console: each pair of ranks, its counts
    and its first divergence at the user's line."""
    from rich.markup import escape
    n = len(job.runs)
    console.print(f"[bold]graphdbg diff[/] job {escape(job.id or '?')} ({n} rank"
                  f"{'s' if n != 1 else ''}, {escape(short(job.folder))}): eager ops aligned by "
                  f"line, op and occurrence; values are not compared (each rank has its own "
                  f"data), only the op sequence and shapes")
    for r, other in job.stale.items():
        console.print(f"[yellow]rank {r}'s file is from another job ({escape(str(other))}): "
                      f"left out[/]")
    if not d.pairs:
        console.print("[dim]one rank's file only: nothing to compare[/]")
    for p in d.pairs:
        console.print()
        console.print(f"[bold]rank {p.a} ↔ rank {p.b}[/]: {p.aligned_ops} ops aligned, "
                      f"{p.only_in_a} only on rank {p.a}, {p.only_in_b} only on rank {p.b}")
        if p.unclosed:
            whose = (f"rank {p.unclosed[0]}'s file" if len(p.unclosed) == 1 else
                     f"the files of {rank_list(p.unclosed)}")
            console.print(f"[yellow]{whose} never closed: ops stop where they were last "
                          f"committed, so an op missing there counts only where later ops "
                          f"were recorded[/]")
        f = p.first
        if f is None:
            console.print("[green]● the same ops with the same shapes, in step[/]"
                          if not p.unclosed else
                          "[green]● the same shapes wherever both ranks recorded the op[/]")
            continue
        fn = f" in {escape(f.function)}" if f.function else ""
        console.print(f"[red]✖ first divergence ({f.what})[/] "
                      f"[cyan]{escape(short(f.file))}:{f.line}[/]{fn}")
        if f.code:
            console.print(f"    [dim]{f.line:>5} │[/] {escape(f.code)}")
        console.print(f"    {escape(f.message)}")


__all__ = ["JSON_SCHEMA", "document", "header_markup", "render", "render_diff"]
