"""The comparison of a distributed job's ranks (`graphdbg report DIR`,
`--json`, the TUI's job screen): what differs between them first, then where
each stopped rank was.

`compare` reads each rank's run through graphdbg.runfile.query and returns
plain records (`Difference`: kind, severity, message, ranks, file, line,
function, code, detail), each at the user's line:

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

Values are not compared: in data parallel each rank has its own data. Rank
against rank op by op (`graphdbg diff DIR`) is `rankdiff.py`; the job's
header and rank lists, `jobtext.py`. No SQL, no torch, no rich.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from ..core.format import ms
from ..runfile.job import Job
from ..runfile.query import SEVERITIES, CompileTime, Finding, Graph, Node, Run
from .jobtext import (CLOSED, ENDED, file_line, header_lines, job_info, ordinal,
                      position_lines, position_text, rank_list)

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
            which = (f"{rank_list([at])}'s {ordinal(j + 1)} collective ({_short_op(op)}) has "
                     f"no partner on {rank_list(without)}")
        else:
            which = (f"the {ordinal(j + 1)} collective is "
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
    where = f" at {file_line(n.file, n.line)}" if n.file else ""
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
                        f"{file_line(cause.file, cause.line)})")
            detail["follows_from"] = {"kind": cause.kind, "file": cause.file, "line": cause.line}
        out.append(Difference("graph", severity, message, tuple(sorted(involved)), file, line,
                              function, code, detail))

    for key, per_rank in keys.items():
        if key in skip:
            continue
        fn, gfile, gline = key
        name = f"{fn or '?'} ({file_line(gfile, gline)})"
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
            f"(median): {extra:.1f} s more in {fn or '?'} ({file_line(file, line)}){cache}; the "
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
        head = (f"compiled calls of {fn or '?'} ({file_line(gfile, gline)}) took far longer on "
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
            f"rank {r.rank} {status or 'stopped'}: {position_text(position)}", (r.rank,),
            file, line, fn, r.source_line(file, line), detail))
    return out


__all__ = ["CLOSED", "ENDED", "KIND_LABELS", "STRAGGLER_MIN_S", "STRAGGLER_RATIO",
           "STRAGGLER_WARN_S", "WAIT_CALLS_PER_GRAPH", "WAIT_MIN_NS", "WAIT_RATIO",
           "Comparison", "Difference", "RankSummary", "compare", "header_lines", "job_info",
           "position_lines", "rank_list"]
