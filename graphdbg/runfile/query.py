"""The run file's query layer: typed, paged, thread-safe, torch-free.

Every view (report, diff, the TUI, the pytest plugin) reads a run file
through `Run` and gets frozen records; this module holds the only SQL
outside `runfile.py` (which writes the file).

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

Imports only the standard library and graphdbg's torch-free modules.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sqlite3
import threading
import urllib.parse
import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Collection, Iterable, Iterator

from ..core.errors import GraphdbgError
from .details import FindingDetail, parse as parse_detail
from .records import (CallRow, DiagnosticRow, FrameRow, NodeRow, NodeValueRow, OpRow,
                      OpSummaryRow, StackRow, TensorRow)
from .schema import COMPILE_PHASES, FORMAT, SCHEMA_VERSION, columns, select
from ..core.sourcemap import original_function

SEVERITIES = ("error", "warning", "info")  # the order findings are listed in
MIN_SAMPLES = 3  # steady calls a compiled line's time needs before it is called slower than eager
_CHUNK = 500  # ids per `IN (...)`: well under SQLite's variable limit
# columns a later schema added to a table: the version that added each (older
# files are read with NULL there)
_ADDED = {"frames": {"col": 3, "end_col": 3, "cell": 3}}
_FRAME_CACHE_MAX = 100_000


def _loads(text: str | None) -> Any:
    return json.loads(text) if text else None


# -- records --------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Frame:
    """A source location; the fields are None when no user frame is known.
    `col`/`end_col`: the caret's span, 0-based character offsets into `code`
    (the line without its indentation), end exclusive; None: the whole line.
    `cell`: a notebook cell's name as IPython gives it (``Cell In[3]``), for
    `file` (`graphdbg.core.format.at` writes ``Cell In[3], line 7``)."""
    file: str | None
    line: int | None
    function: str | None
    code: str | None
    id: int | None = None
    col: int | None = None
    end_col: int | None = None
    cell: str | None = None

    def as_dict(self) -> dict:
        return {"file": self.file, "line": self.line, "function": self.function,
                "code": self.code, "col": self.col, "end_col": self.end_col, "cell": self.cell}


NO_FRAME = Frame(None, None, None, None)


@dataclass(frozen=True, slots=True)
class RunInfo:
    """The run's `meta` table: what ran, how it ended, with what."""
    file: str                      # absolute path of the run file
    argv: list | None
    cwd: str | None
    module: bool | None
    target: str | None
    exit_status: int | None
    status: str | None             # running | complete | failed | interrupted | ended without closing
    started_at: float | None
    ended_at: float | None
    wall_s: float | None
    values: str | None             # value tier
    device: str | None
    stance: str | None
    python: str | None
    torch: str | None
    graphdbg: str | None
    torch_counters: dict | None
    counts: dict | None
    ops_dropped: int | None
    internal_errors: list
    schema_version: int
    pid: int | None = None         # the process that wrote it, on host
    host: str | None = None
    profile: dict | None = None    # --profile: {dir, traces, steps, schedule}
    # --eager-steps: {first, every, steps, recorded, by}; None: no eager recorder
    eager_steps: dict | None = None
    py_spy_error: str | None = None  # --py-spy: why it sampled nothing
    # a launcher's rank (torchrun, srun): {rank, world_size, local_rank,
    # local_world_size, group_rank, restart, job, backend}; None: one process
    rank: dict | None = None
    # where a rank was last seen (hooks/record/ranks.py): {since, call:
    # {graph_id, call_idx, running, raised}, op: {op, phase, user_frame}}
    position: dict | None = None

    @property
    def versions(self) -> dict:
        return {"python": self.python, "torch": self.torch, "graphdbg": self.graphdbg}


@dataclass(frozen=True, slots=True)
class Graph:
    """A compiled graph, with statistics of its calls."""
    id: int
    compile_id: str | None
    backend: str | None
    function: str | None           # the compiled function's name
    file: str | None               # ... its file and first line
    line: int | None
    user_frame: int | None
    stack_id: int | None
    status: str | None
    error: str | None
    n_nodes: int | None
    n_ops: int | None
    n_inputs: int | None
    compile_time_s: float | None
    backend_time_s: float | None
    created_seq: int | None
    calls: int
    total_call_ns: int             # 0 without calls
    min_call_ns: int | None
    max_call_ns: int | None
    eager_ref_ns: int | None = None  # its nodes' time in the eager reference run (None: not checked)
    steady_call_ns: int | None = None  # its fastest call after the first (None: called once)
    # one of DDPOptimizer's pieces of a compiled function: {index, count,
    # size_bytes, params, cap_bytes, first_cap_bytes}
    ddp_bucket: dict | None = None
    # an exported program (torch.export, torch.onnx.export), not a compiled
    # graph: {kind, via, strict, dynamic, specialized, opset, onnx_nodes,
    # onnx_ops: {FX node: [ONNX ops]}, runtime, not_checked}
    export: dict | None = None

    @property
    def kind(self) -> str:
        """compile (a Dynamo graph given to a backend), export or onnx."""
        return self.export.get("kind", "export") if self.export is not None else "compile"

    @property
    def mean_call_ns(self) -> float | None:
        return self.total_call_ns / self.calls if self.calls else None

    @property
    def compiled_slower(self) -> bool | None:
        """Whether its fastest compiled call after the first (which warms
        up) took longer than its nodes did eagerly (the reference run's op
        times, without Python's own cost between ops); None when either was
        not measured."""
        if not self.steady_call_ns or not self.eager_ref_ns:
            return None
        return self.steady_call_ns > self.eager_ref_ns


@dataclass(frozen=True, slots=True)
class Node:
    """A node of a graph at its user's line; `eager_ns` is its time in the
    eager reference run (None without one)."""
    graph_id: int
    idx: int
    name: str
    op: str
    target: str | None
    args: str | None
    shapes: list | None
    dtypes: list | None
    module_path: str | None
    module_class: str | None
    eager_ns: int | None
    user_frame: int | None
    stack_id: int | None
    file: str | None
    line: int | None
    function: str | None
    code: str | None


@dataclass(frozen=True, slots=True)
class NodeValue:
    """A node's value on one checked call, eager vs compiled (the run file's
    `node_values`). Stats: {shape, dtype, min, max, mean, std, norm, nan,
    inf} (fewer keys with `--values health`); the compiled side and the
    errors are None where the compiled value is not known. `status`: ok,
    differs, first divergent, not compared (docs/run-file.md)."""
    graph_id: int
    call_idx: int
    node: str
    idx: int | None
    op: str | None
    target: str | None
    status: str
    kind: str | None               # miscompile | precision | shape | dtype | random
    compiled_from: str | None      # "output" | "intermediate outputs (<stage>)"
    max_abs: float | None
    max_rel: float | None
    eager_vs_fp64: float | None    # rmse against the float64 judge
    compiled_vs_fp64: float | None
    eager_stats: dict | None
    compiled_stats: dict | None
    fp64_stats: dict | None
    eager_ns: int | None
    module_path: str | None
    user_frame: int | None
    file: str | None
    line: int | None
    function: str | None
    code: str | None

    @property
    def differs(self) -> bool:
        return self.status in NODE_VALUE_DIFFERING


NODE_VALUE_DIFFERING = ("differs", "first divergent")


@dataclass(frozen=True, slots=True)
class CompileTime:
    """Where one compile's time went (from torch's compilation metrics).
    `recompile`: not the first compile of its code (frame_compile_id > 0)."""
    compile_id: str
    graph_ids: tuple[int, ...]
    function: str | None
    file: str | None
    line: int | None
    total_s: float
    phases: dict          # phase -> seconds, in COMPILE_PHASES order; they add up to total_s
    fx_cache: dict        # {"hits": n, "misses": n}: inductor's FX graph cache
    aot_cache: dict       # the same for AOT autograd's cache
    failed: bool

    @property
    def recompile(self) -> bool:
        return not self.compile_id.endswith("/0")


@dataclass(frozen=True, slots=True)
class KernelTime:
    """One kernel of an inductor-compiled graph, timed over the graph's first
    calls, with the user lines of the FX nodes it computes (inductor's
    provenance). `part`: forward, backward or inference."""
    compile_id: str
    graph_id: int | None
    part: str | None
    name: str                      # e.g. cpp_fused_gelu_0, extern_kernels.addmm
    handle: int                    # inductor's provenance handle (order in the wrapper)
    ns: int | None                 # a steady call: the fastest timed call after the first
    first_ns: int | None           # the first (cold) call
    calls: int                     # calls of its graph by the program
    frames: tuple                  # Frames of the user lines it computes
    nodes: tuple[str, ...]         # Dynamo graph nodes it computes (forward/inference)
    steady: bool = True            # timed after a first call (False: `ns` is the cold first call)
    samples: int = 0               # steady calls timed (`ns` is the fastest of them)

    @property
    def total_ns(self) -> int:
        return (self.ns or 0) * self.calls


@dataclass(frozen=True, slots=True)
class CompiledLine:
    """Compiled kernel time at a user line (a kernel fused from several lines
    counts a share at each). Per call of the graphs: `forward_ns` (forward and
    inference kernels) against `eager_ref_ns` (the line's nodes in the eager
    reference run), `backward_ns`; `total_ns` over all calls."""
    file: str
    line: int
    function: str
    code: str | None
    total_ns: int
    forward_ns: int
    backward_ns: int
    eager_ref_ns: int | None
    kernels: tuple[str, ...]
    graph_ids: tuple[int, ...]
    steady: bool = True            # its forward kernels were timed after a first call
    samples: int = 0               # the fewest steady calls any of its forward kernels was timed over

    @property
    def compiled_slower(self) -> bool | None:
        """None also when the forward time is a cold first call only (a graph
        called once), or from fewer than MIN_SAMPLES steady calls: that is no
        verdict on compiled code."""
        if not self.forward_ns or not self.eager_ref_ns or not self.steady \
                or self.samples < MIN_SAMPLES:
            return None
        return self.forward_ns > self.eager_ref_ns


@dataclass(frozen=True, slots=True)
class SampledLine:
    """A user source line and the py-spy samples whose deepest user frame it was."""
    file: str
    line: int
    function: str
    samples: int


@dataclass(frozen=True, slots=True)
class Sampling:
    """`graphdbg run --py-spy`: samples in all, the rate, the speedscope file,
    and the sampled lines (most sampled first)."""
    samples: int
    rate: int
    file: str
    lines: tuple[SampledLine, ...]


@dataclass(frozen=True, slots=True)
class Call:
    """One call of a compiled graph; `outputs`: [{shape, dtype, stats}, ...]."""
    seq: int
    graph_id: int
    call_idx: int
    wall_ns: int | None
    outputs: list


@dataclass(frozen=True, slots=True)
class Op:
    """One recorded eager op. The JSON columns stay text until read."""
    seq: int
    op: str
    phase: str | None
    time_ns: int | None
    module_path: str | None
    module_class: str | None
    user_frame: int | None
    stack_id: int | None
    file: str | None
    line: int | None
    function: str | None
    code: str | None
    shapes_json: str | None
    dtypes_json: str | None
    stats_json: str | None

    @property
    def shapes(self) -> list:
        return json.loads(self.shapes_json) if self.shapes_json else []

    @property
    def dtypes(self) -> list:
        return json.loads(self.dtypes_json) if self.dtypes_json else []

    @property
    def stats(self) -> list | None:
        return _loads(self.stats_json)


@dataclass(frozen=True, slots=True)
class OpStat:
    """Eager ops summed per (op, phase, user line, module): every op, also
    those past `--max-ops`."""
    op: str
    phase: str | None
    count: int
    total_ns: int
    max_ns: int
    module_path: str | None
    user_frame: int | None
    file: str | None
    line: int | None
    function: str | None
    code: str | None


@dataclass(frozen=True, slots=True)
class Finding:
    """One diagnostic (docs/report-json.md lists kinds and details).
    `stack`: user frames, outermost first."""
    id: int
    kind: str
    severity: str
    message: str | None
    reason: str | None
    hint: str | None
    user_frame: int | None
    file: str | None
    line: int | None
    function: str | None
    code: str | None
    stack_id: int | None
    stack: tuple[Frame, ...]
    count: int
    compile_ids: tuple[str, ...]
    graph_id: int | None
    node: str | None
    op: str | None
    detail: FindingDetail | None  # typed per kind (details.py); None: none stored
    col: int | None = None         # the caret's span in `code` (see `Frame`)
    end_col: int | None = None
    cell: str | None = None        # a notebook cell's name ("Cell In[3]")


@dataclass(frozen=True, slots=True)
class KindCount:
    sites: int   # findings of the kind
    count: int   # times they were hit


@dataclass(frozen=True, slots=True)
class LineTime:
    """Time spent at a source line (see `Run.hot_lines`)."""
    file: str
    line: int | None
    eager_ns: int
    compiled_ns: int

    @property
    def total_ns(self) -> int:
        return self.eager_ns + self.compiled_ns


@dataclass(frozen=True, slots=True)
class SourceLine:
    """A line of a snapshotted source file with what happened there."""
    line: int
    text: str
    eager_ns: int                  # eager ops at this line (op summary)
    compiled_ns: int               # compiled time at this line (`Run._compiled_by_line`)
    findings: tuple[int, ...]      # ids of findings reported at this line


@dataclass(frozen=True, slots=True)
class KeptTensor:
    """A tensor kept with `--values full`: raw safetensors bytes (never
    unpickled). `owner` is `op:<seq>` or `call:<seq>`."""
    id: int
    owner: str
    name: str
    data: bytes


# -- the reader -----------------------------------------------------------------------

def _excerpt(exc: BaseException, limit: int = 120) -> str:
    """SQLite's message on one short line: it may quote a damaged column's
    whole text, newlines and all."""
    text = str(exc).encode("unicode_escape").decode("ascii")
    return text if len(text) <= limit else text[:limit] + "..."


_RANK_KEYS = ("rank", "world_size", "local_rank", "local_world_size", "group_rank", "restart",
              "job")


def _rank(meta: dict) -> dict | None:
    if not isinstance(meta.get("rank"), int):
        return None
    return {**{k: meta.get(k) for k in _RANK_KEYS}, "backend": meta.get("dist_backend")}


def _status(meta: dict) -> str | None:
    """How the run ended. A run still marked running whose process is gone
    (killed with SIGKILL, the machine lost power) ended without closing."""
    status, pid, host = meta.get("status"), meta.get("pid"), meta.get("host")
    if status != "running" or not isinstance(pid, int) or host not in (None, socket.gethostname()):
        return status  # running elsewhere, or not known to have stopped
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return "ended without closing"
    except OSError:
        pass  # alive, another user's
    return status


class Run:
    """A run file opened for reading. Thread-safe; a context manager."""

    def __init__(self, path: str) -> None:
        self.path = path
        if not os.path.exists(path):
            raise GraphdbgError(f"no such run file: {path}")
        if os.path.isdir(path):
            raise GraphdbgError(f"{path} is a directory, not a run file")
        with open(path, "rb") as fh:
            head = fh.read(16)
        if head != b"SQLite format 3\x00":
            raise GraphdbgError(f"{path} is not a graphdbg run file")
        # quoted: a path with '?' or '#' would otherwise end the URI early
        self._uri = f"file:{urllib.parse.quote(os.path.abspath(path))}?mode=ro"
        self._local = threading.local()
        self._lock = threading.Lock()
        self._conns: list[tuple[threading.Thread, sqlite3.Connection]] = []
        self._closed = False
        self._frames: dict[int, Frame] = {}
        self._selects: dict[type, str] = {}
        self._cell_names: dict[str, str] | None = None
        try:
            rows = self._db().execute("SELECT key, value FROM meta").fetchall()
        except sqlite3.DatabaseError as exc:
            self.close()
            raise GraphdbgError(f"{path} is not a readable graphdbg run file ({_excerpt(exc)})") from None
        self.meta: dict[str, Any] = {k: json.loads(v) for k, v in rows}
        if self.meta.get("format") != FORMAT:
            self.close()
            raise GraphdbgError(f"{path} is not a graphdbg run file")
        version = self.meta.get("schema_version")
        if not isinstance(version, int) or version > SCHEMA_VERSION:
            self.close()
            raise GraphdbgError(
                f"{path} has run-file schema {version}; this graphdbg reads up to {SCHEMA_VERSION}")
        m = self.meta
        self.info = RunInfo(
            file=os.path.abspath(path), argv=m.get("argv"), cwd=m.get("cwd"),
            module=m.get("module"), target=m.get("target"), exit_status=m.get("exit_status"),
            status=_status(m), started_at=m.get("started_at"), ended_at=m.get("ended_at"),
            wall_s=m.get("wall_s"), values=m.get("values"), device=m.get("device"),
            stance=m.get("stance"), python=m.get("python"), torch=m.get("torch"),
            graphdbg=m.get("graphdbg"), torch_counters=m.get("torch_counters"),
            counts=m.get("counts"), ops_dropped=m.get("ops_dropped"),
            internal_errors=m.get("internal_errors") or [], schema_version=version,
            pid=m.get("pid"), host=m.get("host"), profile=m.get("profile"),
            py_spy_error=m.get("py_spy_error"), eager_steps=m.get("eager_steps"),
            rank=_rank(m), position=m.get("position"))

    def __repr__(self) -> str:
        return f"<graphdbg.runfile.query.Run {self.path!r}{' closed' if self._closed else ''}>"

    # -- connections ---------------------------------------------------------------
    def _db(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)  # closed by close(): the query fails, _fail says why
        if db is None:
            # check_same_thread=False only so that close() may close it from
            # another thread; each connection is used by its own thread.
            db = sqlite3.connect(self._uri, uri=True, check_same_thread=False)
            db.row_factory = sqlite3.Row
            with self._lock:
                if self._closed:
                    db.close()
                    raise GraphdbgError(f"{self.path}: the run file was closed")
                for t, c in [tc for tc in self._conns if not tc[0].is_alive()]:
                    c.close()  # a finished worker thread's connection
                    self._conns.remove((t, c))
                self._conns.append((threading.current_thread(), db))
            self._local.db = db
        return db

    def _fail(self, exc: sqlite3.Error) -> GraphdbgError:
        if self._closed:
            return GraphdbgError(f"{self.path}: the run file was closed")
        if isinstance(exc, sqlite3.DatabaseError):
            return GraphdbgError(f"{self.path} is damaged ({_excerpt(exc)})")
        raise exc  # misuse (say wrong parameters): a bug of ours, not the file's fault

    # Rows come as sqlite3.Row, read by column name; or, given a ``record`` of
    # graphdbg/runfile/records.py and a `schema.select` of it, as that record
    def _execute(self, sql: str, args: Iterable, record: type | None) -> sqlite3.Cursor:
        cur = self._db().cursor()
        if record is not None:
            cur.row_factory = None  # plain tuples, made into records: cheaper than sqlite3.Row
        return cur.execute(sql, tuple(args))

    def _rows(self, sql: str, args: Iterable = (), record: type | None = None) -> list:
        try:
            rows = self._execute(sql, args, record).fetchall()
        except sqlite3.Error as exc:
            raise self._fail(exc) from None
        return rows if record is None else list(map(record._make, rows))

    def _batches(self, sql: str, args: Iterable = (), record: type | None = None) -> Iterator[list]:
        try:
            cur = self._execute(sql, args, record)
            while rows := cur.fetchmany(1000):
                yield rows if record is None else list(map(record._make, rows))
        except sqlite3.Error as exc:
            raise self._fail(exc) from None

    def _iter(self, sql: str, args: Iterable = (), record: type | None = None) -> Iterator:
        for rows in self._batches(sql, args, record):
            yield from rows

    def close(self) -> None:
        """Close every connection this object opened (in any thread)."""
        with self._lock:
            self._closed = True
            for _, c in self._conns:
                c.close()
            self._conns.clear()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def query(self, sql: str, args: Iterable = ()) -> list[sqlite3.Row]:
        """Raw rows, for tests and ad-hoc inspection; views use the typed
        accessors below."""
        return self._rows(sql, args)

    def count(self, table: str) -> int:
        """Rows in a table of the run file."""
        if not re.fullmatch(r"[a-z_]+", table):
            raise ValueError(f"not a table name: {table!r}")
        return self._rows(f"SELECT COUNT(*) AS n FROM {table}")[0]["n"]

    # -- frames and stacks -----------------------------------------------------------
    def _resolve(self, ids: Iterable[int | None]) -> dict[int, Frame]:
        """Frames by id, fetched in one query per chunk of unknown ids and cached."""
        want = {i for i in ids if i is not None}
        with self._lock:
            have = {i: self._frames[i] for i in want if i in self._frames}
        missing = [i for i in want if i not in have]
        found: dict[int, Frame] = {}
        for start in range(0, len(missing), _CHUNK):
            part = missing[start:start + _CHUNK]
            for fr in self._rows(self._select(FrameRow)
                                 + f"WHERE id IN ({','.join('?' * len(part))})", part, FrameRow):
                found[fr.id] = Frame(fr.file, fr.line, fr.function, fr.code, fr.id, fr.col,
                                     fr.end_col, fr.cell)
        if found:
            with self._lock:
                if len(self._frames) + len(found) > _FRAME_CACHE_MAX:
                    self._frames.clear()  # bounded: a TUI paging through a huge run
                self._frames.update(found)
            have.update(found)
        return have

    def _select(self, record: type) -> str:
        """`schema.select` of a record's table, NULL for the columns that a file
        of an older schema lacks (`_ADDED`: frames' spans and cells before 3)."""
        sql = self._selects.get(record)
        if sql is None:
            added = _ADDED.get(record.TABLE, {})
            version = self.info.schema_version
            sql = self._selects[record] = "SELECT " + ", ".join(
                c if added.get(c, 0) <= version else f"NULL AS {c}" for c in record._fields
            ) + f" FROM {record.TABLE} "
        return sql

    def cell_names(self) -> dict[str, str]:
        """Notebook cells the frames point into: file -> the cell's name as
        IPython gives it (``Cell In[3]``); none before schema 3."""
        names = self._cell_names
        if names is None:
            names = self._cell_names = {} if self.info.schema_version < _ADDED["frames"]["cell"] \
                else {r["file"]: r["cell"] for r in self._rows(
                    "SELECT DISTINCT file, cell FROM frames WHERE cell IS NOT NULL")}
        return names

    def frame(self, frame_id: int | None) -> Frame | None:
        return self._resolve([frame_id]).get(frame_id) if frame_id is not None else None

    def _stack_ids(self, stack_ids: Iterable[int | None]) -> dict[int, list[int]]:
        """The frame ids of stacks, by stack id."""
        want = sorted({s for s in stack_ids if s is not None})
        ids: dict[int, list[int]] = {}
        for start in range(0, len(want), _CHUNK):
            part = want[start:start + _CHUNK]
            for s in self._rows(select(StackRow) + f"WHERE id IN ({','.join('?' * len(part))})",
                                part, StackRow):
                ids[s.id] = json.loads(s.frames)
        return ids

    def stack(self, stack_id: int | None) -> tuple[Frame, ...]:
        """The frames of a stack, outermost first (missing frames left out)."""
        fids = self._stack_ids([stack_id]).get(stack_id, [])
        frames = self._resolve(fids)
        return tuple(frames[i] for i in fids if i in frames)

    def _at(self, frame_id: int | None, frames: dict[int, Frame]) -> Frame:
        return frames.get(frame_id, NO_FRAME) if frame_id is not None else NO_FRAME

    # -- graphs, nodes, calls ------------------------------------------------------------
    _GRAPH_SQL = (
        "SELECT g.id, g.compile_id, g.backend, g.code_name, g.code_file, g.code_line, "
        "g.user_frame, g.stack, g.status, g.error, g.n_nodes, g.n_ops, g.n_inputs, "
        "g.compile_time_s, g.backend_time_s, g.created_seq, "
        "c.calls, c.total_ns, c.min_ns, c.max_ns, t.eager_ns, c.steady_ns FROM graphs g LEFT JOIN ("
        " SELECT graph_id, COUNT(*) AS calls, SUM(wall_ns) AS total_ns, MIN(wall_ns) AS min_ns,"
        " MAX(wall_ns) AS max_ns, MIN(CASE WHEN call_idx >= 1 THEN wall_ns END) AS steady_ns"
        " FROM calls GROUP BY graph_id) c ON c.graph_id = g.id "
        "LEFT JOIN (SELECT graph_id, SUM(eager_ns) AS eager_ns FROM node_times GROUP BY graph_id)"
        " t ON t.graph_id = g.id ")

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
                     eager_ref_ns=r["eager_ns"], steady_call_ns=r["steady_ns"])

    def graphs(self) -> list[Graph]:
        """Every graph, by id (graphs are few; the graph code is left out)."""
        buckets = self._per_graph("graphdbg_ddp_bucket")
        exports = self._per_graph("graphdbg_export")
        return [self._with_events(self._graph(r), buckets, exports)
                for r in self._rows(self._GRAPH_SQL + "ORDER BY g.id")]

    def graph(self, graph_id: int) -> Graph | None:
        rows = self._rows(self._GRAPH_SQL + "WHERE g.id = ?", (graph_id,))
        return self._with_events(self._graph(rows[0]), self._per_graph("graphdbg_ddp_bucket"),
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
        graphs: dict[str, list] = {}
        for g in self.graphs():
            graphs.setdefault(g.compile_id, []).append(g)
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
        for cid, md in self._rows("SELECT compile_id, metadata FROM events WHERE name = ? "
                                  "ORDER BY seq", ("graphdbg_compile_time",)):
            p = (_loads(md) or {}).get("graphdbg_compile_time") or {}
            gs = graphs.get(cid, [])
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
        graphs = {g.compile_id: g for g in self.graphs()}
        recs = [(cid, (_loads(md) or {}).get("graphdbg_kernel_times") or {})
                for cid, md in self._rows("SELECT compile_id, metadata FROM events WHERE name = ? "
                                          "ORDER BY seq", ("graphdbg_kernel_times",))]
        frames = self._resolve(f for _, r in recs for k in r.get("kernels") or () for f in k.get("frames") or ())
        out = []
        for cid, r in recs:
            if r.get("broken"):
                continue
            g = graphs.get(cid)
            calls = int(r.get("calls") or 0)
            if g is not None and r.get("part") != "backward":
                calls = g.calls  # the program's calls, as the backend counted them
            for k in r.get("kernels") or ():
                out.append(KernelTime(
                    cid or "?", g.id if g else None, r.get("part"), str(k.get("name")),
                    int(k.get("handle") or 0), k.get("ns"), k.get("first_ns"), calls,
                    tuple(frames[f] for f in k.get("frames") or () if f in frames),
                    tuple(k.get("nodes") or ()), int(r.get("calls_timed") or 0) > 1,
                    int(k.get("samples", max(0, int(r.get("calls_timed") or 0) - 1)))))
        return out

    def compiled_lines(self, limit: int | None = None) -> list[CompiledLine]:
        """Compiled kernel time per user line, most first (see `CompiledLine`)."""
        acc: dict[tuple, dict] = {}
        graphs_timed: set[int] = set()
        for k in self.kernel_times():
            if not k.frames or k.ns is None:
                continue
            share = k.ns / len(k.frames)
            for f in k.frames:
                a = acc.setdefault((f.file, f.line), {"frame": f, "total": 0.0, "fw": 0.0, "bw": 0.0,
                                                       "kernels": [], "graphs": [], "steady": True,
                                                       "samples": None})
                if k.part != "backward":
                    a["steady"] = a["steady"] and k.steady
                    a["samples"] = k.samples if a["samples"] is None else min(a["samples"], k.samples)
                a["total"] += share * k.calls
                a["bw" if k.part == "backward" else "fw"] += share
                if k.name not in a["kernels"]:
                    a["kernels"].append(k.name)
                if k.graph_id is not None and k.graph_id not in a["graphs"]:
                    a["graphs"].append(k.graph_id)
                if k.graph_id is not None:
                    graphs_timed.add(k.graph_id)
        eager: dict[tuple, int] = {}
        if graphs_timed:
            ids = sorted(graphs_timed)
            for file, line, ns in self._rows(
                    "SELECT f.file, f.line, SUM(t.eager_ns) FROM node_times t JOIN nodes n "
                    "ON n.graph_id = t.graph_id AND n.name = t.node JOIN frames f ON f.id = n.user_frame "
                    f"WHERE t.graph_id IN ({','.join('?' * len(ids))}) GROUP BY f.file, f.line", ids):
                eager[(file, line)] = ns
        out = [CompiledLine(f.file, f.line, f.function, f.code, int(a["total"]), int(a["fw"]),
                            int(a["bw"]), eager.get(key), tuple(a["kernels"]), tuple(a["graphs"]),
                            a["steady"], a["samples"] or 0)
               for key, a in acc.items() for f in (a["frame"],)]
        out.sort(key=lambda c: (-c.total_ns, c.file, c.line))
        return out if limit is None else out[:limit]

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

    # -- where the time goes ----------------------------------------------------------
    def hot_nodes(self, limit: int | None = 20) -> list[Node]:
        """Graph nodes (call_* only) by their time in the eager reference run,
        slowest first."""
        return self._nodes(self._rows(
            f"SELECT {columns(NodeRow, 'n')}, t.eager_ns "
            "FROM node_times t JOIN nodes n ON n.graph_id = t.graph_id AND n.name = t.node "
            "WHERE n.op LIKE 'call_%' ORDER BY t.eager_ns DESC LIMIT ?",
            (-1 if limit is None else limit,)))

    def hot_lines(self, limit: int | None = 20, *, recorded_ops_only: bool = False) -> list[LineTime]:
        """Time per source line, most first (then by file and line).

        A line's time is `eager_ns` + `compiled_ns`:
        - eager_ns: the eager ops whose user frame is at that line, from the
          op summary (every op, also those past `--max-ops`), or with
          ``recorded_ops_only`` from the ops recorded one by one;
        - compiled_ns: see `_compiled_by_line`.
        Lines without a file are left out.
        """
        col, table = ("time_ns", "ops") if recorded_ops_only else ("total_ns", "op_summary")
        eager = self._by_line(f"SELECT user_frame, SUM({col}) FROM {table} "
                              "WHERE user_frame IS NOT NULL GROUP BY user_frame")
        times = {k: [ns, 0] for k, ns in eager.items() if k[0]}
        for key, ns in self._compiled_by_line().items():
            times.setdefault(key, [0, 0])[1] += ns
        out = [LineTime(f, ln, e, c) for (f, ln), (e, c) in times.items()]
        out.sort(key=lambda t: (-t.total_ns, t.file, t.line if t.line is not None else -1))
        return out if limit is None else out[:limit]

    def _compiled_by_line(self) -> dict[tuple[str, int], int]:
        """Compiled time per line: a graph whose kernels were timed
        (inductor) counts each kernel's time at the lines it computes (a
        share each when fused from several) and the rest of its call time
        (wrapper, guards, allocation, a cold first call) at the compiled
        function's first line (`Graph.file`, `Graph.line`); its backward
        kernels count at the forward lines they differentiate. Other graphs
        count their whole call time at the compiled function's first line."""
        out: dict[tuple[str, int], int] = {}
        kernel_ns: dict[int, float] = {}
        for k in self.kernel_times():
            if not k.frames or k.ns is None:
                continue
            share = k.ns / len(k.frames) * k.calls
            for f in k.frames:
                out[(f.file, f.line)] = out.get((f.file, f.line), 0) + int(share)
            if k.graph_id is not None and k.part != "backward":
                kernel_ns[k.graph_id] = kernel_ns.get(k.graph_id, 0.0) + k.ns * k.calls
        for gid, file, line, ns in self._iter(
                "SELECT g.id, g.code_file, g.code_line, COALESCE(SUM(c.wall_ns),0) FROM calls c "
                "JOIN graphs g ON g.id = c.graph_id WHERE g.code_file IS NOT NULL AND "
                "g.code_file != '' GROUP BY g.id"):
            rest = max(0, int(ns - kernel_ns.get(gid, 0)))
            if rest:
                out[(file, line)] = out.get((file, line), 0) + rest
        return out

    # -- sources and tensors ------------------------------------------------------------
    def source(self, file: str) -> str | None:
        """The snapshot of a user file taken during the run."""
        rows = self._rows("SELECT text FROM sources WHERE file = ?", (file,))
        return rows[0]["text"] if rows else None

    def source_files(self) -> list[str]:
        return [r["file"] for r in self._rows("SELECT file FROM sources ORDER BY file")]

    def source_lines(self, file: str) -> list[SourceLine]:
        """A snapshotted file line by line, with the time spent at each line
        (as `hot_lines`) and the findings reported there; [] if not kept."""
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
        compiled = {ln: ns for (f, ln), ns in self._compiled_by_line().items() if f == file}
        found: dict[int, list[int]] = {}
        for line, fid in self._rows(
                "SELECT f.line, d.id FROM diagnostics d JOIN frames f ON f.id = d.user_frame "
                "WHERE f.file = ? ORDER BY d.id", (file,)):
            found.setdefault(line, []).append(fid)
        return [SourceLine(i, t, eager.get(i, 0), compiled.get(i, 0), tuple(found.get(i, ())))
                for i, t in enumerate(lines, 1)]

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


def open_run(path: str) -> Run:
    """Open a run file for reading (see `Run`)."""
    return Run(path)
