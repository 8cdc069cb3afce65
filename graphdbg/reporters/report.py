"""`graphdbg report`: a rich summary of a run file, or a JSON document.

Reads the run file through graphdbg.runfile.query (no SQL here, no torch; rich only
inside functions). The JSON schema is documented in docs/report-json.md;
`document()` is its single source. The rich summary shows no node, so it
loads none: its memory does not grow with the run.
"""

from __future__ import annotations

import glob
import json
import os
import re
import sys

from ..core.errors import GraphdbgError
from ..core.format import brief, code_part, ms, short
from ..runfile.query import MIN_SAMPLES, Finding, Frame, Node, OpStat, Run

JSON_SCHEMA = "graphdbg-report/1"


def newest_run(directory: str = ".") -> str:
    runs = [p for p in glob.glob(os.path.join(directory, "*.run")) if os.path.isfile(p)]
    if not runs:
        raise GraphdbgError(
            f"no run file in {os.path.abspath(directory)}; give one, or create one with "
            f"`graphdbg run script.py`")
    return max(runs, key=os.path.getmtime)


def _open(run: Run | str) -> tuple[Run, bool]:
    """The `Run` behind what callers give, and whether we opened it."""
    if isinstance(run, Run):
        return run, False
    return Run(run), True


def _where(x: Frame | Node | OpStat | Finding) -> dict:
    return {"file": x.file, "line": x.line, "function": x.function, "code": x.code}


def document(run: Run | str, *, nodes: bool = True) -> dict:
    """The JSON report: run, graphs (with nodes), diagnostics, eager summary.
    ``run``: a `Run` (`graphdbg.open_run`) or a path."""
    run, opened = _open(run)
    try:
        return _document(run, nodes)
    finally:
        if opened:
            run.close()


def _document(run: Run, with_nodes: bool) -> dict:
    i = run.info
    info = {
        "file": i.file, "argv": i.argv, "cwd": i.cwd, "module": i.module,
        "exit_status": i.exit_status, "status": i.status,
        "started_at": i.started_at, "ended_at": i.ended_at, "wall_s": i.wall_s,
        "values": i.values, "device": i.device, "versions": i.versions,
        "torch_counters": i.torch_counters, "counts": i.counts,
        "ops_dropped": i.ops_dropped, "internal_errors": i.internal_errors,
        "pid": i.pid, "host": i.host, "profile": i.profile, "py_spy_error": i.py_spy_error,
    }
    graphs = []
    for g in run.graphs():
        entry = {
            "id": g.id, "compile_id": g.compile_id, "backend": g.backend,
            "function": g.function, "file": g.file, "line": g.line,
            "status": g.status, "error": g.error,
            "n_nodes": g.n_nodes, "n_ops": g.n_ops, "n_inputs": g.n_inputs,
            "compile_time_s": g.compile_time_s, "backend_time_s": g.backend_time_s,
            "calls": g.calls, "total_call_ns": g.total_call_ns,
            "min_call_ns": g.min_call_ns, "max_call_ns": g.max_call_ns,
            "eager_ref_ns": g.eager_ref_ns, "steady_call_ns": g.steady_call_ns,
            "compiled_slower": g.compiled_slower,
        }
        if with_nodes:
            entry["nodes"] = [{
                "idx": n.idx, "name": n.name, "op": n.op, "target": n.target,
                "shapes": n.shapes, "dtypes": n.dtypes, "args": n.args,
                "module_path": n.module_path, "module_class": n.module_class,
                "eager_ns": n.eager_ns, **_where(n)} for n in run.nodes(g.id)]
        graphs.append(entry)
    diagnostics = [{
        "id": d.id, "kind": d.kind, "severity": d.severity,
        "message": d.message, "reason": d.reason, "hint": d.hint, **_where(d),
        "stack": [f.as_dict() for f in d.stack],
        "count": d.count, "compile_ids": list(d.compile_ids),
        "graph": d.graph_id, "node": d.node, "op": d.op, "detail": d.detail,
    } for d in run.findings()]
    top_ops = [{"op": o.op, "phase": o.phase, "count": o.count, "total_ns": o.total_ns,
                "max_ns": o.max_ns, "module_path": o.module_path, **_where(o)}
               for o in run.op_stats(20)]
    ops, total_ns = run.eager_totals()
    eager = {"ops": ops, "total_ns": total_ns, "ops_recorded": run.count("ops"),
             "top_ops": top_ops}
    hot_nodes = [{"graph": n.graph_id, "node": n.name, "target": n.target,
                  "eager_ns": n.eager_ns, "module_path": n.module_path, **_where(n)}
                 for n in run.hot_nodes(20)]
    return {"schema": JSON_SCHEMA, "run": info, "graphs": graphs,
            "diagnostics": diagnostics, "eager": eager, "hot_nodes": hot_nodes,
            "compile_times": _compile_times(run, diagnostics), "py_spy": _py_spy(run),
            "compiled_lines": _compiled_lines(run), "kernels": _kernels(run)}


def _kernels(run: Run) -> list[dict]:
    """inductor's kernels, most total time first, with the user lines they compute."""
    ks = sorted(run.kernel_times(), key=lambda k: -k.total_ns)[:100]
    return [{"compile_id": k.compile_id, "graph": k.graph_id, "part": k.part, "name": k.name,
             "handle": k.handle, "ns": k.ns, "first_ns": k.first_ns, "steady": k.steady,
             "samples": k.samples,
             "calls": k.calls,
             "total_ns": k.total_ns, "lines": [{"file": f.file, "line": f.line} for f in k.frames],
             "nodes": list(k.nodes)} for k in ks]


def _compiled_lines(run: Run) -> list[dict]:
    """Inductor's kernel time per user line (provenance), beside the line's
    nodes in the eager reference run."""
    return [{"file": c.file, "line": c.line, "function": c.function, "code": c.code,
             "total_ns": c.total_ns, "forward_ns": c.forward_ns, "backward_ns": c.backward_ns,
             "eager_ref_ns": c.eager_ref_ns, "compiled_slower": c.compiled_slower,
             "steady": c.steady, "samples": c.samples, "kernels": list(c.kernels),
             "graphs": list(c.graph_ids)}
            for c in run.compiled_lines(50)]


def _py_spy(run: Run) -> dict | None:
    """py-spy's samples per user line, beside the eager op and compiled time of the line."""
    s = run.sampling()
    if s is None:
        return None
    times = {(t.file, t.line): t for t in run.hot_lines(None)}
    sources: dict[str, list[str]] = {}
    lines = []
    for ln in s.lines[:50]:
        if ln.file not in sources:
            text = run.source(ln.file)
            sources[ln.file] = text.splitlines() if text else []
        src = sources[ln.file]
        t = times.get((ln.file, ln.line))
        lines.append({"file": ln.file, "line": ln.line, "function": ln.function,
                      "code": src[ln.line - 1].strip() if 0 < ln.line <= len(src) else None,
                      "samples": ln.samples, "share": ln.samples / s.samples if s.samples else 0.0,
                      "eager_ns": t.eager_ns if t else 0, "compiled_ns": t.compiled_ns if t else 0})
    return {"samples": s.samples, "rate": s.rate, "speedscope": s.file, "lines": lines}


def _compile_times(run: Run, diagnostics: list[dict]) -> list[dict]:
    """Each compile's time by phase; a recompile names the finding that says why."""
    why = {cid: d["id"] for d in diagnostics if d["kind"] == "recompile"
           for cid in d["compile_ids"]}
    return [{"compile_id": c.compile_id, "graphs": list(c.graph_ids), "function": c.function,
             "file": c.file, "line": c.line, "total_s": c.total_s, "phases": c.phases,
             "fx_cache": c.fx_cache, "aot_cache": c.aot_cache, "failed": c.failed,
             "recompile": c.recompile, "recompile_finding": why.get(c.compile_id)}
            for c in run.compile_times()]


# -- rich rendering ------------------------------------------------------------------

def _counts_line(doc: dict) -> str:
    diags = doc["diagnostics"]
    by_kind: dict[str, list] = {}
    for d in diags:
        by_kind.setdefault(d["kind"], []).append(d)
    parts = [f"{len(doc['graphs'])} graph{'s' if len(doc['graphs']) != 1 else ''}"]
    for kind, label in (("graph_break", "graph break"), ("recompile", "recompile"),
                        ("compile_error", "compile error"), ("malformed_graph", "malformed graph"),
                        ("divergence", "divergence"), ("nan_inf", "NaN/Inf"),
                        ("runtime_error", "runtime error"), ("check_skipped", "graph not checked")):
        items = by_kind.get(kind)
        if items:
            n = sum(d["count"] for d in items)
            sites = len(items)
            text = f"{n} {label}{'s' if n != 1 else ''}"
            if sites != n:
                text += f" ({sites} site{'s' if sites != 1 else ''})"
            parts.append(text)
    parts.append(f"{doc['eager']['ops']} eager ops")
    return ", ".join(parts)


def render(doc: dict, console) -> None:
    from rich.console import Group, NewLine
    from rich.markup import escape
    from rich.padding import Padding
    from rich.rule import Rule
    from rich.table import Table
    from rich.text import Text

    out: list = []  # printed at once: one console.print per line costs more than the line

    run = doc["run"]
    argv = " ".join(run["argv"] or [])
    status = run["exit_status"]
    state = run["status"]
    head = f"[bold]graphdbg run[/] {escape(argv)}"
    wall = f", {run['wall_s']:.1f} s" if run.get("wall_s") else ""
    colour = "green" if status == 0 else "red"
    out.append(f"{head}  [{colour}]exit {status}[/] ({state}{wall}; torch "
                  f"{run['versions']['torch']}, values={run['values']})")
    if state == "ended without closing":
        out.append(f"[yellow]the process that wrote it (pid {run.get('pid')}) is gone and never "
                   f"closed the run file: it holds what was captured until the last commit "
                   f"(about a second before the end)[/]")
    out.append(_counts_line(doc))
    prof = run.get("profile")
    if prof:
        if prof.get("traces"):
            out.append(f"[dim]torch.profiler: {len(prof['traces'])} trace(s) of "
                       f"{prof.get('steps')} step(s) in {escape(short(prof['dir']))} (Perfetto: "
                       f"ui.perfetto.dev; TensorBoard: tensorboard --logdir "
                       f"{escape(short(prof['dir']))})[/]")
        else:
            out.append(f"[yellow]torch.profiler recorded no trace ({prof.get('steps')} step(s), "
                       f"schedule {','.join(map(str, prof.get('schedule') or []))})[/]")
    if run.get("py_spy_error"):
        out.append(f"[yellow]py-spy: {escape(run['py_spy_error'])}[/]")

    def indented(markup: str) -> None:
        # wrapped lines stay under their finding
        out.append(Padding(Text.from_markup(markup, emoji=False), (0, 0, 0, 4), expand=False))

    diags = doc["diagnostics"]
    if diags:
        out.append(NewLine())
        out.append(Rule(f"Problems ({len(diags)})", align="left"))
        icons = {"error": "[red]✖[/]", "warning": "[yellow]▲[/]", "info": "[blue]●[/]"}
        for d in diags:
            where = f"{short(d['file'])}:{d['line']}" if d["file"] else "(no user frame)"
            fn = f" in {escape(d['function'])}" if d["function"] else ""
            times = f"  ×{d['count']}" if d["count"] > 1 else ""
            out.append(f"{icons.get(d['severity'], '?')} [bold]{d['kind']}[/] "
                          f"[cyan]{escape(where)}[/]{fn}{times}")
            if d["code"]:
                out.append(f"    [dim]{d['line']:>5} │[/] {escape(d['code'])}")
                if d["kind"] in ("compile_error", "runtime_error", "malformed_graph"):
                    out.append(f"    {'':>5}   [red]{'^' * len(code_part(d['code']))}[/]")
            indented(escape(d['message']))
            detail = d.get("detail") or {}
            if d["kind"] == "divergence":
                indented(f"[dim]{escape(_divergence_line(detail))}[/]")
            if d["kind"] == "graph_break" and detail.get("explanation"):
                indented(f"[dim]{escape(detail['explanation'][:300])}[/]")
            if d["hint"]:
                indented(f"[green]hint:[/] {escape(d['hint'].splitlines()[0][:300])}")
            callers = [f for f in d["stack"][:-1]][-2:]
            if callers:
                chain = " ← ".join(f"{short(f['file'])}:{f['line']} {f['function']}"
                                   for f in reversed(callers))
                indented(f"[dim]called from {escape(chain)}[/]")

    if doc["graphs"]:
        out.append(NewLine())
        t = Table(title=None, box=None, header_style="bold", pad_edge=False)
        for col, just in (("graph", "right"), ("compile", "left"), ("function", "left"),
                          ("where", "left"), ("backend", "left"), ("nodes", "right"),
                          ("compile", "right"), ("calls", "right"), ("mean call", "right"),
                          ("eager ref", "right")):
            t.add_column(col, justify=just)
        for g in doc["graphs"]:
            mean = g["total_call_ns"] / g["calls"] if g["calls"] else None
            t.add_row(str(g["id"]), g["compile_id"] or "-", escape(g["function"] or "?"),
                      escape(f"{brief(g['file'])}:{g['line']}" if g["file"] else "?"),
                      escape(g["backend"] or "?"), str(g["n_nodes"]),
                      "[red]failed[/]" if g.get("status") == "compile_error" else
                      f"{g['compile_time_s']:.2f} s" if g["compile_time_s"] else "-",
                      str(g["calls"]), ms(mean),
                      # fastest compiled call slower than the nodes' eager time: flagged
                      "-" if not g.get("eager_ref_ns") else
                      (f"[yellow]{ms(g['eager_ref_ns'])} ▲[/]" if g.get("compiled_slower")
                       else ms(g["eager_ref_ns"])))
        out.append(Rule(f"Graphs ({len(doc['graphs'])})", align="left"))
        out.append(t)
        if any(g.get("compiled_slower") for g in doc["graphs"]):
            out.append("[dim][yellow]▲[/] compiled slower than eager: its fastest call after the "
                       "first took longer than the graph's ops in the eager reference run[/]")

    out += _compile_time_section(doc)
    out += _compiled_lines_section(doc)
    out += _py_spy_section(doc)

    hot = doc.get("hot_nodes", [])[:8]
    if hot:
        out.append(NewLine())
        out.append(Rule("Slowest graph nodes (eager reference run)", align="left"))
        t = Table(box=None, header_style="bold", pad_edge=False)
        for col, just in (("graph", "right"), ("node", "left"), ("target", "left"),
                          ("where", "left"), ("module", "left"), ("time", "right")):
            t.add_column(col, justify=just)
        for h in hot:
            t.add_row(str(h["graph"]), escape(h["node"]), escape(h["target"] or ""),
                      escape(f"{brief(h['file'])}:{h['line']}" if h["file"] else "-"),
                      escape(h["module_path"] or "-"), ms(h["eager_ns"]))
        out.append(t)

    top = doc["eager"]["top_ops"][:8]
    if top:
        out.append(NewLine())
        out.append(Rule("Slowest eager ops (total time)", align="left"))
        t = Table(box=None, header_style="bold", pad_edge=False)
        for col, just in (("op", "left"), ("phase", "left"), ("where", "left"),
                          ("module", "left"), ("count", "right"), ("total", "right")):
            t.add_column(col, justify=just)
        for o in top:
            t.add_row(escape(o["op"]), o["phase"],
                      escape(f"{brief(o['file'])}:{o['line']}" if o["file"] else "-"),
                      escape(o["module_path"] or "-"), str(o["count"]), ms(o["total_ns"]))
        out.append(t)
    if run.get("internal_errors"):
        out.append(f"[dim]graphdbg internal errors (recording continued): "
                      f"{len(run['internal_errors'])}; see `graphdbg report --json`[/]")
    console.print(Group(*out))


PHASE_LABELS = {"dynamo": "Dynamo", "graphdbg": "graphdbg", "backend": "backend", "aot": "AOT",
                "cache": "cache load", "lowering": "lowering", "codegen": "codegen",
                "cpp": "C++ compile"}


def _compile_time_section(doc: dict) -> list:
    """Where compile time went, per compile (the phases that took any time),
    and the functions compiled more than once with the reason."""
    from rich.console import NewLine
    from rich.markup import escape
    from rich.rule import Rule
    from rich.table import Table
    times = doc.get("compile_times") or []
    if not times:
        return []
    shown = [p for p in PHASE_LABELS if any(c["phases"].get(p, 0) >= 0.0005 for c in times)]
    total = sum(c["total_s"] for c in times)
    t = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("compile", "function", "where", "total", *(PHASE_LABELS[p] for p in shown),
                "FX cache"):
        t.add_column(col, justify="left" if col in ("compile", "function", "where", "FX cache")
                     else "right")
    for c in sorted(times, key=lambda c: -c["total_s"])[:10]:
        fx = c["fx_cache"] or {}
        cache = ("hit" if fx.get("hits") and not fx.get("misses") else
                 "miss" if fx.get("misses") else "-")
        t.add_row(c["compile_id"] + (" [red]failed[/]" if c["failed"] else ""),
                  escape(c["function"] or "?"),
                  escape(f"{brief(c['file'])}:{c['line']}" if c["file"] else "-"),
                  f"{c['total_s']:.2f} s", *(_secs(c["phases"].get(p, 0.0)) for p in shown), cache)
    out: list = [NewLine(), Rule(f"Compile time ({total:.1f} s in {len(times)} compile"
                      f"{'s' if len(times) != 1 else ''})", align="left"), t]
    by_code: dict[tuple, list] = {}
    for c in times:
        by_code.setdefault((c["function"], c["file"], c["line"]), []).append(c)
    # "recompile of f() at x.py:3: scale changed ..." -> "scale changed ..." (without
    # the list of frames one change recompiled: each is a row here)
    reasons = {d["id"]: re.sub(r" \(\d+ compiled frames recompiled: .*\)$", "",
                               re.sub(r"^recompile of .*? at \S+:\d+: ", "", d["message"]))
               for d in doc["diagnostics"] if d["kind"] == "recompile"}
    for (fn, file, line), cs in by_code.items():
        if len(cs) > 1 and fn:
            why = sorted({reasons[c["recompile_finding"]] for c in cs
                          if c.get("recompile_finding") in reasons})
            out.append(f"[yellow]{escape(fn)}[/] at {escape(f'{brief(file)}:{line}')} compiled "
                       f"{len(cs)} times ({sum(c['total_s'] for c in cs):.2f} s)"
                       + (f": {escape('; '.join(why))}" if why else ""))
    return out


def _compiled_lines_section(doc: dict) -> list:
    """Where compiled code spends its time, per user line, from inductor's
    kernels (a fused kernel counts a share at each of its lines)."""
    from rich.console import NewLine
    from rich.markup import escape
    from rich.rule import Rule
    from rich.table import Table
    lines = doc.get("compiled_lines") or []
    if not lines:
        return []
    rows = []
    for c in lines[:10]:
        ks = [k.removeprefix("extern_kernels.") for k in c["kernels"]]
        fwd = ms(c["forward_ns"]) if c["forward_ns"] else "-"
        if c["forward_ns"] and not c.get("steady", True):
            fwd += " *"
        elif c["forward_ns"] and c.get("samples", MIN_SAMPLES) < MIN_SAMPLES:
            fwd += " ~"
        ref = "-" if not c["eager_ref_ns"] else ms(c["eager_ref_ns"]) + (" ▲" if c["compiled_slower"] else "")
        rows.append((f"{brief(c['file'])}:{c['line']}", ms(c["total_ns"]), fwd, ref,
                     ms(c["backward_ns"]) if c["backward_ns"] else "-",
                     ", ".join(ks[:2]) + (f" +{len(ks) - 2}" if len(ks) > 2 else ""), c["code"] or ""))
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
    if any(c["compiled_slower"] for c in lines[:10]):
        out.append("[dim][yellow]▲[/] the line's kernels took longer per call than its nodes in "
                   "the eager reference run[/]")
    if any(r[2].endswith(" *") for r in rows):
        out.append("[dim]* the graph's first (cold) call only: it ran once[/]")
    if any(r[2].endswith(" ~") for r in rows):
        out.append(f"[dim]~ timed over fewer than {MIN_SAMPLES} calls after the first: "
                   "too few to call it slower than eager[/]")
    return out


def _py_spy_section(doc: dict) -> list:
    """Where py-spy found the program's Python, per user line, beside the
    time of the eager ops and compiled calls at the same line."""
    from rich.console import NewLine
    from rich.markup import escape
    from rich.rule import Rule
    from rich.table import Table
    p = doc.get("py_spy")
    if not p:
        return []
    t = Table(box=None, header_style="bold", pad_edge=False)
    for col, just in (("where", "left"), ("function", "left"), ("samples", "right"),
                      ("share", "right"), ("eager ops", "right"), ("compiled", "right"),
                      ("code", "left")):
        t.add_column(col, justify=just)
    for ln in p["lines"][:10]:
        t.add_row(escape(f"{brief(ln['file'])}:{ln['line']}"), escape(ln["function"]),
                  str(ln["samples"]), f"{ln['share']:.0%}", ms(ln["eager_ns"]) if ln["eager_ns"] else "-",
                  ms(ln["compiled_ns"]) if ln["compiled_ns"] else "-", escape(ln["code"] or ""))
    return [NewLine(), Rule(f"Python samples (py-spy, {p['samples']} at {p['rate']} Hz; "
                            f"{escape(brief(p['speedscope']))})", align="left"), t]


def _secs(x: float) -> str:
    return "-" if x < 0.0005 else f"{x:.2f} s" if x >= 0.1 else f"{x * 1e3:.0f} ms"


def _divergence_line(d: dict) -> str:
    def num(x):
        return "-" if x is None else f"{x:.3g}"
    parts = [f"{d.get('classification')}", f"node {d.get('node')}"]
    if d.get("module_path"):
        parts.append(f"module {d['module_path']} ({d.get('module_class')})")
    parts.append(f"stage {d.get('stage')}")
    parts.append(f"max abs {num(d.get('max_abs'))}, rel {num(d.get('max_rel'))}")
    parts.append(f"vs float64: eager {num(d.get('eager_vs_fp64'))}, "
                 f"compiled {num(d.get('compiled_vs_fp64'))}")
    iso = d.get("isolated") or {}
    if iso.get("decided"):
        parts.append("wrong on its own inputs" if iso.get("diverges") else "right on its own inputs")
    parts.append(f"{d.get('compiles')} compiles ({d.get('method')})")
    if d.get("undecided"):
        parts.append(f"undecided: {'; '.join(d['undecided'])[:200]}")
    return " · ".join(parts)


def print_run_summary(path: str) -> None:
    """Short summary after `graphdbg run`, with the next command to type (stderr)."""
    from rich.console import Console
    console = Console(stderr=True, highlight=False, emoji=False,
                      width=None if sys.stderr.isatty() else 120)
    try:
        doc = document(path, nodes=False)
    except GraphdbgError as exc:
        console.print(f"graphdbg: {exc}")
        return
    console.print(f"[bold]graphdbg:[/] {_counts_line(doc)} → {short(path)}")
    console.print(f"  next: [bold]graphdbg report {short(path)}[/]")


def main(path: str | None, as_json: bool) -> int:
    """`graphdbg report [RUN] [--json]`."""
    with Run(path or newest_run()) as run:
        if as_json:
            json.dump(document(run), sys.stdout, indent=1, default=str)
            sys.stdout.write("\n")
            return 0
        from rich.console import Console
        # Not a terminal (a pipe, a log, make): wide enough for paths and tables.
        width = None if sys.stdout.isatty() else 120
        # the summary shows no node: they are not loaded
        render(document(run, nodes=False), Console(highlight=False, emoji=False, width=width))
    return 0
