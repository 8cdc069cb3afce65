"""`graphdbg tui` in a real terminal: tmux runs it at 120x40, keys are sent
as a user types them, and the screen is read back with capture-pane."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import uuid

import pytest

from conftest import ENV, SAMPLES, group

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


class Tmux:
    """One detached tmux session running a command; the screen as text."""

    def __init__(self, argv: list[str], cwd, width: int = 120, height: int = 40,
                 after: str = "") -> None:
        """``after``: shell text run once the command ends (its status is $?)."""
        self.name = f"graphdbg-test-{uuid.uuid4().hex[:8]}"
        env = {**ENV, "TERM": "xterm-256color", "COLUMNS": str(width), "LINES": str(height)}
        env.pop("NO_COLOR", None)
        command = " ".join(_quote(a) for a in argv) + after
        subprocess.run(["tmux", "new-session", "-d", "-s", self.name, "-x", str(width),
                        "-y", str(height), command], cwd=cwd, env=env, check=True)

    def screen(self) -> str:
        return subprocess.run(["tmux", "capture-pane", "-p", "-t", self.name],
                              capture_output=True, text=True).stdout

    def keys(self, *keys: str) -> None:
        for key in keys:
            subprocess.run(["tmux", "send-keys", "-t", self.name, key], check=True)
            time.sleep(0.2)

    def wait_for(self, text: str, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            if text in screen:
                return screen
            time.sleep(0.2)
        raise AssertionError(f"{text!r} never appeared on the screen:\n{screen}")

    def close(self) -> None:
        subprocess.run(["tmux", "kill-session", "-t", self.name], capture_output=True)


def _quote(arg: str) -> str:
    return "'" + str(arg).replace("'", "'\\''") + "'"


@pytest.fixture
def tui(tmp_path):
    opened: list[Tmux] = []

    def start(*paths) -> Tmux:
        t = Tmux([sys.executable, "-m", "graphdbg", "tui", *map(str, paths)], cwd=tmp_path)
        opened.append(t)
        return t

    yield start
    for t in opened:
        t.close()


@group("divergence_faulty")
def test_divergent_node_is_found_in_a_real_terminal(runs, tui):
    run = runs.golden("divergence_faulty").ok().run
    sample = SAMPLES / "divergence_faulty.py"
    (line,) = _expect_lines(sample, "divergence")
    t = tui(run)
    t.wait_for(f"divergence_faulty.py:{line}")  # problems first
    t.keys("Enter")  # the detail: source around the line (the problems view shows no code)
    code = sample.read_text().splitlines()[line - 1].split("#")[0].strip()
    screen = t.wait_for(code)
    assert f"divergence_faulty.py:{line}" in screen and "Problem 1 of 1: divergence" in screen
    t.keys("q")


@group("recompiles")
def test_recompile_guard_line_is_found_in_a_real_terminal(runs, tui):
    run = runs.golden("recompiles").ok().run
    sample = SAMPLES / "recompiles.py"
    t = tui(run)
    screen = t.wait_for("recompiles.py:")
    for line in _expect_lines(sample, "recompile"):
        assert f"recompiles.py:{line}" in screen
    assert "scale changed" in screen
    t.keys("q")


def _expect_lines(sample, kind: str) -> list[int]:
    return [i for i, text in enumerate(sample.read_text().splitlines(), 1)
            if f"graphdbg-expect: {kind}" in text]



def test_run_with_tui_opens_the_ui_when_the_program_ends(tmp_path):
    (tmp_path / "loop.py").write_text(
        "import torch\n"
        "def step(x, scale):\n"
        "    return x * scale  # the guard's line\n"
        "f = torch.compile(step, backend='eager', dynamic=False)\n"
        "for s in (1, 2):\n"
        "    f(torch.ones(2), s)\n"
        "raise SystemExit(3)\n")
    t = Tmux([sys.executable, "-m", "graphdbg", "run", "--tui", "-o", "loop.run", "loop.py"],
             cwd=tmp_path, after="; echo exit=$?; sleep 30")
    try:
        screen = t.wait_for("loop.py:3", timeout=60)
        assert "scale changed" in screen
        t.keys("q")
        t.wait_for("exit=3")  # the program's status, after the UI
    finally:
        t.close()
