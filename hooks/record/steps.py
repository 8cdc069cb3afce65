"""Steps of the program, and which steps' eager ops are recorded.

A step is an optimizer step or, in a program that steps no optimizer, a call
of its first compiled graph (one iteration of a compiled loop); `--profile`'s
schedule and `--eager-steps` count the same steps (`StepClock`).

A training loop runs the same eager ops every step (the optimizer's, the
gradient clipping's, the loss's). Recording one costs a Python dispatch-mode
call and a row, about as much as a small op itself, so recording every step
makes a compiled training step several times slower. `EagerSchedule` records
the first FIRST steps whole, then one step in EVERY: in between, the recorder
is taken off the dispatch-mode stack, and the program's ops run as they do
without graphdbg. What is recorded is whole steps, so a recorded step's rows
(and their statistics) are complete, and two runs of the same program record
the same steps: `graphdbg diff` aligns them as before. A program without steps
is recorded whole (up to --max-ops).

Every step's end is written as an event `graphdbg_step` (docs/run-file.md),
whatever `--eager-steps` says: `graphdbg diff` pairs ops only within the same
step. Its payload: the step count, `restart` (the steps counted so far were
calls of the first compiled graph, and this is the first optimizer step: they
were one step) and `by` (optimizer | compiled call).
"""

from __future__ import annotations

import json
from typing import Callable

import torch._dynamo.eval_frame
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch.utils._python_dispatch import _get_current_dispatch_mode, _pop_mode, _push_mode

from graphdbg.runfile.records import EventRow

from ..context import CaptureContext
from ..placement.stack import outward


class StepClock:
    """Calls ``on_step(restart, compiled)`` at the end of each step of the
    program. ``restart``: the first optimizer step after calls of the first
    compiled graph were counted as steps (they were one step: the program has
    an optimizer, and steps are its steps). ``compiled``: the step ends inside
    a compiled call (a call of the first graph always does)."""

    def __init__(self, ctx: CaptureContext, on_step: Callable[..., None]) -> None:
        self.ctx = ctx
        self.on_step = on_step
        self.optimizer_steps = False
        self._calls_counted = False
        self._first_graph: int | None = None
        self._hook = None

    def install(self) -> None:
        self._hook = register_optimizer_step_post_hook(self._optimizer_step)
        self.ctx.call_listeners.append(self._compiled_call)

    def uninstall(self) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        if self._compiled_call in self.ctx.call_listeners:
            self.ctx.call_listeners.remove(self._compiled_call)

    def _optimizer_step(self, *_args) -> None:
        restart = not self.optimizer_steps and self._calls_counted
        self.optimizer_steps = True
        self.on_step(restart=restart, compiled=False)

    def _compiled_call(self, graph_id: int) -> None:
        if self._first_graph is None:
            self._first_graph = graph_id
        if not self.optimizer_steps and graph_id == self._first_graph:
            self._calls_counted = True
            self.on_step(restart=False, compiled=True)


_EVAL_FRAME_FILE = torch._dynamo.eval_frame.__file__


def _in_compiled_call() -> bool:
    """Whether a torch.compile'd function is running below us. Its wrapper
    (eval_frame's ``compile_wrapper``, ``_fn`` in older torch) restores the dispatch-key state it was entered
    with when it returns, so a mode pushed or popped inside it would leave
    the mode stack and the dispatch keys disagreeing (torch then fails on
    the next op): the recorder can only be muted there."""
    for f in outward():
        code = f.f_code
        if code.co_filename == _EVAL_FRAME_FILE and (
                code.co_name == "compile_wrapper"
                or "saved_dynamic_layer_stack_depth" in code.co_varnames):
            return True
    return False


def recorded_step(step: int, first: int, every: int) -> bool:
    """Whether step ``step`` (counted from 1) has its eager ops recorded."""
    return step <= first or (every > 0 and step % every == 0)


class EagerSchedule:
    """Turns the eager recorder off between recorded steps (`--eager-steps`)."""

    def __init__(self, ctx: CaptureContext, first: int, every: int) -> None:
        self.ctx = ctx
        self.first = first
        self.every = every
        self.done = 0            # steps ended so far (the one running is done + 1)
        self._off = False        # the recorder is off for this step
        self._popped = False     # ...by popping it (else by the pause count)
        self._clock = StepClock(ctx, self._next_step)

    @property
    def always(self) -> bool:
        return self.every == 1

    def install(self) -> None:
        # always: the step events cost one optimizer post-hook and one call listener
        self._clock.install()

    def uninstall(self) -> None:
        self._clock.uninstall()
        self._turn(on=True, final=True)
        self.ctx.writer.set_meta(eager_steps={
            "first": self.first, "every": self.every, "steps": self.done,
            "recorded": self._recorded_total(), "by": self._by()})

    def _by(self) -> str:
        return "optimizer" if self._clock.optimizer_steps else "compiled call"

    def _recorded_total(self) -> int:
        """Of the steps ended: how many were recorded."""
        n, first, every = self.done, self.first, self.every
        return min(n, first) + (n // every - min(n, first) // every if every else 0)

    def _next_step(self, restart: bool = False, compiled: bool = False) -> None:
        self.done = 1 if restart else self.done + 1
        ctx = self.ctx
        ctx.writer.add(EventRow(seq=ctx.next_seq(), t=ctx.now(), name="graphdbg_step",
                                compile_id=None, metadata=None,
                                payload=json.dumps({"step": self.done, "restart": restart,
                                                    "by": self._by()})))
        if self.always:
            return  # every step recorded: the recorder stays as it is
        want = recorded_step(self.done + 1, self.first, self.every)
        mode = self.ctx.eager_mode
        if mode is not None:
            # a step's end: what the recorder still holds is written now
            mode.step_end()
        self._turn(on=want, compiled=compiled)

    def _turn(self, on: bool, final: bool = False, compiled: bool = False) -> None:
        """``compiled``: known to run inside a compiled call (then the stack is
        never touched, whatever `_in_compiled_call` finds)."""
        ctx = self.ctx
        mode = ctx.eager_mode
        if mode is None or on != self._off:
            return
        if on:
            if self._popped:
                if (compiled or _in_compiled_call()) and not final:
                    return  # cannot be pushed here: on from the next step that can
                _push_mode(mode)
            else:
                ctx.eager_paused -= 1
            self._off = self._popped = False
        else:
            # off the stack when it is on top and no compiled call runs below
            # (the program's ops then cost nothing); else muted (the recorder's
            # first check, still a Python call per op)
            if (ctx.eager_paused == 0 and _get_current_dispatch_mode() is mode
                    and not compiled and not _in_compiled_call()):
                _pop_mode()
                self._popped = True
            else:
                ctx.eager_paused += 1
            self._off = True
