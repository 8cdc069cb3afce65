"""Two runs' eager ops paired by what ran: the same step, the same user call
path, op and phase, and the k-th occurrence of that within the step.

A line that ran inside a compiled graph in one run and as eager ops in the
other, in a step, is never compared op by op (its ops in the other run are
not the same computation split the same way); ops without a user line are
never paired (the autograd engine's gradient accumulation, the optimizer's
internals: nothing to point at).

Steps are the program's steps (`graphdbg_step` events, hooks/record/steps.py):
used when both runs counted the same number of steps the same way; else
(an old run file, a program without an optimizer run eagerly against
compiled: its compiled run counts calls, its eager run nothing) the whole
run is one step.

Memory is bounded by lines and graphs, not ops: occurrence counts come from
SQL one step at a time, and the two op streams of a step are merged,
holding only the ops whose twin is not read yet.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import OrderedDict, defaultdict
from collections.abc import Iterable, Iterator

from ..runfile.query import Op, Run

Path = tuple  # ((file, line), ...) of the user frames, outermost first
Key = tuple   # (path, op, phase)


class Paths:
    """The user call path of an op or node of one run, cached by (stack, frame)
    id: stacks are few, ops many.

    `of` leaves out the outer frames that every recorded op of the run shares
    (`graphdbg.capture` called from a test or a notebook cell: how the
    program was started, not where in it an op ran), keeping the innermost
    frame at least; `full` keeps them."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self._cache: dict[tuple, Path | None] = {}
        self._prefix: int | None = None

    def _shared(self) -> int:
        """How many outer frames every recorded op's path shares."""
        if self._prefix is None:
            common: Path | None = None
            for stack, frame in self.run.op_stacks():
                path = self.full(stack, frame)
                if path is None:
                    continue
                if common is None:
                    common = path
                else:
                    n = 0
                    while n < min(len(common), len(path)) and common[n] == path[n]:
                        n += 1
                    common = common[:n]
                if not common:
                    break
            self._prefix = len(common or ())
        return self._prefix

    def of(self, stack_id: int | None, frame_id: int | None) -> Path | None:
        path = self.full(stack_id, frame_id)
        if path is None:
            return None
        n = self._shared()
        return path[n:] if len(path) > n else path[-1:]

    def full(self, stack_id: int | None, frame_id: int | None) -> Path | None:
        key = (stack_id, frame_id)
        if key in self._cache:
            return self._cache[key]
        path: Path | None = None
        inner = self.run.frame(frame_id) if frame_id is not None else None
        if inner is not None and inner.file and inner.line is not None:
            frames = self.run.stack(stack_id) if stack_id is not None else ()
            path = tuple((f.file, f.line) for f in frames if f.file and f.line is not None)
            if not path or path[-1] != (inner.file, inner.line):
                path += ((inner.file, inner.line),)
        self._cache[key] = path
        return path

    def of_op(self, o: Op, full: bool = False) -> Path | None:
        return (self.full if full else self.of)(o.stack_id, o.user_frame)


class StepRanges:
    """A run's steps as seq ranges: step i holds the seqs in (ends[i-1], ends[i]];
    the last, after the last end, runs to the end of the run."""

    def __init__(self, ends: list[int]) -> None:
        self.ends = ends

    def __len__(self) -> int:
        return len(self.ends) + 1

    def bounds(self, step: int) -> tuple[int, int | None]:
        lo = self.ends[step - 1] if step > 0 else -1
        return lo, (self.ends[step] if step < len(self.ends) else None)

    def of(self, seq: int) -> int:
        return bisect_left(self.ends, seq)


def common_steps(ra: Run, rb: Run) -> tuple[StepRanges, StepRanges, bool]:
    """Each run's steps, and whether they are used: both runs counted the
    same number of steps the same way (else one step each: the whole run)."""
    ea, by_a = ra.step_ends()
    eb, by_b = rb.step_ends()
    if ea and by_a == by_b and len(ea) == len(eb):
        return StepRanges(ea), StepRanges(eb), True
    return StepRanges([]), StepRanges([]), False


class _Compiled:
    """The steps in which each line ran inside a graph of one run (ranges of
    consecutive steps, so a line compiled every step costs one range)."""

    def __init__(self, run: Run, steps: StepRanges, graph_lines: dict[int, set]) -> None:
        self.ranges: dict[tuple, list[list[int]]] = defaultdict(list)
        if not graph_lines:
            return
        last: dict[int, int] = {}
        for c in run.iter_calls():
            lines = graph_lines.get(c.graph_id)
            if not lines:
                continue
            s = steps.of(c.seq)
            if last.get(c.graph_id) == s:
                continue
            last[c.graph_id] = s
            for line in lines:
                rs = self.ranges[line]
                if rs and rs[-1][0] <= s <= rs[-1][1] + 1:
                    rs[-1][1] = max(rs[-1][1], s)
                else:
                    rs.append([s, s])

    def at(self, line: tuple, step: int) -> bool:
        rs = self.ranges.get(line)
        if not rs:
            return False
        i = bisect_right([r[0] for r in rs], step) - 1
        return i >= 0 and rs[i][0] <= step <= rs[i][1]


class Merge:
    """Pairs ``(key, a, b)`` of two streams of ``(key, op)`` (each key at most
    once per stream), read in step: only ops whose twin is not read yet wait.
    Set `stop_after` to an A seq to stop once no op of A at or before it can
    still be paired (a search for the earliest difference in A's order needs
    nothing later)."""

    def __init__(self, ia: Iterator[tuple], ib: Iterator[tuple]) -> None:
        self.ia, self.ib = ia, ib
        self.stop_after: int | None = None

    def __iter__(self) -> Iterator[tuple[tuple, Op, Op]]:
        wait_a: OrderedDict[tuple, Op] = OrderedDict()   # in A's order: first = earliest
        wait_b: dict[tuple, Op] = {}
        a_seq, a_done, b_done = -1, False, False
        while not (a_done and b_done):
            stop = self.stop_after
            if stop is not None and (a_done or a_seq >= stop) and (
                    not wait_a or next(iter(wait_a.values())).seq > stop):
                return
            if not a_done:
                item = next(self.ia, None)
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
                item = next(self.ib, None)
                if item is None:
                    b_done = True
                else:
                    key, b = item
                    a = wait_a.pop(key, None)
                    if a is None:
                        wait_b[key] = b
                    else:
                        yield key, a, b


class StepAlignment:
    """The eager ops of two runs (`Side`s from `graphdbg.analysis.diff.read_side`)
    paired by what ran (module docstring)."""

    def __init__(self, A, B) -> None:
        self.A, self.B = A, B
        self.steps_a, self.steps_b, self.by_step = common_steps(A.run, B.run)
        self.paths_a, self.paths_b = Paths(A.run), Paths(B.run)
        self.comp_a = _Compiled(A.run, self.steps_a, _graph_lines(A))
        self.comp_b = _Compiled(B.run, self.steps_b, _graph_lines(B))

    @property
    def n_steps(self) -> int:
        return len(self.steps_a)

    def step_label(self, step: int) -> int | None:
        """The step as the report numbers it (from 1); None without steps."""
        return step + 1 if self.by_step else None

    def one_sided(self, line: tuple, step: int) -> str | None:
        """"A" or "B" when `line` ran compiled in that run only, in `step`."""
        a, b = self.comp_a.at(line, step), self.comp_b.at(line, step)
        return "A" if a and not b else "B" if b and not a else None

    def _keys(self, run: Run, paths: Paths, step_ranges: StepRanges, step: int) -> dict:
        out: dict[Key, int] = defaultdict(int)
        for stack, frame, op, phase, n in run.op_keys_between(*step_ranges.bounds(step)):
            path = paths.of(stack, frame)
            if path is not None and self.one_sided(path[-1], step) is None:
                out[(path, op, phase)] += n
        return out

    def counts(self, step: int) -> tuple[dict, dict]:
        """Pairable ops per key in `step`, in A and in B."""
        return (self._keys(self.A.run, self.paths_a, self.steps_a, step),
                self._keys(self.B.run, self.paths_b, self.steps_b, step))

    def _stream(self, run: Run, paths: Paths, ranges: StepRanges, step: int,
                other: dict) -> Iterator[tuple]:
        seen: dict[Key, int] = defaultdict(int)
        for o in run.iter_ops_between(*ranges.bounds(step)):
            path = paths.of_op(o)
            if path is None:
                continue
            key = (path, o.op, o.phase)
            k = seen[key]
            seen[key] = k + 1
            if k < other.get(key, 0):
                yield (step, key, k), o

    def pairs(self, step: int) -> Merge:
        """``((step, key, k), a, b)`` for the paired ops of a step (a `Merge`:
        its `stop_after` ends it early)."""
        ca, cb = self.counts(step)
        if not ca or not cb:
            return Merge(iter(()), iter(()))
        return Merge(self._stream(self.A.run, self.paths_a, self.steps_a, step, cb),
                     self._stream(self.B.run, self.paths_b, self.steps_b, step, ca))

    def __iter__(self) -> Iterator[tuple[tuple, Op, Op]]:
        for step in range(self.n_steps):
            yield from self.pairs(step)

    def totals(self) -> tuple[int, list[tuple[str, tuple]]]:
        """(ops paired, the (run, line) pairs where a line ran compiled in
        that run and as eager ops in the other in some step)."""
        aligned = 0
        one_sided: set[tuple[str, tuple]] = set()
        for step in range(self.n_steps):
            for run, paths, ranges, name in ((self.A.run, self.paths_a, self.steps_a, "B"),
                                             (self.B.run, self.paths_b, self.steps_b, "A")):
                # lines with eager ops in one run, compiled in the other (`name`)
                for stack, frame, _op, _phase, _n in run.op_keys_between(*ranges.bounds(step)):
                    path = paths.of(stack, frame)
                    if path is not None and self.one_sided(path[-1], step) == name:
                        one_sided.add((name, path[-1]))
            ca, cb = self.counts(step)
            aligned += sum(min(n, cb.get(k, 0)) for k, n in ca.items())
        return aligned, sorted(one_sided, key=lambda x: (x[1][0], x[1][1], x[0]))


def _graph_lines(side) -> dict[int, set]:
    """graph -> the lines it ran in place of eager ops (`Side.covered` inverted)."""
    out: dict[int, set] = defaultdict(set)
    for line, graphs in side.covered.items():
        for g in graphs:
            out[g].add(line)
    return out


def ends_with(path: Path, suffix: Iterable) -> bool:
    suffix = tuple(suffix)
    return len(path) >= len(suffix) and path[len(path) - len(suffix):] == suffix
