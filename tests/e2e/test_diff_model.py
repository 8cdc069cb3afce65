"""The diff view (issue 10): `tui/model/diff.py` without a terminal, and
`DiffScreen` driven by Pilot at 80x24 on a minimal App. Run files are
written with RunWriter: no torch, no compiles."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import pytest

from graphdbg.runfile.query import Run
from graphdbg.runfile.records import NodeRow, NodeValueRow, OpRow
from graphdbg.runfile.writer import RunWriter

N_NODES = 30          # nodes of graph 1; node 20 is the first divergent one
FIRST = 20


def _stats(mean: float, nan: int = 0) -> str:
    return json.dumps({"shape": [4], "dtype": "float32", "min": mean - 1, "max": mean + 1,
                       "mean": mean, "std": 0.5, "norm": 2.0, "nan": nan, "inf": 0})


def write_graph_run(path: Path) -> str:
    w = RunWriter(str(path))
    fid = w.frame_id("/p/model.py", 10, "forward", code="y = f(x)")
    w.put_graph(1, compile_id="0/0", backend="inductor", code_name="forward",
                code_file="/p/model.py", code_line=5, status="compiled")
    for i in range(N_NODES):
        name = f"n{i}"
        w.add(NodeRow(1, i, name, "call_function", f"torch.op{i}", "[[4]]", '["float32"]',
                      fid, None, None, None, None))
        if i < FIRST:
            row = ("ok", None, "intermediate outputs (user)", 0.0, 0.0, 1e-9, 1e-9, _stats(i))
        elif i == FIRST:
            row = ("first divergent", "miscompile", "intermediate outputs (user)", 0.5, 0.25,
                   1e-9, 0.1, _stats(i + 0.5))
        elif i % 2:
            row = ("differs", "miscompile", "intermediate outputs (user)", 0.4, math.inf, 1e-9,
                   0.2, _stats(i + 0.4, nan=1))
        else:
            row = ("ok", None, "intermediate outputs (user)", 0.0, 0.0, 1e-9, 1e-9, _stats(i))
        status, kind, src, ma, mr, ef, cf, cstats = row
        w.add(NodeValueRow(1, 0, name, status, kind, src, ma, mr, ef, cf, _stats(i), cstats,
                           _stats(i)))
        # call 3 was recorded too: there only n5 differs (no localised node)
        status = "differs" if i == 5 else "ok"
        w.add(NodeValueRow(1, 3, name, status, None, "output", 0.0, 0.0, 1e-9, 1e-9,
                           _stats(i), _stats(i), _stats(i)))
    w.put_graph(2, compile_id="1/0", backend="inductor", code_name="g", status="compiled")
    w.close(status="complete")
    return str(path)


def write_ops_run(path: Path, ops: list[tuple]) -> str:
    """ops: (line, op, mean, time_ns)"""
    w = RunWriter(str(path))
    for seq, (line, op, mean, t) in enumerate(ops):
        fid = w.frame_id("/p/prog.py", line, "main", code=f"line {line}")
        w.add(OpRow(seq, op, "forward", "[[4]]", '["float32"]', f"[{_stats(mean)}]", t, fid,
                    None, None, None))
        w.add_op_summary(op, "forward", fid, None, t)
    w.close(status="complete")
    return str(path)


@pytest.fixture(scope="module")
def graph_run(tmp_path_factory):
    return write_graph_run(tmp_path_factory.mktemp("diff") / "g.run")


# -- the model -----------------------------------------------------------------------

def test_graph_model_pages_filters_and_finds_the_first_divergent(graph_run):
    from graphdbg.tui.model.diff import GRAPH_COLUMNS, DiffModel
    with Run(graph_run) as run:
        m = DiffModel.for_graph(run, 1, page_size=8)
        assert m.kind == "graph" and m.columns == GRAPH_COLUMNS
        assert "graph 1 (forward at model.py:5), call 0" in m.title
        assert m.total == N_NODES and not m.complete
        m.load_more()
        assert len(m.rows) == 8 and not m.wants_more(0) and m.wants_more(4)
        assert m.first_divergent() == FIRST
        m.extend(m.load_until(FIRST))
        assert len(m.rows) >= FIRST + 1
        row = m.rows[FIRST]
        assert row.status == "first divergent" and row.level == "error" and row.differs
        cells = dict(zip(GRAPH_COLUMNS, row.cells))
        assert cells["node"] == "n20" and cells["where"] == "model.py:10"
        assert cells["status"] == "first divergent (miscompile)"
        assert cells["max abs"] == "0.5" and cells["max rel"] == "0.25"
        assert cells["eager"].startswith("20±0.5") and cells["compiled"].startswith("20.5±0.5")
        assert m.rows[0].level == "success"
        detail = m.detail(row)
        assert detail[0] == ("n20 = torch.op20 at model.py:10, call 0: first divergent (miscompile), "
                             "compiled value from intermediate outputs (user)")
        assert detail[1].startswith("eager     float32[4] min 19 max 21 mean 20 std 0.5 norm 2")
        assert "max abs 0.5  max rel 0.25" in detail[2] and "rmse eager 1e-09" in detail[3]
        assert m.detail(None) == []
        while not m.complete:
            m.load_more()
        assert m.rows[21].cells[GRAPH_COLUMNS.index("max rel")] == "inf"
        assert "nan 1" in m.rows[21].cells[GRAPH_COLUMNS.index("compiled")]
        assert m.next_differing(FIRST) == 21 and m.next_differing(21, forward=False) == FIRST
        # only differing rows
        assert m.toggle_differing() is True
        assert m.rows == [] and m.total == 1 + (N_NODES - FIRST - 1 + 1) // 2
        m.load_more()
        assert all(r.differs for r in m.rows) and m.first_divergent() == 0
        assert "differing rows of 30" in m.status_line()
        assert m.toggle_differing() is False and m.total == N_NODES
        # the graph's other recorded call
        assert m.calls == [0, 3] and m.next_call() == 3 and m.rows == []
        assert m.title.endswith("call 3")
        m.reset()
        m.load_more()
        assert m.total == N_NODES and m.first_divergent() == 5 and m.rows[5].status == "differs"
        assert m.next_call() == 0 and m.title.endswith("call 0")
        m.reset()
        assert m.first_divergent() == FIRST


def test_graph_model_without_values_is_empty_with_a_reason(graph_run):
    from graphdbg.tui.model.diff import DiffModel
    with Run(graph_run) as run:
        m = DiffModel.for_graph(run, 2)
        assert m.total == 0 and m.load_more() == [] and m.first_divergent() is None
        assert "no per-node values" in m.empty_message
        # no graph given: the first with values
        assert DiffModel.for_graph(run, None).total == N_NODES


def test_runs_model_aligns_by_line_and_op_with_time_and_value_differences(tmp_path):
    from graphdbg.tui.model.diff import RUNS_COLUMNS, DiffModel
    a = write_ops_run(tmp_path / "a.run", [(10, "aten.mm", 1.0, 1000), (11, "aten.add", 2.0, 500),
                                           (10, "aten.mm", 1.0, 1000), (11, "aten.add", 2.0, 500),
                                           (12, "aten.relu", 0.0, 100), (14, "aten.sin", 0.0, 10),
                                           (14, "aten.sin", 0.0, 10)])
    # B: the same ops; the second add differs in value; one extra op at line 13; no relu
    b = write_ops_run(tmp_path / "b.run", [(10, "aten.mm", 1.0, 3000), (13, "aten.mul", 0.0, 50),
                                           (11, "aten.add", 2.0, 400), (10, "aten.mm", 1.0, 3000),
                                           (11, "aten.add", 2.5, 400), (14, "aten.sin", 0.0, 10)])
    with Run(a) as ra, Run(b) as rb:
        m = DiffModel.for_runs(ra, rb)
        assert m.kind == "runs" and m.total == 5
        m.load_more()
        rows = {r.cells[0] + " " + r.cells[1]: dict(zip(RUNS_COLUMNS, r.cells)) for r in m.rows}
        mm = rows["prog.py:10 aten.mm"]
        assert (mm["n A"], mm["n B"], mm["status"]) == ("2", "2", "same")
        assert mm["time A"] == "2.0µs" and mm["time B"] == "6.0µs" and mm["Δ time"] == "4.0µs"
        add = rows["prog.py:11 aten.add"]
        assert add["status"] == "values" and add["first at"] == "#1" and float(add["max rel"]) > 0.1
        assert rows["prog.py:12 aten.relu"]["status"] == "only in A"
        assert rows["prog.py:13 aten.mul"]["status"] == "only in B"
        assert rows["prog.py:14 aten.sin"]["status"] == "count"
        add_row = next(r for r in m.rows if r.cells[1] == "aten.add")
        assert (add_row.item.what, add_row.item.first_k, add_row.item.n_b) == ("values", 1, 2)
        assert m.detail(add_row) == [
            "aten.add (forward) at prog.py:11: values", "A: 2 ops, 1.0µs   B: 2 ops, 0.8µs   B-A -0.2µs",
            "first differing occurrence #1, largest relative difference " + add["max rel"]]
        assert [r.cells[1] for r in m.rows][:3] == ["aten.mm", "aten.add", "aten.relu"]
        assert m.rows[m.first_divergent()].cells[1] == "aten.add"
        m.toggle_differing()
        m.load_more()
        assert [r.cells[1] for r in m.rows] == ["aten.add"] and m.first_divergent() == 0


# -- the screen ------------------------------------------------------------------------

def _text(app) -> str:
    return "\n".join("".join(seg.text for seg in strip)
                     for strip in app.screen._compositor.render_strips())


def test_diff_screen_keys(graph_run):
    from graphdbg.tui.model.diff import DiffModel
    from graphdbg.tui.views.theme import level_style
    from graphdbg.tui.views.diff import DiffScreen
    from rich.style import Style
    from textual.app import App
    from textual.widgets import DataTable

    class Host(App):
        def compose(self):
            return []

    async def settle(app, pilot):
        for _ in range(4):
            await app.workers.wait_for_complete()
            await pilot.pause()

    async def main():
        with Run(graph_run) as run:
            app = Host()
            async with app.run_test(size=(80, 24)) as pilot:
                screen = DiffScreen(DiffModel.for_graph(run, 1, page_size=8))
                app.push_screen(screen)
                await settle(app, pilot)
                table = screen.query_one("#diff-table", DataTable)
                assert table.row_count == 8 and "8/30 rows" in _text(app)
                assert "Eager vs compiled: graph 1" in _text(app)
                # a page read twice (paging and a jump at once) is shown once
                again = screen.model.fetch(4, 8)
                screen.post_message(DiffScreen.Page(again, screen._generation, False, offset=4))
                await settle(app, pilot)
                assert table.row_count == 12 and [r.key for r in screen.model.rows] == \
                    [f"n{i}" for i in range(12)]
                await pilot.press("g")               # loads pages up to the divergent node
                await settle(app, pilot)
                assert table.cursor_row == FIRST and screen.current_row().status == "first divergent"
                # colours are the theme's, never hard-coded
                theme = app.current_theme
                assert level_style(app, "error") == Style(color=theme.error, bold=True)
                assert level_style(app, "warning") == Style(color=theme.warning, bold=False)
                assert level_style(app, "success") == Style(color=theme.success, bold=False)
                assert level_style(app, None) is None
                status = table.get_row_at(FIRST)[screen.model.columns.index("status")]
                assert status.style == level_style(app, "error")
                assert "n20" in _text(app)
                assert "n20 = torch.op20 at model.py:10, call 0: first divergent" in _text(app)  # detail pane
                await pilot.press("n")
                assert table.cursor_row == 21
                await pilot.press("N")
                assert table.cursor_row == FIRST
                await pilot.press("f")               # differing only
                await settle(app, pilot)
                assert all(r.differs for r in screen.model.rows) and table.row_count == 6
                assert "differing rows of 30" in _text(app)
                await pilot.press("g")
                await settle(app, pilot)
                assert table.cursor_row == 0
                await pilot.press("f")
                await settle(app, pilot)
                assert screen.model.total == N_NODES and table.row_count == 8
                # scrolling down fetches the next page
                for _ in range(7):
                    await pilot.press("down")
                await settle(app, pilot)
                assert table.row_count > 8
                await pilot.press("c")               # the other recorded call
                await settle(app, pilot)
                assert "graph 1 (forward at model.py:5), call 3" in _text(app)
                await pilot.press("g")
                await settle(app, pilot)
                assert table.cursor_row == 5 and screen.current_row().key == "n5"
                await pilot.press("escape")
                await pilot.pause()
                assert not isinstance(app.screen, DiffScreen)
    asyncio.run(main())


def test_diff_screen_empty_graph_says_why(graph_run, monkeypatch):
    from graphdbg.tui.model.diff import DiffModel
    from graphdbg.tui.views.diff import DiffScreen
    from textual.app import App
    monkeypatch.setenv("NO_COLOR", "1")

    class Host(App):
        def compose(self):
            return []

    async def main():
        with Run(graph_run) as run:
            app = Host()
            async with app.run_test(size=(80, 24)) as pilot:
                app.push_screen(DiffScreen(DiffModel.for_graph(run, 2)))
                for _ in range(3):
                    await app.workers.wait_for_complete()
                    await pilot.pause()
                assert "no per-node values" in _text(app)
                await pilot.press("g", "c")
                await app.workers.wait_for_complete()
                await pilot.pause()
                said = [n.message for n in app._notifications]
                assert "nothing diverges here" in said
                assert "no other call of this graph has per-node values" in said
    asyncio.run(main())
