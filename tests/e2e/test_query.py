"""graphdbg.runfile.query on a small run written with RunWriter (no torch): every
record below is known exactly."""

import json
import os
import re
import sqlite3
import threading

import pytest
from conftest import SUPPORT, group

from graphdbg.core.errors import GraphdbgError
from graphdbg.runfile.details import RuntimeErrorDetail
from graphdbg.runfile.query import Frame, Run, open_run
from graphdbg.runfile.records import CallRow, EventRow, NodeRow, NodeTimeRow, OpRow, TensorRow
from graphdbg.runfile.writer import SCHEMA_VERSION, RunWriter

SOURCE = """\
def f(x):
    y = x + 1
    z = y * 2  # scale
    return z

f(1)
"""


@pytest.fixture
def run_file(tmp_path):
    src = tmp_path / "user.py"
    src.write_text(SOURCE)
    s = str(src)
    w = RunWriter(str(tmp_path / "x.run"))
    w.set_meta(argv=["user.py", "--n", "1"], cwd=str(tmp_path), module=False, values="stats",
               torch="2.13.0", stance="force_eager", counts={"recompiles": 1})
    add, mul, ret = w.frame_id(s, 2, "f"), w.frame_id(s, 3, "f"), w.frame_id(s, 4, "f")
    stack = w.stack_id([(s, 6, "<module>"), (s, 3, "f")])
    w.put_graph(1, compile_id="0/0", backend="eager", code_name="f", code_file=s, code_line=1,
                n_nodes=5, status="compiled", graph_code="def forward(x): ...")
    w.put_graph(2, compile_id="1/0", backend="eager", code_name="g", code_file=s, code_line=6,
                n_nodes=1, status="compiled")
    for idx, (name, op, frame) in enumerate([("x", "placeholder", None), ("add", "call_function", add),
                                             ("mul", "call_function", mul), ("lin", "call_module", mul),
                                             ("output", "output", None)]):
        w.add(NodeRow(1, idx, name, op, name, json.dumps([[2, idx]]), json.dumps(["float32"]),
                      frame, stack if frame else None, "m.lin" if name == "lin" else None, None, ""))
    w.add(NodeRow(2, 0, "y", "placeholder", "y", None, None, None, None, None, None, ""))
    for name, ns in (("x", 999), ("add", 300), ("mul", 100), ("lin", 200)):
        w.add(NodeTimeRow(1, name, ns))
    w.add(CallRow(1, 1, 0, 1000, json.dumps([{"shape": [2], "dtype": "float32", "stats": None}])))
    w.add(CallRow(7, 1, 1, 3000, "[]"))
    for seq, op, phase, frame, ns in ((2, "aten.add.Tensor", "forward", add, 10),
                                      (3, "aten.mul.Tensor", "forward", mul, 20),
                                      (4, "aten.mul.Tensor", "backward", mul, 45),
                                      (5, "aten.sum.default", "forward", None, 5),
                                      (6, "aten.add.Tensor", "forward", add, 30)):
        w.add(OpRow(seq, op, phase, json.dumps([[2]]), '["float32"]', None, ns, frame, None,
                    None, None))
        w.add_op_summary(op, phase, frame, None, ns)
    w.add_op_summary("aten.mul.Tensor", "forward", mul, None, 1000)  # past --max-ops: summary only
    w.diagnostic("i", kind="graph_break", severity="info", message="note", user_frame=add)
    w.diagnostic("e", kind="runtime_error", severity="error", message="boom", user_frame=mul,
                 stack=stack, detail={"exception": "ValueError"})
    for cid in ("0/0", "0/1"):
        w.diagnostic("w1", kind="recompile", severity="warning", message="guard", user_frame=ret,
                     stack=stack, compile_id=cid)
    w.diagnostic("w2", kind="graph_break", severity="warning", message="break", hint="do x")
    w.add(TensorRow(None, "op:3", "0", b"\x08\x00safetensors-bytes"))
    w.add(TensorRow(None, "call:1", "0", b"other"))
    w.close(exit_status=0, status="complete", wall_s=1.5)
    return tmp_path / "x.run"


def test_run_info_and_graphs_with_call_statistics(run_file):
    with open_run(str(run_file)) as run:
        i = run.info
        assert (i.file, i.argv, i.exit_status, i.status, i.wall_s, i.stance) == (
            str(run_file), ["user.py", "--n", "1"], 0, "complete", 1.5, "force_eager")
        assert i.versions["torch"] == "2.13.0" and i.counts == {"recompiles": 1}
        assert i.internal_errors == [] and i.schema_version == SCHEMA_VERSION
        g1, g2 = run.graphs()
        assert (g1.id, g1.function, g1.line, g1.calls, g1.total_call_ns, g1.min_call_ns,
                g1.max_call_ns, g1.mean_call_ns) == (1, "f", 1, 2, 4000, 1000, 3000, 2000)
        assert (g2.calls, g2.total_call_ns, g2.min_call_ns, g2.mean_call_ns) == (0, 0, None, None)
        assert run.graph(2) == g2 and run.graph(9) is None
        assert run.graph_code(1) == "def forward(x): ..."
        assert [c.wall_ns for c in run.calls(graph_id=1)] == [1000, 3000]
        assert run.calls(offset=1, limit=5)[0].call_idx == 1
        assert [c.seq for c in run.iter_calls()] == [1, 7]
        assert run.calls()[0].outputs == [{"shape": [2], "dtype": "float32", "stats": None}]


def test_nodes_are_paged_in_graph_order(run_file):
    with Run(str(run_file)) as run:
        assert run.node_count(1) == 5
        first = run.nodes(1, offset=0, limit=2)
        assert [n.name for n in first] == ["x", "add"]
        assert [n.name for n in run.nodes(1, offset=2, limit=2)] == ["mul", "lin"]
        assert [n.name for n in run.nodes(1, offset=4, limit=2)] == ["output"]  # last page
        assert run.nodes(1, offset=5, limit=2) == []
        assert [n.idx for n in run.nodes(1)] == [0, 1, 2, 3, 4]
        add = first[1]
        assert (add.file, add.line, add.function, add.code) == (
            str(run_file.parent / "user.py"), 2, "f", "y = x + 1")
        assert (add.eager_ns, add.shapes, add.dtypes) == (300, [[2, 1]], ["float32"])
        assert first[0].file is None and run.nodes(2)[0].eager_ns is None
        assert [(n.graph_id, n.name) for n in run.iter_nodes()][-2:] == [(1, "output"), (2, "y")]


def test_findings_are_ordered_filtered_and_carry_their_stacks(run_file):
    with Run(str(run_file)) as run:
        statements = []
        run._db().set_trace_callback(statements.append)
        found = run.findings()
        # one query for the findings, one for their stacks, one for the frames of both
        # (the stacks' outer frame is no finding's own frame)
        assert len(statements) <= 3, statements
        assert [(d.severity, d.message) for d in found] == [
            ("error", "boom"), ("warning", "guard"), ("warning", "break"), ("info", "note")]
        boom, guard, brk, _ = found
        assert [(f.line, f.function) for f in boom.stack] == [(6, "<module>"), (3, "f")]
        assert boom.stack[-1].code == "z = y * 2  # scale"
        assert (boom.line, boom.code) == (3, "z = y * 2  # scale")
        # the detail typed by kind, and back as stored
        assert boom.detail == RuntimeErrorDetail(exception="ValueError")
        assert boom.detail.as_dict() == {"exception": "ValueError"}
        assert (guard.count, guard.compile_ids, guard.line) == (2, ("0/0", "0/1"), 4)
        assert (brk.file, brk.stack, brk.hint, brk.detail) == (None, (), "do x", None)
        assert [d.message for d in run.findings(kind="graph_break")] == ["break", "note"]
        assert [d.message for d in run.findings(severity=("error", "info"))] == ["boom", "note"]
        assert run.findings(kind="graph_break", severity="error") == []
        counts = run.finding_counts()
        assert (counts["recompile"].sites, counts["recompile"].count) == (1, 2)
        assert (counts["graph_break"].sites, counts["graph_break"].count) == (2, 2)
        assert run.stack(boom.stack_id) == boom.stack and run.stack(None) == ()
        assert run.frame(boom.user_frame) == Frame(boom.file, 3, "f", boom.code, boom.user_frame)


def test_eager_ops_pages_streams_and_summary(run_file):
    with Run(str(run_file)) as run:
        assert [o.seq for o in run.ops(offset=1, limit=2)] == [3, 4]
        assert [o.seq for o in run.ops(offset=4, limit=10)] == [6]
        assert [o.seq for o in run.ops(after_seq=3, limit=2)] == [4, 5]
        assert [o.seq for o in run.iter_ops()] == [2, 3, 4, 5, 6]
        src = str(run_file.parent / "user.py")
        assert [o.seq for o in run.iter_ops(lines={(src, 3)}, phase="forward")] == [3]
        assert list(run.iter_ops(lines={(src, 99)})) == []
        op = run.ops(limit=1)[0]
        assert (op.shapes, op.dtypes, op.stats, op.line) == ([[2]], ["float32"], None, 2)
        assert run.op_groups() == {
            (None, None, "aten.sum.default", "forward"): 1, (src, 2, "aten.add.Tensor", "forward"): 2,
            (src, 3, "aten.mul.Tensor", "backward"): 1, (src, 3, "aten.mul.Tensor", "forward"): 1}
        stats = run.op_stats(limit=2)
        assert [(s.op, s.phase, s.count, s.total_ns, s.max_ns) for s in stats] == [
            ("aten.mul.Tensor", "forward", 2, 1020, 1000), ("aten.mul.Tensor", "backward", 1, 45, 45)]
        assert stats[0].module_path is None and stats[0].line == 3
        assert run.eager_totals() == (6, 1110)
        assert run.count("ops") == 5


def test_ops_of_one_line_count_together_whatever_their_function(tmp_path):
    # two frames of one line (say a lambda's and its caller's): one place for diff
    src = tmp_path / "m.py"
    src.write_text("y = (lambda v: v + 1)(x)\n")
    w = RunWriter(str(tmp_path / "l.run"))
    for seq, fn in ((1, "<module>"), (2, "<lambda>"), (3, "<lambda>")):
        fid = w.frame_id(str(src), 1, fn)
        w.add(OpRow(seq, "aten.add.Tensor", "forward", "[]", "[]", None, 10 * seq, fid, None,
                    None, None))
    w.close()
    with Run(str(tmp_path / "l.run")) as run:
        assert run.op_groups() == {(str(src), 1, "aten.add.Tensor", "forward"): 3}
        (t,) = run.hot_lines(recorded_ops_only=True)
        assert (t.line, t.eager_ns) == (1, 60)


def test_hot_nodes_and_hot_lines(run_file):
    with Run(str(run_file)) as run:
        # call_* nodes only: the placeholder's 999 ns is not a node's work
        assert [(n.name, n.eager_ns) for n in run.hot_nodes()] == [("add", 300), ("lin", 200),
                                                                   ("mul", 100)]
        assert run.hot_nodes(limit=1)[0].module_path is None
        src = str(run_file.parent / "user.py")
        lines = run.hot_lines()
        # line 3: eager 20 + 45 + 1000 (summary); line 1: graph 1's two calls; line 2: 10 + 30
        assert [(t.line, t.eager_ns, t.compiled_ns) for t in lines] == [
            (1, 0, 4000), (3, 1065, 0), (2, 40, 0)]
        assert all(t.file == src for t in lines)
        recorded = run.hot_lines(None, recorded_ops_only=True)
        assert [(t.line, t.total_ns) for t in recorded] == [(1, 4000), (3, 65), (2, 40)]
        assert run.hot_lines(limit=1)[0].total_ns == 4000


def test_source_lines_and_kept_tensors(run_file):
    src = str(run_file.parent / "user.py")
    with Run(str(run_file)) as run:
        assert run.source(src) == SOURCE and run.source("/nope.py") is None
        assert run.source_files() == [src]
        lines = run.source_lines(src)
        assert [s.text for s in lines] == SOURCE.splitlines()
        by_line = {s.line: s for s in lines}
        assert (by_line[1].compiled_ns, by_line[2].eager_ns, by_line[3].eager_ns) == (4000, 40, 1065)
        assert [run.findings()[0].id] == list(by_line[3].findings)
        assert by_line[5].findings == () and by_line[6].compiled_ns == 0
        assert run.source_lines("/nope.py") == []
        (t,) = run.tensors("op:3")
        assert (t.owner, t.name, t.data) == ("op:3", "0", b"\x08\x00safetensors-bytes")
        assert [t.owner for t in run.tensors()] == ["op:3", "call:1"]


def test_a_second_thread_reads_the_same_object(run_file):
    run = Run(str(run_file))
    mine = run.findings()
    got, errors = {}, []

    def worker():
        try:
            got["findings"] = run.findings()
            got["nodes"] = run.nodes(1, limit=3)
        except Exception as exc:  # reported below
            errors.append(exc)

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert errors == [] and got["findings"] == mine and len(got["nodes"]) == 3
    assert len(run._conns) == 2  # one connection per thread
    run.close()
    with pytest.raises(GraphdbgError, match="closed"):
        run.findings()


def test_close_closes_every_connection_and_the_context_manager_closes(run_file):
    with Run(str(run_file)) as run:
        t = threading.Thread(target=run.graphs)
        t.start()
        t.join()
        conns = [c for _, c in run._conns]
    assert run.closed and conns
    errors = []

    def late():  # a thread that never read before close() gets no new connection
        try:
            run.graphs()
        except GraphdbgError as exc:
            errors.append(str(exc))

    t = threading.Thread(target=late)
    t.start()
    t.join()
    assert errors == [f"{run_file}: the run file was closed"]
    for c in conns:
        with pytest.raises(sqlite3.ProgrammingError):
            c.execute("SELECT 1")
    with pytest.raises(GraphdbgError, match="closed"):
        run.graphs()


def test_reader_refuses_what_is_not_a_readable_run(tmp_path, run_file):
    with pytest.raises(GraphdbgError, match=r"^no such run file: .*missing\.run$"):
        Run(str(tmp_path / "missing.run"))
    with pytest.raises(GraphdbgError, match="is a directory, not a run file"):
        Run(str(tmp_path))
    (tmp_path / "notes.txt").write_text("hello\n")
    with pytest.raises(GraphdbgError, match=r"notes\.txt is not a graphdbg run file$"):
        Run(str(tmp_path / "notes.txt"))
    db = sqlite3.connect(tmp_path / "other.db")
    db.execute("CREATE TABLE meta (key TEXT, value TEXT)")
    db.execute("INSERT INTO meta VALUES ('format', '\"something-else\"')")
    db.commit()
    db.close()
    with pytest.raises(GraphdbgError, match=r"other\.db is not a graphdbg run file$"):
        Run(str(tmp_path / "other.db"))
    (tmp_path / "broken.run").write_bytes(b"SQLite format 3\x00" + b"\x13" * 3000)
    with pytest.raises(GraphdbgError, match=r"broken\.run is not a readable graphdbg run file \("):
        Run(str(tmp_path / "broken.run"))
    w = RunWriter(str(tmp_path / "new.run"))
    w.set_meta(schema_version=SCHEMA_VERSION + 1)
    w.close()
    with pytest.raises(GraphdbgError, match=f"has run-file schema {SCHEMA_VERSION + 1}; "
                                            f"this graphdbg reads up to {SCHEMA_VERSION}"):
        Run(str(tmp_path / "new.run"))


def test_a_file_damaged_after_its_header_fails_with_one_line(tmp_path):
    w = RunWriter(str(tmp_path / "big.run"))
    for seq in range(20000):
        w.add(OpRow(seq, "aten.add.Tensor", "forward", "[[1024]]", '["float32"]', None, 1,
                    None, None, "m" * 40, None))
    w.close(exit_status=0, status="complete")
    path = tmp_path / "big.run"
    size = os.path.getsize(path)
    with open(path, "r+b") as fh:  # meta (page 2) survives; the ops pages do not
        fh.seek(size // 2)
        fh.write(b"\xff" * (size // 4))
    with Run(str(path)) as run, pytest.raises(GraphdbgError, match=r"big\.run is damaged \(.+\)$"):
        list(run.iter_ops())


def test_report_document_takes_a_run_or_a_path(run_file):
    from graphdbg.reporters.report import document
    with Run(str(run_file)) as run:
        doc = document(run)
        assert not run.closed  # the caller's run stays open
    assert document(str(run_file)) == doc
    assert [d["message"] for d in doc["diagnostics"]] == ["boom", "guard", "break", "note"]
    assert [n["name"] for n in doc["graphs"][0]["nodes"]] == ["x", "add", "mul", "lin", "output"]
    assert "nodes" not in document(str(run_file), nodes=False)["graphs"][0]
    assert doc["eager"]["ops"] == 6 and doc["hot_nodes"][0]["node"] == "add"


def test_a_damaged_column_is_quoted_short_on_one_line(run_file):
    db = sqlite3.connect(run_file)
    db.execute("UPDATE graphs SET graph_code = CAST(? AS TEXT)",
               (b"def forward(self):\n    return \xff\xfe" + b"x = 1\n" * 200,))
    db.commit()
    with Run(str(run_file)) as run, pytest.raises(GraphdbgError) as info:
        run.graph_code(1)
    message = str(info.value)
    assert message.startswith(f"{run_file} is damaged (") and "\n" not in message
    assert len(message) < len(str(run_file)) + 160


def test_a_run_whose_writer_is_gone_ended_without_closing(tmp_path):
    import socket
    import subprocess
    import sys
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead_pid = int(gone.stdout)
    cases = [(os.getpid(), socket.gethostname(), "running"),        # alive: still running
             (dead_pid, socket.gethostname(), "ended without closing"),
             (dead_pid, "another-host", "running"),                  # cannot tell from here
             (dead_pid, None, "ended without closing")]              # older runs name no host
    for i, (pid, host, status) in enumerate(cases):
        path = str(tmp_path / f"{i}.run")
        w = RunWriter(path)
        w.set_meta(pid=pid, host=host)
        w.flush()  # never closed: status stays "running"
        with Run(path) as run:
            assert run.info.status == status, (pid, host)
        w.close(status="complete")
        with Run(path) as run:
            assert run.info.status == "complete"


def test_a_graph_is_compiled_slower_when_its_fastest_call_outlasts_its_eager_ops(tmp_path):
    from graphdbg.runfile.writer import RunWriter
    w = RunWriter(str(tmp_path / "x.run"))
    cases = ((1, (1_000, 3_000, 3_000, 3_100)), (2, (9_000, 2_500, 2_600, 2_700)), (3, ()),
             (4, (1_000, 3_000)), (5, (1_000, 2_600, 5_000, 9_000)))
    for gid, calls in cases:
        w.put_graph(gid, compile_id=f"{gid - 1}/0", status="compiled")
        for i, ns in enumerate((1_000, 1_500)):
            w.add(NodeTimeRow(gid, f"n{i}", ns))
        for i, ns in enumerate(calls):
            w.add(CallRow(gid * 10 + i, gid, i, ns, "[]"))
    w.close(exit_status=0, status="complete")
    with Run(str(tmp_path / "x.run")) as run:
        g1, g2, g3, g4, g5 = run.graphs()
    # the first call warms up: the fastest call after it counts, beyond the
    # spread of the calls after it (median - fastest), over at least 3 of them
    assert (g1.eager_ref_ns, g1.steady_call_ns, g1.steady_median_ns, g1.compiled_slower) == \
        (2_500, 3_000, 3_000, True)
    assert (g2.steady_call_ns, g2.compiled_slower) == (2_500, False)   # not slower: as fast
    assert g3.compiled_slower is None                                   # never called
    assert (g4.steady_calls, g4.compiled_slower) == (1, None)           # one call: no verdict
    # 100 ns slower, within a 2,400 ns spread: noise, not slower
    assert (g5.steady_median_ns, g5.compiled_slower) == (5_000, False)


def test_a_compiled_time_over_too_few_calls_or_within_its_spread_gets_no_verdict():
    from graphdbg.runfile.readrecords import MIN_SAMPLES, beyond_noise
    # fastest 300 ns against eager 100 ns, median 320: slower beyond the spread
    assert beyond_noise(300, 320, 100, MIN_SAMPLES) is True
    assert beyond_noise(300, 320, 100, MIN_SAMPLES - 1) is None  # one slow call under load
    assert beyond_noise(300, 320, None, 5) is None                # no eager time
    assert beyond_noise(300, 600, 100, 5) is False                # within a 300 ns spread


def test_compiled_lines_keep_their_times_beside_a_long_source_line():
    # nanoGPT's attention line is wider than the terminal: the times stay
    from rich.console import Console
    from graphdbg.analysis.lines import CompiledLine
    from graphdbg.reporters.tables import compiled_lines_section
    code = ("y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=None, "
            "dropout_p=self.dropout if self.training else 0, is_causal=True)")
    line = CompiledLine(file="/x/model.py", line=64, function="forward", code=code,
                        total_ns=2486181, forward_ns=218703, backward_ns=402800,
                        eager_ref_ns=3533947, kernels=("cpp_fused_0", "extern_kernels.mm"),
                        graph_ids=(1,), steady=True, samples=3)
    console = Console(width=120, record=True)
    for part in compiled_lines_section([line]):
        console.print(part)
    text = console.export_text()
    assert "fwd/call" in text and "218.7 µs" in text and "3.53 ms" in text and "model.py:64" in text


# -- exports: torch.export and torch.onnx.export graphs ------------------------------

def _export_event(seq: int, meta: dict) -> EventRow:
    return EventRow(seq, 0.0, "graphdbg_export", None, json.dumps({"graphdbg_export": meta}), None)


def test_an_exports_graph_reads_its_event_and_kind(tmp_path):
    s = str(tmp_path / "m.py")
    w = RunWriter(str(tmp_path / "x.run"))
    for gid, backend, name in ((1, "eager", "f"), (2, "onnx", "Net (torch.onnx.export)"),
                               (3, "torch.export", "Net (torch.export)")):
        w.put_graph(gid, backend=backend, code_name=name, code_file=s, code_line=gid,
                    status="compiled" if gid == 1 else "exported")
    onnx = {"kind": "onnx", "via": "torch.onnx.export", "strict": False, "dynamic": None,
            "opset": 18, "onnx_nodes": 2, "onnx_ops": {"relu": ["Relu"], "mm": ["MatMul"]},
            "specialized": None, "runtime": "onnxruntime 1.20.0"}
    w.add(_export_event(1, {"graph_id": 2, **onnx}))
    w.add(_export_event(2, {"graph_id": 3, "kind": "export", "via": "torch.export.export",
                            "strict": True, "dynamic": {"x.size()[0]": "Dim.AUTO"},
                            "specialized": None}))
    w.add(_export_event(3, {"kind": "export"}))           # no graph: left alone
    w.close(exit_status=0, status="complete")
    with open_run(str(tmp_path / "x.run")) as run:
        compiled, onnx_graph, exported = run.graphs()
        assert (compiled.kind, compiled.export) == ("compile", None)
        assert onnx_graph.kind == "onnx" and onnx_graph.export == onnx  # graph_id taken out
        assert exported.kind == "export" and exported.export["strict"] is True
        assert run.graph(2) == onnx_graph and run.graph(1).export is None
        from graphdbg.reporters.report import document
        graphs = document(run)["graphs"]
        assert [(g["kind"], g["export"] is None) for g in graphs] == [
            ("compile", True), ("onnx", False), ("export", False)]
        assert graphs[1]["export"]["onnx_ops"] == {"relu": ["Relu"], "mm": ["MatMul"]}
        assert list(graphs[0])[-4:] == ["ddp_bucket", "kind", "export", "nodes"]


def test_the_report_says_an_onnx_translation_failure_one_way_out_a_line(tmp_path):
    from conftest import report_text
    from graphdbg.runfile.details import CompileErrorDetail
    src = tmp_path / "m.py"
    src.write_text("import torch\n\ndef forward(x):\n    return twice(x)\n")
    w = RunWriter(str(tmp_path / "x.run"))
    fixes = ["custom_translation_table={torch.ops.my.twice.default: fn} in torch.onnx.export",
             "a decomposition", "another opset_version"]
    w.diagnostic("onnx", kind="compile_error", severity="error",
                 message="torch.onnx.export failed: no ONNX translation for my.twice.default",
                 hint="ONNX has no function for my.twice.default, which this line calls. Ways "
                      "out: " + "; ".join(fixes) + ".",
                 user_frame=w.frame_id(str(src), 4, "forward"), node="twice",
                 detail=CompileErrorDetail.of(export=True, onnx=True, onnx_op="my.twice.default",
                                              node="twice", fixes=fixes,
                                              specialized=[{"size": "x.size()[0]", "value": 3,
                                                            "file": str(src), "line": 4}]))
    w.close(exit_status=1, status="failed")
    text = report_text(tmp_path / "x.run")
    lines = [ln.strip() for ln in text.splitlines()]
    i = lines.index("what to do: ONNX has no function for my.twice.default, which this line calls. "
                    "Ways out:")
    assert lines[i + 1:i + 4] == [f"- {f}" for f in fixes]
    assert "sizes fixed while it ran: x.size()[0] = 3 at m.py:4" in lines


ONNX_PROGRAM = str(SUPPORT / "exports" / "onnx_translation.py")


@pytest.fixture(scope="module")
def onnx_run_path(runs):
    """tests/support/exports/onnx_translation.py under `graphdbg run`, once per
    session (`runs.program`: tests/e2e/test_exports.py and the TUI tests read it too)."""
    from pathlib import Path
    return runs.program(Path(ONNX_PROGRAM).resolve()).ok().run


@group("export-translation")
def test_the_report_and_its_json_of_an_onnx_export(onnx_run_path):
    from conftest import report_doc, report_text
    doc = report_doc(onnx_run_path)
    (g,) = doc["graphs"]
    assert (g["kind"], g["backend"], g["status"], g["compile_id"]) == (
        "onnx", "onnx", "exported", None)
    e = g["export"]
    assert (e["kind"], e["via"], e["opset"]) == ("onnx", "torch.onnx.export", 20)
    assert e["onnx_nodes"] == sum(len(ops) for ops in e["onnx_ops"].values())
    assert "Tanh" in e["onnx_ops"]["gelu"] and e["runtime"].startswith("onnxruntime ")
    assert "not_checked" not in e and "graph_id" not in e
    ort = next(d for d in doc["diagnostics"] if d["detail"].get("onnx_ops"))
    assert ort["detail"]["exported"] == "onnx" and ort["detail"]["opset"] == 20

    text = report_text(onnx_run_path)
    # the Graphs table's row: the model, the export's time, its ONNX calls; the
    # backend (the same for every graph) in the title
    assert re.search(r"^\s+1\s+Block\s+onnx_translation\.py:\d+\s+11\s+[\d.]+ s\s+2$",
                     text, re.M), text
    assert re.search(r"^Graphs \(1\), backend onnx \(opset 20\) ─", text, re.M), text
    # --full: no compile id
    full = report_text(onnx_run_path, "--full")
    assert re.search(r"^\s+1\s+-\s+Block\s+onnx_translation\.py:\d+\s+11\s+2\s", full, re.M), full
    flat = " ".join(text.split())
    assert (f"ONNX: graph 1 is Block exported by torch.onnx.export at onnx_translation.py:"
            f"{g['line']} in ") in flat
    assert (f"opset 20, {e['onnx_nodes']} ONNX nodes from {g['n_ops']} FX ops; checked against "
            f"eager in {e['runtime']}, node by node on calls 0 (the example inputs) and 1") in flat
