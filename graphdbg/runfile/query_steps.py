"""Steps of a run (`graphdbg_step` events) and eager ops by seq range: what
`graphdbg diff` needs to pair ops step by step (graphdbg.analysis.align)."""

from __future__ import annotations

import json
from typing import Iterator

from .readrecords import Op
from .records import OpRow
from .schema import select


class StepQueries:
    """Mixed into `Run` (query.py)."""

    def step_ends(self) -> tuple[list[int], str | None]:
        """The seq of each step's end event, in order, and how steps were
        counted (optimizer | compiled call; None: the file has no step events).
        A `restart` event drops the ends before it: they were calls of the
        first compiled graph, counted as steps until the first optimizer step
        showed that the steps are the optimizer's."""
        ends: list[int] = []
        by = None
        for seq, payload in self._iter("SELECT seq, payload FROM events "
                                       "WHERE name = 'graphdbg_step' ORDER BY seq"):
            try:
                p = json.loads(payload or "{}")
            except ValueError:
                p = {}
            if p.get("restart"):
                ends = []
            # `steps`: several steps that wrote nothing between their ends
            # share one event (files before it: one event a step)
            steps = p.get("steps", 1)
            ends.extend([seq] * (steps if isinstance(steps, int) and steps > 0 else 1))
            by = p.get("by", by)
        return ends, by

    def op_stacks(self) -> list[tuple]:
        """Each distinct (stack, user_frame) of the recorded ops."""
        return self._rows("SELECT DISTINCT stack, user_frame FROM ops")

    def op_keys_between(self, lo: int, hi: int | None) -> list[tuple]:
        """(stack, user_frame, op, phase, count) of the ops with lo < seq <= hi
        (hi None: to the end)."""
        where, args = ("seq > ?", [lo]) if hi is None else ("seq > ? AND seq <= ?", [lo, hi])
        return self._rows(f"SELECT stack, user_frame, op, phase, COUNT(*) FROM ops WHERE {where} "
                          "GROUP BY stack, user_frame, op, phase", args)

    def iter_ops_between(self, lo: int, hi: int | None) -> Iterator[Op]:
        """The ops with lo < seq <= hi in execution order (hi None: to the end)."""
        where, args = ("seq > ?", [lo]) if hi is None else ("seq > ? AND seq <= ?", [lo, hi])
        for rows in self._batches(select(OpRow) + f"WHERE {where} ORDER BY seq", args, OpRow):
            yield from self._ops(rows)
