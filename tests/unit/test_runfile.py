"""The run file on its own: round trip, dedupe, batching, refusal of foreign files."""

import json
import sqlite3

import pytest

from graphdbg.core.errors import GraphdbgError
from graphdbg.runfile.query import Run
from graphdbg.runfile.records import RECORDS, GraphRow, NodeRow, OpRow, TensorRow
from graphdbg.runfile.schema import SCHEMA
from graphdbg.runfile.writer import SCHEMA_VERSION, RunWriter
from graphdbg.core.sourcemap import Frame, original_function, parse_traceback


def test_round_trip_frames_stacks_and_diagnostics(tmp_path):
    src = tmp_path / "user.py"
    src.write_text("a = 1\nb = a + 1\nraise SystemExit\n")
    w = RunWriter(str(tmp_path / "x.run"))
    stack = w.stack_id([Frame(str(src), 1, "<module>"), Frame(str(src), 2, "f")])
    assert w.stack_id([Frame(str(src), 1, "<module>"), Frame(str(src), 2, "f")]) == stack
    fid = w.frame_id(str(src), 2, "f")
    for cid in ("0/0", "0/1", "0/1"):
        w.diagnostic("k1", kind="graph_break", severity="warning", message="m",
                     user_frame=fid, stack=stack, compile_id=cid)
    w.put_graph(1, compile_id="0/0", backend="eager", n_nodes=3, status="compiled")
    w.add(NodeRow(1, 0, "x", "placeholder", "x", json.dumps([[2, 3]]), json.dumps(["float32"]),
                  fid, stack, None, None, ""))
    w.close(exit_status=0, status="complete")

    with Run(str(tmp_path / "x.run")) as r:
        assert r.meta["schema_version"] == SCHEMA_VERSION and r.info.status == "complete"
        (d,) = r.findings()
        assert d.count == 3 and d.compile_ids == ("0/0", "0/1")
        assert d.code == "b = a + 1"
        assert [f.line for f in d.stack] == [1, 2]
        assert r.source(str(src)).startswith("a = 1")
        assert r.nodes(1)[0].shapes == [[2, 3]]


def test_rows_are_committed_before_close(tmp_path):
    w = RunWriter(str(tmp_path / "x.run"), commit_interval=0.0)
    w.add(OpRow(1, "aten.add.Tensor", "forward", "[]", "[]", None, 5, None, None, None, None))
    # another connection sees the row although the writer was never closed
    db = sqlite3.connect(tmp_path / "x.run")
    assert db.execute("SELECT op FROM ops").fetchall() == [("aten.add.Tensor",)]
    assert json.loads(db.execute("SELECT value FROM meta WHERE key='status'").fetchone()[0]) == "running"


def test_reader_refuses_newer_schema(tmp_path):
    w = RunWriter(str(tmp_path / "x.run"))
    w.set_meta(schema_version=SCHEMA_VERSION + 1)
    w.close()
    with pytest.raises(GraphdbgError, match="schema"):
        Run(str(tmp_path / "x.run"))


def test_reader_refuses_sqlite_without_meta(tmp_path):
    db = sqlite3.connect(tmp_path / "y.run")
    db.execute("CREATE TABLE meta (key TEXT, value TEXT)")
    db.execute("INSERT INTO meta VALUES ('format', '\"something-else\"')")
    db.commit()
    with pytest.raises(GraphdbgError, match="not a graphdbg run file"):
        Run(str(tmp_path / "y.run"))


def test_parse_traceback_and_resume_names():
    text = ('  File "/a/model.py", line 12, in forward\n    x = self.proj(x)\n'
            '        ^^^^^^^^^^^^\n  File "/a/layers.py", line 3, in proj\n    return x @ w\n'
            '  File "/a/layers.py", line 9, in g\n    return a + b  # sum\n'
            '           ~~^~~\n  File "/a/wide.py", line 1, in h\n    y = "日本" + f(x)\n'
            '                 ^^^^\n')
    frames = parse_traceback(text)
    assert [(f.file, f.line, f.function, c) for f, c in frames] == [
        ("/a/model.py", 12, "forward", "x = self.proj(x)"),
        ("/a/layers.py", 3, "proj", "return x @ w"),
        ("/a/layers.py", 9, "g", "return a + b  # sum"),
        ("/a/wide.py", 1, "h", 'y = "日本" + f(x)')]
    # the caret lines are the spans: under code[col:end_col]; none, the whole line
    assert [c[f.col:f.end_col] if f.col is not None else None for f, c in frames] == [
        "self.proj(x)", None, "a + b", "f(x)"]
    assert original_function("torch_dynamo_resume_in_forward_at_19") == ("forward", 19)
    assert original_function("forward") == ("forward", None)


def test_op_summary_is_one_row_per_group_across_flushes(tmp_path):
    # backward ops without a forward line have no user frame (NULL in the key)
    w = RunWriter(str(tmp_path / "x.run"))
    for i in range(3):
        w.add_op_summary("aten.detach.default", "backward", None, None, 10)
        w.add_op_summary("aten.mm.default", "forward", 1, "net.fc", 5)
        w.flush()
    w.close()
    db = sqlite3.connect(tmp_path / "x.run")
    rows = db.execute("SELECT op, user_frame, count, total_ns FROM op_summary ORDER BY op").fetchall()
    assert rows == [("aten.detach.default", None, 3, 30), ("aten.mm.default", 1, 3, 15)]


# Schema 2 as graphdbg wrote it before its tables were generated from
# graphdbg/runfile/records.py: files of schema 2 are read by readers of either
# time, so the records must make these tables column for column (else bump
# SCHEMA_VERSION and keep the reader reading this one).
SCHEMA_2 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE sources (file TEXT PRIMARY KEY, sha1 TEXT, text TEXT);
CREATE TABLE frames (id INTEGER PRIMARY KEY, file TEXT, line INTEGER, function TEXT, code TEXT,
    internal INTEGER);
CREATE TABLE stacks (id INTEGER PRIMARY KEY, frames TEXT);
CREATE TABLE graphs (id INTEGER PRIMARY KEY, compile_id TEXT, backend TEXT, code_name TEXT,
    code_file TEXT, code_line INTEGER, user_frame INTEGER, stack INTEGER, n_nodes INTEGER,
    n_ops INTEGER, n_inputs INTEGER, backend_time_s REAL, compile_time_s REAL, status TEXT,
    error TEXT, graph_code TEXT, created_seq INTEGER);
CREATE TABLE nodes (graph_id INTEGER, idx INTEGER, name TEXT, op TEXT, target TEXT, shapes TEXT,
    dtypes TEXT, user_frame INTEGER, stack INTEGER, module_path TEXT, module_class TEXT, args TEXT,
    PRIMARY KEY (graph_id, idx));
CREATE TABLE calls (seq INTEGER PRIMARY KEY, graph_id INTEGER, call_idx INTEGER, wall_ns INTEGER,
    outputs TEXT);
CREATE TABLE ops (seq INTEGER PRIMARY KEY, op TEXT, phase TEXT, shapes TEXT, dtypes TEXT,
    stats TEXT, time_ns INTEGER, user_frame INTEGER, stack INTEGER, module_path TEXT,
    module_class TEXT);
CREATE TABLE op_summary (op TEXT, phase TEXT, user_frame INTEGER, module_path TEXT,
    count INTEGER, total_ns INTEGER, max_ns INTEGER, PRIMARY KEY (op, phase, user_frame, module_path));
CREATE TABLE diagnostics (id INTEGER PRIMARY KEY, key TEXT UNIQUE, kind TEXT, severity TEXT,
    message TEXT, reason TEXT, hint TEXT, user_frame INTEGER, stack INTEGER, graph_id INTEGER,
    node TEXT, op TEXT, count INTEGER, compile_ids TEXT, detail TEXT);
CREATE TABLE events (seq INTEGER PRIMARY KEY, t REAL, name TEXT, compile_id TEXT, metadata TEXT,
    payload TEXT);
CREATE TABLE node_times (graph_id INTEGER, node TEXT, eager_ns INTEGER,
    PRIMARY KEY (graph_id, node));
CREATE TABLE tensors (id INTEGER PRIMARY KEY, owner TEXT, name TEXT, safetensors BLOB);
CREATE TABLE node_values (graph_id INTEGER, call_idx INTEGER, node TEXT, status TEXT, kind TEXT,
    compiled_from TEXT, max_abs REAL, max_rel REAL, eager_vs_fp64 REAL, compiled_vs_fp64 REAL,
    eager_stats TEXT, compiled_stats TEXT, fp64_stats TEXT, PRIMARY KEY (graph_id, call_idx, node));
"""


def _tables(sql: str) -> dict:
    """Each table's columns (name, type, key position) and indexes (unique, columns)."""
    db = sqlite3.connect(":memory:")
    db.executescript(sql)
    return {t: (db.execute(f"PRAGMA table_xinfo({t})").fetchall(),
                [(i[1], i[2], db.execute(f"PRAGMA index_info('{i[1]}')").fetchall())
                 for i in db.execute(f"PRAGMA index_list({t})")])
            for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


# Schema 3 adds the caret's span and a notebook cell's name to frames (at the end).
SCHEMA_3 = SCHEMA_2.replace(
    "code TEXT,\n    internal INTEGER);",
    "code TEXT,\n    internal INTEGER, col INTEGER, end_col INTEGER, cell TEXT);")


def test_the_records_make_schema_3():
    assert SCHEMA_3 != SCHEMA_2
    assert SCHEMA_VERSION == 3 and _tables(SCHEMA) == _tables(SCHEMA_3)
    assert [r.TABLE for r in RECORDS] == list(_tables(SCHEMA_3))  # in the same order


def test_a_schema_2_file_reads_without_spans(tmp_path):
    src = tmp_path / "user.py"
    src.write_text("a = 1\nb = f(a) + 1\n")
    path = tmp_path / "old.run"
    db = sqlite3.connect(path)
    db.executescript(SCHEMA_2)
    db.executemany("INSERT INTO meta VALUES (?, ?)", [
        ("format", json.dumps("graphdbg-run")), ("schema_version", json.dumps(2)),
        ("status", json.dumps("complete"))])
    db.execute("INSERT INTO frames VALUES (1, ?, 2, 'f', 'b = f(a) + 1', 0)", (str(src),))
    db.execute("INSERT INTO stacks VALUES (1, '[1]')")
    db.execute("INSERT INTO diagnostics VALUES (1, 'k', 'graph_break', 'warning', 'm', NULL, "
               "NULL, 1, 1, NULL, NULL, NULL, 1, '[]', NULL)")
    db.execute("INSERT INTO sources VALUES (?, 'x', 'a = 1\nb = f(a) + 1\n')", (str(src),))
    db.commit()
    db.close()
    with Run(str(path)) as r:
        (d,) = r.findings()
        assert (d.line, d.code, d.col, d.end_col, d.cell) == (2, "b = f(a) + 1", None, None, None)
        assert [(f.line, f.col, f.cell) for f in d.stack] == [(2, None, None)]
        assert r.cell_names() == {}


def test_frames_are_interned_with_their_span(tmp_path):
    src = tmp_path / "user.py"
    src.write_text("def f(x):\n    return (x @ x).relu() * 2  # two ops\n")
    w = RunWriter(str(tmp_path / "x.run"))
    whole = w.frame_id(str(src), 2, "f")
    mm = w.frame_id(str(src), 2, "f", 8, 13)
    assert w.frame_id(*Frame(str(src), 2, "f", 8, 13)) == mm != whole
    assert w.frame_id(str(src), 2, "f", 7, 25) not in (mm, whole)
    # a span over the whole line's code (its comment aside) is the whole line
    assert w.frame_id(str(src), 2, "f", 0, 29) == whole
    assert w.frame(mm)["col"] == 8 and w.stack_frames(w.stack_id([Frame(str(src), 2, "f", 8, 13)])) \
        == [(str(src), 2, "f", 8, 13)]
    with pytest.raises(TypeError, match="code="):
        w.frame_id(str(src), 2, "f", "return x")
    w.diagnostic("k", kind="divergence", severity="error", message="m", user_frame=mm,
                 stack=w.stack_id([Frame(str(src), 2, "f", 8, 13)]))
    w.close()
    with Run(str(tmp_path / "x.run")) as r:
        (d,) = r.findings()
        assert d.code[d.col:d.end_col] == "x @ x" and d.stack[-1].col == 8
        assert r.count("frames") == 3


def test_add_takes_row_records_only(tmp_path):
    w = RunWriter(str(tmp_path / "x.run"))
    w.add(TensorRow(id=None, owner="op:1", name="0", safetensors=b"a"))
    w.add(TensorRow(id=None, owner="op:2", name="0", safetensors=b"b"))
    for wrong in (("op:1", "0", b"a"), GraphRow(id=1)):
        with pytest.raises(TypeError, match="RunWriter.add takes"):
            w.add(wrong)
    with pytest.raises(ValueError):
        w.put_graph(1, no_such_column=1)
    w.close()
    with Run(str(tmp_path / "x.run")) as r:
        assert [(t.id, t.owner) for t in r.tensors()] == [(1, "op:1"), (2, "op:2")]  # numbered
