"""The core of `Run` (query.py): opening and checking a run file, its meta
(`RunInfo`), one read-only SQLite connection per thread, the raw query
helpers every part of `Run` reads through (`_rows`, `_batches`, `_iter`),
frames and stacks (cached), notebook cells and source snapshots.

The other parts of `Run` are mixins that read through these helpers:
query_graphs.py (graphs, nodes, node values, calls, kept tensors),
query_findings.py (findings) and query_time.py (where the time goes).

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
from typing import Any, Iterable, Iterator

from ..core.errors import GraphdbgError
from .readrecords import NO_FRAME, Frame, RunInfo
from .records import FrameRow, StackRow
from .schema import FORMAT, SCHEMA_VERSION, select

_CHUNK = 500  # ids per `IN (...)`: well under SQLite's variable limit
# columns a later schema added to a table: the version that added each (older
# files are read with NULL there)
_ADDED = {"frames": {"col": 3, "end_col": 3, "cell": 3}}
_FRAME_CACHE_MAX = 100_000


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


class RunCore:
    """The core of `Run`: opening, connections, queries, frames, stacks, sources."""

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
            rank=_rank(m), position=m.get("position"), compiled_before=m.get("compiled_before"))

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

    # -- sources ----------------------------------------------------------------------
    def source(self, file: str) -> str | None:
        """The snapshot of a user file taken during the run."""
        rows = self._rows("SELECT text FROM sources WHERE file = ?", (file,))
        return rows[0]["text"] if rows else None

    def source_files(self) -> list[str]:
        return [r["file"] for r in self._rows("SELECT file FROM sources ORDER BY file")]
