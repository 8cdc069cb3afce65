"""The layering the architecture promises (docs/architecture.md), read from
the source (ast): packages import only downwards (the floor, then capture and
the views, then the roof), no import circle anywhere (not even under
TYPE_CHECKING), the run-file package free of torch, rich and textual, and no
object writing another's private state."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"graphdbg": ROOT / "graphdbg", "graphdbg.hooks": ROOT / "hooks",
            "graphdbg.tui": ROOT / "tui"}


@functools.cache
def _tree(path: Path) -> ast.AST:
    """A module's syntax tree, parsed once for all the tests here (read only)."""
    return ast.parse(path.read_text(), str(path))


def _modules() -> dict[str, Path]:
    out = {}
    for pkg, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            rel = path.relative_to(folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            out[".".join([pkg, *parts])] = path
    return out


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Modules of ours that ``name`` imports anywhere in its file (module
    level, inside functions, under TYPE_CHECKING alike)."""
    is_pkg = path.name == "__init__.py"
    base = name if is_pkg else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(_tree(path)):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                mod = ".".join(anchor + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            # `from pkg import sub` needs pkg.sub, not what pkg/__init__ imports
            subs = [f"{mod}.{a.name}" for a in node.names]
            targets = [t if t in known else mod for t in subs]
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {name: _imports(name, path, set(mods)) for name, path in mods.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        path.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return path[path.index(m):] + [m]
            if m not in state and (c := visit(m)):
                return c
        path.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (c := visit(n)):
            return c
    return None


def test_no_import_circle():
    graph = _graph()
    assert graph.get("graphdbg.hooks.session")  # the parser found our imports
    assert _cycle(graph) is None, " -> ".join(_cycle(graph))


def test_the_circle_check_finds_a_circle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


# What each package may import besides itself, bottom to top
# (docs/architecture.md says why). "graphdbg" is the roof: its own modules
# (cli, api, runner, testing, pytest_plugin, __init__) and graphdbg.commands.
MAY_IMPORT = {
    "graphdbg.core": set(),
    "graphdbg.runfile": {"graphdbg.core"},
    "graphdbg.hooks.placement": {"graphdbg.core"},
    "graphdbg.hooks": {"graphdbg.core", "graphdbg.runfile", "graphdbg.hooks.placement"},
    "graphdbg.analysis": {"graphdbg.core", "graphdbg.runfile"},
    "graphdbg.reporters": {"graphdbg.core", "graphdbg.runfile", "graphdbg.analysis"},
    # the TUI renders the analysis and shares the report's wording through it (analysis.wording)
    "graphdbg.tui": {"graphdbg.core", "graphdbg.runfile", "graphdbg.analysis"},
    "graphdbg": {"graphdbg.core", "graphdbg.runfile", "graphdbg.hooks", "graphdbg.hooks.placement",
                 "graphdbg.analysis", "graphdbg.reporters", "graphdbg.tui"},
}


def _package(module: str) -> str:
    """The package a module belongs to: its longest prefix in MAY_IMPORT."""
    return max((p for p in MAY_IMPORT if module == p or module.startswith(p + ".")), key=len)


def _upward_imports(graph: dict[str, set[str]]) -> list[str]:
    wrong = []
    for mod, targets in sorted(graph.items()):
        pkg = _package(mod)
        wrong += [f"{mod} imports {t}" for t in sorted(targets)
                  if _package(t) != pkg and _package(t) not in MAY_IMPORT[pkg]]
    return wrong


def test_packages_import_only_downwards():
    graph = _graph()
    assert {_package(m) for m in graph} == set(MAY_IMPORT)
    assert _upward_imports(graph) == []


def test_nothing_below_may_import_anything_above():
    # the table itself is layered: no package may import one that may import it
    for pkg, allowed in MAY_IMPORT.items():
        for other in allowed:
            assert pkg not in MAY_IMPORT[other], (pkg, other)


def test_the_layer_check_finds_an_upward_import():
    assert _upward_imports({"graphdbg.runfile.query": {"graphdbg.reporters.report"}}) != []
    assert _upward_imports({"graphdbg.hooks.session": {"graphdbg.reporters.report"}}) != []
    assert _upward_imports({"graphdbg.tui.views.app": {"graphdbg.hooks.session"}}) != []
    assert _upward_imports({"graphdbg.core.format": {"graphdbg.api"}}) != []
    assert _upward_imports({"graphdbg.api": {"graphdbg.hooks.session"}}) == []
    assert _upward_imports({"graphdbg.hooks.record.backend": {"graphdbg.hooks.check.lint"}}) == []
    assert _upward_imports({"graphdbg.hooks.placement.nodes": {"graphdbg.hooks.record.eager"}}) != []
    assert _upward_imports({"graphdbg.hooks.record.eager": {"graphdbg.hooks.placement.stack"}}) == []


def test_floor_and_views_import_no_torch():
    """The run file and the reporters read runs on machines without torch; the
    floor needs neither rich nor textual."""
    heavy = {}
    for name, path in _modules().items():
        pkg = _package(name)
        banned = {"graphdbg.core": ("torch", "rich", "textual"),
                  "graphdbg.runfile": ("torch", "rich", "textual"),
                  "graphdbg.analysis": ("torch", "rich", "textual", "sqlite3"),
                  "graphdbg.reporters": ("torch", "textual"),
                  "graphdbg.tui": ("torch",)}.get(pkg, ())
        for node in ast.walk(_tree(path)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            found = {n for n in names if n.split(".")[0] in banned}
            if found:
                heavy.setdefault(name, set()).update(found)
    assert heavy == {}


def test_no_object_writes_another_objects_private_state():
    """`x._name = ...` / `x._name += ...` only on self (or cls)."""
    offenders = []
    for path in _modules().values():
        for node in ast.walk(_tree(path)):
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
            for t in targets:
                if (isinstance(t, ast.Attribute) and t.attr.startswith("_")
                        and not t.attr.startswith("__")
                        and not (isinstance(t.value, ast.Name) and t.value.id in ("self", "cls"))):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {ast.unparse(t)}")
    # graphdbg marks its own wrappers, keeps Dynamo's calling convention on them
    # (`_boxed_call`), re-attaches its trace handler when torch resets logging,
    # watches ShapeEnv's size replacements while an export runs, and serialises
    # the TorchScript exporter's graph once more with its nodes' stacks:
    # these are the only ones allowed
    allowed = {"compiled_graph._boxed_call", "compiled_graph._graphdbg_graph_id",
               "compiled_graph._graphdbg_inner", "__call__._graphdbg_hook",
               "export._graphdbg_hook", "onnx_export._graphdbg_hook", "module._graphdbg_hook",
               "ss.ShapeEnv._set_replacement", "torch_logging._init_logs",
               "cls._export_onnx", "torch._C.Graph._export_onnx"}
    assert [o for o in offenders if o.split(" ", 1)[1] not in allowed] == []


# Reading the live stack (or an exception's frames) to say where the program is:
# the placement layer's job alone, so that "the user's line" has one definition
_FRAME_READERS = {"_getframe", "f_back", "extract_stack", "extract_tb", "currentframe",
                  "walk_stack", "walk_tb", "getouterframes", "getinnerframes"}
_INSPECT_STACK = {"stack", "trace"}   # inspect.stack(), inspect.trace()


def _frame_reads(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        name = node.attr if isinstance(node, ast.Attribute) else \
            node.id if isinstance(node, ast.Name) else None
        if name in _FRAME_READERS:
            found.append(f"{node.lineno}: {name}")
        elif (isinstance(node, ast.Attribute) and node.attr in _INSPECT_STACK
              and isinstance(node.value, ast.Name) and node.value.id == "inspect"):
            found.append(f"{node.lineno}: inspect.{node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module in ("sys", "traceback", "inspect"):
            found += [f"{node.lineno}: {a.name}" for a in node.names
                      if a.name in _FRAME_READERS or a.name in _INSPECT_STACK]
    return sorted(found, key=lambda s: int(s.split(":")[0]))


def test_only_the_placement_layer_reads_live_frames():
    offenders = {name: reads for name, path in _modules().items()
                 if not name.startswith("graphdbg.hooks.placement")
                 and (reads := _frame_reads(_tree(path)))}
    assert offenders == {}


def test_the_frame_check_finds_a_frame_walk():
    assert _frame_reads(ast.parse("import sys\nf = sys._getframe(1)\nf = f.f_back")) == \
        ["2: _getframe", "3: f_back"]
    assert _frame_reads(ast.parse("import traceback\ntraceback.extract_stack()")) != []
    assert _frame_reads(ast.parse("from sys import _getframe")) != []
    assert _frame_reads(ast.parse("import inspect\ninspect.stack()")) != []
    assert _frame_reads(ast.parse("x.stack_trace; tb.tb_next")) == []


def test_no_hooks_module_is_over_700_lines():
    long = {name: n for name, path in _modules().items()
            if name.startswith("graphdbg.hooks")
            and (n := len(path.read_text().splitlines())) > 700}
    assert long == {}


# The views and the analysis below them read runs through the query layer's
# methods only: SQL stays in graphdbg.runfile (docs/architecture.md)
_SQL_CALLS = {"execute", "executemany", "executescript", "query", "_execute", "_rows",
              "_iter", "_batches"}


def _sql_uses(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [f"{node.lineno}: import {a.name}" for a in node.names
                      if a.name.split(".")[0] == "sqlite3"]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "sqlite3":
            found.append(f"{node.lineno}: from {node.module}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in _SQL_CALLS):
            found.append(f"{node.lineno}: .{node.func.attr}(")
    return found


def _sql_in(package: str) -> dict[str, list[str]]:
    return {name: uses for name, path in _modules().items()
            if name.startswith(package) and (uses := _sql_uses(_tree(path)))}


def test_reporters_run_no_sql():
    assert _sql_in("graphdbg.reporters") == {}


def test_the_analysis_runs_no_sql():
    # a query it needs is a method of the query layer's Run (graphdbg/runfile/query_*.py)
    assert _sql_in("graphdbg.analysis") == {}


def test_the_sql_check_finds_sql():
    assert _sql_uses(ast.parse("import sqlite3")) == ["1: import sqlite3"]
    assert _sql_uses(ast.parse("run.query('SELECT 1')\nrun._rows('SELECT 2')")) == \
        ["1: .query(", "2: ._rows("]
    assert _sql_uses(ast.parse("from sqlite3 import Row")) != []
    assert _sql_uses(ast.parse("run.graphs(); run.findings('recompile')")) == []


# Commands own their output: the one console factory is commands/output.py's
# (the capture's progress bars on stderr, hooks/progress.py, make their own)
CONSOLE_MAKERS = {"graphdbg.commands.output", "graphdbg.hooks.progress"}


def _console_calls(tree: ast.AST) -> list[int]:
    return [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call) and (
        (isinstance(node.func, ast.Name) and node.func.id == "Console")
        or (isinstance(node.func, ast.Attribute) and node.func.attr == "Console"))]


def test_only_the_commands_output_module_makes_a_console():
    makers = {name: lines for name, path in _modules().items()
              if (lines := _console_calls(_tree(path)))}
    assert set(makers) <= CONSOLE_MAKERS, makers
    assert "graphdbg.commands.output" in makers
    assert _console_calls(ast.parse("import rich.console\nc = rich.console.Console()")) == [2]


def test_the_tui_takes_the_rank_comparison_from_the_analysis():
    graph = _graph()
    assert [m for m, targets in graph.items() if m.startswith("graphdbg.tui")
            and "graphdbg.reporters.ranks" in targets] == []
    assert "graphdbg.analysis.ranks" in graph["graphdbg.tui.model.job"]


# What the views show is worked out once, in graphdbg.analysis; the reporters
# render it (a comparison defined in a reporter is one the TUI cannot share)
ANALYSES = {"compare", "Comparison", "Difference", "RankSummary", "diff_job", "diff_pair",
            "JobDiff", "RankPair", "RankDivergence", "diff_runs", "AlignedOps", "read_side"}


def test_the_comparisons_are_defined_in_the_analysis_only():
    where = {}
    for name, path in _modules().items():
        if name.startswith(("graphdbg.analysis", "graphdbg.reporters", "graphdbg.tui")):
            for node in _tree(path).body:
                if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in ANALYSES:
                    where.setdefault(node.name, set()).add(name)
    in_views = {n: ms for n, ms in where.items() if any(
        not m.startswith("graphdbg.analysis") for m in ms)}
    assert in_views == {}
    assert {"compare", "diff_job", "diff_runs"} <= set(where)


def test_no_query_reporter_or_analysis_module_is_over_700_lines():
    long = {name: n for name, path in _modules().items()
            if (name.startswith(("graphdbg.reporters", "graphdbg.analysis"))
                or name.startswith("graphdbg.runfile.query"))
            and (n := len(path.read_text().splitlines())) > 700}
    assert long == {}


def test_every_package_is_in_pyproject():
    """setuptools installs only the packages pyproject.toml lists: a package
    left out works in the editable checkout and is missing from a built wheel."""
    import tomllib
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())
                 ["tool"]["setuptools"]["packages"])
    found = set()
    for pkg, folder in PACKAGES.items():
        for init in folder.rglob("__init__.py"):
            rel = init.parent.relative_to(folder).parts
            found.add(".".join([pkg, *rel]))
    assert found - listed == set()
    assert listed - found == set()
