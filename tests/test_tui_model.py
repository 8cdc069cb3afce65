"""The TUI's view state (graphdbg.tui.model.run), without a terminal: on a small
run written with RunWriter (tests/tui_sample.py) and on a real sample run."""

from __future__ import annotations

import re

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
    assert "graph 1 · node node_008 · op torch.sin" in text
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
        cells = dict(zip(keys, pager.cells(pager.rows[8]), strict=True))
        assert (cells["status"], cells["max_abs"], cells["max_rel"]) == ("first divergent",
                                                                        "0.125", "0.5")
        assert cells["value"].endswith("]") and pager.value_level(pager.rows[8]) == "error"
        assert pager.value_level(pager.rows[10]) == "warning"  # differs
        assert pager.value_level(pager.rows[9]) == "success"   # ok
        # a node without a value (graph 1 has values for nodes 1-29 only)
        assert pager.cells(pager.rows[40])[2:5] == ("-", "-", "-")
        assert pager.value_level(pager.rows[40]) is None

        # the status sorts most telling first; errors largest first, in SQL
        pager.sort.select("status")
        assert pager.sort.descending
        pager.reset()
        pager.extend(pager.fetch())
        statuses = [pager.values[n.idx].status for n in pager.rows[:7]]
        assert statuses == ["first divergent"] + ["differs"] * 4 + ["ok"] * 2
        assert pager.title().endswith("sorted by status ▼")
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
    assert len(added) == 200 and pager.total == N_NODES and not pager.complete
    assert [n.idx for n in pager.rows[:3]] == [0, 1, 2]
    assert not pager.wants_more(100) and pager.wants_more(170)
    pager.extend(pager.fetch())
    pager.extend(pager.fetch())
    assert pager.complete and [n.idx for n in pager.rows] == list(range(N_NODES))
    assert pager.top_ns == 90_000 and pager.heat(pager.rows[7]) == "hot"
    assert pager.heat(pager.rows[8]) is None

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
        n.eager_ns for n in run.nodes(1) if n.eager_ns is not None)
    assert "sorted by eager time ▲" in pager.title()
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
    # eager ref: the nodes' eager time (1.59 ms) against the fastest call (1 ms): not slower
    assert m.graph_cells(graphs[0]) == ("1", "0/0", "block", "model.py:4", "450", "1.25 s",
                                        "2", "1.50 ms", "1.59 ms", "inductor")
    assert graphs[0].compiled_slower is False and graphs[1].compiled_slower is None
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
        pager = m.NodePager(run, g.id, page_size=5, compile_id=g.compile_id)
        page = pager.fetch()
        pager.extend(page)
        assert len(pager.rows) == min(5, pager.total) and pager.total == run.node_count(g.id)
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
