"""One view of a distributed job's ranks: what differs between them first,
then where each rank was, then each rank's run (`graphdbg report DIR`,
`--json`, `graphdbg diff DIR`; the TUI's job screen reads the same records).

The comparison (`compare`) reads each rank's run through
graphdbg.runfile.query and returns plain records (`Difference`: kind,
severity, message, ranks, file, line, function, code, detail), each at the
user's line:

- ``collectives``: the compiled graphs of one function issue different
  collectives on different ranks (in number or order): the ranks wait for
  each other; at the first collective that differs;
- ``recompile``, ``graph_break``, ``compile_error``: on some ranks only, at
  the finding's own line (a recompile where torch put the failed guard);
- ``graph``: a function compiled on some ranks only, or to a different
  graph, at the first node that differs (``info`` where a graph break or a
  recompile of those ranks explains it);
- ``compile_time``: a rank that compiled far longer than the others
  (`STRAGGLER_RATIO`, `STRAGGLER_MIN_S`), at the compile that took it;
- ``waited_call``: a compiled call that took far longer on one rank than
  the same call on the others (`WAIT_RATIO`, `WAIT_MIN_NS`);
- ``stopped``: a rank that failed, or whose file never closed (a hung or
  killed job), at where it was last seen.

Values are not compared: in data parallel each rank has its own data. The
same goes for `diff_job` (`graphdbg diff DIR`): rank 0 against each other
rank, eager ops aligned as `graphdbg diff A B` aligns them (analysis/diff.py),
only the op sequence and shapes.

No SQL, no torch; rich only inside the render functions.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import statistics
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from ..core.format import brief, ms, short
from ..runfile.job import Job
from ..runfile.query import SEVERITIES, CompileTime, Finding, Graph, Node, Op, Run
from ..analysis.diff import AlignedOps, Side, read_side
from .json import document as run_document
from .report import position_lines

JSON_SCHEMA = "graphdbg-job/1"
DIFF_SCHEMA = "graphdbg-job-diff/1"

# A rank whose compile time is this much above the other ranks' median, and
# by at least this many seconds, is a compile-time straggler.
STRAGGLER_RATIO = 1.5
STRAGGLER_MIN_S = 2.0
# ... a warning past this many seconds more (the others' collectives wait that
# long; a noisy machine's compile times alone differ by seconds: info)
STRAGGLER_WARN_S = 60.0
# A compiled call that took this much longer on one rank than the median of
# the same call on the others, and at least this many ns more, waited.
WAIT_RATIO = 3.0
WAIT_MIN_NS = 50_000_000
# calls compared per graph (the first ones): memory stays bounded on long runs
WAIT_CALLS_PER_GRAPH = 10_000

# finding kinds compared between ranks (values, NaN/Inf and divergences
# depend on each rank's data; a runtime error stops its rank: `stopped`)
COMPARED_KINDS = ("graph_break", "recompile", "compile_error")
KIND_ORDER = ("collectives", "recompile", "graph_break", "compile_error", "graph",
              "compile_time", "waited_call", "stopped")
KIND_LABELS = {"collectives": "collectives", "recompile": "recompile",
               "graph_break": "graph break", "compile_error": "compile error",
               "graph": "graph", "compile_time": "compile time",
               "waited_call": "waited call", "stopped": "stopped"}
CLOSED = ("complete",)   # statuses of a rank that ended as it should
ENDED = ("complete", "failed", "interrupted")   # ... that closed its file


# -- records ---------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Difference:
    """One way the ranks differ, at the user's line. `ranks`: the ranks it
    is about (those that have what the others lack, those that waited...)."""
    kind: str
    severity: str                  # error | warning | info
    message: str
    ranks: tuple[int, ...]
    file: str | None
    line: int | None
    function: str | None
    code: str | None = None
    detail: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"kind": self.kind, "severity": self.severity, "message": self.message,
                "ranks": list(self.ranks), "file": self.file, "line": self.line,
                "function": self.function, "code": self.code, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class RankSummary:
    """A rank's run in one row."""
    rank: int
    file: str
    host: str | None
    job: str | None
    status: str | None
    exit_status: int | None
    graphs: int
    graph_breaks: int
    recompiles: int
    compile_errors: int
    eager_ops: int
    compile_s: float
    position: dict | None
    stale: bool                    # its job id is not the job's: left out of the comparison

    def as_dict(self) -> dict:
        return {"rank": self.rank, "file": self.file, "host": self.host, "job": self.job,
                "status": self.status, "exit_status": self.exit_status, "graphs": self.graphs,
                "graph_breaks": self.graph_breaks, "recompiles": self.recompiles,
                "compile_errors": self.compile_errors, "eager_ops": self.eager_ops,
                "compile_s": round(self.compile_s, 3), "position": self.position,
                "stale": self.stale}


@dataclass(frozen=True, slots=True)
class Comparison:
    """What `compare` found of a job."""
    ranks: tuple[RankSummary, ...]
    differences: tuple[Difference, ...]   # `stopped` ones last

    @property
    def stopped(self) -> tuple[Difference, ...]:
        return tuple(d for d in self.differences if d.kind == "stopped")

    @property
    def between(self) -> tuple[Difference, ...]:
        """The differences between ranks (all but `stopped`)."""
        return tuple(d for d in self.differences if d.kind != "stopped")


# -- text helpers ----------------------------------------------------------------------

def rank_list(ranks) -> str:
    """"rank 1", "ranks 0, 2", "ranks 0-3, 6" (runs of 3 or more as ranges)."""
    rs = sorted(set(ranks))
    if len(rs) == 1:
        return f"rank {rs[0]}"
    parts, i = [], 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        parts += [f"{rs[i]}-{rs[j]}"] if j - i >= 2 else [str(r) for r in rs[i:j + 1]]
        i = j + 1
    return "ranks " + ", ".join(parts)


def _where(file: str | None, line: int | None) -> str:
    return f"{brief(file)}:{line}" if file else "?"


def _gist(text: str | None) -> str:
    """A message without its numbers: the same problem on two ranks with
    their own sizes or values."""
    return re.sub(r"\d+(\.\d+)?", "#", (text or "").strip().splitlines()[0] if text else "")


def _short_op(op: str) -> str:
    """"_c10d_functional.all_reduce" -> "all_reduce"."""
    return op.rsplit(".", 1)[-1]


def _counted(ops) -> str:
    """"2 all_reduce, 1 all_gather_into_tensor" (in order of first use)."""
    c = Counter(_short_op(o) for o in ops)
    return ", ".join(f"{n} {op}" for op, n in c.items()) or "no collective"


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def _normalised_code(code: str | None) -> str:
    return "\n".join(ln.rstrip() for ln in (code or "").splitlines() if ln.strip())


# -- reading a rank --------------------------------------------------------------------

GraphKey = tuple   # (function, file, line): a compiled function


class _Rank:
    """What the comparison reads of one rank's run, read once."""

    def __init__(self, rank: int, run: Run) -> None:
        self.rank, self.run = rank, run
        self.graphs: list[Graph] = run.graphs()
        self.by_id = {g.id: g for g in self.graphs}
        self.findings: list[Finding] = run.findings()
        self.compile_times: list[CompileTime] = run.compile_times()
        self.collectives = run.collectives()
        self._nodes: dict[int, list[Node]] = {}
        self._codes: dict[int, str] = {}
        self._sources: dict[str, list[str]] = {}

    def by_key(self) -> dict[GraphKey, list[Graph]]:
        out: dict[GraphKey, list[Graph]] = defaultdict(list)
        for g in self.graphs:
            out[(g.function, g.file, g.line)].append(g)
        return out

    def code(self, graph_id: int) -> str:
        if graph_id not in self._codes:
            self._codes[graph_id] = _normalised_code(self.run.graph_code(graph_id))
        return self._codes[graph_id]

    def nodes(self, graph_id: int) -> list[Node]:
        if graph_id not in self._nodes:
            self._nodes[graph_id] = self.run.nodes(graph_id)
        return self._nodes[graph_id]

    def node(self, graph_id: int, name: str) -> Node | None:
        return next((n for n in self.nodes(graph_id) if n.name == name), None)

    def source_line(self, file: str | None, line: int | None) -> str | None:
        if not file or not line:
            return None
        if file not in self._sources:
            text = self.run.source(file)
            self._sources[file] = text.splitlines() if text else []
        src = self._sources[file]
        return src[line - 1].strip() if 0 < line <= len(src) else None

    @property
    def compile_s(self) -> float:
        return sum(c.total_s for c in self.compile_times)


# -- the comparison --------------------------------------------------------------------

def compare(job: Job) -> Comparison:
    """Every way the job's ranks differ, and where each stopped rank was.
    Ranks whose file is from another job (`Job.stale`) are summarised but
    left out of the comparison."""
    ranks = [_Rank(r, run) for r, run in job.runs.items()]
    same_job = [r for r in ranks if r.rank not in job.stale]
    diffs: list[Difference] = []
    if len(same_job) > 1:
        found = _findings(same_job)
        colls = _collectives(same_job)   # {compiled function: its difference}
        diffs += colls.values()
        diffs += found
        diffs += _graphs(same_job, found, set(colls))
        diffs += _compile_stragglers(same_job)
        diffs += _waited_calls(same_job)
    diffs.sort(key=lambda d: (SEVERITIES.index(d.severity) if d.severity in SEVERITIES else 9,
                              KIND_ORDER.index(d.kind), d.file or "", d.line or 0))
    diffs += _stopped(ranks)
    return Comparison(tuple(_summary(r, r.rank in job.stale) for r in ranks), tuple(diffs))


def _summary(r: _Rank, stale: bool) -> RankSummary:
    counts = r.run.finding_counts()
    info = r.run.info

    def n(kind: str) -> int:
        c = counts.get(kind)
        return c.count if c else 0
    return RankSummary(r.rank, r.run.path, info.host, (info.rank or {}).get("job"), info.status,
                       info.exit_status, len(r.graphs), n("graph_break"), n("recompile"),
                       n("compile_error"), r.run.eager_totals()[0], r.compile_s,
                       r.run.position(), stale)


def _finding_key(f: Finding) -> tuple:
    d = f.detail
    if f.kind == "graph_break":
        what = getattr(d, "gb_type", None) or _gist(f.message)
    elif f.kind == "recompile":
        kind, subject = getattr(d, "guard_kind", None), getattr(d, "subject", None)
        what = (kind, subject) if kind or subject else _gist(f.message)
    else:
        what = _gist(f.message)
    return (f.kind, f.file, f.line, f.function, what)


def _findings(ranks: list[_Rank]) -> list[Difference]:
    """Graph breaks, recompiles and compile errors on some ranks only."""
    everyone = [r.rank for r in ranks]
    seen: dict[tuple, dict[int, Finding]] = defaultdict(dict)
    for r in ranks:
        for f in r.findings:
            if f.kind in COMPARED_KINDS and f.file:
                seen[_finding_key(f)].setdefault(r.rank, f)
    out = []
    for key, by_rank in seen.items():
        have = sorted(by_rank)
        lacking = [r for r in everyone if r not in by_rank]
        if not lacking:
            continue
        f = by_rank[have[0]]
        severity = min((x.severity for x in by_rank.values()),
                       key=lambda s: SEVERITIES.index(s) if s in SEVERITIES else 9)
        label = KIND_LABELS[f.kind]
        detail: dict[str, Any] = {
            "findings": {str(r): x.id for r, x in by_rank.items()},
            "counts": {str(r): x.count for r, x in by_rank.items()},
            "compile_ids": {str(r): list(x.compile_ids) for r, x in by_rank.items()},
            "not_on": lacking}
        if f.detail is not None:
            detail["finding_detail"] = f.detail.as_dict()
        out.append(Difference(
            f.kind, severity, f"{label} on {rank_list(have)} only (not on "
            f"{rank_list(lacking)}): {f.message}", tuple(have), f.file, f.line, f.function,
            f.code, detail))
    return out


def _collectives(ranks: list[_Rank]) -> dict[GraphKey, Difference]:
    """Compiled graphs of one function that issue different collectives on
    different ranks: at the first collective that differs."""
    keys: dict[GraphKey, dict[int, list[tuple[str, str, int]]]] = defaultdict(dict)
    for r in ranks:
        for key, graphs in r.by_key().items():
            seq = [(op, node, g.id) for g in graphs
                   for op, node in zip(*r.collectives.get(g.id, ((), ())))]
            keys[key][r.rank] = seq
    by_rank = {r.rank: r for r in ranks}
    out: dict[GraphKey, Difference] = {}
    for key, seqs in keys.items():
        if len(seqs) < 2 or not any(seqs.values()):
            continue
        groups: dict[tuple, list[int]] = defaultdict(list)
        for rank, seq in sorted(seqs.items()):
            groups[tuple(op for op, _, _ in seq)].append(rank)
        if len(groups) < 2:
            continue
        longest = max(len(s) for s in seqs.values())
        j = next(i for i in range(longest)
                 if len({s[i][0] if i < len(s) else None for s in seqs.values()}) > 1)
        at = next(rank for rank, s in sorted(seqs.items()) if j < len(s))
        op, node_name, gid = seqs[at][j]
        r = by_rank[at]
        node = r.node(gid, node_name)
        g = r.by_id[gid]
        file, line = (node.file, node.line) if node is not None and node.file else (g.file, g.line)
        code = (node.code if node is not None and node.file else None) or r.source_line(file, line)
        listing = "; ".join(f"{rank_list(rs)}: {_counted(ops)}" for ops, rs in groups.items())
        fn = key[0] or "?"
        if len({frozenset(Counter(ops).items()) for ops in groups}) == 1:
            orders = "; ".join(f"{rank_list(rs)}: {', '.join(map(_short_op, ops))}"
                               for ops, rs in groups.items())
            what = (f"{fn} issues the same collectives in a different order on different "
                    f"ranks ({orders})")
        else:
            what = f"{fn} issues different collectives on different ranks ({listing})"
        without = [rank for rank, s in sorted(seqs.items()) if j >= len(s)]
        if without:
            which = (f"{rank_list([at])}'s {_ordinal(j + 1)} collective ({_short_op(op)}) has "
                     f"no partner on {rank_list(without)}")
        else:
            which = (f"the {_ordinal(j + 1)} collective is "
                     + ", ".join(f"{_short_op(s[j][0])} on {rank_list([rk])}"
                                 for rk, s in sorted(seqs.items())))
        message = (f"{what}: {which}, so the ranks wait for each other there (a hang, or "
                   f"the process group's timeout)")
        detail = {"index": j, "collectives": {
            str(rank): [{"op": o, "node": n, "graph": gi} for o, n, gi in s]
            for rank, s in sorted(seqs.items())}}
        out[key] = Difference("collectives", "error", message, tuple(sorted(seqs)), file, line,
                              g.function if node is None else node.function or g.function,
                              code, detail)
    return out


def _first_node_difference(a: list[Node],
                           b: list[Node]) -> tuple[int, Node | None, Node | None] | None:
    """Where two graphs' nodes part ways: (index, a's node, b's node), a
    node None where its graph has ended; None when they agree."""
    for i in range(max(len(a), len(b))):
        na, nb = (a[i] if i < len(a) else None), (b[i] if i < len(b) else None)
        if na is None or nb is None or (na.op, na.target) != (nb.op, nb.target):
            return i, na, nb
    return None


def _node_text(n: Node | None) -> str:
    if n is None:
        return "nothing (its graph has ended)"
    if n.op == "output":
        return "the graph's output"
    where = f" at {_where(n.file, n.line)}" if n.file else ""
    return f"{n.target or n.name} ({n.name}){where}"


def _graphs(ranks: list[_Rank], found: list[Difference], skip: set) -> list[Difference]:
    """Functions compiled on some ranks only, or to different graphs."""
    everyone = [r.rank for r in ranks]
    by_rank = {r.rank: r for r in ranks}
    keys: dict[GraphKey, dict[int, list[Graph]]] = defaultdict(dict)
    for r in ranks:
        for key, graphs in r.by_key().items():
            keys[key][r.rank] = graphs
    out = []

    def because(key: GraphKey, involved, compile_ids) -> Difference | None:
        """The rank-only graph break or recompile that explains a graph difference."""
        for d in found:
            if d.kind not in ("graph_break", "recompile") or not set(d.ranks) & set(involved):
                continue
            ids = {c for cs in d.detail.get("compile_ids", {}).values() for c in cs}
            if ids & set(compile_ids) or (d.function == key[0] and d.file == key[1]):
                return d
        return None

    def add(key, severity, message, involved, file, line, function, code, compile_ids, detail):
        cause = because(key, involved, compile_ids)
        if cause is not None:
            severity = "info"
            message += (f" (follows from the {KIND_LABELS[cause.kind]} at "
                        f"{_where(cause.file, cause.line)})")
            detail["follows_from"] = {"kind": cause.kind, "file": cause.file, "line": cause.line}
        out.append(Difference("graph", severity, message, tuple(sorted(involved)), file, line,
                              function, code, detail))

    for key, per_rank in keys.items():
        if key in skip:
            continue
        fn, gfile, gline = key
        name = f"{fn or '?'} ({_where(gfile, gline)})"
        have = sorted(per_rank)
        lacking = [r for r in everyone if r not in per_rank]
        first = by_rank[have[0]]
        if lacking:
            graphs = per_rank[have[0]]
            colls = [op for g in graphs for op in first.collectives.get(g.id, ((), ()))[0]]
            issues = (f"; its graph issues {_counted(colls)}, which {rank_list(lacking)} "
                      f"{'does' if len(lacking) == 1 else 'do'} not issue there") if colls else ""
            add(key, "warning", f"{name} compiled on {rank_list(have)} only (not on "
                f"{rank_list(lacking)}){issues}", have, gfile, gline, fn,
                first.source_line(gfile, gline),
                [g.compile_id for rk in have for g in per_rank[rk]],
                {"graphs": {str(rk): [g.id for g in per_rank[rk]] for rk in have},
                 "not_on": lacking})
        if len(have) < 2:
            continue
        groups: dict[tuple, list[int]] = defaultdict(list)
        for rk in have:
            groups[tuple(by_rank[rk].code(g.id) for g in per_rank[rk])].append(rk)
        if len(groups) < 2:
            continue
        # the reference: the most ranks' graphs (a tie: the lowest rank's)
        ref_sig, ref_ranks = max(groups.items(), key=lambda kv: (len(kv[1]), -kv[1][0]))
        ref = by_rank[ref_ranks[0]]
        for sig, rs in groups.items():
            if rs is ref_ranks:
                continue
            other = by_rank[rs[0]]
            i = next(k for k in range(max(len(sig), len(ref_sig)))
                     if k >= len(sig) or k >= len(ref_sig) or sig[k] != ref_sig[k])
            ga = per_rank[ref.rank][i] if i < len(ref_sig) else None
            gb = per_rank[other.rank][i] if i < len(sig) else None
            detail: dict[str, Any] = {
                "graphs": {str(rk): [g.id for g in per_rank[rk]] for rk in have},
                "reference": ref_ranks}
            if ga is not None and gb is not None:
                part = _first_node_difference(ref.nodes(ga.id), other.nodes(gb.id))
                idx, na, nb = part if part is not None else (0, None, None)
                node = nb if nb is not None and nb.file else na if na is not None and na.file \
                    else None
                file, line = (node.file, node.line) if node is not None else (gb.file, gb.line)
                code = node.code if node is not None else other.source_line(file, line)
                message = (f"{name} compiled to a different graph on {rank_list(rs)} than on "
                           f"{rank_list(ref_ranks)}: they part at node {idx + 1}: "
                           f"{rank_list(ref_ranks)} {_node_text(na)}, {rank_list(rs)} "
                           f"{_node_text(nb)}")
                detail.update(node=idx, nodes={str(ref.rank): na.name if na else None,
                                               str(other.rank): nb.name if nb else None})
                add(key, "warning", message, rs, file, line,
                    node.function if node is not None else fn, code,
                    [ga.compile_id, gb.compile_id], detail)
            else:
                extra = gb if gb is not None else ga
                more = rs if gb is not None else ref_ranks
                message = (f"{name} compiled {len(sig)} graph{'s' if len(sig) != 1 else ''} on "
                           f"{rank_list(rs)}, {len(ref_sig)} on {rank_list(ref_ranks)}")
                add(key, "warning", message, more, extra.file, extra.line, fn,
                    by_rank[more[0]].source_line(extra.file, extra.line), [extra.compile_id],
                    detail)
    return out


def _median_others(values: dict[int, float], rank: int) -> float | None:
    others = [v for r, v in values.items() if r != rank]
    return statistics.median(others) if others else None


def _compile_stragglers(ranks: list[_Rank]) -> list[Difference]:
    """Ranks whose compile time is far above the others'."""
    totals = {r.rank: r.compile_s for r in ranks}
    per: dict[int, dict[tuple, float]] = {}   # rank -> compiled function -> seconds
    for x in ranks:
        acc: dict[tuple, float] = defaultdict(float)
        for c in x.compile_times:
            if c.file and c.line:
                acc[(c.function, c.file, c.line)] += c.total_s
        per[x.rank] = acc
    out = []
    for r in ranks:
        others = _median_others(totals, r.rank)
        mine = totals[r.rank]
        if others is None or mine <= STRAGGLER_RATIO * others or mine - others <= STRAGGLER_MIN_S:
            continue
        # where the extra time went: the compiled function it grew most on
        if not per[r.rank]:
            continue
        excess = {k: v - (_median_others({x: per[x].get(k, 0.0) for x in per}, r.rank) or 0.0)
                  for k, v in per[r.rank].items()}
        (fn, file, line), extra = max(excess.items(), key=lambda kv: kv[1])
        cache = ""
        at = (fn, file, line)
        misses = sum((c.fx_cache or {}).get("misses", 0) for c in r.compile_times
                     if (c.function, c.file, c.line) == at)
        other_hits = sum((c.fx_cache or {}).get("hits", 0) for x in ranks if x is not r
                         for c in x.compile_times if (c.function, c.file, c.line) == at)
        if misses and other_hits:
            cache = "; inductor's FX graph cache missed there on this rank and hit on others"
        out.append(Difference(
            "compile_time", "warning" if mine - others > STRAGGLER_WARN_S else "info",
            f"{rank_list([r.rank])} compiled for {mine:.1f} s, the other ranks {others:.1f} s "
            f"(median): {extra:.1f} s more in {fn or '?'} ({_where(file, line)}){cache}; the "
            f"others wait for it at their first collective", (r.rank,), file, line, fn,
            r.source_line(file, line),
            {"compile_s": round(mine, 3), "others_median_s": round(others, 3),
             "function_extra_s": round(extra, 3)}))
    return out


def _waited_calls(ranks: list[_Rank]) -> list[Difference]:
    """The same compiled call (same graph code, same call index) far longer
    on one rank than on the others."""
    walls: dict[tuple, dict[int, int]] = defaultdict(dict)   # (graph identity, call) -> rank -> ns
    where: dict[tuple, dict[int, int]] = defaultdict(dict)   # graph identity -> rank -> graph id
    for r in ranks:
        ident: dict[int, tuple] = {}
        n: Counter = Counter()
        for g in r.graphs:
            base = (g.function, g.file, g.line, r.code(g.id))
            ident[g.id] = (*base, n[base])
            n[base] += 1
            where[ident[g.id]][r.rank] = g.id
        for c in r.run.iter_calls():
            if c.wall_ns is not None and c.graph_id in ident and c.call_idx < WAIT_CALLS_PER_GRAPH:
                walls[(ident[c.graph_id], c.call_idx)][r.rank] = c.wall_ns
    # graph identity -> rank -> [(call, ns, the others' median)]
    waited: dict[tuple, dict[int, list]] = defaultdict(lambda: defaultdict(list))
    for (ident, call), by_rank in walls.items():
        if len(by_rank) < 2:
            continue
        for rank, ns in by_rank.items():
            others = _median_others(by_rank, rank)
            if others is not None and ns > WAIT_RATIO * others and ns - others > WAIT_MIN_NS:
                waited[ident][rank].append((call, ns, others))
    by_rank_obj = {r.rank: r for r in ranks}
    out = []
    for ident, per in waited.items():
        fn, gfile, gline = ident[:3]
        rank = min(per, key=lambda rk: -max(ns - o for _, ns, o in per[rk]))
        call, ns, others = max(per[rank], key=lambda x: x[1] - x[2])
        r = by_rank_obj[rank]
        gid = where[ident][rank]
        colls = r.collectives.get(gid)
        node = r.node(gid, colls[1][0]) if colls and colls[1] else None
        file, line = (node.file, node.line) if node is not None and node.file else (gfile, gline)
        code = node.code if node is not None and node.file else r.source_line(file, line)
        n_calls = sum(len(v) for v in per.values())
        head = (f"compiled calls of {fn or '?'} ({_where(gfile, gline)}) took far longer on "
                f"{rank_list(per)} than on the other ranks: call {call} {ms(ns)} on "
                f"{rank_list([rank])} against {ms(others)} (median of the others)"
                f"{f', {n_calls} calls in all' if n_calls > 1 else ''}")
        if colls:
            # a rank that waits inside a graph with collectives waits for the others there
            severity = "warning"
            why = (f": {rank_list(per)} waited{' at its first collective' if node else ''} "
                   f"for a slower rank")
        else:
            # no collective in the graph: that rank was slower there, it waited for nothing
            severity = "info"
            why = ": its graph issues no collective, so that rank was slower there (a busy "
            why += "machine, another process), not waiting for another rank"
        out.append(Difference(
            "waited_call", severity, head + why, tuple(sorted(per)), file, line, fn, code,
            {"collectives": bool(colls),
             "calls": {str(rk): [{"call": c, "ns": v, "others_ns": o} for c, v, o in calls[:20]]
                       for rk, calls in sorted(per.items())}}))
    return out


def _position_text(position: dict | None) -> str:
    return "; ".join(position_lines(position)) if position else "no position recorded"


def _stopped(ranks: list[_Rank]) -> list[Difference]:
    """Ranks that failed, or whose file never closed: where each was."""
    out = []
    for r in ranks:
        status = r.run.info.status
        if status in CLOSED:
            continue
        position = r.run.position()
        error = next((f for f in r.findings if f.kind == "runtime_error"), None)
        detail = {"status": status, "exit_status": r.run.info.exit_status,
                  "position": position}
        if error is not None and error.file:
            out.append(Difference("stopped", "error", f"rank {r.rank} {status or 'stopped'}: "
                                  f"{error.message}", (r.rank,), error.file, error.line,
                                  error.function, error.code, {**detail, "finding": error.id}))
            continue
        call, op = (position or {}).get("call"), (position or {}).get("op")
        if call and call.get("running") and call.get("file"):
            file, line, fn = call["file"], call["line"], call.get("function")
        elif op and op.get("file"):
            file, line, fn = op["file"], op["line"], op.get("function")
        elif call and call.get("file"):
            file, line, fn = call["file"], call["line"], call.get("function")
        else:
            continue   # nothing to place it at: the rank table says its status
        out.append(Difference(
            "stopped", "error" if status == "failed" else "warning",
            f"rank {r.rank} {status or 'stopped'}: {_position_text(position)}", (r.rank,),
            file, line, fn, r.source_line(file, line), detail))
    return out


# -- the JSON document -----------------------------------------------------------------

def job_info(job: Job) -> dict:
    """The job's part of the documents: its id, ranks, hosts, and what the
    folder lacks or holds too much of."""
    argv = next((run.info.argv for run in job.runs.values() if run.info.argv), None)
    return {"folder": job.folder, "id": job.id, "world_size": job.world_size,
            "backend": job.backend, "hosts": job.hosts, "argv": argv,
            "ranks": sorted(job.runs), "missing_ranks": job.missing,
            "stale": [{"rank": r, "job": j, "file": job.path(r)} for r, j in job.stale.items()],
            "unreadable": [{"rank": f.rank, "file": f.path, "error": f.error}
                           for f in job.unreadable],
            "superseded": [{"rank": f.rank, "restart": f.restart, "file": f.path}
                           for f in job.superseded]}


def document(job: Job, comparison: Comparison | None = None) -> dict:
    """`graphdbg report --json DIR` (docs/report-json.md, schema graphdbg-job/1)."""
    c = comparison if comparison is not None else compare(job)
    return {"schema": JSON_SCHEMA, "job": job_info(job),
            "ranks": [s.as_dict() for s in c.ranks],
            "differences": [d.as_dict() for d in c.differences],
            "runs": {str(r): run_document(run, nodes=False) for r, run in job.runs.items()}}


# -- rich rendering --------------------------------------------------------------------

_ICONS = {"error": "[red]✖[/]", "warning": "[yellow]▲[/]", "info": "[blue]●[/]"}


def header_lines(job: Job, c: Comparison) -> list[tuple[str, str]]:
    """(style, text) lines that open every view of a job: the job, how its
    ranks ended, and what the folder lacks or holds too much of."""
    n = len(job.runs)
    world = f" of {job.world_size}" if job.world_size else ""
    argv = job_info(job)["argv"]
    hosts = ", ".join(job.hosts) or "?"
    parts = [job.backend, f"host{'s' if len(job.hosts) != 1 else ''} {hosts}"]
    out = [("bold", f"job {job.id or '?'}: {n} rank{'s' if n != 1 else ''}{world} "
                    f"({', '.join(p for p in parts if p)})"
                    + (f"  graphdbg run {' '.join(argv)}" if argv else ""))]
    by_status: dict[str, list[int]] = defaultdict(list)
    for s in c.ranks:
        by_status[s.status or "?"].append(s.rank)
    ended = "; ".join(f"{status}: {rank_list(rs)}" for status, rs in by_status.items())
    exits = {s.exit_status for s in c.ranks}
    exit_text = f", exit {exits.pop()}" if len(exits) == 1 and None not in exits else ""
    style = "green" if set(by_status) <= set(CLOSED) and exit_text == ", exit 0" else "yellow"
    out.append((style, ended + exit_text))
    if job.missing:
        out.append(("yellow", f"{rank_list(job.missing)} of 0-{(job.world_size or 1) - 1} "
                              f"{'has' if len(job.missing) == 1 else 'have'} no run file in "
                              f"this folder (not started, or its file is elsewhere: copy it "
                              f"here)"))
    for r, other in job.stale.items():
        out.append(("yellow", f"{short(job.path(r))} is from another job ({other or 'no job id'}, "
                              f"not {job.id}): a stale file? left out of the comparison"))
    for f in job.unreadable:
        out.append(("yellow", f"rank {f.rank}: {f.error}"))
    for f in job.superseded:
        out.append(("dim", f"{short(f.path)}: an earlier restart of rank {f.rank}, replaced by "
                           f"a later one"))
    return out


def render(job: Job, c: Comparison, console) -> None:
    """The job on a rich console: header, where ranks differ, where each
    stopped rank was, then one row per rank."""
    from rich.console import Group, NewLine
    from rich.markup import escape
    from rich.padding import Padding
    from rich.rule import Rule
    from rich.table import Table
    from rich.text import Text

    out: list = []
    for style, text in header_lines(job, c):
        out.append(f"[{style}]{escape(text)}[/]")

    def indented(markup: str) -> None:
        out.append(Padding(Text.from_markup(markup, emoji=False), (0, 0, 0, 4), expand=False))

    def head(d: Difference) -> None:
        fn = f" in {escape(d.function)}" if d.function else ""
        out.append(f"{_ICONS.get(d.severity, '?')} [bold]{KIND_LABELS.get(d.kind, d.kind)}[/] "
                   f"[cyan]{escape(short(d.file))}:{d.line}[/]{fn}  [dim]{rank_list(d.ranks)}[/]")
        if d.code:
            out.append(f"    [dim]{d.line:>5} │[/] {escape(d.code)}")

    between = c.between
    out.append(NewLine())
    out.append(Rule(f"Where ranks differ ({len(between)})", align="left"))
    if len(job.runs) - len(job.stale) < 2:
        out.append("[dim]one rank's file only: nothing to compare[/]")
    elif not between:
        out.append("[green]● no difference between the ranks' compiled graphs, graph breaks, "
                   "recompiles, collectives, compile times and calls[/]")
    for d in between:
        head(d)
        indented(escape(d.message))

    if c.stopped:
        out.append(NewLine())
        out.append(Rule("Where each rank was", align="left"))
        for d in c.stopped:
            head(d)
            status = d.detail.get("status") or "stopped"
            if d.severity == "error" and d.detail.get("finding") is not None:
                indented(escape(d.message))
            lines = position_lines(d.detail.get("position"))
            for line in lines:
                indented(f"[yellow]{escape(line)}[/]")
            if not lines:
                indented(f"[dim]rank {d.ranks[0]} {escape(status)}; no position recorded[/]")
        placed = {d.ranks[0] for d in c.stopped}
        for s in c.ranks:
            if s.status not in CLOSED and s.rank not in placed:
                out.append(f"[yellow]rank {s.rank} {escape(s.status or 'stopped')}[/]: "
                           f"[dim]no position recorded[/]")

    out.append(NewLine())
    out.append(Rule(f"Ranks ({len(c.ranks)})", align="left"))
    t = Table(box=None, header_style="bold", pad_edge=False)
    for col, just in (("rank", "right"), ("host", "left"), ("status", "left"),
                      ("graphs", "right"), ("breaks", "right"), ("recompiles", "right"),
                      ("eager ops", "right"), ("compile", "right"), ("file", "left")):
        t.add_column(col, justify=just)
    for s in c.ranks:
        status = (s.status or "?") + (f", exit {s.exit_status}"
                                      if s.exit_status is not None else "")
        colour = "green" if s.status in CLOSED and s.exit_status == 0 else \
            "red" if s.status == "failed" else "yellow"
        t.add_row(str(s.rank), escape(s.host or "?"), f"[{colour}]{escape(status)}[/]"
                  + (" [yellow](other job)[/]" if s.stale else ""),
                  str(s.graphs), str(s.graph_breaks), str(s.recompiles), str(s.eager_ops),
                  f"{s.compile_s:.1f} s", escape(short(s.file)))
    out.append(t)
    example = c.ranks[-1].file if c.ranks else f"{job.folder}/rank0.run"
    out.append(f"[dim]a rank's full report: [bold]graphdbg report {escape(short(example))}[/]; "
               f"ops aligned rank against rank: "
               f"[bold]graphdbg diff {escape(short(job.folder))}[/][/]")
    console.print(Group(*out))


def _console():
    from rich.console import Console
    # Not a terminal (a pipe, a log, make): wide enough for paths and tables.
    return Console(highlight=False, emoji=False, width=None if sys.stdout.isatty() else 120)


def main(folder: str, as_json: bool) -> int:
    """`graphdbg report DIR [--json]` for a job's folder."""
    with Job.open(folder) as job:
        c = compare(job)
        if as_json:
            json.dump(document(job, c), sys.stdout, indent=1, default=str)
            sys.stdout.write("\n")
            return 0
        render(job, c, _console())
    return 0


# -- graphdbg diff DIR: rank 0 against each other rank ---------------------------------

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
            f"{o.op} ({o.phase}) runs a {_ordinal(k + 1)} time on rank {a}, not on rank {b}")))
    ub = _first_unpaired(B, A, closed_a) if only_b else None
    if ub is not None:
        o, k, after = ub
        # in rank a's order: just before rank a's twin of the next op they share
        seq = _seq_of(ra, *after) if after is not None else None
        found.append((math.inf if seq is None else seq - 0.5, RankDivergence(
            "sequence", o.file, o.line, o.function, o.code, o.op, k, None, k,
            f"{o.op} ({o.phase}) runs a {_ordinal(k + 1)} time on rank {b}, not on rank {a}")))

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
                other, f"the {_ordinal(k + 1)} call of compiled {fn} returns {shapes} on rank "
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
    ranks = [r for r in job.runs if r not in job.stale]
    pairs = []
    if ranks:
        a = ranks[0]
        pairs = [diff_pair(a, job.runs[a], b, job.runs[b]) for b in ranks[1:]]
    return JobDiff(job_info(job), tuple(pairs))


def render_diff(job: Job, d: JobDiff, console) -> None:
    from rich.markup import escape
    n = len(job.runs)
    console.print(f"[bold]graphdbg diff[/] job {escape(job.id or '?')} ({n} rank"
                  f"{'s' if n != 1 else ''}, {escape(short(job.folder))}): eager ops aligned by "
                  f"line, op and occurrence; values are not compared (each rank has its own "
                  f"data), only the op sequence and shapes")
    for r, other in job.stale.items():
        console.print(f"[yellow]rank {r}'s file is from another job ({escape(str(other))}): "
                      f"left out[/]")
    if not d.pairs:
        console.print("[dim]one rank's file only: nothing to compare[/]")
    for p in d.pairs:
        console.print()
        console.print(f"[bold]rank {p.a} ↔ rank {p.b}[/]: {p.aligned_ops} ops aligned, "
                      f"{p.only_in_a} only on rank {p.a}, {p.only_in_b} only on rank {p.b}")
        if p.unclosed:
            whose = (f"rank {p.unclosed[0]}'s file" if len(p.unclosed) == 1 else
                     f"the files of {rank_list(p.unclosed)}")
            console.print(f"[yellow]{whose} never closed: ops stop where they were last "
                          f"committed, so an op missing there counts only where later ops "
                          f"were recorded[/]")
        f = p.first
        if f is None:
            console.print("[green]● the same ops with the same shapes, in step[/]"
                          if not p.unclosed else
                          "[green]● the same shapes wherever both ranks recorded the op[/]")
            continue
        fn = f" in {escape(f.function)}" if f.function else ""
        console.print(f"[red]✖ first divergence ({f.what})[/] "
                      f"[cyan]{escape(short(f.file))}:{f.line}[/]{fn}")
        if f.code:
            console.print(f"    [dim]{f.line:>5} │[/] {escape(f.code)}")
        console.print(f"    {escape(f.message)}")


def main_diff(folder: str, as_json: bool) -> int:
    """`graphdbg diff DIR`: exit 1 where the op sequence or shapes part ways."""
    with Job.open(folder) as job:
        d = diff_job(job)
        if as_json:
            sys.stdout.write(json.dumps(d.as_dict(), indent=1, default=str) + "\n")
        else:
            render_diff(job, d, _console())
    return 1 if d.differs else 0


__all__ = ["DIFF_SCHEMA", "JSON_SCHEMA", "STRAGGLER_MIN_S", "STRAGGLER_RATIO",
           "WAIT_CALLS_PER_GRAPH", "WAIT_MIN_NS", "WAIT_RATIO", "Comparison", "Difference",
           "JobDiff", "RankDivergence", "RankPair", "RankSummary", "compare", "diff_job",
           "diff_pair", "document", "header_lines", "main", "main_diff", "rank_list", "render",
           "render_diff"]
