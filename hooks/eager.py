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
from typing import TYPE_CHECKING, Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode

from graphdbg.runfile import dumps as _j

from . import tensorstats
from .frames import ModuleNames, current_stack

if TYPE_CHECKING:
    from .session import CaptureSession

_current_node = torch._C._current_autograd_node
_sequence_nr = torch._C._autograd._get_sequence_nr
_perf_ns = time.perf_counter_ns

# Ops that only shuffle metadata; recorded, but no value summary (it would
# repeat the summary of their input).
_NO_STATS = {"aten.detach.default", "aten.view.default", "aten._unsafe_view.default",
             "aten.t.default", "aten.transpose.int", "aten.expand.default",
             "aten.alias.default", "aten.permute.default", "aten.unsqueeze.default",
             "aten.squeeze.dim", "aten.reshape.default", "aten.slice.Tensor",
             "aten.select.int", "aten.as_strided.default", "aten._to_copy.default_meta"}


class EagerRecorder(TorchDispatchMode):
    """Records eager aten ops into the session's run file."""

    def __init__(self, session: "CaptureSession") -> None:
        super().__init__()
        self.session = session
        self.writer = session.writer
        self.tier = session.values
        self.max_rows = session.max_ops
        self.rows = 0
        self.modules = ModuleNames()
        self._fwd_stack: dict[int, tuple[int | None, int | None, str | None, str | None]] = {}
        self._stacks: dict[tuple, tuple[int | None, int | None]] = {}

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        return True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.session._in_compiled:
            return func(*args, **kwargs)
        node = _current_node()
        if node is not None and node.name().startswith("CompiledFunction"):
            # a compiled graph's backward: compiled work, not eager work
            return func(*args, **kwargs)
        t0 = _perf_ns()
        out = func(*args, **kwargs)
        dt = _perf_ns() - t0
        try:
            self._record(func, out, dt, node)
        except Exception as exc:  # never break the user's program
            self.session.internal_error("eager recorder", exc)
        return out

    def _record(self, func, out, dt: int, node) -> None:
        w = self.writer
        name = str(func)
        if node is None:
            phase = "forward"
            frames, modules = current_stack(skip=3)
            key = tuple(frames)
            hit = self._stacks.get(key)
            if hit is None:
                hit = self._stacks[key] = (
                    w.stack_id(frames), w.frame_id(*frames[-1]) if frames else None)
            stack, user = hit
            mpath, mcls = self.modules.path(modules)
            seq = _sequence_nr() - 1
            # first writer wins: the op that took this sequence number made the node
            if seq >= 0 and seq not in self._fwd_stack:
                if len(self._fwd_stack) > 1_000_000:
                    self._fwd_stack.clear()
                self._fwd_stack[seq] = (user, stack, mpath, mcls)
        else:
            phase = "backward"
            user, stack, mpath, mcls = self._fwd_stack.get(
                node._sequence_nr(), (None, None, None, None))
        w.add_op_summary(name, phase, user, mpath, dt)
        if self.rows >= self.max_rows:
            self.session.ops_dropped += 1
            return
        self.rows += 1
        tensors = tensorstats.flat_tensors(out)
        shapes, dtypes, stats = [], [], []
        want_stats = self.tier != "none" and name not in _NO_STATS
        for t in tensors:
            s, d = tensorstats.describe(t)
            shapes.append(s)
            dtypes.append(d)
            if want_stats:
                stats.append(tensorstats.summarize(t, self.tier))
        seq_no = self.session.next_seq()
        w.add("ops", (seq_no, name, phase, _j(shapes), _j(dtypes),
                      _j(stats) if want_stats else None, dt, user, stack, mpath, mcls))
        if self.tier == "full":
            self.session.keep_tensors(f"op:{seq_no}", tensors)


def our_mode_on_top(mode: EagerRecorder | None) -> bool:
    return mode is not None and _get_current_dispatch_mode() is mode
