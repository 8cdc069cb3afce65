"""The terminal UI driven by Textual's Pilot at 80x24, on a small run written
with RunWriter (tests/tui_sample.py): every view and binding.

Plain `asyncio.run` (no pytest-asyncio): `run_test` works under any loop."""

from __future__ import annotations

import asyncio
import re
import sys
import types
from pathlib import Path

import pytest
from conftest import group
from tui_sample import N_NODES, write_b_run, write_sample_run

from graphdbg.core.errors import GraphdbgError
from graphdbg.runfile.query import Graph

SIZE = (80, 24)
PAGE = 50  # rows per page of nodes: small, so that tests page quickly


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    return str(write_sample_run(tmp_path_factory.mktemp("tui")))


async def settle(app, pilot, rounds: int = 3) -> None:
    """Let workers finish and their messages be handled (a page may ask for
    the next one)."""
    for _ in range(rounds):
        await app.workers.wait_for_complete()
        await pilot.pause()


def drive(path: str | list, script, size=SIZE) -> None:
    from graphdbg.tui.views.app import GraphdbgApp

    async def main():
        app = GraphdbgApp(path if isinstance(path, list) else [path], cursor_blink=False,
                          page_size=PAGE)
        app.animation_level = "none"
        async with app.run_test(size=size) as pilot:
            await settle(app, pilot)
            await script(app, pilot)
    asyncio.run(main())


def text(app) -> str:
    """What the screen shows, as plain text."""
    return "\n".join("".join(seg.text for seg in strip)
                     for strip in app.screen._compositor.render_strips())


def active(app) -> str:
    return app.main.query_one("#views").active


def test_opens_on_problems_and_n_walks_them_from_any_view(sample):
    async def script(app, pilot):
        shown = text(app)
        assert "1 error, 2 warnings, 1 info · exit 0 (complete) · model.py" in shown
        assert "✖ error    divergence   model.py:9" in shown
        table = app.main.query_one("#problems-table")
        assert active(app) == "problems" and table.row_count == 4
        await pilot.press("n")
        assert table.cursor_row == 1
        assert "hint: Use torch.cond or move the branch out of the compiled region" in text(app)
        await pilot.press("N", "N")
        assert table.cursor_row == 3  # wraps
        await pilot.press("2")
        assert active(app) == "graphs"
        await pilot.press("n")  # from another view: back to problems, at the selected one
        assert active(app) == "problems" and table.cursor_row == 3
        await pilot.press("n")
        assert table.cursor_row == 0
    drive(sample, script)


def test_enter_opens_a_problem_detail_and_s_its_source(sample):
    async def script(app, pilot):
        await pilot.press("enter")
        await settle(app, pilot)
        assert type(app.screen).__name__ == "ProblemScreen"
        shown = text(app)
        assert "Problem 1 of 4: divergence at model.py:9" in shown
        assert "    9 │     return z.sin()" in shown
        assert "compiled vs float64  0.125" in shown
        await pilot.press("s")
        await settle(app, pilot)
        assert app.screen is app.main and active(app) == "source"
        src = app.main.query_one("#source-table")
        assert src.cursor_row == 8 and src.raw[8][1:] == ("9", "    return z.sin()")
        assert "model.py:9" in text(app)
        await pilot.press("enter")  # a line with a finding opens it
        await settle(app, pilot)
        assert type(app.screen).__name__ == "ProblemScreen"
        await pilot.press("escape")
        assert app.screen is app.main
    drive(sample, script)


def test_graphs_and_their_nodes_paged_and_sorted(sample):
    async def script(app, pilot):
        await pilot.press("2")
        graphs = app.main.query_one("#graphs-table")
        assert graphs.row_count == 2 and "block" in text(app) and "graph ▲" in text(app)
        await pilot.press("r")                                  # graphs sort too
        assert [r[0] for r in graphs.raw] == ["2", "1"] and "graph ▼" in text(app)
        await pilot.press("r")
        await pilot.press("enter")
        await settle(app, pilot)
        screen = app.screen
        assert type(screen).__name__ == "NodesScreen"
        table = screen.query_one("#nodes-table")
        # one page read: x, the graph's input, leads it and is shown after the ops
        assert table.row_count == PAGE - 1 and screen.pager.total == N_NODES
        assert f"nodes {PAGE - 1} of {N_NODES}; ops sorted by # ▲, then the inputs" in text(app)
        table.scroll_to(y=table.max_scroll_y, animate=False)             # the wheel: a page more
        await settle(app, pilot)
        assert table.row_count == 2 * PAGE - 1 and table.cursor_row == 0
        await pilot.press("ctrl+end")                                     # the cursor: one more
        await settle(app, pilot)
        assert table.row_count == 3 * PAGE - 1 and f"nodes {3 * PAGE - 1} of {N_NODES}" in text(app)
        await pilot.press("greater_than_sign", "greater_than_sign", "greater_than_sign")
        await settle(app, pilot)
        assert screen.pager.sort.column == "eager_ns" and screen.pager.sort.descending
        assert table.raw[0][1] == "node_007" and table.row_count == PAGE
        assert "eager time ▼" in text(app)
        await pilot.press("r")
        await settle(app, pilot)
        assert not screen.pager.sort.descending and table.raw[0][1] != "node_007"
        await pilot.click("#nodes-table", offset=(2, 0))  # the header of "#": graph order
        await settle(app, pilot)
        assert screen.pager.sort.column == "idx" and table.raw[0][:2] == ("1", "node_001")
        assert table.get_cell_at((7, 1)).style.bold      # node_008 has a finding
        assert not table.get_cell_at((6, 1)).style
        await pilot.press("enter")           # a node's detail, uncut
        await settle(app, pilot)
        assert type(app.screen).__name__ == "NodeScreen" and app.screen.node.name == "node_001"
        assert "target  operator.mul" in text(app) and "    6 │     z = y * scale" in text(app)
        await pilot.press("escape", "s")     # a node's source line
        await settle(app, pilot)
        assert active(app) == "source" and app.source.focus_line == 6
    drive(sample, script)


def test_a_checked_graphs_nodes_show_status_and_error_coloured_and_sort_by_them(tmp_path):
    from graphdbg.tui.views.theme import level_style
    path = str(write_sample_run(tmp_path, node_values=True))

    async def script(app, pilot):
        await pilot.press("2", "enter")          # graph 1: checked node by node
        await settle(app, pilot)
        screen, table = app.screen, app.screen.query_one("#nodes-table")
        assert [str(c.label).split(" ")[0] for c in table.columns.values()][:5] == [
            "#", "node", "status", "max", "max"]
        assert "first divergent" in text(app) and "0.125" in text(app)
        row_of = {n.name: i for i, n in enumerate(table.items)}
        for name, level in (("node_008", "error"), ("node_010", "warning"),
                            ("node_009", "success")):
            row = row_of[name]
            for col in (2, 3, 4):                 # status and both errors, by the theme
                assert table.get_cell_at((row, col)).style == level_style(app, level)
        await pilot.press("greater_than_sign", "greater_than_sign")   # # -> node -> status
        await settle(app, pilot)
        assert screen.pager.sort.column == "status" and screen.pager.sort.descending
        assert table.raw[0][1:3] == ("node_008", "first divergent")
        assert [r[2] for r in table.raw[1:5]] == ["differs"] * 4
        await pilot.press("greater_than_sign")    # max abs, largest first
        await settle(app, pilot)
        assert table.raw[0][3] == "0.125" and "max abs ▼" in text(app)
    drive(path, script)


def test_find_highlights_and_jumps_in_tables_and_filters_nodes(sample):
    async def script(app, pilot):
        table = app.main.query_one("#problems-table")
        await pilot.press("slash")
        assert app.focused.id == "find"
        await pilot.press(*"recom")
        assert table.cursor_row == 2 and table.find.matching_rows(table.raw) == [2]
        cell = table.get_cell_at((2, 1))
        assert any("reverse" in str(span.style) for span in cell.spans)  # highlighted
        await pilot.press("escape")
        assert app.focused is table
        await pilot.press("2", "enter")
        await settle(app, pilot)
        nodes = app.screen.query_one("#nodes-table")
        await pilot.press("slash", *"relu")
        await settle(app, pilot)
        assert app.screen.pager.total == len(range(0, N_NODES, 3))
        # a page read: x (an input, its target relu in this sample) comes after the ops
        assert nodes.row_count == PAGE - 1 and all(r[2] == "torch.relu" for r in nodes.raw)
        await pilot.press("escape", "escape")
        assert app.screen is app.main
    drive(sample, script)


def test_hot_spots_run_info_help_palette_and_quit(sample):
    async def script(app, pilot):
        await pilot.press("4")
        hot = app.main.query_one("#hot-nodes")
        assert active(app) == "hot" and hot.raw[0][2:4] == ("g1", "node_007")
        assert hot.raw[0][0] == "█" * 16
        ops = app.main.query_one("#hot-ops")
        ops.focus()
        await pilot.pause()
        await pilot.press("slash", *"gt.s", "escape")  # finds in the table that had the focus
        assert app.focused is ops and ops.raw[ops.cursor_row][2] == "aten.gt.Scalar"
        hot.focus()
        await pilot.pause()
        await pilot.press("enter")
        await settle(app, pilot)
        assert active(app) == "source" and app.source.focus_line == 6
        await pilot.press("5")
        await settle(app, pilot)   # the run's facts are read in a worker
        shown = text(app)
        assert "complete (the program ran to its end)" in shown
        assert "internal errors" in shown and "2.13.0" in shown
        await pilot.press("question_mark")
        assert type(app.screen).__name__ == "HelpScreen" and "next / previous problem" in text(app)
        await pilot.press("escape")
        assert app.screen is app.main
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"gbreak")
        await pilot.pause(0.2)
        await pilot.press("enter")
        await settle(app, pilot)
        assert type(app.screen).__name__ == "ProblemScreen"
        assert app.screen.finding.kind == "graph_break"
        await pilot.press("q")
        await pilot.pause()
        assert app.return_code == 0
    drive(sample, script)


def test_diff_key_mounts_the_diff_screen_or_says_it_is_missing(sample, monkeypatch):
    made = []

    class DiffModel:
        @classmethod
        def for_graph(cls, run, graph_id):
            made.append(graph_id)
            return cls()

    from textual.screen import Screen

    class DiffScreen(Screen):
        def __init__(self, model):
            super().__init__()
            self.model = model

    monkeypatch.setitem(sys.modules, "graphdbg.tui.model.diff",
                        types.SimpleNamespace(DiffModel=DiffModel))
    monkeypatch.setitem(sys.modules, "graphdbg.tui.views.diff",
                        types.SimpleNamespace(DiffScreen=DiffScreen))

    async def script(app, pilot):
        assert app.selected_graph_id() == 1          # the divergence's graph
        await pilot.press("d")
        await settle(app, pilot)
        assert type(app.screen).__name__ == "DiffScreen" and made == [1]
        await pilot.press("2", "down")
        assert isinstance(app.current_item(), Graph) and app.selected_graph_id() == 2
        await pilot.press("d")
        await settle(app, pilot)
        assert made == [1, 2]
    drive(sample, script)


def test_a_run_without_problems_or_sources(tmp_path):
    from graphdbg.runfile.writer import RunWriter
    w = RunWriter(str(tmp_path / "empty.run"))
    w.set_meta(argv=["x.py"], status="running")
    w.close(exit_status=1, status="failed")

    async def script(app, pilot):
        assert "no problems · exit 1 (failed)" in text(app)
        await pilot.press("n", "s", "3", "4", "5", "d")
        await settle(app, pilot)
        assert "failed" in text(app)
    drive(str(tmp_path / "empty.run"), script)


def test_a_bad_file_fails_before_the_app_starts(tmp_path):
    from graphdbg.tui.views.app import GraphdbgApp, run_tui
    bad = tmp_path / "bad.run"
    bad.write_text("not sqlite")
    with pytest.raises(GraphdbgError, match="is not a graphdbg run file"):
        run_tui([str(bad)])
    with pytest.raises(GraphdbgError, match="no such run file"):
        GraphdbgApp([str(tmp_path / "missing.run")])


def test_keys_typed_in_the_find_bar_are_text_not_bindings(sample):
    async def script(app, pilot):
        await pilot.press("3")
        await settle(app, pilot)
        await pilot.press("slash", *"sin", "d", "q", "n")   # s, d, q and n are bindings elsewhere
        assert app.focused.id == "find" and app.focused.value == "sindqn"
        assert app.screen is app.main and active(app) == "source" and app.return_code is None
        for _ in "dqn":
            await pilot.press("backspace")
        src = app.main.query_one("#source-table")
        assert src.raw[src.cursor_row][2] == "    return z.sin()"   # the first match
        await pilot.press("enter")                                  # the next one wraps
        assert src.raw[src.cursor_row][2] == "    return z.sin()"
        assert not app.focused.cursor_blink
    drive(sample, script)


def test_no_color_and_two_runs(sample, monkeypatch):
    made = []

    class DiffModel:
        @classmethod
        def for_runs(cls, a, b):
            made.append((a.path, b.path))
            return cls()

    from textual.screen import Screen

    class DiffScreen(Screen):
        def __init__(self, model):
            super().__init__()

    monkeypatch.setitem(sys.modules, "graphdbg.tui.model.diff",
                        types.SimpleNamespace(DiffModel=DiffModel))
    monkeypatch.setitem(sys.modules, "graphdbg.tui.views.diff",
                        types.SimpleNamespace(DiffScreen=DiffScreen))
    monkeypatch.setenv("NO_COLOR", "1")

    async def script(app, pilot):
        assert app.no_color
        await pilot.press("5")
        assert "run A" in text(app)    # both runs' info, A's first
        assert "run B" in [r[0] for r in app.main.query_one("#info-table").raw]
        await pilot.press("d")
        await settle(app, pilot)
        assert made == [(sample, sample)], [n.message for n in app._notifications]
        assert type(app.screen).__name__ == "DiffScreen"
    drive([sample, sample], script)


def test_d_with_the_real_diff_view(sample):
    pytest.importorskip("graphdbg.tui.views.diff")

    async def script(app, pilot):
        await pilot.press("d")   # the divergence's graph: this run kept no per-node values
        await settle(app, pilot)
        pushed = type(app.screen).__name__ == "DiffScreen"
        said = [n.message for n in app._notifications if n.message.startswith("diff:")]
        assert pushed or said, "d neither opened the diff view nor said why"
        await pilot.press("escape", "1")
        assert app.screen is app.main and active(app) == "problems"
    drive(sample, script)


def test_paths_that_look_like_markup_are_shown_as_text(tmp_path):
    path = str(write_sample_run(tmp_path / "[bold]runs[/bold]"))

    async def script(app, pilot):
        await pilot.press("3")
        await settle(app, pilot)
        assert "[bold]runs[/bold]/model.py" in text(app)   # the source title, verbatim
        await pilot.press("2", "enter")
        await settle(app, pilot)
        assert "graph 1 block at model.py:4" in text(app)
    drive(path, script, size=(160, 24))


def test_a_run_still_being_written_opens_with_what_is_there(tmp_path):
    # the writer is still open (the program runs): what it committed is shown
    from graphdbg.runfile.writer import RunWriter
    w = RunWriter(str(tmp_path / "live.run"), commit_interval=0.0)
    w.set_meta(argv=["train.py"], module=False)
    frame = w.frame_id(str(tmp_path / "train.py"), 3, "main")
    w.diagnostic("b", kind="graph_break", severity="warning", message="graph break: live one",
                 user_frame=frame)
    w.flush()
    try:
        async def script(app, pilot):
            shown = text(app)
            assert "graph break: live one" in shown and "train.py:3" in shown
            await pilot.press("5")
            await settle(app, pilot)
            assert "running" in text(app)
        drive(str(tmp_path / "live.run"), script)
    finally:
        w.close(exit_status=0, status="complete")


# -- an ONNX export (a real run of tests/support/exports/onnx_translation.py) ---------

ONNX_PROGRAM = Path(__file__).resolve().parents[1] / "support" / "exports" / "onnx_translation.py"
ONNX_GRAPH = group("export-translation")


@pytest.fixture(scope="module")
def onnx_path(runs) -> str:
    """`graphdbg run` of the program, once per session (`runs.program`: the
    run tests/e2e/test_exports.py and tests/e2e/test_tui_model.py read)."""
    return str(runs.program(ONNX_PROGRAM).ok().run)


def marker_line(name: str) -> int:
    (line,) = [i for i, t in enumerate(ONNX_PROGRAM.read_text().splitlines(), 1)
               if f"# {name}" in t]
    return line


@ONNX_GRAPH
def test_an_onnx_graph_in_the_graphs_nodes_and_node_views(onnx_path):
    async def script(app, pilot):
        await pilot.press("2")
        graphs = app.main.query_one("#graphs-table")
        labels = [str(c.label).split(" ")[0] for c in graphs.columns.values()]
        assert labels[:3] == ["graph", "kind", "compile"]
        row = dict(zip(labels, graphs.raw[0]))
        assert row["kind"] == "onnx" and row["function"] == "Block"
        assert graphs.raw[0][-1] == "onnx (opset 20)"
        assert re.search(r" 1 +onnx +- +Block +onnx_translation.py:", text(app))  # on screen
        await pilot.press("enter")
        await settle(app, pilot)
        assert type(app.screen).__name__ == "NodesScreen"
        shown = text(app)
        assert "graph 1 Block (torch.onnx.export) at onnx_translation.py:" in shown
        assert "ONNX: graph 1 is Block exported by torch.onnx.export" in shown
        line = str(app.screen.query_one("#nodes-compile").render())   # wrapped on screen
        assert ": opset 20, " in line and "checked against eager in onnxruntime" in line
        table = app.screen.query_one("#nodes-table")
        assert "ORT↔f64" in [str(c.label) for c in table.columns.values()]
        gelu = [r[1] for r in table.raw].index("gelu")
        table.move_cursor(row=gelu, animate=False)
        await pilot.press("enter")
        await settle(app, pilot)
        assert type(app.screen).__name__ == "NodeScreen"
        shown = text(app)
        # the program's own gelu translation: Mul, Add and Tanh nodes, in ONNX's order
        ops = re.search(r"onnx ops  ((?:\w+, )+\w+)", shown)
        assert ops and set(ops[1].split(", ")) == {"Mul", "Add", "Tanh"}, shown
        assert f"{marker_line('GELU_LINE'):>6} │" in shown
        await pilot.press("s")                      # the node's line in the source
        await settle(app, pilot)
        assert app.source.focus_line == marker_line("GELU_LINE")
        gutter = app.main.query_one("#source-table").raw
        assert gutter[marker_line("EXPORT_CALL") - 1][0].startswith("exp g1")
    drive(onnx_path, script, size=(100, 30))


@ONNX_GRAPH
def test_d_on_an_onnx_graph_is_eager_against_onnx_runtime(onnx_path):
    async def script(app, pilot):
        await pilot.press("2", "d")
        await settle(app, pilot)
        assert type(app.screen).__name__ == "DiffScreen"
        shown = text(app)
        assert "Eager vs ONNX Runtime: graph 1" in shown and "Eager vs compiled" not in shown
        table = app.screen.query_one("#diff-table")
        labels = app.screen.model.columns           # the columns; those that fit shown
        assert "ONNX Runtime" in labels and "ORT↔f64" in labels and "compiled" not in labels
        assert "ONNX Runtime" in [str(c.label) for c in table.columns.values()]
        await pilot.press("g")                       # the first divergent node
        await settle(app, pilot)
        row = app.screen.current_row()
        assert row.key == "gelu" and table.cursor_row == app.screen.model.rows.index(row)
        detail = str(app.screen.query_one("#diff-detail").render())
        assert "first divergent (miscompile), ONNX Runtime's value" in detail
        assert "ORT       float32[4, 32]" in detail
    drive(onnx_path, script, size=(160, 30))


@ONNX_GRAPH
def test_an_onnx_divergence_detail_shows_its_onnx_ops_and_opset(onnx_path):
    async def script(app, pilot):
        table = app.main.query_one("#problems-table")
        assert "divergence" in table.raw[0][1] and table.raw[0][2].endswith(
            f":{marker_line('GELU_LINE')}")
        await pilot.press("enter")
        await settle(app, pilot)
        shown = text(app)
        ops = re.search(r"ONNX ops  ((?:\w+, )+\w+)", shown)
        assert ops and set(ops[1].split(", ")) == {"Mul", "Add", "Tanh"}, shown
        assert "opset  20" in shown and "ONNX RT vs float64" in shown
        assert "exported  torch.onnx.export" in shown
    drive(onnx_path, script, size=(100, 50))


# -- two runs open (`graphdbg tui A.run B.run`) ---------------------------------------

@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> tuple[str, str]:
    root = tmp_path_factory.mktemp("two")
    return str(write_sample_run(root / "a")), write_b_run(root / "b")


def test_two_runs_say_so_and_show_both_runs_problems(two_runs):
    a, b = two_runs

    async def script(app, pilot):
        shown = text(app)
        # the header: two runs, A the reference, each one's problems, stance, file, command
        assert "Two runs  A (the reference): 1 error, 2 warnings, 1 info · exit 0 (complete)" \
            in shown
        assert "           B (stance default): 1 error, 1 warning · exit 1 (failed)" in shown
        header = str(app.main.query_one("#status").render())   # the paths, cut on screen
        assert re.search(r"Two runs +A .* · \S*a/sample\.run · model\.py --epochs 1\n +B .* · "
                         r"\S*b/compiled\.run · train\.py --compiled$", header), header
        table = app.main.query_one("#problems-table")
        # both runs' problems, by severity, each marked with its run and its file:line
        assert table.row_count == 6
        assert [r[0] for r in table.raw] == ["A", "B", "A", "A", "B", "A"]
        assert table.raw[1][1:4] == ("✖ error", "runtime error", "train.py:5")
        assert table.raw[4][1:4] == ("▲ warning", "graph break", "train.py:4")
        assert "B    ▲ warning  graph break    train.py:4" in shown
        await pilot.press("n")                     # n walks into B's problems too
        assert table.cursor_row == 1
        await pilot.press("enter")                 # B's problem: its detail, B's snapshot
        await settle(app, pilot)
        shown = text(app)
        assert "Problem 2 of 6, run B (compiled.run): runtime error at train.py:5" in shown
        assert "5 │     return y.item()      # B's runtime error" in shown
        await pilot.press("s")                     # and its source: B's file
        await settle(app, pilot)
        assert active(app) == "source" and app.source_run == 1
        assert app.main.query_one("#source-table").raw[4][2] == \
            "    return y.item()      # B's runtime error"
        assert "run B: " in text(app) and "train.py:5" in text(app)
        await pilot.press("up", "enter")           # line 4: B's graph break
        await settle(app, pilot)
        assert "Problem 5 of 6, run B (compiled.run): graph break at train.py:4" in text(app)
        await pilot.press("escape", "1")
        assert table.cursor_row == 4               # the problem the line opened
        table.move_cursor(row=0, animate=False)
        await pilot.press("enter")                 # A's error: A's own snapshot
        await settle(app, pilot)
        shown = text(app)
        assert "Problem 1 of 6, run A (sample.run): divergence at model.py:9" in shown
        assert "9 │     return z.sin()" in shown
        await pilot.press("s")
        await settle(app, pilot)
        assert app.source_run == 0 and app.source.file.endswith("model.py")
        await pilot.press("5")
        await settle(app, pilot)   # the run's facts are read in a worker
        shown = text(app)
        assert "run A" in shown and "run B" in shown and "train.py --compiled" in shown
    drive([a, b], script, size=(100, 30))


def test_one_run_has_no_run_column(sample):
    async def script(app, pilot):
        table = app.main.query_one("#problems-table")
        assert [str(c.label) for c in table.columns.values()] == ["sev", "kind", "where",
                                                                  "message"]
        assert "Two runs" not in text(app)
    drive(sample, script)


@group("divergence_faulty")
def test_two_real_runs_eager_reference_against_compiled(runs):
    """`graphdbg tui eager.run compiled.run` on real runs of one program
    (--stance force_eager, and compiled with aot_eager and a faulty pass; the
    same runs as tests/e2e/test_diff.py): the eager run has no problem, the
    compiled one's divergence is listed, marked B, at the program's line."""
    from conftest import AOT, GOLDEN_SAVE, SAMPLES, marked
    eager = runs.graphdbg("divergence_faulty", *AOT, *GOLDEN_SAVE,
                          opts=("--stance", "force_eager")).ok()
    compiled = runs.golden("divergence_faulty").ok()
    line = marked(SAMPLES / "divergence_faulty.py", "divergence")

    async def script(app, pilot):
        shown = text(app)
        assert re.search(r"Two runs +A \(the reference, stance force_eager\): no problems · "
                         r"exit 0 \(complete\) · ", shown), shown
        assert re.search(r"\n +B: (?!no problems)", shown), shown
        table = app.main.query_one("#problems-table")
        rows = [r for r in table.raw if r[2] == "divergence"]
        assert rows and all(r[0] == "B" for r in table.raw)
        assert rows[0][3] == f"divergence_faulty.py:{line}"
        table.move_cursor(row=table.raw.index(rows[0]), animate=False)
        await pilot.press("enter")
        await settle(app, pilot)
        shown = text(app)
        assert f", run B (divergence_faulty.run): divergence at divergence_faulty.py:{line}" \
            in shown
        assert "h = torch.tanh(h)" in shown
    drive([str(eager.run), str(compiled.run)], script, size=(120, 30))


def test_rows_painted_before_they_were_measured_are_shown_at_the_widths_after():
    """A page of rows that lands just before the screen repaints: Textual
    measures the rows on idle, after the paint cached them at the column's
    width before (the label's); they are painted again at the new width."""
    from textual.app import App

    from graphdbg.tui.views.widgets import FindTable

    class One(App):
        def compose(self):
            yield FindTable(id="t")

        def on_mount(self):
            self.query_one(FindTable).add_column("node", key="name")

    async def main():
        app = One()
        async with app.run_test(size=(40, 8)) as pilot:
            table = app.query_one(FindTable)
            await pilot.pause()
            table.append_rows([("node_001",), ("node_002",)])
            # a repaint before the table's idle: the row at the label's width
            assert "nod…" in "".join(seg.text for seg in table.render_line(1))
            await settle(app, pilot)
            assert "node_001" in text(app) and "nod…" not in text(app)
    asyncio.run(main())


def test_pilot_waits_for_a_worker_that_sleeps_and_for_a_resize():
    """tests/support/pilot_waits.py: a key's wait ends when its worker's
    result is on screen (a worker asleep looks idle to Textual's CPU-clock
    wait), a resize's when the screen has its new size (Textual handles it
    on a timer)."""
    import time

    from textual import work
    from textual.app import App
    from textual.widgets import Static

    class Slow(App):
        BINDINGS = [("x", "fetch")]

        def compose(self):
            yield Static("waiting", id="s")

        @work(thread=True)
        def action_fetch(self) -> None:
            time.sleep(0.3)
            self.call_from_thread(self.query_one("#s", Static).update, "fetched")

    async def main():
        app = Slow()
        async with app.run_test(size=(40, 5)) as pilot:
            await pilot.press("x")
            assert "fetched" in text(app)
            await pilot.resize_terminal(30, 4)
            assert app.screen.size == (30, 4) and len(text(app).splitlines()) == 4
    asyncio.run(main())
