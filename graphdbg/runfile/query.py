"""The run file's query layer: typed, paged, thread-safe, torch-free.

Every view (report, diff, the TUI, the pytest plugin) reads a run file
through `Run` and gets frozen records; this module and its parts (below)
hold the only SQL outside `writer.py` (which writes the file).

    with graphdbg.open_run("x.run") as run:
        for f in run.findings(severity="error"):
            print(f.kind, f"{f.file}:{f.line}", f.message)
        page = run.nodes(graph_id=1, offset=0, limit=50)

- Opening validates the file (missing, directory, not SQLite, foreign,
  newer schema, corrupt: `GraphdbgError` with a one-line message) and never
  executes code: JSON and plain SQL values only, tensors stay raw bytes.
- One read-only SQLite connection per thread, so a UI worker thread can use
  the same `Run`; `close()` closes them all.
- Lists are paged (`offset`, `limit`) or streamed (`iter_*`): a view never
  needs the whole run in memory.
- JSON columns come back parsed (shapes, dtypes, outputs, detail), except on
  `Op`, which keeps the raw text (`shapes_json`...) and parses on access:
  streaming a million ops should not parse what nobody reads.

`Run` is composed by job: its core (query_core.py: opening, connections,
frames, stacks, sources), graphs, nodes, node values, calls and kept tensors
(query_graphs.py), findings (query_findings.py) and where the time goes
(query_time.py); the records are in readrecords.py, and re-exported here.

Imports only the standard library and graphdbg's torch-free modules.
"""

from __future__ import annotations

from .query_core import RunCore
from .query_findings import FindingQueries
from .query_graphs import GraphQueries
from .query_steps import StepQueries
from .query_time import TimeQueries
from .readrecords import (MIN_SAMPLES, NO_FRAME, NODE_VALUE_DIFFERING, SEVERITIES, Call,
                          CompileTime, Finding, Frame, Graph, KeptTensor,
                          KernelTime, KindCount, LineTime, Node, NodeValue, Op, OpStat, RunInfo,
                          SampledLine, Sampling, SourceLine)

__all__ = ["Run", "open_run", "SEVERITIES", "MIN_SAMPLES", "NO_FRAME", "NODE_VALUE_DIFFERING",
           "Frame", "RunInfo", "Graph", "Node", "NodeValue", "CompileTime", "KernelTime",
           "SampledLine", "Sampling", "Call", "Op", "OpStat", "Finding",
           "KindCount", "LineTime", "SourceLine", "KeptTensor"]


class Run(GraphQueries, FindingQueries, TimeQueries, StepQueries, RunCore):
    """A run file opened for reading. Thread-safe; a context manager."""

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_run(path: str) -> Run:
    """Open a run file for reading (see `Run`)."""
    return Run(path)
