"""The run file: one SQLite database per run, written by the hooks, read by
everything else.

Design points:
- schema versioned (`meta.schema_version` and `PRAGMA user_version`), tagged
  with `meta.format = "graphdbg-run"` so foreign files are refused cleanly;
- frames (file, line, function, code) and stacks (lists of frame ids) are
  stored once and referred to by id;
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
from typing import Any, Iterable

from .schema import FORMAT, SCHEMA_VERSION  # shared with the reader
from ..core.sourcemap import Frame, code_line, is_internal

SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE sources (file TEXT PRIMARY KEY, sha1 TEXT, text TEXT);
CREATE TABLE frames (
    id INTEGER PRIMARY KEY, file TEXT, line INTEGER, function TEXT, code TEXT,
    internal INTEGER);
CREATE TABLE stacks (id INTEGER PRIMARY KEY, frames TEXT);
CREATE TABLE graphs (
    id INTEGER PRIMARY KEY, compile_id TEXT, backend TEXT,
    code_name TEXT, code_file TEXT, code_line INTEGER,
    user_frame INTEGER, stack INTEGER,
    n_nodes INTEGER, n_ops INTEGER, n_inputs INTEGER,
    backend_time_s REAL, compile_time_s REAL, status TEXT, error TEXT,
    graph_code TEXT, created_seq INTEGER);
CREATE TABLE nodes (
    graph_id INTEGER, idx INTEGER, name TEXT, op TEXT, target TEXT,
    shapes TEXT, dtypes TEXT, user_frame INTEGER, stack INTEGER,
    module_path TEXT, module_class TEXT, args TEXT,
    PRIMARY KEY (graph_id, idx));
CREATE TABLE calls (
    seq INTEGER PRIMARY KEY, graph_id INTEGER, call_idx INTEGER,
    wall_ns INTEGER, outputs TEXT);
CREATE TABLE ops (
    seq INTEGER PRIMARY KEY, op TEXT, phase TEXT, shapes TEXT, dtypes TEXT,
    stats TEXT, time_ns INTEGER, user_frame INTEGER, stack INTEGER,
    module_path TEXT, module_class TEXT);
CREATE TABLE op_summary (
    op TEXT, phase TEXT, user_frame INTEGER, module_path TEXT,
    count INTEGER, total_ns INTEGER, max_ns INTEGER,
    PRIMARY KEY (op, phase, user_frame, module_path));
CREATE TABLE diagnostics (
    id INTEGER PRIMARY KEY, key TEXT UNIQUE, kind TEXT, severity TEXT,
    message TEXT, reason TEXT, hint TEXT, user_frame INTEGER, stack INTEGER,
    graph_id INTEGER, node TEXT, op TEXT, count INTEGER, compile_ids TEXT,
    detail TEXT);
CREATE TABLE events (
    seq INTEGER PRIMARY KEY, t REAL, name TEXT, compile_id TEXT,
    metadata TEXT, payload TEXT);
CREATE TABLE node_times (graph_id INTEGER, node TEXT, eager_ns INTEGER,
    PRIMARY KEY (graph_id, node));
CREATE TABLE tensors (
    id INTEGER PRIMARY KEY, owner TEXT, name TEXT, safetensors BLOB);
CREATE TABLE node_values (
    graph_id INTEGER, call_idx INTEGER, node TEXT, status TEXT, kind TEXT,
    compiled_from TEXT, max_abs REAL, max_rel REAL, eager_vs_fp64 REAL,
    compiled_vs_fp64 REAL, eager_stats TEXT, compiled_stats TEXT, fp64_stats TEXT,
    PRIMARY KEY (graph_id, call_idx, node));
"""

# Columns per table, in insert order (the schema is the single source).
COLUMNS = {
    "nodes": ("graph_id", "idx", "name", "op", "target", "shapes", "dtypes",
              "user_frame", "stack", "module_path", "module_class", "args"),
    "calls": ("seq", "graph_id", "call_idx", "wall_ns", "outputs"),
    "ops": ("seq", "op", "phase", "shapes", "dtypes", "stats", "time_ns",
            "user_frame", "stack", "module_path", "module_class"),
    "events": ("seq", "t", "name", "compile_id", "metadata", "payload"),
    "tensors": ("owner", "name", "safetensors"),
    "node_times": ("graph_id", "node", "eager_ns"),
    "node_values": ("graph_id", "call_idx", "node", "status", "kind", "compiled_from",
                    "max_abs", "max_rel", "eager_vs_fp64", "compiled_vs_fp64",
                    "eager_stats", "compiled_stats", "fp64_stats"),
}
GRAPH_COLUMNS = ("id", "compile_id", "backend", "code_name", "code_file",
                 "code_line", "user_frame", "stack", "n_nodes", "n_ops",
                 "n_inputs", "backend_time_s", "compile_time_s", "status",
                 "error", "graph_code", "created_seq")
DIAG_COLUMNS = ("id", "key", "kind", "severity", "message", "reason", "hint",
                "user_frame", "stack", "graph_id", "node", "op", "count",
                "compile_ids", "detail")

DIAGNOSTIC_KINDS = ("graph_break", "recompile", "compile_error",
                    "malformed_graph", "divergence", "nan_inf", "runtime_error", "check_skipped")


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), default=str)


class RunWriter:
    """Buffers rows and writes them in batches. Thread-safe (backward may run
    on autograd worker threads)."""

    def __init__(self, path: str, *, commit_interval: float = 1.0,
                 batch_rows: int = 5000, durable: bool = True) -> None:
        """``durable=False``: no fsync and the rollback journal in memory, for
        runs that are most often deleted (the pytest plugin's, one per test):
        the fsyncs were most of a short run's cost. A machine's crash can lose
        such a file, and so can the program's dying in the middle of a commit."""
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
        self._rows: dict[str, list[tuple]] = {t: [] for t in COLUMNS}
        self._pending = 0
        self._frames: dict[tuple, int] = {}
        self._frame_keys: list[tuple] = []     # by id - 1
        self._new_frames: list[tuple] = []
        self._stacks: dict[tuple, int] = {}
        self._stack_keys: list[tuple] = []     # by id - 1
        self._new_stacks: list[tuple] = []
        self._graphs: dict[int, dict] = {}
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
        self.closed = False
        self.set_meta(format=FORMAT, schema_version=SCHEMA_VERSION,
                      status="running", started_at=time.time())
        self.flush()

    # -- interning -------------------------------------------------------
    def frame_id(self, file: str, line: int, function: str, code: str | None = None) -> int:
        if not file.startswith("<") and not os.path.isabs(file):
            file = os.path.abspath(file)  # Dynamo keeps co_filename as given on the command line
        key = (file, line, function)
        fid = self._frames.get(key)
        if fid is None:
            with self._lock:
                fid = self._frames.get(key)
                if fid is None:
                    fid = len(self._frames) + 1
                    self._frames[key] = fid
                    self._frame_keys.append(key)
                    if code is None:
                        code = code_line(file, line)
                    self._new_frames.append(
                        (fid, file, line, function, code, int(is_internal(file))))
                    self._files.add(file)
        return fid

    def stack_id(self, frames: Iterable[Frame | tuple], codes: Iterable[str] | None = None) -> int | None:
        """Intern a stack given outermost first; returns its id (None if empty)."""
        codes = list(codes) if codes is not None else None
        ids = tuple(
            self.frame_id(f[0], f[1], f[2], codes[i] if codes else None)
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
                    self._new_stacks.append((sid, dumps(list(ids))))
        return sid

    def frame(self, fid: int) -> dict | None:
        """file, line, function and code of an interned frame."""
        if not 0 < fid <= len(self._frame_keys):
            return None
        file, line, function = self._frame_keys[fid - 1]
        return {"file": file, "line": line, "function": function, "code": code_line(file, line)}

    def stack_frames(self, sid: int) -> list[tuple[str, int, str]]:
        """The frames of an interned stack, outermost first."""
        if not 0 < sid <= len(self._stack_keys):
            return []
        return [self._frame_keys[i - 1] for i in self._stack_keys[sid - 1]]

    # -- rows ------------------------------------------------------------
    def add(self, table: str, row: tuple) -> None:
        with self._lock:
            self._rows[table].append(row)
            self._pending += 1
        self.maybe_flush()

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
        """Create or update a graph row (graphs are few; kept in memory)."""
        with self._lock:
            row = self._graphs.setdefault(graph_id, {"id": graph_id})
            row.update(fields)
            self._dirty_graphs.add(graph_id)
        self.maybe_flush()

    def diagnostic(self, key: str, *, kind: str, severity: str, message: str,
                   reason: str | None = None, hint: str | None = None,
                   user_frame: int | None = None, stack: int | None = None,
                   graph_id: int | None = None, node: str | None = None,
                   op: str | None = None, compile_id: str | None = None,
                   detail: Any = None) -> None:
        """Record a finding; a repeat of the same key only counts up."""
        if kind not in DIAGNOSTIC_KINDS:
            raise ValueError(kind)
        with self._lock:
            row = self._diags.get(key)
            if row is None:
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
        """Change fields of a recorded finding (written at the next flush)."""
        with self._lock:
            row = self._diags.get(key)
            if row is None:
                return
            row.update(fields)
            self._dirty_diags.add(key)
        self.maybe_flush()

    def set_meta(self, **items: Any) -> None:
        with self._lock:
            self._db.executemany(
                "INSERT OR REPLACE INTO meta VALUES (?, ?)",
                [(k, dumps(v)) for k, v in items.items()])

    # -- writing -------------------------------------------------------------
    def maybe_flush(self) -> None:
        if (self._pending >= self._batch_rows
                or time.monotonic() - self._last_commit >= self._commit_interval):
            self.flush()

    def flush(self) -> None:
        if self.closed:
            return
        with self._lock:
            db = self._db
            db.execute("BEGIN")
            try:
                if self._new_frames:
                    db.executemany("INSERT INTO frames VALUES (?,?,?,?,?,?)", self._new_frames)
                    self._new_frames = []
                if self._new_stacks:
                    db.executemany("INSERT INTO stacks VALUES (?,?)", self._new_stacks)
                    self._new_stacks = []
                for table, rows in self._rows.items():
                    if rows:
                        cols = COLUMNS[table]
                        db.executemany(
                            f"INSERT INTO {table} ({','.join(cols)}) VALUES "
                            f"({','.join('?' * len(cols))})", rows)
                        self._rows[table] = []
                self._pending = 0
                if self._dirty_graphs:
                    db.executemany(
                        f"INSERT OR REPLACE INTO graphs VALUES ({','.join('?' * len(GRAPH_COLUMNS))})",
                        [tuple(self._graphs[g].get(c) for c in GRAPH_COLUMNS)
                         for g in sorted(self._dirty_graphs)])
                    self._dirty_graphs.clear()
                if self._dirty_diags:
                    rows = []
                    for k in self._dirty_diags:
                        d = dict(self._diags[k])
                        d["compile_ids"] = dumps(d["compile_ids"])
                        d["detail"] = dumps(d["detail"]) if d["detail"] is not None else None
                        rows.append(tuple(d.get(c) for c in DIAG_COLUMNS))
                    db.executemany(
                        f"INSERT OR REPLACE INTO diagnostics VALUES ({','.join('?' * len(DIAG_COLUMNS))})",
                        rows)
                    self._dirty_diags.clear()
                if self._dirty_summary:
                    # user_frame may be NULL, which a primary key never matches
                    # (INSERT OR REPLACE would add a second row): delete with IS
                    keys = list(self._dirty_summary)
                    db.executemany(
                        "DELETE FROM op_summary WHERE op = ? AND phase = ? AND user_frame IS ? "
                        "AND module_path = ?", keys)
                    db.executemany("INSERT INTO op_summary VALUES (?,?,?,?,?,?,?)",
                                   [(*k, *self._op_summary[k]) for k in keys])
                    self._dirty_summary.clear()
                self._snapshot_sources(db)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            self._last_commit = time.monotonic()

    def _snapshot_sources(self, db: sqlite3.Connection) -> None:
        """Copy every user file a frame points into, so the source view works
        after the fact (internal files are skipped: they are large and fixed)."""
        for file in self._files - self._snapshotted:
            self._snapshotted.add(file)
            if is_internal(file):
                continue
            try:
                with open(file, "rb") as fh:
                    data = fh.read(4 * 1024 * 1024)
            except OSError:
                continue
            text = data.decode("utf-8", errors="replace")
            db.execute("INSERT OR REPLACE INTO sources VALUES (?,?,?)",
                       (file, hashlib.sha1(data).hexdigest(), text))

    def close(self, **final_meta: Any) -> None:
        if self.closed:
            return
        with self._lock:
            self.set_meta(ended_at=time.time(), **final_meta)
            self.flush()
            self.closed = True
            self._db.close()

    def abandon(self) -> None:
        """In a forked child: drop the parent's connection without touching the file."""
        self.closed = True
