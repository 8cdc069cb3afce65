"""graphdbg.analysis.diff on runs written with RunWriter (no torch): alignment by line,
op and occurrence when the two runs are out of step, and the streaming merge."""

import json
import math

from graphdbg.analysis import diff
from graphdbg.analysis.diff import diff_runs
from graphdbg.runfile.query import Run
from graphdbg.runfile.records import CallRow, NodeRow, OpRow
from graphdbg.runfile.writer import RunWriter


def stats(mean):
    return [{"mean": mean, "min": 0.0, "max": 1.0, "norm": 1.0, "std": 0.5}]


def make(path, src, ops, graph=None):
    """ops: (line, op, phase, shapes, stats, ns); graph: (line of its function,
    line of its last node, [outputs of each call])."""
    w = RunWriter(str(path))
    seq = 0
    for line, op, phase, shapes, st, ns in ops:
        seq += 1
        w.add(OpRow(seq, op, phase, json.dumps(shapes), json.dumps(["float32"] * len(shapes)),
                    json.dumps(st) if st else None,
                    ns, w.frame_id(src, line, "f"), None, None, None))
    if graph:
        fn_line, node_line, outputs = graph
        w.put_graph(1, compile_id="0/0", backend="eager", code_name="f", code_file=src,
                    code_line=fn_line, n_nodes=2, status="compiled")
        w.add(NodeRow(1, 0, "x", "placeholder", "x", None, None, None, None, None, None, ""))
        w.add(NodeRow(1, 1, "mul", "call_function", "_operator.mul", "[[4]]", '["float32"]',
                      w.frame_id(src, node_line, "f"), None, None, None, "x, 2"))
        w.add(NodeRow(1, 2, "output", "output", "output", None, None, None, None, None, None,
                      "(mul,)"))
        for i, out in enumerate(outputs):
            seq += 1
            w.add(CallRow(seq, 1, i, 500, json.dumps(out)))
    w.close(exit_status=0, status="complete")
    return str(path)


def test_first_divergence_is_the_earliest_in_a_even_when_b_is_out_of_step(tmp_path):
    src = str(tmp_path / "m.py")
    a_ops = [(1, "aten.add.Tensor", "forward", [[2]], stats(0.1), 10),   # differs: first in A
             (2, "aten.mul.Tensor", "forward", [[2]], stats(0.2), 10),
             (3, "aten.relu.default", "forward", [[2]], stats(0.3), 10),
             (4, "aten.sum.default", "forward", [[]], stats(0.4), 10),   # differs: met first
             (5, "aten.empty.memory_format", "forward", [[2]], stats(0.0), 10)]
    # B runs line 4 first and line 1 last, has an extra op, and its empty() holds other garbage
    b_ops = [(4, "aten.sum.default", "forward", [[]], stats(9.0), 20),
             (9, "aten.extra.default", "forward", [[1]], None, 5),
             (2, "aten.mul.Tensor", "forward", [[2]], stats(0.2), 10),
             (3, "aten.relu.default", "forward", [[2]], stats(0.3), 10),
             (5, "aten.empty.memory_format", "forward", [[2]], stats(7.0), 10),
             (1, "aten.add.Tensor", "forward", [[2]], stats(5.0), 10)]
    d = diff_runs(make(tmp_path / "a.run", src, a_ops), make(tmp_path / "b.run", src, b_ops))
    first = d.first_divergence
    assert (first.what, first.line, first.op, first.occurrence) == (
        "values", 1, "aten.add.Tensor", 0)
    assert first.a["mean"] == 0.1 and first.b["mean"] == 5.0 and d.differs
    assert (d.aligned_ops, d.only_in_a, d.only_in_b) == (5, 0, 1)
    assert (d.a.ops, d.b.ops) == (5, 6)
    times = {t.line: (t.a_ns, t.b_ns, t.delta_ns) for t in d.timing}
    assert times[4] == (10, 20, 10) and times[9] == (0, 5, 5) and times[1] == (10, 10, 0)
    assert [t.line for t in d.timing] == [4, 9, 1, 2, 3, 5]  # most changed first, ties by line
    # the JSON document: the same, as plain values in the documented order
    doc = d.as_dict()
    assert list(doc) == ["schema", "a", "b", "aligned_ops", "only_in_a", "only_in_b", "steps",
                         "compared_outputs", "unpaired_outputs", "first_divergence",
                         "graph_boundaries", "compiled_in_one_run", "timing"]
    assert doc["schema"] == "graphdbg-diff/2" and doc["steps"] is None  # no step events
    assert list(doc["first_divergence"]) == ["what", "file", "line", "code", "op", "occurrence",
                                             "step", "phase", "output", "rel_diff", "a", "b"]
    assert doc["timing"][0] == {"file": src, "line": 4, "a_ns": 10, "b_ns": 20, "delta_ns": 10}
    assert json.loads(d.to_json()) == doc


def test_occurrences_shapes_and_only_in_counts(tmp_path):
    src = str(tmp_path / "m.py")
    a_ops = [(1, "aten.add.Tensor", "forward", [[2]], None, 1)] * 3
    b_ops = [(1, "aten.add.Tensor", "forward", [[2]], None, 1),
             (1, "aten.add.Tensor", "forward", [[3]], None, 1)]   # 2nd occurrence: other shape
    d = diff_runs(make(tmp_path / "a.run", src, a_ops), make(tmp_path / "b.run", src, b_ops))
    assert (d.aligned_ops, d.only_in_a, d.only_in_b) == (2, 1, 0)
    first = d.first_divergence
    assert (first.what, first.occurrence, first.a, first.b) == ("shape", 1, [[2]], [[3]])
    assert first.as_dict() == {"what": "shape", "file": src, "line": 1, "code": "",
                               "op": "aten.add.Tensor", "occurrence": 1, "step": None,
                               "phase": "forward", "a": [[2]], "b": [[3]]}
    same = diff_runs(make(tmp_path / "c.run", src, a_ops), make(tmp_path / "d.run", src, a_ops))
    assert same.first_divergence is None and same.aligned_ops == 3 and not same.differs
    assert same.as_dict()["first_divergence"] is None
    # a negative tolerance finds even equal values different (no shortcut on equal text)
    with_stats = [(1, "aten.add.Tensor", "forward", [[2]], stats(0.1), 1)]
    e, f = make(tmp_path / "e.run", src, with_stats), make(tmp_path / "f.run", src, with_stats)
    assert diff_runs(e, f).first_divergence is None
    assert diff_runs(e, f, rtol=-1).first_divergence.what == "values"

    # NaN in one run only: infinitely different, which JSON writes as null
    nan = [(1, "aten.add.Tensor", "forward", [[2]], [dict(stats(0.1)[0], nan=1)], 1)]
    first = diff_runs(e, make(tmp_path / "n.run", src, nan)).first_divergence
    assert first.rel_diff == math.inf and first.as_dict()["rel_diff"] is None


def test_compiled_graph_output_against_the_other_runs_value_at_that_line(tmp_path):
    src = str(tmp_path / "m.py")
    eager = [(1, "aten.add.Tensor", "forward", [[2]], stats(0.1), 10),
             (3, "aten.mul.Tensor", "forward", [[4]], stats(0.5), 10),   # graph output, call 0
             (1, "aten.add.Tensor", "forward", [[2]], stats(0.1), 10),
             (3, "aten.mul.Tensor", "forward", [[4]], stats(0.7), 10)]   # call 1
    compiled = [(1, "aten.add.Tensor", "forward", [[2]], stats(0.1), 10)] * 2
    outs = [[{"shape": [4], "dtype": "float32", "stats": stats(0.5)[0]}],
            [{"shape": [4], "dtype": "float32", "stats": stats(3.0)[0]}]]
    d = diff_runs(make(tmp_path / "e.run", src, eager),
                  make(tmp_path / "c.run", src, compiled, graph=(2, 3, outs)))
    assert d.first_divergence is None and d.differs
    (b,) = d.graph_boundaries
    assert (b.compiled_in, b.graph, b.call, b.line) == ("B", 1, 1, 3)
    assert b.compiled["mean"] == 3.0 and b.eager["mean"] == 0.7
    assert [c.as_dict() for c in d.compiled_in_one_run] == [
        {"compiled_in": "B", "file": src, "line": 3}]
    assert (b.output, b.eager_op, d.compared_outputs, d.unpaired_outputs) == (
        0, "aten.mul.Tensor", 2, 0)
    assert list(b.as_dict()) == ["what", "file", "line", "code", "compiled_in", "graph", "call",
                                 "output", "eager_op", "step", "rel_diff", "compiled", "eager", "origin"]
    times = {t.line: (t.a_ns, t.b_ns) for t in d.timing}
    assert times[2] == (0, 1000) and times[3] == (20, 0)  # two calls at the function's line

    # the two calls' lines ran back to back in the eager run: one run of ops at
    # line 3 for two calls, no way to tell which is which: not paired, no ✖
    eager = [e for e in eager if e[0] == 3]
    d = diff_runs(make(tmp_path / "e2.run", src, eager),
                  make(tmp_path / "c2.run", src, compiled, graph=(2, 3, outs)))
    assert not d.differs and (d.compared_outputs, d.unpaired_outputs) == (0, 2)


def test_the_merge_stops_once_nothing_earlier_in_a_is_left(tmp_path, monkeypatch):
    src = str(tmp_path / "m.py")
    ops = [(1 + i % 50, "aten.add.Tensor", "forward", [[2]], stats(0.1), 1) for i in range(5000)]
    bad = list(ops)
    bad[3] = (bad[3][0], "aten.add.Tensor", "forward", [[2]], stats(0.9), 1)
    pa, pb = make(tmp_path / "a.run", src, ops), make(tmp_path / "b.run", src, bad)
    read = []
    real = Run.iter_ops_between

    def counting(self, *args):
        for o in real(self, *args):
            read.append(o.seq)
            yield o

    monkeypatch.setattr(Run, "iter_ops_between", counting)
    with Run(pa) as ra, Run(pb) as rb:
        first = diff.first_value_divergence(diff.read_side(ra), diff.read_side(rb), 1e-3)
    assert first.line == 4 and first.a["mean"] == 0.1
    assert len(read) < 20, len(read)  # not 10000: both streams stop right after
