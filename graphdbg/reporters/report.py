"""`graphdbg report`: a rich summary of a run file (`--json`: json.py).

Renders the typed records of graphdbg.runfile.query (no SQL here, no torch;
rich only inside functions). The summary shows no node, so it loads none:
its memory does not grow with the run.
"""

from __future__ import annotations

import glob
import os
import re

from ..analysis.jobtext import position_lines
from ..analysis.wording import (CARET_KINDS, PHASE_LABELS, backend_label, export_text,
                               hint_and_fixes, model_name, specialized_lines)
from ..core.errors import GraphdbgError
from ..core.format import at, brief, caret, clip, ms, short
from ..runfile.details import parse as parse_detail
from ..analysis.compiletime import CACHE_NOTE, cache_text, shows_cache_load
from ..analysis.lines import CompiledLine, compiled_lines
from ..runfile.query import MIN_SAMPLES, CompileTime, Finding, Graph, KindCount, Run, Sampling
from .json import JSON_SCHEMA, document, py_spy_lines, recompile_findings

__all__ = ["JSON_SCHEMA", "document", "newest_run", "position_lines", "render", "summary_lines"]

def newest_run(directory: str = ".") -> str:
    runs = [p for p in glob.glob(os.path.join(directory, "*.run")) if os.path.isfile(p)]
    if not runs:
        raise GraphdbgError(
            f"no run file in {os.path.abspath(directory)}; give one, or create one with "
            f"`graphdbg run script.py`")
    return max(runs, key=os.path.getmtime)


# -- rich rendering ------------------------------------------------------------------

def eager_steps_line(steps: dict | None) -> str | None:
    """What `--eager-steps` left out, in one line; None when every step's eager
    ops were recorded."""
    if not steps or steps.get("recorded", 0) >= steps.get("steps", 0):
        return None
    first, every, by = steps.get("first"), steps.get("every"), steps.get("by") or "step"
    later = f", then one step in {every}" if every else ""
    return (f"eager ops recorded on {steps['recorded']} of {steps['steps']} steps ({by} steps): "
            f"the first {first}{later} (--eager-steps all records every step)")


def _counts_line(graphs: list, counts: dict[str, KindCount], eager_ops: int) -> str:
    """"3 graphs, 2 exports, 2 graph breaks (1 site), ..., 1520 eager ops": the
    compiled graphs counted as torch counts them, exports apart."""
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
            n, sites = c.count, c.sites
            text = f"{n} {label}{'s' if n != 1 else ''}"
            if sites != n:
                text += f" ({sites} site{'s' if sites != 1 else ''})"
            parts.append(text)
    parts.append(f"{eager_ops} eager ops")
    return ", ".join(parts)


def render(run: Run, console) -> None:
    """The summary of ``run`` on a rich console: the run, its problems, graphs,
    compile and compiled time, py-spy's samples, the slowest nodes and eager ops."""
    from rich.console import Group, NewLine
    from rich.markup import escape
    from rich.padding import Padding
    from rich.rule import Rule
    from rich.table import Table
    from rich.text import Text

    out: list = []  # printed at once: one console.print per line costs more than the line

    info = run.info
    graphs = run.graphs()
    findings = run.findings()
    argv = " ".join(info.argv or [])
    status = info.exit_status
    state = info.status
    head = f"[bold]graphdbg run[/] {escape(argv)}"
    wall = f", {info.wall_s:.1f} s" if info.wall_s else ""
    colour = "green" if status == 0 else "red"
    out.append(f"{head}  [{colour}]exit {status}[/] ({state}{wall}; torch "
                  f"{info.torch}, values={info.values})")
    if state == "ended without closing":
        out.append(f"[yellow]the process that wrote it (pid {info.pid}) is gone and never "
                   f"closed the run file: it holds what was captured until the last commit "
                   f"(about a second before the end)[/]")
    if info.rank is not None:
        out.append(escape(rank_line(info.rank, info.host)))
        if state != "complete":   # where the rank was when it stopped
            for line in position_lines(run.position()):
                out.append(f"[yellow]{escape(line)}[/]")
    out.append(_counts_line(graphs, run.finding_counts(), run.eager_totals()[0]))
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

    def indented(markup: str, left: int = 4) -> None:
        # wrapped lines stay under their finding
        out.append(Padding(Text.from_markup(markup, emoji=False), (0, 0, 0, left), expand=False))

    if findings:
        out.append(NewLine())
        out.append(Rule(f"Problems ({len(findings)})", align="left"))
        for f in findings:
            out.append(_problem_head(f))
            if f.code:
                out.append(f"    [dim]{f.line:>5} │[/] {escape(f.code)}")
                if f.col is not None or f.kind in CARET_KINDS:
                    # under the caret's span; the whole line only where none is known
                    out.append(f"    {'':>5}   [red]{caret(f.code, f.col, f.end_col)}[/]")
            indented(escape(f.message))
            # (a divergence without a stored detail still gets its line, of unknowns)
            detail = f.detail if f.detail is not None else parse_detail(f.kind, {})
            summary = detail.summary()
            if summary is not None:
                indented(f"[dim]{escape(summary)}[/]")
            hint, fixes = hint_and_fixes(f.hint, getattr(detail, "fixes", None))
            if hint:
                indented(f"[green]hint:[/] {escape(clip(hint.splitlines()[0], 400))}")
            for fix in fixes:   # one way out a line, wrapped under its dash
                indented(f"[green]-[/] {escape(fix)}", 8)
            for line in specialized_lines(getattr(detail, "specialized", None)):
                indented(f"[dim]{escape(line)}[/]")
            callers = list(f.stack[:-1])[-2:]
            if callers:
                chain = " ← ".join(f"{at(c.file, c.line, c.cell)} {c.function}"
                                   for c in reversed(callers))
                indented(f"[dim]called from {escape(chain)}[/]")

    if graphs:
        out.append(NewLine())
        t = Table(title=None, box=None, header_style="bold", pad_edge=False)
        for col, just in (("graph", "right"), ("compile", "left"), ("function", "left"),
                          ("where", "left"), ("backend", "left"), ("nodes", "right"),
                          ("compile", "right"), ("calls", "right"), ("mean call", "right"),
                          ("eager ref", "right")):
            t.add_column(col, justify=just)
        for g in graphs:
            t.add_row(*_graph_cells(g))
        out.append(Rule(f"Graphs ({len(graphs)})", align="left"))
        out.append(t)
        for line in bucket_lines(graphs):
            out.append(f"[dim]{escape(line)}[/]")
        for line in export_lines(run, graphs, findings):
            out.append(f"[dim]{escape(line)}[/]")
        if any(g.compiled_slower for g in graphs):
            out.append(f"[dim][yellow]▲[/] compiled slower than eager: over at least {MIN_SAMPLES} "
                       "calls after the first, its fastest call took longer than the graph's ops "
                       "in the eager reference run by more than the calls' own spread (median − "
                       "fastest)[/]")

    out += _compile_time_section(run.compile_times(), findings)
    out += _compiled_lines_section(compiled_lines(run, 10))
    out += _py_spy_section(run, run.sampling())

    # (the JSON's 20, cut here: the same rows whichever way the run file breaks ties)
    hot = run.hot_nodes(20)[:8]
    if hot:
        out.append(NewLine())
        out.append(Rule("Slowest graph nodes (eager reference run)", align="left"))
        t = Table(box=None, header_style="bold", pad_edge=False)
        for col, just in (("graph", "right"), ("node", "left"), ("target", "left"),
                          ("where", "left"), ("module", "left"), ("time", "right")):
            t.add_column(col, justify=just)
        for h in hot:
            t.add_row(str(h.graph_id), escape(h.name), escape(h.target or ""),
                      escape(f"{brief(h.file)}:{h.line}" if h.file else "-"),
                      escape(h.module_path or "-"), ms(h.eager_ns))
        out.append(t)

    top = run.op_stats(20)[:8]
    if top:
        out.append(NewLine())
        out.append(Rule("Slowest eager ops (total time)", align="left"))
        t = Table(box=None, header_style="bold", pad_edge=False)
        for col, just in (("op", "left"), ("phase", "left"), ("where", "left"),
                          ("module", "left"), ("count", "right"), ("total", "right")):
            t.add_column(col, justify=just)
        for o in top:
            t.add_row(escape(o.op), o.phase,
                      escape(f"{brief(o.file)}:{o.line}" if o.file else "-"),
                      escape(o.module_path or "-"), str(o.count), ms(o.total_ns))
        out.append(t)
    if info.internal_errors:
        out.append(f"[dim]graphdbg internal errors (recording continued): "
                      f"{len(info.internal_errors)}; see `graphdbg report --json`[/]")
    console.print(Group(*out))


_ICONS = {"error": "[red]✖[/]", "warning": "[yellow]▲[/]", "info": "[blue]●[/]"}


def _problem_head(f: Finding) -> str:
    """A problem's first line: icon, kind, where, how often."""
    from rich.markup import escape
    where = at(f.file, f.line, f.cell) if f.file else "(no user frame)"
    fn = f" in {escape(f.function)}" if f.function else ""
    times = f"  ×{f.count}" if f.count > 1 else ""
    return f"{_ICONS.get(f.severity, '?')} [bold]{f.kind}[/] [cyan]{escape(where)}[/]{fn}{times}"


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


def _graph_cells(g: Graph) -> tuple[str, ...]:
    from rich.markup import escape
    b = g.ddp_bucket
    name = model_name(g)
    if b is not None:
        name += f" · bucket {b['index'] + 1}/{b['count']}"
    # a DDP bucket's and an export's own time (an export has no compile)
    compile_s = g.backend_time_s if b is not None or g.export is not None else g.compile_time_s
    return (str(g.id), g.compile_id or "-", escape(name),
            escape(f"{brief(g.file)}:{g.line}" if g.file else "?"),
            escape(backend_label(g)), str(g.n_nodes),
            "[red]failed[/]" if g.status == "compile_error" else
            "[dim]restarted[/]" if g.status == "restarted" else
            f"{compile_s:.2f} s" if compile_s else "-",
            str(g.calls), ms(g.mean_call_ns),
            # slower than the nodes' eager time beyond the calls' own spread
            # (`Graph.compiled_slower`): flagged
            "-" if not g.eager_ref_ns else
            (f"[yellow]{ms(g.eager_ref_ns)} ▲[/]" if g.compiled_slower else ms(g.eager_ref_ns)))


def _compile_time_section(times: list[CompileTime], findings: list[Finding]) -> list:
    """Where compile time went, per compile (the phases that took any time),
    and the functions compiled more than once with the reason."""
    from rich.console import NewLine
    from rich.markup import escape
    from rich.rule import Rule
    from rich.table import Table
    if not times:
        return []
    shown = [p for p in PHASE_LABELS if any(c.phases.get(p, 0) >= 0.0005 for c in times)]
    total = sum(c.total_s for c in times)
    t = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("compile", "function", "where", "total", *(PHASE_LABELS[p] for p in shown),
                "cache"):
        t.add_column(col, justify="left" if col in ("compile", "function", "where", "cache")
                     else "right")
    rows = sorted(times, key=lambda c: -c.total_s)[:10]
    for c in rows:
        cache = cache_text(c)   # agrees with the phases: no plain "hit" beside a C++ compile
        t.add_row(c.compile_id + (" [red]failed[/]" if c.failed else ""),
                  escape(c.function or "?"),
                  escape(f"{brief(c.file)}:{c.line}" if c.file else "-"),
                  f"{c.total_s:.2f} s", *(_secs(c.phases.get(p, 0.0)) for p in shown), cache)
    out: list = [NewLine(), Rule(f"Compile time ({total:.1f} s in {len(times)} compile"
                      f"{'s' if len(times) != 1 else ''})", align="left"), t]
    if shows_cache_load(rows):
        out.append(f"[dim]{escape(CACHE_NOTE)}[/]")
    by_code: dict[tuple, list[CompileTime]] = {}
    for c in times:
        by_code.setdefault((c.function, c.file, c.line), []).append(c)
    # "recompile of f() at x.py:3: scale changed ..." -> "scale changed ..." (without
    # the list of frames one change recompiled: each is a row here)
    reasons = {f.id: re.sub(r" \(\d+ compiled frames recompiled: .*\)$", "",
                            re.sub(r"^recompile of .*? at \S+:\d+: ", "", f.message))
               for f in findings if f.kind == "recompile"}
    finding_of = recompile_findings(findings)
    for (fn, file, line), cs in by_code.items():
        if len(cs) > 1 and fn:
            why = sorted({reasons[finding_of[c.compile_id]] for c in cs
                          if finding_of.get(c.compile_id) in reasons})
            out.append(f"[yellow]{escape(fn)}[/] at {escape(f'{brief(file)}:{line}')} compiled "
                       f"{len(cs)} times ({sum(c.total_s for c in cs):.2f} s)"
                       + (f": {escape('; '.join(why))}" if why else ""))
    return out


def _compiled_lines_section(lines: list[CompiledLine]) -> list:
    """Where compiled code spends its time, per user line (``lines``: the
    first 10 of `graphdbg.analysis.lines.compiled_lines`), from inductor's
    kernels (a fused kernel is split between its lines)."""
    from rich.console import NewLine
    from rich.markup import escape
    from rich.rule import Rule
    from rich.table import Table
    if not lines:
        return []
    rows = []
    for c in lines:
        ks = [k.removeprefix("extern_kernels.") for k in c.kernels]
        fwd = ms(c.forward_ns) if c.forward_ns else "-"
        if c.forward_ns and not c.steady:
            fwd += " *"
        elif c.forward_ns and c.samples < MIN_SAMPLES:
            fwd += " ~"
        ref = "-" if not c.eager_ref_ns else ms(c.eager_ref_ns) + (" ▲" if c.compiled_slower else "")
        shared = " ⋈" if getattr(c, "shared", False) else ""
        rows.append((f"{brief(c.file)}:{c.line}{shared}", ms(c.total_ns), fwd, ref,
                     ms(c.backward_ns) if c.backward_ns else "-",
                     ", ".join(ks[:2]) + (f" +{len(ks) - 2}" if len(ks) > 2 else ""), c.code or ""))
    t = Table(box=None, header_style="bold", pad_edge=False)
    # where and the times keep their width; kernels and code give way (capped: a
    # flexible column as wide as a long source line made rich drop the time columns)
    for i, (col, just) in enumerate((("where", "left"), ("total", "right"), ("fwd/call", "right"),
                                     ("eager ref", "right"), ("bwd/call", "right"),
                                     ("kernels", "left"), ("code", "left"))):
        fixed = i < 5
        t.add_column(col, justify=just, no_wrap=True, overflow="ellipsis",
                     min_width=max(len(col), *(len(r[i]) for r in rows)) if fixed else None,
                     max_width={"kernels": 24, "code": 60}.get(col))
    for r in rows:
        t.add_row(*(f"[yellow]{escape(v)}[/]" if v.endswith(" ▲") else escape(v) for v in r))
    out = [NewLine(), Rule("Compiled time per line (inductor kernels)", align="left"), t]
    if any(getattr(c, "shared", False) for c in lines):
        out.append("[dim]⋈ a kernel fused from several lines: its time is split between them (in "
                   "proportion to their nodes' eager reference times where each has one, else "
                   "equally), so the lines add up to the kernels' time, never more than the "
                   "graph's[/]")
    if any(c.compiled_slower for c in lines):
        out.append(f"[dim][yellow]▲[/] the line's kernels took longer per call than its nodes in "
                   f"the eager reference run, by more than their own spread over at least "
                   f"{MIN_SAMPLES} calls after the first (median − fastest)[/]")
    if any(r[2].endswith(" *") for r in rows):
        out.append("[dim]* the graph's first (cold) call only: it ran once[/]")
    if any(r[2].endswith(" ~") for r in rows):
        out.append(f"[dim]~ timed over fewer than {MIN_SAMPLES} calls after the first: "
                   "too few to call it slower than eager[/]")
    return out


def _py_spy_section(run: Run, s: Sampling | None) -> list:
    """Where py-spy found the program's Python, per user line, beside the
    time of the eager ops and compiled calls at the same line."""
    from rich.console import NewLine
    from rich.markup import escape
    from rich.rule import Rule
    from rich.table import Table
    if s is None:
        return []
    t = Table(box=None, header_style="bold", pad_edge=False)
    for col, just in (("where", "left"), ("function", "left"), ("samples", "right"),
                      ("share", "right"), ("eager ops", "right"), ("compiled", "right"),
                      ("code", "left")):
        t.add_column(col, justify=just)
    for p in py_spy_lines(run, s, 10):
        ln = p.sampled
        t.add_row(escape(f"{brief(ln.file)}:{ln.line}"), escape(ln.function),
                  str(ln.samples), f"{p.share:.0%}", ms(p.eager_ns) if p.eager_ns else "-",
                  ms(p.compiled_ns) if p.compiled_ns else "-", escape(p.code or ""))
    return [NewLine(), Rule(f"Python samples (py-spy, {s.samples} at {s.rate} Hz; "
                            f"{escape(brief(s.file))})", align="left"), t]


def _secs(x: float) -> str:
    return "-" if x < 0.0005 else f"{x:.2f} s" if x >= 0.1 else f"{x * 1e3:.0f} ms"


def summary_lines(run: Run, path: str, rank=None) -> list[str]:
    """The short summary after `graphdbg run` (markup lines), with the next
    command to type; a launcher's rank (`graphdbg.core.ranks.RankInfo`) points
    at the job's folder, which the views open whole."""
    counts = _counts_line(run.graphs(), run.finding_counts(), run.eager_totals()[0])
    if rank is not None:
        folder = short(os.path.dirname(path) or ".")
        return [f"[bold]graphdbg:[/] rank {rank.rank}: {counts} → {short(path)}",
                f"  {rank.world_size} ranks write to {folder}/; "
                f"next: [bold]graphdbg report {folder}[/]"]
    return [f"[bold]graphdbg:[/] {counts} → {short(path)}",
            f"  next: [bold]graphdbg report {short(path)}[/]"]
