"""Steps of the program, and which steps' eager ops are recorded.

A step is an optimizer step or, in a program that steps no optimizer, a call
of its first compiled graph (one iteration of a compiled loop), or, in a
program with neither (inference, evaluation, generation, RL rollouts), a call
of its top module: the outermost module with parameters running at the first
eager op inside a module (a `generate` loop's model call; `TopModuleSteps`).
`--profile`'s schedule and `--eager-steps` count the same steps (`StepClock`).

A training loop runs the same eager ops every step (the optimizer's, the
gradient clipping's, the loss's). Recording one costs a Python dispatch-mode
call and a row, about as much as a small op itself, so recording every step
makes a compiled training step several times slower. `EagerSchedule` records
the first FIRST steps whole, then one step in EVERY: in between, the recorder
is taken off the dispatch-mode stack, and the program's ops run as they do
without graphdbg. What is recorded is whole steps, so a recorded step's rows
(and their statistics) are complete, and two runs of the same program record
the same steps: `graphdbg diff` aligns them as before. A program without steps
(no optimizer, no compiled graph, no module) is recorded whole (up to
--max-ops).

Every step's end is written as an event `graphdbg_step` (docs/run-file.md),
whatever `--eager-steps` says: `graphdbg diff` pairs ops only within the same
step. Its payload: the step count, `steps` (how many steps ended there: steps
that wrote nothing between their ends share one event, so a steady compiled
loop writes no row per call), `restart` (the steps counted so far were calls
of the first compiled graph, and this is the first optimizer step: they were
one step) and `by` (optimizer | compiled call | module call).
"""

from __future__ import annotations

import json
import threading
import weakref
from typing import Callable

import torch._dynamo.eval_frame
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch.utils._python_dispatch import _get_current_dispatch_mode, _pop_mode, _push_mode

from graphdbg.runfile.records import EventRow

from .. import compat
from ..context import CaptureContext
from ..placement.stack import StackWalker, outward, when_returns

_fake_mode_set = torch._C._get_dispatch_mode
_FAKE = torch._C._TorchDispatchModeKey.FAKE
_tracing_state = torch._C._get_tracing_state
# how steps were counted, weakest first: a stronger kind, once seen, restarts the count
_KINDS = ("module call", "compiled call", "optimizer")


_QUOTED: dict = {}   # a step kind -> its JSON string


class StepClock:
    """Calls ``on_step(restart, compiled)`` at the end of each step of the
    program. Steps are counted by the strongest kind seen (`_KINDS`): optimizer
    steps, else calls of the first compiled graph, else calls of the top
    module. ``restart``: the first step of a stronger kind after steps of a
    weaker one were counted (they were one step of the stronger kind).
    ``compiled``: the step ends inside a compiled call (a call of the first
    graph always does)."""

    def __init__(self, ctx: CaptureContext, on_step: Callable[..., None]) -> None:
        self.ctx = ctx
        self.on_step = on_step
        self.kind: str | None = None   # how steps are counted so far (None: no step yet)
        self._first_graph: int | None = None
        self._hook = None
        self.top = TopModuleSteps(ctx, self._module_call)

    @property
    def optimizer_steps(self) -> bool:
        return self.kind == "optimizer"

    def install(self) -> None:
        self._hook = register_optimizer_step_post_hook(self._optimizer_step)
        self.ctx.call_listeners.append(self._compiled_call)
        self.top.install()

    def uninstall(self) -> None:
        self.top.uninstall()
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        if self._compiled_call in self.ctx.call_listeners:
            self.ctx.call_listeners.remove(self._compiled_call)

    def _step(self, kind: str, compiled: bool) -> None:
        rank = _KINDS.index(kind)
        if self.kind is not None and _KINDS.index(self.kind) > rank:
            return   # e.g. a compiled call in a program whose steps are optimizer steps
        restart = self.kind is not None and self.kind != kind
        self.kind = kind
        if rank > 0:
            self.top.stop()
        self.on_step(restart=restart, compiled=compiled)

    def _optimizer_step(self, *_args) -> None:
        self._step("optimizer", compiled=False)

    def _compiled_call(self, graph_id: int) -> None:
        if graph_id == self._first_graph and self.kind == "compiled call":
            self.on_step(False, True)   # the steady case, per call: (restart, compiled)
            return
        if self._first_graph is None:
            self._first_graph = graph_id
        if graph_id == self._first_graph:
            self._step("compiled call", compiled=True)

    def _module_call(self) -> None:
        self._step("module call", compiled=False)


class TopModuleSteps:
    """Steps of a program with no optimizer and no compiled graph: each call
    of its top module after the first ends a step (a step is one call and the
    eager ops after it, up to the next call: a generated token's forward and
    its sampling, one batch of an evaluation).

    The top module is chosen at the first eager op of the program's forward
    inside a module (`EagerRecorder.on_module_op`): the outermost running
    module with parameters (a transform or a loss is not the model). Its calls
    are seen by a forward pre-hook on that module alone, a Python call per
    step (a global module hook would slow every module call and change what
    Dynamo traces). The hook returns nothing, so the call runs as before; it
    is removed when any compile starts, before Dynamo traces a frame (it would
    trace the hook), and steps are then counted by compiled calls."""

    MAX_TRIES = 64   # eager ops in modules without parameters before giving up

    def __init__(self, ctx: CaptureContext, on_call: Callable[[], None]) -> None:
        self.ctx = ctx
        self.on_call = on_call
        self.module_name: str | None = None   # the top module's class, once chosen
        self._module = None       # weakref to it: graphdbg keeps no module alive
        self._handle = None
        self._tries = 0
        self._owner = threading.get_ident()
        self._stopped = False
        self._callbacks = getattr(torch._dynamo, "callback_handler", None)

    def install(self) -> None:
        mode = self.ctx.eager_mode
        if mode is None or self._callbacks is None:
            return   # no eager recorder, or no compile-start callback: no module steps
        self._callbacks.register_start_callback(self._compile_starts)
        mode.on_module_op = self._choose

    def uninstall(self) -> None:
        self.stop()
        if self._callbacks is not None and self._compile_starts in self._callbacks.start_callbacks:
            self._callbacks.remove_start_callback(self._compile_starts)

    def stop(self) -> None:
        """No more module steps (the program compiled, or steps an optimizer)."""
        self._stopped = True
        mode = self.ctx.eager_mode
        if mode is not None:
            mode.on_module_op = None
        handle, self._handle = self._handle, None
        if handle is not None:
            handle.remove()

    def _compile_starts(self, *_args) -> None:
        self.stop()

    def _choose(self) -> None:
        """At an eager op of the forward inside a module, until chosen."""
        if self._stopped or threading.get_ident() != self._owner or self.ctx.in_own_work:
            return
        top = next((m for m in StackWalker.modules()
                    if next(iter(m.parameters()), None) is not None), None)
        self._tries += 1
        if top is None and self._tries < self.MAX_TRIES:
            return
        self.ctx.eager_mode.on_module_op = None
        if top is None:
            return
        self._module = weakref.ref(top)
        self.module_name = type(top).__name__
        self._handle = top.register_forward_pre_hook(_PreHook(self))

    def _called(self, module) -> None:
        target = self._module() if self._module is not None else None
        if (module is not target or self._stopped
                or threading.get_ident() != self._owner or self.ctx.in_own_work
                or _fake_mode_set(_FAKE) is not None or _tracing_state() is not None):
            return   # another thread's call, graphdbg's own, or a trace (export, jit)
        self.on_call()


def _inert(*_args) -> None:
    return None


class _PreHook:
    """The pre-hook on the top module: calls back weakly (the module holds
    the hook, not the session), is copied as itself by ``copy.deepcopy`` and
    pickles as a hook that does nothing, so ``torch.save(model)`` and copies
    of the model work as without graphdbg."""

    def __init__(self, steps: TopModuleSteps) -> None:
        self._steps = weakref.ref(steps)

    def __call__(self, module, _args) -> None:
        steps = self._steps()
        if steps is not None:
            try:
                steps._called(module)
            except Exception as exc:  # never break the user's program
                steps.ctx.internal_error("module steps", exc)
        return None

    def __deepcopy__(self, _memo) -> "_PreHook":
        return self

    def __reduce__(self):
        return (_inert_hook, ())


def _inert_hook():
    return _inert


compat.skip_dynamo(_PreHook.__call__)   # never traced, wherever the module is called


_EVAL_FRAME_FILE = torch._dynamo.eval_frame.__file__


def _is_compile_wrapper(code) -> bool:
    return code.co_filename == _EVAL_FRAME_FILE and (
        code.co_name == "compile_wrapper" or "saved_dynamic_layer_stack_depth" in code.co_varnames)


def _in_compiled_call() -> bool:
    """Whether a torch.compile'd function is running below us. Its wrapper (eval_frame's ``compile_wrapper``, ``_fn`` in
    older torch) restores the dispatch-key state it was entered with when it
    returns, so a mode pushed or popped inside it would leave the mode stack
    and the dispatch keys disagreeing (torch then fails on the next op): the
    recorder can only be muted there."""
    return any(_is_compile_wrapper(f.f_code) for f in outward())


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
        self._waiting = False    # to be pushed when torch.compile's wrapper returns
        self._pop_waiting = False  # to be popped when torch.compile's wrapper returns
        self._clock = StepClock(ctx, self._next_step)
        self._held: list | None = None   # the step event not yet written (`_write_held`)
        self._last_seq = 0               # the seq the last step's end took
        self._seq_next = ctx._seq.__next__   # ctx.next_seq less a Python call (per compiled call)

    @property
    def always(self) -> bool:
        return self.every == 1

    def install(self) -> None:
        # always: the step events cost one optimizer post-hook and one call listener
        self._clock.install()

    def uninstall(self) -> None:
        self._clock.uninstall()
        if self._held is not None:
            self._write_held()
        self._turn(on=True, final=True)
        self.ctx.writer.set_meta(eager_steps={
            "first": self.first, "every": self.every, "steps": self.done,
            "recorded": self._recorded_total(), "by": self._by(),
            **({"module": self._clock.top.module_name} if self._by() == "module call" else {})})

    def _by(self) -> str | None:
        return self._clock.kind

    def _write_held(self) -> None:
        """The held step event: ``steps`` ends in a row with nothing written
        between them, the last of them step ``step``; written at the first seq
        they took (what came after it belongs to the next step)."""
        seq, n, t, restart, step, quoted = self._held
        self._held = None
        # the payload json.dumps would write, made by hand
        self.ctx.writer.add(EventRow(
            seq=seq, t=t, name="graphdbg_step", compile_id=None, metadata=None,
            payload=f'{{"step": {step}, "steps": {n}, "restart": '
                    f'{"true" if restart else "false"}, "by": {quoted}}}'))

    def _recorded_total(self) -> int:
        """Of the steps ended: how many were recorded."""
        n, first, every = self.done, self.first, self.every
        return min(n, first) + (n // every - min(n, first) // every if every else 0)

    def _next_step(self, restart: bool = False, compiled: bool = False) -> None:
        self.done = done = 1 if restart else self.done + 1
        # this runs once per compiled call in a program whose steps are its
        # compiled calls: a step that wrote nothing (no seq was taken since
        # the last step's end) joins the held event instead of writing one
        seq = self._seq_next()
        held = self._held
        if held is not None and seq == self._last_seq + 1 and not restart:
            held[1] += 1
            held[4] = done
        else:
            if held is not None:
                self._write_held()
            by = self._by()
            quoted = _QUOTED.get(by)
            if quoted is None:
                quoted = _QUOTED[by] = json.dumps(by)
            self._held = [seq, 1, self.ctx.now(), restart, done, quoted]
        self._last_seq = seq
        every = self.every
        if every == 1:
            return  # every step recorded: the recorder stays as it is
        nxt = done + 1
        want = nxt <= self.first or (every > 0 and nxt % every == 0)   # recorded_step, inline
        if self._off and not want:
            return  # a step sat out, and so is the next
        mode = self.ctx.eager_mode
        if mode is not None and not self._off:
            # a recorded step's end: what the recorder still holds is written
            # now (a step it sat out left nothing new; the next recorded
            # step's end, or the session's, writes what is still on its way)
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
                    self._push_later()   # cannot be pushed here
                    return
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
                if compiled and not final:
                    # a step of a compiled loop ends inside the call: muted
                    # for the rest of it, then off the stack (a muted recorder
                    # still costs a Python call per op of every call after)
                    self._pop_later()
            self._off = True

    def _pop_later(self) -> None:
        """Take the muted recorder off the stack as torch.compile's outermost
        wrapper returns (`_push_later`'s twin), if it is still off, muted by
        this schedule alone and on top then; else it stays muted."""
        if self._pop_waiting:
            return

        def pop() -> None:
            self._pop_waiting = False
            ctx = self.ctx
            if (self._off and not self._popped and ctx.eager_mode is not None
                    and ctx.eager_paused == 1 and _get_current_dispatch_mode() is ctx.eager_mode):
                _pop_mode()
                ctx.eager_paused = 0
                self._popped = True

        self._pop_waiting = when_returns(_is_compile_wrapper, pop, compat.skip_dynamo)

    def _push_later(self) -> None:
        """The recorder was taken off by module steps and is wanted on inside
        a compiled call (the program compiled after its eager steps): it is
        pushed as torch.compile's outermost wrapper returns, seen by a profile
        function for the rest of this call. Where the program has a profile
        function of its own, the next step that can push does."""
        if self._waiting:
            return

        def push() -> None:
            self._waiting = False
            if self._off and self._popped and self.ctx.eager_mode is not None:
                _push_mode(self.ctx.eager_mode)
                self._off = self._popped = False

        self._waiting = when_returns(_is_compile_wrapper, push, compat.skip_dynamo)
