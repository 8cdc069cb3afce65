"""`graphdbg repro` of graph breaks and recompiles: the function with the
break or the guard cut out of the program's source snapshot (with the
self-contained helpers it calls and its torch/stdlib imports), called with
arguments rebuilt from Dynamo's guards, checked in a fresh python; a function
that depends on the program (a method, a global) refused, naming what.

One program of different shapes (tests/support/cutout_cases.py), run once for
the module; the samples' golden runs are shared with test_repro.py."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SUPPORT, graphdbg, group

PROGRAM = SUPPORT / "cutout_cases.py"
ALLOWED = {"torch", "math", "logging", "sys", "re", "zlib"}


@pytest.fixture(scope="module")
def cases(runs):
    return runs.program(PROGRAM).ok().run


def number(run: Path, kind: str, function: str) -> int:
    """The finding's number (the report's order) by kind and function."""
    from graphdbg.runfile.query import Run
    with Run(str(run)) as r:
        for i, f in enumerate(r.findings(), 1):
            name = getattr(f.detail, "function", None) if kind == "recompile" else f.function
            if f.kind == kind and name == function:
                return i
    raise AssertionError(f"no {kind} finding in {function}")


def repro(run: Path, n: int, out: Path) -> subprocess.CompletedProcess:
    return graphdbg("repro", run, n, "-o", out, cwd=out.parent, timeout=180)


def defs(script: Path) -> set[str]:
    return {n.name for n in ast.parse(script.read_text()).body
            if isinstance(n, (ast.FunctionDef, ast.ClassDef))}


def imports(script: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(script.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            found.add((node.module or "").split(".")[0])
    return found


# (kind, the function the finding names, the program's functions the repro holds)
REPRODUCED = {
    "print": ("graph_break", "shout", {"shout", "_center"}),      # + a helper, + import math
    "item_in_helper": ("graph_break", "report", {"report"}),     # inlined helper; `tag` unread
    "shape": ("recompile", "widen", {"widen"}),                  # dynamic=False, (4,8) -> (6,8)
    "int_arg": ("recompile", "repeat", {"repeat"}),              # n == 2 -> 3
    "dynamic_dim": ("recompile", "pooled", {"pooled"}),          # dynamic=True, size 1 specialised
}
SCRIPT_OWN = {"make", "Log", "key", "main", "guard"}


@pytest.mark.parametrize("case", list(REPRODUCED))
def test_cut_out_and_reproduced(cases, tmp_path, case):
    kind, function, held = REPRODUCED[case]
    out = tmp_path / "bug"
    p = repro(cases, number(cases, kind, function), out)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "REPRODUCED" in p.stdout and "reproduced in" in p.stdout, p.stdout
    script = out / "repro.py"
    assert not (out / "attempt").exists() and not (out / "inputs.safetensors").exists()
    readme = (out / "README.md").read_text().splitlines()
    assert len(readme) == 2 and readme[1].startswith("Run it: `python repro.py`"), readme
    assert f"{function}() cut out of the file" in readme[0], readme[0]
    # the function (and its helpers) only, never the program's module
    assert defs(script) - SCRIPT_OWN == held, defs(script)
    assert imports(script) <= ALLOWED, imports(script)
    assert "cutout_cases" not in {i for i in imports(script)}
    if kind == "recompile":
        assert "recompiled: guard failed:" in p.stdout, p.stdout
    else:
        assert "graph break at line" in p.stdout, p.stdout
    if case == "print":  # fixed in the repro: gone, exit 0
        fixed = out / "fixed"
        fixed.mkdir()
        text = script.read_text().replace('print("shout:", y.shape)', "pass")
        (fixed / "repro.py").write_text(text)
        done = subprocess.run([sys.executable, "repro.py"], cwd=fixed, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0 and "problem is gone" in done.stdout, done.stdout + done.stderr


@pytest.mark.parametrize("function, why", [
    ("clipped", "clipped uses LIMIT (a global variable of your program)"),
    ("forward", "forward is a method of Head (an nn.Module): it uses self.fc"),
])
def test_refused_naming_what_it_depends_on(cases, tmp_path, function, why):
    out = tmp_path / "bug"
    p = repro(cases, number(cases, "graph_break", function), out)
    assert p.returncode == 1 and p.stderr.count("\n") == 1, p.stderr
    assert "cannot be cut out" in p.stderr and why in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and not out.exists()


@group("graph_breaks")
def test_sample_break_with_a_string_argument(runs, tmp_path):
    """graph_breaks.py's zlib.crc32 break: `name` rebuilt from Dynamo's
    EQUALS_MATCH guard, `import zlib` carried."""
    run = runs.golden("graph_breaks").run
    out = tmp_path / "bug"
    p = repro(run, number(run, "graph_break", "hashed_lookup"), out)
    assert p.returncode == 0, p.stdout + p.stderr
    text = (out / "repro.py").read_text()
    assert "import zlib" in text and "'user_country'" in text
    assert defs(out / "repro.py") - SCRIPT_OWN == {"hashed_lookup"}


@group("recompiles")
def test_sample_module_recompile_refused(runs, tmp_path):
    run = runs.golden("recompiles").run
    p = repro(run, number(run, "recompile", "forward"), tmp_path / "bug")
    assert p.returncode == 1, p.stderr
    assert "forward is a method of Classifier (an nn.Module)" in p.stderr, p.stderr
