"""Issue 33's terminal-UI items, each driven with Pilot on a run: Enter and
n/N in a problem's detail, a real graph's ops before its inputs, the diff's
line column and its columns from 80 to 160 wide, one figure for a
divergence in every view, each hint once, the problems painted before the
slower views are read. Real runs where the item is about what torch and
graphdbg write (the samples' shared runs, and one small program of
tests/tui_sample.py); the small written run where it is about the UI's
own bookkeeping."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import SAMPLES, group, marked
from test_tui_pilot import drive, settle, text
from tui_sample import write_random_program, write_sample_run

from graphdbg.core.format import num

TUI = Path(__file__).resolve().parents[2] / "tui"


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> str:
    return str(write_sample_run(tmp_path_factory.mktemp("first-hour")))


def test_no_module_of_the_tui_is_over_700_lines():
    long = {str(p.relative_to(TUI)): n for p in TUI.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 700}
    assert long == {}


# -- problems: Enter, n and N ----------------------------------------------------------

def test_enter_on_each_row_opens_that_rows_problem_numbered_as_the_list(sample):
    async def script(app, pilot):
        table = app.main.query_one("#problems-table")
        rows = list(table.raw)
        assert len(rows) == 4 and app.problems.findings[0].id != 1   # ids are not rows
        for i, (_, kind, where, _) in enumerate(rows):
            table.move_cursor(row=i, animate=False)
            await pilot.press("enter")
            await settle(app, pilot)
            assert app.screen.finding is app.problems.findings[i]
            assert f"Problem {i + 1} of 4: {kind} at {where}" in text(app)
            await pilot.press("escape")
            assert app.screen is app.main and table.cursor_row == i
    drive(sample, script)


def test_n_and_N_in_a_problems_detail_open_the_next_and_previous_detail(sample):
    async def script(app, pilot):
        table = app.main.query_one("#problems-table")
        await pilot.press("enter")
        await settle(app, pilot)
        seen = [app.screen.finding]
        for _ in range(4):
            await pilot.press("n")
            await settle(app, pilot)
            assert type(app.screen).__name__ == "ProblemScreen"
            seen.append(app.screen.finding)
        assert seen == [*app.problems.findings, app.problems.findings[0]]   # wraps
        assert "Problem 1 of 4: divergence at model.py:9" in text(app)
        await pilot.press("N")
        await settle(app, pilot)
        assert "Problem 4 of 4: divergence at model.py:5" in text(app)
        assert "precision: compiled is closer to float64" in text(app)   # its own detail
        await pilot.press("N")
        await settle(app, pilot)
        assert "Problem 3 of 4: recompile at model.py:6" in text(app)
        assert app.screen_stack[-2] is app.main     # one detail at a time, not a pile of them
        await pilot.press("escape")
        assert app.screen is app.main and table.cursor_row == 2   # the list, at that problem
    drive(sample, script)


# -- a real graph's nodes: its ops, then its inputs --------------------------------------

@group("divergence_faulty")
def test_a_real_graphs_ops_come_first_and_its_inputs_last_without_a_time(runs):
    run = runs.golden("divergence_faulty").ok().run

    async def script(app, pilot):
        await pilot.press("2", "enter")
        await settle(app, pilot)
        screen = app.screen
        table, pager = screen.query_one("#nodes-table"), screen.pager
        while not pager.complete:
            await pilot.press("ctrl+end")
            await settle(app, pilot)
        inputs = [n for n in table.items if n.op == "placeholder"]
        k = len(inputs)
        assert k == screen.graph.n_inputs > 20          # the model's parameters, and x
        assert all(n.op != "placeholder" for n in table.items[:-k])
        assert [n.idx for n in table.items[-k:]] == list(range(k))   # in graph order
        time = pager.column_index("eager_ns")
        assert {r[time] for r in table.raw[-k:]} == {"input"}
        assert table.raw[0][time].endswith(("µs", "ms"))                 # an op, timed
        assert f"ops sorted by # ▲, then its {k} inputs" in text(app)
        # room enough: every name whole, on screen too
        name = pager.column_index("name")
        assert [r[name] for r in table.raw] == [n.name for n in table.items]
        longest = max((n.name for n in inputs), key=len)
        assert len(longest) > 40
        table.move_cursor(row=table.row_count - 1, animate=False)
        await pilot.pause()
        assert longest in text(app)
        # on 80 columns the names are cut, the time column stays whole
        await pilot.resize_terminal(80, 24)
        await settle(app, pilot)
        assert "eager time" in text(app) and longest not in text(app)
        assert all(len(r[name]) <= 24 for r in table.raw)
        # slowest first: the ops by their time, the inputs still after them
        while pager.sort.column != "eager_ns":
            await pilot.press("greater_than_sign")
            await settle(app, pilot)
        while not pager.complete:
            await pilot.press("ctrl+end")
            await settle(app, pilot)
        ops = table.items[:-k]
        assert [n.op for n in table.items[-k:]] == ["placeholder"] * k
        timed = [n.eager_ns for n in ops if n.eager_ns is not None]
        assert timed == sorted(timed, reverse=True) and len(timed) > 10
    drive(str(run), script, size=(160, 40))


# -- the diff: a line column, columns that fit -------------------------------------------

async def _assert_columns_fit(app, pilot, table, first: list[str]) -> dict[int, list[str]]:
    """At 80 to 160 columns: the table's columns fit whole, each label on
    screen; the first ones always there. The labels at each width."""
    out = {}
    for width in (80, 100, 120, 140, 160):
        await pilot.resize_terminal(width, 30)
        await settle(app, pilot)
        labels = [str(c.label) for c in table.columns.values()]
        used = sum(c.get_render_width(table) for c in table.columns.values())
        assert used <= width - 2, (width, labels, used)
        assert labels[:len(first)] == first
        header = next(ln for ln in text(app).splitlines() if ln.lstrip().startswith(first[0]))
        assert all(label in header for label in labels), (width, header)
        out[width] = labels
    assert len(out[160]) > len(out[80])          # room: more of each row
    return out


@group("divergence_faulty")
def test_the_diff_names_each_nodes_line_and_fits_80_to_160_columns(runs):
    run = runs.golden("divergence_faulty").ok().run
    line = marked(SAMPLES / "divergence_faulty.py", "divergence")

    async def script(app, pilot):
        await pilot.press("2", "d")
        await settle(app, pilot)
        screen = app.screen
        assert type(screen).__name__ == "DiffScreen"
        table = screen.query_one("#diff-table")
        widths = await _assert_columns_fit(app, pilot, table, ["#", "node", "status", "where"])
        assert {"eager", "compiled"} <= set(widths[160]) and "eager" not in widths[80]
        await pilot.press("g")
        await settle(app, pilot)
        row = screen.current_row()
        assert row.status == "first divergent"
        assert dict(zip(screen.model.columns, row.cells))["where"] == \
            f"divergence_faulty.py:{line}"
        shown = text(app)
        assert f"divergence_faulty.py:{line}" in shown
        assert f"at divergence_faulty.py:{line}, call 0: first divergent" in shown
    drive(str(run), script, size=(160, 30))


@group("divergence_faulty")
def test_the_diff_of_two_real_runs_fits_80_to_160_columns(runs):
    from conftest import AOT, GOLDEN_SAVE
    eager = runs.graphdbg("divergence_faulty", *AOT, *GOLDEN_SAVE,
                          opts=("--stance", "force_eager")).ok()
    compiled = runs.golden("divergence_faulty").ok()

    async def script(app, pilot):
        await pilot.press("d")
        await settle(app, pilot)
        table = app.screen.query_one("#diff-table")
        await _assert_columns_fit(app, pilot, table, ["where", "op", "status"])
        assert all(":" in r.cells[0] for r in app.screen.model.rows[:5])   # file:line
    drive([str(eager.run), str(compiled.run)], script, size=(160, 30))


# -- a divergence's figures: one source, every view -------------------------------------

@pytest.fixture(scope="module")
def random_run(runs, tmp_path_factory) -> str:
    """A real run of tests/tui_sample.py's RANDOM_PROGRAM: a dropout whose
    stage-ladder compile and backend compile draw differently."""
    return str(runs.program(write_random_program(tmp_path_factory.mktemp("random"))).ok().run)


def test_a_divergence_reads_the_same_figure_in_its_detail_nodes_and_diff(random_run):
    from graphdbg.analysis.values import finding_value

    async def script(app, pilot):
        (f,) = app.problems.findings
        value = finding_value(app.run_a, f)
        figure = num(value.max_abs)
        # the finding's stage drew its own numbers (the case where views disagreed):
        # its figures are now those of the backend's compile, as the node values'
        assert num(f.detail.max_abs) == figure and f.detail.stage != "backend"
        await pilot.press("enter")
        await settle(app, pilot)
        lines = [ln.text for ln in app.screen.lines]
        assert (f"numbers (graph {value.graph_id}, call {value.call_idx}; compiled value from "
                f"intermediate outputs (backend))") in lines
        assert f"{'max abs':>20}  {figure}" in lines
        assert not any("own compile drew other values" in ln for ln in lines)
        assert f"max abs  {figure}" in text(app)
        await pilot.press("escape", "2", "enter")
        await settle(app, pilot)
        nodes = app.screen
        table = nodes.query_one("#nodes-table")
        (row,) = [r for r, n in zip(table.raw, table.items) if n.name == f.node]
        assert row[nodes.pager.column_index("max_abs")] == figure
        await pilot.press("d")
        await settle(app, pilot)
        diff = app.screen
        (at,) = [i for i, r in enumerate(diff.model.rows) if r.key == f.node]
        assert dict(zip(diff.model.columns, diff.model.rows[at].cells))["max abs"] == figure
        diff.query_one("#diff-table").move_cursor(row=at, animate=False)
        await pilot.pause()
        pane = str(diff.query_one("#diff-detail").render())
        assert f", call {value.call_idx}: differs (random)" in pane
        assert f"max abs {figure} " in pane
    drive(random_run, script, size=(120, 40))


# -- each thing once -------------------------------------------------------------------

@group("graph_breaks")
def test_each_problems_detail_says_its_hint_and_explanation_once(runs):
    run = runs.golden("graph_breaks").ok().run

    async def script(app, pilot):
        await pilot.press("enter")
        await settle(app, pilot)
        for _ in range(len(app.problems)):
            f = app.screen.finding
            lines = [ln.text for ln in app.screen.lines]
            parts = [*(f.hint or "").splitlines(), f.detail.explanation or ""]
            parts = [p.strip() for p in parts if p.strip()]
            assert parts
            for part in parts:
                assert sum(part in ln for ln in lines) == 1, (part, lines)
            # torch's own text says them too (else this test proves nothing); its
            # other lines stay, the page it links to among them
            assert all(p in f.reason for p in parts)
            assert "more from torch" in lines
            assert any("compile-graph-break-site" in ln for ln in lines)
            await pilot.press("n")
            await settle(app, pilot)
    drive(str(run), script, size=(120, 40))


# -- first paint -----------------------------------------------------------------------

def test_the_problems_are_on_screen_before_hot_spots_and_source_are_read(sample, monkeypatch):
    """The slower reads (hot spots sum every op and node; a source file and
    its gutter) start once the problems are painted: never before."""
    from graphdbg.tui.model import run as m
    seen: dict[str, tuple] = {}
    state: dict = {}
    hot_load, load_window = m.HotSpots.load.__func__, m.SourceModel.load_window

    def now() -> tuple:
        app = state["app"]
        return (app.main.query_one("#problems-table").row_count,
                str(app.main.query_one("#status").render()))

    def hot(cls, run, limit=50):
        seen["hot"] = now()
        return hot_load(cls, run, limit)

    def source(self, *args, **kwargs):
        seen["source"] = now()
        return load_window(self, *args, **kwargs)

    monkeypatch.setattr(m.HotSpots, "load", classmethod(hot))
    monkeypatch.setattr(m.SourceModel, "load_window", source)

    from graphdbg.tui.views import app as views
    mount = views.GraphdbgApp.on_mount

    def on_mount(self):
        state["app"] = self
        mount(self)
    monkeypatch.setattr(views.GraphdbgApp, "on_mount", on_mount)

    async def script(app, pilot):
        assert set(seen) == {"hot", "source"}
        for rows, status in seen.values():
            assert rows == 4 and status.startswith("1 error, 2 warnings, 1 info")
        assert app.main.query_one("#hot-nodes").row_count > 0
        assert app.source.file is not None
    drive(sample, script)
