"""The TUI's view state (graphdbg.tui.model.run), without a terminal: on a small
run written with RunWriter (tests/tui_sample.py) and on a real sample run."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest
from conftest import group
from graphdbg.tui.model import run as m
from tui_sample import N_NODES, write_sample_run

from graphdbg.runfile.query import Run


@pytest.fixture
def run(tmp_path):
    with Run(str(write_sample_run(tmp_path))) as r:
        yield r


def test_problems_by_severity_with_next_and_previous(run):
    p = m.ProblemsModel(run.findings())
    assert [(f.severity, f.kind) for f in p.findings] == [
        ("error", "divergence"), ("warning", "graph_break"), ("warning", "recompile"),
        ("info", "divergence")]
    assert p.rows()[0] == ("✖ error", "divergence", "model.py:9",
                           "compiled differs from eager at torch.sin (node node_008)")
    assert p.title() == "Problems (4): 1 error, 2 warnings, 1 info"
    # from another view, `n` shows the problem under the cursor; then it steps, wrapping
    assert p.step(True, from_outside=True).kind == "divergence" and p.cursor == 0
    assert [p.step().kind for _ in range(4)] == ["graph_break", "recompile", "divergence",
                                                 "divergence"]
    assert p.cursor == 0
    assert p.step(False).severity == "info" and p.cursor == 3
    assert p.select_id(2).kind == "recompile" and p.cursor == 2
    assert m.ProblemsModel([]).step() is None


def test_problem_detail_has_source_reason_hint_chain_and_divergence_numbers(run):
    by_kind = {f.kind: f for f in run.findings(severity=("error", "warning"))}
    div = by_kind["divergence"]
    lines = m.finding_detail(div, run.source(div.file))
    text = [ln.text for ln in lines]
    current = [ln.text for ln in lines if ln.style == "current"]
    assert current == ["    9 │     return z.sin()"]           # from the run file's snapshot
    assert "    6 │     z = y * scale" in text                   # lines around it
    numbers = {t.split("  ")[-2].strip(): t.split("  ")[-1] for t in text if "  " in t}
    assert numbers["max abs"] == "0.125" and numbers["eager vs float64"] == "1e-07"
    assert numbers["compiled vs float64"] == "0.125" and numbers["stage"] == "inductor"
    assert numbers["node"] == "node_008"
    assert "graph 1 · op torch.sin" in text                  # the node: among the numbers
    chain = [ln.text for ln in lines if ln.style == "code" and " in " in ln.text]
    assert [c.split(" in ")[1] for c in chain] == ["<module>", "main", "block"]

    brk = by_kind["graph_break"]
    text = [ln.text for ln in m.finding_detail(brk, run.source(brk.file))]
    assert "  full torch text here" in text                       # torch's whole reason
    assert "Use torch.cond or move the branch out of the compiled region" in text
    assert "explained" in text
    # no snapshot (another machine, a deleted file): the finding's own code line
    assert [ln.text for ln in m.finding_detail(brk, None) if ln.style == "current"] == [
        "    7 │ if z.sum() > 0:"]


def test_problem_preview_under_the_table(run):
    brk = run.findings(kind="graph_break")[0]
    assert m.problem_preview(brk).splitlines() == [
        "graph break: Data-dependent branching",
        "hint: Use torch.cond or move the branch out of the compiled region",
        "called from model.py:15 main ← model.py:18 <module>"]
    assert m.problem_preview(None) == ""


def test_node_table_of_a_checked_graph_shows_values_sorts_and_finds_by_them(tmp_path):
    with Run(str(write_sample_run(tmp_path, node_values=True))) as run:
        pager = m.NodePager(run, 1, page_size=200)
        assert pager.columns is m.NODE_COLUMNS  # not known before the first page
        pager.extend(pager.fetch())
        assert pager.columns is m.VALUE_NODE_COLUMNS
        keys = [k for k, _ in pager.columns]
        assert keys[:5] == ["idx", "name", "status", "max_abs", "max_rel"]
        node = {n.name: n for n in pager.rows}
        cells = dict(zip(keys, pager.cells(node["node_008"]), strict=True))
        assert (cells["status"], cells["max_abs"], cells["max_rel"]) == ("first divergent",
                                                                        "0.125", "0.5")
        assert cells["value"].endswith("]") and pager.value_level(node["node_008"]) == "error"
        assert pager.value_level(node["node_010"]) == "warning"  # differs
        assert pager.value_level(node["node_009"]) == "success"   # ok
        # a node without a value (graph 1 has values for nodes 1-29 only)
        assert pager.cells(node["node_040"])[2:5] == ("-", "-", "-")
        assert pager.value_level(node["node_040"]) is None

        # the status sorts most telling first; errors largest first, in SQL
        pager.sort.select("status")
        assert pager.sort.descending
        pager.reset()
        pager.extend(pager.fetch())
        statuses = [pager.values[n.idx].status for n in pager.rows[:7]]
        assert statuses == ["first divergent"] + ["differs"] * 4 + ["ok"] * 2
        assert "ops sorted by status ▼, then the inputs" in pager.title()
        pager.sort.select("max_rel")
        pager.reset()
        pager.extend(pager.fetch())
        rel = [pager.values[n.idx].max_rel if n.idx in pager.values else None
               for n in pager.rows]
        known = [r for r in rel if r is not None]
        assert known == sorted(known, reverse=True) and known[0] == 0.5
        assert rel[-1] is None and rel[:len(known)] == known  # nodes without one last
        # find matches the status too
        pager.find.query = "divergent"
        pager.reset()
        pager.extend(pager.fetch())
        assert [n.name for n in pager.rows] == ["node_008"] and pager.total == 1

        # a graph without values keeps the plain columns
        other = m.NodePager(run, 2)
        other.extend(other.fetch())
        assert other.columns is m.NODE_COLUMNS and len(other.cells(other.rows[0])) == 9
        with pytest.raises(ValueError):
            run.node_page(1, order_by="nonsense")


def test_caret_under_the_code_of_errors():
    out = m.source_excerpt(["a = 1", "    y = f(x)  # note"], 2, caret=True)
    assert [ln.text for ln in out if ln.style == "caret"] == ["            ^^^^^^^^"]


def test_node_pager_pages_sorts_and_finds_in_sql(run):
    pager = m.NodePager(run, 1, page_size=200)
    assert pager.wants_more(0)
    added = pager.extend(pager.fetch())
    # 200 rows read; x, the graph's input, leads them: it comes after the ops
    assert len(added) == 199 and pager.total == N_NODES and not pager.complete
    assert [n.idx for n in pager.rows[:3]] == [1, 2, 3]
    assert not pager.wants_more(100) and pager.wants_more(170)
    pager.extend(pager.fetch())
    pager.extend(pager.fetch())
    assert not pager.complete and len(pager.rows) == N_NODES - 1   # the ops
    assert pager.extend(pager.fetch()) == [run.nodes(1)[0]]          # then the input
    assert pager.complete and [n.idx for n in pager.rows] == [*range(1, N_NODES), 0]
    assert pager.inputs_shown == 1 and pager.cells(pager.rows[-1])[3] == "input"
    node = {n.name: n for n in pager.rows}
    assert pager.top_ns == 90_000 and pager.heat(node["node_007"]) == "hot"
    assert pager.heat(node["node_008"]) is None

    # a time column sorts slowest first; nodes without a time last either way
    pager.sort.select("eager_ns")
    pager.reset()
    page = pager.fetch()
    pager.extend(page)
    assert pager.rows[0].name == "node_007" and pager.sort.descending
    times = [n.eager_ns for n in pager.rows]
    assert times == sorted(times, reverse=True)
    pager.sort.select("eager_ns")  # again: reversed
    pager.reset()
    pager.extend(pager.fetch())
    assert not pager.sort.descending and pager.rows[0].eager_ns == min(
        n.eager_ns for n in run.nodes(1) if n.eager_ns is not None and n.op != "placeholder")
    assert "ops sorted by eager time ▲" in pager.title()
    # a stale page (fetched before a reset) is dropped
    assert pager.extend(page) == []

    pager.find.query = "RELU"
    pager.sort.select("idx")
    pager.reset()
    pager.extend(pager.fetch())
    assert pager.total == len(range(0, N_NODES, 3))  # every third node: relu
    assert all(n.target == "torch.relu" for n in pager.rows)
    pager.find.query = "model.py:9"  # file:line finds the nodes of a line
    pager.reset()
    pager.extend(pager.fetch())
    assert {n.line for n in pager.rows} == {9} and pager.total > 0
    pager.find.query = "50%_"  # LIKE wildcards are literal
    pager.reset()
    pager.extend(pager.fetch())
    assert pager.total == 0 and pager.rows == []


def test_query_node_page_rejects_unknown_columns_and_counts(run):
    with pytest.raises(ValueError):
        run.node_page(1, order_by="name; DROP TABLE nodes")
    assert run.node_count(1) == N_NODES and run.node_count(1, find="node_00") == 9
    by_line = [n.line for n in run.node_page(1, 0, None, order_by="line")]
    known = [x for x in by_line if x is not None]
    assert known == sorted(known) and by_line[-1] is None  # NULLs last
    assert run.node_graphs_by_line(run.graphs()[0].file) == {5: (1,), 6: (1,), 9: (1, 2)}


def test_node_detail_is_uncut_with_line_chain_and_findings(run):
    (node,) = [n for n in run.nodes(1) if n.name == "node_008"]
    lines = m.node_detail(node, run.source(node.file), run.stack(node.stack_id), run.findings())
    text = [ln.text for ln in lines]
    assert "       target  torch.sin" in text and "       shapes  [8,2]" in text
    assert [ln.text for ln in lines if ln.style == "current"] == ["    9 │     return z.sin()"]
    assert "✖ error divergence: compiled differs from eager at torch.sin (node node_008)" in text
    assert text[-1].endswith("model.py:6 in block")  # the innermost frame of its stack


def test_graphs_sort_in_memory(run):
    graphs = run.graphs()
    sort = m.graph_sort()
    assert [g.id for g in m.sort_graphs(graphs, sort)] == [1, 2]
    sort.select("mean_call")                     # slowest first
    assert sort.descending and [g.id for g in m.sort_graphs(graphs, sort)] == [1, 2]
    sort.select("compile_time")
    assert [g.id for g in m.sort_graphs(graphs, sort)] == [1, 2]
    sort.reverse()
    assert [g.id for g in m.sort_graphs(graphs, sort)] == [2, 1]
    # eager ref: the nodes' eager time (1.59 ms) beside one call after the first (1 ms):
    # too few calls for a verdict (no ▲)
    assert m.graph_cells(graphs[0]) == ("1", "0/0", "block", "model.py:4", "450", "1.25 s",
                                        "2", "1.50 ms", "1.59 ms", "inductor")
    assert graphs[0].compiled_slower is None and graphs[1].compiled_slower is None
    assert m.graph_cells(graphs[1])[8] == "-"          # never checked against eager


def test_sort_state_cycles_like_py_spy():
    s = m.SortState(("a", "t", "b"), "a", descending_first=frozenset({"t"}))
    s.cycle()
    assert (s.column, s.descending) == ("t", True)
    s.cycle()
    assert (s.column, s.descending) == ("b", False)
    s.cycle()
    assert s.column == "a"
    s.cycle(-1)
    assert s.column == "b"
    s.select("b")
    assert s.descending and s.label("b") == " ▼" and s.label("a") == ""
    with pytest.raises(ValueError):
        s.select("nope")


def test_find_matches_rows_and_wraps():
    f = m.FindState("Sin")
    rows = [("relu", "x"), ("torch.sin", "a"), ("mul", "b"), ("SIN", "sinh")]
    assert f.spans("torch.sin sin") == [(6, 9), (10, 13)]
    assert f.matching_rows(rows) == [1, 3]
    assert f.next_row(rows, 1) == 3 and f.next_row(rows, 3) == 1
    assert f.next_row(rows, 1, forward=False) == 3
    assert f.next_row(rows, 1, include_current=True) == 1
    assert m.FindState("zzz").next_row(rows, 0) is None and m.FindState("").spans("x") == []


def test_source_gutter_names_graphs_findings_and_time(run):
    src = m.SourceModel(run, run.findings())
    files = src.choose_files()
    assert len(files) == 1 and files[0].endswith("model.py")
    rows = src.load(files[0], 9)
    src.show(files[0], rows, 9)
    by_line = {r.line: r for r in rows}
    assert by_line[4].gutter == "def g1,2 3.50ms"    # both graphs' function starts here
    assert by_line[5].gutter == "g1 D" and by_line[6].gutter == "g1 R"
    assert by_line[7].gutter == "B 10.0µs"           # the break, and its eager ops
    assert by_line[9].gutter == "g1,2 D" and by_line[9].finding_ids
    assert by_line[13].gutter == "40.0µs" and by_line[1].gutter == ""
    assert src.cursor_row() == 8 and src.next_file() == files[0]
    assert "model.py:9" in src.title()


def test_hot_spots_as_bars(run):
    hot = m.HotSpots.load(run)
    nodes = hot.node_rows()
    assert nodes[0][1:4] == ("90.0 µs", "g1", "node_007")
    assert nodes[0][0] == "█" * 16 and len(nodes[1][0]) <= 2
    assert hot.line_rows()[0][1:3] == ("3.50 ms", "model.py:4")
    assert hot.op_rows()[0][2] == "aten.randn.default"
    assert m.bar(1, 8, 1) == "▏" and m.bar(0, 8) == "" and m.bar(5, 0) == ""
    assert m.heat(30, 100) == "hot" and m.heat(5, 100) == "warm" and m.heat(1, 100) is None


def test_run_info_lists_versions_status_and_internal_errors(tmp_path):
    path = write_sample_run(tmp_path, 5, internal_errors=[{"where": "hooks.calls", "error": "KeyError: 3"}])
    with Run(str(path)) as run:
        info = dict(m.run_info(run, {"divergence": 2}))
        assert info["command"] == "model.py --epochs 1" and info["exit status"] == "0"
        assert info["status"].startswith("complete") and info["torch"] == "2.13.0"
        assert info["findings: divergence"] == "2" and info["internal errors"] == "1"
        assert info["  graphdbg error"] == "where: hooks.calls; error: KeyError: 3"
        assert m.status_line(run, None) == "loading… · exit 0 (complete) · model.py --epochs 1"
        assert m.ProblemsModel([]).summary() == "no problems"


@group("divergence_faulty")
def test_model_on_a_real_divergence_run(runs):
    path = runs.golden("divergence_faulty").ok().run
    with Run(str(path)) as run:
        p = m.ProblemsModel(run.findings())
        div = next(f for f in p.findings if f.kind == "divergence")
        lines = m.finding_detail(div, run.source(div.file))
        assert any(ln.style == "current" for ln in lines)
        assert any("max abs" in ln.text for ln in lines)
        g = run.graphs()[0]
        pager = m.NodePager(run, g.id, page_size=5, compile_id=g.compile_id, graph=g)
        page = pager.fetch()
        pager.extend(page)
        # the graph's inputs (x and the model's parameters) lead it: its ops come first
        assert pager.rows == [] and pager.total == run.node_count(g.id) and g.n_inputs > 5
        while not pager.rows:
            pager.extend(pager.fetch())
        assert pager.rows[0].idx == g.n_inputs and pager.rows[0].op == "call_function"
        # the graph's compile time by phase, above its nodes
        assert re.match(rf"compile {g.compile_id}: [\d.]+ m?s = Dynamo [\d.]+ m?s · graphdbg "
                        r"[\d.]+ m?s · backend [\d.]+ m?s$", page.compile_text), page.compile_text
        src = m.SourceModel(run, p.findings)
        assert div.file in src.choose_files()
        rows = src.load(div.file, div.line)
        assert "D" in rows[div.line - 1].marks


def test_a_long_source_is_shown_in_a_window_around_the_line(run, monkeypatch):
    src = m.SourceModel(run, run.findings())
    (file,) = src.choose_files()
    monkeypatch.setattr(m.SourceModel, "WINDOW", 6)
    rows, total = src.load_window(file, 9)
    assert total == 18 and [r.line for r in rows] == [6, 7, 8, 9, 10, 11]
    src.show(file, rows, 9, total)
    assert src.cursor_row() == 3 and "lines 6-11 of 18" in src.title()
    rows, _ = src.load_window(file, 18)  # the end: a full window still
    assert [r.line for r in rows] == [13, 14, 15, 16, 17, 18]
    assert m.divergence_numbers(["not", "a", "dict"]) == []


# -- exports: torch.export and torch.onnx.export graphs beside compiled ones -----------

EXPORTS = Path(__file__).resolve().parents[1] / "support" / "exports"
ONNX_PROGRAM = EXPORTS / "onnx_translation.py"


def marker(path: Path, name: str) -> int:
    """The line that carries the comment ``# NAME`` (exactly one)."""
    (line,) = [i for i, text in enumerate(path.read_text().splitlines(), 1)
               if text.rstrip().endswith(f"# {name}") or f"# {name} " in text]
    return line


def graphdbg_run(runs, key: str, program: Path, *args: str) -> Path:
    """`graphdbg run -q PROGRAM ARGS`, once per session (the `runs` cache of
    conftest.py; `runs.program` takes no program arguments)."""
    r = runs._cached(key, [sys.executable, "-m", "graphdbg", "run", "-q", "-o", "out.run",
                           str(program), *args])
    return r.ok().run


@pytest.fixture(scope="module")
def onnx_run(runs):
    """tests/support/exports/onnx_translation.py under graphdbg (the run
    tests/e2e/test_exports.py reads): one ONNX graph whose custom gelu
    translation departs from eager, called twice."""
    with Run(str(runs.program(ONNX_PROGRAM).ok().run)) as r:
        yield r


ONNX_GRAPH = group("export-translation")


@ONNX_GRAPH
def test_graphs_table_of_an_onnx_run_says_the_kind_and_how_it_was_exported(onnx_run):
    (g,) = onnx_run.graphs()
    assert g.kind == "onnx" and g.export["opset"] == 20
    columns = m.graph_columns([g])
    assert [k for k, _ in columns][:3] == ["id", "kind", "compile_id"]
    cells = dict(zip((k for k, _ in columns), m.graph_cells(g, columns), strict=True))
    export_line = marker(ONNX_PROGRAM, "EXPORT_CALL")
    assert cells["kind"] == "onnx" and cells["compile_id"] == "-"
    assert cells["function"] == "Block"          # the kind and backend say it was exported
    assert cells["where"] == f"onnx_translation.py:{export_line}"
    assert cells["backend"] == "onnx (opset 20)" and cells["calls"] == "2"
    assert cells["compile_time"] == f"{g.backend_time_s:.2f} s"   # the export's own time
    # a run without exports keeps its columns
    assert m.graph_columns([]) is m.GRAPH_COLUMNS and m.graph_sort().columns[1] == "compile_id"
    sort = m.graph_sort([g])
    sort.select("kind")
    assert m.sort_graphs([g], sort) == [g]


@ONNX_GRAPH
def test_an_onnx_graph_summary_names_opset_nodes_runtime_and_checked_calls(onnx_run):
    (g,) = onnx_run.graphs()
    text = m.export_summary(onnx_run, g)
    runtime = g.export["runtime"]
    assert runtime and runtime.startswith("onnxruntime ")
    assert text.startswith(f"ONNX: graph 1 is Block exported by torch.onnx.export at "
                           f"onnx_translation.py:{marker(ONNX_PROGRAM, 'EXPORT_CALL')} in ")
    n_onnx = sum(len(ops) for ops in g.export["onnx_ops"].values())
    assert f"opset 20, {n_onnx} ONNX nodes from {g.n_ops} FX ops" in text
    assert (f"checked against eager in {runtime}, node by node on calls 0 (the example inputs) "
            f"and 1" in text)
    # the nodes view shows it above the nodes, where a compiled graph's compile time goes
    pager = m.NodePager(onnx_run, g.id, graph=g)
    page = pager.fetch()
    assert page.compile_text == text
    pager.extend(page)
    assert pager.columns is m.ONNX_VALUE_NODE_COLUMNS      # ONNX Runtime is the other side
    assert dict(pager.columns)["compiled_vs_fp64"] == "ORT↔f64"
    cells = dict(zip((k for k, _ in pager.columns),
                     pager.cells(next(n for n in pager.rows if n.name == "gelu")), strict=True))
    assert cells["status"] == "first divergent"


@ONNX_GRAPH
def test_a_node_of_an_onnx_graph_lists_the_onnx_ops_made_from_it(onnx_run):
    g = onnx_run.graph(1)
    nodes = {n.name: n for n in onnx_run.nodes(1)}
    gelu = nodes["gelu"]
    assert gelu.line == marker(ONNX_PROGRAM, "GELU_LINE")
    text = [ln.text for ln in m.node_detail(gelu, onnx_run.source(gelu.file),
                                            onnx_run.stack(gelu.stack_id), onnx_run.findings(), g)]
    ops = g.export["onnx_ops"]["gelu"]
    assert "Tanh" in ops and f"     onnx ops  {', '.join(ops)}" in text
    assert any(t.startswith("✖ error divergence: ONNX Runtime diverges from eager") for t in text)
    # a node ONNX's optimiser removed (the multiplication by 1.0) says so; inputs say nothing
    assert "mul" not in g.export["onnx_ops"]
    assert m.onnx_ops_text(nodes["mul"], g).startswith("none (no ONNX node of the model")
    assert m.onnx_ops_text(nodes["x"], g) is None
    # without the graph (or for a compiled graph) there is no such line
    plain = [ln.text for ln in m.node_detail(gelu, None)]
    assert not any("onnx ops" in t for t in plain)


@ONNX_GRAPH
def test_the_diff_of_an_onnx_graph_is_eager_against_onnx_runtime(onnx_run):
    from graphdbg.tui.model.diff import GRAPH_COLUMNS, ONNX_GRAPH_COLUMNS, DiffModel
    model = DiffModel.for_graph(onnx_run, 1)
    assert model.title.startswith("Eager vs ONNX Runtime: graph 1 (Block (torch.onnx.export)")
    assert model.columns == ONNX_GRAPH_COLUMNS and "compiled" not in model.columns
    assert "ONNX Runtime" in model.columns and "ORT↔f64" in model.columns
    assert GRAPH_COLUMNS.index("compiled") == ONNX_GRAPH_COLUMNS.index("ONNX Runtime")
    assert model.calls == [0, 1]
    model.load_more()
    at = model.first_divergent()
    row = model.rows[at]
    assert row.key == "gelu" and row.status == "first divergent"
    detail = model.detail(row)
    assert detail[0].endswith("first divergent (miscompile), ONNX Runtime's value")
    assert detail[2].startswith("ORT       float32[4, 32]") and "rmse eager" in detail[3]
    assert detail[3].split("  ")[-1].startswith("ORT ")
    mul = next(r for r in model.rows if r.key == "mul")
    assert model.detail(mul)[0].endswith("ONNX Runtime's value not known (not in the ONNX model)")


@ONNX_GRAPH
def test_findings_of_an_onnx_run_show_their_onnx_numbers(onnx_run):
    by_stage = {f.detail.stage: f for f in onnx_run.findings(kind=("divergence",))}
    (ort,) = [f for s, f in by_stage.items() if s.startswith("onnxruntime")]
    nums = dict(m.export_numbers(ort.detail))
    assert nums["exported"] == "torch.onnx.export" and nums["opset"] == "20"
    assert nums["ONNX ops"] == ", ".join(ort.detail.onnx_ops) and "Tanh" in nums["ONNX ops"]
    text = [ln.text for ln in m.finding_detail(ort, onnx_run.source(ort.file))]
    assert any(t.strip().startswith("ONNX RT vs float64") for t in text)
    assert not any(t.strip().startswith("compiled vs float64") for t in text)
    # the exported program itself differs on the second call (a flag the forward reads)
    fixed = by_stage["torch.onnx.export"]
    assert fixed.line == marker(ONNX_PROGRAM, "SCALE_LINE")
    nums = dict(m.export_numbers(fixed.detail))
    assert "eager ran" in nums and "exported ran" in nums


@ONNX_GRAPH
def test_source_gutter_marks_the_export_call(onnx_run):
    src = m.SourceModel(onnx_run, onnx_run.findings())
    file = str(ONNX_PROGRAM)
    assert file in src.choose_files()
    rows = {r.line: r for r in src.load(file)}
    call = rows[marker(ONNX_PROGRAM, "EXPORT_CALL")]
    assert call.gutter.startswith("exp g1") and "def" not in call.gutter
    gelu = rows[marker(ONNX_PROGRAM, "GELU_LINE")]
    assert gelu.gutter.startswith("g1 D")


EXPORT_SOURCE = """\
import torch


def forward(x):
    if x.shape[0] == 4:
        x = x * 2
    return x.relu()


ep = torch.export.export(Net(), (torch.randn(4, 8),))
program = torch.onnx.export(Net(), (torch.randn(4, 8),), dynamo=True)
"""


def write_export_run(folder: Path) -> Path:
    """A torch.export graph with a specialised size and an ONNX graph that
    was not checked (onnxruntime missing), as hooks/record/exports.py writes
    them, and a compiled graph."""
    from graphdbg.runfile.details import SpecializedDetail
    from graphdbg.runfile.records import EventRow, NodeRow
    from graphdbg.runfile.writer import RunWriter
    src = folder / "m.py"
    src.write_text(EXPORT_SOURCE)
    s = str(src)
    w = RunWriter(str(folder / "exp.run"))
    w.set_meta(argv=["m.py"], cwd=str(folder), module=False, values="stats", torch="2.13.0")
    branch, relu = w.frame_id(s, 5, "forward"), w.frame_id(s, 7, "forward")
    w.put_graph(1, backend="torch.export", code_name="Net (torch.export)", code_file=s,
                code_line=10, n_nodes=3, n_ops=1, status="exported", backend_time_s=0.25)
    w.put_graph(2, backend="onnx", code_name="Net (torch.onnx.export)", code_file=s,
                code_line=11, n_nodes=3, n_ops=1, status="exported", backend_time_s=1.5)
    w.put_graph(3, compile_id="0/0", backend="inductor", code_name="forward", code_file=s,
                code_line=4, n_nodes=3, status="compiled", compile_time_s=2.0)
    for gid in (1, 2, 3):
        for idx, (name, op, frame) in enumerate((("x", "placeholder", None),
                                                 ("relu", "call_function", relu),
                                                 ("output", "output", None))):
            w.add(NodeRow(gid, idx, name, op, "aten.relu.default" if frame else name, None, None,
                          frame, None, None, None, ""))
    specialized = {"symbol": "s77", "value": 4, "reason": "range_refined_to_singleton",
                   "source": "L['x'].size()[0]", "declared": "Dim.AUTO", "file": s, "line": 5}
    for seq, meta in ((1, {"graph_id": 1, "kind": "export", "via": "torch.export.export",
                           "strict": False, "dynamic": {"x.size()[0]": "Dim.AUTO"},
                           "specialized": [specialized]}),
                      (2, {"graph_id": 2, "kind": "onnx", "via": "torch.onnx.export",
                           "strict": False, "dynamic": None, "opset": 18, "onnx_nodes": 1,
                           "onnx_ops": {"relu": ["Relu"]}, "specialized": None, "runtime": None,
                           "not_checked": "onnxruntime not installed (pip install onnxruntime)"})):
        w.add(EventRow(seq, 0.0, "graphdbg_export", None, json.dumps({"graphdbg_export": meta}),
                       None))
    w.diagnostic("specialized|1", kind="export_specialized", severity="warning",
                 message="torch.export fixed x.size()[0] to 4, which you declared dynamic "
                         "(Dim.AUTO)", user_frame=branch, graph_id=1,
                 detail=SpecializedDetail.of(size="x.size()[0]", value=4, declared="Dim.AUTO",
                                             symbol="s77", reason="range_refined_to_singleton",
                                             exported="export"))
    from graphdbg.runfile.details import CompileErrorDetail
    fixes = ["custom_translation_table={...} in torch.onnx.export", "a decomposition"]
    w.diagnostic("onnx|twice", kind="compile_error", severity="error",
                 message="torch.onnx.export failed: no ONNX translation for my.twice.default",
                 reason="Failed to convert. \x1b[96mThis is step 3/3\x1b[0m of exporting",
                 hint="ONNX has no function for my.twice.default. Ways out: "
                      + "; ".join(fixes) + ".", user_frame=relu, node="relu",
                 detail=CompileErrorDetail.of(export=True, onnx=True, legacy_exporter=False,
                                              onnx_op="my.twice.default", node="relu",
                                              fixes=fixes, specialized=[
                                                  {"size": "x.size()[0]", "value": 4,
                                                   "file": s, "line": 5}]))
    w.close(exit_status=0, status="complete")
    return folder / "exp.run"


def test_a_torch_export_graph_and_an_unchecked_onnx_graph(tmp_path):
    from graphdbg.tui.model.diff import GRAPH_COLUMNS, DiffModel
    with Run(str(write_export_run(tmp_path))) as run:
        exp, onnx, compiled = run.graphs()
        assert (exp.kind, onnx.kind, compiled.kind) == ("export", "onnx", "compile")
        columns = m.graph_columns([exp, onnx, compiled])
        rows = [m.graph_cells(g, columns) for g in (exp, onnx, compiled)]
        assert [r[1] for r in rows] == ["export", "onnx", "compile"]
        assert [r[-1] for r in rows] == ["torch.export", "onnx (opset 18)", "inductor"]
        assert [r[6] for r in rows] == ["0.25 s", "1.50 s", "2.00 s"]
        # a compiled graph's cells are those of a run without exports, the kind put in
        assert rows[2][:1] + rows[2][2:] == m.graph_cells(compiled)
        sort = m.graph_sort([exp, onnx, compiled])
        sort.select("kind")
        assert [g.kind for g in m.sort_graphs([exp, onnx, compiled], sort)] == [
            "compile", "export", "onnx"]

        assert m.export_summary(run, compiled) is None
        text = m.export_summary(run, exp)
        assert text == ("torch.export: graph 1 is Net exported by torch.export.export at m.py:10 "
                        "(non-strict) in 0.25 s: 3 FX nodes; dynamic: x.size()[0] (Dim.AUTO); "
                        "specialised: x.size()[0] = 4 at m.py:5 (declared Dim.AUTO)")
        text = m.export_summary(run, onnx)
        assert text == ("ONNX: graph 2 is Net exported by torch.onnx.export at m.py:11 in 1.50 s: "
                        "opset 18, 1 ONNX node from 1 FX op; not checked against eager: "
                        "onnxruntime not installed (pip install onnxruntime)")

        # neither has per-node values: the diff view says why
        d = DiffModel.for_graph(run, 2)
        assert d.total == 0 and d.columns != GRAPH_COLUMNS
        assert d.empty_message.startswith("no per-node values: the ONNX export was not checked "
                                          "against eager: onnxruntime not installed")
        d = DiffModel.for_graph(run, 1)
        assert d.columns == GRAPH_COLUMNS and d.title.startswith("Eager vs compiled: graph 1")
        assert "torch.export) is checked against eager by its outputs" in d.empty_message

        failed, spec = m.ProblemsModel(run.findings()).findings   # the error first
        assert m.ProblemsModel.cells(spec)[:3] == ("▲ warning", "fixed at export", "m.py:5")
        nums = dict(m.export_numbers(spec.detail))
        assert nums == {"size": "x.size()[0]", "fixed to": "4", "declared": "Dim.AUTO",
                        "symbol": "s77", "reason (torch)": "range_refined_to_singleton",
                        "exported": "torch.export"}
        detail = [ln.text for ln in m.finding_detail(spec, run.source(spec.file))]
        assert "            fixed to  4" in detail
        src = m.SourceModel(run, run.findings())
        rows = {r.line: r for r in src.load(str(tmp_path / "m.py"))}
        assert rows[5].marks == "X" and rows[10].gutter == "exp g1"
        assert rows[11].gutter == "exp g2" and rows[4].gutter == "def g3"
        assert rows[7].marks == "C"
        # an op with no ONNX translation: its op and node, each way out on its line, the
        # sizes fixed before it failed, torch's reason without its terminal colours
        lines = m.finding_detail(failed, run.source(failed.file))
        text = [ln.text for ln in lines]
        assert dict(m.export_numbers(failed.detail)) == {
            "exporter": "torch.onnx.export", "no ONNX op for": "my.twice.default", "node": "relu"}
        hints = [ln.text for ln in lines if ln.style == "hint"]
        assert hints == ["ONNX has no function for my.twice.default. Ways out:",
                         "  - custom_translation_table={...} in torch.onnx.export",
                         "  - a decomposition"]
        assert "sizes fixed while it ran: x.size()[0] = 4 at m.py:5" in text
        assert "Failed to convert. This is step 3/3 of exporting" in text


PAIR_SOURCE = """\
import sys
import torch
from onnxscript import opset18 as op


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        h = self.fc(x)
        return torch.nn.functional.gelu(h, approximate="tanh").sum(-1)  # GELU


def gelu_bad(x, approximate: str = "tanh"):
    return op.Mul(x, op.Sigmoid(x))   # x * sigmoid(x): not gelu


torch.manual_seed(0)
model = Net().eval()
x = torch.randn(4, 8)
how = sys.argv[1]
if how == "eager":
    model(x)
else:
    table = {torch.ops.aten.gelu.default: gelu_bad} if how == "bad" else None
    program = torch.onnx.export(model, (x,), dynamo=True, verbose=False,
                                custom_translation_table=table)
    program(x)
"""


@pytest.fixture(scope="module")
def pair_runs(runs, tmp_path_factory):
    """The same program three ways: exported to ONNX with torch's gelu, with
    a wrong custom gelu, and run eagerly."""
    program = tmp_path_factory.mktemp("onnx-pair") / "pair.py"
    program.write_text(PAIR_SOURCE)
    return {how: str(graphdbg_run(runs, f"graphdbg views onnx pair {how}", program, how))
            for how in ("good", "bad", "eager")}


@group("export-views-pair")
def test_graphdbg_diff_pairs_an_onnx_graph_with_its_counterpart(pair_runs, tmp_path):
    from graphdbg.analysis.diff import diff_runs
    from graphdbg.tui.model.diff import DiffModel
    d = diff_runs(pair_runs["good"], pair_runs["bad"])
    (e,) = d.exports
    assert (e.kind, e.function, e.a, e.b) == ("onnx", "Net (torch.onnx.export)", 1, 1)
    # found at its line: the export call in the program
    export_line = next(i for i, text in enumerate(PAIR_SOURCE.splitlines(), 1)
                       if "torch.onnx.export(" in text)
    assert (os.path.basename(e.file), e.line) == ("pair.py", export_line)
    assert [c["node"] for c in e.ops_changed] == ["gelu"]
    assert e.ops_changed[0]["a"] != e.ops_changed[0]["b"] and "Sigmoid" in e.ops_changed[0]["b"]
    # ONNX Runtime's values part at gelu, where eager agrees: the translation differs
    assert e.value["node"] == "gelu" and e.value["call"] == 0 and not e.value["eager_differs"]
    assert e.first_divergent == (None, "gelu") and d.differs
    doc = d.as_dict()["exports"][0]
    assert doc["value"]["node"] == "gelu" and doc["first_divergent"] == [None, "gelu"]
    # the same run against itself: paired, nothing differs
    same = diff_runs(pair_runs["good"], pair_runs["good"])
    assert same.exports[0].value is None and not same.differs
    assert "exports" in same.as_dict()

    # against the eager run: the ONNX program ran the forward's lines in A; no counterpart
    d = diff_runs(pair_runs["good"], pair_runs["eager"])
    (e,) = d.exports
    assert (e.a, e.b, e.opset[1]) == (1, None, None) and e.opset[0] is not None
    forward = {i for i, text in enumerate(PAIR_SOURCE.splitlines(), 1)
               if text.strip().startswith(("h = self.fc(x)", "return torch.nn.functional.gelu"))}
    assert {c.line for c in d.compiled_in_one_run} == forward
    assert {c.kind for c in d.compiled_in_one_run} == {"onnx"}
    assert all(c.compiled_in == "A" for c in d.compiled_in_one_run)
    assert d.compiled_in_one_run[0].as_dict()["kind"] == "onnx"
    # an ONNX graph never meets a compiled graph: the TUI sample's are compiled
    sample = write_sample_run(tmp_path, 5)
    d = diff_runs(pair_runs["good"], str(sample))
    assert [(e.kind, e.a, e.b) for e in d.exports] == [("onnx", 1, None)]
    # runs without exports have no `exports` key
    assert "exports" not in diff_runs(str(sample), str(sample)).as_dict()

    # the TUI's runs diff: one row for the pair, its status and first differing node
    with Run(pair_runs["good"]) as a, Run(pair_runs["bad"]) as b:
        model = DiffModel.for_runs(a, b)
        model.load_more()
        (row,) = [r for r in model.rows if r.key.startswith("export:")]
        assert row.status == "values" and row.differs and row.cells[-1] == "gelu"
        assert row.cells[1] == "ONNX graph 1/1: Net (torch.onnx.export)"
        detail = model.detail(row)
        assert detail[-1].startswith("ONNX Runtime values differ first at gelu (call 0")
        assert detail[-1].endswith("eager there agrees: the translation")
    with Run(pair_runs["good"]) as a, Run(pair_runs["eager"]) as b:
        model = DiffModel.for_runs(a, b)
        model.load_more()
        statuses = {r.cells[2] for r in model.rows}
        assert "only in B (ONNX in A: graph 1)" in statuses and "only in A" in statuses


CASES_PROGRAM = EXPORTS / "export_cases.py"


@group("export-cases")
def test_the_graphs_of_a_run_with_torch_export_and_onnx_exports(runs):
    """tests/support/exports/export_cases.py (the run tests/e2e/test_exports.py
    reads): torch.export and ONNX graphs side by side, a size fixed."""
    with Run(str(runs.program(CASES_PROGRAM).ok().run)) as run:
        graphs = run.graphs()
        assert {g.kind for g in graphs} == {"export", "onnx"}
        columns = m.graph_columns(graphs)
        cells = {g.id: dict(zip((k for k, _ in columns), m.graph_cells(g, columns)))
                 for g in graphs}
        for g in graphs:
            c = cells[g.id]
            assert c["kind"] == g.kind and c["compile_id"] == "-"
            assert c["backend"] == ("torch.export" if g.kind == "export" else
                                    f"onnx (opset {g.export['opset']})")
            assert not c["function"].endswith(")")       # the model: the kind says the rest
        (rows,) = [g for g in graphs if g.line == marker(CASES_PROGRAM, "AUTO_CALL")]
        text = m.export_summary(run, rows)
        assert text.startswith(f"torch.export: graph {rows.id} is Rows exported by "
                               f"torch.export.export at export_cases.py:{rows.line} (non-strict)")
        assert text.endswith(f"dynamic: x.size()[0] (Dim.AUTO); specialised: x.size()[0] = 4 at "
                             f"export_cases.py:{marker(CASES_PROGRAM, 'FIXES_BATCH')} "
                             f"(declared Dim.AUTO)")
        spec = [f for f in run.findings() if f.kind == "export_specialized"]
        assert spec and all(m.ProblemsModel.cells(f)[1] == "fixed at export" for f in spec)
        src = m.SourceModel(run, run.findings())
        marks = {r.line: r.marks for r in src.load(str(CASES_PROGRAM))}
        assert "X" in marks[marker(CASES_PROGRAM, "FIXES_BATCH")]
