"""Fault-injecting torch.compile backends, for testing divergence localisation.

Every backend here is a real ``torch.compile`` backend ``fn(gm, example_inputs)
-> callable``.  It changes EXACTLY ONE node of the FX graph it receives and
hands the changed graph to a real inner backend (``"inductor"`` by default,
``"aot_eager"`` or ``"eager"``), so a debugger that compares a compiled graph
with eager node by node should name that node (its ``stack_trace`` line) as the
first place where compiled and eager diverge.

Forward faults (``make_faulty_backend``) work on the torch-level graph Dynamo
hands to a backend: ``call_function`` nodes with targets such as ``torch.relu``,
``torch.nn.functional.relu``, ``operator.add``, ``torch._C._nn.linear``,
``torch._C._nn.gelu`` and ``call_method`` nodes such as ``"sin"``/``"sigmoid"``.

Usage::

    import sys; sys.path.insert(0, "tests/support")
    import torch
    from faulty_backends import make_faulty_backend, by_target, by_line

    def f(x):
        y = torch.relu(x) + 1      # <- line 7 of this file, say
        return torch.sigmoid(y)

    be = make_faulty_backend(by_target(torch.sigmoid), "swap_op", inner="aot_eager")
    out = torch.compile(f, backend=be)(torch.randn(8))
    # out differs from f(x): sigmoid was compiled as tanh
    be.mutated   # [("sigmoid", "torch.sigmoid", "/path/file.py:8")]

    be = make_faulty_backend(by_line(7), "scale")   # output of the first op on line 7 * 1.01

Selecting the node
------------------
``select(node) -> bool`` is tried on the call_function / call_method nodes of
each graph in graph order and the FIRST match is mutated (placeholders,
get_attr and output nodes are never offered).  The same backend object is
called once per graph it compiles -- a whole Dynamo graph, or a prefix / a
single node of it that a debugger cuts out and compiles again -- and it always
mutates the selected node when one is present; when no node matches it
compiles the graph unchanged (it never raises for that).

For the fault to sit in exactly the sub-graphs that contain "the" selected
node, the selector must pick the same node in every graph.  Stable selectors:

* ``by_line(line, file=None)``: the last user frame of ``node.meta["stack_trace"]``
  is ``file:line`` (``file`` matched as a path suffix; any file if None).
  Several ops on one line: the first in graph order is mutated, combine with
  ``by_target`` via ``all_of`` to pick another.
* ``by_name("h_1")``: the FX node name (kept by ``Graph.node_copy`` when a
  debugger copies nodes into a sub-graph).
* ``by_target(torch.sigmoid, "sigmoid")``: a call_function target or a
  call_method name.  Careful: in a single-node sub-graph holding a LATER node
  with the same target this would select that node too.  Hence ``sticky``
  (``make_faulty_backend``): after the first graph it mutated, the backend only
  mutates nodes with the same identity as that first node:
  ``sticky=True`` (default): same target, stack-trace location AND node name
  -- exact for sub-graphs built with ``Graph.node_copy`` (names and meta kept),
  and tells apart the ops of a loop body (same line, different names);
  ``sticky="location"``: same target and location (use when the debugger
  renames nodes; all iterations of a loop body then match);
  ``sticky=False``: ``select`` alone decides in every graph.
  The FIRST graph the backend mutates fixes the identity, so let it compile
  the whole graph first (the user program does); ``backend.reset()`` forgets it.

Mutations (``mutate=``)
-----------------------
``"scale"``     output * (1 + 1e-2): a ``torch.mul`` node inserted after the node,
                every user of the node redirected to it.  ``factor=`` changes it.
``"offset"``    output + 1e-3 (``torch.add`` inserted the same way; ``offset=``).
``"swap_op"``   replace the target using ``SWAP_MAP`` (relu -> gelu, gelu -> relu,
                sigmoid -> tanh, tanh -> sigmoid, add -> sub, sub -> add,
                mul -> div, sin -> cos, exp -> expm1, softmax -> log_softmax, ...);
                ``swap_map=`` overrides.  Raises if the selected node's target
                has no entry (a configuration error, not a partial graph).
``"zero_arg"``  replace one tensor argument by ``torch.zeros_like(arg)``;
                ``arg=`` is a positional index or keyword name (default 1).
``"drop_bias"`` ``zero_arg`` on the bias: linear/conv*: arg 2 or kw "bias",
                layer_norm: arg 3 / "bias", batch_norm: arg 4 / "bias",
                group_norm: arg 3 / "bias".

Every mutation appends ``(node name, target str, "file:line")`` to
``backend.mutated``; ``backend.graphs`` counts the graphs it compiled and
``backend.skipped`` the graphs that had no selected node.

Inserted nodes copy the mutated node's meta (``stack_trace``,
``nn_module_stack``, ``example_value``...), so a debugger that maps nodes to
source lines attributes them to the same line.  The backend works on a copy of
the graph: the ``gm`` it is given is left untouched, so a caller that runs
``gm`` itself for reference values after compiling gets true eager values.

Backward fault: ``make_backward_faulty_backend(select=..., mutate="scale")``
compiles the forward unchanged and mutates one node of the AOTAutograd
BACKWARD graph (aten level).  Its default selector picks the first
``aten.mm.default`` in the backward graph (``by_aten(torch.ops.aten.mm.default)``);
``by_aten(op, nth=k)`` picks the k-th.  With ``inner="inductor"`` it goes
through ``compile_fx`` with an ``inner_compile`` wrapper that mutates only
when called with ``is_backward=True`` (AOTAutograd's cache is switched off
for that compile so a cached unmutated backward cannot be loaded); with
``inner="aot_eager"`` / ``"eager"`` it is ``aot_autograd`` with a no-op forward
compiler and a mutating no-op backward compiler.  Forward outputs are bitwise
the inner backend's; only gradients flowing through the mutated node change.

``make_crashing_on_partial_backend(min_ops=8)`` (and the ready-made
``crashing_on_partial_backend``) compiles graphs with at least ``min_ops``
call_function/call_method/call_module nodes normally and raises
``PartialGraphError`` on smaller ones, like a backend written for whole graphs.

Self-test: ``self_test([...inner backends])``, run by tests/capture/test_faulty_backends.py.
"""

from __future__ import annotations

import copy
import operator
import os
import re
from typing import Any, Callable

import torch
import torch.fx
import torch.nn.functional as F

__all__ = [
    "SWAP_MAP", "MUTATIONS", "PartialGraphError",
    "by_target", "by_line", "by_name", "by_aten", "all_of", "user_location",
    "make_faulty_backend", "make_backward_faulty_backend",
    "make_crashing_on_partial_backend", "crashing_on_partial_backend",
    "count_op_nodes",
]

_OP_KINDS = ("call_function", "call_method", "call_module")
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep

# Replacement targets for "swap_op".  Keys are call_function targets or
# call_method names; every replacement has the same output shape and dtype.
SWAP_MAP: dict[Any, Any] = {
    torch.relu: F.gelu, F.relu: F.gelu, "relu": F.gelu, torch._C._nn.gelu: F.relu,
    F.gelu: F.relu, "gelu": F.relu,
    torch.sigmoid: torch.tanh, "sigmoid": "tanh", F.sigmoid: torch.tanh,
    torch.tanh: torch.sigmoid, "tanh": "sigmoid", F.tanh: torch.sigmoid,
    F.silu: F.gelu, F.softplus: F.relu,
    operator.add: operator.sub, operator.iadd: operator.sub, torch.add: torch.sub, "add": "sub",
    operator.sub: operator.add, torch.sub: torch.add, "sub": "add",
    operator.mul: operator.truediv, torch.mul: torch.div, "mul": "div",
    operator.truediv: operator.mul, torch.div: torch.mul, "div": "mul",
    torch.sin: torch.cos, "sin": "cos", torch.cos: torch.sin, "cos": "sin",
    torch.exp: torch.expm1, "exp": "expm1",
    torch.softmax: torch.log_softmax, F.softmax: F.log_softmax, "softmax": "log_softmax",
    torch.mean: torch.sum, "mean": "sum", torch.sum: torch.mean, "sum": "mean",
    torch.max_pool2d: F.avg_pool2d, F.max_pool2d: F.avg_pool2d,
    F.avg_pool2d: F.max_pool2d, torch._C._nn.avg_pool2d: F.max_pool2d,
    # aten level (backward graphs)
    torch.ops.aten.sigmoid.default: torch.ops.aten.tanh.default,
    torch.ops.aten.tanh.default: torch.ops.aten.sigmoid.default,
    torch.ops.aten.add.Tensor: torch.ops.aten.sub.Tensor,
    torch.ops.aten.sub.Tensor: torch.ops.aten.add.Tensor,
    torch.ops.aten.mul.Tensor: torch.ops.aten.div.Tensor,
    torch.ops.aten.sin.default: torch.ops.aten.cos.default,
    torch.ops.aten.cos.default: torch.ops.aten.sin.default,
}

# Where the bias sits for "drop_bias": (positional index, keyword name).
_BIAS_ARG: dict[Any, tuple[int, str]] = {
    torch._C._nn.linear: (2, "bias"), F.linear: (2, "bias"),
    torch.conv1d: (2, "bias"), torch.conv2d: (2, "bias"), torch.conv3d: (2, "bias"),
    F.conv1d: (2, "bias"), F.conv2d: (2, "bias"), F.conv3d: (2, "bias"),
    F.layer_norm: (3, "bias"), torch.layer_norm: (3, "bias"),
    F.batch_norm: (4, "bias"), torch.batch_norm: (4, "bias"),
    F.group_norm: (3, "bias"), torch.group_norm: (3, "bias"),
    torch.addmm: (0, "input"),
}

MUTATIONS = ("scale", "offset", "swap_op", "zero_arg", "drop_bias")


class PartialGraphError(RuntimeError):
    """Raised by crashing_on_partial_backend for graphs that are too small."""


# --------------------------------------------------------------------------
# node description and selectors


def target_str(node: torch.fx.Node) -> str:
    """`torch.relu`, `operator.add`, `torch._C._nn.linear`, `.sin` (method), `aten.mm.default`."""
    t = node.target
    if node.op == "call_method":
        return f".{t}"
    if isinstance(t, str):
        return t
    if isinstance(t, torch._ops.OpOverload):
        return str(t)
    name = getattr(t, "__name__", None) or repr(t)
    for prefix, space in (("torch", torch), ("torch._C._nn", torch._C._nn), ("torch.nn.functional", F),
                          ("operator", operator)):
        if getattr(space, name, None) is t:
            return f"{prefix}.{name}"
    mod = getattr(t, "__module__", None)
    return f"{mod}.{getattr(t, '__qualname__', name)}" if mod else name


_FRAME_RE = re.compile(r'File "([^"]+)", line (\d+)')


def user_location(node: torch.fx.Node) -> str | None:
    """'file:line' of the last frame of node.meta['stack_trace'] outside torch itself."""
    trace = node.meta.get("stack_trace") or ""
    frames = _FRAME_RE.findall(trace)
    user = [f for f in frames if not os.path.abspath(f[0]).startswith(_TORCH_DIR)]
    pick = (user or frames or [None])[-1]
    return f"{pick[0]}:{pick[1]}" if pick else None


def _fname(t) -> str:
    return getattr(t, "__name__", None) or repr(t)


def by_target(*targets) -> Callable[[torch.fx.Node], bool]:
    """Select nodes whose call_function target is one of `targets` (identity) or whose
    call_method name is one of the given strings."""
    funcs = [t for t in targets if not isinstance(t, str)]
    methods = {t for t in targets if isinstance(t, str)}

    def select(node):
        if node.op == "call_method":
            return node.target in methods
        return any(node.target is t for t in funcs)

    select.__doc__ = "by_target(" + ", ".join(t if isinstance(t, str) else _fname(t) for t in targets) + ")"
    return select


def by_line(line: int, file: str | None = None) -> Callable[[torch.fx.Node], bool]:
    """Select nodes whose last user stack frame is `file:line` (file: path suffix; None = any)."""

    def select(node):
        loc = user_location(node)
        if loc is None:
            return False
        f, _, ln = loc.rpartition(":")
        return int(ln) == line and (file is None or f.endswith(file))

    select.__doc__ = f"by_line({line}, {file!r})"
    return select


def by_name(name: str) -> Callable[[torch.fx.Node], bool]:
    def select(node):
        return node.name == name

    select.__doc__ = f"by_name({name!r})"
    return select


def all_of(*selectors) -> Callable[[torch.fx.Node], bool]:
    def select(node):
        return all(s(node) for s in selectors)

    return select


def by_aten(op, nth: int = 0) -> Callable[[torch.fx.Node], bool]:
    """For backward graphs: the `nth` (0-based) call_function node with target `op` in
    graph order.  Stateful per graph: it counts matches as it is offered nodes in order,
    and is reset by the backend before each graph."""
    state = {"seen": 0}

    def select(node):
        if node.op == "call_function" and node.target == op:
            hit = state["seen"] == nth
            state["seen"] += 1
            return hit
        return False

    select.reset = lambda: state.update(seen=0)
    select.__doc__ = f"by_aten({op}, nth={nth})"
    return select


def count_op_nodes(gm: torch.fx.GraphModule) -> int:
    return sum(1 for n in gm.graph.nodes if n.op in _OP_KINDS)


# --------------------------------------------------------------------------
# inner backends


def _inner_backend(inner):
    if callable(inner):
        return inner
    if inner == "inductor":
        from torch._inductor.compile_fx import compile_fx

        return compile_fx
    from torch._dynamo.backends.registry import lookup_backend

    return lookup_backend(inner)


# --------------------------------------------------------------------------
# the single-node mutations (in place, on a graph the backend owns)


def _insert_after(graph: torch.fx.Graph, node: torch.fx.Node, fn, const) -> torch.fx.Node:
    users = list(node.users)
    with graph.inserting_after(node):
        new = graph.call_function(fn, (node, const))
    new.meta = copy.copy(node.meta)
    for user in users:
        user.replace_input_with(node, new)
    return new


def _zero_arg(graph: torch.fx.Graph, node: torch.fx.Node, arg) -> None:
    if isinstance(arg, int):
        if arg >= len(node.args):
            raise ValueError(f"zero_arg: {node.format_node()} has no positional arg {arg}")
        old = node.args[arg]
    else:
        if arg not in node.kwargs:
            raise ValueError(f"zero_arg: {node.format_node()} has no keyword arg {arg!r}")
        old = node.kwargs[arg]
    if not isinstance(old, torch.fx.Node):
        raise ValueError(f"zero_arg: argument {arg!r} of {node.format_node()} is not a graph value: {old!r}")
    with graph.inserting_before(node):
        aten = isinstance(node.target, torch._ops.OpOverload)
        zeros = graph.call_function(torch.ops.aten.zeros_like.default if aten else torch.zeros_like, (old,))
    zeros.meta = copy.copy(node.meta)
    for key in ("example_value", "val", "tensor_meta"):
        if key in old.meta:
            zeros.meta[key] = old.meta[key]
    if isinstance(arg, int):
        args = list(node.args)
        args[arg] = zeros
        node.args = tuple(args)
    else:
        node.kwargs = {**node.kwargs, arg: zeros}


def _bias_arg(node: torch.fx.Node):
    for key, spec in _BIAS_ARG.items():
        if node.target is key:
            pos, kw = spec
            if kw in node.kwargs:
                return kw
            if pos < len(node.args):
                return pos
            raise ValueError(f"drop_bias: {node.format_node()} is called without a bias")
    raise ValueError(f"drop_bias: no bias position known for {target_str(node)}; use zero_arg with arg=")


def _swap(node: torch.fx.Node, swap_map) -> None:
    key = node.target
    for k, v in swap_map.items():
        if (node.op == "call_method" and isinstance(k, str) and k == key) or \
           (node.op == "call_function" and not isinstance(k, str) and k is key):
            new = v
            break
    else:
        raise ValueError(f"swap_op: no replacement for {target_str(node)} in the swap map")
    if isinstance(new, str):
        node.op, node.target = "call_method", new
    else:
        node.op, node.target = "call_function", new


def apply_mutation(graph: torch.fx.Graph, node: torch.fx.Node, mutate: str, *, factor=1 + 1e-2,
                   offset=1e-3, arg=1, swap_map=None) -> None:
    aten = isinstance(node.target, torch._ops.OpOverload)  # an AOTAutograd (aten) graph
    if mutate == "scale":
        _insert_after(graph, node, torch.ops.aten.mul.Tensor if aten else torch.mul, factor)
    elif mutate == "offset":
        _insert_after(graph, node, torch.ops.aten.add.Tensor if aten else torch.add, offset)
    elif mutate == "swap_op":
        _swap(node, SWAP_MAP if swap_map is None else swap_map)
    elif mutate == "zero_arg":
        _zero_arg(graph, node, arg)
    elif mutate == "drop_bias":
        _zero_arg(graph, node, _bias_arg(node))
    else:
        raise ValueError(f"unknown mutation {mutate!r}; one of {MUTATIONS}")


# --------------------------------------------------------------------------
# forward fault backend


class FaultyBackend:
    """See make_faulty_backend.  Attributes: mutated, graphs, skipped, select, mutate, inner."""

    def __init__(self, select, mutate, inner="inductor", *, sticky=True, **options):
        if mutate not in MUTATIONS:
            raise ValueError(f"unknown mutation {mutate!r}; one of {MUTATIONS}")
        self.select, self.mutate, self.inner = select, mutate, inner
        self.sticky, self.options = sticky, options
        self.mutated: list[tuple[str, str, str | None]] = []
        self.graphs = 0
        self.skipped = 0
        self._identity = None  # identity of the first mutated node, when sticky
        self.__name__ = f"faulty_{mutate}"

    def reset(self):
        """Forget the sticky identity and the records (before reusing the backend on a new model)."""
        self._identity = None
        self.mutated.clear()
        self.graphs = self.skipped = 0

    def _key(self, node: torch.fx.Node):
        if self.sticky == "location":
            return (node.op, node.target, user_location(node))
        return (node.op, node.target, user_location(node), node.name)

    def _pick(self, graph: torch.fx.Graph):
        if hasattr(self.select, "reset"):
            self.select.reset()
        for node in graph.nodes:
            if node.op not in _OP_KINDS or not self.select(node):
                continue
            if self.sticky and self._identity is not None and self._key(node) != self._identity:
                continue
            return node
        return None

    def __call__(self, gm: torch.fx.GraphModule, example_inputs):
        self.graphs += 1
        graph = copy.deepcopy(gm.graph)
        node = self._pick(graph)
        if node is None:
            self.skipped += 1
            target = gm
        else:
            record = (node.name, target_str(node), user_location(node))
            if self.sticky and self._identity is None:
                self._identity = self._key(node)
            apply_mutation(graph, node, self.mutate, **self.options)
            graph.lint()
            target = torch.fx.GraphModule(gm, graph)
            target.meta.update(gm.meta)
            self.mutated.append(record)
        return _inner_backend(self.inner)(target, example_inputs)

    def __repr__(self):
        return f"<FaultyBackend {self.mutate} select={getattr(self.select, '__doc__', None)} inner={self.inner}>"


def make_faulty_backend(select, mutate="scale", inner="inductor", *, sticky=True, factor=1 + 1e-2,
                        offset=1e-3, arg=1, swap_map=None) -> FaultyBackend:
    """A torch.compile backend that mutates the first node `select` accepts, then compiles
    with `inner` ("inductor", "aot_eager", "eager", or a backend callable).

    `mutate`: "scale" (output*factor), "offset" (output+offset), "swap_op" (target per
    swap_map/SWAP_MAP), "zero_arg" (args[arg] or kwargs[arg] -> zeros_like), "drop_bias".
    `sticky`: after the first mutation, mutate only nodes with the same target,
    stack-trace location and (unless sticky="location") node name: keeps the fault on
    one node across the sub-graphs a debugger cuts out.  False: `select` alone."""
    return FaultyBackend(select, mutate, inner, sticky=sticky, factor=factor, offset=offset,
                         arg=arg, swap_map=swap_map)


# --------------------------------------------------------------------------
# backward fault backend


class BackwardFaultyBackend:
    """See make_backward_faulty_backend."""

    def __init__(self, select, mutate, inner, options):
        self.select, self.mutate, self.inner, self.options = select, mutate, inner, options
        self.mutated: list[tuple[str, str, str | None]] = []
        self.backward_graphs = 0
        self.skipped = 0
        self.__name__ = f"backward_faulty_{mutate}"

    def _mutate_backward(self, gm: torch.fx.GraphModule) -> None:
        """In place: AOTAutograd hands the backward graph to the compiler it owns."""
        self.backward_graphs += 1
        if hasattr(self.select, "reset"):
            self.select.reset()
        for node in gm.graph.nodes:
            if node.op == "call_function" and self.select(node):
                self.mutated.append((node.name, target_str(node), user_location(node)))
                apply_mutation(gm.graph, node, self.mutate, **self.options)
                gm.graph.lint()
                gm.recompile()
                return
        self.skipped += 1

    def __call__(self, gm: torch.fx.GraphModule, example_inputs):
        if self.inner == "inductor":
            from torch._inductor.compile_fx import compile_fx, compile_fx_inner

            def inner_compile(g, inputs, *args, **kwargs):
                if kwargs.get("is_backward"):
                    self._mutate_backward(g)
                return compile_fx_inner(g, inputs, *args, **kwargs)

            with torch._functorch.config.patch(enable_autograd_cache=False):
                return compile_fx(gm, example_inputs, inner_compile=inner_compile)

        if self.inner not in ("aot_eager", "eager"):
            raise ValueError(f"backward fault: inner must be inductor, aot_eager or eager, not {self.inner!r}")
        from functorch.compile import make_boxed_func
        from torch._dynamo.backends.common import aot_autograd

        def fw(g, inputs):
            return make_boxed_func(g.forward)

        def bw(g, inputs):
            self._mutate_backward(g)
            return make_boxed_func(g.forward)

        with torch._functorch.config.patch(enable_autograd_cache=False):
            return aot_autograd(fw_compiler=fw, bw_compiler=bw)(gm, example_inputs)


def make_backward_faulty_backend(select=None, mutate="scale", inner="inductor", *, factor=1 + 1e-2,
                                 offset=1e-3, arg=1, swap_map=None) -> BackwardFaultyBackend:
    """Forward compiled unchanged; the first backward (aten) node `select` accepts is mutated
    (default: the first aten.mm.default of the backward graph, scaled by 1.01).  Backward
    node meta carries the forward op's stack_trace, so `mutated` names the forward line whose
    gradient is corrupted.  Use aten ops in swap_map for "swap_op"."""
    if select is None:
        select = by_aten(torch.ops.aten.mm.default)
    return BackwardFaultyBackend(select, mutate, inner, dict(factor=factor, offset=offset, arg=arg,
                                                             swap_map=swap_map))


# --------------------------------------------------------------------------
# a backend that only works on whole graphs


def make_crashing_on_partial_backend(min_ops: int = 8, inner="inductor"):
    """Compiles graphs with >= min_ops op nodes with `inner`; raises PartialGraphError otherwise.
    `backend.compiled` / `backend.refused` count the two cases."""

    def backend(gm: torch.fx.GraphModule, example_inputs):
        n = count_op_nodes(gm)
        if n < min_ops:
            backend.refused += 1
            raise PartialGraphError(f"crashing_on_partial_backend: graph has {n} op nodes, "
                                    f"this backend needs at least {min_ops}")
        backend.compiled += 1
        return _inner_backend(inner)(gm, example_inputs)

    backend.compiled = 0
    backend.refused = 0
    backend.min_ops = min_ops
    backend.__name__ = f"crashing_on_partial_{min_ops}"
    return backend


crashing_on_partial_backend = make_crashing_on_partial_backend(8, "aot_eager")


# --------------------------------------------------------------------------
# self-test


def self_test(inners):
    import time

    torch.manual_seed(0)

    def f(x, w, b):
        h = torch._C._nn.linear(x, w, b)   # linear
        h = torch.relu(h) + x.sin()         # relu, sin, add
        return torch.sigmoid(h) * 2.0       # sigmoid, mul

    def g(x):  # no linear, relu, sigmoid, add or sin: the selected node is absent
        return x.cos() * 3.0

    def g_exact(x):  # absent too, and bitwise exact under every backend
        return (x.abs() * 2.0).neg()

    x, w, b = torch.randn(16, 8), torch.randn(8, 8), torch.randn(8)
    gx = torch.randn(5, 3)
    ref = f(x, w, b)
    cases = [
        ("scale", by_target(torch.relu), {}),
        ("offset", by_target(torch._C._nn.linear), {}),
        ("swap_op", by_target(torch.sigmoid), {}),
        ("swap_op", by_target(operator.add), {}),
        ("swap_op", by_target("sin"), {}),
        ("zero_arg", by_target(torch._C._nn.linear), {"arg": 1}),
        ("drop_bias", by_target(torch._C._nn.linear), {}),
    ]
    failures = []
    for inner in inners:
        t0 = time.perf_counter()
        torch._dynamo.reset()
        g_plain = torch.compile(g, backend=inner)(gx)  # what the inner backend itself gives
        for mutate, select, opts in cases:
            torch._dynamo.reset()
            be = make_faulty_backend(select, mutate, inner, **opts)
            out = torch.compile(f, backend=be)(x, w, b)
            diff = (out - ref).abs().max().item()
            same_inner = torch.equal(torch.compile(g, backend=be)(gx), g_plain)
            same_eager = torch.equal(torch.compile(g_exact, backend=be)(gx), g_exact(gx))
            ok = diff > 1e-5 and same_inner and same_eager and len(be.mutated) == 1 and be.skipped == 2
            print(f"  {inner:9} {mutate:9} {select.__doc__:18} |compiled-eager|={diff:.3e} "
                  f"absent: ==inner {same_inner} ==eager {same_eager}  "
                  f"mutated={be.mutated[0][:2] if be.mutated else None} {'ok' if ok else 'FAIL'}")
            if not ok:
                failures.append((inner, mutate, select.__doc__))

        # sticky: a single-node graph holding a later relu is not mutated
        torch._dynamo.reset()
        be = make_faulty_backend(by_target(torch.relu), "scale", inner)

        def two(x):
            return torch.relu(x) * 2 + torch.relu(x - 1)  # both relus on one line
        torch.compile(two, backend=be)(x)

        def single(x):
            return torch.relu(x - 1)   # other line
        y = torch.compile(single, backend=be)(x)
        ok = torch.equal(y, single(x)) and len(be.mutated) == 1 and be.skipped == 1
        print(f"  {inner:9} sticky: relu on another line left alone: {'ok' if ok else 'FAIL'}")
        if not ok:
            failures.append((inner, "sticky"))

        # sub-graphs as a debugger cuts them (Graph.node_copy: names and meta kept):
        # the fault is in exactly the prefixes / single-node graphs holding the node
        failures += _subgraph_check(inner)

        # backward fault: forward identical, one gradient changed
        torch._dynamo.reset()

        def loss_fn(x, w1, w2):
            return (torch.tanh(x @ w1) @ w2).square().sum()
        w1 = torch.randn(8, 8, requires_grad=True)
        w2 = torch.randn(8, 4, requires_grad=True)
        eager_loss = loss_fn(x, w1, w2)
        eg = torch.autograd.grad(eager_loss, (w1, w2))
        bbe = make_backward_faulty_backend(inner=inner)
        closs = torch.compile(loss_fn, backend=bbe)(x, w1, w2)
        cg = torch.autograd.grad(closs, (w1, w2))
        fwd_diff = (closs - eager_loss).abs().item()
        gdiffs = [(a - c).abs().max().item() / a.abs().max().item() for a, c in zip(eg, cg)]
        ok = fwd_diff < 1e-3 * abs(eager_loss.item()) and max(gdiffs) > 5e-3 and len(bbe.mutated) == 1
        print(f"  {inner:9} backward scale first aten.mm: fwd diff={fwd_diff:.2e} grad rel diffs="
              f"{[f'{d:.2e}' for d in gdiffs]} mutated={bbe.mutated} {'ok' if ok else 'FAIL'}")
        if not ok:
            failures.append((inner, "backward"))

        # crashing on partial graphs
        torch._dynamo.reset()
        cbe = make_crashing_on_partial_backend(4, inner)
        torch.compile(f, backend=cbe)(x, w, b)
        try:
            torch.compile(g, backend=cbe, fullgraph=True)(gx)
            raised = False
        except Exception as e:  # Dynamo wraps backend errors
            raised = "PartialGraphError" in repr(e) or isinstance(e.__cause__, PartialGraphError)
        ok = raised and cbe.compiled == 1 and cbe.refused == 1
        print(f"  {inner:9} crashing_on_partial: full ok, small raises: {'ok' if ok else 'FAIL'}")
        if not ok:
            failures.append((inner, "crashing"))
        print(f"  {inner}: {time.perf_counter() - t0:.1f}s")
    return failures


def _subgraph_check(inner):
    """A 3-block loop (the residual adds share one source line); select the 2nd add."""

    class Loop(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fcs = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(3))

        def forward(self, x):
            for fc in self.fcs:
                x = x + torch.relu(fc(x))
            return x

    torch.manual_seed(0)
    model, x = Loop().eval(), torch.randn(4, 8)
    captured = []

    def capture(gm, example_inputs):
        captured.append((gm, example_inputs))
        return gm.forward

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(model, backend=capture)(x)
    gm, inputs = captured[0]
    adds = [n.name for n in gm.graph.nodes if n.target is operator.add]
    be = make_faulty_backend(by_name(adds[1]), "scale", inner)
    with torch.no_grad():
        be(gm, inputs)(*inputs)  # the whole graph first: fixes the sticky identity
        env = {}

        class Record(torch.fx.Interpreter):
            def run_node(self, n):
                env[n] = super().run_node(n)
                return env[n]

        Record(gm).run(*inputs)
        nodes = list(gm.graph.nodes)
        target_index = next(i for i, n in enumerate(nodes) if n.name == adds[1])
        bad = []
        for i, node in enumerate(nodes):
            if node.op != "call_function":
                continue
            for kind in ("prefix", "single"):
                g = torch.fx.Graph()
                vmap = {}
                if kind == "prefix":
                    for n in nodes[: i + 1]:
                        vmap[n] = g.node_copy(n, lambda a: vmap[a])
                    sub_inputs = [inputs[j] for j, n in enumerate(nodes[: i + 1]) if n.op == "placeholder"]
                else:
                    sub_inputs = []
                    for a in node.all_input_nodes:
                        vmap[a] = g.placeholder(a.name)
                        sub_inputs.append(env[a])
                    vmap[node] = g.node_copy(node, lambda a: vmap[a])
                g.output((vmap[node],))
                sub = torch.fx.GraphModule(gm, g)
                out = be(sub, sub_inputs)(*sub_inputs)
                out = out[0] if isinstance(out, (tuple, list)) else out
                differs = not torch.allclose(out, env[node], rtol=1e-4, atol=1e-5)
                should = (i >= target_index) if kind == "prefix" else (i == target_index)
                if differs != should:
                    bad.append((kind, node.name, differs))
    ok = not bad and all(m[0] == adds[1] for m in be.mutated)
    print(f"  {inner:9} sub-graphs: fault in exactly the {len(be.mutated) - 1} sub-graphs holding "
          f"{adds[1]} (adds {adds}): {'ok' if ok else f'FAIL {bad}'}")
    return [] if ok else [(inner, "subgraphs", bad)]


class Dropped(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x):
        h = self.fc(x)
        h = self.drop(h)  # MARK dropout
        return torch.tanh(h) * 2  # MARK tanh


def own_random_stream(swap: bool):
    """A backend: the same graph, drawing from a shifted random stream (as
    inductor's own RNG does); with ``swap`` tanh computed as sigmoid too."""
    def backend(gm, example_inputs):
        from torch._dynamo.backends.registry import lookup_backend
        if swap:
            for n in gm.graph.nodes:
                if n.target is torch.tanh:
                    n.target = torch.sigmoid
            gm.recompile()
        compiled = lookup_backend("aot_eager")(gm, example_inputs)

        def run(*args):
            torch.rand(1)
            return compiled(*args)
        return run
    return backend
