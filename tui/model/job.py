"""The job screen's view state (`graphdbg tui DIR`), as plain classes: no textual.

A `JobModel` is built from an open `graphdbg.runfile.job.Job` and its
comparison (`graphdbg.analysis.ranks.compare`, which reads every rank: run
`JobModel.load` in a worker); it gives the rows of the ranks table and of
the differences table, the text shown under the differences, and which run
file Enter opens.
"""

from __future__ import annotations

from dataclasses import dataclass

from graphdbg.core.format import brief, short
from graphdbg.analysis.ranks import (CLOSED, KIND_LABELS, Comparison, Difference, RankSummary,
                                     compare, header_lines, position_lines, rank_list)
from graphdbg.runfile.job import Job
from .run import ICONS

RANK_COLUMNS = ("rank", "host", "status", "graphs", "breaks", "recompiles", "eager ops",
                "compile", "where it was")
DIFFERENCE_COLUMNS = ("", "kind", "where", "ranks", "what")


def where_it_was(s: RankSummary) -> str:
    """A rank's last known place, in one cell ("-" for a rank that completed)."""
    if s.status in CLOSED:
        return "-"
    lines = position_lines(s.position)
    return "; ".join(lines) if lines else "no position recorded"


@dataclass
class JobModel:
    job: Job
    comparison: Comparison

    @classmethod
    def load(cls, job: Job) -> JobModel:
        """Compare the ranks (reads every rank's run: in a worker)."""
        return cls(job, compare(job))

    @property
    def ranks(self) -> tuple[RankSummary, ...]:
        return self.comparison.ranks

    @property
    def differences(self) -> tuple[Difference, ...]:
        """Where the ranks differ, then where each stopped rank was."""
        return self.comparison.differences

    def header(self) -> list[tuple[str, str]]:
        return header_lines(self.job, self.comparison)

    def rank_rows(self) -> list[tuple[str, ...]]:
        rows = []
        for s in self.ranks:
            status = (s.status or "?") + (f", exit {s.exit_status}"
                                          if s.exit_status is not None else "")
            if s.stale:
                status += " (other job)"
            rows.append((str(s.rank), s.host or "?", status, str(s.graphs), str(s.graph_breaks),
                         str(s.recompiles), str(s.eager_ops), f"{s.compile_s:.1f} s",
                         where_it_was(s)))
        return rows

    def rank_level(self, s: RankSummary) -> str | None:
        """How a rank's row is coloured: None when it completed with exit 0."""
        if s.status in CLOSED and s.exit_status == 0 and not s.stale:
            return None
        return "error" if s.status == "failed" else "warning"

    def difference_rows(self) -> list[tuple[str, ...]]:
        return [(f"{ICONS.get(d.severity, '?')} {d.severity}", KIND_LABELS.get(d.kind, d.kind),
                 f"{brief(d.file)}:{d.line}" if d.file else "-", rank_list(d.ranks),
                 d.message) for d in self.differences]

    def summary(self) -> str:
        """The differences tab's title: "3 differences, 2 ranks stopped"."""
        n, stopped = len(self.comparison.between), len(self.comparison.stopped)
        text = f"{n} difference{'s' if n != 1 else ''}"
        if stopped:
            text += f", {stopped} rank{'s' if stopped != 1 else ''} stopped"
        return text

    @staticmethod
    def preview(d: Difference | None) -> str:
        """The selected difference in full, under the table."""
        if d is None:
            return ""
        where = f"{short(d.file)}:{d.line}" if d.file else "-"
        fn = f" in {d.function}" if d.function else ""
        code = f"\n  {d.line:>5} │ {d.code}" if d.code else ""
        return f"{where}{fn} ({rank_list(d.ranks)}){code}\n{d.message}"

    def run_of(self, item: RankSummary | Difference | None) -> str | None:
        """The run file Enter opens: a rank's, or a difference's first rank's."""
        if isinstance(item, RankSummary):
            return item.file
        if isinstance(item, Difference) and item.ranks:
            rank = item.ranks[0]
            return next((s.file for s in self.ranks if s.rank == rank), None)
        return None
