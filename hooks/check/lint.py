"""Graph lint: find the broken node of a malformed FX graph and the line it
came from (`graphdbg.check_graph`, and every graph Dynamo hands a backend).

``graph.lint()`` stops at the first problem and names FX nodes only. This
check looks at every node and keeps going:

- structure: a node used before it is defined, a node that was erased (or
  belongs to another graph) still used, no output node or nodes after it,
  ``get_attr``/``call_module`` targets that do not exist;
- arity and argument types: each node is run on fake tensors (no real
  compute, no memory); a node that raises is named with torch's message,
  and a TypeError is checked against the op's signatures;
- shape and dtype: the value a node computes on fake tensors against the
  value its ``meta`` says it has (a pass that swapped an op but kept the meta);
- dangling nodes: values computed and never used (a pass forgot to rewire);
  unused values of the user's own code (nodes with a ``stack_trace`` that no
  pass made) are dead code, not a malformed graph.

Nodes downstream of a broken one are not reported again. Ops fake tensors
cannot run (data-dependent outputs, ops without a fake kernel) are counted as
unchecked, never reported as malformed. The graph is never modified; the
fake mode is private, so no guard is added to the program's compile.
"""

from __future__ import annotations

import inspect
import logging
import operator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

from torch.utils._pytree import tree_flatten

from ..placement.creation import created_at
from ..placement.modules import node_target
from ..placement.nodes import fallback_site, node_user_frame

_UNKNOWN = object()


@dataclass
class GraphProblem:
    check: str            # use_before_def, erased_node, foreign_node, output, missing_attr,
    #                       arity, arg_types, shape, dtype, error, dangling
    node: str | None
    target: str | None
    message: str
    severity: str = "error"
    stack_trace: str | None = None
    created_at: tuple[str, int, str] | None = None
    fx_node: torch.fx.Node | None = field(default=None, repr=False, compare=False)
    # the node's line when its stack_trace has none (`frames.fallback_site`):
    # the line symbolic_trace traced it from, or the line that made its module
    fallback: tuple[str, int, str] | None = None

    def site(self) -> tuple[str | None, int | None, bool]:
        """(file, line, made by a pass): the line of the user's pass that made
        the node when known (a broken node is the pass's bug even when it
        copied the replaced node's meta), else the node's ``stack_trace``,
        else its `fallback` line."""
        if self.created_at:
            return self.created_at[0], self.created_at[1], True
        if self.stack_trace:
            user = node_user_frame(self.stack_trace)
            if user is not None:
                return user.file, user.line, False
        if self.fallback:
            return self.fallback[0], self.fallback[1], False
        return None, None, False


@dataclass
class LintResult:
    problems: list[GraphProblem]
    checked: int = 0          # nodes run on fake tensors
    unchecked: list[str] = field(default_factory=list)   # nodes fake tensors cannot run

    @property
    def ok(self) -> bool:
        return not any(p.severity == "error" for p in self.problems)


def _problem(node: torch.fx.Node | None, check: str, message: str, gm=None,
             severity: str = "error") -> GraphProblem:
    if node is None:
        return GraphProblem(check, None, None, message, severity)
    try:
        target = node_target(node, gm)
    except Exception:
        target = str(node.target)
    try:
        fallback = fallback_site(node)
    except Exception:
        fallback = None
    return GraphProblem(check, node.name, target, message, severity,
                        node.meta.get("stack_trace"), created_at(node), node, fallback)


def _has_attr(root: Any, qualname: str) -> bool:
    obj = root
    for part in str(qualname).split("."):
        if not hasattr(obj, part):
            return False
        obj = getattr(obj, part)
    return True


def _structure(gm: torch.fx.GraphModule, graph: torch.fx.Graph) -> tuple[list[GraphProblem], set]:
    problems: list[GraphProblem] = []
    broken: set = set()
    defined: set = set()
    nodes = list(graph.nodes)
    for node in nodes:
        for inp in node.all_input_nodes:
            if getattr(inp, "_erased", False):
                problems.append(_problem(node, "erased_node",
                                         f"{node.name} uses {inp.name}, which was erased from the graph", gm))
                broken.add(node)
            elif inp.graph is not graph:
                problems.append(_problem(node, "foreign_node",
                                         f"{node.name} uses {inp.name}, a node of another graph", gm))
                broken.add(node)
            elif inp not in defined:
                problems.append(_problem(node, "use_before_def",
                                         f"{node.name} uses {inp.name} before it is defined", gm))
                broken.add(node)
        if node.op == "get_attr" and not _has_attr(gm, node.target):
            problems.append(_problem(node, "missing_attr",
                                     f"{node.name} reads {node.target}, which the module does not have", gm))
            broken.add(node)
        if node.op == "call_module" and not _has_attr(gm, node.target):
            problems.append(_problem(node, "missing_attr",
                                     f"{node.name} calls submodule {node.target}, which does not exist", gm))
            broken.add(node)
        defined.add(node)
    outputs = [n for n in nodes if n.op == "output"]
    if not outputs:
        problems.append(_problem(None, "output", "the graph has no output node"))
    elif len(outputs) > 1 or outputs[-1] is not nodes[-1]:
        problems.append(_problem(nodes[-1], "output",
                                 "nodes follow the output node (they are never run)"
                                 if len(outputs) == 1 else f"the graph has {len(outputs)} output nodes", gm))
    return problems, broken


def _signature_error(node: torch.fx.Node, gm) -> str | None:
    """Why the node's arguments do not fit its target's signature, if they do not."""
    target = node.target
    sigs: list[inspect.Signature] = []
    try:
        if node.op == "call_function":
            from torch.fx.operator_schemas import get_signature_for_torch_op
            sigs = get_signature_for_torch_op(target) or []
            if not sigs:
                sigs = [inspect.signature(target)]
        elif node.op == "call_module":
            sigs = [inspect.signature(gm.get_submodule(str(target)).forward)]
    except (TypeError, ValueError, AttributeError):
        return None
    errors = []
    for sig in sigs:
        try:
            sig.bind(*node.args, **node.kwargs)
            return None
        except TypeError as e:
            errors.append(str(e))
    return errors[0] if errors else None


def _concrete(size) -> list[int] | None:
    out = []
    for d in size:
        if isinstance(d, int):
            out.append(d)
        elif isinstance(d, torch.SymInt):
            hint = getattr(d.node, "hint", None)
            if hint is None:
                return None
            out.append(int(hint))
        else:
            return None
    return out


def _meta_value(node: torch.fx.Node):
    return node.meta.get("val", node.meta.get("example_value"))


def _compare_meta(node: torch.fx.Node, value: Any, gm) -> GraphProblem | None:
    expected = _meta_value(node)
    if not isinstance(expected, torch.Tensor) or not isinstance(value, torch.Tensor):
        return None
    if expected.dtype != value.dtype:
        return _problem(node, "dtype", f"{node.name} computes {value.dtype} but its meta says "
                                       f"{expected.dtype}", gm)
    want, got = _concrete(expected.shape), _concrete(value.shape)
    if want is not None and got is not None and want != got:
        return _problem(node, "shape", f"{node.name} computes shape {got} but its meta says {want}", gm)
    return None


def _classify(node: torch.fx.Node, exc: BaseException, gm) -> GraphProblem:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, TypeError):
        why = _signature_error(node, gm)
        if why is not None:
            return _problem(node, "arity", f"{node.name}: wrong arguments for {node_target(node, gm)}: "
                                           f"{why}", gm)
        return _problem(node, "arg_types", f"{node.name}: {type(exc).__name__}: {text}", gm)
    low = text.lower()
    if "dtype" in low or "scalar type" in low or "expected both inputs" in low:
        check = "dtype"
    elif any(w in low for w in ("shape", "size", "dimension", "must match", "broadcast", "mat1",
                                "reduction dim", "invalid for input")):
        check = "shape"
    else:
        check = "error"
    return _problem(node, check, f"{node.name}: {type(exc).__name__}: {text}", gm)


def _fake(mode, t: torch.Tensor):
    """A fake copy of a real tensor; scalars keep their value (graphs read
    constants such as a LayerNorm's eps with ``.item()``)."""
    if t.numel() == 1 and t.device.type == "cpu" and not t.requires_grad:
        from torch._subclasses.fake_tensor import unset_fake_temporarily
        try:
            with unset_fake_temporarily():
                copy = t.detach().clone()  # in-place ops on a constant reach it: never the original
            return mode.fake_tensor_converter.from_real_tensor(mode, copy, make_constant=True)
        except Exception:
            pass
    return mode.from_tensor(t, static_shapes=True)


def _fake_inputs(mode, graph: torch.fx.Graph, example_inputs) -> list:
    """Fake tensors in our private mode for the example inputs (real or fake);
    symbolic sizes are taken at their example value. Called inside ``mode``."""
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    out: list = []
    for i, ph in enumerate(placeholders):
        v = example_inputs[i] if i < len(example_inputs) else _meta_value(ph)
        if isinstance(v, torch._subclasses.FakeTensor):
            size, stride = _concrete(v.shape), _concrete(v.stride())
            out.append(_UNKNOWN if size is None or stride is None else
                       torch.empty_strided(size, stride, dtype=v.dtype, device=v.device,
                                           requires_grad=v.requires_grad))
        elif isinstance(v, torch.Tensor):
            out.append(_fake(mode, v))
        elif isinstance(v, torch.SymInt):
            hint = getattr(v.node, "hint", None)
            out.append(int(hint) if hint is not None else _UNKNOWN)
        else:
            out.append(v)
    return out


_UNCHECKABLE = ()


def _uncheckable() -> tuple:
    global _UNCHECKABLE
    if not _UNCHECKABLE:
        from torch._subclasses import fake_tensor as ft
        from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode
        _UNCHECKABLE = (ft.DynamicOutputShapeException, ft.DataDependentOutputException,
                        ft.UnsupportedOperatorException, ft.UnsupportedFakeTensorException,
                        GuardOnDataDependentSymNode, NotImplementedError)
    return _UNCHECKABLE


class FakeLinter(torch.fx.Interpreter):
    """Runs every node on fake tensors in a private FakeTensorMode + ShapeEnv
    (so no guard reaches the program's compile) and records, instead of
    raising, each node that fails or computes what its meta does not say.
    Nodes in ``skip`` (downstream of a structural break) and nodes whose
    inputs are unknown are not run."""

    def __init__(self, gm: torch.fx.GraphModule, graph: torch.fx.Graph, skip: set,
                 result: LintResult) -> None:
        super().__init__(gm, garbage_collect_values=False, graph=graph)
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch.fx.experimental.symbolic_shapes import ShapeEnv
        self.mode = FakeTensorMode(allow_non_fake_inputs=True, shape_env=ShapeEnv())
        self.skip = skip
        self.result = result
        self.extra_traceback = False

    def lint(self, example_inputs) -> None:
        # fake tensors log every failing meta kernel with a traceback: the
        # failures are this check's findings, not the program's errors
        fake_log = logging.getLogger("torch._subclasses.fake_tensor")
        level, fake_log.level = fake_log.level, logging.CRITICAL
        try:
            with self.mode:
                self.run(*_fake_inputs(self.mode, self.graph, example_inputs),
                         enable_io_processing=False)
        finally:
            fake_log.setLevel(level)

    def run_node(self, n: torch.fx.Node) -> Any:
        if n.op == "placeholder":
            return next(self.args_iter, _UNKNOWN)
        if n.op == "output" or n in self.skip:
            return _UNKNOWN
        try:
            args, kwargs = self.fetch_args_kwargs_from_env(n)
        except Exception:
            return _UNKNOWN
        if any(a is _UNKNOWN for a in tree_flatten((args, kwargs))[0]):
            return _UNKNOWN
        try:
            value = getattr(self, n.op)(n.target, args, kwargs)
        except _uncheckable():
            self.result.unchecked.append(n.name)
            return _UNKNOWN
        except Exception as exc:
            self.result.problems.append(_classify(n, exc, self.module))
            return _UNKNOWN
        self.result.checked += 1
        bad = _compare_meta(n, value, self.module)
        if bad is not None:
            self.result.problems.append(bad)
            return _UNKNOWN
        return value

    def get_attr(self, target, args, kwargs) -> Any:
        obj = self.fetch_attr(str(target))
        if isinstance(obj, torch.Tensor) and not isinstance(obj, torch._subclasses.FakeTensor):
            return _fake(self.mode, obj)
        return obj

    def call_module(self, target, args, kwargs) -> Any:
        return self.module.get_submodule(str(target))(*args, **kwargs)


def _mutates(node: torch.fx.Node) -> bool:
    """In-place ops and side effects are used even when their value is not."""
    try:
        if node.is_impure():
            return True
    except Exception:
        return True
    target = node.target
    if node.op == "call_method":
        return str(target).endswith("_")
    if node.op == "call_function":
        schema = getattr(target, "_schema", None)
        if schema is not None:
            return bool(schema.is_mutable)
        return getattr(target, "__name__", "").endswith("_")
    return node.op == "call_module"


def _dangling(gm, graph: torch.fx.Graph, problems: list[GraphProblem], which: str) -> None:
    reported = {p.node for p in problems}
    for node in graph.nodes:
        if which == "created" and created_at(node) is None:
            continue
        if node.op not in ("call_function", "call_method", "call_module") or node.users:
            continue
        if node.name in reported or node.target in (operator.setitem,):
            continue
        if node.meta.get("stack_trace") and created_at(node) is None:
            continue  # dead code the user wrote (Dynamo keeps it), not a pass's leftover
        if _mutates(node):
            continue
        problems.append(_problem(node, "dangling",
                                 f"{node.name} ({node_target(node, gm)}) is computed but never used",
                                 gm, severity="warning"))


def lint_graph(gm: torch.fx.GraphModule, example_inputs=(), *, propagate: bool = True,
               dangling: str = "all") -> LintResult:
    """Check ``gm`` for every problem above; never raises for a malformed graph.

    ``dangling``: which unused nodes to report: ``all`` (but the user's own
    dead code), ``created`` (only nodes a user's pass made) or ``none`` (a
    graph straight from Dynamo: its unused nodes are the user's dead code or
    Dynamo's own side effects, such as vmap's nesting calls)."""
    graph = gm.graph
    problems, broken = _structure(gm, graph)
    result = LintResult(problems)
    if propagate:
        # downstream of a structurally broken node, nothing is checked again
        downstream = set(broken)
        for node in graph.nodes:
            if any(i in downstream for i in node.all_input_nodes):
                downstream.add(node)
        FakeLinter(gm, graph, downstream, result).lint(list(example_inputs))
    if dangling != "none":
        _dangling(gm, graph, result.problems, dangling)
    return result
