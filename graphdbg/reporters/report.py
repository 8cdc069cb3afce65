"""`graphdbg report`: a rich summary of a run file (`--json`: json.py).

Renders the typed records of graphdbg.runfile.query (no SQL here, no torch;
rich only inside functions). The summary shows no node, so it loads none:
its memory does not grow with the run.
"""

from __future__ import annotations

import glob
import os

from ..analysis.jobtext import position_lines
from ..analysis.wording import backend_label, compiled_before_text, export_text, graph_name
from ..core.errors import GraphdbgError
from ..core.format import at, brief, ms, short
from ..runfile.query import MIN_SAMPLES, Finding, Graph, KindCount, Run
from .json import JSON_SCHEMA, document
from .fit import Col, FitTable
from .problems import problems_section
from .tables import full_tables

__all__ = ["JSON_SCHEMA", "document", "newest_run", "position_lines", "render", "summary",
           "summary_lines"]

def newest_run(directory: str = ".") -> str:
    runs = [p for p in glob.glob(os.path.join(directory, "*.run")) if os.path.isfile(p)]
    if not runs:
        raise GraphdbgError(
            f"no run file in {os.path.abspath(directory)}; give one, or create one with "
            f"`graphdbg run script.py`")
    return max(runs, key=os.path.getmtime)


# -- rich rendering ------------------------------------------------------------------

def eager_steps_line(steps: dict | None) -> str | None:
    """What `--eager-steps` left out, and what a step was, in one line; None
    when every step's eager ops were recorded."""
    if not steps or steps.get("recorded", 0) >= steps.get("steps", 0):
        return None
    first, every, by = steps.get("first"), steps.get("every"), steps.get("by")
    what = {"optimizer": "optimizer steps",
            "compiled call": "calls of the first compiled graph",
            "module call": f"calls of the top module, {steps.get('module') or 'a module'}"
            }.get(by, f"{by or 'program'} steps")
    later = f", then one step in {every}" if every else ""
    return (f"eager ops recorded on {steps['recorded']} of {steps['steps']} steps ({what}): "
            f"the first {first}{later}; the other steps' eager ops were not seen "
            f"(--eager-steps all records every step)")


def counts_line(graphs: list, counts: dict[str, KindCount], eager_ops: int,
                 interrupted: bool = False) -> str:
    """"3 graphs, 2 exports, 1 graph break, 1 recompile, 1520 eager ops": the
    compiled graphs, exports apart, and each kind's findings as the Problems
    section lists them (how often each was hit is on its own line there, ×N).
    ``interrupted``: the run ended on Ctrl-C, whose note ("interrupted here")
    is an info runtime_error, said as "interrupted", not as an error."""
    if interrupted and counts.get("runtime_error") is not None:
        c = counts["runtime_error"]
        counts = {**counts, "runtime_error": KindCount(max(c.sites - 1, 0), c.count)}
    exports = sum(g.kind != "compile" for g in graphs)
    compiled = len(graphs) - exports
    parts = [f"{compiled} graph{'s' if compiled != 1 else ''}"]
    if exports:
        parts.append(f"{exports} export{'s' if exports != 1 else ''}")
    for kind, label in (("graph_break", "graph break"), ("recompile", "recompile"),
                        ("compile_error", "compile error"), ("malformed_graph", "malformed graph"),
                        ("divergence", "divergence"), ("nan_inf", "NaN/Inf"),
                        ("runtime_error", "runtime error"), ("check_skipped", "graph not checked"),
                        ("export_specialized", "export-fixed value")):
        c = counts.get(kind)
        if c is not None and c.sites:
            parts.append(f"{c.sites} {label}{'s' if c.sites != 1 else ''}")
    parts.append(f"{eager_ops} eager ops")
    if interrupted:
        parts.append("interrupted")
    return ", ".join(parts)


def render(run: Run, console, full: bool = False, path: str | None = None) -> None:
    """Print the summary of ``run`` (`summary`) on a rich console."""
    console.print(summary(run, full, path))


def summary(run: Run, full: bool = False, path: str | None = None):
    """The summary of ``run`` as one rich renderable: the run, its problems
    (each with what to do), its graphs, the terms used, and the commands that
    show more. ``full`` adds every graph column and the tables of compile
    time, compiled time per line, py-spy's samples, the slowest nodes and
    eager ops. ``path``: the run file as the user named it (for the next
    commands)."""
    from rich.console import Group

    findings = run.findings()
    graphs = run.graphs()
    out: list = _header(run, graphs, full)  # printed at once: one print per line costs more
    out += problems_section(findings, full)
    out += _graphs_section(run, graphs, findings, full)
    if full:
        out += full_tables(run, findings)
    info = run.info
    if info.internal_errors:
        out.append(f"[dim]graphdbg internal errors (recording continued): "
                   f"{len(info.internal_errors)}; see `graphdbg report --json`[/]")
    out += _tail(short(path or run.path), findings, full)
    return Group(*out)


def _header(run: Run, graphs: list[Graph], full: bool) -> list:
    """What ran and how it ended, what was found, and what capture left out."""
    from rich.markup import escape
    info = run.info
    out: list = []
    status, state = info.exit_status, info.status
    colour = "green" if status == 0 else "red"
    wall = f" after {info.wall_s:.1f} s" if info.wall_s else ""
    how = f" ({state})" if state != "complete" else ""
    more = f", torch {info.torch}, values={info.values}" if full else ""
    out.append(f"[bold]graphdbg run[/] {escape(' '.join(info.argv or []))}: "
               f"[{colour}]exit {status}[/]{how}{wall}{more}")
    if state == "ended without closing":
        out.append(f"[yellow]the process that wrote it (pid {info.pid}) is gone and never "
                   f"closed the run file: it holds what was captured until the last commit "
                   f"(about a second before the end)[/]")
    if info.rank is not None:
        out.append(escape(rank_line(info.rank, info.host)))
        if state != "complete":   # where the rank was when it stopped
            for line in position_lines(run.position()):
                out.append(f"[yellow]{escape(line)}[/]")
    out.append(counts_line(graphs, run.finding_counts(), run.eager_totals()[0],
                           state == "interrupted"))
    before = compiled_before_text(info.compiled_before)
    if before:
        out.append(f"[yellow]{escape(before)}[/]")
    sampled = eager_steps_line(info.eager_steps)
    if sampled:
        out.append(f"[dim]{escape(sampled)}[/]")
    prof = info.profile
    if prof:
        if prof.get("traces"):
            out.append(f"[dim]torch.profiler: {len(prof['traces'])} trace(s) of "
                       f"{prof.get('steps')} step(s) in {escape(short(prof['dir']))} (Perfetto: "
                       f"ui.perfetto.dev; TensorBoard: tensorboard --logdir "
                       f"{escape(short(prof['dir']))})[/]")
        else:
            out.append(f"[yellow]torch.profiler recorded no trace ({prof.get('steps')} step(s), "
                       f"schedule {','.join(map(str, prof.get('schedule') or []))})[/]")
    if info.py_spy_error:
        out.append(f"[yellow]py-spy: {escape(info.py_spy_error)}[/]")
    return out


def _graphs_section(run: Run, graphs: list[Graph], findings: list[Finding], full: bool) -> list:
    """One row per graph (short: what was compiled where, how big, how often;
    ``full``: the compile ids and the call times beside the eager ones). One
    backend for every graph is said once, in the title (80 columns hold the
    rest)."""
    from rich.console import NewLine
    from rich.markup import escape
    from rich.rule import Rule
    if not graphs:
        return []
    shown = graphs if full else graphs[:_GRAPHS]
    backends = {backend_label(g) for g in graphs}
    one_backend = backends.pop() if len(backends) == 1 else None
    # full: the compile id (its time is in the Compile time table)
    cols = [Col("graph", "right"), *([Col("compile")] if full else []),
            Col("function", flex=True), Col("where"),
            *([Col("backend", flex=True)] if one_backend is None else []),
            Col("nodes", "right"), *([] if full else [Col("compile", "right")]),
            Col("calls", "right"),
            *([Col("mean call", "right"), Col("eager ref", "right")] if full else [])]
    t = FitTable(cols)
    ids = [g.compile_id for g in graphs]
    for g in shown:
        cells = _graph_cells(g, full, run.cell_names(), ids)
        t.add_row(*(cells[c.header] for c in cols))
    title = f"Graphs ({len(graphs)})" + (f", backend {escape(one_backend)}" if one_backend else "")
    out: list = [NewLine(), Rule(title, align="left"), t]
    if len(shown) < len(graphs):
        out.append(f"[dim]… {len(graphs) - len(shown)} more with --full[/]")
    for line in bucket_lines(graphs):
        out.append(f"[dim]{escape(line)}[/]")
    for line in export_lines(run, graphs, findings):
        out.append(f"[dim]{escape(line)}[/]")
    if full:
        out.append("[dim]compile F/N: torch's id of the compile, the Fth function "
                   "torch.compile met (from 0; the code after a graph break counts as its "
                   "own) and its Nth compile (0: the first, then one per recompile); eager "
                   "ref: the graph's ops run eagerly one by one (graphdbg's eager reference "
                   "run), per call[/]")
        if any(g.compiled_slower for g in graphs):
            out.append(f"[dim][yellow]▲[/] compiled slower than eager: over at least "
                       f"{MIN_SAMPLES} calls after the first, its fastest call took longer than "
                       "the graph's ops in the eager reference run by more than the calls' own "
                       "spread (median − fastest)[/]")
    return out


# graphs in the short report (all with --full)
_GRAPHS = 8


def _tail(path: str, findings: list[Finding], full: bool) -> list:
    """The words the report used, then what to type next: the last line
    names --full (what it adds) until it is given."""
    from rich.console import NewLine
    from rich.markup import escape
    p = escape(path if " " not in path else f"'{path}'")
    kind = escape(findings[0].kind) if findings else "KIND"
    out: list = [NewLine(),
                 "[dim]eager: plain PyTorch, op by op; graph: code torch.compile captured and "
                 "compiled[/]",
                 f"next: [bold]graphdbg tui {p}[/] (browse) · [bold]graphdbg explain {kind}[/]"]
    if not full:
        out.append(f"all tables (compile time, slowest ops): [bold]graphdbg report --full "
                   f"{p}[/]")
    return out


def rank_line(rank: dict, host: str | None) -> str:
    """"rank 1 of 2 (local 1, host gpu3, gloo, job 5abc2788)"."""
    parts = [f"local {rank['local_rank']}" if rank.get("local_rank") is not None else None,
             f"host {host}" if host else None, rank.get("backend"),
             f"job {rank['job']}" if rank.get("job") else None,
             f"restart {rank['restart']}" if rank.get("restart") else None]
    return (f"rank {rank['rank']} of {rank['world_size']} "
            f"({', '.join(p for p in parts if p)})")


def bucket_lines(graphs: list[Graph]) -> list[str]:
    """DDPOptimizer's splits: one line per compiled function split into buckets."""
    split: dict[str | None, list[Graph]] = {}
    for g in graphs:
        if g.ddp_bucket is not None:
            split.setdefault(g.compile_id, []).append(g)
    out = []
    for cid, gs in split.items():
        first = gs[0]
        cap = first.ddp_bucket.get("cap_bytes")
        sizes = ", ".join(f"graph {g.id}: {_mb(g.ddp_bucket.get('size_bytes'))} in "
                          f"{len(g.ddp_bucket.get('params') or [])} params" for g in gs)
        out.append(f"DDP: compile {cid} ({first.function or '?'}) is one function that "
                   f"DDPOptimizer split at {len(gs)} gradient buckets"
                   f"{f' of {_mb(cap)}' if cap else ''} (not {len(gs)} compiles): {sizes}; "
                   f"its compile column is each bucket's backend time")
    return out


def export_lines(run: Run, graphs: list[Graph], findings: list[Finding]) -> list[str]:
    """One line per exported graph (torch.export, torch.onnx.export)."""
    out = []
    for g in graphs:
        if g.export is None:
            continue
        divergences = sum(1 for f in findings if f.kind == "divergence" and f.graph_id == g.id)
        out.append(export_text(g, run.node_value_calls(g.id) if g.kind == "onnx" else None,
                               divergences))
    return out


def _mb(n: int | None) -> str:
    return "?" if n is None else f"{n / 2**20:.2f} MB"


def _graph_cells(g: Graph, full: bool, cells: dict[str, str],
                 compile_ids: list[str | None]) -> dict[str, str]:
    """A graph's row, by column (the short report's and --full's); ``cells``:
    notebook cells' names by file (`Run.cell_names`)."""
    from rich.markup import escape
    b = g.ddp_bucket
    name = graph_name(g, full, compile_ids)   # --full shows the compile id beside it
    # a DDP bucket's and an export's own time (an export has no compile)
    compile_s = g.backend_time_s if b is not None or g.export is not None else g.compile_time_s
    took = ("[red]failed[/]" if g.status == "compile_error" else
            "[dim]restarted[/]" if g.status == "restarted" else
            f"{compile_s:.2f} s" if compile_s else "-")
    return {"graph": str(g.id), "function": escape(name),
            "where": escape(at(g.file, g.line, cells.get(g.file)) if g.file in cells else
                            f"{brief(g.file)}:{g.line}" if g.file else "?"),
            "backend": escape(backend_label(g)), "nodes": str(g.n_nodes),
            **({"compile": (g.compile_id or "-") + (" [red]failed[/]" if g.status ==
                            "compile_error" else "")} if full else {"compile": took}),
            "calls": str(g.calls),
            "mean call": ms(g.mean_call_ns),
            # slower than the nodes' eager time beyond the calls' own spread
            # (`Graph.compiled_slower`): flagged
            "eager ref": "-" if not g.eager_ref_ns else
            (f"[yellow]{ms(g.eager_ref_ns)} ▲[/]" if g.compiled_slower else ms(g.eager_ref_ns))}


def summary_lines(run: Run, path: str, rank=None) -> list[str]:
    """The short summary after `graphdbg run` (markup lines), with the next
    command to type; a launcher's rank (`graphdbg.core.ranks.RankInfo`) points
    at the job's folder, which the views open whole."""
    counts = counts_line(run.graphs(), run.finding_counts(), run.eager_totals()[0],
                          run.info.status == "interrupted")
    if rank is not None:
        folder = short(os.path.dirname(path) or ".")
        return [f"[bold]graphdbg:[/] rank {rank.rank}: {counts} → {short(path)}",
                f"  {rank.world_size} ranks write to {folder}/; "
                f"next: [bold]graphdbg report {folder}[/]"]
    return [f"[bold]graphdbg:[/] {counts} → {short(path)}",
            f"  next: [bold]graphdbg report {short(path)}[/]"]
