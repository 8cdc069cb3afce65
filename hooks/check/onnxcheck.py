"""An ONNX export against eager, value by value, in ONNX Runtime.

`torch.onnx.export` (the torch.export-based exporter) translates each FX node
of its exported program into ONNX nodes, names the ONNX value of a node's
result after the FX node, and tags every ONNX node with the FX node it came
from (``pkg.torch.onnx.fx_node``). So one ONNX Runtime session that returns
every such value as an extra output gives, for every FX node that survived
ONNX's optimiser, ONNX's value beside the exported program's own (run here
eagerly, node by node) and the same program in float64 (the judge). The
first FX node, in graph order, whose ONNX value departs from eager is where
the translation goes wrong; the node's ``stack_trace`` names the user's line.

`torch.onnx.verification.verify_onnx_program(compare_intermediates=True)`
does the comparing (one session per value); this adds the judge, the order
and the line.

Needs onnx and onnxruntime (`graphdbg[onnx]`); `missing()` says what to
install. Runs in the context's own-work scope, under no_grad, with the RNG
saved and restored, on clones of the inputs: the program's ONNX program, its
inference session and its model are left as they were.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

from .exported import flat_inputs
from . import verdicts
from .interpreter import DrawWatchingReference, EagerReference, Float64Judge
from .numerics import Tolerance, ValueDiff, compare_values, is_finding
from .subgraphs import clone_inputs, flat, preserved_rng, set_rng

INSTALL = "pip install 'graphdbg[onnx]'"
_FX_NODE = re.compile(r"^%(\S+) :")


def missing() -> list[str]:
    """The packages the ONNX check needs that cannot be imported."""
    out = []
    for name in ("onnx", "onnxruntime"):
        try:
            importlib.import_module(name)
        except ImportError:
            out.append(name)
    return out


def runtime_version() -> str | None:
    try:
        import onnxruntime
        return f"onnxruntime {onnxruntime.__version__}"
    except Exception:
        return None


def onnx_ops(program) -> dict[str, list[str]]:
    """{FX node name: the ONNX op types translated from it, in ONNX order}."""
    out: dict[str, list[str]] = {}
    for node in program.model.graph:
        m = _FX_NODE.match(node.metadata_props.get("pkg.torch.onnx.fx_node", ""))
        if m:
            op = node.op_type if not node.domain else f"{node.domain}::{node.op_type}"
            out.setdefault(m.group(1), []).append(op)
    return out


def opset(program) -> int | None:
    try:
        return int(program.model.opset_imports.get("", 0)) or None
    except Exception:
        return None


@dataclass
class NodeCheck:
    """One FX node: eager's value, ONNX's when the ONNX graph kept it, the judge's."""
    name: str
    status: str                       # ok | differs | first divergent | not compared
    diff: ValueDiff | None = None
    eager: Any = field(default=None, repr=False)
    onnx: Any = field(default=None, repr=False)
    judge: Any = field(default=None, repr=False)


@dataclass
class OnnxCheck:
    nodes: list[NodeCheck]
    first: NodeCheck | None             # the first divergent node (a finding)
    output: ValueDiff | None            # the worst output difference that is a finding
    output_index: int | None
    compared: int                       # FX nodes with an ONNX value
    gm: torch.fx.GraphModule
    # every node that departs with no departing node before it (independent
    # mistranslations: logaddexp and argmax in one program), ``first``
    # among them, each with the worst output it reaches: (diff, index)
    roots: list[NodeCheck] = field(default_factory=list)
    reaches: dict[str, tuple[ValueDiff | None, int | None]] = field(default_factory=dict)


def _ancestors(node: torch.fx.Node) -> set[str]:
    seen: set[str] = set()
    stack = list(node.all_input_nodes)
    while stack:
        n = stack.pop()
        if n.name not in seen:
            seen.add(n.name)
            stack.extend(n.all_input_nodes)
    return seen


def _roots(differs: list[NodeCheck], nodes: dict) -> list[NodeCheck]:
    """The departing nodes that no departing node feeds (precision only where
    nothing else departs: a precision difference may grow into a real one)."""
    real = [r for r in differs if r.diff.kind != "precision"] or differs[:1]
    names = {r.name for r in real}
    return [r for r in real if not (_ancestors(nodes[r.name]) & names)]


def _flat_inputs(program, args: tuple, kwargs: dict) -> list:
    from torch.onnx._internal.exporter._onnx_program import _process_args
    return list(_process_args(args, kwargs))


def onnx_values(program, names: list[str], flat_inputs: list) -> dict[str, torch.Tensor]:
    """The values ``names`` of the ONNX graph on ``flat_inputs``, from one
    ONNX Runtime session of our own (the program's session is not touched):
    names the ONNX graph does not have are left out."""
    import onnxruntime as ort
    from torch.onnx._internal.exporter import _onnx_program as op

    graph = program.model.graph
    values = {}
    for node in graph:
        for v in node.outputs:
            if v.name:
                values[v.name] = v
    wanted = [n for n in names if n in values]
    outputs = list(graph.outputs) + [values[n] for n in wanted if values[n] not in graph.outputs]
    with op._set_graph_outputs(graph, outputs):
        model = program.model_proto.SerializeToString()
    options = ort.SessionOptions()
    options.log_severity_level = 3
    # one run: no pre-packed copy of the weights (it costs memory, saves nothing here)
    options.add_session_config_entry("session.disable_prepacking", "1")
    providers = [p for p in ("CPUExecutionProvider",) if p in ort.get_available_providers()]
    session = ort.InferenceSession(model, providers=providers, sess_options=options)
    del model
    feed = {v.name: op._to_ort_value(t) for v, t in zip(graph.inputs, flat_inputs)}
    results = session.run_with_ort_values(None, feed)
    out_names = [o.name for o in session.get_outputs()]
    return {n: op._from_ort_value(r) for n, r in zip(out_names, results) if n in wanted}


def _tagged(node: torch.fx.Node) -> bool:
    """An op aten tags as one that may draw random numbers."""
    return torch.Tag.nondeterministic_seeded in (getattr(node.target, "tags", ()) or ())


def _drawn(gm: torch.fx.GraphModule, differing: list[torch.fx.Node], ep_inputs: list,
           rng: tuple | None) -> set[str]:
    """The nodes that drew random numbers when the exported program ran
    eagerly (`verdicts`: a draw that happened, not a tag), run again only
    when a tagged op is at or before a differing node."""
    seen, stack = set(), list(differing)
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if _tagged(n):
            break
        stack.extend(n.all_input_nodes)
    else:
        return set()
    with preserved_rng(), torch.no_grad():
        set_rng(rng)
        ref = DrawWatchingReference(gm)
        ref.run(*clone_inputs(ep_inputs))
    return ref.drew


def comparable(onnx: Any, eager: Any) -> Any:
    """ONNX's value as eager's shape and dtype when it is the same data said
    otherwise (a 0-d tensor as [1], int32 for int64), else None."""
    if not (isinstance(onnx, torch.Tensor) and isinstance(eager, torch.Tensor)):
        return None
    if onnx.numel() != eager.numel():
        return None
    if onnx.shape != eager.shape:
        onnx = onnx.reshape(eager.shape)
    if onnx.device != eager.device:   # ONNX Runtime's values are host tensors
        onnx = onnx.to(eager.device)
    if onnx.dtype != eager.dtype:
        if onnx.is_floating_point() != eager.is_floating_point():
            return None
        onnx = onnx.to(eager.dtype)
    return onnx


def check(program, args: tuple, kwargs: dict, tol: Tolerance,
          rng: tuple | None = None, gm: torch.fx.GraphModule | None = None,
          values: dict | None = None) -> OnnxCheck:
    """The ONNX program against its exported program (``gm``: its
    ``module()``, made here without it) run eagerly (and in float64), node by
    node, on ``args``/``kwargs``. ``values``: every node's value of ``gm``
    on them with the RNG at ``rng``, when already known (else run here)."""
    ep = program.exported_program
    gm = gm if gm is not None else ep.module()
    inputs = _flat_inputs(program, args, kwargs)
    ep_inputs = flat_inputs(ep, args, kwargs)
    if not values:
        with preserved_rng(), torch.no_grad():
            set_rng(rng)
            ref = EagerReference(gm)
            ref.run(*clone_inputs(ep_inputs))
        values = ref.values
    order = [n for n in gm.graph.nodes if n.op == "call_function"]
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    out_names = [a.name if isinstance(a, torch.fx.Node) else None for a in flat(out_node.args[0])]
    names = [n.name for n in order if isinstance(values.get(n.name), torch.Tensor)]
    got = onnx_values(program, names, clone_inputs(inputs))
    judge_values: dict[str, Any] = {}

    def compare(judged: bool) -> list[NodeCheck]:
        rows = []
        for n in order:
            eager = values.get(n.name)
            onnx = comparable(got.get(n.name), eager)
            if onnx is None:
                rows.append(NodeCheck(n.name, "not compared", eager=eager))
                continue
            j = judge_values.get(n.name) if judged else None
            d = compare_values(onnx, eager, j, tol)
            rows.append(NodeCheck(n.name, "differs" if is_finding(d) else "ok", d if is_finding(d) else None,
                                  eager=eager, onnx=onnx, judge=j))
        return rows

    rows = compare(False)
    if any(r.status == "differs" for r in rows):
        # the float64 judge, only when something differs (it costs an eager run)
        try:
            with preserved_rng(), torch.no_grad():
                set_rng(rng)
                judge = Float64Judge(gm)
                judge.run(*clone_inputs(ep_inputs))
            judge_values = judge.values
        except Exception:
            judge_values = {}
        rows = compare(True)
    # ONNX Runtime's own random streams: not a translation error where eager
    # drew (the node, or one before it: nothing replays the draws here)
    nodes = {n.name: n for n in order}
    differing = [nodes[r.name] for r in rows if r.diff is not None]
    drawn = _drawn(gm, differing, ep_inputs, rng) if differing else set()
    for r in rows:
        if r.diff is not None:
            r.diff = verdicts.as_random(r.diff, nodes[r.name], drawn, upstream=True)
    differs = [r for r in rows if r.status == "differs"]
    first = next((r for r in differs if r.diff.kind != "precision"), None) or \
        (differs[0] if differs else None)
    roots = _roots(differs, nodes)
    for r in roots:
        r.status = "first divergent"
    # the outputs as the ONNX program returns them
    output, index = None, None
    for i, name in enumerate(out_names):
        if name is None:
            continue
        r = next((r for r in rows if r.name == name), None)
        if r is not None and r.diff is not None and (output is None or r.diff.kind == "miscompile"):
            output, index = r.diff, i
    reaches = {}
    for root in roots:   # the worst output each independent departure reaches
        best: tuple[ValueDiff | None, int | None] = (None, None)
        for i, name in enumerate(out_names):
            r = next((r for r in rows if r.name == name), None) if name else None
            if r is None or r.diff is None or not (name == root.name
                                                   or root.name in _ancestors(nodes[name])):
                continue
            if best[0] is None or r.diff.kind == "miscompile":
                best = (r.diff, i)
        reaches[root.name] = best
    return OnnxCheck(rows, first, output, index, sum(r.status != "not compared" for r in rows), gm,
                     roots, reaches)
