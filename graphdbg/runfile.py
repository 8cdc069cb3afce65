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
from typing import Any, Iterable, Iterator

from .errors import GraphdbgError
from .sourcemap import Frame, code_line, is_internal

FORMAT = "graphdbg-run"
SCHEMA_VERSION = 1

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
}
GRAPH_COLUMNS = ("id", "compile_id", "backend", "code_name", "code_file",
                 "code_line", "user_frame", "stack", "n_nodes", "n_ops",
                 "n_inputs", "backend_time_s", "compile_time_s", "status",
                 "error", "graph_code", "created_seq")
DIAG_COLUMNS = ("id", "key", "kind", "severity", "message", "reason", "hint",
                "user_frame", "stack", "graph_id", "node", "op", "count",
                "compile_ids", "detail")

DIAGNOSTIC_KINDS = ("graph_break", "recompile", "compile_error",
                    "malformed_graph", "divergence", "nan_inf", "runtime_error")
SEVERITIES = ("error", "warning", "info")


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), default=str)


class RunWriter:
    """Buffers rows and writes them in batches. Thread-safe (backward may run
    on autograd worker threads)."""

    def __init__(self, path: str, *, commit_interval: float = 1.0,
                 batch_rows: int = 5000) -> None:
        self.path = os.path.abspath(path)
        if os.path.exists(self.path):
            os.remove(self.path)
        self._db = sqlite3.connect(self.path, check_same_thread=False,
                                   isolation_level=None)
        self._db.execute("PRAGMA journal_mode=DELETE")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(SCHEMA)
        self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        self._lock = threading.RLock()
        self._rows: dict[str, list[tuple]] = {t: [] for t in COLUMNS}
        self._pending = 0
        self._frames: dict[tuple, int] = {}
        self._new_frames: list[tuple] = []
        self._stacks: dict[tuple, int] = {}
        self._new_stacks: list[tuple] = []
        self._graphs: dict[int, dict] = {}
        self._dirty_graphs: set[int] = set()
        self._diags: dict[str, dict] = {}
        self._dirty_diags: set[str] = set()
        self._op_summary: dict[tuple, list[int]] = {}
        self._summary_dirty = False
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
                    self._new_stacks.append((sid, dumps(list(ids))))
        return sid

    def frame(self, fid: int) -> dict | None:
        """file, line, function and code of an interned frame (a scan)."""
        key = next((k for k, v in self._frames.items() if v == fid), None)
        if key is None:
            return None
        return {"file": key[0], "line": key[1], "function": key[2], "code": code_line(key[0], key[1])}

    def stack_frames(self, sid: int) -> list[tuple[str, int, str]]:
        """The frames of an interned stack, outermost first (rarely used: a scan)."""
        ids = next((k for k, v in self._stacks.items() if v == sid), ())
        by_id = {v: k for k, v in self._frames.items()}
        return [by_id[i] for i in ids if i in by_id]

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
            self._summary_dirty = True

    def put_graph(self, graph_id: int, **fields: Any) -> None:
        """Create or update a graph row (graphs are few; kept in memory)."""
        with self._lock:
            row = self._graphs.setdefault(graph_id, {"id": graph_id})
            row.update(fields)
            self._dirty_graphs.add(graph_id)
        self.maybe_flush()

    def graph(self, graph_id: int) -> dict:
        return self._graphs[graph_id]

    def graphs_for_compile(self, compile_id: str) -> list[dict]:
        return [g for g in self._graphs.values() if g.get("compile_id") == compile_id]

    def diagnostic(self, key: str, *, kind: str, severity: str, message: str,
                   reason: str | None = None, hint: str | None = None,
                   user_frame: int | None = None, stack: int | None = None,
                   graph_id: int | None = None, node: str | None = None,
                   op: str | None = None, compile_id: str | None = None,
                   detail: Any = None) -> dict:
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
        return row

    def diagnostic_row(self, key: str) -> dict | None:
        with self._lock:
            row = self._diags.get(key)
            return dict(row) if row is not None else None

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
                if self._summary_dirty:
                    db.executemany(
                        "INSERT OR REPLACE INTO op_summary VALUES (?,?,?,?,?,?,?)",
                        [(*k, *v) for k, v in self._op_summary.items()])
                    self._summary_dirty = False
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


class RunReader:
    """Read-only access to a run file. Raises GraphdbgError for anything that is
    not a readable graphdbg run (missing, foreign, corrupt, too new)."""

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
        try:
            self._db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            self._db.row_factory = sqlite3.Row
            rows = dict(self._db.execute("SELECT key, value FROM meta").fetchall())
        except sqlite3.DatabaseError as exc:
            raise GraphdbgError(f"{path} is not a readable graphdbg run file ({exc})") from None
        self.meta = {k: json.loads(v) for k, v in rows.items()}
        if self.meta.get("format") != FORMAT:
            raise GraphdbgError(f"{path} is not a graphdbg run file")
        version = self.meta.get("schema_version")
        if not isinstance(version, int) or version > SCHEMA_VERSION:
            raise GraphdbgError(
                f"{path} has run-file schema {version}; this graphdbg reads up to {SCHEMA_VERSION}")
        self._frames: dict[int, dict] | None = None

    def query(self, sql: str, args: tuple = ()) -> list[sqlite3.Row]:
        try:
            return self._db.execute(sql, args).fetchall()
        except sqlite3.DatabaseError as exc:
            raise GraphdbgError(f"{self.path} is damaged ({exc})") from None

    def iter_query(self, sql: str, args: tuple = ()) -> Iterator[sqlite3.Row]:
        try:
            yield from self._db.execute(sql, args)
        except sqlite3.DatabaseError as exc:
            raise GraphdbgError(f"{self.path} is damaged ({exc})") from None

    def frame(self, frame_id: int | None) -> dict | None:
        if frame_id is None:
            return None
        if self._frames is None:
            self._frames = {r["id"]: dict(r) for r in self.query("SELECT * FROM frames")}
        return self._frames.get(frame_id)

    def stack(self, stack_id: int | None) -> list[dict]:
        if stack_id is None:
            return []
        rows = self.query("SELECT frames FROM stacks WHERE id=?", (stack_id,))
        if not rows:
            return []
        return [f for f in (self.frame(i) for i in json.loads(rows[0]["frames"])) if f]

    def graphs(self) -> list[dict]:
        return [dict(r) for r in self.query("SELECT * FROM graphs ORDER BY id")]

    def nodes(self, graph_id: int) -> list[dict]:
        out = []
        for r in self.query("SELECT * FROM nodes WHERE graph_id=? ORDER BY idx", (graph_id,)):
            d = dict(r)
            for k in ("shapes", "dtypes"):
                d[k] = json.loads(d[k]) if d[k] else None
            out.append(d)
        return out

    def diagnostics(self) -> list[dict]:
        out = []
        for r in self.query("SELECT * FROM diagnostics ORDER BY id"):
            d = dict(r)
            d["compile_ids"] = json.loads(d["compile_ids"] or "[]")
            d["detail"] = json.loads(d["detail"]) if d["detail"] else None
            out.append(d)
        return out

    def source(self, file: str) -> str | None:
        rows = self.query("SELECT text FROM sources WHERE file=?", (file,))
        return rows[0]["text"] if rows else None

    def count(self, table: str) -> int:
        return self.query(f"SELECT COUNT(*) AS n FROM {table}")[0]["n"]
