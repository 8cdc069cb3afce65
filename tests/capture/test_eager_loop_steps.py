"""Steps of an eager loop (issue 34): a program with no optimizer and no
compiled graph counts calls of its top module as steps, and `--eager-steps`
records the first steps and then one in N; between them the recorder is off
the dispatch-mode stack. The program computes bitwise the same, keeps no hook
and no extra reference, and two runs record the same steps."""

from __future__ import annotations

import copy
import gc
import io
import weakref

import pytest
import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

import graphdbg
from conftest import line_of, query, report_doc
from graphdbg.hooks.record.steps import recorded_step

in_process = pytest.mark.usefixtures("clean_torch")
CALLS = 12


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                               torch.nn.Linear(16, 4)).eval()


def _infer(model: torch.nn.Module, calls: int = CALLS, nudge_at: int = 0) -> list[torch.Tensor]:
    """An evaluation loop: the model, then an eager op after it, per batch."""
    x = torch.randn(2, 8, generator=torch.Generator().manual_seed(1))
    outs = []
    with torch.no_grad():
        for call in range(1, calls + 1):
            xs = x * (1.01 if call == nudge_at else 1.0)  # MARK nudge
            y = model(xs)  # MARK call
            outs.append(y.softmax(-1))  # MARK after
    return outs


def _count(run, op: str) -> int:
    return query(run, "SELECT count(*) AS n FROM ops WHERE op = ?", (op,))[0]["n"]


@in_process
def test_an_eager_loop_is_recorded_on_its_first_steps_then_one_in_n(tmp_path):
    plain = _infer(_model())
    model = _model()
    with graphdbg.capture(str(tmp_path / "all.run"), eager_steps=(0, 1)):
        every = _infer(model)
    with graphdbg.capture(str(tmp_path / "some.run"), eager_steps=(2, 5)):
        some = _infer(model)
    # the observer rule: bitwise the same, nothing left on the stack or the model
    assert all(torch.equal(a, b) and torch.equal(a, c) for a, b, c in zip(plain, every, some))
    assert _get_current_dispatch_mode_stack() == []
    assert not model._forward_pre_hooks and not model._forward_hooks
    assert _count(tmp_path / "all.run", "aten.addmm.default") == 2 * CALLS
    # a step is a call and the ops after it, up to the next call: calls 1, 2, 5 and 10
    recorded = [k for k in range(1, CALLS + 1) if recorded_step(k, 2, 5)]
    assert recorded == [1, 2, 5, 10]
    some_run = tmp_path / "some.run"
    assert _count(some_run, "aten.addmm.default") == 2 * len(recorded)
    assert _count(some_run, "aten._softmax.default") == len(recorded)
    # every recorded op keeps its line
    lines = {r["line"] for r in query(some_run, "SELECT DISTINCT f.line AS line FROM ops o "
                                                "JOIN frames f ON f.id = o.user_frame "
                                                "WHERE o.op = 'aten._softmax.default'")}
    assert lines == {line_of(__file__, "after")}
    doc = report_doc(some_run)
    assert doc["run"]["eager_steps"] == {"first": 2, "every": 5, "steps": CALLS - 1,
                                         "recorded": 4, "by": "module call",
                                         "module": "Sequential"}
    from rich.console import Console
    from graphdbg.reporters.report import render
    console = Console(record=True, width=200)
    with graphdbg.open_run(str(some_run)) as run:
        render(run, console)
    assert ("eager ops recorded on 4 of 11 steps (calls of the top module, Sequential): the "
            "first 2, then one step in 5; the other steps' eager ops were not seen "
            "(--eager-steps all records every step)") in " ".join(console.export_text().split())


@in_process
@pytest.mark.parametrize("nudge_at", [6, 7])
def test_two_runs_record_the_same_steps_and_diff_pairs_them(tmp_path, nudge_at):
    """A difference on a recorded step is found at its line and step; one on
    a step left out is not seen (an evaluation carries nothing to the next
    recorded step). A step starts at a call: the input of call 6 is made in
    step 5, after call 5."""
    from graphdbg.analysis.diff import diff_runs
    with graphdbg.capture(str(tmp_path / "a.run"), eager_steps=(2, 5)):
        _infer(_model())
    with graphdbg.capture(str(tmp_path / "b.run"), eager_steps=(2, 5)):
        _infer(_model(), nudge_at=nudge_at)
    d = diff_runs(str(tmp_path / "a.run"), str(tmp_path / "b.run"), rtol=1e-6)
    assert d.steps == CALLS - 1
    first = d.first_divergence
    if recorded_step(nudge_at - 1, 2, 5):
        assert first is not None and first.what == "values"
        assert (first.line, first.op, first.step) == \
            (line_of(__file__, "nudge"), "aten.mul.Tensor", nudge_at - 1)
    else:
        assert first is None


@in_process
@in_process
def test_the_top_module_is_the_outermost_with_parameters(tmp_path):
    """A transform without parameters is not the model; the model's own
    submodules are not steps."""
    norm = torch.nn.Identity()
    model = _model()
    x = torch.randn(2, 8)
    with graphdbg.capture(str(tmp_path / "t.run"), eager_steps=(1, 0)):
        for _ in range(6):
            for _ in range(3):
                norm(x)
            model(x)
    doc = report_doc(tmp_path / "t.run")
    assert doc["run"]["eager_steps"]["module"] == "Sequential"
    assert doc["run"]["eager_steps"]["steps"] == 5
    assert not model._forward_pre_hooks and not norm._forward_pre_hooks


@in_process
def test_the_model_is_freed_copied_and_saved_as_without_graphdbg(tmp_path):
    model = _model()
    with graphdbg.capture(str(tmp_path / "f.run"), eager_steps=(1, 0)):
        _infer(model, calls=3)
        assert len(model._forward_pre_hooks) == 1   # the step hook, while the capture runs
        twin = copy.deepcopy(model)
        buf = io.BytesIO()
        torch.save(model, buf)   # the hook pickles as one that does nothing
        buf.seek(0)
        loaded = torch.load(buf, weights_only=False)
        x = torch.randn(2, 8)
        assert torch.equal(twin(x), model(x)) and torch.equal(loaded(x), model(x))
        gone = weakref.ref(model)
        del model, twin, loaded
        gc.collect()
        assert gone() is None   # graphdbg holds the top module weakly


@in_process
def test_a_loop_that_compiles_after_its_eager_steps(tmp_path):
    """The hook is gone before Dynamo traces the module (same graphs, no
    break); steps restart as compiled calls; the recorder, off the stack on
    an eager step left out, is back on after the compiled call (pushed as
    torch.compile's wrapper returns, never inside it)."""
    from torch._dynamo.utils import counters
    model = _model()
    x = torch.randn(2, 8)
    graphs, breaks = counters["stats"]["unique_graphs"], sum(counters["graph_break"].values())
    with graphdbg.capture(str(tmp_path / "c.run"), eager_steps=(2, 0)):
        with torch.no_grad():
            for _ in range(6):
                model(x)   # steps 3 to 6 not recorded: the recorder is off the stack
            compiled = torch.compile(model, backend="eager")
            for _ in range(3):
                y = compiled(x)
                assert torch._C._dispatch_tls_is_dispatch_key_included(
                    torch._C.DispatchKey.Python) == bool(_get_current_dispatch_mode_stack())
                z = (y * 3).sum()  # MARK eager-after
    assert z.item() == pytest.approx((model(x) * 3).sum().item())
    assert _get_current_dispatch_mode_stack() == []
    assert counters["stats"]["unique_graphs"] == graphs + 1
    assert sum(counters["graph_break"].values()) == breaks
    assert not model._forward_pre_hooks
    doc = report_doc(tmp_path / "c.run")
    assert doc["run"]["eager_steps"]["by"] == "compiled call"
    muls = query(tmp_path / "c.run", "SELECT count(*) AS n FROM ops o JOIN frames f "
                                     "ON f.id = o.user_frame WHERE o.op = 'aten.mul.Tensor' "
                                     "AND f.line = ?", (line_of(__file__, "eager-after"),))
    # compiled call 1 ends step 1 (a restart); the mul after it is step 2's, recorded
    # (the recorder back on the stack); steps 3 and 4 are left out
    assert muls[0]["n"] == 1


@in_process
def test_a_generate_loop_steps_by_its_model_calls(tmp_path):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(num_hidden_layers=1, hidden_size=32, num_attention_heads=2,
                                   num_key_value_heads=2, intermediate_size=64, vocab_size=100,
                                   max_position_embeddings=64, bos_token_id=1, eos_token_id=2,
                                   pad_token_id=0)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).eval()
    ids = torch.randint(3, 100, (1, 4))

    def generate():
        return model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=8,
                              min_new_tokens=8, do_sample=False)
    plain = generate()
    with graphdbg.capture(str(tmp_path / "g.run"), eager_steps=(2, 0)):
        watched = [generate() for _ in range(2)]
    assert all(torch.equal(plain, w) for w in watched)
    steps = report_doc(tmp_path / "g.run")["run"]["eager_steps"]
    assert (steps["by"], steps["module"], steps["steps"], steps["recorded"]) == \
        ("module call", "LlamaForCausalLM", 15, 2)   # 16 forwards, the first two recorded
    assert not model._forward_pre_hooks
