"""Eager-side recorder: one row per aten op that runs eagerly.

A TorchDispatchMode sees every aten op below autograd. Two rules keep it an
observer:

- ``ignore_compile_internals() -> True``: Dynamo does not fall back to eager
  because of this mode, and compiles with it switched off. (A default mode on
  the stack makes torch.compile silently run eager.)
- It is popped while a compiled graph runs (see ``backend.py``) and passes
  through the ops of a compiled backward, so compiled work is never recorded as
  eager work.

Backward ops are tied to the forward line that created their autograd node via
autograd sequence numbers: the op that takes sequence number N in the forward
creates the node whose ``_sequence_nr()`` is N.
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch._dynamo
from torch.utils._python_dispatch import TorchDispatchMode

from graphdbg.runfile.records import OpRow

from .. import compat
from . import tensorstats
from ..context import CaptureContext
from ..placement.modules import ModuleNames
from ..placement.stack import StackWalker
from .tensors import TensorKeeper

_current_node = torch._C._current_autograd_node
_sequence_nr = torch._C._autograd._get_sequence_nr
_perf_ns = time.perf_counter_ns
_fake_mode_set = torch._C._get_dispatch_mode
_HigherOrderOperator = torch._ops.HigherOrderOperator
_FAKE = torch._C._TorchDispatchModeKey.FAKE
_Tensor = torch.Tensor
_describe_json = tensorstats.describe_json
_stats_json = tensorstats.stats_json
_OpOverload = torch._ops.OpOverload
# OpOverload.__call__ is `return self._op(*args, **kwargs)`: call _op directly
# (one Python frame less per op, and out of the timed region) while it still is
_PLAIN_OP_CALL = _OpOverload.__call__.__code__.co_names == ("_op",)

_COLLECTIVE = ("c10d.", "_c10d_functional.")  # ops a rank may wait in
# Ops that only shuffle metadata; recorded, but no value summary (it would
# repeat the summary of their input).
_NO_STATS = {"aten.empty.memory_format", "aten.empty_like.default", "aten.empty_strided.default",
             "aten.new_empty.default", "aten.new_empty_strided.default",  # uninitialised memory
             "aten.detach.default", "aten.view.default", "aten._unsafe_view.default",
             "aten.t.default", "aten.transpose.int", "aten.expand.default",
             "aten.alias.default", "aten.permute.default", "aten.unsqueeze.default",
             "aten.squeeze.dim", "aten.reshape.default", "aten.slice.Tensor",
             "aten.select.int", "aten.as_strided.default", "aten._to_copy.default_meta"}


class EagerRecorder(TorchDispatchMode):
    """Records eager aten ops into the session's run file.

    Runs once per eager op, so the per-op work is cached where it can be:
    op names by op, stack/frame ids by the tuple of user frames, module
    paths by module, and shape/dtype JSON by (shape, dtype). Value
    statistics are not computed here: the outputs go to the capture's
    `StatsQueue` (batched, read back without waiting) and the op's row is
    written when they arrive."""

    # Without this, any higher-order op (torch.cond, checkpoint, a compiled
    # backward that contains one) raises under the mode: they pass through.
    supports_higher_order_operators = True

    def __init__(self, ctx: CaptureContext, keeper: TensorKeeper) -> None:
        super().__init__()
        self.ctx = ctx
        self.keeper = keeper
        self.writer = ctx.writer
        self.tier = ctx.options.values
        self.queue = ctx.stats_queue if self.tier != "none" else None
        self.max_rows = ctx.options.max_ops
        self.rows = 0
        self.modules = ModuleNames()
        self.walker = StackWalker()
        self._fwd_stack: dict[int, tuple[int | None, int | None, str | None, str | None]] = {}
        self._stacks: dict[tuple, tuple[int | None, int | None]] = {}
        self._ops: dict[int, tuple[Any, str, bool, Any, bool, bool]] = {}
        self._summary, self._summary_dirty = self.writer.op_summary_table()
        self._rows: list[tuple] = []   # op rows not yet handed to the writer
        self._next_seq = ctx.next_seq
        # called at an op of the forward inside a module until the top module
        # is chosen (steps.TopModuleSteps), then None
        self.on_module_op = None

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        return True

    # Dynamo skips this code and all it calls (_skip_dynamo_on_dispatch below)
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        if self.ctx.eager_paused or _fake_mode_set(_FAKE) is not None:
            # compiled work, or tracing on fake tensors (torch.export, a graph
            # check): not recorded as eager ops
            return func(*args, **kwargs)
        info = self._ops.get(id(func))
        if info is None or info[0] is not func:
            try:
                info = self._op_info(func)
            except Exception as exc:  # never break the user's program
                self.ctx.internal_error("eager recorder", exc)
                return func(*args, **kwargs)
        if info[4]:  # a higher-order op: run whole, its inner ops are recorded
            return func(*args, **kwargs)
        node = _current_node()
        if node is not None and node.name().startswith("CompiledFunction"):
            # a compiled graph's backward: compiled work, not eager work
            return func(*args, **kwargs)
        t0 = _perf_ns()
        out = info[3](*args, **kwargs)
        dt = _perf_ns() - t0
        try:
            self._record(info, out, dt, node)
        except Exception as exc:  # never break the user's program
            self.ctx.internal_error("eager recorder", exc)
        return out

    def _op_info(self, func) -> tuple[Any, str, bool, Any, bool, bool]:
        """(op, name, summarise values?, what to call, higher-order?,
        collective?). Holds the op, so its id stays unique while cached."""
        name = str(func)
        call = func._op if type(func) is _OpOverload and _PLAIN_OP_CALL else func
        hop = type(func) is not _OpOverload and isinstance(func, _HigherOrderOperator)
        info = (func, name, name not in _NO_STATS, call, hop, name.startswith(_COLLECTIVE))
        self._ops[id(func)] = info
        return info

    def _record(self, info: tuple, out, dt: int, node) -> None:
        w = self.writer
        name = info[1]
        if node is None:
            # from the Dynamo-skipped dispatch outwards (internal frames are skipped)
            # forward, optimizer (step, clipping, zero_grad) or init (weight init)
            frames, inner, phase = self.walker.walk(1)
            if phase == "compiled":
                # a graph compiled before the capture (graphdbg's wrapper pauses
                # this recorder around the others): its ops are compiled work
                self.ctx.compiled_before_ran = True
                return
            hit = self._stacks.get(frames)
            if hit is None:
                outer_first = frames[::-1]
                hit = self._stacks[frames] = (
                    w.stack_id(outer_first),
                    w.frame_id(*outer_first[-1]) if outer_first else None)
            stack, user = hit
            if inner is None:
                mpath = mcls = None
            else:
                named = self.modules.lookup(inner)
                if named is None:
                    named = self.modules.path(self.walker.modules(1))
                mpath, mcls = named
                if self.on_module_op is not None and phase == "forward":
                    self.on_module_op()
            seq = _sequence_nr() - 1
            # first writer wins: the op that took this sequence number made the node
            if seq >= 0:
                fwd = self._fwd_stack
                if seq not in fwd:
                    if len(fwd) > 1_000_000:
                        fwd.clear()
                    fwd[seq] = (user, stack, mpath, mcls)
        else:
            phase = "backward"
            user, stack, mpath, mcls = self._fwd_stack.get(
                node._sequence_nr(), (None, None, None, None))
        key = (name, phase, user, mpath or "")
        agg = self._summary.get(key)
        if agg is None:
            self._summary[key] = [1, dt, dt]
        else:
            agg[0] += 1
            agg[1] += dt
            if dt > agg[2]:
                agg[2] = dt
        self._summary_dirty.add(key)
        self.ctx.last_op = (name, phase, user)
        if self.rows >= self.max_rows:
            self.ctx.drop_op()
            return
        self.rows += 1
        if type(out) is _Tensor:
            tensors = (out,)
            described = _describe_json(out)
            shapes = described[2]
            dtypes = described[3]
        else:
            tensors = tensorstats.flat_tensors(out)
            described = [_describe_json(t) for t in tensors]
            shapes = "[" + ",".join([d[0] for d in described]) + "]"
            dtypes = "[" + ",".join([d[1] for d in described]) + "]"
        seq_no = self._next_seq()
        queue = self.queue
        if queue is not None and info[2] and tensors:
            add = queue.add
            # the row waits for its statistics; positional, in OpRow's field order
            queue.defer([add(t) for t in tensors], self._emit,
                        (seq_no, name, phase, shapes, dtypes, dt, user, stack, mpath, mcls))
        else:
            self._rows.append((seq_no, name, phase, shapes, dtypes, None, dt, user, stack,
                               mpath, mcls))
        if len(self._rows) >= 256:
            self.flush_rows()
        else:
            w.maybe_flush()  # the timed commit (it takes the held rows along)
        if self.tier == "full":
            self.keeper.keep(f"op:{seq_no}", tensors, f"{name} {mpath or ''}")
        if info[5] and self.ctx.on_collective is not None:
            self.ctx.on_collective()   # a rank may wait in it: what is held goes to the writer

    def _emit(self, p: tuple, stats: list) -> None:
        self._rows.append((p[0], p[1], p[2], p[3], p[4], _stats_json(stats), p[5], p[6], p[7],
                           p[8], p[9]))

    def flush_rows(self) -> None:
        """Hand the rows held here to the writer."""
        rows, self._rows = self._rows, []
        if rows:
            self.writer.add_tuples(OpRow, rows)

    def drain(self, wait: bool = False) -> None:
        """The statistics queued so far are reduced (with ``wait``: and read
        back), and every row that has them goes to the writer. Called with
        the recorder off (a step's end, a commit, the run's end)."""
        if self.queue is not None:
            self.queue.drain(wait)
        self.flush_rows()

    def step_end(self) -> None:
        """A step ended (it may end inside a compiled call, once per call):
        device statistics start on their way, and what has arrived is
        written (nothing waits)."""
        queue = self.queue
        if queue is not None:
            if queue.device_work:
                with self.ctx.own_work():
                    queue.start_device_batches()
            else:
                queue.poll()
        if self._rows:
            self.flush_rows()


def _skip_dynamo_on_dispatch() -> None:
    """Dynamo must never trace the mode (an op in a compiled function's eager
    part calls it while Dynamo's frame hook is set).
    TorchDispatchMode.__init_subclass__ wraps ``__torch_dispatch__`` in a lazy
    shim that calls it through ``torch._dynamo.disable``: two Python frames
    and a hook swap per op. Instead the plain function is installed and its
    code marked for Dynamo's C frame hook to skip, with everything it calls
    (`compat.skip_dynamo`): nothing per op."""
    fn = EagerRecorder.__dict__["__torch_dispatch__"]
    fn = getattr(fn, "__wrapped__", fn)
    EagerRecorder.__torch_dispatch__ = compat.skip_dynamo(fn)


_skip_dynamo_on_dispatch()
