"""Errors raised in torch's own Python code sit at the deepest frame outside
torch: a shape error inside nn.Linear's forward at the model's call of the
module, a third-party library's line kept with the user's call in the stack,
torch's frames never. When the failing value came out of a custom op whose
fake implementation disagrees with the real op, the finding says so and names
the ``register_fake`` line. In-process, backends "eager" and "aot_eager"; each
program runs once plain and once under `graphdbg.capture`."""

from __future__ import annotations

import functools

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F

from conftest import CAPTURED_AT, exception_of, line_of, report_doc, stack

HERE = __file__
pytestmark = pytest.mark.usefixtures("clean_torch")
TORCH_DIR = torch.__file__.rsplit("/", 1)[0]


def same_failure(program, tmp_path) -> tuple[BaseException, dict]:
    """The program dies of the same exception with and without a capture."""
    plain, seen = exception_of(program), exception_of(program, tmp_path / "x.run")
    assert type(seen) is type(plain), repr(seen)[:2000]
    assert str(seen).splitlines()[0] == str(plain).splitlines()[0]
    return seen, report_doc(tmp_path / "x.run")


def only(doc: dict, kind: str) -> dict:
    (d,) = [d for d in doc["diagnostics"] if d["kind"] == kind]
    assert doc["run"]["internal_errors"] == []
    assert not any(f["file"].startswith(TORCH_DIR) for f in d["stack"]), d["stack"]
    return d


# -- shape errors inside torch.nn modules ---------------------------------------------

class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        y = x.relu()
        return self.fc(y)  # MARK linear called


@pytest.mark.parametrize("fullgraph", [True, False], ids=["fullgraph", "graph-breaks-allowed"])
def test_shape_error_inside_nn_linear_sits_at_the_models_call(tmp_path, fullgraph):
    def program():
        torch.compile(Model(), backend="eager", fullgraph=fullgraph)(torch.ones(2, 5))  # MARK model call

    exc, doc = same_failure(program, tmp_path)
    assert type(exc).__name__ == "TorchRuntimeError"
    d = only(doc, "compile_error")
    assert (d["file"], d["line"]) == (HERE, line_of(HERE, "linear called"))
    assert d["code"] == "return self.fc(y)  # MARK linear called"
    assert "must have same reduction dim" in d["message"]
    assert stack(d) == [CAPTURED_AT, (HERE, line_of(HERE, "model call")),
                        (HERE, line_of(HERE, "linear called"))]
    assert "fake_mismatch" not in d["detail"]  # no custom op: no claim about one


def test_torch_module_compiled_on_its_own_sits_at_the_users_call(tmp_path):
    def program():
        layer = torch.nn.Linear(8, 4)
        torch.compile(layer, backend="eager")(torch.ones(2, 5))  # MARK layer call

    _, doc = same_failure(program, tmp_path)
    d = only(doc, "compile_error")
    assert (d["file"], d["line"]) == (HERE, line_of(HERE, "layer call"))
    assert stack(d)[-1] == (HERE, line_of(HERE, "layer call"))


def eager_linear(x):
    w = torch.ones(4, 8)
    return F.linear(x, w)  # MARK eager linear


def test_eager_error_inside_a_torch_function_sits_at_the_users_line(tmp_path):
    def program():
        eager_linear(torch.ones(2, 5))  # MARK eager call

    exc, doc = same_failure(program, tmp_path)
    assert type(exc) is RuntimeError
    d = only(doc, "runtime_error")
    assert (d["file"], d["line"]) == (HERE, line_of(HERE, "eager linear"))
    assert stack(d) == [CAPTURED_AT, (HERE, line_of(HERE, "eager call")),
                        (HERE, line_of(HERE, "eager linear"))]


# -- a third-party library keeps its own line -------------------------------------------

LIBRARY = '''\
import torch


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        return self.fc(x) + 1  # library line
'''


@pytest.fixture
def blocklib(site_package):
    return site_package("blocklib", LIBRARY)


class UsesLibrary(torch.nn.Module):
    def __init__(self, lib):
        super().__init__()
        self.block = lib.Block()

    def forward(self, x):
        return self.block(x) * 2  # MARK library called


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "eager"])
def test_error_inside_a_library_keeps_the_library_line(tmp_path, blocklib, compiled):
    model = UsesLibrary(blocklib)

    def program():
        f = torch.compile(model, backend="eager") if compiled else model
        f(torch.ones(2, 5))  # MARK library program

    _, doc = same_failure(program, tmp_path)
    d = only(doc, "compile_error" if compiled else "runtime_error")
    lib_line = LIBRARY.splitlines().index("        return self.fc(x) + 1  # library line") + 1
    assert (d["file"], d["line"]) == (blocklib.__file__, lib_line)
    assert stack(d) == [CAPTURED_AT, (HERE, line_of(HERE, "library program")),
                        (HERE, line_of(HERE, "library called")), (blocklib.__file__, lib_line)]


# -- custom ops: the fake implementation checked against the real one --------------------

@functools.cache
def register_ops():
    """Custom ops (once per process): ``widen``'s fake forgets that the real
    op doubles the last dimension; ``double``'s fake is right."""

    @torch.library.custom_op("graphdbg_placement::widen", mutates_args=())
    def widen(x: torch.Tensor) -> torch.Tensor:
        noise = torch.rand(()) * 0  # draws a random number: the check must restore the RNG
        return torch.cat([x, x + noise], dim=-1)

    @widen.register_fake  # MARK widen fake
    def _(x):
        return torch.empty_like(x)

    @torch.library.custom_op("graphdbg_placement::double", mutates_args=())
    def double(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    @double.register_fake
    def _(x):
        return torch.empty_like(x)


W = torch.ones(16, 3)


def widen_then_matmul(x):
    y = torch.ops.graphdbg_placement.widen(x.sin())
    return y @ W  # MARK widen matmul


def double_then_matmul(x):
    y = torch.ops.graphdbg_placement.double(x.sin())
    return y @ W  # MARK double matmul


def widen_then_view(x):
    y = torch.ops.graphdbg_placement.widen(x)
    return y.view(y.shape[0], y.shape[1] // 2, 2) + 1  # MARK widen view


def observed(program, tmp_path) -> tuple[BaseException, dict]:
    """`same_failure`, and the capture leaves the program's RNG and Dynamo's
    frame counts as they are without it."""
    from torch._dynamo.utils import counters

    def seeded():
        torch.manual_seed(0)
        counters.clear()
        try:
            program()
        finally:
            after.append((torch.rand(3).tolist(), dict(counters["frames"])))

    after: list = []
    result = same_failure(seeded, tmp_path)
    assert after[0] == after[1]
    return result


def test_wrong_fake_of_a_custom_op_is_named_at_its_register_fake(tmp_path):
    register_ops()

    def program():
        torch.compile(widen_then_matmul, backend="eager")(torch.ones(4, 8))

    exc, doc = observed(program, tmp_path)
    assert type(exc).__name__ == "TorchRuntimeError"
    d = only(doc, "compile_error")
    assert (d["file"], d["line"]) == (HERE, line_of(HERE, "widen matmul"))
    fake_line = line_of(HERE, "widen fake")
    assert d["hint"].startswith(
        f"Fake implementation of graphdbg_placement::widen (test_placement_errors.py:{fake_line}) "
        f"returns shape (4, 8) but the real op returns (4, 16).")
    assert "register_fake" in d["hint"]
    (m,) = d["detail"]["fake_mismatch"]
    assert (m["op"], m["what"], m["fake"], m["real"]) == (
        "graphdbg_placement::widen", "shape", "(4, 8)", "(4, 16)")
    assert (m["file"], m["line"]) == (HERE, fake_line)


def test_matching_fake_of_a_custom_op_makes_no_claim(tmp_path):
    register_ops()

    def program():
        torch.compile(double_then_matmul, backend="eager")(torch.ones(4, 8))

    _, doc = observed(program, tmp_path)
    d = only(doc, "compile_error")
    assert (d["file"], d["line"]) == (HERE, line_of(HERE, "double matmul"))
    assert "fake_mismatch" not in d["detail"]
    assert "fake implementation" not in (d["hint"] or "").lower()


def test_wrong_fake_of_a_custom_op_at_run_time_of_compiled_code(tmp_path):
    # the graph is specialised to the fake's (4, 8): the view fails only when compiled
    register_ops()
    widen_then_view(torch.ones(4, 8))  # eager runs it fine

    def program():
        torch.compile(widen_then_view, backend="aot_eager")(torch.ones(4, 8))

    exc, doc = observed(program, tmp_path)
    assert type(exc) is RuntimeError and "is invalid for input of size 64" in str(exc)
    d = only(doc, "runtime_error")
    assert (d["file"], d["line"]) == (HERE, line_of(HERE, "widen view"))
    assert d["hint"].startswith(
        f"Fake implementation of graphdbg_placement::widen "
        f"(test_placement_errors.py:{line_of(HERE, 'widen fake')}) returns shape (4, 8) but the "
        f"real op returns (4, 16).")
    assert d["detail"]["fake_mismatch"][0]["line"] == line_of(HERE, "widen fake")


# -- an export Dim range the code does not support --------------------------------------

class Branchy(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] > 4:  # MARK dim guard
            y = x * 2
        else:
            y = x + 1
        return y.sin().cos()  # MARK last traced


def test_an_export_dim_range_the_code_narrows_sits_at_the_guarding_line(tmp_path):
    from torch.export import Dim

    def program():
        torch.export.export(Branchy(), (torch.randn(8, 3),),
                            dynamic_shapes={"x": {0: Dim("batch", min=2, max=64)}})

    _, doc = same_failure(program, tmp_path)
    d = only(doc, "compile_error")
    assert (d["severity"], d["file"], d["line"]) == ("error", HERE, line_of(HERE, "dim guard"))
    assert d["detail"]["guards"][0] == {"file": HERE, "line": line_of(HERE, "dim guard"),
                                        "function": "forward", "guard": "x.size()[0] > 4"}
    assert "Dim('batch', min=5, max=64)" in d["hint"]
