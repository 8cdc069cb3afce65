"""Every class of compile-time failure, run as a user would (plain python vs
`graphdbg run`): the finding's kind, file and line; the program's exit status
and exception type unchanged; the report shows each error in a few lines with
the code line, the full text is in the run file."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import pytest

from conftest import ENV, SAMPLES, graphdbg, markers, report_json, sites

_EXC_LINE = re.compile(r"^([\w.]*(?:Error|Exception|Failed|Unsupported|SymNode))\b")


def exception_type(stderr: str) -> str | None:
    """The type of the exception the program died of (the traceback's last
    `module.Type: message` line)."""
    found = [m[1] for ln in stderr.splitlines() if (m := _EXC_LINE.match(ln))]
    return found[-1].rsplit(".", 1)[-1] if found else None


def run_both(workdir, script, *args: str) -> tuple[subprocess.CompletedProcess,
                                                   subprocess.CompletedProcess, dict]:
    plain = subprocess.run([sys.executable, str(script), *args], cwd=workdir, capture_output=True,
                           text=True, env=ENV, timeout=600)
    observed = graphdbg("run", "-q", "-o", "x.run", script, *args, cwd=workdir)
    return plain, observed, report_json("x.run", workdir)


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


def assert_short_and_complete(doc: dict, workdir, kind: str = "compile_error") -> dict:
    (d,) = [d for d in doc["diagnostics"] if d["kind"] == kind]
    text = graphdbg("report", "x.run", cwd=workdir, check=True).stdout
    block = problem_block(text, kind)
    assert len(block) <= 10, block
    assert any(d["code"] in ln for ln in block)
    # the caret is under the code, not under a trailing comment
    (carets,) = [ln.strip() for ln in block if ln.strip().startswith("^")]
    assert len(carets) == len(d["code"].split("  #")[0].rstrip())
    # a graph whose backend failed says so in the graphs table
    for g in doc["graphs"]:
        if g["status"] == "compile_error":
            assert re.search(rf"^\s+{g['id']}\s.*\bfailed\b", text, re.M), text
    # the full text stays in the run file: torch's message and the traceback
    assert d["reason"] and d["detail"]["traceback"].startswith("Traceback")
    assert d["reason"].splitlines()[0] in d["detail"]["traceback"]
    return d


ERROR_SAMPLES = {
    # name: (exception the program dies of, kinds it must report, args)
    "compile_shape_error": ("ConstraintViolationError", ("compile_error",), ["--backend", "aot_eager"]),
    "broken_fx_pass": ("BackendCompilerFailed", ("malformed_graph", "compile_error"),
                       ["--backend", "aot_eager"]),
    "export_failure": ("GuardOnDataDependentSymNode", ("compile_error",), []),
}


@pytest.mark.parametrize("name", sorted(ERROR_SAMPLES))
def test_error_sample(name, workdir):
    exc_type, kinds, args = ERROR_SAMPLES[name]
    sample = SAMPLES / f"{name}.py"
    plain, observed, doc = run_both(workdir, sample, *args)
    assert_same_failure(plain, observed, exc_type)
    assert doc["run"]["status"] == "failed" and doc["run"]["exit_status"] == 1
    assert doc["run"]["internal_errors"] == []
    for kind in kinds:
        assert sites(doc, kind) == markers(sample, kind), kind
    assert {d["kind"] for d in doc["diagnostics"]} == set(kinds)  # died of it: not reported twice
    d = assert_short_and_complete(doc, workdir)
    assert d["detail"]["uncaught"] is True
    assert d["stack"][0]["function"] == "<module>"  # the program's own call chain


def test_export_failure_names_the_unbacked_symbols_origin(workdir):
    sample = SAMPLES / "export_failure.py"
    _, _, doc = run_both(workdir, sample)
    (d,) = [d for d in doc["diagnostics"] if d["kind"] == "compile_error"]
    item_line = next(i for i, ln in enumerate(sample.read_text().splitlines(), 1)
                     if "n = keep.sum().item()" in ln)
    (u0,) = d["detail"]["unbacked"]
    assert (u0["symbol"], u0["line"], u0["file"]) == ("u0", item_line, str(sample))
    assert "aten.item" in u0["op"]
    assert f"export_failure.py:{item_line}" in d["hint"]
    assert d["detail"]["data_dependent"] and d["detail"]["export"]


STRICT_EXPORT_CAUGHT = '''\
import torch

class M(torch.nn.Module):
    def forward(self, x, idx):
        n = idx.sum().item()
        y = x[:n]
        if y.shape[0] > 2:
            return y * 2
        return y

try:
    torch.export.export(M(), (torch.randn(8), torch.tensor([1, 2])), strict=True)
except Exception as e:
    print("caught", type(e).__name__)
'''


def test_strict_export_failure_caught_by_the_program_is_still_recorded(workdir):
    (workdir / "p.py").write_text(STRICT_EXPORT_CAUGHT)
    plain, observed, doc = run_both(workdir, "p.py")
    assert plain.returncode == observed.returncode == 0
    assert plain.stdout.split()[-2:] == observed.stdout.split()[-2:] == ["caught", "UserError"]
    (d,) = doc["diagnostics"]
    assert (d["kind"], d["line"], d["code"]) == ("compile_error", 7, "if y.shape[0] > 2:")
    assert [(u["symbol"], u["line"]) for u in d["detail"]["unbacked"]] == [("u1", 6), ("u0", 5)]
    assert d["detail"]["strict"] is True


FULLGRAPH = '''\
import torch

def f(x):
    y = x * 2
    print("tracing", y.shape)
    return y + 1

torch.compile(f, backend="eager", fullgraph=True)(torch.ones(3))
'''

FAKE_SHAPE = '''\
import torch

w = torch.randn(4, 5)

def f(x):
    y = x.relu()
    z = y @ w
    return z

torch.compile(f, backend="eager")(torch.ones(3, 3))
'''


@pytest.mark.parametrize("body, exc_type, line, says", [
    (FULLGRAPH, "Unsupported", 5, "Failed to trace builtin operator"),
    (FAKE_SHAPE, "TorchRuntimeError", 7, "must have same reduction dim"),
], ids=["unsupported-fullgraph", "fake-tensor-shape"])
def test_dynamo_compile_errors_at_the_user_line(workdir, body, exc_type, line, says):
    (workdir / "p.py").write_text(body)
    plain, observed, doc = run_both(workdir, "p.py")
    assert_same_failure(plain, observed, exc_type)
    d = assert_short_and_complete(doc, workdir)
    assert (d["file"], d["line"]) == (str(workdir / "p.py"), line)
    assert says in d["message"] and d["detail"]["fail_type"]
    assert [f["line"] for f in d["stack"]] == [10 if body is FAKE_SHAPE else 8, line]


LOWERING = '''\
import torch
from torch._inductor.lowering import register_lowering

@torch.library.custom_op("graphdbg_test::scale", mutates_args=())
def scale(x: torch.Tensor, s: float) -> torch.Tensor:
    return x * s

@scale.register_fake
def _(x, s):
    return torch.empty_like(x)

@register_lowering(torch.ops.graphdbg_test.scale.default)
def lower_scale(x, s):
    raise NotImplementedError("graphdbg_test::scale has no lowering")

def f(x):
    y = x.sin()
    z = scale(y, 2.0)
    return z + 1

torch.compile(f)(torch.randn(8))
'''

CUSTOM_PASS = '''\
import torch
from torch._inductor import config

def my_post_grad_pass(graph):
    for node in graph.nodes:
        if node.target is torch.ops.aten.mul.Tensor:
            raise ValueError(f"my_post_grad_pass cannot handle {node.name}")

config.post_grad_custom_post_pass = my_post_grad_pass

def f(x):
    y = x.sin()
    z = y * x
    return z + 1

torch.compile(f)(torch.randn(8))
'''

CXX = '''\
import torch

torch._inductor.config.cpp.march = "no-such-cpu"

def f(x):
    y = x.sin()
    return (y * 2 + 1).sum(1)

torch.compile(f)(torch.randn(8, 8))
'''


@pytest.mark.inductor
@pytest.mark.parametrize("body, line, says, hint", [
    (LOWERING, 18, "graphdbg_test::scale has no lowering", "p.py:14 in lower_scale"),
    (CUSTOM_PASS, 13, "my_post_grad_pass cannot handle mul", "p.py:7 in my_post_grad_pass"),
    (CXX, 9, "C++ compile failed: cc1plus: error: bad value", "torch._inductor.config.cpp"),
], ids=["lowering", "custom-pass", "cxx-compile"])
def test_inductor_errors_at_the_user_line(workdir, body, line, says, hint):
    (workdir / "p.py").write_text(textwrap.dedent(body))
    plain, observed, doc = run_both(workdir, "p.py")
    assert_same_failure(plain, observed, "InductorError")
    d = assert_short_and_complete(doc, workdir)
    assert (d["file"], d["line"]) == (str(workdir / "p.py"), line)
    assert says in d["message"] and hint in d["hint"]
    assert d["detail"]["exception"] == "InductorError" and "Traceback" in d["detail"]["traceback"]


EXPORT_OK = '''\
import hashlib, torch

class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.fc(x)).sum(0)

torch.manual_seed(0)
ep = torch.export.export(M(), (torch.randn(3, 4),))
print(hashlib.sha256(ep.graph_module.code.encode()).hexdigest())
print(ep.module()(torch.ones(3, 4)).tolist())
'''


def test_successful_export_is_unchanged_by_graphdbg(workdir):
    (workdir / "p.py").write_text(EXPORT_OK)
    plain, observed, doc = run_both(workdir, "p.py")
    assert plain.returncode == observed.returncode == 0, observed.stderr[-2000:]
    assert plain.stdout == observed.stdout  # same exported graph, same numbers
    assert doc["diagnostics"] == [] and doc["run"]["internal_errors"] == []
    # the exporter's fake-tensor tracing is not recorded as eager work
    # (only the exported module's own call computes an addmm)
    assert [o["count"] for o in doc["eager"]["top_ops"] if o["op"] == "aten.addmm.default"] == [1]
