"""`graphdbg diff A B`: compare two runs of the same program (say an eager run,
`graphdbg run --stance force_eager`, against a compiled one).

Records are aligned by source line, op and occurrence, never by position:
the k-th `aten.addmm` at model.py:42 in A meets the k-th one in B. Compiled
graphs in a run are compared at their boundaries: the k-th call's outputs meet
the k-th value computed at the graph's output line in the other run. Reported:
the first place where shapes or values part ways (in A's order), lines that
ran compiled in one run and eager in the other, and the lines whose time
changed most. Reads run files only (no torch), through graphdbg.runfile.query.

Memory does not grow with the number of ops: occurrence counts per (line,
op, phase) come from SQL, and the two op streams are merged in execution
order, holding only the ops whose twin in the other run is not read yet.
"""

from __future__ import annotations

import json
import math
import sys
from collections import OrderedDict, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

from ..core.format import brief, ms, short
from ..runfile.query import Op, Run

JSON_SCHEMA = "graphdbg-diff/1"

Group = tuple  # (file, line, op, phase): where and what an eager op is


@dataclass
class Side:
    """What a diff needs of one run (`read_side`), all bounded by lines and
    graphs, not ops."""
    run: Run
    counts: dict[Group, int]             # ops per group
    op_lines: set[tuple]                 # (file, line) where any op ran
    covered: dict[tuple, set[int]]       # (file, line) -> graphs with a call node there
    out_line: dict[int, tuple]           # graph -> (file, line, code) of its last call node
    time_by_line: dict[tuple, int]       # (file, line) -> ns (eager ops + compiled calls)
    graphs: int


def read_side(run: Run) -> Side:
    counts = run.op_groups()
    graph_ids = {g.id for g in run.graphs()}
    covered: dict[tuple, set[int]] = defaultdict(set)
    out_line: dict[int, tuple] = {}
    for n in run.iter_nodes():
        if n.graph_id in graph_ids and n.user_frame is not None and n.op.startswith("call_") \
                and n.file is not None:
            covered[(n.file, n.line)].add(n.graph_id)
            out_line[n.graph_id] = (n.file, n.line, n.code)  # the last one wins
    times = {(t.file, t.line): t.total_ns
             for t in run.hot_lines(None, recorded_ops_only=True)}
    return Side(run, counts, {(g[0], g[1]) for g in counts}, covered, out_line, times,
                 len(graph_ids))


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


def compare_ops(a: Op, b: Op, k: int, rtol: float) -> dict | None:
    if a.op.startswith(_UNINITIALISED):
        return None
    # identical JSON text is always close (for rtol >= 0): no parsing on the common path
    if rtol >= 0 and a.shapes_json == b.shapes_json and a.stats_json == b.stats_json:
        return None
    where = {"file": a.file, "line": a.line, "code": a.code}
    if a.shapes != b.shapes:
        return {"what": "shape", **where, "op": a.op, "occurrence": k,
                "a": a.shapes, "b": b.shapes}
    for i, (sa, sb) in enumerate(zip(a.stats or [], b.stats or [])):
        close, rel = _stats_close(sa, sb, rtol)
        if not close:
            return {"what": "values", **where, "op": a.op, "occurrence": k,
                    "output": i, "rel_diff": rel if math.isfinite(rel) else None,
                    "a": sa, "b": sb}
    return None


def _twins(side: Side, other: Side):
    """(group, occurrence), op for the ops of `side` that have a twin in `other`."""
    seen: dict[Group, int] = defaultdict(int)
    for o in side.run.iter_ops():
        g = (o.file, o.line, o.op, o.phase)
        k = seen[g]
        seen[g] = k + 1
        if k < other.counts.get(g, 0):
            yield (g, k), o


class AlignedOps:
    """Every aligned pair of eager ops of two runs, as ``((group, k), a, b)``:
    the k-th op of a group (file, line, op, phase) in A meets the k-th in B.

    The two op streams are read in step, each holding only ops with a twin,
    so every op waiting for its twin is matched later and the waiting sets
    stay as small as the runs are out of step. Pairs come in the order the
    second of the two is read. Set `stop_after` to an A seq to stop once no
    op of A at or before it can still be paired (a search for the earliest
    difference in A's order needs nothing later)."""

    def __init__(self, A: Side, B: Side) -> None:
        self.A, self.B = A, B
        self.stop_after: int | None = None

    def __iter__(self) -> Iterator[tuple[tuple, Op, Op]]:
        wait_a: OrderedDict[tuple, Op] = OrderedDict()   # in A's order: first = earliest
        wait_b: dict[tuple, Op] = {}
        ia, ib = _twins(self.A, self.B), _twins(self.B, self.A)
        a_seq, a_done, b_done = -1, False, False
        while not (a_done and b_done):
            stop = self.stop_after
            if stop is not None and (a_done or a_seq >= stop) and (
                    not wait_a or next(iter(wait_a.values())).seq > stop):
                return
            if not a_done:
                item = next(ia, None)
                if item is None:
                    a_done = True
                else:
                    key, a = item
                    a_seq = a.seq
                    b = wait_b.pop(key, None)
                    if b is None:
                        wait_a[key] = a
                    else:
                        yield key, a, b
            if not b_done:
                item = next(ib, None)
                if item is None:
                    b_done = True
                else:
                    key, b = item
                    a = wait_a.pop(key, None)
                    if a is None:
                        wait_b[key] = b
                    else:
                        yield key, a, b


def first_value_divergence(A: Side, B: Side, rtol: float) -> dict | None:
    """The first aligned op, in A's order, whose shapes or values differ."""
    best: tuple[int, dict] | None = None             # (A seq, divergence)
    pairs = AlignedOps(A, B)
    for key, a, b in pairs:
        if best is None or a.seq < best[0]:
            found = compare_ops(a, b, key[1], rtol)
            if found is not None:
                best = (a.seq, found)
                pairs.stop_after = a.seq
    return best[1] if best else None


def graph_boundaries(A: Side, B: Side, rtol: float) -> list[dict]:
    """Outputs of compiled graphs in one run against the values the other run
    computed eagerly at the graph's output line."""
    found = []
    for src, other, src_name in ((B, A, "B"), (A, B, "A")):
        if not src.out_line:
            continue
        lines = {(f, ln) for f, ln, _ in src.out_line.values() if f}
        by_line: dict[tuple, list[Op]] = defaultdict(list)
        for o in other.run.iter_ops(lines=lines, phase="forward"):
            if o.file:
                by_line[(o.file, o.line)].append(o)
        seen: dict[int, int] = defaultdict(int)
        for c in src.run.iter_calls():
            where = src.out_line.get(c.graph_id)
            if not where or not c.outputs:
                continue
            k = seen[c.graph_id]
            seen[c.graph_id] += 1
            out = c.outputs[0]
            matches = [o for o in by_line.get((where[0], where[1]), [])
                       if o.shapes and o.shapes[0] == out["shape"]]
            if k >= len(matches):
                continue
            stats = matches[k].stats
            close, rel = _stats_close(out.get("stats"), (stats or [None])[0], rtol)
            if not close:
                found.append({"what": "graph output", "file": where[0], "line": where[1],
                              "code": where[2], "compiled_in": src_name, "graph": c.graph_id,
                              "call": c.call_idx, "rel_diff": rel if math.isfinite(rel) else None,
                              "compiled": out.get("stats"), "eager": stats[0] if stats else None})
                break
    return found


def diff_runs(path_a: str, path_b: str, *, rtol: float = 1e-3) -> dict:
    with Run(path_a) as ra, Run(path_b) as rb:
        A, B = read_side(ra), read_side(rb)
        first = first_value_divergence(A, B, rtol)
        boundaries = graph_boundaries(A, B, rtol)
        n_ops = ra.count("ops"), rb.count("ops")
    compiled_only = []
    for name, X, Y in (("A", A, B), ("B", B, A)):
        for line in X.covered:
            if line not in Y.covered and line in Y.op_lines:
                compiled_only.append({"compiled_in": name, "file": line[0], "line": line[1]})
    timing = []
    for line in set(A.time_by_line) | set(B.time_by_line):
        ta, tb = A.time_by_line.get(line, 0), B.time_by_line.get(line, 0)
        timing.append({"file": line[0], "line": line[1], "a_ns": ta, "b_ns": tb, "delta_ns": tb - ta})
    # ties by place, so that the same runs always give the same list
    timing.sort(key=lambda t: (-abs(t["delta_ns"]), t["file"],
                               t["line"] if t["line"] is not None else -1))
    aligned = sum(min(n, B.counts.get(g, 0)) for g, n in A.counts.items())
    return {
        "schema": JSON_SCHEMA,
        "a": {"file": path_a, "argv": ra.meta.get("argv"), "stance": ra.meta.get("stance"),
              "graphs": A.graphs, "ops": n_ops[0]},
        "b": {"file": path_b, "argv": rb.meta.get("argv"), "stance": rb.meta.get("stance"),
              "graphs": B.graphs, "ops": n_ops[1]},
        "aligned_ops": aligned, "only_in_a": sum(A.counts.values()) - aligned,
        "only_in_b": sum(B.counts.values()) - aligned,
        "first_divergence": first,
        "graph_boundaries": boundaries,
        "compiled_in_one_run": sorted(compiled_only, key=lambda c: (c["file"], c["line"]))[:50],
        "timing": timing[:15],
    }


def render(doc: dict, console) -> None:
    from rich.markup import escape
    from rich.table import Table

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
                      f"[cyan]{escape(short(first['file']))}:{first['line']}[/] {escape(first['op'])} "
                      f"(occurrence {first['occurrence']})")
        if first.get("code"):
            console.print(f"    [dim]{first['line']:>5} │[/] {escape(first['code'])}")
        console.print(f"    A: {escape(str(first['a']))}\n    B: {escape(str(first['b']))}")
    else:
        console.print("[green]● no value or shape difference among aligned eager ops[/]")
    for g in doc["graph_boundaries"]:
        console.print(f"[red]✖ compiled graph {g['graph']} (run {g['compiled_in']}) output differs[/] at "
                      f"[cyan]{escape(short(g['file']))}:{g['line']}[/], call {g['call']}")
        if g.get("code"):
            console.print(f"    [dim]{g['line']:>5} │[/] {escape(g['code'])}")
        console.print(f"    compiled: {escape(str(g['compiled']))}\n    eager:    {escape(str(g['eager']))}")
    if doc["compiled_in_one_run"]:
        console.print(f"{len(doc['compiled_in_one_run'])} lines ran compiled in one run and eagerly "
                      f"in the other (e.g. {escape(brief(doc['compiled_in_one_run'][0]['file']))}:"
                      f"{doc['compiled_in_one_run'][0]['line']})")
    if doc["timing"]:
        console.print()
        console.rule("Time per source line (eager ops + compiled calls)", align="left")
        t = Table(box=None, header_style="bold", pad_edge=False)
        for col, just in (("where", "left"), ("A", "right"), ("B", "right"), ("B-A", "right")):
            t.add_column(col, justify=just)
        for r in doc["timing"][:10]:
            sign = "+" if r["delta_ns"] >= 0 else "-"
            t.add_row(escape(f"{brief(r['file'])}:{r['line']}"), ms(r["a_ns"]), ms(r["b_ns"]),
                      sign + ms(abs(r["delta_ns"])))
        console.print(t)


def main(a: str, b: str, as_json: bool, rtol: float) -> int:
    """`graphdbg diff A B`: exit 1 when values or shapes differ."""
    doc = diff_runs(a, b, rtol=rtol)
    if as_json:
        json.dump(doc, sys.stdout, indent=1, default=str)
        sys.stdout.write("\n")
    else:
        from rich.console import Console
        render(doc, Console(highlight=False, emoji=False, width=None if sys.stdout.isatty() else 120))
    return 1 if doc["first_divergence"] or doc["graph_boundaries"] else 0
