"""`Run`'s graphs and what hangs off them (a mixin of `Run`, query.py):
graphs with their call statistics and graphdbg's per-graph events, nodes
(paged, sorted, searched in SQL), the slowest nodes, per-node values eager vs
compiled (schema 2), compiled calls and kept tensors.

Reads through `RunCore`'s helpers (query_core.py: `_rows`, `_batches`,
`_iter`, `_resolve`, `_at`).
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from typing import ClassVar, Iterable, Iterator

from .readrecords import (NO_FRAME, NODE_VALUE_DIFFERING, Call, Graph, KeptTensor, Node,
                          NodeValue, _loads)
from .records import CallRow, NodeRow, NodeValueRow, TensorRow
from .schema import columns, select


class GraphQueries:
    """Mixin of `Run`: graphs, nodes, node values, calls and kept tensors."""

    # -- graphs, nodes, calls ------------------------------------------------------------
    _GRAPH_SQL = (
        "SELECT g.id, g.compile_id, g.backend, g.code_name, g.code_file, g.code_line, "
        "g.user_frame, g.stack, g.status, g.error, g.n_nodes, g.n_ops, g.n_inputs, "
        "g.compile_time_s, g.backend_time_s, g.created_seq, "
        "c.calls, c.total_ns, c.min_ns, c.max_ns, t.eager_ns, c.steady_ns, s.steady_n, "
        "s.steady_median FROM graphs g LEFT JOIN ("
        " SELECT graph_id, COUNT(*) AS calls, SUM(wall_ns) AS total_ns, MIN(wall_ns) AS min_ns,"
        " MAX(wall_ns) AS max_ns, MIN(CASE WHEN call_idx >= 1 THEN wall_ns END) AS steady_ns"
        " FROM calls GROUP BY graph_id) c ON c.graph_id = g.id "
        "LEFT JOIN (SELECT graph_id, SUM(eager_ns) AS eager_ns FROM node_times GROUP BY graph_id)"
        " t ON t.graph_id = g.id "
        # the calls after the first: how many, and their median (their spread
        # against the fastest is the noise a verdict must exceed)
        "LEFT JOIN (SELECT graph_id, COUNT(*) AS steady_n, MIN(CASE WHEN rn = (n + 1) / 2 "
        " THEN wall_ns END) AS steady_median FROM (SELECT graph_id, wall_ns, ROW_NUMBER() OVER "
        " (PARTITION BY graph_id ORDER BY wall_ns) AS rn, COUNT(*) OVER (PARTITION BY graph_id) AS n"
        " FROM calls WHERE call_idx >= 1 AND wall_ns IS NOT NULL) GROUP BY graph_id) s"
        " ON s.graph_id = g.id ")

    @staticmethod
    def _graph(r: sqlite3.Row) -> Graph:
        return Graph(id=r["id"], compile_id=r["compile_id"], backend=r["backend"],
                     function=r["code_name"], file=r["code_file"], line=r["code_line"],
                     user_frame=r["user_frame"], stack_id=r["stack"], status=r["status"],
                     error=r["error"], n_nodes=r["n_nodes"], n_ops=r["n_ops"],
                     n_inputs=r["n_inputs"], compile_time_s=r["compile_time_s"],
                     backend_time_s=r["backend_time_s"], created_seq=r["created_seq"],
                     calls=r["calls"] or 0, total_call_ns=r["total_ns"] or 0,
                     min_call_ns=r["min_ns"], max_call_ns=r["max_ns"],
                     eager_ref_ns=r["eager_ns"], steady_call_ns=r["steady_ns"],
                     steady_calls=r["steady_n"] or 0, steady_median_ns=r["steady_median"])

    def graphs(self) -> list[Graph]:
        """Every graph, by id (graphs are few; the graph code is left out)."""
        buckets = self._per_graph("graphdbg_ddp_bucket")
        exports = self._per_graph("graphdbg_export")
        totals = self.call_totals()
        return [self._with_events(_with_totals(self._graph(r), totals), buckets, exports)
                for r in self._rows(self._GRAPH_SQL + "ORDER BY g.id")]

    def graph(self, graph_id: int) -> Graph | None:
        rows = self._rows(self._GRAPH_SQL + "WHERE g.id = ?", (graph_id,))
        return self._with_events(_with_totals(self._graph(rows[0]), self.call_totals()),
                                 self._per_graph("graphdbg_ddp_bucket"),
                                 self._per_graph("graphdbg_export")) \
            if rows else None

    def position(self) -> dict | None:
        """Where the rank was last seen (a launcher's rank; None otherwise):
        ``{since, call: {graph_id, call_idx, running, raised, function, file, line},
        op: {op, phase, file, line, function, code}}`` (each part only when
        the rank got that far)."""
        p = self.info.position
        if not isinstance(p, dict):
            return None
        out: dict = {"since": p.get("since")}
        call = p.get("call")
        if isinstance(call, dict):
            g = self.graph(call.get("graph_id")) if isinstance(call.get("graph_id"), int) else None
            out["call"] = {**call, "function": g.function if g else None,
                           "file": g.file if g else None, "line": g.line if g else None}
        op = p.get("op")
        if isinstance(op, dict):
            fid = op.get("user_frame")
            f = self._resolve([fid]).get(fid, NO_FRAME) if isinstance(fid, int) else NO_FRAME
            out["op"] = {"op": op.get("op"), "phase": op.get("phase"), **f.as_dict()}
        return out

    def call_totals(self) -> dict[int, dict]:
        """{graph id: {calls, total_ns, min_ns, max_ns}} of the calls that
        have no row in ``calls`` (a graph's steady calls: the event
        ``graphdbg_call_totals``, the latest of each graph)."""
        out = {}
        for (md,) in self._rows("SELECT metadata FROM events WHERE name = ? ORDER BY seq",
                                ("graphdbg_call_totals",)):
            fields = dict((_loads(md) or {}).get("graphdbg_call_totals") or {})
            if isinstance(fields.get("graph_id"), int):
                out[fields.pop("graph_id")] = fields
        return out

    def compiles(self) -> list[dict]:
        """Every Dynamo compile in order, from torch's structured trace:
        {compile_id, co_name, co_filename, co_firstlineno, recompile_reason,
        guards (the ``dynamo_cpp_guards_str`` text, or None)}."""
        out: dict[str, dict] = {}
        for cid, name, md, payload in self._rows(
                "SELECT compile_id, name, metadata, payload FROM events WHERE name IN "
                "('compilation_metrics', 'dynamo_cpp_guards_str') AND compile_id IS NOT NULL "
                "ORDER BY seq"):
            row = out.setdefault(cid, {"compile_id": cid, "co_name": None, "co_filename": None,
                                       "co_firstlineno": None, "recompile_reason": None,
                                       "guards": None})
            if name == "dynamo_cpp_guards_str":
                row["guards"] = payload
                continue
            m = (_loads(md) or {}).get("compilation_metrics") or {}
            for k in ("co_name", "co_filename", "co_firstlineno", "recompile_reason"):
                row[k] = m.get(k, row[k])
        return list(out.values())

    def _per_graph(self, event: str) -> dict[int, dict]:
        """{graph id: the event's fields} of the graphdbg events that describe
        one graph each (``graphdbg_ddp_bucket``, ``graphdbg_export``)."""
        out = {}
        for (md,) in self._rows("SELECT metadata FROM events WHERE name = ?", (event,)):
            fields = dict((_loads(md) or {}).get(event) or {})
            if isinstance(fields.get("graph_id"), int):
                out[fields.pop("graph_id")] = fields
        return out

    def collectives(self) -> dict[int, tuple[tuple[str, ...], tuple[str, ...]]]:
        """The collectives each compiled graph issues, in graph order:
        {graph id: (ops, node names)} (graphs that issue none are left out)."""
        out = {}
        for (md,) in self._rows("SELECT metadata FROM events WHERE name = ? ORDER BY seq",
                                ("graphdbg_collectives",)):
            c = (_loads(md) or {}).get("graphdbg_collectives") or {}
            if isinstance(c.get("graph_id"), int):
                out[c["graph_id"]] = (tuple(map(str, c.get("ops") or ())),
                                      tuple(map(str, c.get("nodes") or ())))
        return out

    @staticmethod
    def _with_events(g: Graph, buckets: dict[int, dict], exports: dict[int, dict]) -> Graph:
        b, e = buckets.get(g.id), exports.get(g.id)
        if b is None and e is None:
            return g
        return dataclasses.replace(g, ddp_bucket=b, export=e)

    def graph_code(self, graph_id: int) -> str | None:
        """The Python code of a graph as Dynamo captured it."""
        rows = self._rows("SELECT graph_code FROM graphs WHERE id = ?", (graph_id,))
        return rows[0]["graph_code"] if rows else None

    _NODE_SQL = (
        f"SELECT {columns(NodeRow, 'n')}, t.eager_ns FROM nodes n "
        "LEFT JOIN node_times t ON t.graph_id = n.graph_id AND t.node = n.name ")

    def _nodes(self, rows: list[sqlite3.Row]) -> list[Node]:
        frames = self._resolve(r["user_frame"] for r in rows)
        out = []
        for r in rows:
            f = self._at(r["user_frame"], frames)
            out.append(Node(
                graph_id=r["graph_id"], idx=r["idx"], name=r["name"], op=r["op"],
                target=r["target"], args=r["args"], shapes=_loads(r["shapes"]),
                dtypes=_loads(r["dtypes"]), module_path=r["module_path"],
                module_class=r["module_class"], eager_ns=r["eager_ns"],
                user_frame=r["user_frame"], stack_id=r["stack"], file=f.file, line=f.line,
                function=f.function, code=f.code))
        return out

    def nodes(self, graph_id: int, offset: int = 0, limit: int | None = None) -> list[Node]:
        """A page of a graph's nodes, in graph order (all of them by default:
        one graph's nodes are few enough)."""
        return self._nodes(self._rows(
            self._NODE_SQL + "WHERE n.graph_id = ? ORDER BY n.idx LIMIT ? OFFSET ?",
            (graph_id, -1 if limit is None else limit, offset)))

    def node_count(self, graph_id: int, *, find: str | None = None) -> int:
        """How many nodes a graph has (those matching ``find``, as `node_page`)."""
        join, jargs = self._node_value_join(graph_id)
        where, args = self._node_find(graph_id, find, bool(join))
        return self._rows("SELECT COUNT(*) AS n FROM nodes n LEFT JOIN frames f ON f.id = n.user_frame "
                          + join + "WHERE " + where, [*jargs, *args])[0]["n"]

    # sort keys of `node_page`: column name -> SQL (ties broken by graph order);
    # the value keys sort by the graph's default checked call (`node_value_call`)
    NODE_SORT: ClassVar[dict[str, str]] = {
        "idx": "n.idx", "name": "n.name", "op": "n.op", "target": "n.target",
        "shapes": "n.shapes", "dtypes": "n.dtypes", "module_path": "n.module_path",
        "line": "f.file, f.line", "eager_ns": "t.eager_ns",
        # most telling first: first divergent, differs, ok, not compared
        "status": "CASE v.status WHEN 'first divergent' THEN 3 WHEN 'differs' THEN 2 "
                  "WHEN 'ok' THEN 1 WHEN 'not compared' THEN 0 END",
        "max_abs": "v.max_abs", "max_rel": "v.max_rel",
        "compiled_vs_fp64": "v.compiled_vs_fp64",
        # the value's magnitude: the larger of |min| and |max| on the eager side
        "value": "MAX(ABS(json_extract(v.eager_stats, '$.min')), "
                 "ABS(json_extract(v.eager_stats, '$.max')))",
    }
    NODE_VALUE_SORT: ClassVar[frozenset] = frozenset(
        {"status", "max_abs", "max_rel", "compiled_vs_fp64", "value"})

    def _node_value_join(self, graph_id: int) -> tuple[str, list]:
        """The LEFT JOIN that gives each node its value on the graph's
        default checked call (alias v); empty when the graph has none."""
        call = self.node_value_call(graph_id)
        if call is None:
            return "", []
        join = ("LEFT JOIN node_values v ON v.graph_id = n.graph_id AND v.node = n.name "
                "AND v.call_idx = ? ")
        return join, [call]

    @staticmethod
    def _node_find(graph_id: int, find: str | None, values: bool = False) -> tuple[str, list]:
        where, args = "n.graph_id = ?", [graph_id]
        if find:
            pattern = "%" + find.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            cols = ("n.name", "n.op", "n.target", "n.module_path", "n.module_class",
                    "n.shapes", "n.dtypes", "f.code", "f.file || ':' || f.line") + (
                    ("v.status",) if values else ())
            where += " AND (" + " OR ".join(f"{c} LIKE ? ESCAPE '\\'" for c in cols) + ")"
            args += [pattern] * len(cols)
        return where, args

    def node_page(self, graph_id: int, offset: int = 0, limit: int | None = 200, *,
                  order_by: str = "idx", descending: bool = False,
                  find: str | None = None) -> list[Node]:
        """A page of a graph's nodes sorted in SQL by one of `NODE_SORT`
        (NULLs last either way; ties in graph order), optionally only those
        whose name, op, target, module, shapes, dtypes, code, file:line or
        value status contain ``find`` (case-insensitive for ASCII). Their
        values: `node_values_at`."""
        if order_by not in self.NODE_SORT:
            raise ValueError(f"cannot sort nodes by {order_by!r}")
        join, jargs = self._node_value_join(graph_id)
        sort = self.NODE_SORT[order_by]
        if order_by in self.NODE_VALUE_SORT and not join:
            sort = "n.idx"          # no values in this graph: graph order
        direction = "DESC" if descending else "ASC"
        keys = []
        for col in (sort,) if order_by in self.NODE_VALUE_SORT else sort.split(", "):
            keys += [f"({col}) IS NULL", f"({col}) {direction}"]
        where, args = self._node_find(graph_id, find, bool(join))
        return self._nodes(self._rows(
            self._NODE_SQL + "LEFT JOIN frames f ON f.id = n.user_frame " + join + "WHERE " + where
            + " ORDER BY " + ", ".join(keys) + ", n.idx LIMIT ? OFFSET ?",
            (*jargs, *args, -1 if limit is None else limit, offset)))

    def node_values_at(self, graph_id: int, idxs: Iterable[int],
                       call_idx: int | None = None) -> dict[int, NodeValue]:
        """The values of some nodes (by index: a page of `node_page`) on one
        call (by default `node_value_call`); nodes without one left out."""
        idxs = list(dict.fromkeys(idxs))
        w = self._node_value_where(graph_id, call_idx, False)
        if w is None or not idxs:
            return {}
        where, args = w
        out: dict[int, NodeValue] = {}
        for i in range(0, len(idxs), 500):      # under SQLite's variable limit
            chunk = idxs[i:i + 500]
            rows = self._rows(self._NODE_VALUE_SQL + where + " AND n.idx IN ("
                              + ",".join("?" * len(chunk)) + ")", [*args, *chunk])
            out.update((v.idx, v) for v in self._node_value_records(rows))
        return out

    def node_graphs_by_line(self, file: str) -> dict[int, tuple[int, ...]]:
        """For each line of a file: the ids of the graphs with a node there."""
        out: dict[int, tuple[int, ...]] = {}
        for line, gid in self._rows(
                "SELECT DISTINCT f.line, n.graph_id FROM nodes n JOIN frames f "
                "ON f.id = n.user_frame WHERE f.file = ? ORDER BY f.line, n.graph_id", (file,)):
            out[line] = out.get(line, ()) + (gid,)
        return out

    def iter_nodes(self) -> Iterator[Node]:
        """Every node of every graph, by graph then index, a batch at a time."""
        for rows in self._batches(self._NODE_SQL + "ORDER BY n.graph_id, n.idx"):
            yield from self._nodes(rows)

    @staticmethod
    def _call(c: CallRow) -> Call:
        return Call(c.seq, c.graph_id, c.call_idx, c.wall_ns, json.loads(c.outputs or "[]"))

    def calls(self, graph_id: int | None = None, offset: int = 0,
              limit: int | None = 100) -> list[Call]:
        """A page of compiled calls (of one graph, or all), in call order."""
        where, args = ("WHERE graph_id = ? ", [graph_id]) if graph_id is not None else ("", [])
        return [self._call(c) for c in self._rows(
            select(CallRow) + where + "ORDER BY seq LIMIT ? OFFSET ?",
            (*args, -1 if limit is None else limit, offset), CallRow)]

    def iter_calls(self) -> Iterator[Call]:
        """Every compiled call, in call order."""
        return map(self._call, self._iter(select(CallRow) + "ORDER BY seq", (), CallRow))

    # -- the slowest nodes ------------------------------------------------------------
    def hot_nodes(self, limit: int | None = 20) -> list[Node]:
        """Graph nodes (call_* only) by their time in the eager reference run,
        slowest first."""
        return self._nodes(self._rows(
            f"SELECT {columns(NodeRow, 'n')}, t.eager_ns "
            "FROM node_times t JOIN nodes n ON n.graph_id = t.graph_id AND n.name = t.node "
            "WHERE n.op LIKE 'call_%' ORDER BY t.eager_ns DESC LIMIT ?",
            (-1 if limit is None else limit,)))

    # -- kept tensors -----------------------------------------------------------------
    def tensors(self, owner: str | None = None) -> list[KeptTensor]:
        """Kept tensors of one owner (`op:12`, `call:7`), in the order kept;
        without an owner, every one (all their bytes: up to the tensor budget)."""
        where, args = ("WHERE owner = ? ", (owner,)) if owner is not None else ("", ())
        return [KeptTensor(t.id, t.owner, t.name, bytes(t.safetensors)) for t in self._rows(
            select(TensorRow) + where + "ORDER BY id", args, TensorRow)]

    # -- node values (eager vs compiled per node; schema 2) ----------------------------
    _NODE_VALUE_SQL = (
        f"SELECT {columns(NodeValueRow, 'v')}, n.idx, n.op, n.target, t.eager_ns, "
        "n.module_path, n.user_frame "
        # nodes first, in their primary-key order (graph, idx); each node's value
        # and time by their primary keys: a page costs its rows, not the graph
        "FROM nodes n CROSS JOIN node_values v ON v.graph_id = n.graph_id AND v.node = n.name "
        "LEFT JOIN node_times t ON t.graph_id = n.graph_id AND t.node = n.name ")

    def _has_node_values(self) -> bool:
        """Run files before schema 2 have no node_values table: every
        node-value query answers empty."""
        has = getattr(self, "_node_values_table", None)
        if has is None:
            has = self._node_values_table = bool(self._rows(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'node_values'"))
        return has

    def _node_value_where(self, graph_id: int, call_idx: int | None,
                          differing_only: bool) -> tuple[str, list] | None:
        if not self._has_node_values():
            return None
        if call_idx is None:
            call_idx = self.node_value_call(graph_id)
            if call_idx is None:
                return None
        where, args = "WHERE n.graph_id = ? AND v.call_idx = ?", [graph_id, call_idx]
        if differing_only:
            where += " AND v.status IN (?, ?)"
            args += list(NODE_VALUE_DIFFERING)
        return where, args

    def _node_value_records(self, rows: list[sqlite3.Row]) -> list[NodeValue]:
        frames = self._resolve(r["user_frame"] for r in rows)
        out = []
        for r in rows:
            f = self._at(r["user_frame"], frames)
            out.append(NodeValue(
                graph_id=r["graph_id"], call_idx=r["call_idx"], node=r["node"], idx=r["idx"],
                op=r["op"], target=r["target"], status=r["status"], kind=r["kind"],
                compiled_from=r["compiled_from"], max_abs=r["max_abs"], max_rel=r["max_rel"],
                eager_vs_fp64=r["eager_vs_fp64"], compiled_vs_fp64=r["compiled_vs_fp64"],
                eager_stats=_loads(r["eager_stats"]), compiled_stats=_loads(r["compiled_stats"]),
                fp64_stats=_loads(r["fp64_stats"]), eager_ns=r["eager_ns"],
                module_path=r["module_path"], user_frame=r["user_frame"], file=f.file,
                line=f.line, function=f.function, code=f.code))
        return out

    def node_value_graphs(self) -> list[int]:
        """Ids of the graphs that have per-node values."""
        if not self._has_node_values():
            return []
        return [r["graph_id"] for r in self._rows(
            "SELECT DISTINCT graph_id FROM node_values ORDER BY graph_id")]

    def node_value_calls(self, graph_id: int) -> list[int]:
        """The calls of a graph with per-node values (the first checked
        call, and a later call whose divergence was localised), in order."""
        if not self._has_node_values():
            return []
        return [r["call_idx"] for r in self._rows(
            "SELECT DISTINCT call_idx FROM node_values WHERE graph_id = ? ORDER BY call_idx",
            (graph_id,))]

    def node_value_call(self, graph_id: int) -> int | None:
        """The call `node_values` shows by default: the first with a
        localised divergence (a 'first divergent' row), else the first."""
        if not self._has_node_values():
            return None
        rows = self._rows(
            "SELECT call_idx FROM node_values WHERE graph_id = ? "
            "ORDER BY status != 'first divergent', call_idx LIMIT 1", (graph_id,))
        return rows[0]["call_idx"] if rows else None

    def node_values(self, graph_id: int, call_idx: int | None = None, offset: int = 0,
                    limit: int | None = None, differing_only: bool = False) -> list[NodeValue]:
        """A page of a graph's per-node values on one call (``call_idx``, by
        default `node_value_call`), in graph order; with ``differing_only``
        only nodes whose compiled value differs (`NODE_VALUE_DIFFERING`).
        Empty for run files without the table (schema 1) or unchecked graphs."""
        w = self._node_value_where(graph_id, call_idx, differing_only)
        if w is None:
            return []
        where, args = w
        return self._node_value_records(self._rows(
            self._NODE_VALUE_SQL + where + " ORDER BY n.idx LIMIT ? OFFSET ?",
            (*args, -1 if limit is None else limit, offset)))

    def node_value_count(self, graph_id: int, call_idx: int | None = None,
                         differing_only: bool = False, *, before_idx: int | None = None) -> int:
        """How many rows `node_values` has for these arguments (all pages);
        with ``before_idx``, those of nodes before that node index (the
        position of that node's row)."""
        w = self._node_value_where(graph_id, call_idx, differing_only)
        if w is None:
            return 0
        where, args = w
        if before_idx is not None:
            where += " AND n.idx < ?"
            args = [*args, before_idx]
        return self._rows("SELECT COUNT(*) AS n FROM nodes n CROSS JOIN node_values v ON "
                          "v.graph_id = n.graph_id AND v.node = n.name " + where, args)[0]["n"]

    def first_divergent_node(self, graph_id: int) -> NodeValue | None:
        """The node localisation named ('first divergent', earliest call),
        else the first node in graph order whose compiled value differs;
        None when nothing differs or the run has no per-node values."""
        if not self._has_node_values():
            return None
        for status in ("first divergent", "differs"):
            # the call first (node_values alone), then the node by graph order
            # within it (the joined query wants the call to use its index)
            call = self._rows("SELECT MIN(call_idx) AS call_idx FROM node_values "
                              "WHERE graph_id = ? AND status = ?", (graph_id, status))[0]["call_idx"]
            if call is not None:
                rows = self._rows(
                    self._NODE_VALUE_SQL + "WHERE n.graph_id = ? AND v.call_idx = ? AND "
                    "v.status = ? ORDER BY n.idx LIMIT 1", (graph_id, call, status))
                if rows:
                    return self._node_value_records(rows)[0]
        return None


def _with_totals(g: Graph, totals: dict[int, dict]) -> Graph:
    """A graph's figures with its calls that have no row added (they are
    steady calls: neither the first nor a checked one)."""
    t = totals.get(g.id)
    if not t or not t.get("calls"):
        return g
    lo, hi = t.get("min_ns"), t.get("max_ns")
    return dataclasses.replace(
        g, calls=g.calls + int(t["calls"]), total_call_ns=g.total_call_ns + int(t.get("total_ns") or 0),
        min_call_ns=min(v for v in (g.min_call_ns, lo) if v is not None) if lo is not None else g.min_call_ns,
        max_call_ns=max(v for v in (g.max_call_ns, hi) if v is not None) if hi is not None else g.max_call_ns,
        steady_call_ns=min(v for v in (g.steady_call_ns, lo) if v is not None)
        if lo is not None else g.steady_call_ns)
