"""`bench.py --only html`: the HTML page (`graphdbg report --html`, docs/html.md).

For the showcase (samples/showcase.py under `graphdbg run`, aot_eager) and for
a synthetic run of 100k nodes (10 graphs x 10,000 nodes with node times and
per-node values, written by hand: tests/support/htmlruns.py): the page's
size, its render time (`graphdbg.reporters.html.page`, the median of 3 in
this process) and the whole `graphdbg report --html` command (a fresh
process); and, where Debian's chromium, chromedriver and selenium are here,
the page's load time in headless chromium (navigation start to the load
event, median of 3 loads). Targets: the showcase under 2 MB (issue 35);
the 100k-node page under 1 MB and rendered within 2 s.

    python benchmarks/bench_html.py     # this section alone
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from benchlib import ROOT, Row, graphdbg_cmd, ms, progress, run_proc

sys.path.insert(0, str(ROOT / "tests" / "support"))



def _render(path: Path) -> tuple[int, float]:
    from graphdbg.reporters.html import page
    times, size = [], 0
    for _ in range(3):
        t = time.perf_counter()
        size = len(page(str(path)).encode())
        times.append(time.perf_counter() - t)
    return size, statistics.median(times)


def _browser(tmp: Path):
    from htmlruns import browser_missing, chromium
    return None if browser_missing() else chromium(tmp / "chromium")


def _load(driver, html: Path) -> float:
    """Navigation start to the load event, median of 3 loads, in seconds."""
    loads = []
    for _ in range(3):
        driver.get("about:blank")
        driver.get(html.resolve().as_uri())
        loads.append(driver.execute_script(
            "var n=performance.getEntriesByType('navigation')[0];return n.loadEventEnd;") / 1e3)
    return statistics.median(loads)


def section_html(rows: list, args, tmp: Path) -> None:
    from htmlruns import synthetic
    runs = {}
    progress("html: the showcase under graphdbg run (aot_eager)")
    show = tmp / "showcase.run"
    run_proc(graphdbg_cmd() + ["run", "-q", "-o", show, ROOT / "samples" / "showcase.py",
                               "--backend", "aot_eager"], str(tmp)).check()
    runs["showcase"] = (show, 2 * 2**20)
    big = tmp / "html-100k.run"
    t = time.perf_counter()
    synthetic(big, 10, 10_000)
    progress(f"html: synthetic run of 100k nodes written in {time.perf_counter() - t:.1f} s")
    runs["100k nodes"] = (big, 2**20)
    driver = _browser(tmp)
    try:
        for name, (path, cap) in runs.items():
            size, render = _render(path)
            out = tmp / f"{path.stem}.html"
            cli = run_proc(graphdbg_cmd() + ["report", "--html", out, path], str(tmp)).check()
            rows.append(Row("html", f"page of {name}: size", f"{size / 1024:.0f} kB", "",
                            f"< {cap // 1024} kB", size < cap, raw={"bytes": size}))
            rows.append(Row("html", f"page of {name}: render (in process)", ms(render), "",
                            "<= 2 s" if name != "showcase" else "", render <= 2.0
                            if name != "showcase" else None, raw={"render_s": render}))
            rows.append(Row("html", f"page of {name}: graphdbg report --html (process)",
                            ms(cli.wall_s), raw={"wall_s": cli.wall_s}))
            if driver is not None:
                load = _load(driver, out)
                rows.append(Row("html", f"page of {name}: load in headless chromium", ms(load),
                                raw={"load_s": load}))
        if driver is None:
            rows.append(Row("html", "load in headless chromium",
                            error="no /usr/bin/chromium, chromedriver or selenium here"))
    finally:
        if driver is not None:
            driver.quit()


if __name__ == "__main__":
    import tempfile
    with tempfile.TemporaryDirectory(prefix="graphdbg-bench-html-") as d:
        rows: list = []
        section_html(rows, None, Path(d))
    for r in rows:
        print(f"{r.what:<58} {r.figure or r.error:>12} {r.target}")
