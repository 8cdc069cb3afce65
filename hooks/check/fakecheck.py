"""Custom ops' fake implementations checked against their real ones.

A custom op (``torch.library.custom_op`` or ``torch.library.define``) with a
Python fake implementation (``register_fake``) tells the compiler what shape,
dtype and strides its output has. When the fake is wrong, the error shows up
later, in an op the user did not write wrong (a matmul that sees the fake's
shape at compile time, a view that no longer fits at run time): far from
the ``register_fake`` that caused it.

At such a failure, for each custom op whose output feeds the failing node,
this runs the op's real implementation and its fake implementation (under a
fresh ``FakeTensorMode`` made from the real tensors) on the real inputs, and
compares outputs' shapes, dtypes and strides.

Real inputs come from

- at compile time, the graph Dynamo was building: its placeholders' sources
  (``OutputGraph.tracked_fakes``) read from the compiled frame's locals and
  globals, then the graph's nodes up to the custom op run eagerly on clones
  (`UpstreamValues`, a torch.fx Interpreter);
- at run time, the eager replay of the graph that failed (an fx Interpreter's
  ``env``).

Observer rule: inputs are cloned, the RNG state is restored, no grad is
recorded, no dispatch mode stays active; the caller runs this as graphdbg's
own work. The custom op's real implementation (the user's code) runs once more.
"""

from __future__ import annotations

import os
import types
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.fx
from torch.fx.node import map_arg
from torch.utils._pytree import tree_flatten, tree_map_only


from .. import compat
from ..placement.guards import exception_chain
from ..placement.internal import is_internal
from .subgraphs import clone, preserved_rng

MAX_OPS = 4  # custom ops checked per failure, nearest to it first
MAX_NODES = 2000  # nodes run eagerly to reach them


@dataclass
class FakeMismatch:
    op: str  # "mylib::widen"
    node: str  # the FX node that called it
    what: str  # "shape", "dtype", "stride", "device", "outputs", "raises"
    fake: str
    real: str
    file: str | None = None  # where the fake implementation is (its register_fake)
    line: int | None = None
    function: str | None = None
    output: int | None = None  # which output, for ops with several

    def text(self) -> str:
        where = f" ({os.path.basename(self.file)}:{self.line})" if self.file else ""
        out = f" output {self.output}" if self.output is not None else ""
        if self.what == "raises":
            return (f"fake implementation of {self.op}{where} raises {self.fake} "
                    f"but the real op returns {self.real}")
        if self.what == "outputs":
            return (f"fake implementation of {self.op}{where} returns {self.fake} outputs "
                    f"but the real op returns {self.real}")
        return (f"fake implementation of {self.op}{where} returns{out} {self.what} {self.fake} "
                f"but the real op returns {self.real}")

    def as_dict(self) -> dict:
        return asdict(self)


# -- which ops, and where their fakes are -----------------------------------------------

def _overload(target) -> torch._ops.OpOverload | None:
    if isinstance(target, torch._ops.OpOverload):
        return target
    if isinstance(target, torch._ops.OpOverloadPacket):
        return getattr(target, "default", None)
    inner = getattr(target, "_opoverload", None)  # a CustomOpDef
    return inner if isinstance(inner, torch._ops.OpOverload) else None


def _qualname(op: torch._ops.OpOverload) -> str:
    name = op._schema.name
    return name if op._overloadname in ("default", "") else f"{name}.{op._overloadname}"


def fake_function(op: torch._ops.OpOverload) -> types.FunctionType | None:
    """The Python function registered with ``register_fake`` for ``op``, if any
    (the user's function, not torch's wrapper around it)."""
    try:
        from torch._library.custom_ops import OPDEFS
        opdef = OPDEFS.get(op._schema.name)
    except Exception:
        opdef = None
    fn = getattr(opdef, "_abstract_fn", None)
    if callable(fn):
        return fn
    try:
        from torch._library.simple_registry import singleton
        entry = singleton.get(_qualname(op))
    except Exception:
        return None
    kernel = entry.fake_impl.kernel if entry is not None else None
    return _unwrap(getattr(kernel, "func", None)) if kernel is not None else None


def _unwrap(fn, depth: int = 0):
    """The innermost non-torch function a registration wrapper closes over."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    if not is_internal(code.co_filename) or depth > 3:
        return fn
    for cell in fn.__closure__ or ():
        try:
            v = cell.cell_contents
        except ValueError:
            continue
        inner = _unwrap(v, depth + 1) if callable(v) else None
        if inner is not None and not is_internal(inner.__code__.co_filename):
            return inner
    return fn


def fake_site(fn) -> tuple[str, int, str] | None:
    """(file, line, name) of a fake function: its first decorator's line (the
    ``@op.register_fake``), else its ``def``."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    return code.co_filename, code.co_firstlineno, code.co_name


def _checkable(op: torch._ops.OpOverload) -> bool:
    """An op whose fake is the user's (or a library's) code. Torch's own ops
    with Python fakes (collectives among them) are never run here."""
    fn = fake_function(op)
    code = getattr(fn, "__code__", None)
    return code is not None and not is_internal(code.co_filename)


def custom_ops_feeding(node: torch.fx.Node, inputs: list[torch.fx.Node] | None = None
                       ) -> list[torch.fx.Node]:
    """Nodes upstream of ``node`` (itself included) that call a custom op with
    a Python fake implementation, nearest first. ``inputs``: the node's
    inputs, where the node no longer holds them (erased by Dynamo)."""
    out, seen, todo = [], {node}, [node]
    while todo and len(out) < MAX_OPS:
        n = todo.pop(0)
        if n.op == "call_function":
            op = _overload(n.target)
            if op is not None and _checkable(op):
                out.append(n)
        for a in (inputs if n is node and inputs is not None else n.all_input_nodes):
            if a not in seen:
                seen.add(a)
                todo.append(a)
    return out


# -- comparing ----------------------------------------------------------------------------

def _dims(size) -> str:
    return "(" + ", ".join(str(int(d)) if not isinstance(d, torch.SymInt) else str(d)
                           for d in size) + ("," if len(size) == 1 else "") + ")"


def _same_shape(fake, real) -> bool:
    """Symbolic sizes (a fake's data-dependent ``u0``) match any real size."""
    return len(fake) == len(real) and all(
        isinstance(f, torch.SymInt) or int(f) == int(r) for f, r in zip(fake, real))


def _significant_strides(t: torch.Tensor) -> tuple | None:
    """Strides of the dimensions longer than 1 (the others do not matter);
    None when a size or stride is symbolic."""
    if any(isinstance(v, torch.SymInt) for v in (*t.shape, *t.stride())):
        return None
    return tuple(s if d > 1 else None for d, s in zip(t.shape, t.stride()))


def compare(op: torch._ops.OpOverload, node: torch.fx.Node, args: tuple, kwargs: dict
            ) -> FakeMismatch | None:
    """Run ``op`` for real and its fake on ``args`` (real values); the first
    difference in the outputs' metadata, if any."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils._python_dispatch import _disable_current_modes

    site = fake_site(fake_function(op)) or (None, None, None)

    def mismatch(what, fake, real, output=None):
        return FakeMismatch(str(op._schema.name), node.name, what, fake, real, *site,
                            output=output)

    with _disable_current_modes(), preserved_rng(), torch.no_grad():
        if op._schema.is_mutable:  # it writes its inputs: give it copies
            args, kwargs = tree_map_only(torch.Tensor, clone, (args, kwargs))
        try:
            real = op(*args, **kwargs)
        except Exception:
            return None  # the real op fails on these inputs itself: nothing to compare
        from torch.fx.experimental.symbolic_shapes import ShapeEnv
        # a shape env, for fakes that make data-dependent sizes (ctx.new_dynamic_size)
        mode = FakeTensorMode(allow_non_fake_inputs=True, shape_env=ShapeEnv(), static_shapes=True)
        fake_args, fake_kwargs = tree_map_only(torch.Tensor, mode.from_tensor, (args, kwargs))
        try:
            with mode:
                fake = op(*fake_args, **fake_kwargs)
        except Exception as exc:
            reals = [t for t in tree_flatten(real)[0] if isinstance(t, torch.Tensor)]
            return mismatch("raises", f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                            if str(exc) else type(exc).__name__,
                            "shape " + _dims(reals[0].shape) if reals else "a result")
    reals = [t for t in tree_flatten(real)[0] if isinstance(t, torch.Tensor)]
    fakes = [t for t in tree_flatten(fake)[0] if isinstance(t, torch.Tensor)]
    if len(reals) != len(fakes):
        return mismatch("outputs", str(len(fakes)), str(len(reals)))
    several = len(reals) > 1
    for i, (f, r) in enumerate(zip(fakes, reals)):
        which = i if several else None
        if not _same_shape(f.shape, r.shape):
            return mismatch("shape", _dims(f.shape), _dims(r.shape), which)
        if f.dtype != r.dtype:
            return mismatch("dtype", str(f.dtype), str(r.dtype), which)
        if f.device.type != r.device.type:
            return mismatch("device", str(f.device), str(r.device), which)
        fs = _significant_strides(f)
        if fs is not None and fs != _significant_strides(r):
            return mismatch("stride", str(tuple(f.stride())), str(tuple(r.stride())), which)
    return None


# -- real values of a graph's nodes -------------------------------------------------------

class _Unavailable(Exception):
    pass


_INPLACE_OPERATORS = {"iadd", "isub", "imul", "itruediv", "ifloordiv", "imod", "ipow",
                      "imatmul", "iand", "ior", "ixor", "ilshift", "irshift", "setitem",
                      "delitem"}


def _mutates(n: torch.fx.Node) -> bool:
    """Whether a node may write one of its inputs (then inputs are copied first)."""
    if "out" in n.kwargs:
        return True
    if n.op == "call_method":
        return n.target.endswith("_") and not n.target.endswith("__")
    if n.op != "call_function":
        return False
    op = _overload(n.target)
    if op is not None:
        return op._schema.is_mutable
    name = getattr(n.target, "__name__", "")
    module = getattr(n.target, "__module__", "") or ""
    if module in ("_operator", "operator"):
        return name in _INPLACE_OPERATORS
    return name.endswith("_") and not name.endswith("__")


_SKIPPED = object()  # the value of a node not upstream of those asked for (never kept)


class UpstreamValues(torch.fx.Interpreter):
    """Runs eagerly, on real values, only what is upstream of some nodes of a
    graph (not those nodes themselves), adding each value to ``env`` (shared
    between calls: nodes already in it are not run again, and what ran before
    a failure stays). ``input_of(node)`` gives a graph input, cloned when a
    node of the graph may write one (they are the program's own tensors).

    The graph may be the one Dynamo was building when it failed: no module
    (get_attr and call_module raise `_Unavailable`), perhaps no output node.

        gm = torch.fx.symbolic_trace(lambda x: (x + 1).relu())
        relu = next(n for n in gm.graph.nodes if n.name == "relu")
        env = {}
        UpstreamValues(gm.graph, env, lambda n: torch.ones(2)).fill([relu])
        {n.name: v for n, v in env.items()}   # {'x': tensor([1., 1.]), 'add': tensor([2., 2.])}
    """

    def __init__(self, graph: torch.fx.Graph, env: dict, input_of) -> None:
        super().__init__(torch.nn.Module(), garbage_collect_values=False, graph=graph)
        self.extra_traceback = False  # the program's errors as raised (the caller skips them)
        self.values = env
        self.input_of = input_of
        self.copy_inputs = any(_mutates(n) for n in graph.nodes)
        self.needed: set[torch.fx.Node] = set()

    def fill(self, nodes: list[torch.fx.Node]) -> None:
        """Add the real values of ``nodes``' inputs to ``env``."""
        needed: set[torch.fx.Node] = set()
        todo = [a for n in nodes for a in n.all_input_nodes]
        while todo:
            n = todo.pop()
            if n in needed or n in self.values:
                continue
            needed.add(n)
            if len(needed) > MAX_NODES:
                raise _Unavailable("too many nodes")
            todo.extend(n.all_input_nodes)
        self.needed = needed
        try:
            self.run(initial_env=self.values, enable_io_processing=False)
        finally:  # the interpreter put every node it passed in env: only real values stay
            for n in [n for n, v in self.values.items() if v is _SKIPPED]:
                del self.values[n]

    def run_node(self, n: torch.fx.Node) -> Any:
        # torch.fx.Interpreter.run_node without its node-meta scope: the
        # program's ops run as plain eager calls, as they would without graphdbg
        if n not in self.needed:
            return _SKIPPED
        if n.op == "placeholder":
            value = self.input_of(n)
            return clone(value) if self.copy_inputs and isinstance(value, torch.Tensor) else value
        args, kwargs = self.fetch_args_kwargs_from_env(n)
        return getattr(self, n.op)(n.target, args, kwargs)

    def get_attr(self, target, args, kwargs):
        raise _Unavailable(f"get_attr {target}")  # the module is gone once Dynamo has failed

    def call_module(self, target, args, kwargs):
        raise _Unavailable(f"call_module {target}")


def _check_nodes(op_nodes: list[torch.fx.Node], env: dict) -> list[FakeMismatch]:
    found = []
    for n in op_nodes:
        if not all(a in env for a in n.all_input_nodes):
            continue
        args = map_arg(n.args, lambda a: env[a])
        kwargs = map_arg(n.kwargs, lambda a: env[a])
        m = compare(_overload(n.target), n, args, kwargs)
        if m is not None:
            found.append(m)
    return found


def _in_traceback(exc: BaseException, pred) -> list:
    found: list = []
    for e in exception_chain(exc):
        tb = e.__traceback__
        while tb is not None:
            for v in list(tb.tb_frame.f_locals.values()):
                if pred(v) and not any(v is x for x in found):
                    found.append(v)
            tb = tb.tb_next
    return found


def at_compile_failure(exc: BaseException) -> list[FakeMismatch]:
    """Dynamo failed while tracing (a fake-tensor error at ``failing_node``):
    the custom ops feeding that node whose fake disagrees with the real op."""
    failed = compat.failed_fake_node(exc)
    if failed is None:
        return []
    node, inputs = failed
    op_nodes = custom_ops_feeding(node, inputs)
    if not op_nodes:
        return []
    outputs = _in_traceback(exc, lambda v: type(v).__name__ == "OutputGraph"
                            and getattr(v, "graph", None) is node.graph)
    if not outputs:
        return []
    out = outputs[0]
    by_fake = {id(t.fake): t.source for t in (getattr(out, "tracked_fakes", None) or [])}
    scope = {"G": getattr(out, "global_scope", {}), "L": getattr(out, "local_scope", {})}

    def placeholder(n: torch.fx.Node) -> Any:
        ev = n.meta.get("example_value")
        source = by_fake.get(id(ev))
        if source is None:
            raise _Unavailable(f"no source for {n.name}")
        return source.get_value(scope, {}, {})

    env: dict = {}
    upstream = UpstreamValues(op_nodes[0].graph, env, placeholder)
    with _quiet_modes(), preserved_rng(), torch.no_grad():
        for op_node in op_nodes:  # each on its own: one op's unreachable input spares the others
            try:
                upstream.fill([op_node])
            except Exception:  # an input out of reach, or the program's ops fail on it
                continue
    return _check_nodes(op_nodes, env)


def at_replay_failure(node: torch.fx.Node, replay_exc: BaseException | None) -> list[FakeMismatch]:
    """A compiled call failed and its eager replay failed at ``node``: the
    custom ops feeding it, with their inputs from the replay's values."""
    if replay_exc is None:
        return []
    op_nodes = [n for n in custom_ops_feeding(node) if n is not node]
    if not op_nodes:
        return []
    interps = _in_traceback(replay_exc, lambda v: isinstance(v, torch.fx.Interpreter))
    env = next((i.env for i in interps if getattr(i, "graph", None) is node.graph
                or getattr(getattr(i, "module", None), "graph", None) is node.graph), None)
    if env is None:
        return []
    return _check_nodes(op_nodes, env)


def _quiet_modes():
    from torch.utils._python_dispatch import _disable_current_modes
    return _disable_current_modes()


# -- for the findings writer ----------------------------------------------------------------

def checked(ctx, check, *args) -> list[FakeMismatch]:
    """``check(*args)`` as graphdbg's own work; a failure of the check itself
    is an internal error, never the program's."""
    try:
        with ctx.own_work():
            return check(*args)
    except Exception as exc:
        ctx.internal_error("custom-op fake check", exc)
        return []


def hint(mismatches: list[FakeMismatch], at_run_time: bool = False) -> str:
    """The hint of a finding whose failing value came out of a wrong fake."""
    said = "; ".join(m.text() for m in mismatches)
    why = ("The graph was compiled for what the fake returns, and the real values do not fit it"
           if at_run_time else "The failing op was given the fake's result, not the real one")
    return (f"{said[0].upper()}{said[1:]}. {why}: make the fake implementation (register_fake) "
            f"return what the real op does.")
