"""`graphdbg.check_export` and the fixture's `assert_exports_match`: real
exports (torch.export.export, torch.onnx.export(dynamo=True)) checked by real
ONNX Runtime, failures read as a test would read them (the AssertionError's
text, the user's line in it, the export's own exception chained).

The fixture's assertion and the marker's wording are driven by one inner
pytest run (a process of its own, as tests/e2e/test_pytest_plugin.py's are),
started with the file's first test so that it runs beside the in-process
ones: the file takes about as long as its in-process tests."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import graphdbg
from graphdbg.core.format import short
from conftest import ENV, code_at, line_of

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

HERE = Path(__file__)
# one worker runs the file under xdist (--dist loadgroup): the inner run,
# started with the first test, is read by the last
pytestmark = [pytest.mark.usefixtures("clean_torch"), pytest.mark.xdist_group("check-export")]


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 16)

    def forward(self, x):
        h = self.fc1(x)
        h = torch.nn.functional.gelu(h, approximate="tanh")  # MARK gelu
        return self.fc2(h).softmax(-1)


class Airy(torch.nn.Module):
    def forward(self, x):
        y = torch.sin(x)
        return torch.special.airy_ai(y) + 1  # MARK airy


STEP = [0]


class Scheduled(torch.nn.Module):
    """Reads (and advances) a global the export cannot see as an input."""

    def forward(self, x):
        STEP[0] += 1
        return torch.relu(x) * 0.5 ** STEP[0]  # MARK step


class Rows(torch.nn.Module):
    def forward(self, x):
        return (x * 2).reshape(4, 16)  # MARK rows


def wrong_gelu(x, approximate: str = "tanh"):
    """tanh-GELU as an onnxscript function, with 0.44715 for 0.044715."""
    from onnxscript import opset18 as op
    inner = op.Mul(op.Constant(value_float=0.7978845608), op.Add(
        x, op.Mul(op.Constant(value_float=0.44715), op.Mul(x, op.Mul(x, x)))))
    return op.Mul(op.Mul(op.Constant(value_float=0.5), x),
                  op.Add(op.Constant(value_float=1.0), op.Tanh(inner)))


def where(mark: str) -> str:
    """file:line of a marked line, as the failure text writes it."""
    return f"{short(str(HERE))}:{line_of(HERE, mark)}"


@pytest.mark.parametrize("onnx", [False, True], ids=["torch.export", "onnx"])
def test_a_clean_model_exports_and_matches_eager(onnx, tmp_path):
    torch.manual_seed(0)
    model, x = Block().eval(), torch.randn(4, 16)
    expected = model(x)
    report = graphdbg.check_export(model, (x,), onnx=onnx, path=str(tmp_path / "e.run"))
    report.assert_ok()
    assert report.ok and bool(report) and report.problems == [] and report.error is None
    (g,) = report.graphs
    assert g.kind == ("onnx" if onnx else "export")
    if onnx:
        assert isinstance(report.program, torch.onnx.ONNXProgram)
        assert g.export["runtime"].startswith("onnxruntime") and not g.export.get("not_checked")
        assert g.export["onnx_ops"]["gelu"] == ["Gelu"]
    else:
        assert isinstance(report.program, torch.export.ExportedProgram)
    assert str(report).endswith("exported, matches eager")
    assert (tmp_path / "e.run").is_file()          # a path given is kept
    assert torch.equal(model(x), expected)         # the model is left as it was
    # and torch's export functions (clean_torch checks torch.export.export)
    assert not hasattr(torch.onnx.export, "_graphdbg_hook")
    assert not hasattr(torch.onnx.ONNXProgram.__call__, "_graphdbg_hook")


def test_a_wrong_custom_translation_fails_at_the_users_line():
    torch.manual_seed(0)
    model, x = Block().eval(), torch.randn(4, 16)
    report = graphdbg.check_export(model, (x,), onnx=True,  # MARK call gelu
                                   custom_translation_table={torch.ops.aten.gelu.default: wrong_gelu})
    assert not report.ok and isinstance(report.program, torch.onnx.ONNXProgram)
    (d,) = report.divergences
    assert d.detail.exported == "onnx" and d.detail.classification == "miscompile"
    assert d.detail.onnx_ops[-1] == "Mul" and "Tanh" in d.detail.onnx_ops
    with pytest.raises(AssertionError) as info:
        report.assert_ok()
    text = str(info.value)
    # the plugin's failure text: head, what, kind at file:line, code, message, detail, hint
    assert text.startswith(f"check_export(Block, onnx=True) at {where('call gelu')}: "
                           "the export does not match eager\n"), text
    assert f"- ONNX Runtime differs from eager at 1 place(s) (torch.onnx.export at " \
           f"{where('call gelu')})" in text
    assert f"divergence at {where('gelu')} in forward" in text
    assert f"| {code_at(HERE, line_of(HERE, 'gelu'))}" in text
    assert "ONNX Runtime diverges from eager at torch.ops.aten.gelu.default (ONNX Mul" in text
    assert "miscompile · node gelu (torch.ops.aten.gelu.default) · stage onnxruntime" in text
    assert re.search(r"hint: .*custom_translation_table entry for torch.ops.aten.gelu.default", text)
    # the run is kept for a look, and the text says where
    assert report.run_file and os.path.isfile(report.run_file) and "graphdbg tui " in text
    os.remove(report.run_file)


def test_an_op_without_onnx_translation_fails_naming_the_op_and_line():
    report = graphdbg.check_export(Airy().eval(), (torch.randn(3),), onnx=True)  # MARK call airy
    assert report.program is None and report.error is not None
    with pytest.raises(AssertionError) as info:
        report.assert_ok()
    text = str(info.value)
    assert text.startswith(f"check_export(Airy, onnx=True) at {where('call airy')}: "
                           "the export failed\n- 1 export(s) failed\n"), text
    assert f"compile error at {where('airy')} in forward" in text
    assert "torch.onnx.export failed: no ONNX translation for aten.special_airy_ai.default" in text
    assert "    - custom_translation_table={torch.ops.aten.special_airy_ai.default:" in text
    assert "\x1b[" not in text                      # torch's colours are not copied
    # the export's own exception, chained
    assert info.value.__cause__ is report.error
    assert type(report.error).__name__ == "ConversionError"
    (f,) = report.findings
    assert f.detail.onnx and f.detail.onnx_op == "aten.special_airy_ai.default"
    os.remove(report.run_file)


def test_the_exported_program_departing_from_eager_fails_at_the_line():
    STEP[0] = 0
    report = graphdbg.check_export(Scheduled(), (torch.ones(3),))  # MARK call step
    with pytest.raises(AssertionError) as info:
        report.assert_ok()
    text = str(info.value)
    assert f"- the exported program differs from eager at 1 place(s) (torch.export.export at " \
           f"{where('call step')})" in text, text
    assert f"divergence at {where('step')} in forward" in text
    assert "the exported program (torch.export) diverges from eager" in text
    assert report.divergences[0].detail.exported == "export"
    os.remove(report.run_file)


def test_a_size_declared_dynamic_and_fixed_fails_unless_allowed():
    from torch.export import Dim
    x = torch.randn(4, 16)
    report = graphdbg.check_export(Rows(), (x,), dynamic_shapes={"x": {0: Dim.AUTO}})
    text = report.text
    assert "- 1 size(s) declared dynamic fixed by the export" in text, text
    assert f"export specialized at {where('rows')} in forward" in text
    assert "torch.export fixed x.size()[0] to 4, which you declared dynamic (Dim.AUTO)" in text
    os.remove(report.run_file)
    report = graphdbg.check_export(Rows(), (x,), dynamic_shapes={"x": {0: Dim.AUTO}},
                                   allow="export_specialized")
    report.assert_ok()
    assert report.run_file is None                 # temporary, and nothing to look at: deleted


def test_onnx_without_onnxruntime_is_one_line_to_skip_on(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)   # as if not installed
    with pytest.raises(graphdbg.OnnxUnavailable) as info:
        graphdbg.check_export(Block(), (torch.randn(4, 16),), onnx=True)
    assert isinstance(info.value, ImportError) and info.value.missing == ["onnxruntime"]
    assert str(info.value) == ("graphdbg.check_export(onnx=True) needs onnxruntime: "
                               "pip install 'graphdbg[onnx]'")


# -- the fixture and the marker, in a pytest run of their own -----------------------------

PROGRAM = '''import torch
from onnxscript import opset18 as op


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.nn.functional.gelu(self.fc(x), approximate="tanh")  # MARK inner gelu


class Airy(torch.nn.Module):
    def forward(self, x):
        return torch.special.airy_ai(x)  # MARK inner airy


def wrong_gelu(x, approximate: str = "tanh"):
    inner = op.Mul(op.Constant(value_float=0.7978845608), op.Add(
        x, op.Mul(op.Constant(value_float=0.44715), op.Mul(x, op.Mul(x, x)))))
    return op.Mul(op.Mul(op.Constant(value_float=0.5), x),
                  op.Add(op.Constant(value_float=1.0), op.Tanh(inner)))


WRONG = {torch.ops.aten.gelu.default: wrong_gelu}
'''

TESTS = '''import sys

import pytest
import torch
from torch.export import export as export_imported_early

import graphdbg as gd
from program import WRONG, Airy, Block

torch.manual_seed(0)
X = torch.randn(2, 8)


def test_fixture_onnx_wrong_translation(graphdbg):
    torch.onnx.export(Block().eval(), (X,), dynamo=True, verbose=False,  # MARK wrong call
                      custom_translation_table=WRONG)
    graphdbg.assert_exports_match(atol=10.0)   # loosened: passes
    graphdbg.assert_exports_match()  # MARK wrong assert


def test_fixture_export_failed(graphdbg):
    with pytest.raises(Exception):
        torch.onnx.export(Airy().eval(), (X,), dynamo=True, verbose=False)
    graphdbg.assert_exports_match()


def test_fixture_nothing_exported(graphdbg):
    export_imported_early(Block().eval(), (X,))
    graphdbg.assert_exports_match()


def test_fixture_without_onnxruntime_skips(graphdbg, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)   # as if not installed
    torch.onnx.export(Block().eval(), (X,), dynamo=True, verbose=False)
    try:
        graphdbg.assert_exports_match()
    except gd.OnnxUnavailable as exc:
        pytest.skip(str(exc))


def test_check_export_in_a_recorded_test(graphdbg):
    gd.check_export(Block().eval(), (X,), onnx=True, custom_translation_table=WRONG,
                    path="check_export.run").assert_ok()


@pytest.mark.graphdbg
def test_marker_export_diverges():
    torch.onnx.export(Block().eval(), (X,), dynamo=True, verbose=False,
                      custom_translation_table=WRONG)
'''

ARGS = ("-rA", "-p", "no:cacheprovider", "-p", "no:textual-snapshot")


def _section(out: str, test: str) -> str:
    m = re.search(rf"_{{3,}} {test} _{{3,}}\n(.*?)(?=\n_{{3,}} |\n={{3,}} |\n-{{3,}} )", out, re.S)
    assert m, f"no failure section for {test} in:\n{out[-3000:]}"
    return m[1]


@pytest.fixture(scope="module")
def inner_run(tmp_path_factory):
    """TESTS in a pytest process of its own, started at once and read when
    asked for: it runs beside this file's in-process tests (two cores)."""
    folder = tmp_path_factory.mktemp("exports")
    (folder / "program.py").write_text(PROGRAM)
    (folder / "test_exports.py").write_text(TESTS)
    with open(folder / "stdout.txt", "w") as out, open(folder / "stderr.txt", "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "pytest", *ARGS], cwd=folder, env=ENV,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=err)

    def result() -> tuple[str, Path]:
        rc = proc.wait(timeout=300)
        out, err = (folder / "stdout.txt").read_text(), (folder / "stderr.txt").read_text()
        assert rc == 1, out[-3000:] + err[-3000:]   # some tests fail
        return out, folder

    yield result
    if proc.poll() is None:     # its test was not run (or failed before reading it)
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module", autouse=True)
def _inner_run_started_early(request):
    """Starts the inner run with this module's first test, when its test is
    selected (-k), so that it overlaps the in-process tests."""
    if any(item.name == INNER for item in request.session.items):
        request.getfixturevalue("inner_run")


INNER = "test_the_fixture_assertion_and_the_marker_fail_with_the_plugins_text"


def test_the_fixture_assertion_and_the_marker_fail_with_the_plugins_text(inner_run):
    out, folder = inner_run()
    outcomes = {m[2]: m[1] for m in re.finditer(r"^(PASSED|FAILED|ERROR) \S+::(\w+)", out, re.M)}
    assert outcomes == {
        "test_fixture_onnx_wrong_translation": "FAILED",
        "test_fixture_export_failed": "FAILED",
        "test_fixture_nothing_exported": "FAILED",
        "test_check_export_in_a_recorded_test": "FAILED",
        "test_marker_export_diverges": "FAILED",
    }, out[-4000:]
    gelu = f"program.py:{line_of(folder / 'program.py', 'inner gelu')}"
    airy = f"program.py:{line_of(folder / 'program.py', 'inner airy')}"
    call = f"test_exports.py:{line_of(folder / 'test_exports.py', 'wrong call')}"

    text = _section(out, "test_fixture_onnx_wrong_translation")
    assert "E       AssertionError: the test's exports do not match eager (1 export(s))" in text
    assert f"E       - ONNX Runtime differs from eager at 1 place(s) (torch.onnx.export at {call})" \
        in text, text
    assert f"E           divergence at {gelu} in forward" in text
    assert "E             hint: The ONNX ops translated from this node" in text
    # the traceback ends at the test's line; the findings are not listed a second time
    assert re.search(r">\s+graphdbg.assert_exports_match\(\)  # MARK wrong assert", text)
    assert "graphdbg findings" not in text

    text = _section(out, "test_fixture_export_failed")
    assert "E       - 1 export(s) failed" in text
    assert f"E           compile error at {airy} in forward" in text
    assert "no ONNX translation for aten.special_airy_ai.default" in text

    text = _section(out, "test_fixture_nothing_exported")
    assert "no export was recorded in this test" in text
    assert "`from torch.export import export`, is not seen" in text

    # onnxruntime missing: one line to skip on
    assert re.search(r"^SKIPPED \[1\] test_exports.py:\d+: an ONNX export was not checked against "
                     r"eager: onnxruntime not installed \(pip install 'graphdbg\[onnx\]'\)$", out, re.M)

    # check_export inside a recorded test: its own text, its exception not the recorder's
    text = _section(out, "test_check_export_in_a_recorded_test")
    assert "E       AssertionError: check_export(Block, onnx=True) at test_exports.py:" in text
    assert f"E           divergence at {gelu} in forward" in text
    assert "E       open it:   graphdbg tui check_export.run" in text

    # the marker says an export's divergence as an export's, not a compile's
    text = _section(out, "test_marker_export_diverges")
    assert "went over @pytest.mark.graphdbg()" in text
    assert "- an export differs from eager at 1 place(s)" in text
    assert "compiled differs from eager" not in text
