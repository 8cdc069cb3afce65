"""`graphdbg report --html` and `graphdbg run --html` (docs/html.md): the page
says what `graphdbg report` says, escapes every string of the run file, and
stays small on a run of 100k nodes. The browser's view: test_html_browser.py.

Runs shared: the showcase's and the demo's golden runs (`runs.golden`, as
test_report_demo and test_samples read them), one tiny program with markup in
its source run once under `graphdbg run --html`, and run files written by
hand (tests/support/htmlruns.py)."""

from __future__ import annotations

import re
import time
from html.parser import HTMLParser

import pytest
from htmlruns import EVIL, IMG, SCRIPT, synthetic
from rankfiles import AR, RELU, SUM, two_ranks

from graphdbg.core.format import at
from graphdbg.reporters.html import fragment, page

from conftest import graphdbg, group

EVIL_PROGRAM = f'''\
import torch


@torch.compile(backend="eager")
def f(x):
    x = x + 1
    print({SCRIPT!r}, {IMG!r})  # {EVIL}
    return x * 2


f(torch.ones(3))
'''


class Problems(HTMLParser):
    """The problems the page lists: (kind, where) of each div.problem, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, str]] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "div" and "problem" in (a.get("class") or "").split() and "data-where" in a:
            self.found.append((a["data-kind"], a["data-where"]))


def problems_of(html: str) -> list[tuple[str, str]]:
    p = Problems()
    p.feed(html)
    return p.found


def assert_offline(html: str) -> None:
    """Nothing the page would fetch: no src/href to another document, no
    <script>, <link>, <img>, <iframe>; only fragment links."""
    assert not re.search(r"<(script|link|img|iframe|object|embed|base)\b", html, re.I)
    assert not re.search(r"\s(src|srcset|action)\s*=|url\(|@import", html, re.I)
    assert all(h.startswith("#") for h in re.findall(r'href="([^"]*)"', html))


@group("showcase")
def test_the_showcase_page_lists_the_reports_problems(runs):
    r = runs.golden("showcase").ok()
    t = time.perf_counter()
    html = page(str(r.run))
    took = time.perf_counter() - t
    doc = r.doc   # `graphdbg report --json` of the same run
    want = [(d["kind"], at(d["file"], d["line"], d["cell"])) for d in doc["diagnostics"]]
    assert want and problems_of(html) == want
    assert len(html.encode()) < 2 * 2**20 and took < 5, (len(html), took)
    assert html.startswith("<!doctype html>") and "Content-Security-Policy" in html
    assert_offline(html)
    # each problem's file:line jumps to its source excerpt, the line marked
    for i, (_, where) in enumerate(want):
        assert re.search(rf'id="gdbg\w+-src-{i}-L"', html), where
    # the report's words: what to do, and the graph break's line of code
    assert "what to do:" in html and ".item()" in html
    assert "Compiled time per line" in html and "Graphs (4)" in html


@group("demo")
def test_the_demo_page_shows_the_first_divergent_node(runs):
    r = runs.golden("demo").ok()
    html = page(str(r.run))
    assert problems_of(html) == [(d["kind"], at(d["file"], d["line"], d["cell"]))
                                 for d in r.doc["diagnostics"]]
    assert "Eager vs compiled, node by node" in html
    assert re.search(r'<tr class="first-divergent"><td class="n">\d+</td><td>h</td>', html)
    assert "first divergent: h at demo.py:" in html


@pytest.fixture(scope="module")
def evil_run(runs, tmp_path_factory):
    """The tiny program with markup in its source, run once with --html."""
    path = tmp_path_factory.mktemp("evil") / "evil_source.py"
    path.write_text(EVIL_PROGRAM)
    return runs.program(path, "--html", "evil.html").ok()


def assert_escaped(html: str) -> None:
    assert "<script" not in html.lower() and "<img" not in html.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&quot;&gt;&lt;img src=x onerror=alert(1)&gt;" in html


def test_markup_in_a_programs_source_is_text(evil_run):
    html = (evil_run.dir / "evil.html").read_text()   # `graphdbg run --html` wrote it
    assert "graph_break" in [k for k, _ in problems_of(html)]
    assert_escaped(html)
    # the source excerpt shows the print's line, escaped
    assert "print(&#x27;&lt;script&gt;alert(1)&lt;/script&gt;&#x27;" in html
    assert_escaped(fragment(str(evil_run.run)))


def test_markup_in_every_string_of_a_run_file_is_text(tmp_path):
    run = synthetic(tmp_path / "evil.run", 2, 60, evil=True)
    for html in (page(str(run)), fragment(str(run))):
        assert_escaped(html)
        # messages, hints, names, targets, modules, backends, argv: all of them
        assert html.count("&lt;script&gt;alert(1)&lt;/script&gt;") > 100
        # the file's name, in the problems' data-where attributes too
        assert re.search(r'data-where="[^"]*model&quot;&gt;&lt;img src=x onerror=alert\(1\)'
                         r'&gt;\.py:\d+"', html)


def test_the_fragment_is_one_scoped_div(tmp_path):
    html = fragment(str(synthetic(tmp_path / "f.run", 1, 20)))
    assert html.startswith('<div class="gdbg" id="gdbg') and html.endswith("</div>")
    assert not re.search(r"<(html|head|body|script)\b", html)
    style = re.search(r"<style>(.*?)</style>", html, re.S)[1]
    rules = re.sub(r"@keyframes \w+\{[^}]*\{[^}]*\}\}", "", style)
    selectors = [s.strip() for block in re.findall(r"([^{}]+)\{[^}]*\}", rules)
                 for s in block.split(",")]
    assert selectors and all(s.startswith(".gdbg") for s in selectors), selectors
    # two fragments in one notebook do not share ids
    other = fragment(str(tmp_path / "f.run"))
    assert set(re.findall(r'id="([^"]+)"', html)).isdisjoint(re.findall(r'id="([^"]+)"', other))


def test_a_run_of_100k_nodes_makes_a_small_page(tmp_path):
    run = synthetic(tmp_path / "big.run", 10, 10_000)
    t = time.perf_counter()
    html = page(str(run))
    took = time.perf_counter() - t
    # 200 nodes per graph, 200 values per checked graph: about 400 kB
    assert len(html.encode()) < 1 * 2**20 and took < 10, (len(html), took)
    assert html.count("9800 more not shown; graphdbg tui") == 10
    assert "first divergent: n5000" in html


def test_a_job_folder_page_compares_the_ranks(tmp_path):
    r0, r1 = two_ranks(tmp_path)
    r0.graph(1, "0/0", [RELU, AR, SUM], collectives=["all_reduce"])
    r1.graph(1, "0/0", [RELU, ("mul", 6), SUM])
    r0.finding("graph_break", 5, f"a break {EVIL}")
    r0.close(), r1.close()
    html = page(str(tmp_path))
    assert "Where ranks differ" in html and "Ranks (2)" in html
    assert "rank 0: 1 problem<" in html and "rank 1: 0 problems<" in html
    assert len(re.findall(r"<tr><td class=\"n\">\d</td>", html)) == 2
    assert "<img" not in html and "<script" not in html


def test_the_cli_writes_the_page_and_says_bad_input_in_one_line(tmp_path):
    run = synthetic(tmp_path / "c.run", 1, 10)
    p = graphdbg("report", "--html", "out.html", run, cwd=tmp_path)
    assert p.returncode == 0 and (tmp_path / "out.html").stat().st_size > 1000, p.stderr
    assert "wrote out.html" in p.stderr and p.stdout == ""
    for args, says in ((("--html", "x.run", run), "names the page to write"),
                       (("--html", "no/such/x.html", run), "does not exist"),
                       (("--html", "o.html", tmp_path / "missing.run"), "no such run file"),
                       (("--html", "o.html", "--json", run), "not allowed with")):
        p = graphdbg("report", *args, cwd=tmp_path)
        assert p.returncode != 0 and says in p.stderr and "Traceback" not in p.stderr, (args, p)
    assert not (tmp_path / "o.html").exists()
    text = graphdbg("run", "--help", cwd=tmp_path).stdout
    assert "--html OUT.html" in text
    # --html takes a value: the program's own arguments start after the script
    from graphdbg.commands.run import COMMAND
    assert COMMAND.split_argv(["run", "--html", "a.html", "p.py", "--html", "b"]) == (
        ["run", "--html", "a.html", "p.py"], ["--html", "b"])


def test_run_html_is_refused_under_a_launcher_before_the_program_runs(tmp_path):
    import os

    from conftest import ENV
    prog = tmp_path / "p.py"
    prog.write_text("open('ran', 'w').write('yes')\n")
    p = graphdbg("run", "--html", "x.html", prog, cwd=tmp_path,
                 env={**ENV, "RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0",
                      "TORCHELASTIC_RUN_ID": "t1"})
    assert p.returncode == 2 and "under a launcher" in p.stderr, p.stderr
    assert not (tmp_path / "ran").exists() and not os.path.exists(tmp_path / "x.html")
