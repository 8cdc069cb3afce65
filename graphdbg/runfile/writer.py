"""The run file: one SQLite database per run, written by the hooks, read by
everything else.

Design points:
- schema versioned (`meta.schema_version` and `PRAGMA user_version`), tagged
  with `meta.format = "graphdbg-run"` so foreign files are refused cleanly;
- frames (file, line, function, the caret's span, code) and stacks (lists
  of frame ids) are stored once and referred to by id;
- rows are buffered and written in batches, committed at least every
  `commit_interval` seconds, so a crash or Ctrl-C leaves a readable file;
- only JSON and plain SQL types: opening a run file never executes code.

No torch import here.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
from typing import Any, Callable, Iterable

from .details import Detail
from .records import (CallRow, DiagnosticRow, EventRow, FrameRow, GraphRow, MetaRow, NodeRow,
                      NodeTimeRow, NodeValueRow, OpRow, OpSummaryRow, SourceRow, StackRow,
                      TensorRow)
from .schema import FORMAT, SCHEMA, SCHEMA_VERSION, insert  # shared with the reader
from ..core.sourcemap import Frame, code_line, span as sourcemap_span

# the records `RunWriter.add` takes, a row each (the other tables have their
# own methods: graphs, findings and the op summary are updated in place)
ROW_RECORDS = (NodeRow, CallRow, OpRow, EventRow, TensorRow, NodeTimeRow, NodeValueRow)

DIAGNOSTIC_KINDS = ("graph_break", "recompile", "compile_error",
                    "malformed_graph", "divergence", "nan_inf", "runtime_error", "check_skipped",
                    "export_specialized")
_DIAGNOSTIC_FIELDS = frozenset(DiagnosticRow._fields)
_INSERT = {r: insert(r) for r in (FrameRow, StackRow, OpSummaryRow, *ROW_RECORDS)}


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), default=str)


def _detail_json(kind: str, detail: Detail | dict | None) -> dict | None:
    """A finding's detail as it is stored; a record of another kind's is refused
    (the reader would parse it as the finding's kind and lose its keys)."""
    if not isinstance(detail, Detail):
        return detail
    if detail.kind != kind:
        raise TypeError(f"a {type(detail).__name__} is not the detail of a {kind} finding")
    return detail.as_dict()


class RunWriter:
    """Buffers rows and writes them in batches. Thread-safe (backward may run
    on autograd worker threads)."""

    def __init__(self, path: str, *, commit_interval: float = 1.0,
                 batch_rows: int = 5000, durable: bool = True,
                 is_internal: Callable[[str], bool] = lambda file: file.startswith("<"),
                 source_of: Callable[[str], tuple[str, str] | None] | None = None) -> None:
        """``durable=False``: no fsync and the rollback journal in memory, for
        runs that are most often deleted (the pytest plugin's, one per test):
        the fsyncs were most of a short run's cost. A machine's crash can lose
        such a file, and so can the program's dying in the middle of a commit.
        ``is_internal``: the capture's rule for which files are never the
        user's (graphdbg.hooks.placement), stored with each frame; its
        internal files get no source snapshot. ``source_of``: for a file the
        capture knows better than the disk, its name and text (a notebook
        cell: ``("Cell In[3]", its source)``; graphdbg.hooks.placement.cells),
        asked once per file when a frame first points into it: the name is
        stored with each of its frames (``frames.cell``), the text as its
        snapshot. None for the rest, which are read from disk."""
        self._is_internal = is_internal
        self._source_of = source_of
        self._named: dict[str, tuple[str, str]] = {}
        self.path = os.path.abspath(path)
        if os.path.exists(self.path):
            os.remove(self.path)
        self._db = sqlite3.connect(self.path, check_same_thread=False,
                                   isolation_level=None)
        self._db.execute("PRAGMA journal_mode=DELETE" if durable else "PRAGMA journal_mode=MEMORY")
        self._db.execute("PRAGMA synchronous=NORMAL" if durable else "PRAGMA synchronous=OFF")
        self._db.executescript(SCHEMA)
        self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        self._lock = threading.RLock()
        # rows to write, by record type; new frames and stacks too (they do not count
        # towards `batch_rows`)
        self._rows: dict[type, list[tuple]] = {r: [] for r in (FrameRow, StackRow, *ROW_RECORDS)}
        self._pending = 0
        self._frames: dict[tuple, int] = {}
        self._frame_keys: list[tuple] = []     # by id - 1
        self._stacks: dict[tuple, int] = {}
        self._stack_keys: list[tuple] = []     # by id - 1
        self._graphs: dict[int, GraphRow] = {}
        self._dirty_graphs: set[int] = set()
        self._diags: dict[str, dict] = {}
        self._dirty_diags: set[str] = set()
        self._op_summary: dict[tuple, list[int]] = {}
        self._dirty_summary: set[tuple] = set()
        self._files: set[str] = set()
        self._snapshotted: set[str] = set()
        self._commit_interval = commit_interval
        self._batch_rows = batch_rows
        self._last_commit = time.monotonic()
        # called before a commit the clock asks for (rows held elsewhere join it)
        self.before_timed_commit: Callable[[], None] | None = None
        # told once when the file can no longer be written (then nothing more is)
        self.on_failure: Callable[[str], None] | None = None
        self.failed: str | None = None
        self.closed = False
        self.set_meta(format=FORMAT, schema_version=SCHEMA_VERSION,
                      status="running", started_at=time.time())
        self.flush()

    # -- interning -------------------------------------------------------
    def frame_id(self, file: str, line: int, function: str, col: int | None = None,
                 end_col: int | None = None, *, code: str | None = None) -> int:
        """The id of a frame, interned by (file, line, function, col, end_col):
        two carets on one line are two frames. ``col``/``end_col``: the
        caret's span in the line's code (`Frame`: ``frame_id(*frame)``; a
        (file, line, function) tuple works the same). ``code``: the line as
        the caller has it (torch's text), else it is read from the file."""
        if isinstance(col, str):
            raise TypeError("RunWriter.frame_id: the 4th argument is col; pass the line as code=")
        if not file.startswith("<") and not os.path.isabs(file):
            file = os.path.abspath(file)  # Dynamo keeps co_filename as given on the command line
        key = (file, line, function, col, end_col)
        fid = self._frames.get(key)
        if fid is None:
            with self._lock:
                fid = self._frames.get(key)
                if fid is None:
                    fid = self._new_frame(key, code)
        return fid

    def _new_frame(self, key: tuple, code: str | None) -> int:
        """Intern a frame not seen yet (under the lock): its span checked
        against its code (a span of the whole line is no span), so one line's
        whole-line frames are one frame."""
        file, line, function, col, end_col = key
        if code is None:
            code = code_line(file, line)
        span = sourcemap_span(code, col, end_col)
        if span != (col, end_col):
            fid = self._frames.get((file, line, function, *span))
            if fid is not None:
                self._frames[key] = fid
                return fid
        fid = len(self._frame_keys) + 1
        self._frames[key] = self._frames[(file, line, function, *span)] = fid
        self._frame_keys.append((file, line, function, *span))
        if file not in self._files:
            self._files.add(file)
            if self._source_of is not None:
                try:
                    named = self._source_of(file)
                except Exception:  # the capture's helper; never worth a frame
                    named = None
                if named is not None:
                    self._named[file] = named
        named = self._named.get(file)
        self._rows[FrameRow].append(FrameRow(
            id=fid, file=file, line=line, function=function, code=code,
            internal=int(self._is_internal(file)), col=span[0], end_col=span[1],
            cell=named[0] if named is not None else None))
        return fid

    def stack_id(self, frames: Iterable[Frame | tuple], codes: Iterable[str] | None = None) -> int | None:
        """Intern a stack given outermost first; returns its id (None if empty).
        ``frames``: `Frame`s (their spans kept) or (file, line, function) tuples."""
        codes = list(codes) if codes is not None else None
        ids = tuple(
            self.frame_id(*f[:5], code=codes[i] if codes else None)
            for i, f in enumerate(frames))
        if not ids:
            return None
        sid = self._stacks.get(ids)
        if sid is None:
            with self._lock:
                sid = self._stacks.get(ids)
                if sid is None:
                    sid = len(self._stacks) + 1
                    self._stacks[ids] = sid
                    self._stack_keys.append(ids)
                    self._rows[StackRow].append(StackRow(id=sid, frames=dumps(list(ids))))
        return sid

    def frame(self, fid: int) -> dict | None:
        """file, line, function, code and span of an interned frame."""
        if not 0 < fid <= len(self._frame_keys):
            return None
        file, line, function, col, end_col = self._frame_keys[fid - 1]
        return {"file": file, "line": line, "function": function, "code": code_line(file, line),
                "col": col, "end_col": end_col}

    def stack_frames(self, sid: int) -> list[tuple[str, int, str, int | None, int | None]]:
        """The frames of an interned stack, outermost first: (file, line,
        function, col, end_col), the fields of a `Frame`."""
        if not 0 < sid <= len(self._stack_keys):
            return []
        return [self._frame_keys[i - 1] for i in self._stack_keys[sid - 1]]

    # -- rows ------------------------------------------------------------
    def add(self, row: tuple) -> None:
        """Queue a row: a record of `ROW_RECORDS`, whose type names its table."""
        if self.closed:   # closed, or failed: nothing more is written
            return
        with self._lock:
            try:
                # kept as a plain tuple: the garbage collector stops tracking a tuple
                # of plain values, not a record (a subclass); thousands of buffered
                # records made each collection, and so each op row, ~1 us slower
                self._rows[type(row)].append(tuple(row))
            except KeyError:
                raise TypeError(f"RunWriter.add takes one of {[r.__name__ for r in ROW_RECORDS]}, "
                                f"not {type(row).__name__}") from None
            self._pending += 1
        self.maybe_flush()

    def add_tuples(self, record: type, rows: list[tuple]) -> None:
        """Queue rows of ``record`` given as plain tuples in its field order
        (the per-op paths collect them: no record built, nothing copied)."""
        if self.closed:
            return
        with self._lock:
            self._rows[record].extend(rows)
            self._pending += len(rows)
        self.maybe_flush()

    def op_summary_table(self) -> tuple[dict, set]:
        """The per-op summary as ``add_op_summary`` keeps it: ``{(op, phase,
        user_frame, module_path or ""): [count, total_ns, max_ns]}`` and the set
        of keys changed since the last commit. For the eager recorder's hot
        path, which updates both directly from one thread (a commit takes the
        dirty keys before it reads their counts, so none is lost)."""
        return self._op_summary, self._dirty_summary

    def add_op_summary(self, op: str, phase: str, user_frame: int | None,
                       module_path: str | None, time_ns: int) -> None:
        key = (op, phase, user_frame, module_path or "")
        with self._lock:
            agg = self._op_summary.get(key)
            if agg is None:
                self._op_summary[key] = [1, time_ns, time_ns]
            else:
                agg[0] += 1
                agg[1] += time_ns
                if time_ns > agg[2]:
                    agg[2] = time_ns
            self._dirty_summary.add(key)

    def put_graph(self, graph_id: int, **fields: Any) -> None:
        """Create or update a graph row (graphs are few; kept in memory).
        ``fields``: of `GraphRow` (another name raises ValueError)."""
        with self._lock:
            row = self._graphs.get(graph_id) or GraphRow(id=graph_id)
            self._graphs[graph_id] = row._replace(**fields)
            self._dirty_graphs.add(graph_id)
        self.maybe_flush()

    def diagnostic(self, key: str, *, kind: str, severity: str, message: str,
                   reason: str | None = None, hint: str | None = None,
                   user_frame: int | None = None, stack: int | None = None,
                   graph_id: int | None = None, node: str | None = None,
                   op: str | None = None, compile_id: str | None = None,
                   detail: Detail | dict | None = None) -> None:
        """Record a finding; a repeat of the same key only counts up.
        ``detail``: the kind's record (details.py); a dict is stored as it
        is (tests and benchmarks make run files by hand)."""
        if kind not in DIAGNOSTIC_KINDS:
            raise ValueError(kind)
        detail = _detail_json(kind, detail)
        with self._lock:
            row = self._diags.get(key)
            if row is None:
                # DiagnosticRow's fields; compile_ids a list and detail an object until written
                row = {"id": len(self._diags) + 1, "key": key, "kind": kind,
                       "severity": severity, "message": message, "reason": reason,
                       "hint": hint, "user_frame": user_frame, "stack": stack,
                       "graph_id": graph_id, "node": node, "op": op, "count": 0,
                       "compile_ids": [], "detail": detail}
                self._diags[key] = row
            row["count"] += 1
            if compile_id is not None and compile_id not in row["compile_ids"]:
                row["compile_ids"].append(compile_id)
            self._dirty_diags.add(key)
        self.maybe_flush()

    def update_diagnostic(self, key: str, **fields: Any) -> None:
        """Change fields of a recorded finding (written at the next flush);
        ``fields``: of `DiagnosticRow`."""
        if not fields.keys() <= _DIAGNOSTIC_FIELDS:
            raise TypeError(f"not a column of diagnostics: {sorted(fields.keys() - _DIAGNOSTIC_FIELDS)}")
        with self._lock:
            row = self._diags.get(key)
            if row is None:
                return
            if "detail" in fields:
                fields["detail"] = _detail_json(row["kind"], fields["detail"])
            row.update(fields)
            self._dirty_diags.add(key)
        self.maybe_flush()

    def set_meta(self, **items: Any) -> None:
        if self.closed:
            return
        with self._lock:
            try:
                self._db.executemany(insert(MetaRow, "INSERT OR REPLACE"),
                                     [MetaRow(key=k, value=dumps(v)) for k, v in items.items()])
            except sqlite3.Error as exc:
                self._fail(exc)

    def _fail(self, exc: sqlite3.Error) -> None:
        """The file cannot be written (disk full or failing, the file removed or
        taken by another process): the program must not notice. What was
        committed stays readable; nothing more is written, and the failure is
        told once."""
        self.failed = f"{type(exc).__name__}: {exc}"
        self.closed = True
        for record in self._rows:
            self._rows[record] = []
        try:
            self._db.close()
        except sqlite3.Error:
            pass
        if self.on_failure is not None:
            self.on_failure(f"cannot write {self.path} ({exc}): the capture stopped there; "
                            f"the program goes on")

    # -- writing -------------------------------------------------------------
    def stale(self, age_s: float) -> bool:
        """Whether the last commit is older than ``age_s`` seconds."""
        return time.monotonic() - self._last_commit >= age_s

    def maybe_flush(self) -> None:
        if self._pending >= self._batch_rows:
            self.flush()
        elif time.monotonic() - self._last_commit >= self._commit_interval:
            hook = self.before_timed_commit
            if hook is not None:
                self._last_commit = time.monotonic()  # the hook's own rows do not recurse
                hook()
            self.flush()

    def flush(self) -> None:
        if self.closed:
            return
        with self._lock:
            if self.closed:   # another thread's flush failed
                return
            try:
                self._commit()
            except sqlite3.Error as exc:
                self._fail(exc)
            self._last_commit = time.monotonic()

    def _commit(self) -> None:
        db = self._db
        db.execute("BEGIN")
        try:
            for record, rows in self._rows.items():
                if rows:
                    db.executemany(_INSERT[record], rows)
                    self._rows[record] = []
            self._pending = 0
            if self._dirty_graphs:
                db.executemany(insert(GraphRow, "INSERT OR REPLACE"),
                               [self._graphs[g] for g in sorted(self._dirty_graphs)])
                self._dirty_graphs.clear()
            if self._dirty_diags:
                rows = []
                for k in self._dirty_diags:
                    d = self._diags[k]
                    rows.append(DiagnosticRow(**{
                        **d, "compile_ids": dumps(d["compile_ids"]),
                        "detail": dumps(d["detail"]) if d["detail"] is not None else None}))
                db.executemany(insert(DiagnosticRow, "INSERT OR REPLACE"), rows)
                self._dirty_diags.clear()
            if self._dirty_summary:
                # user_frame may be NULL, which a primary key never matches
                # (INSERT OR REPLACE would add a second row): delete with IS
                keys = list(self._dirty_summary)
                self._dirty_summary.difference_update(keys)
                db.executemany(
                    "DELETE FROM op_summary WHERE op = ? AND phase = ? AND user_frame IS ? "
                    "AND module_path = ?", keys)
                rows = []
                for k in keys:
                    op, phase, user_frame, module_path = k
                    count, total_ns, max_ns = self._op_summary[k]
                    rows.append(OpSummaryRow(
                        op=op, phase=phase, user_frame=user_frame, module_path=module_path,
                        count=count, total_ns=total_ns, max_ns=max_ns))
                db.executemany(_INSERT[OpSummaryRow], rows)
            self._snapshot_sources(db)
            db.execute("COMMIT")
        except BaseException:
            try:
                db.execute("ROLLBACK")
            except sqlite3.Error:
                pass   # the first error is the one to tell
            raise

    def _snapshot_sources(self, db: sqlite3.Connection) -> None:
        """Copy every user file a frame points into, so the source view works
        after the fact (internal files are skipped: they are large and fixed);
        a notebook cell's from what ``source_of`` gave."""
        for file in self._files - self._snapshotted:
            self._snapshotted.add(file)
            named = self._named.get(file)
            if named is not None:
                text = named[1]
                data = text.encode("utf-8", errors="replace")
            elif self._is_internal(file):
                continue
            else:
                try:
                    with open(file, "rb") as fh:
                        data = fh.read(4 * 1024 * 1024)
                except OSError:
                    continue
                text = data.decode("utf-8", errors="replace")
            db.execute(insert(SourceRow, "INSERT OR REPLACE"),
                       SourceRow(file=file, sha1=hashlib.sha1(data).hexdigest(), text=text))

    def close(self, **final_meta: Any) -> None:
        if self.closed:
            return
        with self._lock:
            self.set_meta(ended_at=time.time(), **final_meta)
            self.flush()
            if not self.closed:
                self.closed = True
                self._db.close()

    def abandon(self) -> None:
        """In a forked child: drop the parent's connection without touching the file."""
        self.closed = True
