"""What `graphdbg repro` needs, recorded when a check finds a problem.

A divergence: the smallest subgraph that still diverges (the first divergent
node alone, on the inputs it read; the graph up to it when the node alone
does not diverge, a fusion), its input values as safetensors within
`BUDGET_BYTES`, and what compiled it (a backend torch can name, or, for a
backend defined in the user's program, the graph that backend handed to one
torch can name). A backend failure: the graph as the backend had it when it
failed (a pass may have rewritten it) and its inputs' shapes, dtypes and
strides. Both go to the run file's ``tensors`` table, owner
``repro:<kind>:<graph id>[:<node>]``, one safetensors blob whose metadata
``graphdbg_repro`` is the JSON spec (docs/repro.md).

Only graphdbg's own copies are read (clone, detach, no autograd): the
program's values and graphs are untouched (the observer rule).
"""

from __future__ import annotations

import json
import math
from contextlib import contextmanager
from typing import Any

import torch
import torch.fx

from graphdbg.runfile.records import TensorRow

BUDGET_BYTES = 4 * 1024 * 1024  # inputs kept per repro; above it the repro says so
_IMPORTABLE = ("torch.", "operator.", "math.", "builtins.")


class NotEncodable(Exception):
    """A node or argument a standalone script cannot rebuild."""


def qualname(target: Any) -> str:
    """An importable name of a call_function target (torch's, operator's)."""
    if isinstance(target, torch._ops.OpOverload):
        ns = target.namespace
        name = f"torch.ops.{ns}.{target._schema.name.split('::')[-1]}.{target._overloadname}"
    elif isinstance(target, torch._ops.OpOverloadPacket):
        name = f"torch.ops.{target._qualified_op_name.replace('::', '.')}"
    else:
        from torch.fx.node import _get_qualified_name
        name = _get_qualified_name(target)
    name = name.replace("_operator.", "operator.", 1) if name.startswith("_operator.") else name
    if name.startswith("torch.ops.") and name.split(".")[2] not in ("aten", "prims", "higher_order"):
        raise NotEncodable(f"{name} is an op registered by the program")
    if not name.startswith(_IMPORTABLE):
        raise NotEncodable(f"{name} is defined outside torch")
    return name


def encode(a: Any) -> Any:
    """An FX argument as JSON: nodes by name, containers, literals."""
    if isinstance(a, torch.fx.Node):
        return {"node": a.name}
    if isinstance(a, (list, tuple)):
        return {"list" if isinstance(a, list) else "tuple": [encode(x) for x in a]}
    if isinstance(a, dict):
        return {"dict": [[k, encode(v)] for k, v in a.items()]}
    if a is None or isinstance(a, (bool, int, str)):
        return a
    if isinstance(a, float):
        return a if math.isfinite(a) else {"float": repr(a)}
    if isinstance(a, torch.dtype):
        return {"torch": str(a)}
    if isinstance(a, (torch.memory_format, torch.layout)):
        return {"torch": str(a)}
    if isinstance(a, torch.device):
        return {"device": str(a)}
    if isinstance(a, slice):
        return {"slice": [encode(a.start), encode(a.stop), encode(a.step)]}
    if a is Ellipsis:
        return {"ellipsis": True}
    raise NotEncodable(f"an argument of type {type(a).__name__}")


def _meta(node: torch.fx.Node) -> dict | None:
    v = node.meta.get("example_value", node.meta.get("val"))
    if isinstance(v, (int, torch.SymInt)) and not isinstance(v, bool):
        return {"int": _hint(v)}   # a size passed as an input (dynamic shapes)
    if not isinstance(v, torch.Tensor):
        return None
    dyn = [i for i, s in enumerate(v.shape) if not isinstance(s, int)]
    try:
        stride = [int(s) for s in v.stride()]
    except Exception:
        stride = None
    return {"shape": [_hint(s) for s in v.shape], "dtype": str(v.dtype).replace("torch.", ""),
            "stride": stride, "dynamic": dyn}


def _hint(s: Any) -> int:
    if isinstance(s, int):
        return s
    try:
        return int(s.node.hint) if s.node.hint is not None else int(s)
    except Exception:
        return int(s)


def encode_graph(gm: torch.fx.GraphModule) -> list[dict]:
    """Every node of ``gm`` in its order (placeholders with their tensor's metadata)."""
    out = []
    for n in gm.graph.nodes:
        if n.op in ("call_module", "get_attr"):
            raise NotEncodable(f"node {n.name} ({n.op}) reads the program's module")
        row: dict[str, Any] = {"name": n.name, "op": n.op}
        if n.op == "placeholder":
            row["target"] = str(n.target)
            row["meta"] = _meta(n)
        elif n.op == "call_function":
            row["target"] = qualname(n.target)
        elif n.op == "call_method":
            row["target"] = str(n.target)
        if n.op != "placeholder":
            row["args"] = encode(tuple(n.args))
            row["kwargs"] = encode(dict(n.kwargs))
        out.append(row)
    return out


def importable_backend(name: str) -> bool:
    """Whether a fresh ``python`` can compile with backend ``name``: torch's
    own, or one a package registers by entry point. A name the program
    registered itself (``register_backend``) is the program's code."""
    from torch._dynamo.backends import registry
    registry._lazy_import()
    if name not in registry._BACKENDS:
        return False
    if registry._BACKENDS[name] is not None:
        return True
    module = getattr(registry._COMPILER_FNS.get(name), "__module__", "") or ""
    if module.startswith("torch."):
        return True
    # an entry point's backend, once looked up, is registered like the
    # program's own (torch sets its _BACKENDS entry to None): ask the metadata
    from importlib.metadata import entry_points
    return name in entry_points(group="torch_dynamo_backends").names


@contextmanager
def handed_graphs(seen: list):
    """While it is active, what a backend hands to a backend torch can name
    (``lookup_backend("aot_eager")(gm, inputs)``) is appended to ``seen`` as
    (name, a copy of the graph)."""
    import copy

    from torch._dynamo.backends import registry
    registry._lazy_import()

    def watching(name, fn):
        def handed(gm, example_inputs, **kw):
            try:
                seen.append((name, copy.deepcopy(gm)))
            except Exception:
                pass
            return fn(gm, example_inputs, **kw)
        return handed

    # only backends already loaded (torch's own, entry points the program used):
    # looking the others up would import third-party packages into the program
    wrapped = {name: fn for name, fn in registry._COMPILER_FNS.items()}
    for name, fn in wrapped.items():
        registry._COMPILER_FNS[name] = watching(name, fn)
    try:
        yield seen
    finally:
        for name, fn in wrapped.items():
            registry._COMPILER_FNS[name] = fn


def _save(tensors: dict, spec: dict) -> bytes:
    from safetensors.torch import save
    return save(tensors, metadata={"graphdbg_repro": json.dumps(spec)})


def _input_tensors(names: list[str], values: list) -> tuple[dict, int]:
    """Copies of the tensor inputs (none when they are over the budget), and their bytes."""
    pairs = [(n, v) for n, v in zip(names, values) if isinstance(v, torch.Tensor)]
    size = sum(v.numel() * v.element_size() for _, v in pairs)
    if size > BUDGET_BYTES:
        return {}, size
    return {n: v.detach().to("cpu", copy=True).contiguous() for n, v in pairs}, size


def _tolerances(tol) -> dict:
    """The check's ``--rtol``/``--atol`` (None: the dtype's default)."""
    return {"rtol": getattr(tol, "rtol", None), "atol": getattr(tol, "atol", None)}


def divergence(writer, graph_id: int, gm: torch.fx.GraphModule, loc, ref, inputs: list,
               backend: str, compile_user, tol=None) -> None:
    """Record the smallest diverging subgraph of the localised divergence ``loc``."""
    from .subgraphs import graph_with_outputs, is_random, single_node_graph
    node = loc.node
    spec: dict[str, Any] = {"kind": "divergence", "graph_id": graph_id, "node": node,
                            "target": loc.target, "stage": loc.stage,
                            "graph_nodes": len(gm.graph.nodes), "tolerance": _tolerances(tol)}
    tensors: dict = {}
    try:
        if is_random(next(n for n in gm.graph.nodes if n.name == node)):
            raise NotEncodable("the node draws random numbers: compiled draws differ by design")
        iso = loc.isolated or {}
        if iso.get("decided") and iso.get("diverges"):
            sub, sub_inputs = single_node_graph(gm, node, {**ref.values, **ref.seen.get(node, {})})
            spec["cut"] = "the node alone, on the inputs it read"
        else:
            sub, sub_inputs = graph_with_outputs(gm, [node]), list(inputs)
            spec["cut"] = ("the graph up to the node (the node alone "
                           + ("does not diverge: fusion)" if iso.get("decided")
                              else f"could not be compiled alone: {iso.get('reason', '?')})"))
        tensors = _finish(spec, sub, sub_inputs, loc.stage, backend, compile_user)
    except NotEncodable as exc:
        spec["refused"] = str(exc)
    writer.add(TensorRow(id=None, owner=f"repro:divergence:{graph_id}:{node}", name="repro",
                         safetensors=_save(tensors, spec)))


def gradient(writer, graph_id: int, gm: torch.fx.GraphModule, loc, inputs: list, rng: tuple,
             backend: str, compile_user, tol) -> None:
    """Record a divergence of gradients localised (by prefix bisection) at
    forward node ``loc.node``: the node alone on the values it read, its
    floating inputs' gradients taken, when those diverge compiled vs eager
    (checked here, one compile); else the graph up to the node on the call's
    inputs, the gradients of those that require grad (what the check found).
    The upstream gradient is the check's: standard normal, float64, from a
    generator seeded 0, one draw per output in order."""
    from .gradients import compare_gradients, eager, gradients_of, judge_gradients
    from .interpreter import EagerReference
    from .subgraphs import clone_inputs, graph_with_outputs, is_random, preserved_rng, set_rng
    from .subgraphs import single_node_graph
    node = loc.node
    spec: dict[str, Any] = {"kind": "divergence", "direction": "backward", "graph_id": graph_id,
                            "node": node, "target": loc.target, "stage": "user",
                            "graph_nodes": len(gm.graph.nodes), "tolerance": _tolerances(tol)}
    tensors: dict = {}
    try:
        if is_random(next(n for n in gm.graph.nodes if n.name == node)):
            raise NotEncodable("the node draws random numbers: compiled draws differ by design")
        sub = sub_inputs = None
        try:   # the node alone: its inputs' values as they ran, gradients of the floating ones
            with preserved_rng(), torch.no_grad():
                set_rng(rng)
                ref = EagerReference(gm)
                ref.run(*clone_inputs(inputs))
            one, vals = single_node_graph(gm, node, {**ref.values, **ref.seen.get(node, {})})
            del ref
            vals = [v.detach().clone().requires_grad_(v.is_floating_point())
                    if isinstance(v, torch.Tensor) else v for v in vals]
            import copy
            fn = compile_user(copy.deepcopy(one), list(vals))
            d = compare_gradients(gradients_of(fn, vals, rng), gradients_of(eager(one), vals, rng),
                                  judge_gradients(one, vals, rng), tol or _NoTol())
            if d is not None:
                sub, sub_inputs = one, vals
                spec["cut"] = "the node alone, on the inputs it read, with their gradients"
            else:
                why = "its gradients do not diverge: fusion"
        except Exception as exc:
            why = f"could not be compiled alone: {type(exc).__name__}"
        if sub is None:
            sub, sub_inputs = graph_with_outputs(gm, [node]), list(inputs)
            spec["cut"] = f"the graph up to the node, with the inputs' gradients (the node alone {why})"
        names = [n.name for n in sub.graph.nodes if n.op == "placeholder"]
        spec["grad_of"] = [names[i] for i, v in enumerate(sub_inputs) if isinstance(v, torch.Tensor)
                           and v.requires_grad and v.is_floating_point()]
        tensors = _finish(spec, sub, sub_inputs, "user", backend, compile_user)
    except NotEncodable as exc:
        spec["refused"] = str(exc)
    writer.add(TensorRow(id=None, owner=f"repro:divergence:{graph_id}:{node}:backward",
                         name="repro", safetensors=_save(tensors, spec)))


class _NoTol:
    rtol = atol = None


def _finish(spec: dict, sub: torch.fx.GraphModule, sub_inputs: list, stage: str | None,
            backend: str, compile_user) -> dict:
    """The cut's nodes, its inputs (within the budget) and what compiles it
    into ``spec``; returns the tensors to keep."""
    spec["nodes"] = encode_graph(sub)
    names = [n["name"] for n in spec["nodes"] if n["op"] == "placeholder"]
    tensors, size = _input_tensors(names, sub_inputs)
    spec["input_bytes"] = size
    spec["scalars"] = {n: v for n, v in zip(names, sub_inputs)
                       if isinstance(v, (bool, int, float))}
    if size > BUDGET_BYTES:
        raise NotEncodable(f"its inputs are {size / 2**20:.1f} MB, over the {BUDGET_BYTES // 2**20} MB "
                           f"that graphdbg keeps for a repro at check time")
    dynamic = getattr(compile_user, "dynamic", None)
    if dynamic is not None:   # torch.compile's dynamic=
        spec["dynamic"] = dynamic
    stage = stage or "user"
    if stage != "user":
        spec["backend"] = {"name": stage, "named": True}
    elif importable_backend(backend):
        spec["backend"] = {"name": backend, "named": True}
        options = getattr(compile_user, "backend_options", None)
        if options:   # torch.compile's mode/options, as inductor ran with them
            spec["backend"]["options"] = options
    else:
        spec["backend"] = {"name": backend, "named": False}
        seen: list = []
        grads = spec.get("direction") == "backward"
        try:
            with handed_graphs(seen), (torch.enable_grad() if grads else torch.no_grad()):
                compile_user(sub, list(sub_inputs))
        except Exception as exc:
            spec["backend"]["why"] = f"it failed on the subgraph: {type(exc).__name__}"
        seen = [(n, g) for n, g in seen if importable_backend(n)]
        if seen:
            name, handed = seen[-1]
            spec["backend"]["stand_in"] = name
            spec["backend"]["handed"] = encode_graph(handed)
    return tensors


def failure(writer, graph_id: int, gm: torch.fx.GraphModule, exc: BaseException,
            backend: str, n_nodes: int, options: dict | None = None,
            inputs: list | None = None) -> None:
    """Record the graph a backend failed on, as it had it, for a compile-error
    repro; ``options``: torch.compile's mode/options of an inductor backend;
    ``inputs``: the example inputs the backend was given (the program's real
    values, copied within `BUDGET_BYTES`; none when fake or over it)."""
    inner = exc
    while getattr(inner, "inner_exception", None) is not None or inner.__cause__ is not None:
        inner = getattr(inner, "inner_exception", None) or inner.__cause__
    spec: dict[str, Any] = {
        "kind": "compile_error", "graph_id": graph_id, "graph_nodes": n_nodes,
        "exception": type(inner).__name__,
        "message": (str(inner).strip().splitlines() or [""])[0],
        "backend": {"name": backend, "named": importable_backend(backend)}}
    if options and spec["backend"]["named"]:
        spec["backend"]["options"] = options
    tensors: dict = {}
    try:
        spec["nodes"] = encode_graph(gm)
        tensors = _real_values(spec["nodes"], inputs)
        if tensors:
            spec["values"] = sorted(tensors)
    except NotEncodable as exc2:
        spec["refused"] = str(exc2)
    writer.add(TensorRow(id=None, owner=f"repro:compile_error:{graph_id}", name="repro",
                         safetensors=_save(tensors, spec)))


def _real_values(nodes: list[dict], inputs: list | None) -> dict:
    """Copies of a failing graph's real input tensors, by placeholder, when
    they are one per placeholder, none fake, all within the budget; else {}."""
    names = [n["name"] for n in nodes if n["op"] == "placeholder"]
    if inputs is None or len(names) != len(inputs):
        return {}
    from torch._subclasses.fake_tensor import is_fake
    if any(isinstance(v, torch.Tensor) and (is_fake(v) or type(v) is not torch.Tensor
                                            and not isinstance(v, torch.nn.Parameter))
           for v in inputs):
        return {}
    tensors, size = _input_tensors(names, inputs)
    return tensors if size <= BUDGET_BYTES else {}
