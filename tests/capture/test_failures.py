"""Compile errors and runtime errors inside compiled graphs, mapped to the
user's line through the FX node they happened in; the program gets the same
exception as without graphdbg. In-process: each program runs once plain and
once under `graphdbg.capture` (exit statuses: test_cli_errors, the samples)."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo

from conftest import CAPTURED_AT, at, exception_of, line_of, report_doc, report_text, stack

HERE = __file__
pytestmark = pytest.mark.usefixtures("clean_torch")


def same_failure(program, tmp_path) -> tuple[BaseException, dict]:
    plain, seen = exception_of(program), exception_of(program, tmp_path / "p.run")
    assert type(seen) is type(plain)
    assert str(seen).strip().splitlines()[-1] == str(plain).strip().splitlines()[-1]
    return seen, report_doc(tmp_path / "p.run")


def picky_backend(gm, example_inputs):
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target is torch.tanh:
            raise NotImplementedError("picky_backend cannot lower tanh")
    return gm.forward


def tanh_chain(x):
    y = x * 2
    z = torch.tanh(y)  # MARK tanh
    return z + 1


def picky_program():
    torch.compile(tanh_chain, backend=picky_backend)(torch.ones(3))  # MARK picky call


def test_backend_failure_is_mapped_to_the_node_line(tmp_path):
    exc, doc = same_failure(picky_program, tmp_path)
    assert type(exc).__name__ == "BackendCompilerFailed"
    (d,) = [d for d in doc["diagnostics"] if d["kind"] == "compile_error"]
    line, code = at(HERE, "tanh")
    assert (d["line"], d["code"], d["op"]) == (line, code, "torch.tanh")
    assert d["code"].startswith("z = torch.tanh(y)")
    assert "NotImplementedError: picky_backend cannot lower tanh" in d["message"]
    assert "picky_backend cannot lower tanh" in d["reason"]
    block = report_text(tmp_path / "p.run").split("compile_error", 1)[1].split("\n\n", 1)[0]
    assert "z = torch.tanh(y)" in block and "^^^^" in block and len(block.splitlines()) <= 10
    # the program died of this error: one finding, with the program's call in its stack
    assert not [d for d in doc["diagnostics"] if d["kind"] == "runtime_error"]
    assert d["detail"]["uncaught"]
    assert stack(d) == [CAPTURED_AT, (HERE, line_of(HERE, "picky call")), (HERE, line)]


def pick(x, idx):
    y = x.sin() * 2
    z = y[idx]  # MARK getitem
    return z + 1


def out_of_range_program():
    f = torch.compile(pick, backend="aot_eager")
    x = torch.randn(5)
    f(x, torch.tensor([0, 2]))
    f(x, torch.tensor([1, 9]))


def test_runtime_error_inside_a_compiled_graph_names_the_node(tmp_path):
    exc, doc = same_failure(out_of_range_program, tmp_path)
    assert isinstance(exc, IndexError)
    (d,) = [d for d in doc["diagnostics"] if d["kind"] == "runtime_error" and d["node"]]
    assert (d["line"], d["code"]) == at(HERE, "getitem") and d["code"].startswith("z = y[idx]")
    assert d["op"] == "_operator.getitem" and "index 9 is out of bounds" in d["message"]


def take(x, counts):
    n = counts.sum().item()
    torch._check(n <= 4)  # MARK check
    y = x[:n] * 2
    return y.sum()


def assert_under_dynamic_program():
    with torch._dynamo.config.patch(capture_scalar_outputs=True):
        f = torch.compile(take, backend="aot_eager", dynamic=True)
        x = torch.randn(10)
        f(x, torch.tensor([1, 2]))
        f(x, torch.tensor([4, 5]))  # MARK second take


def test_a_size_that_no_longer_fits_is_named_at_its_check(tmp_path):
    # the second call's data-dependent size breaks an assumption compiled into
    # the graph: the runtime assert fails inside compiled code
    _, doc = same_failure(assert_under_dynamic_program, tmp_path)
    (d,) = doc["diagnostics"]  # one finding: the program died of it
    assert (d["kind"], d["line"], d["code"]) == ("runtime_error", *at(HERE, "check"))
    assert d["code"].startswith("torch._check(n <= 4)")
    assert "_assert_scalar" in d["op"] and "u0 <= 4" in d["message"]
    assert stack(d) == [CAPTURED_AT, (HERE, line_of(HERE, "second take")),
                        (HERE, line_of(HERE, "check"))]


def strict_backend(gm, example_inputs):
    names = [n.name for n in gm.graph.nodes if n.op == "call_function" and n.target is torch.tanh]
    if names:
        raise RuntimeError(f"strict_backend: unsupported op at node '{names[0]}'")
    return gm.forward


def tanh_chain_2(x):
    y = x * 2
    z = torch.tanh(y)  # MARK tanh 2
    return z + 1


def test_backend_error_naming_a_node_by_name_only(tmp_path):
    # no node object reachable from the traceback: the node the message names
    _, doc = same_failure(
        lambda: torch.compile(tanh_chain_2, backend=strict_backend)(torch.ones(3)), tmp_path)
    (d,) = doc["diagnostics"]
    assert (d["kind"], d["line"], d["code"], d["node"]) == ("compile_error", *at(HERE, "tanh 2"), "z")
    assert d["code"].startswith("z = torch.tanh(y)")
    assert "unsupported op at node 'z'" in d["message"]
