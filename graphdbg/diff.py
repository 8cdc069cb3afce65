"""`graphdbg diff A B`: compare two runs of the same program (say an eager run,
`graphdbg run --stance force_eager`, against a compiled one).

Records are aligned by source line, op and occurrence, never by position:
the k-th `aten.addmm` at model.py:42 in A meets the k-th one in B. Compiled
graphs in a run are compared at their boundaries: the k-th call's outputs meet
the k-th value computed at the graph's output line in the other run. Reported:
the first place where shapes or values part ways (in A's order), lines that
ran compiled in one run and eager in the other, and the lines whose time
changed most. Reads run files only (no torch).
"""

from __future__ import annotations

import json
import math
import sys
from collections import defaultdict
from .runfile import RunReader

JSON_SCHEMA = "graphdbg-diff/1"


def _load(reader: RunReader) -> dict:
    frames = {r["id"]: (r["file"], r["line"], r["code"])
              for r in reader.query("SELECT id, file, line, code FROM frames")}
    ops: list[dict] = []
    seen: dict[tuple, int] = defaultdict(int)
    for r in reader.iter_query("SELECT seq, op, phase, shapes, dtypes, stats, time_ns, user_frame "
                               "FROM ops ORDER BY seq"):
        file, line, code = frames.get(r["user_frame"], (None, None, None))
        key = (file, line, r["op"], r["phase"])
        k = seen[key]
        seen[key] += 1
        ops.append({"key": (*key, k), "seq": r["seq"], "file": file, "line": line, "code": code,
                    "op": r["op"], "phase": r["phase"], "shapes": json.loads(r["shapes"] or "[]"),
                    "stats": json.loads(r["stats"]) if r["stats"] else None,
                    "time_ns": r["time_ns"]})
    graphs = {g["id"]: g for g in reader.graphs()}
    out_line: dict[int, tuple] = {}
    covered: dict[tuple, set] = defaultdict(set)
    for gid in graphs:
        nodes = reader.nodes(gid)
        for n in nodes:
            f = frames.get(n["user_frame"])
            if f and n["op"].startswith("call_"):
                covered[(f[0], f[1])].add(gid)
        lines = [frames.get(n["user_frame"]) for n in nodes
                 if n["op"].startswith("call_") and frames.get(n["user_frame"])]
        if lines:
            out_line[gid] = lines[-1]
    calls = []
    for r in reader.iter_query("SELECT seq, graph_id, call_idx, wall_ns, outputs FROM calls ORDER BY seq"):
        calls.append({"seq": r["seq"], "graph": r["graph_id"], "call": r["call_idx"],
                      "wall_ns": r["wall_ns"], "outputs": json.loads(r["outputs"] or "[]")})
    time_by_line: dict[tuple, int] = defaultdict(int)
    for o in ops:
        if o["file"]:
            time_by_line[(o["file"], o["line"])] += o["time_ns"] or 0
    for c in calls:
        g = graphs.get(c["graph"], {})
        if g.get("code_file"):
            time_by_line[(g["code_file"], g["code_line"])] += c["wall_ns"] or 0
    return {"ops": ops, "graphs": graphs, "calls": calls, "out_line": out_line,
            "covered": covered, "time_by_line": time_by_line, "meta": reader.meta}


def _stats_close(a: dict | None, b: dict | None, rtol: float) -> tuple[bool, float]:
    """Compare value summaries; returns (close, relative difference)."""
    if not a or not b:
        return True, 0.0
    if a.get("nan", 0) != b.get("nan", 0) or a.get("inf", 0) != b.get("inf", 0):
        return False, math.inf
    scale = max(abs(a.get("norm") or 0.0), abs(b.get("norm") or 0.0), 1e-12)
    worst = 0.0
    for k in ("mean", "min", "max", "norm", "std"):
        if k in a and k in b and a[k] is not None and b[k] is not None:
            worst = max(worst, abs(a[k] - b[k]) / max(abs(a[k]), abs(b[k]), scale * 1e-3, 1e-12))
    return worst <= rtol, worst


# Ops whose output is uninitialised memory: their values mean nothing.
_UNINITIALISED = ("aten.empty", "aten.empty_like", "aten.empty_strided", "aten.new_empty",
                  "aten.new_empty_strided", "aten.empty_permuted")


def _first_value_divergence(A: dict, B: dict, rtol: float) -> dict | None:
    b_by_key = {o["key"]: o for o in B["ops"]}
    for a in A["ops"]:
        b = b_by_key.get(a["key"])
        if b is None or a["op"].startswith(_UNINITIALISED):
            continue
        if a["shapes"] != b["shapes"]:
            return {"what": "shape", **_where(a), "op": a["op"], "occurrence": a["key"][-1],
                    "a": a["shapes"], "b": b["shapes"]}
        for i, (sa, sb) in enumerate(zip(a["stats"] or [], b["stats"] or [])):
            close, rel = _stats_close(sa, sb, rtol)
            if not close:
                return {"what": "values", **_where(a), "op": a["op"], "occurrence": a["key"][-1],
                        "output": i, "rel_diff": rel if math.isfinite(rel) else None,
                        "a": sa, "b": sb}
    return None


def _graph_boundaries(A: dict, B: dict, rtol: float, a_name: str, b_name: str) -> list[dict]:
    """Outputs of compiled graphs in one run against the values the other run
    computed eagerly at the graph's output line."""
    found = []
    for src, other, src_name, other_name in ((B, A, b_name, a_name), (A, B, a_name, b_name)):
        by_line: dict[tuple, list] = defaultdict(list)
        for o in other["ops"]:
            if o["phase"] == "forward" and o["file"]:
                by_line[(o["file"], o["line"])].append(o)
        seen: dict[int, int] = defaultdict(int)
        for c in src["calls"]:
            where = src["out_line"].get(c["graph"])
            if not where or not c["outputs"]:
                continue
            k = seen[c["graph"]]
            seen[c["graph"]] += 1
            out = c["outputs"][0]
            matches = [o for o in by_line.get((where[0], where[1]), [])
                       if o["shapes"] and o["shapes"][0] == out["shape"]]
            if k >= len(matches):
                continue
            o = matches[k] if len(matches) > k else matches[-1]
            close, rel = _stats_close(out.get("stats"), (o["stats"] or [None])[0], rtol)
            if not close:
                found.append({"what": "graph output", "file": where[0], "line": where[1],
                              "code": where[2], "compiled_in": src_name, "graph": c["graph"],
                              "call": c["call"], "rel_diff": rel if math.isfinite(rel) else None,
                              "compiled": out.get("stats"), "eager": o["stats"][0] if o["stats"] else None})
                break
    return found


def _where(o: dict) -> dict:
    return {"file": o["file"], "line": o["line"], "code": o["code"]}


def diff_runs(path_a: str, path_b: str, *, rtol: float = 1e-3) -> dict:
    ra, rb = RunReader(path_a), RunReader(path_b)
    A, B = _load(ra), _load(rb)
    compiled_only = []
    for name, X, Y in (("A", A, B), ("B", B, A)):
        for line, gids in X["covered"].items():
            if line not in Y["covered"] and any(o["file"] == line[0] and o["line"] == line[1]
                                               for o in Y["ops"]):
                compiled_only.append({"compiled_in": name, "file": line[0], "line": line[1]})
    timing = []
    for line in set(A["time_by_line"]) | set(B["time_by_line"]):
        ta, tb = A["time_by_line"].get(line, 0), B["time_by_line"].get(line, 0)
        timing.append({"file": line[0], "line": line[1], "a_ns": ta, "b_ns": tb, "delta_ns": tb - ta})
    timing.sort(key=lambda t: -abs(t["delta_ns"]))
    a_keys, b_keys = {o["key"] for o in A["ops"]}, {o["key"] for o in B["ops"]}
    return {
        "schema": JSON_SCHEMA,
        "a": {"file": path_a, "argv": A["meta"].get("argv"), "stance": A["meta"].get("stance"),
              "graphs": len(A["graphs"]), "ops": len(A["ops"])},
        "b": {"file": path_b, "argv": B["meta"].get("argv"), "stance": B["meta"].get("stance"),
              "graphs": len(B["graphs"]), "ops": len(B["ops"])},
        "aligned_ops": len(a_keys & b_keys), "only_in_a": len(a_keys - b_keys),
        "only_in_b": len(b_keys - a_keys),
        "first_divergence": _first_value_divergence(A, B, rtol),
        "graph_boundaries": _graph_boundaries(A, B, rtol, "A", "B"),
        "compiled_in_one_run": sorted(compiled_only, key=lambda c: (c["file"], c["line"]))[:50],
        "timing": timing[:15],
    }


def render(doc: dict, console) -> None:
    from rich.markup import escape
    from rich.table import Table

    from .report import _brief, _ms, _short
    console.print(f"[bold]graphdbg diff[/] A={escape(doc['a']['file'])} "
                  f"(stance {doc['a']['stance'] or 'default'}, {doc['a']['graphs']} graphs, "
                  f"{doc['a']['ops']} eager ops)  B={escape(doc['b']['file'])} "
                  f"(stance {doc['b']['stance'] or 'default'}, {doc['b']['graphs']} graphs, "
                  f"{doc['b']['ops']} eager ops)")
    console.print(f"aligned {doc['aligned_ops']} eager ops by line, op and occurrence; "
                  f"{doc['only_in_a']} only in A, {doc['only_in_b']} only in B")
    first = doc["first_divergence"]
    console.print()
    if first:
        console.print(f"[red]✖ first divergence ({first['what']})[/] "
                      f"[cyan]{escape(_short(first['file']))}:{first['line']}[/] {escape(first['op'])} "
                      f"(occurrence {first['occurrence']})")
        if first.get("code"):
            console.print(f"    [dim]{first['line']:>5} │[/] {escape(first['code'])}")
        console.print(f"    A: {escape(str(first['a']))}\n    B: {escape(str(first['b']))}")
    else:
        console.print("[green]● no value or shape difference among aligned eager ops[/]")
    for g in doc["graph_boundaries"]:
        console.print(f"[red]✖ compiled graph {g['graph']} (run {g['compiled_in']}) output differs[/] at "
                      f"[cyan]{escape(_short(g['file']))}:{g['line']}[/], call {g['call']}")
        if g.get("code"):
            console.print(f"    [dim]{g['line']:>5} │[/] {escape(g['code'])}")
        console.print(f"    compiled: {escape(str(g['compiled']))}\n    eager:    {escape(str(g['eager']))}")
    if doc["compiled_in_one_run"]:
        console.print(f"{len(doc['compiled_in_one_run'])} lines ran compiled in one run and eagerly "
                      f"in the other (e.g. {escape(_brief(doc['compiled_in_one_run'][0]['file']))}:"
                      f"{doc['compiled_in_one_run'][0]['line']})")
    if doc["timing"]:
        console.print()
        console.rule("Time per source line (eager ops + compiled calls)", align="left")
        t = Table(box=None, header_style="bold", pad_edge=False)
        for col, just in (("where", "left"), ("A", "right"), ("B", "right"), ("B-A", "right")):
            t.add_column(col, justify=just)
        for r in doc["timing"][:10]:
            sign = "+" if r["delta_ns"] >= 0 else "-"
            t.add_row(escape(f"{_brief(r['file'])}:{r['line']}"), _ms(r["a_ns"]), _ms(r["b_ns"]),
                      sign + _ms(abs(r["delta_ns"])))
        console.print(t)


def main(a: str, b: str, as_json: bool, rtol: float) -> int:
    doc = diff_runs(a, b, rtol=rtol)
    if as_json:
        json.dump(doc, sys.stdout, indent=1, default=str)
        sys.stdout.write("\n")
    else:
        from rich.console import Console
        render(doc, Console(highlight=False, width=None if sys.stdout.isatty() else 120))
    return 1 if doc["first_divergence"] or doc["graph_boundaries"] else 0

