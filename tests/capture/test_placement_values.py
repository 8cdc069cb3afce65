"""Where value findings sit (issue 9, sections 3 and 4).

In-place writes through views: a divergence sits at the in-place op (or the
first read of what it wrote), never at the line that created the base tensor,
whose value is compared as it was when its node ran. NaN/Inf: a finding only
where non-finite values reach a graph's output or an input it writes (a
parameter), at the op where they first appear; infinities a softmax, exp or
`where` consumes are not findings.

In-process, cheap backends ("eager", "aot_eager" and a fault-injecting
backend that changes one node), programs written for the test below.
"""

from __future__ import annotations

import operator

import pytest
import torch
import torch._dynamo
from faulty_backends import by_target, make_faulty_backend

import graphdbg
from conftest import line_of, report_doc
from graphdbg.hooks.check.interpreter import EagerReference
from graphdbg.hooks.check.subgraphs import graph_with_outputs, mutates_inputs, written_node

HERE = __file__
pytestmark = pytest.mark.usefixtures("clean_torch")


# -- programs: in-place writes through views --------------------------------------------

def slice_add(x):
    y = x * 2  # MARK slice base
    y[:, ::2].add_(1.0)  # MARK slice add_
    return y.sum(0) + y.mean()


def diagonal_zero(x):
    y = x + 1  # MARK diagonal base
    y.diagonal().zero_()  # MARK diagonal zero_
    return y.exp()


def transpose_copy(x, z):
    y = x.sin()  # MARK transpose base
    y.t().copy_(z)  # MARK transpose copy_
    return y * 3


def setitem(x, v):
    y = x.cos()  # MARK setitem base
    y[1:3] = v  # MARK setitem write
    return y.relu()


def view_iadd(x):
    y = x * 3  # MARK iadd base
    z = y[::2]
    z += 1.0  # MARK iadd write
    return y.sum(0)


def gapped(x):
    y = x.clone()  # MARK gapped base
    y.as_strided((3, 3), (4, 2)).mul_(2.0)  # MARK gapped mul_
    return y + 1


def overlapping(x):
    y = x.clone()  # MARK overlapping base
    y.as_strided((3, 3), (1, 1)).mul_(2.0)  # MARK overlapping mul_
    return y + 1


def read_after_write(x):
    y = x * 2
    y[:, ::2].add_(1.0)
    return torch.sigmoid(y)  # MARK read


CASES = {  # program, inputs, the faulty backend's choice, the line it should be found at
    "slice": (slice_add, lambda: (torch.randn(4, 6),),
              dict(select=by_target("add_"), mutate="swap_op", swap_map={"add_": "sub_"}),
              "slice add_"),
    "diagonal": (diagonal_zero, lambda: (torch.randn(5, 5),),
                 dict(select=by_target("zero_"), mutate="swap_op", swap_map={"zero_": "neg_"}),
                 "diagonal zero_"),
    "transpose": (transpose_copy, lambda: (torch.randn(4, 3), torch.randn(3, 4)),
                  dict(select=by_target("copy_"), mutate="swap_op", swap_map={"copy_": "add_"}),
                  "transpose copy_"),
    "setitem": (setitem, lambda: (torch.randn(5, 4), torch.randn(2, 4)),
                dict(select=by_target(operator.setitem), mutate="zero_arg", arg=2),
                "setitem write"),
    "iadd": (view_iadd, lambda: (torch.randn(6, 3),),
             dict(select=by_target(operator.iadd), mutate="swap_op",
                  swap_map={operator.iadd: operator.isub}),
             "iadd write"),
    "gapped": (gapped, lambda: (torch.randn(16),),
               dict(select=by_target("mul_"), mutate="swap_op", swap_map={"mul_": "div_"}),
               "gapped mul_"),
    "overlapping": (overlapping, lambda: (torch.randn(12),),
                    dict(select=by_target("mul_"), mutate="swap_op", swap_map={"mul_": "div_"}),
                    "overlapping mul_"),
    "read": (read_after_write, lambda: (torch.randn(4, 6),),
             dict(select=by_target(torch.sigmoid), mutate="swap_op"), "read"),
}


def capture(tmp_path, fn, args, backend, name="p.run", **options) -> tuple[dict, object]:
    run = tmp_path / name
    with graphdbg.capture(str(run), **options):
        out = torch.compile(fn, backend=backend)(*[a.clone() for a in args])
    return report_doc(run), out


def findings(doc: dict, kind: str) -> list[dict]:
    return [d for d in doc["diagnostics"] if d["kind"] == kind]


@pytest.mark.parametrize("case", list(CASES))
def test_in_place_write_through_a_view_is_found_at_its_line(tmp_path, case):
    fn, make, fault, mark = CASES[case]
    torch.manual_seed(0)
    args = make()
    backend = make_faulty_backend(inner="aot_eager", **fault)
    doc, out = capture(tmp_path, fn, args, backend)
    assert backend.mutated and not torch.allclose(out, fn(*[a.clone() for a in args]))
    (d,) = findings(doc, "divergence")
    assert (d["file"], d["line"]) == (HERE, line_of(HERE, mark)), d["message"]
    assert d["detail"]["classification"] == "miscompile"
    if case != "overlapping":  # aot_eager itself writes an overlapping view differently
        # the node alone, on the inputs it read (after the write), is wrong
        assert d["detail"]["isolated"] == {**d["detail"]["isolated"], "decided": True,
                                           "diverges": True}
    assert doc["run"]["internal_errors"] == []


@pytest.mark.parametrize("case", ["slice", "setitem", "read"])
def test_bisection_places_in_place_writes_the_same_way(tmp_path, case):
    fn, make, fault, mark = CASES[case]
    torch.manual_seed(0)
    doc, _ = capture(tmp_path, fn, make(), make_faulty_backend(inner="aot_eager", **fault),
                     localize="bisect")
    (d,) = findings(doc, "divergence")
    assert (d["file"], d["line"]) == (HERE, line_of(HERE, mark))
    assert d["detail"]["method"] == "bisection"


def test_an_unchanged_program_with_in_place_writes_is_clean_and_computes_the_same(tmp_path):
    torch.manual_seed(0)
    x, z = torch.randn(4, 3), torch.randn(3, 4)
    plain = torch.compile(transpose_copy, backend="aot_eager")(x.clone(), z)
    torch._dynamo.reset()
    doc, watched = capture(tmp_path, transpose_copy, (x, z), "aot_eager")
    assert torch.equal(plain, watched)  # the observer rule, bitwise
    assert doc["diagnostics"] == [] and doc["run"]["internal_errors"] == []


def test_a_graph_input_written_in_place_is_compared_after_the_call(tmp_path):
    # `x += 1` on a graph input: the reference must start from the input as it
    # was before the compiled call wrote it (no false divergence)
    def bump(x):
        x += 1.0
        return x * 2

    doc, _ = capture(tmp_path, bump, (torch.randn(8),), "aot_eager")
    assert doc["diagnostics"] == []


# -- the machinery, without compiling --------------------------------------------------

def _graph(fn, *args) -> torch.fx.GraphModule:
    graphs = []

    def keep(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch.compile(fn, backend=keep)(*args)
    return graphs[0]


def test_recorded_values_are_as_each_node_ran():
    torch.manual_seed(0)
    x = torch.randn(4, 6)
    gm = _graph(read_after_write, x)
    writers = [n.name for n in gm.graph.nodes if written_node(n) is not None]
    assert writers == ["add_"] and mutates_inputs(gm)
    rec = EagerReference(gm)
    out = rec.run(x.clone())
    y_name = next(n.name for n in gm.graph.nodes if n.op == "call_function"
                  and n.target is operator.mul)
    assert torch.equal(rec.values[y_name], x * 2)  # before the write
    assert y_name in rec.as_ran and "add_" not in rec.as_ran
    # the sigmoid read y after the write: it keeps what it read
    sig = next(n.name for n in gm.graph.nodes if n.target is torch.sigmoid)
    written = x * 2
    written[:, ::2] += 1
    assert torch.equal(rec.seen[sig][y_name], written) and torch.equal(out[0], written.sigmoid())
    # a graph cut down to chosen outputs returns them as they ran, too
    names = [n.name for n in gm.graph.nodes if n.op == "call_function"]
    cut = graph_with_outputs(gm, names, rec.as_ran)
    for name, value in zip(names, cut(x.clone())):
        assert torch.equal(value, rec.values[name]), name
    # ...and a prefix ends at its node (the write after it is not run)
    assert torch.equal(graph_with_outputs(gm, [y_name])(x.clone())[0], x * 2)


def test_graphs_without_in_place_writes_copy_nothing():
    gm = _graph(lambda x: torch.relu(x) * 2 + x.sin(), torch.randn(5))
    rec = EagerReference(gm)
    rec.run(torch.randn(5))
    assert rec.writes == {} and rec.as_ran == set() and rec.seen == {}


# -- NaN/Inf ---------------------------------------------------------------------------

def causal_attention(q, k):
    scores = q @ k.transpose(-2, -1)
    mask = torch.ones(4, 4, dtype=torch.bool).triu(1)
    scores = scores.masked_fill(mask, float("-inf"))  # MARK causal mask
    return torch.softmax(scores, dim=-1) @ k


def consumed_infinities(x):
    y = x.masked_fill(x > 0.5, float("inf"))
    top = y.amax()  # consumed by max: only to say so
    return torch.exp(-y) + torch.where(torch.isinf(y), 0.0, y) + (top > 0)


def masked_nan(x):
    y = torch.sqrt(x)  # NaN where x < 0
    return torch.where(x >= 0, y, torch.zeros_like(y))


def log_of_negative(x):
    h = x * 3
    y = h.log()  # MARK log
    return y * 2 + 1


def fully_masked_row(q):
    scores = q @ q.t()
    mask = torch.zeros(4, 4, dtype=torch.bool)
    mask[2] = True
    scores = scores.masked_fill(mask, float("-inf"))  # MARK row mask
    return torch.softmax(scores, dim=-1).sum()  # MARK row softmax


def nan_into_parameter(p, x):
    with torch.no_grad():
        p.add_(torch.log(x))  # MARK parameter log
    return x.sum()


def nan_written_into_output(x):
    y = x * 1
    y[0] = torch.log(-x[0].abs() - 1)  # MARK setitem log
    return y


@pytest.mark.parametrize("fn,args", [
    (causal_attention, lambda: (torch.randn(4, 8), torch.randn(4, 8))),
    (consumed_infinities, lambda: (torch.rand(8),)),
    (masked_nan, lambda: (torch.randn(8),)),
], ids=["causal-mask", "consumed-inf", "masked-nan"])
def test_consumed_infinities_are_not_findings(tmp_path, fn, args):
    torch.manual_seed(0)
    doc, out = capture(tmp_path, fn, args(), "eager")
    assert bool(torch.isfinite(out).all())
    assert doc["diagnostics"] == [] and doc["run"]["internal_errors"] == []


@pytest.mark.parametrize("fn,args,mark,value,reaches", [
    (log_of_negative, lambda: (torch.tensor([1.0, -2.0, 3.0]),), "log", "NaN", "output 0"),
    (nan_into_parameter, lambda: (torch.zeros(4), torch.tensor([1.0, -1.0, 2.0, 3.0])),
     "parameter log", "NaN", "input"),
    (nan_written_into_output, lambda: (torch.randn(3, 4),), "setitem log", "NaN", "output 0"),
], ids=["output", "parameter", "written-into-output"])
def test_nonfinite_values_that_reach_an_output_sit_where_they_appear(tmp_path, fn, args, mark,
                                                                     value, reaches):
    doc, _ = capture(tmp_path, fn, args(), "eager")
    (d,) = findings(doc, "nan_inf")
    assert (d["file"], d["line"]) == (HERE, line_of(HERE, mark))
    assert d["detail"]["value"] == value and d["detail"]["reaches"].startswith(reaches)
    assert d["message"].startswith(f"{value} in eager first appears at")
    assert d["detail"]["from_inf"] is None


def test_nan_made_from_a_mask_names_the_mask(tmp_path):
    # a fully masked row: softmax of all -inf is NaN, and that reaches the loss
    doc, _ = capture(tmp_path, fully_masked_row, (torch.randn(4, 8),), "eager")
    (d,) = findings(doc, "nan_inf")
    assert (d["file"], d["line"]) == (HERE, line_of(HERE, "row softmax"))
    assert d["detail"]["from_inf"]["line"] == line_of(HERE, "row mask")
    assert d["detail"]["from_inf"]["file"] == HERE


def abs_then_log(x):
    h = torch.abs(x)  # MARK compiled nan
    return torch.log1p(h) * 2


def abs_then_clamp(x):
    h = torch.abs(x)  # MARK compiled consumed
    return torch.nan_to_num(torch.log1p(h), nan=0.0)


def test_compiled_nan_reaching_an_output_is_a_finding_and_a_consumed_one_is_not(tmp_path):
    # the faulty backend compiles abs as log: NaN for negative inputs
    x = torch.tensor([1.0, -2.0, 3.0, -0.5])
    be = make_faulty_backend(by_target(torch.abs), "swap_op", inner="aot_eager",
                             swap_map={torch.abs: torch.log})
    doc, out = capture(tmp_path, abs_then_log, (x,), be)
    assert not bool(torch.isfinite(out).all())
    (nan,) = findings(doc, "nan_inf")
    assert (nan["file"], nan["line"]) == (HERE, line_of(HERE, "compiled nan"))
    assert nan["detail"]["where"] == "compiled"
    (div,) = findings(doc, "divergence")
    assert div["line"] == nan["line"]

    torch._dynamo.reset()
    be = make_faulty_backend(by_target(torch.abs), "swap_op", inner="aot_eager",
                             swap_map={torch.abs: torch.log})
    doc, out = capture(tmp_path, abs_then_clamp, (x,), be, name="q.run")
    assert bool(torch.isfinite(out).all())
    assert findings(doc, "nan_inf") == []
    (div,) = findings(doc, "divergence")
    assert div["line"] == line_of(HERE, "compiled consumed")


@pytest.mark.inductor
def test_under_inductor_a_causal_mask_is_quiet_and_a_log_of_negatives_is_found(tmp_path):
    torch.manual_seed(0)
    doc, out = capture(tmp_path, causal_attention, (torch.randn(4, 8), torch.randn(4, 8)),
                       "inductor")
    assert bool(torch.isfinite(out).all())
    assert doc["diagnostics"] == [] and doc["graphs"][0]["backend"] == "inductor"
    doc, _ = capture(tmp_path, log_of_negative, (-torch.rand(8) - 0.1,), "inductor", name="q.run")
    (d,) = findings(doc, "nan_inf")
    assert (d["file"], d["line"]) == (HERE, line_of(HERE, "log"))


# -- NaN/Inf gradients (a finite forward) ----------------------------------------------

def where_trap(x):
    h = x.log()  # MARK trap log
    y = torch.where(x > 0, h, 0.0)  # MARK trap where
    return (y * 2).sum()


def sqrt_at_zero(x):
    h = x * 2
    r = torch.sqrt(h)  # MARK grad sqrt
    return r.sum() + h.sum()


def norm_of_zero(x):
    # a hand-written norm (torch.norm itself gives 0 at 0 nowadays)
    d = x - x.mean()
    n = (d * d).sum().sqrt()  # MARK grad norm
    return n * 3


def scaled_tanh(x, s):
    h = x * s  # MARK grad mul
    return h.tanh().sum()


class TrapModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = self.fc(x)
        return torch.where(h > 0, h.sqrt(), 0.0).sum()  # MARK trap module sqrt


def _grad_findings(doc: dict) -> list[dict]:
    return [d for d in findings(doc, "nan_inf") if d["detail"]["direction"] == "backward"]


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_the_where_trap_nan_gradient_sits_at_the_masked_op(tmp_path, backend):
    # log(0) = -inf is masked out in the forward; its backward 0 * (1/0) is NaN
    x = torch.tensor([1.0, 0.0, -1.0, 2.0], requires_grad=True)
    doc, out = capture(tmp_path, where_trap, (x,), backend)
    assert bool(torch.isfinite(out).all())
    (d,) = findings(doc, "nan_inf")
    assert (d["file"], d["line"]) == (HERE, line_of(HERE, "trap log"))
    assert d["severity"] == "warning"
    det = d["detail"]
    assert det["direction"] == "backward" and det["where"] == "eager" and det["value"] == "NaN"
    assert det["gradient_of"] == ["x"] and det["compiled_too"] is True
    assert det["masked_by"]["op"] == "torch.where"
    assert d["message"].startswith("NaN in the gradient of x first appears in the backward of log")
    assert "in eager too" in d["message"]
    assert d["hint"].startswith("torch.where evaluates both branches")
    assert "torch.where(x > 0, x, 1).log()" in d["hint"]
    assert findings(doc, "divergence") == [] and doc["run"]["internal_errors"] == []


@pytest.mark.parametrize("fn,args,mark,value", [
    (sqrt_at_zero, lambda: (torch.tensor([1.0, 0.0, 4.0], requires_grad=True),), "grad sqrt", "Inf"),
    (norm_of_zero, lambda: (torch.full((5,), 2.0, requires_grad=True),), "grad norm", "NaN"),
], ids=["sqrt-at-0", "norm-of-0"])
def test_a_singular_derivative_sits_at_its_line(tmp_path, fn, args, mark, value):
    doc, out = capture(tmp_path, fn, args(), "aot_eager")
    assert bool(torch.isfinite(out).all())
    (d,) = findings(doc, "nan_inf")
    assert (d["file"], d["line"]) == (HERE, line_of(HERE, mark))
    assert d["detail"]["direction"] == "backward" and d["detail"]["value"] == value
    assert d["detail"]["masked_by"] is None and d["severity"] == "warning"
    assert d["op"].endswith("sqrt")
    assert d["message"].startswith(f"{value} in the gradient of x first appears in the backward of")
    assert doc["run"]["internal_errors"] == []


def test_a_nonfinite_gradient_of_the_compiled_backward_only_is_an_error(tmp_path):
    # the backward of `x * s` compiled as a division: Inf where s == 0; eager is finite
    from faulty_backends import by_aten, make_backward_faulty_backend
    mul = torch.ops.aten.mul.Tensor
    be = make_backward_faulty_backend(by_aten(mul), "swap_op", inner="aot_eager",
                                      swap_map={mul: torch.ops.aten.div.Tensor})
    x = torch.randn(5, requires_grad=True)
    doc, _ = capture(tmp_path, scaled_tanh, (x, torch.tensor([1.0, 0.0, 2.0, 3.0, 1.0])), be)
    (d,) = findings(doc, "nan_inf")
    assert (d["file"], d["line"]) == (HERE, line_of(HERE, "grad mul"))
    assert d["severity"] == "error"
    assert d["detail"]["where"] == "compiled" and d["detail"]["direction"] == "backward"
    assert "compiled only" in d["message"]
    (div,) = findings(doc, "divergence")  # the same line, found by the shared bisection
    assert div["line"] == d["line"] and div["detail"]["direction"] == "backward"


def test_a_causal_mask_has_finite_gradients_and_no_finding(tmp_path):
    torch.manual_seed(0)
    q, k = torch.randn(4, 8, requires_grad=True), torch.randn(4, 8, requires_grad=True)
    run = tmp_path / "p.run"
    with graphdbg.capture(str(run)):
        loss = torch.compile(causal_attention, backend="aot_eager")(q, k).sum()
        loss.backward()
    assert bool(torch.isfinite(q.grad).all()) and bool(torch.isfinite(k.grad).all())
    doc = report_doc(run)
    assert doc["diagnostics"] == [] and doc["run"]["internal_errors"] == []


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.detach().view(torch.int32)


def test_checking_nonfinite_gradients_changes_nothing_the_program_computes(tmp_path):
    # the where-trap in a module: NaN parameter gradients, so the search runs
    torch.manual_seed(0)
    template = TrapModel()
    x = torch.randn(3, 4)

    def train(model):
        loss = torch.compile(model, backend="aot_eager")(x)
        loss.backward()
        return loss, [p.grad for p in model.parameters()], torch.randn(3)

    plain = TrapModel()
    plain.load_state_dict(template.state_dict())
    torch.manual_seed(1)
    loss_p, grads_p, after_p = train(plain)
    torch._dynamo.reset()
    watched = TrapModel()
    watched.load_state_dict(template.state_dict())
    run = tmp_path / "p.run"
    torch.manual_seed(1)
    with graphdbg.capture(str(run)):
        loss_w, grads_w, after_w = train(watched)
    assert not all(bool(torch.isfinite(g).all()) for g in grads_p)  # the trap fired
    assert torch.equal(_bits(loss_p), _bits(loss_w)) and torch.equal(after_p, after_w)
    assert all(torch.equal(_bits(a), _bits(b)) for a, b in zip(grads_p, grads_w))
    doc = report_doc(run)
    (d,) = findings(doc, "nan_inf")
    assert d["detail"]["direction"] == "backward" and d["line"] == line_of(HERE, "trap module sqrt")
    assert set(d["detail"]["gradient_of"]) >= {"self.fc.weight"}
