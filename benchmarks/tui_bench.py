"""The terminal UI at scale, headless (Textual's test driver), on the
synthetic runs of query_bench.py ("small": 10k graph nodes, 100k eager ops;
"full": 100k graph nodes, 1M eager ops).

    python benchmarks/tui_bench.py [--rebuild]

Each measurement runs in a fresh process at 160x48:
- first paint: from creating the app to the problems table showing its rows;
- find: `/`, a query, Enter, until the cursor is on the first match
  (problems table, then a graph's node table);
- a page of nodes: opening a 1000-node graph's table, then PageDown until
  the next page of rows from SQLite is in the table (per page, median): the
  whole key press as the test driver sees it (it waits for the screen to
  settle, so it counts Textual's own rendering), and its two parts of ours,
  the page's SQL and putting its rows in the table;
- memory: peak RSS growth of the whole session, small against full (it
  should not grow with the run: everything is paged);
- in a real terminal (tmux, when installed; --no-tmux skips it): `graphdbg
  tui` as a user starts it, keys sent with send-keys, the screen read with
  capture-pane every few ms: first paint (from starting the command, Python's
  start and imports included), a find in a graph's nodes (the last key of
  the query to the one matching node shown) and PageDown through the nodes (a press to the screen
  changing, median and worst of 20 presses, some of which load a page);
  capture-pane itself costs a few ms, included.
Targets (issue 10): first paint <= 1 s, find <= 100 ms, a page <= 50 ms,
memory flat. Printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from query_bench import ensure  # noqa: E402  (the same synthetic runs)

SIZE = (160, 48)


def _rss_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


async def _until(pilot, done, timeout: float = 30.0) -> float:
    """Seconds until ``done()`` holds, pausing the app between checks."""
    t0 = time.perf_counter()
    while not done():
        if time.perf_counter() - t0 > timeout:
            raise TimeoutError("the UI never got there")
        await pilot.pause(0.002)
    return time.perf_counter() - t0


def _timed(cls, name: str, sink: list) -> None:
    """Wrap ``cls.name`` to append its wall time (ms) to ``sink``."""
    orig = getattr(cls, name)

    def wrapper(*args, **kwargs):
        t = time.perf_counter()
        try:
            return orig(*args, **kwargs)
        finally:
            sink.append((time.perf_counter() - t) * 1e3)

    setattr(cls, name, wrapper)


async def _session(path: str, first_paint_only: bool = False) -> dict:
    from textual.widgets import DataTable

    from graphdbg.tui.views import app as tui_app
    from graphdbg.tui.views.app import GraphdbgApp
    fetch_ms: list = []
    show_ms: list = []
    _timed(tui_app.m.NodePager, "fetch", fetch_ms)  # the SQL of one page (worker thread)
    _timed(tui_app.NodesScreen, "on_page_loaded", show_ms)  # its rows into the table (UI thread)
    out: dict = {}
    rss0 = _rss_kib()
    t0 = time.perf_counter()
    app = GraphdbgApp([path], cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        problems = app.screen.query_one("#problems-table", DataTable)
        await _until(pilot, lambda: problems.row_count > 0)
        out["first_paint_s"] = time.perf_counter() - t0
        if first_paint_only:
            # let the loads started at mount finish: leaving while a worker's
            # result is on its way fails in its handler (the widgets are gone)
            await app.workers.wait_for_complete()
            await pilot.pause()
            return out

        await pilot.press("slash")
        for ch in "divergence":
            await pilot.press(ch)
        t = time.perf_counter()
        await pilot.press("enter")
        await pilot.pause()
        out["find_problems_ms"] = (time.perf_counter() - t) * 1e3
        await pilot.press("escape")

        await pilot.press("2")
        graphs = app.screen.query_one("#graphs-table", DataTable)
        await _until(pilot, lambda: graphs.row_count > 0)
        t = time.perf_counter()
        await pilot.press("enter")
        screen_table = lambda: app.screen.query("#nodes-table")  # noqa: E731
        await _until(pilot, lambda: bool(screen_table()) and screen_table().first().row_count > 0)
        out["open_graph_ms"] = (time.perf_counter() - t) * 1e3
        nodes = screen_table().first()
        pages = []
        while len(pages) < 4:  # PageDown until a press brings the next page from SQLite
            before = nodes.row_count
            t = time.perf_counter()
            await pilot.press("pagedown")
            try:
                await _until(pilot, lambda: nodes.row_count > before, timeout=0.5)
            except TimeoutError:
                continue  # this press stayed within the rows already loaded
            pages.append((time.perf_counter() - t) * 1e3)
        out["page_ms"] = sorted(pages)[len(pages) // 2]
        out["page_sql_ms"] = sorted(fetch_ms)[len(fetch_ms) // 2]
        out["page_show_ms"] = sorted(show_ms)[len(show_ms) // 2]
        out["rows_loaded"] = nodes.row_count

        await pilot.press("slash")
        for ch in "relu":
            await pilot.press(ch)
        t = time.perf_counter()
        await pilot.press("enter")
        await pilot.pause()
        out["find_nodes_ms"] = (time.perf_counter() - t) * 1e3
    out["rss_growth_mib"] = (_rss_kib() - rss0) / 1024
    return out


def child(path: str, first_paint_only: bool = False) -> None:
    print(json.dumps(asyncio.run(_session(path, first_paint_only))))


class _Terminal:
    """`graphdbg tui PATH` in a detached tmux session at SIZE."""

    def __init__(self, path: str) -> None:
        import os
        import shlex
        import uuid
        self.name = f"graphdbg-bench-{uuid.uuid4().hex[:8]}"
        env = {**os.environ, "TERM": "xterm-256color"}
        env.pop("NO_COLOR", None)
        cmd = " ".join(shlex.quote(a) for a in (sys.executable, "-m", "graphdbg", "tui", path))
        subprocess.run(["tmux", "new-session", "-d", "-s", self.name, "-x", str(SIZE[0]),
                        "-y", str(SIZE[1]), cmd], env=env, check=True)

    def screen(self) -> str:
        return subprocess.run(["tmux", "capture-pane", "-p", "-e", "-t", self.name],
                              capture_output=True, text=True).stdout

    def key(self, *keys: str) -> None:
        subprocess.run(["tmux", "send-keys", "-t", self.name, *keys], check=True)

    def until(self, done, timeout: float = 30.0) -> tuple[float, str]:
        t0 = time.perf_counter()
        while True:
            screen = self.screen()
            if done(screen):
                return time.perf_counter() - t0, screen
            if time.perf_counter() - t0 > timeout:
                raise TimeoutError(f"the screen never got there:\n{screen[-2000:]}")
            time.sleep(0.002)

    def settle(self, quiet: float = 0.3) -> str:
        """Wait until the screen stops changing for `quiet` seconds."""
        last, since = self.screen(), time.perf_counter()
        while time.perf_counter() - since < quiet:
            time.sleep(0.01)
            now = self.screen()
            if now != last:
                last, since = now, time.perf_counter()
        return last

    def press(self, *keys: str) -> float:
        """Seconds from sending the keys to the screen changing."""
        before = self.screen()
        self.key(*keys)
        return self.until(lambda s: s != before, timeout=10)[0]

    def close(self) -> None:
        subprocess.run(["tmux", "kill-session", "-t", self.name], capture_output=True)


def in_terminal(path: str) -> dict:
    out: dict = {}
    t0 = time.perf_counter()
    term = _Terminal(path)
    try:
        term.until(lambda s: "malformed graph" in s)      # the problems table's rows
        out["first_paint_s"] = time.perf_counter() - t0
        term.settle()
        for _ in range(5):      # a key sent while the app still starts may be dropped
            term.key("2")
            try:
                term.until(lambda s: "forward_1 " in s, timeout=5)
                break
            except TimeoutError:
                continue
        term.settle()
        term.key("Enter")
        term.until(lambda s: "nodes 100 of" in s)
        term.settle()
        presses = []
        for _ in range(20):     # 20 screens of 44 rows: within the 1000-node graph
            presses.append(term.press("PageDown") * 1e3)
            term.settle(0.1)
        presses.sort()
        out["page_ms"] = presses[len(presses) // 2]
        out["page_worst_ms"] = presses[-1]
        # the filter runs as the query is typed: time the last key to the one match
        term.key("/")
        term.settle(0.2)
        term.key("-l", "divergen")
        term.settle(0.3)
        term.key("t")
        out["find_nodes_ms"] = term.until(
            lambda s: "nodes 1 of 1, matching 'divergent'" in s)[0] * 1e3
        term.key("q")
    finally:
        term.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rebuild", action="store_true")
    ap.add_argument("--no-tmux", action="store_true", help="skip the real-terminal figures")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--first-paint-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.first_paint_only)
        return
    for name in ("small", "full"):
        path = ensure(name, args.rebuild)
        proc = subprocess.run([sys.executable, __file__, "--child", str(path)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            print(name, "failed:", proc.stderr[-2000:], proc.stdout[-500:])
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        print(f"{name:5}  first paint {r['first_paint_s']:.2f} s  find (problems) "
              f"{r['find_problems_ms']:.0f} ms  open a 1000-node graph {r['open_graph_ms']:.0f} ms  "
              f"next page {r['page_ms']:.0f} ms (of which SQL {r['page_sql_ms']:.1f} ms, rows "
              f"into the table {r['page_show_ms']:.1f} ms)  find (nodes) {r['find_nodes_ms']:.0f} ms  "
              f"rows held {r['rows_loaded']}  RSS growth {r['rss_growth_mib']:.0f} MiB")
        if not args.no_tmux and shutil.which("tmux"):
            t = in_terminal(str(path))
            print(f"{name:5}  in tmux: first paint {t['first_paint_s']:.2f} s  PageDown through "
                  f"nodes {t['page_ms']:.0f} ms median, {t['page_worst_ms']:.0f} ms worst  "
                  f"find (nodes) {t['find_nodes_ms']:.0f} ms")


if __name__ == "__main__":
    main()
