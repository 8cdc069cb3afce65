"""A recording torch.fx Interpreter: runs a captured graph eagerly, node by
node, keeping every node's value and time, optionally in float64 (the judge).

    rec = RecordingInterpreter(gm)
    out = rec.run(*inputs)
    rec.values["linear_1"], rec.times_ns["linear_1"]

    judge = RecordingInterpreter(gm, float64=True)
    judge.run(*inputs)            # float inputs, params and casts lifted to float64
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.fx

from .subgraphs import DrawWatch, flat, written_node

_FLOATS = (torch.float16, torch.bfloat16, torch.float32)
_COMPUTE = ("call_function", "call_method", "call_module")
_CAST_METHODS = {"half", "bfloat16", "float", "double"}


def _up(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.dtype in _FLOATS:
        return value.to(torch.float64)
    if isinstance(value, torch.dtype) and value in _FLOATS:
        return torch.float64
    if isinstance(value, (list, tuple)):
        return type(value)(_up(v) for v in value)
    return value


class RecordingInterpreter(torch.fx.Interpreter):
    """Keeps each node's output in ``values`` and wall time in ``times_ns``.

    ``values`` holds each node's value as it was when the node ran: when a
    later node writes in place into a tensor already recorded (``y[:, ::2].add_()``
    after ``y = x * 2``), the recorded values sharing its storage are copied
    first (``as_ran`` names them), and a node that reads such a tensor after
    the write keeps what it read in ``seen`` (for the node alone, on its own
    inputs). ``x[i] = v`` records the written tensor as its value. Only graphs
    with in-place writes pay for this.

    ``overrides`` maps node names to values used instead of running the node
    (to replay, say, a compiled graph's random numbers in the eager reference).
    With ``float64=True`` every floating tensor and dtype argument is lifted to
    float64, the way PyTorch's own accuracy checks build their reference.
    ``health`` (default: not for the float64 judge) notes which values hold
    NaN or Inf, for `nonfinite_origin`.

    ``lean`` (graphs without in-place writes only): values are freed after
    their last use, as ``torch.fx.Interpreter`` can, and not kept in
    ``values``; ``summarize(value)``, if given, is kept per node in
    ``summaries`` instead (values without data are left out). The check's
    first pass: it needs the outputs and each node's summary, and pays for
    every value only when something differs (then it runs again, whole).
    """

    def __init__(self, gm: torch.fx.GraphModule, *, float64: bool = False,
                 overrides: dict[str, Any] | None = None, health: bool | None = None,
                 lean: bool = False, summarize=None, watch_draws: bool = False) -> None:
        writes = {n: w for n in gm.graph.nodes if (w := written_node(n)) is not None}
        self.lean = lean and not writes and not overrides
        super().__init__(gm, garbage_collect_values=self.lean)
        self.summaries: dict[str, Any] | None = {} if self.lean and summarize is not None else None
        self._summarize = summarize
        self.float64 = float64
        self.overrides = overrides or {}
        self.health = not float64 if health is None else health
        self.values: dict[str, Any] = {}
        self.times_ns: dict[str, int] = {}
        self.flags: dict[str, int] = {}      # node -> NAN | INF bits of its value as it ran
        self.current: torch.fx.Node | None = None
        self.result: Any = None
        # in-place writes: node -> the node whose tensor it writes
        self.writes = writes
        self.as_ran: set[str] = set()                  # values copied before a later write
        self.seen: dict[str, dict[str, Any]] = {}      # node -> {input: value it read}
        self._order: dict[str, int] = {}
        self._live: dict[int, list[str]] = {}          # storage -> recorded names still live in it
        self._storage: dict[str, int] = {}             # name -> storage of its value
        self._writers: dict[int, list[str]] = {}       # storage -> writer nodes, in run order
        self._nwrites = 0
        self._read_copies: dict[str, tuple[int, Any]] = {}
        # nodes that drew random numbers (with ``watch_draws``; subgraphs.DrawWatch)
        self.watch_draws = watch_draws
        self.drew: set[str] = set()

    def run(self, *args, **kwargs) -> Any:
        self.result = super().run(*args, **kwargs)
        return self.result

    def run_node(self, n: torch.fx.Node) -> Any:
        self.current = n  # the node a failure happened in
        self._order[n.name] = len(self._order)
        written = self.writes.get(n) if self.writes else None
        if self.writes:
            self._before(n, written)
        if n.name in self.overrides:
            out = self.overrides[n.name]
            self.values[n.name] = out
            self._after(n, out, written)
            return out
        t0 = time.perf_counter_ns()
        if self.watch_draws and n.op in _COMPUTE:
            with DrawWatch() as watch:
                out = super().run_node(n)
            if watch.drew:
                self.drew.add(n.name)
        else:
            out = super().run_node(n)
        self.times_ns[n.name] = time.perf_counter_ns() - t0
        if self.float64 and n.op in ("placeholder", "get_attr"):
            out = _up(out)
        if self.lean:
            if self.health and n.op != "output":
                self.flags[n.name] = nonfinite_flags(out)
            if self.summaries is not None and n.op in _COMPUTE:
                s = self._summarize(out)
                if s is not None:
                    self.summaries[n.name] = s
            return out
        self.values[n.name] = out
        self._after(n, out, written)
        return out

    # -- in-place writes ------------------------------------------------------------
    def _before(self, n: torch.fx.Node, written: torch.fx.Node | None) -> None:
        """Inputs read after a write keep what ``n`` reads; a write first copies
        the recorded values it is about to change."""
        for a in n.all_input_nodes:
            if a.name in self.as_ran and a in self.env and isinstance(self.env[a], torch.Tensor):
                # one copy per value and write: readers in between share it
                at, value = self._read_copies.get(a.name, (-1, None))
                if at != self._nwrites:
                    value = _copy(self.env[a])
                    self._read_copies[a.name] = (self._nwrites, value)
                self.seen.setdefault(n.name, {})[a.name] = value
        if written is not None and written in self.env:
            self._nwrites += 1
            key = _storage_key(self.env[written])
            if key is not None:
                for name in self._live.pop(key, ()):
                    self.values[name] = _copy(self.values[name])
                    self.as_ran.add(name)
                self._writers.setdefault(key, []).append(n.name)

    def _after(self, n: torch.fx.Node, out: Any, written: torch.fx.Node | None) -> None:
        if written is not None and not isinstance(out, torch.Tensor) and written in self.env:
            out = self.values[n.name] = self.env[written]  # x[i] = v: the written tensor
        if self.health and n.op != "output":
            self.flags[n.name] = nonfinite_flags(out)
        if self.writes and n.op != "output":
            for t in (out if isinstance(out, (list, tuple)) else (out,)):
                if isinstance(t, torch.Tensor):
                    key = _storage_key(t)
                    if key is not None:
                        live = self._live.setdefault(key, [])
                        if not live or live[-1] != n.name:
                            live.append(n.name)
                        self._storage.setdefault(n.name, key)

    # -- non-finite values -----------------------------------------------------------
    def nonfinite_origin(self) -> tuple[str, str, str, str | None] | None:
        """Where the NaN/Inf that reach this graph's outputs (or inputs it
        writes, such as parameters) first appear: (node, "NaN" or "Inf", what
        it reaches, the node that made the infinities a NaN came from). Non-finite
        values that are consumed on the way (``masked_fill(-inf)`` then
        softmax, ``where``) are not followed; values that arrive non-finite in
        the graph's inputs are not this graph's. None when nothing reaches."""
        if not self.health or self.result is None:
            return None
        if not self.as_ran and not any(self.flags.values()):
            return None  # no write after a node ran, and every value as it ran is finite
        nodes = {n.name: n for n in self.module.graph.nodes}
        out_node = next(n for n in self.module.graph.nodes if n.op == "output")
        sinks: list[tuple[list[str], int, str]] = []
        for i, (arg, value) in enumerate(zip(flat(out_node.args[0]), flat(self.result))):
            bits = nonfinite_flags(value) if isinstance(arg, torch.fx.Node) else 0
            if bits:
                bit = NAN if bits & NAN else INF
                if arg.name in self.as_ran:  # written after it ran: the writes carried it
                    start = self._writes_into(arg.name, None, bit) or [arg.name]
                else:
                    start = [arg.name]
                sinks.append((start, bit, f"output {i}"))
        for n in self.module.graph.nodes:
            if n.op in ("placeholder", "get_attr") and n.name in self.as_ran:
                bits = nonfinite_flags(self.env.get(n))
                if bits and not self.flags.get(n.name, 0) & bits:
                    bit = NAN if bits & NAN else INF
                    start = self._writes_into(n.name, None, bit)
                    if start:
                        sinks.append((start, bit, f"input {n.target} (written in place)"))
        best = None
        for start, bit, reaches in sinks:
            origin = self._origin(start, bit, nodes)
            if origin is not None and (best is None or self._order[origin] < self._order[best[0]]):
                best = (origin, "NaN" if bit == NAN else "Inf", reaches)
        if best is None:
            return None
        from_inf = None
        if best[1] == "NaN":  # inf - inf, 0 * inf: where did the infinities come from?
            inf_in = self._sources(nodes[best[0]], INF)
            from_inf = self._origin(inf_in, INF, nodes) if inf_in else None
        return best + (from_inf,)

    def _writes_into(self, name: str, before: str | None, bit: int) -> list[str]:
        """Nodes that wrote values with ``bit`` into ``name``'s tensor after it
        ran (and before ``before``)."""
        lo = self._order.get(name, -1)
        hi = self._order.get(before, len(self._order)) if before else len(self._order)
        return [w for w in self._writers.get(self._storage.get(name), ())
                if lo < self._order[w] < hi and self.flags.get(w, 0) & bit]

    def _sources(self, n: torch.fx.Node, bit: int) -> list[str]:
        """The nodes that brought ``n`` the values with ``bit`` it read."""
        out = []
        read = self.seen.get(n.name, {})
        for a in n.all_input_nodes:
            if a.name in read:
                if nonfinite_flags(read[a.name]) & bit:
                    out += self._writes_into(a.name, n.name, bit) or [a.name]
            elif self.flags.get(a.name, 0) & bit:
                out.append(a.name)
        return out

    def _origin(self, start: list[str], bit: int, nodes: dict) -> str | None:
        """The first node (in run order) with ``bit`` whose inputs had none:
        where they appear; graph inputs that arrive non-finite are not origins."""
        origins, visited, stack = [], set(), list(start)
        while stack:
            name = stack.pop()
            if name in visited or name not in nodes:
                continue
            visited.add(name)
            node = nodes[name]
            if node.op in ("placeholder", "get_attr"):
                continue
            sources = self._sources(node, bit)
            if sources:
                stack.extend(sources)
            else:
                origins.append(name)
        return min(origins, key=lambda x: self._order.get(x, 0), default=None)

    def call_function(self, target, args, kwargs):
        if self.float64:
            args, kwargs = _up(args), {k: _up(v) for k, v in kwargs.items()}
        if target is _ACTIVATION_CHECKPOINT:
            return _checkpoint_as_the_program_ran_it(args, kwargs)
        return super().call_function(target, args, kwargs)

    def call_method(self, target, args, kwargs):
        if self.float64:
            if target in _CAST_METHODS:
                return _up(args[0]) if isinstance(args[0], torch.Tensor) else args[0]
            args, kwargs = _up(args), {k: _up(v) for k, v in kwargs.items()}
        return super().call_method(target, args, kwargs)

    def call_module(self, target, args, kwargs):
        if self.float64:
            args, kwargs = _up(args), {k: _up(v) for k, v in kwargs.items()}
            mod = self.fetch_attr(target)
            if any(p.dtype in _FLOATS for p in mod.parameters()):
                mod = _float64_copy(mod)
            return mod(*args, **kwargs)
        return super().call_module(target, args, kwargs)


_ACTIVATION_CHECKPOINT = getattr(torch.ops.higher_order, "tag_activation_checkpoint", None)


def _checkpoint_as_the_program_ran_it(args: tuple, kwargs: dict) -> Any:
    """A ``torch.utils.checkpoint`` region (Dynamo's
    ``tag_activation_checkpoint``) run eagerly as the program ran it. The
    higher-order op's own eager implementation passes
    ``preserve_rng_state=False`` (the compiler replays the draws itself), so
    its recompute in the backward would draw dropout again and every gradient
    through the region would differ; the program's checkpoint (default
    ``preserve_rng_state=True``) recomputes with the same draws."""
    from torch.utils.checkpoint import checkpoint
    body, *inputs = args
    kwargs = {k: v for k, v in kwargs.items() if k not in ("use_reentrant", "preserve_rng_state")}
    if "_checkpoint_context_fn" in getattr(body, "meta", {}):
        kwargs["context_fn"] = body.meta["_checkpoint_context_fn"]

    def run(*a):
        return torch.fx.Interpreter(body).run(*a)

    return checkpoint(run, *inputs, use_reentrant=False, preserve_rng_state=True, **kwargs)


def _float64_copy(mod: torch.nn.Module) -> torch.nn.Module:
    import copy
    dup = copy.deepcopy(mod)
    return dup.to(torch.float64)


_functorch_wrapped = torch._C._functorch.is_functorch_wrapped_tensor

NAN, INF = 1, 2


def nonfinite_flags(value: Any) -> int:
    """NAN | INF bits of the values a tensor (or list of tensors) holds; one
    reduction when all is finite."""
    if isinstance(value, torch.Tensor):
        if value.is_floating_point() or value.is_complex():
            if type(value) is not torch.Tensor and type(value) is not torch.nn.Parameter:
                return 0
            if _functorch_wrapped(value) or value.is_meta:
                return 0  # a vmap/grad level's tensor: reading its values is not allowed
            value = value.detach()
            if bool(torch.isfinite(value).all()):
                return 0
            return (NAN if bool(torch.isnan(value).any()) else 0) | \
                (INF if bool(torch.isinf(value).any()) else 0)
        return 0
    if isinstance(value, (list, tuple)):
        bits = 0
        for v in value:
            bits |= nonfinite_flags(v)
        return bits
    return 0


def _has_nonfinite(value: Any) -> bool:
    return nonfinite_flags(value) != 0


def _storage_key(t: torch.Tensor) -> int | None:
    try:
        return t.untyped_storage().data_ptr() or None
    except Exception:  # subclasses, meta or sparse tensors: no storage to follow
        return None


def _copy(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (list, tuple)):  # a structseq (max's values, indices) as a tuple
        return (list if isinstance(value, list) else tuple)(_copy(v) for v in value)
    return value
