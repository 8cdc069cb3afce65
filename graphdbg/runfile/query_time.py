"""Where `Run`'s time goes (a mixin of `Run`, query.py): compile times by
phase, inductor's kernel times, node and call times (rows: the compiled time
per user line is worked out in graphdbg.analysis.lines), py-spy's samples,
the eager ops (paged, streamed, summed per line), and the time per source
line, eager and compiled.

Reads through `RunCore`'s helpers (query_core.py) and the graphs of
`GraphQueries.graphs` (query_graphs.py).
"""

from __future__ import annotations

import os
import re
from typing import Collection, Iterator, Mapping

from ..core.sourcemap import original_function
from .readrecords import (CompileTime, KernelTime, LineTime, Op, OpStat, SampledLine,
                          Sampling, SourceLine, _loads)
from .records import OpRow, OpSummaryRow
from .schema import COMPILE_PHASES, select


class TimeQueries:
    """Mixin of `Run`: compile, kernel, eager and per-line times; py-spy's samples."""

    def sampling(self) -> Sampling | None:
        """py-spy's samples of the run (None without --py-spy)."""
        rows = self._rows("SELECT metadata, payload FROM events WHERE name = ? ORDER BY seq DESC "
                          "LIMIT 1", ("py_spy_samples",))
        if not rows:
            return None
        meta = (_loads(rows[0]["metadata"]) or {}).get("py_spy_samples") or {}
        lines = tuple(SampledLine(str(file), int(line), str(function), int(n))
                      for file, line, function, n, *_ in (_loads(rows[0]["payload"]) or []))
        return Sampling(int(meta.get("samples") or 0), int(meta.get("rate") or 0),
                        str(meta.get("file") or ""), lines)

    def compile_times(self) -> list[CompileTime]:
        """Every compile's time by phase, in the order they happened (empty
        for runs recorded before graphdbg kept it)."""
        graphs: dict[str, list] = {}   # compile id -> its graphs, oldest first
        for g in sorted(self.graphs(), key=lambda g: (g.created_seq or 0, g.id)):
            graphs.setdefault(g.compile_id, []).append(g)
        unclaimed = {cid: list(gs) for cid, gs in graphs.items()}
        # a compile that made no graph (a frame that broke at once, or was
        # skipped) is named by the code torch's metrics say it compiled
        code: dict[str, tuple] = {}
        for cid, md in self._rows("SELECT compile_id, metadata FROM events WHERE name = ?",
                                  ("compilation_metrics",)):
            m = (_loads(md) or {}).get("compilation_metrics") or {}
            if m.get("co_name"):
                func, resumed_at = original_function(m["co_name"])
                file = m.get("co_filename")
                if file and not file.startswith("<") and not os.path.isabs(file):
                    file = os.path.join(self.info.cwd or "", file)  # as Dynamo was given it
                code[cid] = (func, file, resumed_at or m.get("co_firstlineno"))
        # which files the capture judged never the user's (frames.internal)
        internal = {file for (file,) in self._rows(
            "SELECT DISTINCT file FROM frames WHERE internal = 1")}
        out = []
        for seq, cid, md in self._rows("SELECT seq, compile_id, metadata FROM events "
                                       "WHERE name = ? ORDER BY seq", ("graphdbg_compile_time",)):
            p = (_loads(md) or {}).get("graphdbg_compile_time") or {}
            # a compile's graphs were made before its time was written; ids start
            # again at 0/0 after torch._dynamo.reset(): a later compile's are not its
            pending = unclaimed.get(cid, [])
            n = next((i for i, g in enumerate(pending) if (g.created_seq or 0) > seq), len(pending))
            gs, unclaimed[cid] = pending[:n], pending[n:]
            first = gs[0] if gs else None
            where = (first.function, first.file, first.line) if first else code.get(cid, (None,) * 3)
            if not first and (where[1] or "").startswith("<"):
                # generated code ("<string>": a dataclass __init__): as a graph of the
                # same frame was named, after its class at the line that built it
                frame = (cid or "").rsplit("/", 1)[0] + "/"
                named = next((g for c, gl in graphs.items() for g in gl if (c or "").startswith(frame)
                              and g.file and not g.file.startswith("<")), None)
                if named is not None:
                    where = (named.function, named.file, named.line)
            user = p.get("user")
            if user and (not where[1] or where[1] in internal) and len(user) == 3:
                # torch's own code compiled (DDP's forward, a context manager): at the
                # user's line that started the compile, named as torch's
                inside = f"{os.path.basename(where[1])}:{where[2]}" if where[1] else "torch"
                where = (f"{where[0] or '?'} ({inside})", user[0], user[1])
            out.append(CompileTime(
                cid or "?", tuple(g.id for g in gs), *where,
                float(p.get("total") or 0.0), {k: float(p.get(k) or 0.0) for k in COMPILE_PHASES},
                p.get("fx_cache") or {}, p.get("aot_cache") or {}, bool(p.get("failed"))))
        return out

    def kernel_times(self) -> list[KernelTime]:
        """Every timed kernel of inductor-compiled graphs, in the order the
        graphs were compiled and the kernels run (empty without inductor, or
        with --no-kernel-times)."""
        all_graphs = self.graphs()
        graphs = {g.compile_id: g for g in all_graphs}
        by_id = {g.id: g for g in all_graphs}
        recs = [(cid, (_loads(md) or {}).get("graphdbg_kernel_times") or {})
                for cid, md in self._rows("SELECT compile_id, metadata FROM events WHERE name = ? "
                                          "ORDER BY seq", ("graphdbg_kernel_times",))]
        frames = self._resolve(f for _, r in recs for k in r.get("kernels") or () for f in k.get("frames") or ())
        out = []
        for cid, r in recs:
            if r.get("broken"):
                continue
            # the graph the module was made for (compile ids repeat after
            # torch._dynamo.reset()); older files: by compile id
            g = by_id.get(r["graph_id"]) if isinstance(r.get("graph_id"), int) else graphs.get(cid)
            calls = int(r.get("calls") or 0)
            if g is not None and r.get("part") != "backward":
                calls = g.calls  # the program's calls, as the backend counted them
            for k in r.get("kernels") or ():
                out.append(KernelTime(
                    cid or "?", g.id if g else None, r.get("part"), str(k.get("name")),
                    int(k.get("handle") or 0), k.get("ns"), k.get("first_ns"), calls,
                    tuple(frames[f] for f in k.get("frames") or () if f in frames),
                    tuple(k.get("nodes") or ()), int(r.get("calls_timed") or 0) > 1,
                    int(k.get("samples", max(0, int(r.get("calls_timed") or 0) - 1))),
                    k.get("median_ns")))
        return out

    def timed_nodes(self, graph_ids: Collection[int]) -> list[tuple]:
        """(graph id, node, file, line, eager ns) of the call_* nodes of
        ``graph_ids`` with a time in the eager reference run and a user line
        (placeholders move no data of their own; rows only:
        graphdbg.analysis.lines splits kernels by them)."""
        ids = sorted(set(graph_ids))
        if not ids:
            return []
        return [tuple(r) for r in self._rows(
            "SELECT t.graph_id, t.node, f.file, f.line, t.eager_ns FROM node_times t JOIN nodes n "
            "ON n.graph_id = t.graph_id AND n.name = t.node JOIN frames f ON f.id = n.user_frame "
            f"WHERE n.op LIKE 'call_%' AND t.graph_id IN ({','.join('?' * len(ids))})", ids)]

    def graph_call_lines(self) -> list[tuple[int, str, int, int]]:
        """(graph id, file, first line, total call ns) of each compiled
        function that was called, at its first line."""
        rows = {r[0]: list(r) for r in self._rows(
            "SELECT g.id, g.code_file, g.code_line, COALESCE(SUM(c.wall_ns),0) FROM calls c "
            "JOIN graphs g ON g.id = c.graph_id WHERE g.code_file IS NOT NULL AND "
            "g.code_file != '' GROUP BY g.id")}
        for gid, t in self.call_totals().items():   # the calls without a row of their own
            if gid in rows:
                rows[gid][3] += int(t.get("total_ns") or 0)
        return [tuple(r) for r in rows.values()]

    # -- eager ops --------------------------------------------------------------------
    # frames come from the frame cache, not a join: a million ops share a few
    # thousand frames, and each joined row would copy their strings
    _OP_SQL = select(OpRow)

    def _ops(self, rows: list[OpRow]) -> list[Op]:
        frames = self._resolve(o.user_frame for o in rows)
        out = []
        for o in rows:
            f = self._at(o.user_frame, frames)
            out.append(Op(o.seq, o.op, o.phase, o.time_ns, o.module_path, o.module_class,
                          o.user_frame, o.stack, f.file, f.line, f.function, f.code,
                          o.shapes, o.dtypes, o.stats))
        return out

    def ops(self, offset: int = 0, limit: int | None = 100, *,
            after_seq: int | None = None) -> list[Op]:
        """A page of recorded eager ops, in execution order. ``after_seq``
        (the last `seq` of the previous page) finds the page by index instead
        of counting `offset` rows: constant time deep into a large run."""
        where, args = ("WHERE seq > ? ", [after_seq]) if after_seq is not None else ("", [])
        return self._ops(self._rows(self._OP_SQL + where + "ORDER BY seq LIMIT ? OFFSET ?",
                                    (*args, -1 if limit is None else limit, offset), OpRow))

    def iter_ops(self, *, lines: Collection[tuple[str, int]] | None = None,
                 phase: str | None = None) -> Iterator[Op]:
        """Recorded eager ops in execution order, optionally only those at
        the given (file, line) pairs and of one phase."""
        where, args = [], []
        if lines is not None:
            ids = self._frame_ids_at(lines)
            if not ids:
                return
            where.append(f"user_frame IN ({','.join('?' * len(ids))})")
            args += ids
        if phase is not None:
            where.append("phase = ?")
            args.append(phase)
        for rows in self._batches(self._OP_SQL + (f"WHERE {' AND '.join(where)} " if where else "")
                                  + "ORDER BY seq", args, OpRow):
            yield from self._ops(rows)

    def _frame_ids_at(self, lines: Collection[tuple[str, int]]) -> list[int]:
        want = set(lines)
        return [fid for fid, file, line in self._iter("SELECT id, file, line FROM frames")
                if (file, line) in want]

    def _by_line(self, sql: str) -> dict[tuple, int]:
        """Rows (frame id, ..., n) summed per (file, line, ...) of the frame;
        a missing frame counts as (None, None)."""
        rows = self._rows(sql)
        frames = self._resolve(fid for fid, *_ in rows)
        out: dict[tuple, int] = {}
        for fid, *rest, n in rows:
            f = self._at(fid, frames)
            key = (f.file, f.line, *rest)
            out[key] = out.get(key, 0) + (n or 0)
        return out

    def op_groups(self) -> dict[tuple, int]:
        """How often each op ran at each line: {(file, line, op, phase): count}
        of the recorded ops (file and line None without a user frame)."""
        return self._by_line("SELECT user_frame, op, phase, COUNT(*) FROM ops "
                             "GROUP BY user_frame, op, phase")

    def op_stats(self, limit: int | None = 20) -> list[OpStat]:
        """The op summary, most total time first."""
        rows = self._rows(select(OpSummaryRow) + "ORDER BY total_ns DESC LIMIT ?",
                          (-1 if limit is None else limit,), OpSummaryRow)
        frames = self._resolve(s.user_frame for s in rows)
        out = []
        for s in rows:
            f = self._at(s.user_frame, frames)
            out.append(OpStat(s.op, s.phase, s.count, s.total_ns, s.max_ns, s.module_path or None,
                              s.user_frame, f.file, f.line, f.function, f.code))
        return out

    def eager_totals(self) -> tuple[int, int]:
        """(ops, total ns) of every eager op, recorded one by one or not."""
        r = self._rows("SELECT COALESCE(SUM(count),0) AS ops, COALESCE(SUM(total_ns),0) AS ns "
                       "FROM op_summary")[0]
        return r["ops"], r["ns"]

    # -- where the time goes ----------------------------------------------------------
    def hot_lines(self, limit: int | None = 20, *, recorded_ops_only: bool = False,
                  compiled: Mapping[tuple[str, int], int] | None = None) -> list[LineTime]:
        """Time per source line, most first (then by file and line).

        A line's time is `eager_ns` + `compiled_ns`:
        - eager_ns: the eager ops whose user frame is at that line, from the
          op summary (every op, also those past `--max-ops`), or with
          ``recorded_ops_only`` from the ops recorded one by one;
        - compiled_ns: ``compiled`` ({(file, line): ns}: inductor's kernels
          split between the lines they compute, graphdbg.analysis.lines.
          compiled_by_line); without it each compiled graph's whole call
          time at the compiled function's first line.
        Lines without a file are left out.
        """
        col, table = ("time_ns", "ops") if recorded_ops_only else ("total_ns", "op_summary")
        eager = self._by_line(f"SELECT user_frame, SUM({col}) FROM {table} "
                              "WHERE user_frame IS NOT NULL GROUP BY user_frame")
        times = {k: [ns, 0] for k, ns in eager.items() if k[0]}
        for key, ns in self._compiled_at(compiled).items():
            times.setdefault(key, [0, 0])[1] += ns
        out = [LineTime(f, ln, e, c) for (f, ln), (e, c) in times.items()]
        out.sort(key=lambda t: (-t.total_ns, t.file, t.line if t.line is not None else -1))
        return out if limit is None else out[:limit]

    def _compiled_at(self, compiled: Mapping[tuple[str, int], int] | None
                     ) -> Mapping[tuple[str, int], int]:
        if compiled is not None:
            return compiled
        out: dict[tuple[str, int], int] = {}
        for _, file, line, ns in self.graph_call_lines():
            if ns:
                out[(file, line)] = out.get((file, line), 0) + ns
        return out

    def source_lines(self, file: str, compiled: Mapping[tuple[str, int], int] | None = None
                     ) -> list[SourceLine]:
        """A snapshotted file line by line, with the time spent at each line
        (as `hot_lines`, ``compiled`` as there) and the findings reported
        there; [] if not kept."""
        text = self.source(file)
        if text is None:
            return []
        lines = re.split(r"\r\n|\r|\n", text)
        if lines and lines[-1] == "":
            lines.pop()
        eager: dict[int, int] = {}
        for line, ns in self._rows(
                "SELECT f.line, SUM(s.total_ns) FROM op_summary s JOIN frames f "
                "ON f.id = s.user_frame WHERE f.file = ? GROUP BY f.line", (file,)):
            eager[line] = ns or 0
        compiled_here = {ln: ns for (f, ln), ns in self._compiled_at(compiled).items() if f == file}
        found: dict[int, list[int]] = {}
        for line, fid in self._rows(
                "SELECT f.line, d.id FROM diagnostics d JOIN frames f ON f.id = d.user_frame "
                "WHERE f.file = ? ORDER BY d.id", (file,)):
            found.setdefault(line, []).append(fid)
        return [SourceLine(i, t, eager.get(i, 0), compiled_here.get(i, 0), tuple(found.get(i, ())))
                for i, t in enumerate(lines, 1)]
