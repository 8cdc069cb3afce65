"""`graphdbg diff DIR`: rank 0 (the lowest) against each other rank of a
job, eager ops aligned as `graphdbg diff A B` aligns them (analysis/diff.py:
`AlignedOps`, `read_side`); only the op sequence and shapes, since in data
parallel each rank has its own data. Plain records, no rich, no SQL.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

from ..runfile.job import Job
from ..runfile.query import Op, Run
from .diff import AlignedOps, Side, read_side
from .jobtext import ENDED, job_info, ordinal

DIFF_SCHEMA = "graphdbg-job-diff/1"


@dataclass(frozen=True, slots=True)
class RankDivergence:
    """Where two ranks' ops part ways. `what`: "shape" (an aligned op's
    shapes differ; `a`, `b` the shapes), "sequence" (an op that ran on one
    rank only: `a` or `b` its occurrence there, the other None), or
    "compiled output shape" (the k-th call of a compiled function returned
    other shapes)."""
    what: str
    file: str | None
    line: int | None
    function: str | None
    code: str | None
    op: str
    occurrence: int
    a: Any
    b: Any
    message: str

    def as_dict(self) -> dict:
        return {"what": self.what, "file": self.file, "line": self.line,
                "function": self.function, "code": self.code, "op": self.op,
                "occurrence": self.occurrence, "a": self.a, "b": self.b,
                "message": self.message}


@dataclass(frozen=True, slots=True)
class RankPair:
    """Rank `a` (0) against rank `b`: eager ops aligned by line, op and
    occurrence; the first divergence in rank a's order (values not compared)."""
    a: int
    b: int
    aligned_ops: int
    only_in_a: int
    only_in_b: int
    first: RankDivergence | None
    # ranks whose file never closed: their recorded ops may stop short, so an
    # op of the other rank without a twin there is no divergence
    unclosed: tuple[int, ...] = ()

    def as_dict(self) -> dict:
        return {"a": self.a, "b": self.b, "aligned_ops": self.aligned_ops,
                "only_in_a": self.only_in_a, "only_in_b": self.only_in_b,
                "unclosed": list(self.unclosed),
                "first_divergence": self.first.as_dict() if self.first else None}


def _first_unpaired(side: Side, other: Side,
                    other_closed: bool) -> tuple[Op, int, tuple | None] | None:
    """The first op of `side` (in its order) without a twin in `other`, its
    occurrence, and the next op of `side` that has one: ``(group, k)``,
    None when no later op has. When `other`'s file never closed, its ops may
    stop short: an op missing there counts only if `other` recorded a later one."""
    seen: dict[tuple, int] = defaultdict(int)
    found: tuple[Op, int] | None = None
    for o in side.run.iter_ops():
        g = (o.file, o.line, o.op, o.phase)
        k = seen[g]
        seen[g] = k + 1
        paired = k < other.counts.get(g, 0)
        if found is None:
            if not paired:
                found = (o, k)
        elif paired:
            return (*found, (g, k))
    return (*found, None) if found is not None and other_closed else None


def _seq_of(run: Run, group: tuple, k: int) -> int | None:
    """The seq of the k-th op of a group (file, line, op, phase) in a run."""
    file, line, op, phase = group
    n = 0
    for o in run.iter_ops(lines=[(file, line)] if file else None, phase=phase):
        if o.op == op and (o.file, o.line) == (file, line):
            if n == k:
                return o.seq
            n += 1
    return None


def _compiled_outputs(r: Run) -> list[tuple[int, tuple, int, list]]:
    """(seq, compiled function, k, output shapes) of each compiled call: the
    k-th call of that function."""
    keys = {g.id: (g.function, g.file, g.line) for g in r.graphs()}
    n: Counter = Counter()
    out = []
    for c in r.iter_calls():
        key = keys.get(c.graph_id)
        if key is None:
            continue
        out.append((c.seq, key, n[key], [o.get("shape") for o in c.outputs or ()]))
        n[key] += 1
    return out


def diff_pair(a: int, ra: Run, b: int, rb: Run) -> RankPair:
    """Rank `a`'s run against rank `b`'s: the ops they share, and the first
    place (in rank a's order) where an op runs on one rank only, an aligned
    op's shapes differ, or a compiled call returns other shapes."""
    A, B = read_side(ra), read_side(rb)
    aligned = sum(min(n, B.counts.get(g, 0)) for g, n in A.counts.items())
    only_a, only_b = sum(A.counts.values()) - aligned, sum(B.counts.values()) - aligned
    # (where in rank a's order, divergence): ops and compiled calls share one seq
    found: list[tuple[float, RankDivergence]] = []
    closed_a, closed_b = ra.info.status in ENDED, rb.info.status in ENDED
    ua = _first_unpaired(A, B, closed_b) if only_a else None
    if ua is not None:
        o, k, _ = ua
        found.append((o.seq, RankDivergence(
            "sequence", o.file, o.line, o.function, o.code, o.op, k, k, None,
            f"{o.op} ({o.phase}) runs a {ordinal(k + 1)} time on rank {a}, not on rank {b}")))
    ub = _first_unpaired(B, A, closed_a) if only_b else None
    if ub is not None:
        o, k, after = ub
        # in rank a's order: just before rank a's twin of the next op they share
        seq = _seq_of(ra, *after) if after is not None else None
        found.append((math.inf if seq is None else seq - 0.5, RankDivergence(
            "sequence", o.file, o.line, o.function, o.code, o.op, k, None, k,
            f"{o.op} ({o.phase}) runs a {ordinal(k + 1)} time on rank {b}, not on rank {a}")))

    def earliest() -> float:
        return min((s for s, _ in found), default=math.inf)

    pairs = AlignedOps(A, B)
    if ua is not None:
        pairs.stop_after = ua[0].seq
    for key, x, y in pairs:
        if x.seq >= earliest():
            continue
        if x.shapes_json != y.shapes_json and x.shapes != y.shapes:
            found.append((x.seq, RankDivergence(
                "shape", x.file, x.line, x.function, x.code, x.op, key[1], x.shapes, y.shapes,
                f"{x.op} returns {x.shapes} on rank {a}, {y.shapes} on rank {b}")))
            pairs.stop_after = x.seq
    calls_b = {(key, k): shapes for _, key, k, shapes in _compiled_outputs(rb)}
    for seq, key, k, shapes in _compiled_outputs(ra):
        if seq >= earliest():
            break
        other = calls_b.get((key, k))
        if other is not None and other != shapes:
            fn, file, line = key
            found.append((seq, RankDivergence(
                "compiled output shape", file, line, fn, None, f"compiled {fn}", k, shapes,
                other, f"the {ordinal(k + 1)} call of compiled {fn} returns {shapes} on rank "
                       f"{a}, {other} on rank {b}")))
            break
    first = min(found, key=lambda f: f[0])[1] if found else None
    if first is not None and first.code is None and first.file:
        text = (ra if first.a is not None else rb).source(first.file)
        src = text.splitlines() if text else []
        if first.line and 0 < first.line <= len(src):
            first = dataclasses.replace(first, code=src[first.line - 1].strip())
    unclosed = tuple(r for r, closed in ((a, closed_a), (b, closed_b)) if not closed)
    return RankPair(a, b, aligned, only_a, only_b, first, unclosed)


@dataclass(frozen=True, slots=True)
class JobDiff:
    """`graphdbg diff DIR`: rank 0 (the lowest) against each other rank."""
    job: dict
    pairs: tuple[RankPair, ...]

    @property
    def differs(self) -> bool:
        return any(p.first is not None for p in self.pairs)

    def as_dict(self) -> dict:
        return {"schema": DIFF_SCHEMA, "job": self.job, "pairs": [p.as_dict() for p in self.pairs]}


def diff_job(job: Job) -> JobDiff:
    """Rank 0 (the lowest of the job's own files, stale ones left out)
    against each other rank."""
    ranks = [r for r in job.runs if r not in job.stale]
    pairs = []
    if ranks:
        a = ranks[0]
        pairs = [diff_pair(a, job.runs[a], b, job.runs[b]) for b in ranks[1:]]
    return JobDiff(job_info(job), tuple(pairs))


__all__ = ["DIFF_SCHEMA", "JobDiff", "RankDivergence", "RankPair", "diff_job", "diff_pair"]
