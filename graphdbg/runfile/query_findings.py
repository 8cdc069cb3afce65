"""`Run`'s findings (a mixin of `Run`, query.py): the diagnostics with their
stacks and typed details, and how many there are per kind.

Reads through `RunCore`'s helpers (query_core.py).
"""

from __future__ import annotations

import json
from typing import Collection

from .details import parse as parse_detail
from .readrecords import Finding, KindCount, _loads
from .records import DiagnosticRow
from .schema import select


class FindingQueries:
    """Mixin of `Run`: findings."""

    # -- findings ---------------------------------------------------------------------
    def findings(self, kind: str | Collection[str] | None = None,
                 severity: str | Collection[str] | None = None) -> list[Finding]:
        """Findings, errors first, then warnings, then info, each by first
        appearance; filtered by kind(s) and severity(ies)."""
        where, args = [], []
        for col, val in (("kind", kind), ("severity", severity)):
            if val is not None:
                vals = [val] if isinstance(val, str) else list(val)
                where.append(f"{col} IN ({','.join('?' * len(vals))})")
                args += vals
        rows = self._rows(
            select(DiagnosticRow)
            + (f"WHERE {' AND '.join(where)} " if where else "")
            + "ORDER BY CASE severity WHEN 'error' THEN 0 WHEN 'warning' THEN 1 "
              "WHEN 'info' THEN 2 ELSE 9 END, id", args, DiagnosticRow)
        stacks = self._stack_ids(d.stack for d in rows)
        # every frame of every finding and stack in one query
        frames = self._resolve([d.user_frame for d in rows] + [i for v in stacks.values() for i in v])
        out = []
        for d in rows:
            f = self._at(d.user_frame, frames)
            stack = tuple(frames[i] for i in stacks.get(d.stack, ()) if i in frames)
            out.append(Finding(
                id=d.id, kind=d.kind, severity=d.severity, message=d.message, reason=d.reason,
                hint=d.hint, user_frame=d.user_frame, file=f.file, line=f.line,
                function=f.function, code=f.code, stack_id=d.stack, stack=stack, count=d.count,
                compile_ids=tuple(json.loads(d.compile_ids or "[]")), graph_id=d.graph_id,
                node=d.node,
                op=d.op, detail=parse_detail(d.kind, _loads(d.detail)), col=f.col,
                end_col=f.end_col, cell=f.cell))
        return out

    def finding_counts(self) -> dict[str, KindCount]:
        """Per kind: how many findings, and how often they were hit."""
        return {r["kind"]: KindCount(r["sites"], r["hits"] or 0) for r in self._rows(
            "SELECT kind, COUNT(*) AS sites, SUM(count) AS hits FROM diagnostics "
            "GROUP BY kind ORDER BY kind")}
