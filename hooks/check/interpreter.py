"""torch.fx Interpreters that run a captured graph eagerly, node by node: one
class per job of the eager-vs-compiled check.

    EagerRun                  runs the graph as the program ran it, timing each node
    ├── LeanPass              the check's first pass: each value freed after its
    │                         last use, per-node NaN/Inf flags and summaries kept
    ├── Float64Run            (+ InFloat64: floating inputs, parameters and casts
    │                         lifted to float64) no value kept: the gradients' judge
    └── AsRanValues           keeps each node's value as it was when the node ran;
        │                     ``overrides`` are used instead of running nodes
        ├── EagerReference    + which values are NaN/Inf, traced back to where
        │   │                 they first appear (`nonfinite_origin`)
        │   └── DrawWatchingReference  + which nodes drew random numbers
        └── Float64Judge      (+ InFloat64) every value in float64, kept as it ran

Each overrides torch.fx.Interpreter's points: ``run_node`` for what is kept
per node, ``placeholder``/``get_attr``/``call_*`` for how a node kind runs.
Every example below runs as written after::

    import torch, torch.fx
    gm = torch.fx.symbolic_trace(lambda x: torch.log(x) * 0)
"""

from __future__ import annotations

import time
from typing import Any, Callable

import torch
import torch.fx

from .subgraphs import COMPUTE_OPS, DrawWatch, flat, written_node

_FLOATS = (torch.float16, torch.bfloat16, torch.float32)
_CAST_METHODS = {"half", "bfloat16", "float", "double"}


class EagerRun(torch.fx.Interpreter):
    """Runs a graph eagerly as the program ran it (checkpointed regions
    included, see `_checkpoint_as_the_program_ran_it`), keeping each node's
    wall time in ``times_ns``, the node being run in ``current`` (after a
    failure: the node that failed) and the output in ``result``. Values are
    freed after their last use unless ``garbage_collect_values=False``.

        run = EagerRun(gm)
        run.run(torch.tensor([1.0, 2.0]))    # tensor([0., 0.])
        run.times_ns["log"]                   # nanoseconds
    """

    def __init__(self, gm: torch.fx.GraphModule, garbage_collect_values: bool = True) -> None:
        super().__init__(gm, garbage_collect_values=garbage_collect_values)
        self.times_ns: dict[str, int] = {}
        self.current: torch.fx.Node | None = None
        self.result: Any = None

    def run(self, *args, **kwargs) -> Any:
        self.result = super().run(*args, **kwargs)
        return self.result

    def run_node(self, n: torch.fx.Node) -> Any:
        self.current = n
        t0 = time.perf_counter_ns()
        out = super().run_node(n)
        self.times_ns[n.name] = time.perf_counter_ns() - t0
        return out

    def call_function(self, target, args, kwargs):
        if target is _ACTIVATION_CHECKPOINT:
            return _checkpoint_as_the_program_ran_it(args, kwargs)
        return super().call_function(target, args, kwargs)


class LeanPass(EagerRun):
    """The check's first pass: it needs the outputs, each node's NaN/Inf
    bits (``flags``) and, with ``summarize``, each compute node's
    ``summarize(value)`` in ``summaries`` (None results left out); values are
    freed after their last use, as torch.fx.Interpreter can. Every value is
    paid for only when something differs (then `EagerReference` runs it
    again). Only for graphs without in-place writes: `first_pass` chooses.

        lean = LeanPass(gm, summarize=lambda v: float(v.sum()))
        lean.run(torch.tensor([1.0, 0.0]))
        lean.flags        # {'x': 0, 'log': 2, 'mul': 1}: log(0) is -inf, -inf * 0 NaN
        lean.summaries    # {'log': -inf, 'mul': nan}
    """

    def __init__(self, gm: torch.fx.GraphModule, summarize: Callable[[Any], Any] | None = None
                 ) -> None:
        super().__init__(gm, garbage_collect_values=True)
        self.flags: dict[str, int] = {}
        self.summaries: dict[str, Any] | None = {} if summarize is not None else None
        self._summarize = summarize
        self.values: dict[str, Any] = {}  # none kept: readers fall back to ``summaries``

    def run_node(self, n: torch.fx.Node) -> Any:
        out = super().run_node(n)
        if n.op != "output":
            self.flags[n.name] = nonfinite_flags(out)
        if self.summaries is not None and n.op in COMPUTE_OPS:
            s = self._summarize(out)
            if s is not None:
                self.summaries[n.name] = s
        return out


class AsRanValues(EagerRun):
    """Keeps each node's value in ``values`` as it was when the node ran: when
    a later node writes in place into a tensor already recorded
    (``y[:, ::2].add_()`` after ``y = x * 2``), the recorded values sharing
    its storage are copied first (``as_ran`` names them), and a node that
    reads such a tensor after the write keeps what it read in ``seen`` (for
    the node alone, on its own inputs). ``x[i] = v`` records the written
    tensor as its value. Only graphs with in-place writes (``writes``) pay
    for this.

    ``overrides`` maps node names to values used instead of running the node
    (to replay, say, a compiled graph's random numbers); they are not timed.

        run = AsRanValues(gm, overrides={"log": torch.zeros(2)})
        run.run(torch.tensor([1.0, 0.0]))
        run.values["mul"]                     # tensor([0., 0.]): no -inf to multiply
    """

    def __init__(self, gm: torch.fx.GraphModule, overrides: dict[str, Any] | None = None
                 ) -> None:
        super().__init__(gm, garbage_collect_values=False)
        self.overrides = overrides or {}
        self.values: dict[str, Any] = {}
        # in-place writes: node -> the node whose tensor it writes
        self.writes = {n: w for n in gm.graph.nodes if (w := written_node(n)) is not None}
        self.as_ran: set[str] = set()                  # values copied before a later write
        self.seen: dict[str, dict[str, Any]] = {}      # node -> {input: value it read}
        self._order: dict[str, int] = {}
        self._live: dict[int, list[str]] = {}          # storage -> recorded names still live in it
        self._storage: dict[str, int] = {}             # name -> storage of its value
        self._writers: dict[int, list[str]] = {}       # storage -> writer nodes, in run order
        self._nwrites = 0
        self._read_copies: dict[str, tuple[int, Any]] = {}

    def run_node(self, n: torch.fx.Node) -> Any:
        self.current = n  # before the copies: a copy that fails fails in this node
        self._order[n.name] = len(self._order)
        written = self.writes.get(n) if self.writes else None
        if self.writes:
            self._before(n, written)
        if n.name in self.overrides:
            out = self.overrides[n.name]
        else:
            out = super().run_node(n)
        self.values[n.name] = out
        self._after(n, out, written)
        return out

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
        if self.writes and n.op != "output":
            for t in (out if isinstance(out, (list, tuple)) else (out,)):
                if isinstance(t, torch.Tensor):
                    key = _storage_key(t)
                    if key is not None:
                        live = self._live.setdefault(key, [])
                        if not live or live[-1] != n.name:
                            live.append(n.name)
                        self._storage.setdefault(n.name, key)


class EagerReference(AsRanValues):
    """The eager reference of the check: every value as it ran, and which
    hold NaN or Inf (``flags``), for `nonfinite_origin`. ``summaries``: those
    a `LeanPass` of the same call already made (node values read them
    rather than summarising again).

        ref = EagerReference(gm)
        ref.run(torch.tensor([1.0, 0.0]))
        ref.nonfinite_origin()    # ('mul', 'NaN', 'output 0', 'log'): -inf * 0, the -inf from log
    """

    def __init__(self, gm: torch.fx.GraphModule, overrides: dict[str, Any] | None = None,
                 summaries: dict[str, Any] | None = None) -> None:
        super().__init__(gm, overrides)
        self.flags: dict[str, int] = {}      # node -> NAN | INF bits of its value as it ran
        self.summaries = summaries

    def run_node(self, n: torch.fx.Node) -> Any:
        out = super().run_node(n)
        if n.op != "output":
            self.flags[n.name] = nonfinite_flags(self.values[n.name])
        return out

    def nonfinite_origin(self) -> tuple[str, str, str, str | None] | None:
        """Where the NaN/Inf that reach this graph's outputs (or inputs it
        writes, such as parameters) first appear: (node, "NaN" or "Inf", what
        it reaches, the node that made the infinities a NaN came from). Non-finite
        values that are consumed on the way (``masked_fill(-inf)`` then
        softmax, ``where``) are not followed; values that arrive non-finite in
        the graph's inputs are not this graph's. None when nothing reaches."""
        if self.result is None:
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


class DrawWatchingReference(EagerReference):
    """`EagerReference` that also notes which nodes drew random numbers
    (``drew``; `subgraphs.DrawWatch`): their differences are the random
    streams', not miscompiles. Run once per graph (a dispatch mode per op).

        ref = DrawWatchingReference(torch.fx.symbolic_trace(lambda x: torch.rand_like(x) + x))
        ref.run(torch.zeros(2))
        ref.drew                  # {'rand_like'}
    """

    def __init__(self, gm: torch.fx.GraphModule, summaries: dict[str, Any] | None = None) -> None:
        super().__init__(gm, summaries=summaries)
        self.drew: set[str] = set()

    def _watched(self, call: Callable, target, args, kwargs) -> Any:
        with DrawWatch() as watch:
            out = call(target, args, kwargs)
        if watch.drew:
            self.drew.add(self.current.name)
        return out

    def call_function(self, target, args, kwargs):
        return self._watched(super().call_function, target, args, kwargs)

    def call_method(self, target, args, kwargs):
        return self._watched(super().call_method, target, args, kwargs)

    def call_module(self, target, args, kwargs):
        return self._watched(super().call_module, target, args, kwargs)


class InFloat64:
    """Runs a graph in float64, the way PyTorch's own accuracy checks build
    their reference: floating inputs and parameters, dtype arguments, casts
    (``.half()``, ``.float()``) and modules' parameters lifted to float64.
    A mixin for an `EagerRun`: `Float64Judge` keeps every value,
    `Float64Run` none (gradients only)."""

    def placeholder(self, target, args, kwargs):
        return _up(super().placeholder(target, args, kwargs))

    def get_attr(self, target, args, kwargs):
        return _up(super().get_attr(target, args, kwargs))

    def call_function(self, target, args, kwargs):
        return super().call_function(target, _up(args), {k: _up(v) for k, v in kwargs.items()})

    def call_method(self, target, args, kwargs):
        if target in _CAST_METHODS:
            return _up(args[0]) if isinstance(args[0], torch.Tensor) else args[0]
        return super().call_method(target, _up(args), {k: _up(v) for k, v in kwargs.items()})

    def call_module(self, target, args, kwargs):
        args, kwargs = _up(args), {k: _up(v) for k, v in kwargs.items()}
        mod = self.fetch_attr(target)
        if any(p.dtype in _FLOATS for p in mod.parameters()):
            mod = _float64_copy(mod)
        return mod(*args, **kwargs)


class Float64Judge(InFloat64, AsRanValues):
    """The graph in float64 (`InFloat64`), every value kept as it ran (for
    localisation). Overrides are used as given (lift them first).

        judge = Float64Judge(torch.fx.symbolic_trace(lambda x: x.half() * 3))
        judge.run(torch.tensor([0.1]))        # tensor([0.3000], dtype=torch.float64)
    """


class Float64Run(InFloat64, EagerRun):
    """The graph in float64 (`InFloat64`), each value freed after its last
    use: the judge of gradients, whose float64 forward keeps only what
    autograd saves.

        Float64Run(torch.fx.symbolic_trace(lambda x: x * 3)).run(torch.tensor([0.1]))
    """


def first_pass(gm: torch.fx.GraphModule, summarize: Callable[[Any], Any] | None = None
               ) -> LeanPass | EagerReference:
    """The check's first run of ``gm``: a `LeanPass`, unless the graph writes
    in place (its values as they ran need every value kept: an
    `EagerReference`, whose ``summaries`` stay None)."""
    if any(written_node(n) is not None for n in gm.graph.nodes):
        return EagerReference(gm)
    return LeanPass(gm, summarize)


def _up(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.dtype in _FLOATS:
        return value.to(torch.float64)
    if isinstance(value, torch.dtype) and value in _FLOATS:
        return torch.float64
    if isinstance(value, (list, tuple)):
        return type(value)(_up(v) for v in value)
    return value


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
