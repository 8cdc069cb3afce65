"""The run file on its own: round trip, dedupe, batching, refusal of foreign files."""

import json
import sqlite3

import pytest

from graphdbg.core.errors import GraphdbgError
from graphdbg.runfile.query import Run
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
    w.add("nodes", (1, 0, "x", "placeholder", "x", json.dumps([[2, 3]]), json.dumps(["float32"]),
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
    w.add("ops", (1, "aten.add.Tensor", "forward", "[]", "[]", None, 5, None, None, None, None))
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
            '        ^^^^^^^^^^^^\n  File "/a/layers.py", line 3, in proj\n    return x @ w\n')
    frames = parse_traceback(text)
    assert [(f.file, f.line, f.function, c) for f, c in frames] == [
        ("/a/model.py", 12, "forward", "x = self.proj(x)"),
        ("/a/layers.py", 3, "proj", "return x @ w")]
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
