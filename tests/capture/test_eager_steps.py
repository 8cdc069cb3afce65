"""`--eager-steps`: a training loop's eager ops are recorded on the first
steps and then on one step in N; between them the recorder is off the
dispatch-mode stack. Whole steps, so two runs record the same ops; the
program computes bitwise the same; the report, --json and the CLI say so."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

import graphdbg
from conftest import line_of, query, report_doc
from graphdbg.core.options import CaptureOptions, OptionError, eager_steps
from graphdbg.hooks.record.steps import EagerSchedule, recorded_step

in_process = pytest.mark.usefixtures("clean_torch")
STEPS = 12


def _train(steps: int = STEPS, nudge_at: int = 0) -> list[float]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = torch.randn(32, 8), torch.randn(32, 1)
    losses = []
    for step in range(1, steps + 1):
        xs = x * (1.01 if step == nudge_at else 1.0)  # MARK nudge
        loss = torch.nn.functional.mse_loss(model(xs), y)  # MARK loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _optimizer_ops(run) -> int:
    # aten ops: the step's profiler range closes after the step hook, so its
    # exit marker belongs to whichever step comes next
    return query(run, "SELECT count(*) AS n FROM ops WHERE phase = 'optimizer' "
                      "AND op LIKE 'aten.%'")[0]["n"]


@in_process
@pytest.mark.parametrize("nudge_at, found_at", [(10, 10), (7, 10)])
def test_diff_finds_the_first_divergence_on_the_recorded_steps(tmp_path, nudge_at, found_at):
    """Two runs record the same steps, so their ops align as before. A
    difference on a recorded step is found at its line and step; one on a
    step left out shows at the first recorded step after it (its values)."""
    from graphdbg.analysis.diff import diff_runs
    with graphdbg.capture(str(tmp_path / "a.run"), eager_steps=(2, 5)):
        _train()
    with graphdbg.capture(str(tmp_path / "b.run"), eager_steps=(2, 5)):
        _train(nudge_at=nudge_at)
    d = diff_runs(str(tmp_path / "a.run"), str(tmp_path / "b.run"), rtol=1e-6)
    first = d.first_divergence
    assert first is not None and first.what == "values"
    recorded = [k for k in range(1, STEPS + 1) if recorded_step(k, 2, 5)]  # 1, 2, 5, 10
    assert d.steps == STEPS  # ops pair within their step (graphdbg_step events)
    if nudge_at in recorded:  # the nudge itself: one mul at its line per step
        assert (first.line, first.op, first.occurrence, first.step) == \
            (line_of(__file__, "nudge"), "aten.mul.Tensor", 0, found_at)
    else:  # the weights it changed: the first Linear of step 10
        assert (first.line, first.op, first.occurrence, first.step) == \
            (line_of(__file__, "loss"), "aten.addmm.default", 0, found_at)
    # every op is paired but those without a user line (gradient accumulation)
    unlined = query(tmp_path / "a.run", "SELECT count(*) AS n FROM ops WHERE user_frame IS NULL")
    assert d.only_in_a == d.only_in_b == unlined[0]["n"] > 0


def test_which_steps_are_recorded():
    assert [k for k in range(1, 31) if recorded_step(k, 3, 10)] == [1, 2, 3, 10, 20, 30]
    assert [k for k in range(1, 6) if recorded_step(k, 2, 0)] == [1, 2]
    for n in range(60):  # the count the run file states, without listing the steps
        s = EagerSchedule.__new__(EagerSchedule)
        s.done, s.first, s.every = n, 3, 7
        assert s._recorded_total() == sum(recorded_step(k, 3, 7) for k in range(1, n + 1))
    assert all(recorded_step(k, 0, 1) for k in range(1, 50))


@in_process
def test_a_training_loop_is_recorded_on_its_first_steps_then_one_in_n(tmp_path):
    plain = _train()
    with graphdbg.capture(str(tmp_path / "all.run"), eager_steps=(0, 1)):
        every = _train()
    with graphdbg.capture(str(tmp_path / "some.run"), eager_steps=(2, 5)):
        some = _train()
    assert plain == every == some  # the observer rule: bitwise the same losses
    assert _get_current_dispatch_mode_stack() == []
    per_step = _optimizer_ops(tmp_path / "all.run") / STEPS
    assert per_step == int(per_step) and per_step > 0
    # steps 1, 2, 5, 10 of 12 (the ops of the step running at the end: step 13, none)
    assert _optimizer_ops(tmp_path / "some.run") == 4 * per_step
    doc = report_doc(tmp_path / "some.run")
    assert doc["run"]["eager_steps"] == {"first": 2, "every": 5, "steps": STEPS,
                                         "recorded": 4, "by": "optimizer"}
    assert "eager_steps" not in report_doc(tmp_path / "all.run")["run"]  # nothing left out
    from rich.console import Console
    from graphdbg.reporters.report import render
    console = Console(record=True, width=200)
    with graphdbg.open_run(str(tmp_path / "some.run")) as run:
        render(run, console)  # the report's header, as `graphdbg report` prints it
    text = console.export_text()
    assert "eager ops recorded on 4 of 12 steps (optimizer steps): the first 2, then one " \
           "step in 5; the other steps' eager ops were not seen (--eager-steps all records " \
           "every step)" in " ".join(text.split())


@in_process
@pytest.mark.parametrize("wrapper_found", [True, False])
def test_steps_of_a_compiled_loop_mute_the_recorder_inside_the_compiled_call(
        tmp_path, monkeypatch, wrapper_found):
    """Without an optimizer a step is a call of the first compiled graph, and
    the step ends inside torch.compile's wrapper, which restores the dispatch
    keys it was entered with: the recorder is muted there, never popped (a pop
    made the program's next eager op fail inside torch). Also when a torch
    whose wrapper looks different hides it from the frame search: a compiled
    call's step is known to end inside one."""
    from graphdbg.hooks.record import steps
    if not wrapper_found:
        monkeypatch.setattr(steps, "_in_compiled_call", lambda: False)
    f = torch.compile(lambda t: t.sin() + 1, backend="eager")
    x = torch.randn(4)
    stacks = []
    with graphdbg.capture(str(tmp_path / "c.run"), eager_steps=(2, 0)):
        for _ in range(4):
            y = f(x)
            # the dispatch keys agree with the mode stack (a pop inside the call
            # left the Python key on with an empty stack: a crash waiting for an op)
            assert torch._C._dispatch_tls_is_dispatch_key_included(
                torch._C.DispatchKey.Python) == bool(_get_current_dispatch_mode_stack())
            stacks.append(len(_get_current_dispatch_mode_stack()))
            z = (y * 2).sum()  # the program's eager op after each step
    # once the steps are sat out, the recorder leaves the stack as the call returns
    # (muted, it would still be a Python call per op of the program's)
    assert stacks == [1, 0, 0, 0], stacks
    assert z.item() == pytest.approx(((x.sin() + 1) * 2).sum().item())
    assert _get_current_dispatch_mode_stack() == []
    muls = query(tmp_path / "c.run", "SELECT count(*) AS n FROM ops WHERE op = 'aten.mul.Tensor'")
    assert muls[0]["n"] == 1  # step 2 only: the first call ends step 1
    doc = report_doc(tmp_path / "c.run")
    assert doc["run"]["eager_steps"]["by"] == "compiled call"
    assert doc["run"]["eager_steps"]["recorded"] == 2


def test_the_option_reads_first_every_or_all(capsys):
    assert eager_steps("all") == (0, 1) and eager_steps("3,50") == (3, 50)
    assert eager_steps("4") == (4, 0)
    with pytest.raises(ValueError, match="FIRST,EVERY"):
        eager_steps("1,2,3")
    with pytest.raises(OptionError, match="eager_steps"):
        CaptureOptions(eager_steps=(-1, 2))
    from graphdbg.cli import main
    with pytest.raises(SystemExit) as bad:
        main(["run", "--eager-steps", "x", "nope.py"])
    err = capsys.readouterr().err
    assert bad.value.code == 2 and "--eager-steps" in err and "Traceback" not in err
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    assert "--eager-steps FIRST,EVERY" in capsys.readouterr().out
