"""graphdbg's pytest plugin (the `pytest11` entry point `graphdbg`).

- the `graphdbg` fixture: the test's recorder, with its counts, findings
  and assertions (`graphdbg.testing.Recorder`);
- `@pytest.mark.graphdbg(max_graph_breaks=0, max_recompiles=0, compare=True,
  rtol=None, atol=None, allow=[...])` on a test, its class or a
  unittest.TestCase: limits on every compile in the test, checked when its
  call ends (an export that diverges from eager or fails goes over them too,
  said as an export's: `compare` and the errors cover exports);
- `--graphdbg`: record every test; `--graphdbg-dir`, `--graphdbg-keep`,
  `--graphdbg-compare-first`, each with an ini twin; a summary at the end
  (counts per test, and under each noisy test where its findings are).

A test that goes over its marker fails with the marker as written, each limit
it went over and the findings behind it (the user's line, a caret, the run
file and the command that opens it); the reason is also the report's crash
line, which pytest's short summary (-rf) and --tb=line print.

Every kind of test item is recorded the same way (test functions,
unittest.TestCase methods, other plugins' items): from the start of its setup
(before its fixtures, so that a fixture asking for `graphdbg` gets a
recorder that runs) to the end of its call (a TestCase's setUp, method and
tearDown are its call); a fixture's teardown can still read the run, which
is deleted (the test passed) when the teardown ends. A test that cannot be
recorded fails when its marker or the fixture asked for it, and is named in
a warning and in the summary under --graphdbg.

Loading the plugin imports neither torch nor textual (tests/unit/test_import_hygiene.py):
torch comes with the first recorded test.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass

import pytest

from .core.options import flags, option

MARKER_HELP = ("graphdbg(max_graph_breaks=0, max_recompiles=0, max_graphs=None, compare=True, "
               "rtol=None, atol=None, allow=[]): record the test's torch.compile activity and "
               "fail it when a compile goes over these limits; allow: finding kinds or regular "
               "expressions on messages to tolerate")
PROPERTY = "graphdbg"     # the user property that carries a test's counts to the summary
SITES_SHOWN = 3           # a test's finding lines in the session summary
_RECORDER = pytest.StashKey()
_LIMITS = pytest.StashKey()
_STATE = pytest.StashKey()


@dataclass(frozen=True)
class PluginOptions:
    """The plugin's options; each flag has an ini twin named as its field."""
    graphdbg: bool = option(
        False, "--graphdbg",
        help="record every test's torch.compile activity (graph breaks, recompiles, compile "
             "errors, eager-vs-compiled divergences) and summarise it")
    graphdbg_dir: str = option(
        ".graphdbg", "--graphdbg-dir", metavar="DIR",
        help="where run files go (default .graphdbg under the root directory); kept for "
             "failing tests, deleted for passing ones")
    graphdbg_keep: bool = option(False, "--graphdbg-keep",
                                 help="keep the run files of passing tests too")
    graphdbg_compare_first: int = option(
        1, "--graphdbg-compare-first", metavar="N",
        help="check each compiled graph against eager on its first N calls (0: no check; a "
             "marker's compare=False turns it off for one test)")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("graphdbg", "graphdbg: torch.compile findings per test")
    for name, default, flag in flags(PluginOptions):
        switch = isinstance(default, bool)
        # default None: not given on the command line, so the ini twin decides
        group.addoption(flag.name, dest=name, help=flag.help, default=None,
                        **({"action": "store_true"} if switch else
                           {"metavar": flag.metavar, "type": type(default)}))
        parser.addini(name, help=f"{flag.help} (the ini twin of {flag.name})",
                      type="bool" if switch else "string",
                      default=default if switch else str(default))


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


class GraphdbgWarning(pytest.PytestWarning):
    """A test that --graphdbg was asked to record and could not."""


class _Test:
    """One recorded test across its phases (in the item's stash)."""

    def __init__(self, rec) -> None:
        self.rec = rec                      # its Recorder (graphdbg.testing)
        self.failed = False                 # a phase failed (setup, call, teardown)
        self.discard = False                # skipped: no run, no row in the summary
        self.counts: dict | None = None     # judged at the end of the call (or a failed setup)
        self.sites: list[str] = []          # where its counted findings are, one line each
        self.unrecorded: str | None = None  # why it could not be recorded
        self.outcome = "passed"             # the call's (failed: any phase's)


def _recorder_for(item: pytest.Item):
    """The item's recorder, made on first use: the fixture asks for it, the
    marker or --graphdbg make one for the test."""
    rec = item.stash.get(_RECORDER, None)
    if rec is None:
        from .testing import Recorder
        limits = item.stash.get(_LIMITS, None)
        first = int(_option(item.config, "graphdbg_compare_first"))
        compare = first > 0 and (limits is None or limits.compare)
        # durable=False: no fsync for files that are deleted when their test passes
        rec = Recorder(_run_path(item), nodeid=item.nodeid, compare=compare,
                       compare_first=max(first, 1),
                       rtol=limits.rtol if limits else None, atol=limits.atol if limits else None,
                       durable=False)
        item.stash[_RECORDER] = rec
        item.stash[_STATE] = _Test(rec)
    return rec


def _wanted(item: pytest.Item) -> bool:
    return (bool(_option(item.config, "graphdbg")) or item.stash.get(_LIMITS, None) is not None
            or "graphdbg" in getattr(item, "fixturenames", ()))


def _start(item: pytest.Item, needed: bool) -> None:
    """Start the item's recorder. One that cannot start fails the test when
    its marker or the fixture needs it (``needed``); under --graphdbg alone
    the test runs unrecorded, with a warning and a line in the summary."""
    rec = _recorder_for(item)
    if rec.started:
        return
    try:
        rec.start()
        return
    except Exception as exc:  # noqa: BLE001 - said in the report, never swallowed
        from .core.errors import GraphdbgError
        why = str(exc) if isinstance(exc, GraphdbgError) else f"{type(exc).__name__}: {exc}"
    if needed:
        pytest.fail(f"graphdbg could not record this test: {why}", pytrace=False)
    item.stash[_STATE].unrecorded = why
    item.warn(GraphdbgWarning(f"graphdbg could not record {item.nodeid}: {why}"))


def _stop(item: pytest.Item, failed: bool) -> None:
    rec = item.stash.get(_RECORDER, None)
    if rec is not None and rec.recording:
        try:
            rec.stop(failed=failed)
        except Exception as exc:  # noqa: BLE001 - pytest's own hooks must not break on it
            item.warn(GraphdbgWarning(f"graphdbg could not finish {rec.path}: "
                                      f"{type(exc).__name__}: {exc}"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    for key in (_RECORDER, _STATE, _LIMITS):   # a test run again (a rerun plugin) starts anew
        if key in item.stash:
            del item.stash[key]
    # a bad marker fails the test's setup with one line, not our traceback
    try:
        limits = _limits(item)
    except (TypeError, ValueError, re.error) as exc:
        pytest.fail(str(exc), pytrace=False)
    if limits is not None:
        item.stash[_LIMITS] = limits
    # Recording starts here, before any fixture is set up: a fixture (autouse
    # ones too) that asks for `graphdbg` gets a recorder that records, and what
    # the test's fixtures compile is the test's (as a TestCase's setUp is: it runs
    # in the call). It ends with the call; fixture teardown is not recorded.
    if _wanted(item):
        _start(item, needed=limits is not None
               or "graphdbg" in getattr(item, "fixturenames", ()))
    try:
        return (yield)
    except BaseException:
        _stop(item, failed=True)
        raise


@pytest.fixture
def graphdbg(request: pytest.FixtureRequest):
    """Records the test's torch.compile activity and its exports; assertions
    on it: assert_no_graph_breaks(), assert_max_recompiles(n), assert_graphs(n),
    assert_close(rtol=None, atol=None), assert_no_errors(), assert_no_nan(),
    assert_exports_match(rtol=None, atol=None, allow=()) (every torch.export /
    torch.onnx.export exported and matches eager), and
    `with graphdbg.expect(graphs=1, graph_breaks=0, recompiles=0): ...`."""
    rec = _recorder_for(request.node)
    if not rec.started:      # asked for by request.getfixturevalue: from now on
        _start(request.node, needed=True)
    return rec


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    # Every kind of item: a test function, a unittest.TestCase method (with its
    # setUp and tearDown), a plugin's own items. The recorder stops in
    # pytest_runtest_makereport, where a TestCase's failure is known (unittest
    # hands it to pytest there, not as an exception); here only when the call
    # ends in an exception, which may stop pytest before any report (Ctrl-C).
    try:
        return (yield)
    except BaseException:
        _stop(item, failed=True)
        raise


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    test = item.stash.get(_STATE, None)
    if test is None:
        return report
    if call.when == "setup":
        if report.skipped:
            _stop(item, failed=False)
            test.discard = True
        elif report.failed:
            test.failed = True
            _read(item, call, test, report)
    elif call.when == "call":
        _stop(item, failed=report.failed)
        _read(item, call, test, report)
        test.failed |= report.failed
        test.outcome = report.outcome
        test.discard = report.skipped     # (unittest's skips come here)
    else:
        _stop(item, failed=test.failed)    # stopped already, unless pytest went another way
        test.failed |= report.failed
        _finish(item, test, report)
    return report


def _read(item: pytest.Item, call: pytest.CallInfo, test: _Test, report) -> None:
    rec = test.rec
    if not rec.started:
        return
    try:
        _judge(item, call, test, report)
    except Exception as exc:  # noqa: BLE001 - a broken run file must not hide the test's outcome
        text = f"graphdbg could not read {rec.path}: {exc}"
        if report.passed and call.when == "call" and item.stash.get(_LIMITS, None) is not None:
            # its limits could not be checked: a marked test does not pass unjudged
            report.outcome = "failed"
            report.longrepr = _failure(item, text, text)
        else:
            report.sections.append(("graphdbg", text))


def _judge(item: pytest.Item, call: pytest.CallInfo, test: _Test,
           report: pytest.TestReport) -> None:
    from .core.format import short
    from .testing import counts_of, failure_text, finding_text, repro_line, violations
    rec = test.rec
    limits = item.stash.get(_LIMITS, None)
    with rec.run() as run:
        counts = counts_of(run)
        found = violations(run, limits) if limits is not None and call.when == "call" else []
        findings = run.findings()
    test.counts = counts.as_dict()
    test.sites = _sites(findings)
    over = report.passed and bool(found)
    if over:
        report.outcome = "failed"
        path, line, _ = item.location
        head = f"{path}:{(line or 0) + 1}: {item.name} went over {limits.describe()}"
        report.longrepr = _failure(item, failure_text(head, found, rec.path),
                                   "; ".join(map(_crash, found)))
    listed = call.excinfo is not None and getattr(call.excinfo.value, "graphdbg_listed", False)
    if findings and not over and not listed:
        # a test that fails (or passes) on its own keeps its outcome and its
        # traceback; what was found goes into a section of its report
        lines = [ln for i, f in enumerate(findings) for ln in finding_text(f) + (
            repro_line(f, rec.path, i + 1) if report.failed else [])]
        if report.failed:
            lines += [f"run saved: {short(rec.path)}", f"open it:   graphdbg tui {short(rec.path)}"]
        report.sections.append(("graphdbg findings", "\n".join(lines)))


def _crash(v) -> str:
    """A limit gone over in one line: `1 graph break at t.py:5 (max_graph_breaks=0)`."""
    from .core.format import at
    text = v.what
    sites = [f for f in v.findings if f.file]
    if sites:
        where = at(sites[0].file, sites[0].line, sites[0].cell)
        text += f", first at {where}" if " at " in text else f" at {where}"
        if len(sites) > 1:
            text += f" and {len(sites) - 1} more"
    return f"{text} ({v.limit})" if v.limit else text


def _failure(item: pytest.Item, text: str, crash: str):
    """A failure's report as pytest makes its own (pytest.fail without a
    traceback): ``text`` under the test's header, and ``crash`` the line that
    the short summary (-rf), --tb=line and xdist's controller read from it
    (a plain string longrepr gives them nothing: a bare `FAILED test_x`)."""
    try:
        pytest.fail(text, pytrace=False)
    except pytest.fail.Exception:
        excinfo = pytest.ExceptionInfo.from_current()
    longrepr = excinfo.getrepr(style="value")
    crash_at = longrepr.reprcrash
    if crash_at is not None:   # at the test, not in this plugin
        path, line, _ = item.location
        crash_at.path = str(item.path) if item.path else path
        crash_at.lineno = (line or 0) + 1
        crash_at.message = crash
    return longrepr


def _sites(findings) -> list[str]:
    """Where a test's counted findings are, one short line each, for the
    session summary (a passing test's report sections are not shown)."""
    from .core.format import at
    from .testing import COUNTED, divergences
    counted = [f for f in findings if f.kind in COUNTED.values() or f.severity == "error"]
    ids = {f.id for f in counted}
    counted += [f for f in divergences(findings) if f.id not in ids]
    out = []
    for f in counted:
        times = f" (×{f.count})" if f.count > 1 else ""
        code = f": {_cut_end(f.code.strip(), 60)}" if f.code else ""
        out.append(f"{f.kind.replace('_', ' ')} at {at(f.file, f.line, f.cell)}{times}{code}")
    return out


def _finish(item: pytest.Item, test: _Test, report: pytest.TestReport) -> None:
    """When the test's teardown ends (a fixture's teardown may still read the
    run): keep or delete its run, and hand its counts to the summary, on the
    teardown report (as junitxml reads user properties; xdist sends them on)."""
    rec = test.rec
    if test.unrecorded is not None:
        row = {"unrecorded": test.unrecorded}
    elif not rec.started:
        return
    else:
        kept = not test.discard and (bool(_option(item.config, "graphdbg_keep")) or test.failed)
        if not kept:
            for suffix in ("", "-journal"):
                try:
                    os.remove(rec.path + suffix)
                except FileNotFoundError:
                    pass
        if test.discard:
            return
        counts = test.counts
        if counts is None:   # the call never ran and setup did not fail: read what there is
            try:
                from .testing import counts_of
                with rec.run() as run:
                    counts = counts_of(run).as_dict()
            except Exception:  # noqa: BLE001 - counted as nothing; the test's report says why
                counts = None
        if counts is None:
            from .testing import Counts
            counts = Counts().as_dict()
        row = {**counts, "run": rec.path if kept else None, "sites": test.sites}
    row["outcome"] = "failed" if test.failed else test.outcome
    report.user_properties.append((PROPERTY, json.dumps(row)))


# -- the session summary ----------------------------------------------------------------

class Summary:
    """Counts per test, from the user properties of each test's teardown
    report (xdist sends them to the controller), and the table at the end."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str, dict]] = []
        self.unrecorded: list[tuple[str, str]] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "teardown":
            return
        for name, value in report.user_properties:
            if name == PROPERTY:
                row = json.loads(value)
                if "unrecorded" in row:
                    self.unrecorded.append((report.nodeid, row["unrecorded"]))
                else:
                    self.rows.append((report.nodeid, row.get("outcome", ""), row))

    def pytest_terminal_summary(self, terminalreporter, exitstatus: int,
                                config: pytest.Config) -> None:
        if hasattr(config, "workerinput") or not (self.rows or self.unrecorded):
            return
        tr, rows = terminalreporter, self.rows
        tr.write_sep("=", "graphdbg summary")
        if self.unrecorded:
            # never silent: a test asked for and not recorded is said so, with why
            tr.write_line(f"{len(self.unrecorded)} test(s) could not be recorded:", yellow=True)
            for nodeid, why in self.unrecorded:
                tr.write_line(f"  {nodeid}: {why}")
            if not rows:
                return
            tr.write_line("")
        total = {k: sum(r[2][k] for r in rows) for k in ("graphs", "graph_breaks", "recompiles",
                                                         "divergences", "errors")}
        def n(count: int, noun: str) -> str:
            return f"{count} {noun}{'' if count == 1 else 's'}"
        tr.write_line(f"{n(len(rows), 'test')} recorded: {n(total['graphs'], 'graph')}, "
                      f"{n(total['graph_breaks'], 'graph break')}, "
                      f"{n(total['recompiles'], 'recompile')}, "
                      f"{n(total['divergences'], 'divergence')}, {n(total['errors'], 'error')}")
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
                # where: a passing test's findings are shown nowhere else
                sites = c.get("sites") or []
                for site in sites[:SITES_SHOWN]:
                    tr.write_line(f"  {site}")
                if len(sites) > SITES_SHOWN:
                    tr.write_line(f"  … and {len(sites) - SITES_SHOWN} more")
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


def _cut_end(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


def pytest_unconfigure(config: pytest.Config) -> None:
    # an empty run folder this session made is not left behind
    d = _run_dir(config)
    if os.path.isdir(d) and not os.listdir(d) and not hasattr(config, "workerinput"):
        shutil.rmtree(d, ignore_errors=True)
