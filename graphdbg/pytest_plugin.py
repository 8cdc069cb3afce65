"""graphdbg's pytest plugin (the `pytest11` entry point `graphdbg`).

- the `graphdbg` fixture: a recorder around the test body, with its counts,
  findings and assertions (`graphdbg.testing.Recorder`);
- `@pytest.mark.graphdbg(max_graph_breaks=0, max_recompiles=0, compare=True,
  rtol=None, atol=None, allow=[...])`: limits on every compile in the test,
  checked when it ends;
- `--graphdbg`: record every test; `--graphdbg-dir`, `--graphdbg-keep`,
  `--graphdbg-compare-first`, each with an ini twin; a summary at the end.

Loading the plugin imports neither torch nor textual (tests/test_import_hygiene.py):
torch comes with the first recorded test.
"""

from __future__ import annotations

import json
import os
import re
import shutil

import pytest

MARKER_HELP = ("graphdbg(max_graph_breaks=0, max_recompiles=0, max_graphs=None, compare=True, "
               "rtol=None, atol=None, allow=[]): record the test's torch.compile activity and "
               "fail it when a compile goes over these limits; allow: finding kinds or regular "
               "expressions on messages to tolerate")
PROPERTY = "graphdbg"     # the user property that carries a test's counts to the summary
_RECORDER = pytest.StashKey()
_LIMITS = pytest.StashKey()


# (flag, ini name, ini type, ini default, argparse keywords, help): every flag has an ini twin
OPTIONS = (
    ("--graphdbg", "graphdbg", "bool", False, {"action": "store_true", "default": None},
     ("record every test's torch.compile activity (graph breaks, recompiles, compile errors, "
     "eager-vs-compiled divergences) and summarise it")),
    ("--graphdbg-dir", "graphdbg_dir", "string", ".graphdbg", {"metavar": "DIR", "default": None},
     ("where run files go (default .graphdbg under the root directory); kept for failing tests, "
     "deleted for passing ones")),
    ("--graphdbg-keep", "graphdbg_keep", "bool", False, {"action": "store_true", "default": None},
     "keep the run files of passing tests too"),
    ("--graphdbg-compare-first", "graphdbg_compare_first", "string", "1",
     {"metavar": "N", "default": None, "type": int},
     ("check each compiled graph against eager on its first N calls (0: no check; a marker's "
     "compare=False turns it off for one test)")),
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("graphdbg", "graphdbg: torch.compile findings per test")
    for flag, ini, kind, default, kwargs, help_text in OPTIONS:
        group.addoption(flag, dest=ini, help=help_text, **kwargs)
        parser.addini(ini, help=f"{help_text} (the ini twin of {flag})", type=kind,
                      default=default)


def _option(config: pytest.Config, name: str):
    value = config.getoption(name)
    return config.getini(name) if value is None else value


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER_HELP)
    config.pluginmanager.register(Summary(), "graphdbg-summary")


# -- per test ---------------------------------------------------------------------------

def _run_dir(config: pytest.Config) -> str:
    d = str(_option(config, "graphdbg_dir"))
    return d if os.path.isabs(d) else os.path.join(str(config.rootpath), d)


def _run_path(item: pytest.Item) -> str:
    # one file per worker and test: the node id made a file name
    name = re.sub(r"[^\w.\[\]-]+", "_", item.nodeid.replace("::", "__")).strip("_")[:180]
    # this session's own xdist worker id (not an environment variable a
    # pytest run inside a worker would inherit)
    worker = getattr(item.config, "workerinput", {}).get("workerid")
    return os.path.join(_run_dir(item.config), f"{name}{'.' + worker if worker else ''}.run")


def _limits(item: pytest.Item):
    marker = item.get_closest_marker("graphdbg")
    if marker is None:
        return None
    from .testing import Limits
    return Limits.from_marker(marker.args, marker.kwargs)


def _recorder_for(item: pytest.Item):
    """The item's recorder, made on first use: the fixture asks for it, the
    marker or --graphdbg make one for the test body."""
    rec = item.stash.get(_RECORDER, None)
    if rec is None:
        from .testing import Recorder
        limits = item.stash.get(_LIMITS, None)
        first = int(_option(item.config, "graphdbg_compare_first"))
        compare = first > 0 and (limits is None or limits.compare)
        rec = Recorder(_run_path(item), nodeid=item.nodeid, compare=compare,
                       compare_first=max(first, 1),
                       rtol=limits.rtol if limits else None, atol=limits.atol if limits else None)
        item.stash[_RECORDER] = rec
    return rec


def _wanted(item: pytest.Item) -> bool:
    return (bool(_option(item.config, "graphdbg")) or item.stash.get(_LIMITS, None) is not None
            or "graphdbg" in getattr(item, "fixturenames", ()))


def pytest_runtest_setup(item: pytest.Item) -> None:
    # a bad marker fails the test's setup with one line, not our traceback
    try:
        limits = _limits(item)
    except (TypeError, ValueError, re.error) as exc:
        pytest.fail(str(exc), pytrace=False)
    if limits is not None:
        item.stash[_LIMITS] = limits


@pytest.fixture
def graphdbg(request: pytest.FixtureRequest):
    """Records the test body's torch.compile activity; assertions on it:
    assert_no_graph_breaks(), assert_max_recompiles(n), assert_graphs(n),
    assert_close(rtol=None, atol=None), assert_no_errors(), assert_no_nan(),
    and `with graphdbg.expect(graphs=1, graph_breaks=0, recompiles=0): ...`."""
    return _recorder_for(request.node)


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function):
    if not _wanted(pyfuncitem):
        return (yield)
    rec = _recorder_for(pyfuncitem)
    rec.start()
    failed = True
    try:
        result = yield
        failed = False
        return result
    finally:
        rec.stop(failed=failed)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    rec = item.stash.get(_RECORDER, None)
    if call.when != "call" or rec is None or not rec.started:
        return report
    try:
        _judge(item, call, rec, report)
    except Exception as exc:  # noqa: BLE001 - a broken run file must not hide the test's outcome
        report.sections.append(("graphdbg", f"graphdbg could not read {rec.path}: {exc}"))
    return report


def _judge(item: pytest.Item, call: pytest.CallInfo, rec, report: pytest.TestReport) -> None:
    from .format import short
    from .testing import counts_of, failure_text, finding_text, violations
    limits = item.stash.get(_LIMITS, None)
    with rec.run() as run:
        counts = counts_of(run)
        found = violations(run, limits) if limits is not None else []
        findings = run.findings()
    keep = bool(_option(item.config, "graphdbg_keep"))
    over = report.passed and bool(found)
    if over:
        report.outcome = "failed"
        path, line, _ = item.location
        head = f"{path}:{(line or 0) + 1}: {item.name} went over {limits.describe()}"
        report.longrepr = failure_text(head, found, rec.path)
    kept = keep or report.failed
    listed = call.excinfo is not None and getattr(call.excinfo.value, "graphdbg_listed", False)
    if findings and not over and not listed:
        # a test that fails (or passes) on its own keeps its outcome and its
        # traceback; what was found goes into a section of its report
        lines = [ln for f in findings for ln in finding_text(f)]
        if report.failed:
            lines += [f"run saved: {short(rec.path)}", f"open it:   graphdbg tui {short(rec.path)}"]
        report.sections.append(("graphdbg findings", "\n".join(lines)))
    report.user_properties.append((PROPERTY, json.dumps(
        {**counts.as_dict(), "run": rec.path if kept else None})))
    if not kept:
        for suffix in ("", "-journal"):
            try:
                os.remove(rec.path + suffix)
            except FileNotFoundError:
                pass


# -- the session summary ----------------------------------------------------------------

class Summary:
    """Counts per test, from each report's user properties (xdist sends them
    to the controller), and the table at the end."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str, dict]] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call":
            return
        for name, value in report.user_properties:
            if name == PROPERTY:
                self.rows.append((report.nodeid, report.outcome, json.loads(value)))

    def pytest_terminal_summary(self, terminalreporter, exitstatus: int,
                                config: pytest.Config) -> None:
        if hasattr(config, "workerinput") or not self.rows:
            return
        tr, rows = terminalreporter, self.rows
        tr.write_sep("=", "graphdbg summary")
        total = {k: sum(r[2][k] for r in rows) for k in ("graphs", "graph_breaks", "recompiles",
                                                         "divergences", "errors")}
        tr.write_line(f"{len(rows)} test(s) recorded: {total['graphs']} graphs, "
                      f"{total['graph_breaks']} graph breaks, {total['recompiles']} recompiles, "
                      f"{total['divergences']} divergences, {total['errors']} errors")
        noisy = [r for r in rows if r[2]["graph_breaks"] or r[2]["recompiles"]
                 or r[2]["divergences"] or r[2]["errors"]]
        width = min(max((len(r[0]) for r in rows), default=4), 70)
        if noisy:
            tr.write_line("")
            tr.write_line(f"{'test':<{width}}  graphs  breaks  recompiles  divergences  errors")
            for nodeid, _, c in noisy:
                tr.write_line(f"{_cut(nodeid, width):<{width}}  {c['graphs']:>6}  "
                              f"{c['graph_breaks']:>6}  {c['recompiles']:>10}  "
                              f"{c['divergences']:>11}  {c['errors']:>6}")
        slow = sorted((r for r in rows if r[2]["compile_s"]),
                      key=lambda r: -r[2]["compile_s"])[:5]
        if slow:
            tr.write_line("")
            tr.write_line("slowest compiles:")
            for nodeid, _, c in slow:
                tr.write_line(f"  {c['compile_s']:7.2f} s  {_cut(nodeid, width)}  "
                              f"({c['graphs']} graph{'s' if c['graphs'] != 1 else ''})")
        kept = [r for r in rows if r[2].get("run")]
        if kept:
            tr.write_line("")
            tr.write_line(f"run files kept: {len(kept)} (open one: graphdbg tui "
                          f"{kept[0][2]['run']})")


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else "…" + text[-(width - 1):]


def pytest_unconfigure(config: pytest.Config) -> None:
    # an empty run folder this session made is not left behind
    d = _run_dir(config)
    if os.path.isdir(d) and not os.listdir(d) and not hasattr(config, "workerinput"):
        shutil.rmtree(d, ignore_errors=True)
