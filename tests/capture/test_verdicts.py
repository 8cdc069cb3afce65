"""Verdicts that fit the evidence (issue 31, part 4), on real programs:

- eager's fp16 overflow that a later op turns finite (RMSNorm: x.pow(2)
  overflows, rsqrt makes it 0) while the compiled code, computing in float32,
  stays finite: `nonfinite` at the overflow, not `precision` at the output;
- `random` only where a draw happened: SDPA with a fully masked row exported
  to ONNX draws nothing (ONNX Runtime differs there for another reason);
- a constant guard on a set prints both values;
- the same cause in two graphs (a recompile) is one finding, counted.
"""

from __future__ import annotations

import torch
import torch._dynamo
import torch.nn.functional as F
import pytest
from faulty_backends import own_random_stream

import graphdbg
from conftest import line_of, query

HERE = __file__


def open_findings(run, kind: str) -> list:
    reader = graphdbg.open_run(str(run))
    try:
        return reader.findings(kind)
    finally:
        reader.close()


# -- NaN/Inf on one side only -----------------------------------------------------------

def float32_backend(gm, example_inputs):
    """A real backend that computes in float32: the FX graph run on
    low-precision floating inputs upcast, its outputs cast back (what
    inductor does with an fp16 reduction)."""
    def run(*args):
        low = next((a.dtype for a in args if isinstance(a, torch.Tensor)
                    and a.dtype in (torch.float16, torch.bfloat16)), None)
        out = gm(*[a.float() if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                   for a in args])

        def down(o):
            return o.to(low) if low is not None and isinstance(o, torch.Tensor) \
                and o.is_floating_point() else o
        return type(out)(down(o) for o in out) if isinstance(out, (tuple, list)) else down(out)
    return run


class RMSNorm(torch.nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(d, dtype=torch.float16))

    def forward(self, x):
        var = x.pow(2).mean(-1, keepdim=True)  # MARK overflow
        return x * torch.rsqrt(var + 1e-6) * self.weight  # MARK rsqrt


def rmsnorm_program() -> torch.Tensor:
    torch._dynamo.reset()
    torch.manual_seed(0)
    m = RMSNorm(8)
    x = (torch.randn(2, 8) * 400).half()  # x**2 overflows float16 (65504)
    with torch.no_grad():
        return torch.compile(m, backend=float32_backend)(x)


@pytest.fixture(scope="module")
def rmsnorm(tmp_path_factory):
    run = tmp_path_factory.mktemp("rms") / "r.run"
    plain = rmsnorm_program()
    with graphdbg.capture(str(run)):
        seen = rmsnorm_program()
    return run, plain, seen


def test_eager_overflow_that_compiled_avoids_is_nonfinite_at_the_overflow(rmsnorm):
    run, plain, seen = rmsnorm
    assert torch.equal(plain, seen)  # the observer rule
    assert bool(torch.isfinite(seen).all())
    (d,) = open_findings(run, "divergence")
    det = d.detail
    # not "precision" (info) at the output: NaN/Inf on eager's side, where it starts
    assert det.classification == "nonfinite" and d.severity == "warning"
    assert (d.file, d.line) == (HERE, line_of(HERE, "overflow")) and d.op == "pow"
    assert (det.nonfinite_side, det.nonfinite_value, det.fp64_finite) == ("eager", "Inf", True)
    assert det.made_finite_at["line"] == line_of(HERE, "rsqrt")
    assert det.made_finite_at["op"] == "torch.rsqrt"
    assert d.message.startswith("eager overflows to inf at pow")
    assert "compiled does not" in d.message and "Not a miscompile" in d.hint


def test_the_overflow_node_is_the_first_divergent_in_node_values(rmsnorm):
    run = rmsnorm[0]
    rows = query(run, "SELECT node, kind FROM node_values WHERE status = 'first divergent'")
    assert [(r["node"], r["kind"]) for r in rows] == [("pow_1", "nonfinite")]


def test_one_sided_nan_is_nonfinite_with_its_side_and_float64():
    from graphdbg.hooks.check.numerics import compare_values, is_finding
    judge = torch.tensor([1.0, 70000.0], dtype=torch.float64)
    d = compare_values(torch.tensor([1.0, 7e4]), torch.tensor([1.0, float("inf")]), judge)
    assert (d.kind, d.side, d.value, d.fp64_finite) == ("nonfinite", "eager", "Inf", True)
    d = compare_values(torch.tensor([1.0, float("nan")]), torch.tensor([1.0, 2.0]), judge)
    assert (d.kind, d.side, d.value) == ("nonfinite", "compiled", "NaN") and is_finding(d)
    # the same NaN on both sides is no difference; a NaN against an Inf is not one-sided
    assert compare_values(torch.tensor([float("nan")]), torch.tensor([float("nan")])) is None
    d = compare_values(torch.tensor([float("nan")]), torch.tensor([float("inf")]))
    assert d.kind == "miscompile"


# -- random: a draw that happened ----------------------------------------------------------

class MaskedAttention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.q = torch.nn.Linear(8, 8)

    def forward(self, x, mask):
        q = self.q(x)
        out = F.scaled_dot_product_attention(q, q, q, attn_mask=mask)  # MARK masked sdpa
        return out * 2


@pytest.mark.parametrize("mask_kind", ["bool", "additive"])
def test_onnx_sdpa_with_a_fully_masked_row_draws_nothing_so_it_is_not_random(tmp_path, mask_kind):
    pytest.importorskip("onnxruntime")
    torch.manual_seed(0)
    x = torch.randn(1, 2, 4, 8)
    if mask_kind == "bool":
        mask = torch.ones(1, 1, 4, 4, dtype=torch.bool)
        mask[..., 1, :] = False  # query row 1 sees nothing: torch gives 0 there
    else:
        mask = torch.zeros(1, 1, 4, 4)
        mask[..., 1, :] = float("-inf")
    m = MaskedAttention().eval()
    run = tmp_path / "o.run"
    with graphdbg.capture(str(run)):
        torch.onnx.export(m, (x, mask), dynamo=True)
    (d,) = open_findings(run, "divergence")
    assert (d.file, d.line) == (HERE, line_of(HERE, "masked sdpa"))
    # aten tags SDPA as a random op; with dropout_p=0 it draws nothing
    assert d.detail.classification != "random" and "random" not in d.message
    assert d.detail.exported == "onnx" and d.severity == "error"
    if mask_kind == "additive":  # ONNX Runtime's softmax of a row of -inf: NaN
        assert d.detail.classification == "nonfinite"
        assert (d.detail.nonfinite_side, d.detail.nonfinite_value) == ("compiled", "NaN")
        assert d.message.startswith("ONNX Runtime goes NaN at") and "eager stays finite" in d.message


# -- recompile wording ----------------------------------------------------------------------

def with_set(x, s):
    if 1 in s:  # MARK set guard
        return x + len(s)
    return x - 1


def test_a_constant_set_guard_says_both_values(tmp_path):
    torch._dynamo.reset()
    run = tmp_path / "s.run"
    with graphdbg.capture(str(run)):
        c = torch.compile(with_set, backend="eager")
        c(torch.ones(3), {1, 2})
        c(torch.ones(3), {1, 2, 3})
    (d,) = open_findings(run, "recompile")
    assert "s changed: was {1, 2}, now {1, 2, 3}" in d.message, d.message
    assert "a set" not in d.message


def over_keys(x, d):
    for k in d:  # MARK dict guard
        x = x + d[k]
    return x


def test_a_dict_length_guard_says_what_it_was_and_is(tmp_path):
    # torch spells the failure `len(d) != 1`: it was 1, it is 2 now (not "was not 1")
    torch._dynamo.reset()
    run = tmp_path / "d.run"
    with graphdbg.capture(str(run)):
        c = torch.compile(over_keys, backend="eager")
        c(torch.ones(3), {"a": 1})
        c(torch.ones(3), {"a": 1, "b": 3})
    (d,) = open_findings(run, "recompile")
    assert "len(d) changed: was 1, now 2" in d.message, d.message


# -- one finding per cause -----------------------------------------------------------------

def llama_steps() -> None:
    from transformers import LlamaConfig, LlamaForCausalLM
    torch._dynamo.reset()
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                      num_key_value_heads=2, intermediate_size=64, vocab_size=100,
                      attention_dropout=0.1, attn_implementation="sdpa")
    model = LlamaForCausalLM(cfg).train()
    compiled = torch.compile(model, backend=own_random_stream(False))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(2):  # a longer sequence the second time: a recompile, a second graph
        ids = torch.randint(0, 100, (2, 8 + step))
        compiled(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad()


def test_the_same_random_divergence_in_two_graphs_is_one_finding(tmp_path):
    pytest.importorskip("transformers")
    run = tmp_path / "l.run"
    with graphdbg.capture(str(run)):
        llama_steps()
    (d,) = open_findings(run, "divergence")  # not one per graph
    assert d.detail.classification == "random" and d.file.endswith("sdpa_attention.py")
    assert d.count == 2 and len(d.compile_ids) == 2 and len(d.detail.graphs) == 2
