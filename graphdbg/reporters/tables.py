"""The report's full tables (`graphdbg report --full`): where compile time
went, compiled time per line, py-spy's samples, the slowest graph nodes and
eager ops, each with a line that says what its columns mean (rich only
inside functions)."""

from __future__ import annotations

import re

from ..analysis.compiletime import CACHE_NOTE, cache_text, shows_cache_load
from ..analysis.lines import CompiledLine, compiled_lines, line_cells, line_notes
from ..analysis.wording import PHASE_LABELS
from ..core.format import brief, ms
from ..runfile.query import CompileTime, Finding, Run, Sampling
from .fit import Col, FitTable
from .json import py_spy_lines, recompile_findings

__all__ = ["compile_time_section", "compiled_lines_section", "full_tables"]


def full_tables(run: Run, findings: list[Finding]) -> list:
    """Every table behind --full, in the report's order."""
    return (compile_time_section(run.compile_times(), findings)
            + compiled_lines_section(compiled_lines(run, 10))
            + _py_spy_section(run, run.sampling())
            + _hot_nodes_section(run) + _top_ops_section(run))


def _hot_nodes_section(run: Run) -> list:
    from rich.console import NewLine
    from rich.markup import escape
    from rich.rule import Rule
    # (the JSON's 20, cut here: the same rows whichever way the run file breaks ties)
    hot = run.hot_nodes(20)[:8]
    if not hot:
        return []
    t = FitTable([Col("graph", "right"), Col("node", flex=True), Col("target", flex=True),
                  Col("where"), Col("module", flex=True), Col("time", "right")])
    for h in hot:
        t.add_row(str(h.graph_id), escape(h.name), escape(h.target or ""),
                  escape(f"{brief(h.file)}:{h.line}" if h.file else "-"),
                  escape(h.module_path or "-"), ms(h.eager_ns))
    return [NewLine(), Rule("Slowest graph nodes (eager reference run)", align="left"), t,
            "[dim]time: the node's fastest call in the eager reference run[/]"]


def _top_ops_section(run: Run) -> list:
    from rich.console import NewLine
    from rich.markup import escape
    from rich.rule import Rule
    top = run.op_stats(20)[:8]
    if not top:
        return []
    t = FitTable([Col("op", flex=True), Col("phase"), Col("where"), Col("module", flex=True),
                  Col("count", "right"), Col("total", "right")])
    for o in top:
        t.add_row(escape(o.op), o.phase,
                  escape(f"{brief(o.file)}:{o.line}" if o.file else "-"),
                  escape(o.module_path or "-"), str(o.count), ms(o.total_ns))
    return [NewLine(), Rule("Slowest eager ops (total time)", align="left"), t,
            "[dim]eager ops: the aten ops the program ran outside compiled graphs; phase: "
            "init, forward, backward or optimizer[/]"]


def compile_time_section(times: list[CompileTime], findings: list[Finding]) -> list:
    """Where compile time went, per compile (the phases that took any time),
    and the functions compiled more than once with the reason."""
    from rich.console import NewLine
    from rich.markup import escape
    from rich.rule import Rule
    if not times:
        return []
    shown = [p for p in PHASE_LABELS if any(c.phases.get(p, 0) >= 0.0005 for c in times)]
    total = sum(c.total_s for c in times)
    t = FitTable([Col("compile"), Col("function", flex=True, optional=True), Col("where"),
                  Col("total", "right"), *(Col(PHASE_LABELS[p], "right") for p in shown),
                  Col("cache", flex=True, wrap=True)])
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
                            re.sub(r"^recompile of .*? at (?:\S+:\d+|Cell In\[\d+\], line \d+): ", "",
                                   f.message))
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


def compiled_lines_section(lines: list[CompiledLine]) -> list:
    """Where compiled code spends its time, per user line (``lines``: the
    first 10 of `graphdbg.analysis.lines.compiled_lines`), from inductor's
    kernels (a fused kernel is split between its lines)."""
    from rich.console import NewLine
    from rich.markup import escape
    from rich.rule import Rule
    if not lines:
        return []
    # where and the times keep their width; kernels and code give way (capped: a
    # source line as wide as the terminal leaves the kernels room)
    t = FitTable([Col("where"), Col("total", "right"), Col("fwd/call", "right"),
                  Col("eager ref", "right"), Col("bwd/call", "right"),
                  Col("kernels", flex=True, cap=24), Col("code", flex=True, cap=60)])
    for r in map(line_cells, lines):
        t.add_row(*(f"[yellow]{escape(v)}[/]" if v.endswith(" ▲") else escape(v) for v in r))
    out = [NewLine(), Rule("Compiled time per line (inductor kernels)", align="left"), t]
    for note in line_notes(lines):
        # the slower mark in yellow, as in its rows
        out.append(f"[dim]{'[yellow]▲[/]' + escape(note[1:]) if note.startswith('▲') else escape(note)}[/]")
    return out


def _py_spy_section(run: Run, s: Sampling | None) -> list:
    """Where py-spy found the program's Python, per user line, beside the
    time of the eager ops and compiled calls at the same line."""
    from rich.console import NewLine
    from rich.markup import escape
    from rich.rule import Rule
    if s is None:
        return []
    t = FitTable([Col("where"), Col("function", flex=True), Col("samples", "right"),
                  Col("share", "right"), Col("eager ops", "right"), Col("compiled", "right"),
                  Col("code", flex=True, cap=60)])
    for p in py_spy_lines(run, s, 10):
        ln = p.sampled
        t.add_row(escape(f"{brief(ln.file)}:{ln.line}"), escape(ln.function),
                  str(ln.samples), f"{p.share:.0%}", ms(p.eager_ns) if p.eager_ns else "-",
                  ms(p.compiled_ns) if p.compiled_ns else "-", escape(p.code or ""))
    return [NewLine(), Rule(f"Python samples (py-spy, {s.samples} at {s.rate} Hz; "
                            f"{escape(brief(s.file))})", align="left"), t]


def _secs(x: float) -> str:
    return "-" if x < 0.0005 else f"{x:.2f} s" if x >= 0.1 else f"{x * 1e3:.0f} ms"
