"""Eager vs compiled: fault-injecting backends change exactly one node of a
50+ node graph (30+ where a test bisects by prefix or checks the backward:
SMALL); graphdbg must name that node's line, within ceil(log2 N)+2
compiles of the stage it bisects, and change nothing the program computes.
In-process, under `graphdbg.capture`."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch._dynamo
from faulty_backends import (by_line, make_backward_faulty_backend, make_crashing_on_partial_backend,
                             make_faulty_backend)

import faulty_backends
import graphdbg
from faulty_backends import Dropped, own_random_stream
from conftest import line_of, report_doc

HERE = __file__
pytestmark = pytest.mark.usefixtures("clean_torch")


class Block(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = torch.nn.LayerNorm(d)
        self.fc = torch.nn.Linear(d, d)

    def forward(self, x):
        h = self.norm(x)
        h = self.fc(h)  # MARK fc
        h = torch.nn.functional.gelu(h)  # MARK gelu
        return x + h * 0.5  # MARK residual


class Deep(torch.nn.Module):
    def __init__(self, d=32, n=10):
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block(d) for _ in range(n))
        self.head = torch.nn.Linear(d, 4)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        x = torch.sigmoid(x)  # MARK sigmoid
        return self.head(x)


def at_line(mark: str):
    """Selects the nodes of the line marked `mark` in this file."""
    return by_line(line_of(HERE, mark), Path(HERE).name)


def run_deep(tmp_path, backend, backward: bool = False, blocks: int = 10, **options) -> dict:
    torch._dynamo.reset()
    torch.manual_seed(0)
    model, x = Deep(n=blocks), torch.randn(8, 32)
    with graphdbg.capture(str(tmp_path / "p.run"), **options):
        out = torch.compile(model, backend=backend)(x)
        if backward:
            out.square().sum().backward()
    assert backend.mutated
    return report_doc(tmp_path / "p.run")


# Deep's blocks where a test needs no 50+ op nodes: the bisection and the
# backward search are the same over 32 (their bound, log2 of the count, holds
# for any count), at half the compile time of each stage and prefix
SMALL = 6


def op_nodes(doc: dict) -> int:
    return sum(1 for n in doc["graphs"][0]["nodes"] if n["op"].startswith("call_"))


def divergence(doc: dict) -> dict:
    (d,) = [d for d in doc["diagnostics"] if d["kind"] == "divergence"]
    return d


# the fc fault's checked run, shared by the test that finds it and the one that
# turns the check off (one xdist group: one worker runs it once)
FC_SCALE = pytest.mark.xdist_group("compare-fc-scale")


@pytest.fixture(scope="module")
def fc_scale_checked(tmp_path_factory) -> dict:
    return run_deep(tmp_path_factory.mktemp("fc-scale"),
                    make_faulty_backend(at_line("fc"), "scale", inner="aot_eager"))


@pytest.mark.parametrize("mark,mutation", [pytest.param("fc", "scale", marks=FC_SCALE),
                                           ("sigmoid", "swap_op"), ("gelu", "offset")])
def test_single_node_fault_is_found_at_its_line(tmp_path, request, mark, mutation):
    doc = request.getfixturevalue("fc_scale_checked") if (mark, mutation) == ("fc", "scale") \
        else run_deep(tmp_path, make_faulty_backend(at_line(mark), mutation, inner="aot_eager"))
    n_ops = op_nodes(doc)
    assert len(doc["graphs"]) == 1 and n_ops >= 50
    d = divergence(doc)
    assert d["severity"] == "error" and d["detail"]["classification"] == "miscompile"
    assert (d["file"], d["line"]) == (HERE, line_of(HERE, mark))
    det = d["detail"]
    assert det["isolated"]["decided"] and det["isolated"]["diverges"]
    assert det["compiled_vs_fp64"] > 10 * (det["eager_vs_fp64"] or 0)
    assert det["stage_compiles"] <= math.ceil(math.log2(n_ops)) + 2
    assert d["node"] and d["op"]
    if mark != "sigmoid":  # inside a Block: the module that ran it is named
        assert det["module_path"].startswith("blocks.0") and det["module_class"] in ("Block", "Linear")
    assert doc["run"]["internal_errors"] == []


def test_bisection_finds_the_node_when_intermediate_outputs_are_not_used(tmp_path):
    doc = run_deep(tmp_path, make_faulty_backend(at_line("residual"), "scale", inner="aot_eager"),
                   blocks=SMALL, localize="bisect")
    d = divergence(doc)
    assert d["line"] == line_of(HERE, "residual") and d["detail"]["method"] == "bisection"
    assert d["detail"]["stage_compiles"] <= math.ceil(math.log2(op_nodes(doc))) + 2


def test_clean_graph_has_no_divergence_and_timings_per_node(tmp_path):
    m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    with graphdbg.capture(str(tmp_path / "c.run")):
        c = torch.compile(m, backend="aot_eager")
        for _ in range(4):
            c(torch.randn(5, 16))
    doc = report_doc(tmp_path / "c.run")
    assert doc["diagnostics"] == []
    timed = [n for n in doc["graphs"][0]["nodes"] if n["op"].startswith("call_")]
    assert timed and all(n["eager_ns"] and n["eager_ns"] > 0 for n in timed)
    assert doc["hot_nodes"] and doc["hot_nodes"][0]["eager_ns"] >= doc["hot_nodes"][-1]["eager_ns"]


@FC_SCALE
def test_no_compare_turns_the_check_off(tmp_path, fc_scale_checked):
    # the same injected fault, found with the check and not without it
    def found(doc: dict) -> int:
        return sum(d["kind"] == "divergence" for d in doc["diagnostics"])
    assert found(fc_scale_checked) == 1
    assert found(run_deep(tmp_path, make_faulty_backend(at_line("fc"), "scale", inner="aot_eager"),
                          compare=False)) == 0


@pytest.mark.parametrize("mark", ["sigmoid", "gelu"])
def test_backward_fault_maps_to_the_forward_line(tmp_path, mark):
    backend = make_backward_faulty_backend(at_line(mark), "scale", inner="aot_eager")
    doc = run_deep(tmp_path, backend, backward=True, blocks=SMALL)
    d = divergence(doc)
    assert d["detail"]["direction"] == "backward"
    assert (d["file"], d["line"]) == (HERE, line_of(HERE, mark))
    assert d["detail"]["stage_compiles"] <= math.ceil(math.log2(op_nodes(doc))) + 2


def random_program(swap: bool) -> tuple[float, float]:
    torch._dynamo.reset()
    torch.manual_seed(0)
    c = torch.compile(Dropped(), backend=own_random_stream(swap))
    with torch.no_grad():
        out = c(torch.randn(4, 16))
    return float(out.sum()), float(torch.rand(1))


@pytest.mark.parametrize("swap", [False, True])
def test_random_ops_are_reported_as_random_and_the_rest_still_checked(tmp_path, swap):
    plain = random_program(swap)
    with graphdbg.capture(str(tmp_path / "r.run")):
        seen = random_program(swap)
    # the program's own random stream is untouched by the checks
    assert seen == plain
    doc = report_doc(tmp_path / "r.run")
    found = {(d["detail"]["classification"], d["line"]) for d in doc["diagnostics"]
             if d["kind"] == "divergence"}
    expected = {("random", line_of(faulty_backends.__file__, "dropout"))}
    if swap:
        expected.add(("miscompile", line_of(faulty_backends.__file__, "tanh")))
    assert found == expected
    rnd = next(d for d in doc["diagnostics"] if d["detail"]["classification"] == "random")
    assert rnd["severity"] == "warning" and "fallback_random" in rnd["hint"]


def log_of_double(x):
    y = x * 2
    z = torch.log(y - 1)  # MARK log
    return z.sum() + y.sum()


def test_first_nan_in_eager_is_reported_at_its_line(tmp_path):
    with graphdbg.capture(str(tmp_path / "n.run")):
        torch.compile(log_of_double, backend="aot_eager")(torch.tensor([0.1, 2.0, 3.0]))
    doc = report_doc(tmp_path / "n.run")
    (d,) = [d for d in doc["diagnostics"] if d["kind"] == "nan_inf"]
    assert d["line"] == line_of(HERE, "log") and d["op"] == "torch.log"
    assert d["detail"]["where"] == "eager"
    assert [x for x in doc["diagnostics"] if x["kind"] == "divergence"] == []


@pytest.mark.parametrize("localize", ["auto", "bisect"])
def test_backend_failing_on_partial_graphs_is_coped_with(tmp_path, localize):
    crash = make_crashing_on_partial_backend(40, inner="aot_eager")
    fault = make_faulty_backend(at_line("sigmoid"), "scale", inner=crash)
    d = divergence(run_deep(tmp_path, fault, localize=localize))
    if localize == "auto":  # the graph with every intermediate as an output is whole: it compiles
        assert d["line"] == line_of(HERE, "sigmoid")
    else:  # prefixes crash: said, not hidden
        assert d["detail"]["undecided"]


def copying_backend(gm, example_inputs):
    def run(*args):
        return tuple(t.clone() for t in gm(*args))
    return run


def view_and_sum(x):  # MARK aliasing
    return x.view(2, 2), x.sum()


def test_aliasing_difference_is_reported(tmp_path):
    with graphdbg.capture(str(tmp_path / "a.run")):
        torch.compile(view_and_sum, backend=copying_backend)(torch.arange(4.0))
    d = divergence(report_doc(tmp_path / "a.run"))
    assert d["detail"]["classification"] == "aliasing" and d["detail"]["output"] == 0
    assert d["detail"]["eager_aliases_input"] == 0 and d["detail"]["compiled_aliases_input"] is None
    # an output's difference sits at the compiled function's line
    assert d["line"] == line_of(HERE, "aliasing") and d["message"] == (
        "output 0 is a copy compiled but a view of input 0 in eager")


@pytest.mark.inductor
def test_gradient_check_keeps_input_strides_under_inductor(tmp_path):
    # a padded slice as input: inductor asserts its stride; the checks' clones keep it
    lin = torch.nn.Linear(24, 8)
    base = torch.randn(4, 25, requires_grad=True)
    x = base[:, :24]
    with graphdbg.capture(str(tmp_path / "s.run")):
        out = torch.compile(lambda t: lin(t).relu().sum(), backend="inductor")(x)
        out.backward()
    assert base.grad is not None and torch.isfinite(out)
    doc = report_doc(tmp_path / "s.run")
    assert doc["run"]["internal_errors"] == [] and doc["diagnostics"] == []


# -- random ops known by what they are (aten's nondeterministic_seeded tag) -------------

class Attention(torch.nn.Module):
    def __init__(self, dropout_p: float, d: int = 16):
        super().__init__()
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.dropout_p = dropout_p

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, -1)
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout_p)  # MARK sdpa
        return torch.tanh(y) * 2 + torch.poisson(x.abs())  # MARK poisson


def attention_program(backend, dropout_p: float) -> float:
    torch._dynamo.reset()
    torch.manual_seed(0)
    c = torch.compile(Attention(dropout_p), backend=backend)
    with torch.no_grad():
        return float(c(torch.randn(2, 8, 16)).sum())


def test_attention_dropout_and_poisson_are_random_not_miscompiles(tmp_path):
    # names in no list: SDPA's own dropout and torch.poisson draw, as aten's tag says
    plain = attention_program(own_random_stream(False), 0.3)
    with graphdbg.capture(str(tmp_path / "a.run")):
        seen = attention_program(own_random_stream(False), 0.3)
    assert seen == plain
    doc = report_doc(tmp_path / "a.run")
    found = {(d["kind"], d["severity"], d["detail"]["classification"], d["file"], d["line"])
             for d in doc["diagnostics"]}
    assert found == {("divergence", "warning", "random", HERE, line_of(HERE, "sdpa"))}, found
    assert not [d for d in doc["diagnostics"] if d["severity"] == "error"]


def test_attention_without_dropout_draws_nothing_so_a_wrong_one_is_a_miscompile(tmp_path):
    # dropout_p=0: SDPA's kernel carries the tag but draws nothing; a backend that
    # gets SDPA wrong is a miscompile there (poisson still draws: random too)
    fault = make_faulty_backend(at_line("sdpa"), "scale", inner="aot_eager")
    with graphdbg.capture(str(tmp_path / "b.run")):
        attention_program(fault, 0.0)
    doc = report_doc(tmp_path / "b.run")
    kinds = {(d["detail"]["classification"], d["line"]) for d in doc["diagnostics"]
             if d["kind"] == "divergence"}
    assert ("miscompile", line_of(HERE, "sdpa")) in kinds, kinds


class Checkpointed(torch.nn.Module):
    def __init__(self, d: int = 16):
        super().__init__()
        self.fc = torch.nn.Linear(d, d)
        self.drop = torch.nn.Dropout(0.3)
        self.head = torch.nn.Linear(d, 1)

    def block(self, x):
        return self.drop(torch.relu(self.fc(x)))

    def forward(self, x):
        h = torch.utils.checkpoint.checkpoint(self.block, x, use_reentrant=False)  # MARK checkpoint
        return self.head(h)


def checkpoint_program() -> list[float]:
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = Checkpointed()
    c = torch.compile(model, backend="aot_eager")
    for _ in range(2):
        c(torch.randn(4, 16)).sum().backward()
    return [float(p.grad.sum()) for p in model.parameters()]


def test_checkpointed_dropout_gradients_are_not_a_miscompile(tmp_path):
    # the program's checkpoint recomputes with the same draws (preserve_rng_state);
    # graphdbg's eager reference must too, not redraw as the higher-order op would
    plain = checkpoint_program()
    with graphdbg.capture(str(tmp_path / "c.run")):
        seen = checkpoint_program()
    assert seen == plain
    doc = report_doc(tmp_path / "c.run")
    assert doc["diagnostics"] == []  # (before the fix: an error-level backward miscompile)


def gpt2_training_program(backend) -> list[float]:
    """transformers' GPT-2 (tiny config, random weights) trained with attention
    dropout: its SDPA call (transformers/integrations/sdpa_attention.py) draws."""
    import os
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import GPT2Config, GPT2LMHeadModel
    torch._dynamo.reset()
    torch.manual_seed(0)
    config = GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=32,
                        attn_pdrop=0.2, resid_pdrop=0.0, embd_pdrop=0.0, loss_type="ForCausalLM")
    model = GPT2LMHeadModel(config).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    step = torch.compile(model, backend=backend)
    losses = []
    for _ in range(2):
        ids = torch.randint(0, 64, (2, 12))
        loss = step(ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(float(loss))
    return losses


def test_transformers_model_trained_with_attention_dropout_has_no_error(tmp_path):
    plain = gpt2_training_program(own_random_stream(False))
    with graphdbg.capture(str(tmp_path / "g.run")):
        seen = gpt2_training_program(own_random_stream(False))
    assert seen == plain
    doc = report_doc(tmp_path / "g.run")
    assert [d for d in doc["diagnostics"] if d["severity"] == "error"] == []
    (d,) = [d for d in doc["diagnostics"] if d["kind"] == "divergence"]
    assert (d["detail"]["classification"], d["severity"]) == ("random", "warning")
    assert d["file"].endswith("transformers/integrations/sdpa_attention.py")


def skewing_backend(gm, example_inputs):
    """aot_eager, then a wrong update of the first 2-d input it writes (a weight)."""
    from torch._dynamo.backends.registry import lookup_backend
    compiled = lookup_backend("aot_eager")(gm, example_inputs)

    def run(*args):
        out = compiled(*args)
        next(a for a in args if isinstance(a, torch.Tensor) and a.dim() == 2).data.add_(1e-2)
        return out
    return run


def test_a_divergence_in_a_compiled_optimizer_step_is_at_the_users_line(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    @torch.compile(backend=skewing_backend)
    def step():
        opt.step()  # MARK compiled step

    with graphdbg.capture(str(tmp_path / "o.run")):
        for _ in range(2):
            model(torch.randn(4, 8)).sum().backward()
            step()
            opt.zero_grad()
    doc = report_doc(tmp_path / "o.run")  # (every finding has a file and a line)
    (d,) = [d for d in doc["diagnostics"] if d["kind"] == "divergence"]
    assert (d["severity"], d["detail"]["classification"]) == ("error", "miscompile")
    assert (d["file"], d["line"]) == (HERE, line_of(HERE, "compiled step"))
