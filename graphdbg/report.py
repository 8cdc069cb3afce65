"""`graphdbg report`: a rich summary of a run file, or a JSON document.

Reads the run file only (no torch import). The JSON schema is documented in
docs/report-json.md; `document()` is its single source.
"""

from __future__ import annotations

import glob
import json
import os
import sys
from typing import Any

from .errors import GraphdbgError
from .runfile import RunReader

JSON_SCHEMA = "graphdbg-report/1"
_SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


def newest_run(directory: str = ".") -> str:
    runs = [p for p in glob.glob(os.path.join(directory, "*.run")) if os.path.isfile(p)]
    if not runs:
        raise GraphdbgError(
            f"no run file in {os.path.abspath(directory)}; give one, or create one with "
            f"`graphdbg run script.py`")
    return max(runs, key=os.path.getmtime)


def _frame_fields(reader: RunReader, frame_id: int | None) -> dict:
    f = reader.frame(frame_id)
    if not f:
        return {"file": None, "line": None, "function": None, "code": None}
    return {"file": f["file"], "line": f["line"], "function": f["function"], "code": f["code"]}


def document(reader: RunReader, *, nodes: bool = True) -> dict:
    """The JSON report: run, graphs (with nodes), diagnostics, eager summary."""
    m = reader.meta
    run = {
        "file": os.path.abspath(reader.path),
        "argv": m.get("argv"), "cwd": m.get("cwd"), "module": m.get("module"),
        "exit_status": m.get("exit_status"), "status": m.get("status"),
        "started_at": m.get("started_at"), "ended_at": m.get("ended_at"),
        "wall_s": m.get("wall_s"), "values": m.get("values"), "device": m.get("device"),
        "versions": {"python": m.get("python"), "torch": m.get("torch"),
                     "graphdbg": m.get("graphdbg")},
        "torch_counters": m.get("torch_counters"), "counts": m.get("counts"),
        "ops_dropped": m.get("ops_dropped"), "internal_errors": m.get("internal_errors") or [],
    }
    call_stats = {r["graph_id"]: dict(r) for r in reader.query(
        "SELECT graph_id, COUNT(*) AS calls, SUM(wall_ns) AS total_ns, "
        "MIN(wall_ns) AS min_ns, MAX(wall_ns) AS max_ns FROM calls GROUP BY graph_id")}
    node_times: dict[int, dict[str, int]] = {}
    for r in reader.query("SELECT graph_id, node, eager_ns FROM node_times"):
        node_times.setdefault(r["graph_id"], {})[r["node"]] = r["eager_ns"]
    graphs = []
    for g in reader.graphs():
        cs = call_stats.get(g["id"], {})
        entry = {
            "id": g["id"], "compile_id": g["compile_id"], "backend": g["backend"],
            "function": g["code_name"], "file": g["code_file"], "line": g["code_line"],
            "status": g["status"], "error": g["error"],
            "n_nodes": g["n_nodes"], "n_ops": g["n_ops"], "n_inputs": g["n_inputs"],
            "compile_time_s": g["compile_time_s"], "backend_time_s": g["backend_time_s"],
            "calls": cs.get("calls", 0), "total_call_ns": cs.get("total_ns") or 0,
            "min_call_ns": cs.get("min_ns"), "max_call_ns": cs.get("max_ns"),
        }
        if nodes:
            entry["nodes"] = []
            times = node_times.get(g["id"], {})
            for n in reader.nodes(g["id"]):
                fr = _frame_fields(reader, n["user_frame"])
                entry["nodes"].append({
                    "idx": n["idx"], "name": n["name"], "op": n["op"], "target": n["target"],
                    "shapes": n["shapes"], "dtypes": n["dtypes"], "args": n["args"],
                    "module_path": n["module_path"], "module_class": n["module_class"],
                    "eager_ns": times.get(n["name"]), **fr})
        graphs.append(entry)
    diagnostics = []
    for d in sorted(reader.diagnostics(),
                    key=lambda d: (_SEVERITY_ORDER.get(d["severity"], 9), d["id"])):
        diagnostics.append({
            "id": d["id"], "kind": d["kind"], "severity": d["severity"],
            "message": d["message"], "reason": d["reason"], "hint": d["hint"],
            **_frame_fields(reader, d["user_frame"]),
            "stack": [{k: f[k] for k in ("file", "line", "function", "code")}
                      for f in reader.stack(d["stack"])],
            "count": d["count"], "compile_ids": d["compile_ids"],
            "graph": d["graph_id"], "node": d["node"], "op": d["op"],
            "detail": d["detail"],
        })
    top_ops = []
    for r in reader.query(
            "SELECT op, phase, user_frame, module_path, count, total_ns, max_ns "
            "FROM op_summary ORDER BY total_ns DESC LIMIT 20"):
        top_ops.append({"op": r["op"], "phase": r["phase"], "count": r["count"],
                        "total_ns": r["total_ns"], "max_ns": r["max_ns"],
                        "module_path": r["module_path"] or None,
                        **_frame_fields(reader, r["user_frame"])})
    totals = reader.query("SELECT COALESCE(SUM(count),0) AS n, COALESCE(SUM(total_ns),0) AS t FROM op_summary")[0]
    eager = {"ops": totals["n"], "total_ns": totals["t"], "ops_recorded": reader.count("ops"),
             "top_ops": top_ops}
    hot_nodes = []
    for r in reader.query(
            "SELECT t.graph_id, t.node, t.eager_ns, n.target, n.op, n.user_frame, n.module_path "
            "FROM node_times t JOIN nodes n ON n.graph_id = t.graph_id AND n.name = t.node "
            "WHERE n.op LIKE 'call_%' ORDER BY t.eager_ns DESC LIMIT 20"):
        hot_nodes.append({"graph": r["graph_id"], "node": r["node"], "target": r["target"],
                          "eager_ns": r["eager_ns"], "module_path": r["module_path"],
                          **_frame_fields(reader, r["user_frame"])})
    return {"schema": JSON_SCHEMA, "run": run, "graphs": graphs,
            "diagnostics": diagnostics, "eager": eager, "hot_nodes": hot_nodes}


# -- rich rendering ------------------------------------------------------------------

def _code_part(code: str) -> str:
    """A line without its trailing comment: the caret goes under code only."""
    import io
    import tokenize
    try:
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            if tok.type == tokenize.COMMENT:
                return code[:tok.start[1]].rstrip()
    except (tokenize.TokenError, SyntaxError):
        pass
    return code


def _short(path: str | None) -> str:
    if not path:
        return "?"
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return rel if not rel.startswith("..") else path


def _brief(path: str | None) -> str:
    return os.path.basename(path) if path else "?"


def _ms(ns: float | None) -> str:
    if ns is None:
        return "-"
    if ns >= 1e9:
        return f"{ns / 1e9:.2f} s"
    if ns >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    return f"{ns / 1e3:.1f} µs"


def _counts_line(doc: dict) -> str:
    diags = doc["diagnostics"]
    by_kind: dict[str, list] = {}
    for d in diags:
        by_kind.setdefault(d["kind"], []).append(d)
    parts = [f"{len(doc['graphs'])} graph{'s' if len(doc['graphs']) != 1 else ''}"]
    for kind, label in (("graph_break", "graph break"), ("recompile", "recompile"),
                        ("compile_error", "compile error"), ("malformed_graph", "malformed graph"),
                        ("divergence", "divergence"), ("nan_inf", "NaN/Inf"),
                        ("runtime_error", "runtime error")):
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
    from rich.markup import escape
    from rich.padding import Padding
    from rich.table import Table
    from rich.text import Text

    run = doc["run"]
    argv = " ".join(run["argv"] or [])
    status = run["exit_status"]
    state = run["status"]
    head = f"[bold]graphdbg run[/] {escape(argv)}"
    wall = f", {run['wall_s']:.1f} s" if run.get("wall_s") else ""
    colour = "green" if status == 0 else "red"
    console.print(f"{head}  [{colour}]exit {status}[/] ({state}{wall}; torch "
                  f"{run['versions']['torch']}, values={run['values']})")
    console.print(_counts_line(doc))

    def indented(markup: str) -> None:
        # wrapped lines stay under their finding
        console.print(Padding(Text.from_markup(markup), (0, 0, 0, 4), expand=False))

    diags = doc["diagnostics"]
    if diags:
        console.print()
        console.rule(f"Problems ({len(diags)})", align="left")
        icons = {"error": "[red]✖[/]", "warning": "[yellow]▲[/]", "info": "[blue]●[/]"}
        for d in diags:
            where = f"{_short(d['file'])}:{d['line']}" if d["file"] else "(no user frame)"
            fn = f" in {escape(d['function'])}" if d["function"] else ""
            times = f"  ×{d['count']}" if d["count"] > 1 else ""
            console.print(f"{icons.get(d['severity'], '?')} [bold]{d['kind']}[/] "
                          f"[cyan]{escape(where)}[/]{fn}{times}")
            if d["code"]:
                console.print(f"    [dim]{d['line']:>5} │[/] {escape(d['code'])}")
                if d["kind"] in ("compile_error", "runtime_error", "malformed_graph"):
                    console.print(f"    {'':>5}   [red]{'^' * len(_code_part(d['code']))}[/]")
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
                chain = " ← ".join(f"{_short(f['file'])}:{f['line']} {f['function']}"
                                   for f in reversed(callers))
                indented(f"[dim]called from {escape(chain)}[/]")

    if doc["graphs"]:
        console.print()
        t = Table(title=None, box=None, header_style="bold", pad_edge=False)
        for col, just in (("graph", "right"), ("compile", "left"), ("function", "left"),
                          ("where", "left"), ("backend", "left"), ("nodes", "right"),
                          ("compile", "right"), ("calls", "right"), ("mean call", "right")):
            t.add_column(col, justify=just)
        for g in doc["graphs"]:
            mean = g["total_call_ns"] / g["calls"] if g["calls"] else None
            t.add_row(str(g["id"]), g["compile_id"] or "-", escape(g["function"] or "?"),
                      escape(f"{_brief(g['file'])}:{g['line']}" if g["file"] else "?"),
                      escape(g["backend"] or "?"), str(g["n_nodes"]),
                      "[red]failed[/]" if g.get("status") == "compile_error" else
                      f"{g['compile_time_s']:.2f} s" if g["compile_time_s"] else "-",
                      str(g["calls"]), _ms(mean))
        console.rule(f"Graphs ({len(doc['graphs'])})", align="left")
        console.print(t)

    hot = doc.get("hot_nodes", [])[:8]
    if hot:
        console.print()
        console.rule("Slowest graph nodes (eager reference run)", align="left")
        t = Table(box=None, header_style="bold", pad_edge=False)
        for col, just in (("graph", "right"), ("node", "left"), ("target", "left"),
                          ("where", "left"), ("module", "left"), ("time", "right")):
            t.add_column(col, justify=just)
        for h in hot:
            t.add_row(str(h["graph"]), escape(h["node"]), escape(h["target"] or ""),
                      escape(f"{_brief(h['file'])}:{h['line']}" if h["file"] else "-"),
                      escape(h["module_path"] or "-"), _ms(h["eager_ns"]))
        console.print(t)

    top = doc["eager"]["top_ops"][:8]
    if top:
        console.print()
        console.rule("Slowest eager ops (total time)", align="left")
        t = Table(box=None, header_style="bold", pad_edge=False)
        for col, just in (("op", "left"), ("phase", "left"), ("where", "left"),
                          ("module", "left"), ("count", "right"), ("total", "right")):
            t.add_column(col, justify=just)
        for o in top:
            t.add_row(escape(o["op"]), o["phase"],
                      escape(f"{_brief(o['file'])}:{o['line']}" if o["file"] else "-"),
                      escape(o["module_path"] or "-"), str(o["count"]), _ms(o["total_ns"]))
        console.print(t)
    if run.get("internal_errors"):
        console.print(f"[dim]graphdbg internal errors (recording continued): "
                      f"{len(run['internal_errors'])}; see `graphdbg report --json`[/]")


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
    console = Console(stderr=True, highlight=False,
                      width=None if sys.stderr.isatty() else 120)
    try:
        doc = document(RunReader(path), nodes=False)
    except GraphdbgError as exc:
        console.print(f"graphdbg: {exc}")
        return
    console.print(f"[bold]graphdbg:[/] {_counts_line(doc)} → {_short(path)}")
    console.print(f"  next: [bold]graphdbg report {_short(path)}[/]")


def main(path: str | None, as_json: bool) -> int:
    path = path or newest_run()
    reader = RunReader(path)
    doc = document(reader)
    if as_json:
        json.dump(doc, sys.stdout, indent=1, default=str)
        sys.stdout.write("\n")
        return 0
    from rich.console import Console
    # Not a terminal (a pipe, a log, make): wide enough for paths and tables.
    width = None if sys.stdout.isatty() else 120
    render(doc, Console(highlight=False, width=width))
    return 0


def to_json_value(doc: dict) -> Any:  # pragma: no cover - convenience for notebooks
    return json.loads(json.dumps(doc, default=str))
