"""The pytest plugin, driven by real pytest runs of generated test files
(`pytester`), on real torch.compile (the `eager` and `aot_eager` backends).

One pytest process runs a passing and a failing test for each marker
argument and helper (their outcomes and failure texts are read from its
output); one more covers the options' ini twins and the command line
winning over them (under xdist). Inner runs are processes of their own: torch imported in
an in-process run would outlive the modules pytester forgets between runs. The
two inner runs without xdist are forked from one server that has imported torch
and Dynamo (tests/support/warm_forkserver.py; measured: 21 s to 11 s and 11 s
to 4 s, for the server's one start of 5 s); the others start from nothing (the
plugin's load without torch; xdist's workers, which execnet starts)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from conftest import SAMPLES, markers, python

# the tests that read the shared inner run, and the other inner run forked from
# the same warm server, stay on one xdist worker (each is made once)
shared_run = pytest.mark.xdist_group("pytest-plugin")

# a small program of the user's: the lines the findings must name are marked
PROGRAM = '''import torch
import torch._dynamo


def breaks(x):
    y = x * 2
    torch._dynamo.graph_break()  # MARK break
    return y + 1


def scaled(x, scale):
    return x * scale + 1  # MARK scaled


class Faulty:
    """A backend that makes every add subtract: compiled differs from eager."""
    def __call__(self, gm, example_inputs):
        for node in gm.graph.nodes:
            if node.target in (torch.add, __import__("operator").add):
                node.target = torch.sub
        gm.recompile()
        return gm.forward


def faulty_fn(x):
    return torch.relu(x) + 1.0  # MARK faulty


def clean(x):
    return torch.sin(x) * 2


def nan_fn(x):
    return torch.log(x - 10)  # MARK nan
'''

TESTS = '''import pytest
import torch
from program import Faulty, breaks, clean, faulty_fn, nan_fn, scaled

X = torch.ones(4)

# -- the marker ---------------------------------------------------------------------------

@pytest.mark.graphdbg
def test_marker_clean():
    assert torch.equal(torch.compile(clean, backend="eager")(X), torch.sin(X) * 2)

@pytest.mark.graphdbg(max_graph_breaks=0)
def test_marker_break_fails():
    torch.compile(breaks, backend="eager")(X)

@pytest.mark.graphdbg(max_graph_breaks=1)
def test_marker_one_break_allowed():
    torch.compile(breaks, backend="eager")(X)

@pytest.mark.graphdbg(allow=["graph_break"])
def test_marker_allow_kind():
    torch.compile(breaks, backend="eager")(X)

@pytest.mark.graphdbg(allow=[r"graph_break\\(\\)|explicit"])
def test_marker_allow_pattern():
    torch.compile(breaks, backend="eager")(X)

@pytest.mark.graphdbg(allow=["recompile"])
def test_marker_allow_other_kind_fails():
    torch.compile(breaks, backend="eager")(X)

@pytest.mark.graphdbg(max_graphs=2, max_graph_breaks=None)
def test_marker_max_graphs_passes():
    torch.compile(breaks, backend="eager")(X)

@pytest.mark.graphdbg
def test_marker_recompile_fails():
    f = torch.compile(scaled, backend="eager")
    f(X, 0.5)
    f(X, 2.0)

@pytest.mark.graphdbg(max_recompiles=1)
def test_marker_one_recompile_allowed():
    f = torch.compile(scaled, backend="eager")
    f(X, 0.5)
    f(X, 2.0)

@pytest.mark.graphdbg(max_graphs=1)
def test_marker_max_graphs_fails():
    torch.compile(breaks, backend="eager")(X)   # two graphs around the break

@pytest.mark.graphdbg
def test_marker_divergence_fails():
    torch.compile(faulty_fn, backend=Faulty())(X)

@pytest.mark.graphdbg(compare=False)
def test_marker_compare_off():
    torch.compile(faulty_fn, backend=Faulty())(X)

@pytest.mark.graphdbg(atol=5.0)
def test_marker_atol_tolerates():
    torch.compile(faulty_fn, backend=Faulty())(X)   # off by 2.0

@pytest.mark.graphdbg(rtol=5.0)
def test_marker_rtol_tolerates():
    torch.compile(faulty_fn, backend=Faulty())(X)   # 0 where eager says 2

@pytest.mark.graphdbg(rtol=0.1)
def test_marker_rtol_too_tight():
    torch.compile(faulty_fn, backend=Faulty())(X)

@pytest.mark.graphdbg
def test_raises_on_its_own():
    torch.compile(breaks, backend="eager")(X)
    raise ValueError("the test's own error")

@pytest.mark.graphdbg("positional")
def test_marker_bad_argument():
    pass

# -- the fixture ----------------------------------------------------------------------

def test_fixture_no_breaks_passes(graphdbg):
    torch.compile(clean, backend="eager")(X)
    graphdbg.assert_no_graph_breaks()
    graphdbg.assert_graphs(1)
    graphdbg.assert_close()
    graphdbg.assert_no_errors()
    graphdbg.assert_no_nan()
    graphdbg.assert_max_recompiles(0)
    c = graphdbg.counts()
    assert (c.graphs, c.graph_breaks, c.recompiles) == (1, 0, 0)

def test_fixture_no_breaks_fails(graphdbg):
    torch.compile(breaks, backend="eager")(X)
    graphdbg.assert_no_graph_breaks()  # MARK helper line

def test_fixture_graphs_fails(graphdbg):
    torch.compile(breaks, backend="eager")(X)
    graphdbg.assert_graphs(1)

def test_fixture_recompiles_fails(graphdbg):
    f = torch.compile(scaled, backend="eager")
    f(X, 0.5)
    f(X, 2.0)
    graphdbg.assert_max_recompiles(0)

def test_fixture_close_fails(graphdbg):
    torch.compile(faulty_fn, backend=Faulty())(X)
    graphdbg.assert_close()

def test_fixture_close_with_tolerance_passes(graphdbg):
    torch.compile(faulty_fn, backend=Faulty())(X)
    graphdbg.assert_close(atol=5.0)

def test_fixture_close_with_tolerance_fails(graphdbg):
    torch.compile(faulty_fn, backend=Faulty())(X)
    graphdbg.assert_close(rtol=1e-3, atol=1e-3)

def test_fixture_errors_fails(graphdbg):
    torch.compile(faulty_fn, backend=Faulty())(X)
    graphdbg.assert_no_errors()

def test_fixture_nan_fails(graphdbg):
    torch.compile(nan_fn, backend="aot_eager")(X)
    graphdbg.assert_no_nan()

def test_fixture_expect_passes(graphdbg):
    f = torch.compile(scaled, backend="eager")
    with graphdbg.expect(graphs=1, graph_breaks=0, recompiles=0):
        f(X, 0.5)
    with graphdbg.expect(graphs=0, recompiles=0):
        f(X, 0.5)       # the same scale: nothing compiled again

def test_fixture_expect_fails(graphdbg):
    f = torch.compile(scaled, backend="eager")
    f(X, 0.5)
    with graphdbg.expect(recompiles=0):  # MARK expect line
        f(X, 2.0)

def test_fixture_values_unchanged(graphdbg):
    torch.manual_seed(0)
    a = torch.compile(lambda x: torch.nn.functional.dropout(x, 0.5) * 3, backend="aot_eager")(
        torch.ones(64))
    torch.manual_seed(0)
    b = torch.nn.functional.dropout(torch.ones(64), 0.5) * 3
    assert torch.equal(a, b)

def test_without_graphdbg_is_not_recorded():
    torch.compile(breaks, backend="eager")(X)
'''


# unittest.TestCase tests, as torch's and transformers' suites are written: the
# marker on a method and on a class; setUp's compiles are the test's
CASES = '''import unittest

import pytest
import torch
from program import breaks, clean, scaled

X = torch.ones(4)


class Recompiles(unittest.TestCase):
    def setUp(self):
        self.f = torch.compile(scaled, backend="eager")
        self.f(X, 0.5)

    @pytest.mark.graphdbg
    def test_case_marker_recompile_fails(self):
        self.f(X, 2.0)  # MARK case recompile

    @pytest.mark.graphdbg(max_recompiles=1)
    def test_case_marker_one_recompile_allowed(self):
        self.f(X, 2.0)

    def test_case_unmarked_is_not_recorded(self):
        self.f(X, 2.0)


@pytest.mark.graphdbg(max_graphs=1)
class MarkedClass(unittest.TestCase):
    def test_case_class_marker_fails(self):
        torch.compile(breaks, backend="eager")(X)

    def test_case_class_marker_passes(self):
        torch.compile(clean, backend="eager")(X)
'''

# the fixture asked for by an autouse fixture, for a function and for TestCases
AUTOUSE = '''import unittest

import pytest
import torch
from program import breaks, clean

X = torch.ones(4)


@pytest.fixture(autouse=True)
def recorded(request, graphdbg):
    # at setup the recorder runs already and has seen nothing
    assert graphdbg.recording and graphdbg.counts().graphs == 0
    if request.instance is not None:
        request.instance.graphdbg = graphdbg
    yield
    graphdbg.assert_no_graph_breaks()   # after the call: the run is still there


@pytest.fixture
def warm():
    f = torch.compile(clean, backend="eager")
    f(X)            # at setup: recorded, and still compiled when the test runs
    return f


def test_autouse_function(graphdbg, warm):
    with graphdbg.expect(graphs=0, recompiles=0):
        warm(X)
    graphdbg.assert_graphs(1)


class AutouseCase(unittest.TestCase):
    def test_autouse_case(self):
        torch.compile(clean, backend="eager")(X)
        self.graphdbg.assert_graphs(1)

    def test_autouse_teardown_fails(self):
        torch.compile(breaks, backend="eager")(X)
'''

# how many capture sessions are still alive when the inner run ends
LIFETIME = '''import gc
import sys


def pytest_sessionfinish(session):
    gc.collect()
    hooks = sys.modules.get("graphdbg.hooks.session")
    live = sum(type(o) is hooks.Session for o in gc.get_objects()) if hooks else -1
    print(f"\\nlive capture sessions: {live}")
'''


def _line(text: str, mark: str) -> int:
    (n,) = [i for i, ln in enumerate(text.splitlines(), 1) if ln.rstrip().endswith(f"# MARK {mark}")]
    return n


def _outcomes(lines: list[str]) -> dict[str, str]:
    """test name -> PASSED / FAILED / ERROR, from the `-rA` short summary."""
    out = {}
    for line in lines:
        m = re.match(r"(PASSED|FAILED|ERROR) \S+::(\w+)", line)
        if m:
            out[m[2]] = m[1]
    return out


def _section(lines: list[str], test: str) -> str:
    """One test's failure section of pytest's output."""
    text = "\n".join(lines)
    m = re.search(rf"_{{3,}} {test} _{{3,}}\n(.*?)(?=\n_{{3,}} |\n={{3,}} |\n-{{3,}} )", text, re.S)
    assert m, f"no failure section for {test} in:\n{text[-3000:]}"
    return m[1]


ARGS = ("-rA", "-p", "no:cacheprovider", "-p", "no:textual-snapshot")


def run_tests(pytester, *select: str, args=()) -> list[str]:
    """TESTS (and PROGRAM) in a fresh pytester folder: the tests whose names
    are given, in a pytest process of their own (torch in an in-process
    inner run would outlive the modules pytester forgets between runs)."""
    pytester.makepyfile(program=PROGRAM, test_user=TESTS)
    return pytester.runpytest_subprocess(*ARGS, "-k", " or ".join(select), *args).outlines


@pytest.fixture(scope="module")
def warm_pytest():
    """``warm_pytest(folder, *args)``: `python -m pytest ARGS` in ``folder``,
    in a process forked from this worker's server that has imported torch and
    Dynamo (as a user's pytest would import them with the first test module;
    nothing of graphdbg): its exit status, stdout and stderr."""
    def run(folder, *args):
        p = python("-m", "pytest", *args, cwd=folder)
        return p.returncode, p.stdout, p.stderr
    return run


@pytest.fixture(scope="module")
def main_run(tmp_path_factory, warm_pytest) -> tuple[list[str], Path]:
    """Every test of TESTS, CASES and AUTOUSE in one pytest process: one
    torch import serves the marker, fixture, TestCase and own-error checks
    below."""
    folder = tmp_path_factory.mktemp("plugin")
    (folder / "program.py").write_text(PROGRAM)
    (folder / "test_user.py").write_text(TESTS)
    (folder / "test_cases.py").write_text(CASES)
    (folder / "test_autouse.py").write_text(AUTOUSE)
    (folder / "conftest.py").write_text(LIFETIME)
    shutil.copy(SAMPLE, folder / SAMPLE.name)
    rc, out, err = warm_pytest(folder, *ARGS)
    assert rc == 1, out[-3000:] + err[-3000:]  # some tests fail
    return out.splitlines(), folder


PROGRAM_LINES = {m: _line(PROGRAM, m) for m in ("break", "scaled", "faulty", "nan")}
SAMPLE = SAMPLES / "pytest_plugin" / "test_model.py"


@shared_run
def test_the_sample_fails_as_its_readme_says(main_run):
    out, folder = main_run
    got = _outcomes(out)
    assert {t: got[t] for t in ("test_gate_compiles_in_one_graph",
                                "test_a_second_scale_does_not_recompile",
                                "test_compiled_matches_eager")} == {
        "test_gate_compiles_in_one_graph": "FAILED",
        "test_a_second_scale_does_not_recompile": "FAILED",
        "test_compiled_matches_eager": "PASSED"}
    copy = folder / SAMPLE.name
    ((_, brk),) = markers(copy, "graph_break")
    ((_, rec),) = markers(copy, "recompile")
    assert f"graph break at test_model.py:{brk} in forward" in _section(
        out, "test_gate_compiles_in_one_graph")
    text = _section(out, "test_a_second_scale_does_not_recompile")
    assert f"recompile at test_model.py:{rec} in scale_and_shift" in text
    assert "inside the block: graphs 1 (expected 0), recompiles 1 (expected 0)" in text


@shared_run
def test_the_marker_fails_a_test_that_breaks_and_passes_a_clean_one(main_run):
    out, folder = main_run
    got = _outcomes(out)
    want = {"test_marker_clean": "PASSED", "test_marker_break_fails": "FAILED",
            "test_marker_one_break_allowed": "PASSED", "test_marker_allow_kind": "PASSED",
            "test_marker_allow_pattern": "PASSED", "test_marker_allow_other_kind_fails": "FAILED"}
    assert {t: got[t] for t in want} == want
    text = _section(out, "test_marker_break_fails")
    # the test's location first, then each finding at the user's line with its code
    # and a caret, torch's reason in one line, the hint; then the run and the command
    # the marker as written, the limit it went over, counted in words
    assert re.search(r"^test_user.py:\d+: test_marker_break_fails went over "
                     r"@pytest.mark.graphdbg\(max_graph_breaks=0\)$", text, re.M), text
    assert "\n- 1 graph break (max_graph_breaks=0)\n" in text
    assert f"graph break at program.py:{PROGRAM_LINES['break']} in breaks" in text
    assert "torch._dynamo.graph_break()  # MARK break" in text and "^^^^^^^^^^^" in text
    assert "torch: " in text and "hint: " in text
    assert "called from test_user.py" in text
    run = re.search(r"run saved: (\S+\.run)", text)[1]
    assert f"open it:   graphdbg tui {run}" in text
    assert (folder / run).exists()                                    # kept: the test failed
    assert not list((folder / ".graphdbg").glob("*test_marker_clean*"))  # passed: deleted
    assert "Traceback" not in text and "pytest_plugin.py" not in text
    # the short summary (-rA here, as -rf) carries the reason: the first line of
    # what the report holds, cut to the terminal's width (whole on CI, or -vv)
    reason = f"1 graph break at program.py:{PROGRAM_LINES['break']} (max_graph_breaks=0)"
    (said,) = [ln.split(" - ", 1)[1] for ln in out
               if ln.startswith("FAILED test_user.py::test_marker_break_fails - ")]
    assert said == reason or (said.endswith("...") and reason.startswith(said[:-3])
                              and len(said) > 20), said


@shared_run
def test_the_marker_limits_recompiles_graphs_and_numerics(main_run):
    out, _ = main_run
    got = _outcomes(out)
    want = {"test_marker_recompile_fails": "FAILED", "test_marker_one_recompile_allowed": "PASSED",
            "test_marker_max_graphs_fails": "FAILED", "test_marker_divergence_fails": "FAILED",
            "test_marker_compare_off": "PASSED", "test_marker_atol_tolerates": "PASSED",
            "test_marker_rtol_tolerates": "PASSED", "test_marker_rtol_too_tight": "FAILED",
            "test_marker_max_graphs_passes": "PASSED"}
    assert {t: got[t] for t in want} == want
    text = _section(out, "test_marker_recompile_fails")
    # a bare marker: its default limit, said to be the default
    assert re.search(r"went over @pytest.mark.graphdbg\(\)$", text, re.M), text
    assert "\n- 1 recompile (max_recompiles=0, the default)\n" in text
    assert f"recompile at program.py:{PROGRAM_LINES['scaled']} in scaled" in text
    assert "scale changed: was 0.5, now 2.0" in text
    assert "\n- 2 graphs compiled (max_graphs=1)\n" in _section(out, "test_marker_max_graphs_fails")
    text = _section(out, "test_marker_divergence_fails")
    assert "compiled differs from eager at 1 place(s)" in text
    assert f"divergence at program.py:{PROGRAM_LINES['faulty']} in faulty_fn" in text
    # the node, its op, the error and the float64 verdict
    assert re.search(r"miscompile · node \w+ \(.+\) · .*max abs 2, rel [\d.e-]+ · vs float64: "
                     r"eager [\de.-]+, compiled [\de.-]+ \(compiled is further from float64\)",
                     text), text
    assert "went over @pytest.mark.graphdbg(rtol=0.1)" in _section(out, "test_marker_rtol_too_tight")
    # the finding has a repro kind: the command that writes its script, numbered as the report's
    assert re.search(r"^ +repro: graphdbg repro \S+\.run 1$", text, re.M), text


@shared_run
def test_a_test_that_raises_keeps_its_own_error_and_a_bad_marker_is_one_line(main_run):
    out, _ = main_run
    got = _outcomes(out)
    assert (got["test_raises_on_its_own"], got["test_marker_bad_argument"]) == ("FAILED", "ERROR")
    text = _section(out, "test_raises_on_its_own")
    assert "ValueError: the test's own error" in text
    assert 'raise ValueError("the test\'s own error")' in text      # its own traceback
    assert "went over" not in text
    # what was found is in a section of its report, with the saved run
    whole = "\n".join(out)
    assert re.search(r"-+ graphdbg findings -+\ngraph break at program.py", whole)
    assert re.search(r"open it:   graphdbg tui \S+test_raises_on_its_own.run", whole)
    # a marker with a positional argument: one line at setup, not our traceback
    assert "ERROR at setup of test_marker_bad_argument" in whole
    assert "pytest_plugin.py" not in whole and "graphdbg/testing.py" not in whole
    assert "@pytest.mark.graphdbg takes keyword arguments only" in whole


@shared_run
def test_fixture_helpers_pass_and_fail_at_the_test_line(main_run):
    out, _ = main_run
    got = _outcomes(out)
    want = {
        "test_fixture_no_breaks_passes": "PASSED", "test_fixture_no_breaks_fails": "FAILED",
        "test_fixture_graphs_fails": "FAILED", "test_fixture_recompiles_fails": "FAILED",
        "test_fixture_close_fails": "FAILED", "test_fixture_close_with_tolerance_passes": "PASSED",
        "test_fixture_close_with_tolerance_fails": "FAILED", "test_fixture_errors_fails": "FAILED",
        "test_fixture_nan_fails": "FAILED", "test_fixture_expect_passes": "PASSED",
        "test_fixture_expect_fails": "FAILED", "test_fixture_values_unchanged": "PASSED"}
    assert {t: got[t] for t in want} == want
    text = _section(out, "test_fixture_no_breaks_fails")
    # the traceback ends at the test's line, not in the plugin
    assert f"test_user.py:{_line(TESTS, 'helper line')}: AssertionError" in text
    assert "graphdbg/testing.py" not in text and "pytest_plugin.py" not in text
    assert "1 graph break(s) at 1 place(s)" in text
    assert f"graph break at program.py:{PROGRAM_LINES['break']}" in text
    assert "open it:   graphdbg tui" in text
    assert "2 graph(s) compiled, 1 expected: breaks at program.py" in _section(
        out, "test_fixture_graphs_fails")
    assert "1 recompile(s), at most 0 expected" in _section(out, "test_fixture_recompiles_fails")
    assert "compiled differs from eager at 1 place(s)" in _section(out, "test_fixture_close_fails")
    assert "(rtol=0.001, atol=0.001)" in _section(out, "test_fixture_close_with_tolerance_fails")
    assert "1 error(s)" in _section(out, "test_fixture_errors_fails")
    text = _section(out, "test_fixture_nan_fails")
    assert f"nan inf at program.py:{PROGRAM_LINES['nan']} in nan_fn" in text
    text = _section(out, "test_fixture_expect_fails")
    assert f"test_user.py:{_line(TESTS, 'expect line')}: AssertionError" in text
    assert "inside the block: recompiles 1 (expected 0)" in text
    assert "scale changed: was 0.5, now 2.0" in text


@shared_run
def test_the_session_summary_and_an_unrecorded_test(main_run):
    out, folder = main_run
    whole = "\n".join(out)
    assert "graphdbg summary" in whole
    # every test but the unrecorded ones and the one whose setup failed on its marker
    n = len(_outcomes(out)) - 3
    assert re.search(rf"^{n} tests recorded: \d+ graphs?, \d+ graph breaks?, "
                     r"\d+ recompiles?, \d+ divergences?, \d+ errors?$", whole, re.M), whole[-3000:]
    assert re.search(r"^test_user.py::test_marker_break_fails\s+2\s+1\s+0\s+0\s+0$", whole, re.M)
    assert "slowest compiles:" in whole and "run files kept:" in whole
    # where each counted finding is, under its test's row: for a passing test
    # (its report's sections are not shown) the one place that says so
    assert re.search(r"^test_user.py::test_marker_one_break_allowed\s+2\s+1\s+0\s+0\s+0\n"
                     rf"  graph break at program.py:{PROGRAM_LINES['break']}: "
                     r"torch._dynamo.graph_break\(\)  # MARK break$", whole, re.M), whole[-3000:]
    # neither fixture nor marker nor --graphdbg: not recorded, though it breaks
    assert _outcomes(out)["test_without_graphdbg_is_not_recorded"] == "PASSED"
    assert "test_without_graphdbg_is_not_recorded" not in whole.split("graphdbg summary")[1] \
        .split("short test summary")[0]
    assert not list((folder / ".graphdbg").glob("*not_recorded*"))


@shared_run
def test_unittest_testcase_methods_are_recorded_and_judged_by_their_marker(main_run):
    out, folder = main_run
    got = _outcomes(out)
    want = {"test_case_marker_recompile_fails": "FAILED",
            "test_case_marker_one_recompile_allowed": "PASSED",
            "test_case_unmarked_is_not_recorded": "PASSED",
            "test_case_class_marker_fails": "FAILED",
            "test_case_class_marker_passes": "PASSED"}
    assert {t: got[t] for t in want} == want
    # the method's marker fails it at the recompile's line, called from the
    # method (unittest's own frames are the runner's, like pytest's)
    text = _section(out, "Recompiles.test_case_marker_recompile_fails")
    assert re.search(r"^test_cases.py:\d+: test_case_marker_recompile_fails went over "
                     r"@pytest.mark.graphdbg\(\)$", text, re.M), text
    assert "- 1 recompile (max_recompiles=0, the default)" in text
    assert f"recompile at program.py:{PROGRAM_LINES['scaled']} in scaled" in text
    assert "scale changed: was 0.5, now 2.0" in text
    assert (f"called from test_cases.py:{_line(CASES, 'case recompile')} "
            "test_case_marker_recompile_fails\n") in text + "\n"
    assert "unittest" not in text and "Traceback" not in text
    run = re.search(r"run saved: (\S+\.run)", text)[1]
    assert (folder / run).exists()
    # the class's marker, on each of its methods
    text = _section(out, "MarkedClass.test_case_class_marker_fails")
    assert "went over @pytest.mark.graphdbg(max_graphs=1)" in text
    assert "- 1 graph break (max_graph_breaks=0, the default)" in text
    assert "- 2 graphs compiled (max_graphs=1)" in text
    whole = "\n".join(out)
    # setUp's compile is the test's: one graph, then the recompile
    assert re.search(r"^test_cases.py::Recompiles::test_case_marker_recompile_fails\s+2\s+0\s+1"
                     r"\s+0\s+0$", whole, re.M), whole[-3000:]
    summary = whole.split("graphdbg summary")[1].split("short test summary")[0]
    assert "test_case_unmarked_is_not_recorded" not in summary


@shared_run
def test_the_fixture_asked_for_by_an_autouse_fixture(main_run):
    out, folder = main_run
    got = _outcomes(out)
    # the autouse fixture found the recorder running at setup, for a function and
    # for TestCase methods; what a fixture compiled at setup is the test's, and
    # stays compiled for it (no second graph in the body)
    assert (got["test_autouse_function"], got["test_autouse_case"]) == ("PASSED", "PASSED")
    # its teardown still reads the run (the test passed: the run goes afterwards,
    # unless the teardown fails, as here)
    assert got["test_autouse_teardown_fails"] == "ERROR"
    whole = "\n".join(out)
    m = re.search(r"_+ ERROR at teardown of AutouseCase.test_autouse_teardown_fails _+\n"
                  r"(.*?)(?=\n_{3,} |\n={3,} )", whole, re.S)
    assert m, whole[-3000:]
    assert "1 graph break(s) at 1 place(s)" in m[1]
    assert f"graph break at program.py:{PROGRAM_LINES['break']} in breaks" in m[1]
    run = re.search(r"run saved: (\S+\.run)", m[1])[1]
    assert (folder / run).exists()
    assert not list((folder / ".graphdbg").glob("*test_autouse_case*"))     # passed: deleted
    assert "has not started" not in whole


@shared_run
def test_no_capture_session_outlives_its_test(main_run):
    # each session's fork callback held it for the life of the process: ~40
    # recorded tests left ~40 sessions (and their writers) behind
    out, _ = main_run
    assert "live capture sessions: 0" in out


def _recorded_session(path, call) -> list:
    """A capture session around ``call()``, stopped: weak references to the
    session, its context and its writer."""
    import weakref

    from graphdbg.hooks import Session
    from graphdbg.core.options import CaptureOptions

    with Session(str(path), CaptureOptions(eager=False), durable=False) as session:
        call()
    # (what it holds inside: this tests its lifetime)
    return [weakref.ref(session), weakref.ref(session._ctx), weakref.ref(session._writer)]


def _sin_plus_one(x):
    import torch
    return torch.sin(x) + 1


def test_a_stopped_capture_session_is_freed(tmp_path, clean_torch):
    import gc

    import torch

    # torch's first compile in a process caches the functions of its namespace
    # (torch.overrides), graphdbg's hook on torch.export.export among them when
    # a session is capturing: that one session's context would stay. Not here.
    torch.compile(_sin_plus_one, backend="eager")(torch.ones(4))
    torch._dynamo.reset()
    refs = _recorded_session(tmp_path / "a.run",
                             lambda: torch.compile(_sin_plus_one, backend="eager")(torch.ones(4)))
    torch._dynamo.reset()
    gc.collect()
    assert [r() for r in refs] == [None, None, None]


UNITTEST_SUITE = '''import unittest

import torch
from program import breaks, clean, scaled

X = torch.ones(4)


class Model(unittest.TestCase):
    def setUp(self):
        self.f = torch.compile(scaled, backend="eager")
        self.f(X, 0.5)

    def tearDown(self):
        torch.compile(clean, backend="eager")(X)

    def test_clean(self):
        self.f(X, 0.5)

    def test_recompiles(self):
        self.f(X, 2.0)

    def test_breaks_and_fails(self):
        torch.compile(breaks, backend="eager")(X)  # MARK suite break
        self.assertEqual(1, 2)

    def test_breaks_and_passes(self):
        torch.compile(breaks, backend="eager")(X)

    def test_blocked(self):
        self.f(X, 0.5)

    @unittest.skip("not today")
    def test_skipped(self):
        pass
'''


@shared_run
def test_graphdbg_records_every_test_of_a_unittest_suite(pytester, warm_pytest):
    # --graphdbg on a unittest-style file: every TestCase method is recorded
    # (setUp and tearDown with it), the summary counts them, the failing one's
    # run is kept; one whose run file cannot be written (a folder is in the way)
    # runs unrecorded, with a warning and a line in the summary
    pytester.makepyfile(program=PROGRAM, test_suite=UNITTEST_SUITE)
    pytester.mkdir(".graphdbg")
    pytester.mkdir(".graphdbg/test_suite.py__Model__test_blocked.run")
    rc, stdout, err = warm_pytest(pytester.path, *ARGS, f"--basetemp={pytester.path / 'basetemp'}",
                                  "--graphdbg")
    assert rc == 1, stdout[-3000:] + err[-3000:]  # one test fails
    out = stdout.splitlines()
    assert _outcomes(out) == {"test_clean": "PASSED", "test_recompiles": "PASSED",
                              "test_breaks_and_fails": "FAILED", "test_breaks_and_passes": "PASSED",
                              "test_blocked": "PASSED"}
    whole = "\n".join(out)
    summary = whole.split("graphdbg summary")[1].split("short test summary")[0]
    # setUp's graph, the method's, tearDown's (the skipped test is left out)
    assert re.search(r"^4 tests recorded: 13 graphs, 2 graph breaks, 1 recompile, "
                     r"0 divergences, 0 errors$", summary, re.M), summary
    assert re.search(r"^test_suite.py::Model::test_recompiles\s+3\s+0\s+1\s+0\s+0$",
                     summary, re.M), summary
    assert re.search(r"^test_suite.py::Model::test_breaks_and_fails\s+4\s+1\s+0\s+0\s+0$",
                     summary, re.M), summary
    # a passing TestCase's break is counted and said where it is
    assert re.search(r"^test_suite.py::Model::test_breaks_and_passes\s+4\s+1\s+0\s+0\s+0\n"
                     rf"  graph break at program.py:{PROGRAM_LINES['break']}: "
                     r"torch._dynamo.graph_break\(\)  # MARK break$", summary, re.M), summary
    assert re.search(r"^test_suite.py::Model::test_recompiles\s+3\s+0\s+1\s+0\s+0\n"
                     rf"  recompile at program.py:{PROGRAM_LINES['scaled']}: ", summary, re.M)
    assert re.search(r"^1 test\(s\) could not be recorded:\n  test_suite.py::Model::test_blocked: "
                     r"IsADirectoryError: ", summary, re.M), summary
    assert "GraphdbgWarning: graphdbg could not record test_suite.py::Model::test_blocked" in whole
    assert "run files kept: 1 " in summary
    kept = sorted(p.name for p in (pytester.path / ".graphdbg").glob("*.run") if p.is_file())
    assert kept == ["test_suite.py__Model__test_breaks_and_fails.run"]
    # the failure keeps unittest's own error, with what was found beside it
    text = _section(out, "Model.test_breaks_and_fails")
    assert "AssertionError: 1 != 2" in text
    assert re.search(r"-+ graphdbg findings -+\ngraph break at program.py:"
                     rf"{PROGRAM_LINES['break']} in breaks", whole)
    assert (f"called from test_suite.py:{_line(UNITTEST_SUITE, 'suite break')} "
            "test_breaks_and_fails") in whole


INI = """\
[pytest]
graphdbg = true
graphdbg_dir = from-ini
graphdbg_keep = true
graphdbg_compare_first = 0
"""


def test_options_in_the_ini_file_and_on_the_command_line_under_xdist(pytester, monkeypatch):
    # every option's ini twin (graphdbg, its folder, keep), the command line
    # winning over the ini file (compare-first 1 over 0: the faulty backend's
    # test is compared and fails); two workers, one run file per worker and
    # test, and their counts reach the controller's summary, and a failure's
    # reason its short summary (a terminal wide enough for the whole line)
    pytest.importorskip("xdist")
    monkeypatch.setenv("COLUMNS", "200")
    pytester.makeini(INI)
    runs = pytester.path / "from-ini"
    out = run_tests(pytester, "test_without_graphdbg_is_not_recorded", "test_marker_clean",
                    "test_marker_divergence_fails", "test_fixture_graphs_fails",
                    args=("-n", "2", "--graphdbg-compare-first", "1"))
    assert _outcomes(out) == {"test_without_graphdbg_is_not_recorded": "PASSED",
                              "test_marker_clean": "PASSED",
                              "test_marker_divergence_fails": "FAILED",    # compared: 1 wins
                              "test_fixture_graphs_fails": "FAILED"}
    names = sorted(p.name for p in runs.glob("*.run"))
    assert [re.sub(r"\.gw[01]\.run$", "", n) for n in names] == [
        "test_user.py__test_fixture_graphs_fails", "test_user.py__test_marker_clean",
        "test_user.py__test_marker_divergence_fails",
        "test_user.py__test_without_graphdbg_is_not_recorded"], names
    whole = "\n".join(out)
    assert "4 tests recorded: " in whole and "run files kept: 4" in whole
    assert re.search(r"test_user.py::test_without_graphdbg_is_not_recorded\s+2\s+1\s+0", whole)
    assert "went over @pytest.mark.graphdbg()" in whole
    assert (f"FAILED test_user.py::test_marker_divergence_fails - compiled differs from eager "
            f"at 1 place(s), first at program.py:{PROGRAM_LINES['faulty']}") in whole


def test_plugin_loads_without_torch_or_textual(pytester):
    pytester.makepyfile(test_light="""
        import sys

        def test_light():
            assert "graphdbg.pytest_plugin" in sys.modules
            bad = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "textual"))
            assert bad == []
        """)
    # (pytest-textual-snapshot, installed beside it here, imports textual itself)
    r = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:textual-snapshot")
    r.assert_outcomes(passed=1)


def test_a_session_is_freed_while_dynamo_keeps_its_compiled_graph(tmp_path, clean_torch):
    # Dynamo keeps a compiled graph (and, after a reset, its globals in the
    # program's module); graphdbg's wrapper around it must not keep the session
    import gc

    import torch

    compiled = torch.compile(_sin_plus_one, backend="eager")
    compiled(torch.ones(4))  # torch's first compile in the process, before the session
    torch._dynamo.reset()
    # compiled under the session, kept by Dynamo after it
    refs = _recorded_session(tmp_path / "k.run", lambda: compiled(torch.ones(4)))
    gc.collect()
    assert [r() for r in refs] == [None, None, None]
    assert float(compiled(torch.zeros(4)).sum()) == 4.0  # and the graph still runs, unrecorded
