"""Compile errors and runtime errors inside compiled graphs, mapped to the
user's line through the FX node they happened in; the program's own exit
status and exception are unchanged."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from conftest import ENV, graphdbg, report_json

PICKY = '''\
import torch

def picky_backend(gm, example_inputs):
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target is torch.tanh:
            raise NotImplementedError("picky_backend cannot lower tanh")
    return gm.forward

def f(x):
    y = x * 2
    z = torch.tanh(y)
    return z + 1

torch.compile(f, backend=picky_backend)(torch.ones(3))
'''

OUT_OF_RANGE = '''\
import torch

def pick(x, idx):
    y = x.sin() * 2
    z = y[idx]
    return z + 1

f = torch.compile(pick, backend="aot_eager")
x = torch.randn(5)
f(x, torch.tensor([0, 2]))
f(x, torch.tensor([1, 9]))
'''


def _both(workdir, body: str) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess, dict]:
    (workdir / "p.py").write_text(textwrap.dedent(body))
    plain = subprocess.run([sys.executable, "p.py"], cwd=workdir, capture_output=True, text=True,
                           env=ENV)
    observed = graphdbg("run", "-q", "-o", "p.run", "p.py", cwd=workdir)
    return plain, observed, report_json("p.run", workdir)


def _last_line(text: str) -> str:
    return [ln for ln in text.splitlines() if ln.strip()][-1]


def test_backend_failure_is_mapped_to_the_node_line(workdir):
    plain, observed, doc = _both(workdir, PICKY)
    assert plain.returncode == observed.returncode == 1
    assert "BackendCompilerFailed" in plain.stderr and "BackendCompilerFailed" in observed.stderr
    (d,) = [d for d in doc["diagnostics"] if d["kind"] == "compile_error"]
    assert (d["line"], d["code"], d["op"]) == (11, "z = torch.tanh(y)", "torch.tanh")
    assert "NotImplementedError: picky_backend cannot lower tanh" in d["message"]
    assert "picky_backend cannot lower tanh" in d["reason"]
    text = graphdbg("report", "p.run", cwd=workdir).stdout
    block = text.split("compile_error", 1)[1].split("\n\n", 1)[0]
    assert "z = torch.tanh(y)" in block and "^^^^" in block and len(block.splitlines()) <= 10
    # the program died of this error: one finding, with the program's call in its stack
    assert not [d for d in doc["diagnostics"] if d["kind"] == "runtime_error"]
    assert d["detail"]["uncaught"] and d["stack"][0]["line"] == 14


def test_runtime_error_inside_a_compiled_graph_names_the_node(workdir):
    plain, observed, doc = _both(workdir, OUT_OF_RANGE)
    assert plain.returncode == observed.returncode == 1
    assert _last_line(plain.stderr) == _last_line(observed.stderr)
    in_graph = [d for d in doc["diagnostics"] if d["kind"] == "runtime_error" and d["node"]]
    (d,) = in_graph
    assert d["line"] == 5 and d["code"] == "z = y[idx]" and d["op"] == "_operator.getitem"
    assert "index 9 is out of bounds" in d["message"]


ASSERT_UNDER_DYNAMIC = '''\
import torch
torch._dynamo.config.capture_scalar_outputs = True

def take(x, counts):
    n = counts.sum().item()
    torch._check(n <= 4)
    y = x[:n] * 2
    return y.sum()

f = torch.compile(take, backend="aot_eager", dynamic=True)
x = torch.randn(10)
print(f(x, torch.tensor([1, 2])))
print(f(x, torch.tensor([4, 5])))
'''


def test_a_size_that_no_longer_fits_is_named_at_its_check(workdir):
    # the second call's data-dependent size breaks an assumption compiled into
    # the graph: the runtime assert fails inside compiled code
    plain, observed, doc = _both(workdir, ASSERT_UNDER_DYNAMIC)
    assert plain.returncode == observed.returncode == 1
    assert _last_line(plain.stderr) == _last_line(observed.stderr)
    (d,) = doc["diagnostics"]  # one finding: the program died of it
    assert (d["kind"], d["line"], d["code"]) == ("runtime_error", 6, "torch._check(n <= 4)")
    assert "_assert_scalar" in d["op"] and "u0 <= 4" in d["message"]
    assert [f["line"] for f in d["stack"]] == [13, 6]


NAMES_ONLY = '''\
import torch

def strict_backend(gm, example_inputs):
    names = [n.name for n in gm.graph.nodes if n.op == "call_function" and n.target is torch.tanh]
    if names:
        raise RuntimeError(f"strict_backend: unsupported op at node '{names[0]}'")
    return gm.forward

def f(x):
    y = x * 2
    z = torch.tanh(y)
    return z + 1

torch.compile(f, backend=strict_backend)(torch.ones(3))
'''


def test_backend_error_naming_a_node_by_name_only(workdir):
    # no node object reachable from the traceback: the node the message names
    plain, observed, doc = _both(workdir, NAMES_ONLY)
    assert plain.returncode == observed.returncode == 1
    (d,) = doc["diagnostics"]
    assert (d["kind"], d["line"], d["code"], d["node"]) == ("compile_error", 11, "z = torch.tanh(y)", "z")
    assert "unsupported op at node 'z'" in d["message"]
