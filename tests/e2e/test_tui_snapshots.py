"""SVG snapshots of every view of the terminal UI at 80x24 and 160x48
(pytest-textual-snapshot; `pytest --snapshot-update` accepts new ones after
looking at them). The run is tests/tui_sample.py's, written to a temporary
folder that is the current directory while the app runs, so the screens show
paths relative to it and do not depend on where the test ran; no clock is
shown and the cursor does not blink."""

from __future__ import annotations

from pathlib import Path

import pytest
from tui_sample import write_b_run, write_sample_run

pytestmark = pytest.mark.xdist_group("tui-snapshots")

SIZES = {"80x24": (80, 24), "160x48": (160, 48)}


@pytest.fixture(scope="module")
def sample_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tui-snapshots")
    write_sample_run(folder, node_values=True, cwd="/home/user/project")
    write_b_run(folder / "b")
    return folder


@pytest.fixture
def sample(sample_dir, monkeypatch) -> str:
    monkeypatch.chdir(sample_dir)
    return "sample.run"


def app_for(*paths: str):
    from graphdbg.tui.views.app import GraphdbgApp
    app = GraphdbgApp(list(paths), cursor_blink=False, page_size=50)
    app.animation_level = "none"
    return app


async def settle(pilot) -> None:
    for _ in range(3):
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()


VIEWS = {
    "problems": [],
    "problem-detail": ["enter"],
    "graphs": ["2"],
    "nodes": ["2", "enter"],
    "source": ["s"],
    "hot-spots": ["4"],
    "run-info": ["5"],
    "help": ["question_mark"],
    "find": ["2", "enter", "slash", "s", "i", "n"],
    "diff": ["2", "d"],
    "diff-differing": ["2", "d", "f"],
}


# every view at 80x24 (the smallest the UI is made for); at 160x48 the
# views whose layout changes with room (wider tables, detail panes)
WIDE = ("problems", "problem-detail", "nodes", "source", "diff")
CASES = [(v, "80x24") for v in VIEWS] + [(v, "160x48") for v in WIDE]


@pytest.mark.parametrize("view,size", CASES)
def test_view_snapshot(snap_compare, sample, view, size):
    keys = VIEWS[view]

    async def run_before(pilot) -> None:
        await settle(pilot)
        for key in keys:
            await pilot.press(key)
            await settle(pilot)

    assert snap_compare(app_for(sample), terminal_size=SIZES[size], run_before=run_before)


# two runs open (`graphdbg tui sample.run b/compiled.run`): the header a line a
# run, the problems of both with their run; B's problem opened from B's file
TWO_RUNS = {"two-runs-problems": [], "two-runs-problem-b": ["n", "enter"]}


@pytest.mark.parametrize("view", TWO_RUNS)
def test_two_runs_snapshot(snap_compare, sample, view):
    async def run_before(pilot) -> None:
        await settle(pilot)
        for key in TWO_RUNS[view]:
            await pilot.press(key)
            await settle(pilot)

    assert snap_compare(app_for(sample, "b/compiled.run"), terminal_size=SIZES["80x24"],
                        run_before=run_before)
