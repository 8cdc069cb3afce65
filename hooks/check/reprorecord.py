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
    return module.startswith("torch.")


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


def divergence(writer, graph_id: int, gm: torch.fx.GraphModule, loc, ref, inputs: list,
               backend: str, compile_user) -> None:
    """Record the smallest diverging subgraph of the localised divergence ``loc``."""
    from .subgraphs import graph_with_outputs, is_random, single_node_graph
    node = loc.node
    spec: dict[str, Any] = {"kind": "divergence", "graph_id": graph_id, "node": node,
                            "target": loc.target, "stage": loc.stage,
                            "graph_nodes": len(gm.graph.nodes)}
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
        spec["nodes"] = encode_graph(sub)
        names = [n["name"] for n in spec["nodes"] if n["op"] == "placeholder"]
        tensors, size = _input_tensors(names, sub_inputs)
        spec["input_bytes"] = size
        spec["scalars"] = {n: v for n, v in zip(names, sub_inputs)
                           if isinstance(v, (bool, int, float))}
        if size > BUDGET_BYTES:
            tensors = {}
            raise NotEncodable(f"its inputs are {size / 2**20:.1f} MB, over the {BUDGET_BYTES // 2**20} MB "
                               f"that graphdbg keeps for a repro at check time")
        stage = loc.stage or "user"
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
            try:
                with handed_graphs(seen), torch.no_grad():
                    compile_user(sub, list(sub_inputs))
            except Exception as exc:
                spec["backend"]["why"] = f"it failed on the subgraph: {type(exc).__name__}"
            seen = [(n, g) for n, g in seen if importable_backend(n)]
            if seen:
                name, handed = seen[-1]
                spec["backend"]["stand_in"] = name
                spec["backend"]["handed"] = encode_graph(handed)
    except NotEncodable as exc:
        spec["refused"] = str(exc)
    writer.add(TensorRow(id=None, owner=f"repro:divergence:{graph_id}:{node}", name="repro",
                         safetensors=_save(tensors, spec)))


def failure(writer, graph_id: int, gm: torch.fx.GraphModule, exc: BaseException,
            backend: str, n_nodes: int, options: dict | None = None) -> None:
    """Record the graph a backend failed on, as it had it, for a compile-error
    repro; ``options``: torch.compile's mode/options of an inductor backend."""
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
    try:
        spec["nodes"] = encode_graph(gm)
    except NotEncodable as exc2:
        spec["refused"] = str(exc2)
    writer.add(TensorRow(id=None, owner=f"repro:compile_error:{graph_id}", name="repro",
                         safetensors=_save({}, spec)))
