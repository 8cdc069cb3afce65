"""Every class of compile-time failure: the finding's kind, file and line; the
program's exit status and exception type unchanged; the report shows each
error in a few lines with the code line, the full text is in the run file.

The error samples and one script run as a user would (plain python vs
`graphdbg run`, exit status included); the other programs run in-process,
once plain and once under `graphdbg.capture`."""

from __future__ import annotations

import functools
import hashlib
import re

import pytest
import torch
import torch._dynamo

import graphdbg
from conftest import (AOT, CAPTURED_AT, GOLDEN_SAVE, SAMPLES, at, exception_of,
                      group, line_of, marked, markers, report_doc, report_text, sites, stack)

HERE = __file__
pytestmark = pytest.mark.usefixtures("clean_torch")
_EXC_LINE = re.compile(r"^([\w.]*(?:Error|Exception|Failed|Unsupported|SymNode))\b")


def exception_type(stderr: str) -> str | None:
    """The type of the exception the program died of (the traceback's last
    `module.Type: message` line)."""
    found = [m[1] for ln in stderr.splitlines() if (m := _EXC_LINE.match(ln))]
    return found[-1].rsplit(".", 1)[-1] if found else None


def problem_block(report_text: str, kind: str) -> list[str]:
    """The report lines of the first finding of `kind`."""
    lines = report_text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.split()[1:2] == [kind])
    block = [lines[start]]
    for ln in lines[start + 1:]:
        if not ln.startswith(" ") or not ln.strip():
            break
        block.append(ln)
    return block


def assert_same_failure(plain, observed, exc_type: str) -> None:
    assert plain.returncode == observed.returncode == 1, observed.stderr[-2000:]
    assert exception_type(plain.stderr) == exception_type(observed.stderr)
    assert re.search(rf"^[\w.]*\b{exc_type}\b", observed.stderr, re.M)


def assert_short_and_complete(doc: dict, run, kind: str = "compile_error") -> dict:
    (d,) = [d for d in doc["diagnostics"] if d["kind"] == kind]
    text = report_text(run)
    block = problem_block(text, kind)
    assert len(block) <= 10, block
    assert any(d["code"] in ln for ln in block)
    # the caret is under its span, else under the code, never under a trailing comment
    (carets,) = [ln.strip() for ln in block if ln.strip().startswith("^")]
    assert len(carets) == (d["end_col"] - d["col"] if d["col"] is not None
                           else len(d["code"].split("  #")[0].rstrip()))
    # a graph whose backend failed says so in the graphs table
    for g in doc["graphs"]:
        if g["status"] == "compile_error":
            assert re.search(rf"^\s+{g['id']}\s.*\bfailed\b", text, re.M), text
    # the full text stays in the run file: torch's message and the traceback
    assert d["reason"] and d["detail"]["traceback"].startswith("Traceback")
    assert d["reason"].splitlines()[0] in d["detail"]["traceback"]
    return d


# -- in-process: the program's exception with and without a capture ----------------

def same_failure(program, tmp_path, exc_type: str) -> dict:
    """The program dies of the same exception under a capture; its report."""
    plain, seen = exception_of(program), exception_of(program, tmp_path / "x.run")
    assert type(plain) is type(seen) and type(seen).__name__ == exc_type, repr(seen)[:2000]
    return report_doc(tmp_path / "x.run")


# -- the error samples: plain python vs graphdbg run ----------------------------------

ERROR_SAMPLES = {
    # name: (exception the program dies of, kinds it must report)
    "compile_shape_error": ("ConstraintViolationError", ("compile_error",)),
    "broken_fx_pass": ("BackendCompilerFailed", ("malformed_graph", "compile_error")),
    "export_failure": ("GuardOnDataDependentSymNode", ("compile_error",)),
}


@pytest.mark.parametrize("name", [pytest.param(n, marks=group(n)) for n in sorted(ERROR_SAMPLES)])
def test_error_sample(name, runs):
    exc_type, kinds = ERROR_SAMPLES[name]
    sample = SAMPLES / f"{name}.py"
    plain, observed = runs.python(name, *AOT, *GOLDEN_SAVE), runs.golden(name)  # the golden test's run
    assert_same_failure(plain, observed, exc_type)
    doc = observed.doc
    assert doc["run"]["status"] == "failed" and doc["run"]["exit_status"] == 1
    assert doc["run"]["internal_errors"] == []
    for kind in kinds:
        assert sites(doc, kind) == markers(sample, kind), kind
    assert {d["kind"] for d in doc["diagnostics"]} == set(kinds)  # died of it: not reported twice
    d = assert_short_and_complete(doc, observed.run)
    assert d["detail"]["uncaught"] is True
    assert d["stack"][0]["function"] == "<module>"  # the program's own call chain


@group("export_failure")
def test_export_failure_names_the_unbacked_symbols_origin(runs):
    sample = SAMPLES / "export_failure.py"
    (d,) = [d for d in runs.golden("export_failure").doc["diagnostics"]
            if d["kind"] == "compile_error"]
    item_line = next(i for i, ln in enumerate(sample.read_text().splitlines(), 1)
                     if "n = keep.sum().item()" in ln)
    (u0,) = d["detail"]["unbacked"]
    assert (u0["symbol"], u0["line"], u0["file"]) == ("u0", item_line, str(sample))
    assert "aten.item" in u0["op"]
    assert f"export_failure.py:{item_line}" in d["hint"]
    assert d["detail"]["data_dependent"] and d["detail"]["export"]


# -- a script, as the user runs it: the exit status and what stderr shows -------------

FULLGRAPH = '''\
import torch

def f(x):
    y = x * 2
    print("tracing", y.shape)  # graphdbg-expect: compile_error
    return y + 1

torch.compile(f, backend="eager", fullgraph=True)(torch.ones(3))  # graphdbg-expect: call
'''


def test_unsupported_under_fullgraph_exits_as_without_graphdbg(workdir, runs):
    (workdir / "p.py").write_text(FULLGRAPH)
    plain = runs.spawn("p.py", cwd=workdir)
    observed = runs.spawn("-m", "graphdbg", "run", "-q", "-o", "x.run", "p.py", cwd=workdir)
    assert_same_failure(plain, observed, "Unsupported")
    assert "torch._dynamo.exc.Unsupported" in observed.stderr
    doc = report_doc(workdir / "x.run")
    d = assert_short_and_complete(doc, workdir / "x.run")
    # the program died of the compile error: one finding, at the print, whose
    # stack starts at the program's call
    assert doc["diagnostics"] == [d]
    prog = workdir / "p.py"
    assert (d["file"], d["line"]) == (str(prog), marked(prog, "compile_error"))
    assert d["message"].startswith("Unsupported: Failed to trace builtin operator")
    assert d["detail"]["fail_type"] and d["detail"]["uncaught"]
    assert [f["line"] for f in d["stack"]] == [marked(prog, "call"), marked(prog, "compile_error")]


# -- in-process programs --------------------------------------------------------------

class StrictM(torch.nn.Module):
    def forward(self, x, idx):
        n = idx.sum().item()  # MARK u0
        y = x[:n]  # MARK u1
        if y.shape[0] > 2:  # MARK strict
            return y * 2
        return y


def strict_export() -> str:
    try:
        torch.export.export(StrictM(), (torch.randn(8), torch.tensor([1, 2])), strict=True)
    except Exception as e:
        return type(e).__name__
    return "exported"


def test_strict_export_failure_caught_by_the_program_is_still_recorded(tmp_path):
    torch._dynamo.reset()
    plain = strict_export()
    torch._dynamo.reset()
    with graphdbg.capture(str(tmp_path / "x.run")):
        seen = strict_export()
    assert plain == seen == "UserError"
    (d,) = report_doc(tmp_path / "x.run")["diagnostics"]
    assert (d["kind"], d["line"], d["code"]) == ("compile_error", *at(HERE, "strict"))
    assert d["code"].startswith("if y.shape[0] > 2:")
    assert [(u["symbol"], u["line"]) for u in d["detail"]["unbacked"]] == [
        ("u1", line_of(HERE, "u1")), ("u0", line_of(HERE, "u0"))]
    assert d["detail"]["strict"] is True


W = torch.randn(4, 5)


def fake_shape(x):
    y = x.relu()
    z = y @ W  # MARK fake shape
    return z


def test_fake_tensor_shape_error_at_the_user_line(tmp_path):
    def program():
        torch.compile(fake_shape, backend="eager")(torch.ones(3, 3))  # MARK fake shape call

    doc = same_failure(program, tmp_path, "TorchRuntimeError")
    d = assert_short_and_complete(doc, tmp_path / "x.run")
    assert (d["file"], d["line"]) == (HERE, line_of(HERE, "fake shape"))
    assert "must have same reduction dim" in d["message"] and d["detail"]["fail_type"]
    assert stack(d) == [CAPTURED_AT, (HERE, line_of(HERE, "fake shape call")),
                        (HERE, line_of(HERE, "fake shape"))]


@functools.cache
def register_scale_op():
    """A custom op whose inductor lowering raises (registered once per process)."""
    from torch._inductor.lowering import register_lowering

    @torch.library.custom_op("graphdbg_test::scale", mutates_args=())
    def scale(x: torch.Tensor, s: float) -> torch.Tensor:
        return x * s

    @scale.register_fake
    def _(x, s):
        return torch.empty_like(x)

    @register_lowering(torch.ops.graphdbg_test.scale.default)
    def lower_scale(x, s):
        raise NotImplementedError("graphdbg_test::scale has no lowering")  # MARK lowering



def with_custom_op(x):
    y = x.sin()
    z = torch.ops.graphdbg_test.scale(y, 2.0)  # MARK custom op
    return z + 1


def my_post_grad_pass(graph):
    for node in graph.nodes:
        if node.target is torch.ops.aten.mul.Tensor:
            raise ValueError(f"my_post_grad_pass cannot handle {node.name}")  # MARK pass


def with_mul(x):
    y = x.sin()
    z = y * x  # MARK mul
    return z + 1


def lowering_program():
    torch.compile(with_custom_op)(torch.randn(8))


def custom_pass_program():
    from torch._inductor import config
    with config.patch(post_grad_custom_post_pass=my_post_grad_pass):
        torch.compile(with_mul)(torch.randn(8))


@pytest.mark.inductor
@pytest.mark.parametrize("program, mark, says, hint", [
    (lowering_program, "custom op", "graphdbg_test::scale has no lowering", ("lowering", "lower_scale")),
    (custom_pass_program, "mul", "my_post_grad_pass cannot handle mul", ("pass", "my_post_grad_pass")),
], ids=["lowering", "custom-pass"])
def test_inductor_errors_at_the_user_line(tmp_path, program, mark, says, hint):
    register_scale_op()
    doc = same_failure(program, tmp_path, "InductorError")
    d = assert_short_and_complete(doc, tmp_path / "x.run")
    assert (d["file"], d["line"]) == (HERE, line_of(HERE, mark))
    assert says in d["message"]
    assert f"test_compile_errors.py:{line_of(HERE, hint[0])} in {hint[1]}" in d["hint"]
    assert d["detail"]["exception"] == "InductorError" and "Traceback" in d["detail"]["traceback"]


CXX = '''\
import torch

torch._inductor.config.cpp.march = "no-such-cpu"

def f(x):
    y = x.sin()
    return (y * 2 + 1).sum(1)

torch.compile(f)(torch.randn(8, 8))  # graphdbg-expect: compile_error
'''


@pytest.mark.inductor
def test_failed_cxx_compile_at_the_users_call(workdir, runs):
    # processes of their own: a broken toolchain setting must not reach
    # inductor's process-wide caches of compiler flags and ISA checks
    import torch._inductor.config as inductor_config
    if not hasattr(inductor_config.cpp, "march"):   # torch 2.11 has no such setting
        pytest.skip("this torch's inductor has no cpp.march to break its C++ compile with")
    (workdir / "p.py").write_text(CXX)
    plain = runs.spawn("p.py", cwd=workdir)
    observed = runs.spawn("-m", "graphdbg", "run", "-q", "-o", "x.run", "p.py", cwd=workdir)
    assert_same_failure(plain, observed, "InductorError")
    doc = report_doc(workdir / "x.run")
    d = assert_short_and_complete(doc, workdir / "x.run")
    assert {(d["file"], d["line"])} == markers(workdir / "p.py", "compile_error")
    assert "C++ compile failed: cc1plus: error: bad value" in d["message"]
    assert "torch._inductor.config.cpp" in d["hint"]
    assert d["detail"]["exception"] == "InductorError" and "Traceback" in d["detail"]["traceback"]


class ExportM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.fc(x)).sum(0)


def export_ok() -> tuple[str, list]:
    torch.manual_seed(0)
    ep = torch.export.export(ExportM(), (torch.randn(3, 4),))
    return (hashlib.sha256(ep.graph_module.code.encode()).hexdigest(),
            ep.module()(torch.ones(3, 4)).tolist())


def test_successful_export_is_unchanged_by_graphdbg(tmp_path):
    plain = export_ok()
    torch._dynamo.reset()
    with graphdbg.capture(str(tmp_path / "x.run")):
        seen = export_ok()
    assert plain == seen  # same exported graph, same numbers
    doc = report_doc(tmp_path / "x.run")
    assert doc["diagnostics"] == [] and doc["run"]["internal_errors"] == []
    # the exporter's fake-tensor tracing is not recorded as eager work
    # (only the exported module's own call computes an addmm)
    assert [o["count"] for o in doc["eager"]["top_ops"] if o["op"] == "aten.addmm.default"] == [1]



def _prints_a_sum(x):
    print("sum", x.sum().item())     # a break; the float goes on to the resumed frame
    return x.relu()


@pytest.mark.usefixtures("clean_torch")
def test_dynamos_restart_of_a_frame_is_no_compile_error(tmp_path, capsys):
    """torch 2.13's aot_eager raises TensorifyScalarRestartAnalysis on the
    resumed frame that gets the printed float: Dynamo catches it and traces
    the frame again. It was a ✖ compile_error ("backend 'aot_eager' failed")
    at the user's print; it is torch's restart, and its graph says so."""
    import graphdbg
    from graphdbg.hooks import compat
    run = tmp_path / "r.run"
    torch._dynamo.reset()
    f = torch.compile(_prints_a_sum, backend="aot_eager")
    with graphdbg.capture(str(run)):
        for n in range(3):
            f(torch.randn(4) + n)
    doc = report_doc(run)
    assert [d["kind"] for d in doc["diagnostics"] if d["severity"] == "error"] == []
    statuses = [g["status"] for g in doc["graphs"]]
    assert "compile_error" not in statuses
    if compat.torch_release() == (2, 13):   # later releases trace it without a restart
        assert "restarted" in statuses
