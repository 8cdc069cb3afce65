"""Which finding, and what its repro is made of: the spec recorded at check
time (the run file's ``tensors`` row ``repro:...``), or, for a compile error
Dynamo raised after the backend took the graph, the graph's recorded nodes;
graph breaks and recompiles are cut out of the source by ``cutout.py``.
Torch-free: reads the run file only."""

from __future__ import annotations

import json
import re
import struct

from ..core.errors import GraphdbgError
from . import cutout
from .base import REPRO_KINDS, Plan, Refused

WHY_NOT: dict[str, str] = {}  # graph breaks and recompiles: cutout.py says why per finding


# said where a backend defined in the program is stood in for
NOT_CARRIED = ("the options given to it (its own constructor's or torch.compile's options=/mode=) "
               "are not carried")


def pick(run, number: int | None):
    """(number, finding): the given one (1-based, the report's order) or the first error."""
    findings = run.findings()
    if not findings:
        raise GraphdbgError("the run has no findings: nothing to reproduce", exit_code=1)
    if number is None:
        errors = [i for i, f in enumerate(findings) if f.severity == "error"]
        i = errors[0] if errors else 0
        return i + 1, findings[i]
    if not 1 <= number <= len(findings):
        raise GraphdbgError(f"no finding {number}: the run has {len(findings)} "
                            f"(numbered as `graphdbg report` lists them, from 1)", exit_code=2)
    return number, findings[number - 1]


def spec_of(blob: bytes) -> dict:
    """The JSON spec in a safetensors blob's metadata (read without torch)."""
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    return json.loads(header["__metadata__"]["graphdbg_repro"])


def plan(run, number: int | None) -> Plan:
    number, f = pick(run, number)
    if f.kind not in REPRO_KINDS:
        why = WHY_NOT.get(f.kind, "graphdbg makes repros of divergences, compile errors, "
                                  "malformed graphs, graph breaks and recompiles only")
        raise Refused(f"finding {number} is a {f.kind}: no repro for it ({why})")
    if f.kind == "divergence":
        return _divergence(run, number, f)
    if f.kind in ("graph_break", "recompile"):
        return getattr(cutout, f.kind)(run, number, f)
    return _compile_error(run, number, f)


def _kept(run, owner: str) -> bytes | None:
    kept = run.tensors(owner)
    return kept[-1].data if kept else None


_NOT_A_BUG = {
    "precision": "a precision difference (compiled is as close to float64 as eager is): "
                 "rounding, not a bug a script would show",
    "random": "different random draws compiled and eager: by design, not a bug",
    "aliasing": "an output aliases an input in one mode only: it is about memory, which a "
                "value script does not show",
}


def _divergence(run, number: int, f) -> Plan:
    detail = f.detail
    why = _NOT_A_BUG.get(getattr(detail, "classification", None) or "")
    if why:
        raise Refused(f"finding {number} is {why}: no repro for it")
    backward = getattr(detail, "direction", None) == "backward"
    blob = _kept(run, f"repro:divergence:{f.graph_id}:{f.node}" + (":backward" if backward else ""))
    if blob is None:
        raise Refused(f"finding {number} (divergence {'of gradients ' if backward else ''}at "
                      f"{f.node}) has no recorded repro: the run was made by a graphdbg that did "
                      f"not record " + ("gradient " if backward else "") + "repros")
    spec = spec_of(blob)
    if spec.get("refused"):
        raise Refused(f"finding {number} (divergence at {f.node}) cannot be reproduced "
                      f"standalone: {spec['refused']}")
    b = spec["backend"]
    note = None
    if not b.get("named"):
        if not b.get("stand_in"):
            raise Refused(f"finding {number}: the backend {b['name']!r} is defined in your program "
                          f"and cannot be imported by a standalone script, and it handed no graph "
                          f"to a backend torch can name ({b.get('why', 'it compiles by itself')}): "
                          f"nothing reproducible stands in for it")
        note = _stand_in(b, f"compiles the graph it handed to {b['stand_in']!r} with "
                            f"{b['stand_in']!r}")
    what = (f"Graph {spec['graph_id']}'s node {spec['node']} ({spec.get('target')}){_line(f)} "
            f"diverges compiled ({b['name']}) from eager"
            + (" in the gradients of its inputs (the backward)" if backward else "")
            + f": {spec['cut']}, {_count(spec['nodes'])} of the graph's {spec['graph_nodes']} nodes.")
    return Plan(number, "divergence", spec, blob, what, note)


def _stand_in(b: dict, does: str) -> str:
    """What the CLI and README say when a backend defined in the program is stood in for."""
    return (f"the backend {b['name']!r} is defined in your program and cannot be imported; "
            f"the script {does}, with torch's default options: {NOT_CARRIED}")


def _line(f) -> str:
    """The user's line, as the report names it (the script does not import it)."""
    if not f.file or not f.line:
        return ""
    import os
    return f" at {os.path.basename(f.file)}:{f.line}" + (f" `{f.code.strip()}`" if f.code else "")


def _count(nodes: list[dict]) -> int:
    return len(nodes)


def _compile_error(run, number: int, f) -> Plan:
    blob = _kept(run, f"repro:compile_error:{f.graph_id}") if f.graph_id is not None else None
    if blob is not None:
        spec = spec_of(blob)
    elif f.kind == "compile_error":
        spec = _from_nodes(run, number, f)
    else:
        raise Refused(f"finding {number} ({f.kind}) has no recorded failure: the graph compiled "
                      f"despite it, so there is no exception for a script to reproduce")
    if spec.get("refused"):
        raise Refused(f"finding {number} ({f.kind}) cannot be reproduced standalone: "
                      f"{spec['refused']}")
    b = spec["backend"]
    note = None
    if not b.get("named"):
        b["stand_in"] = "aot_eager"
        note = _stand_in(b, f"builds the graph as {b['name']!r} had it when it failed and hands "
                            f"it to 'aot_eager'")
    values = ("the inputs' values as the program passed them (inputs.safetensors)"
              if blob is not None and spec.get("values") else
              "the inputs' values are random (normal), of the recorded shapes, dtypes and strides")
    what = (f"Graph {spec['graph_id']} fails to compile: {spec['exception']}: {spec['message']} "
            f"({_count(spec['nodes'])} nodes"
            + (", the graph as the backend had it when it failed" if spec.get("mode") != "dynamo"
               else ", re-traced by Dynamo with the dynamic sizes the program marked")
            + f"; {values}).")
    return Plan(number, "compile_error", spec, blob if spec.get("values") else b"", what, note,
                f.node or spec.get("failing_node"))


def _uses(node: dict, names: set[str]) -> set[str]:
    if "args_text" in node:
        return set(re.findall(r"[A-Za-z_]\w*", node["args_text"])) & names
    found: set[str] = set()

    def walk(a) -> None:
        if isinstance(a, dict):
            if set(a) == {"node"}:
                found.add(a["node"])
            else:
                for v in a.values():
                    walk(v)
        elif isinstance(a, list):
            for v in a:
                walk(v)
    walk([node.get("args"), node.get("kwargs")])
    return found


def cut_to(spec: dict, name: str) -> dict | None:
    """The graph cut down to ``name`` and what it is computed from (the
    recorded order kept), ``name`` its output; None when it is not smaller."""
    nodes = [n for n in spec["nodes"] if n["op"] != "output"]
    by = {n["name"]: n for n in nodes}
    if name not in by:
        return None
    keep, todo = set(), [name]
    while todo:
        x = todo.pop()
        if x in keep or x not in by:
            continue
        keep.add(x)
        todo += _uses(by[x], set(by))
    kept = [n for n in nodes if n["name"] in keep]
    out = ({"name": "output", "op": "output", "args_text": f"({name},)"}
           if any("args_text" in n for n in kept) else
           {"name": "output", "op": "output", "args": {"tuple": [{"tuple": [{"node": name}]}]},
            "kwargs": {"dict": []}})
    if len(kept) + 1 >= len(spec["nodes"]):
        return None
    return {**spec, "nodes": kept + [out]}


_LOCAL = re.compile(r"^L_(\w+?)_$")


def _from_nodes(run, number: int, f) -> dict:
    """A compile error Dynamo raised after the backend took the graph (a
    dynamic size specialised, a guard it could not build): the graph of the
    same compile, from its recorded nodes, traced again by Dynamo."""
    graphs = [g for g in run.graphs() if g.compile_id in f.compile_ids]
    if not graphs:
        raise Refused(f"finding {number} (compile_error) came before any graph was made "
                      f"(while Dynamo traced your code): the run file has no graph to rebuild it from")
    g = graphs[-1]
    nodes, params, failing = [], {}, None
    for n in run.nodes(g.id):
        if f.user_frame is not None and n.user_frame == f.user_frame and n.op != "placeholder":
            failing = n.name  # the last node of the finding's line
        row = {"name": n.name, "op": n.op}
        if n.op == "placeholder":
            shape = (n.shapes or [None])[0]
            if not isinstance(shape, list):
                raise Refused(f"finding {number}: input {n.name} is not a tensor of known shape")
            try:
                dims = [int(s) for s in shape]
            except ValueError:
                raise Refused(f"finding {number}: input {n.name}'s size {shape} has no recorded value")
            row["meta"] = {"shape": dims, "dtype": (n.dtypes or ["float32"])[0], "stride": None,
                           "dynamic": [i for i, s in enumerate(shape) if isinstance(s, str)]}
            m = _LOCAL.match(n.target or "")
            if m and not m.group(1).startswith("self_"):
                params[n.name] = m.group(1)
        elif n.op in ("call_function", "call_method", "output"):
            if n.args is None or n.args.endswith("..."):
                raise Refused(f"finding {number}: node {n.name}'s arguments were not recorded whole")
            row["args_text"] = n.args
            target = n.target or ""
            row["target"] = "operator." + target[10:] if target.startswith("_operator.") else target
            if n.op == "call_function" and not row["target"].startswith(("torch.", "operator.",
                                                                          "math.")):
                raise Refused(f"finding {number}: node {n.name} calls {target}, which is defined "
                              f"outside torch")
        else:
            raise Refused(f"finding {number}: node {n.name} ({n.op}) reads the program's module")
        nodes.append(row)
    detail = f.detail
    exception = getattr(detail, "exception", None) or (f.message or "").split(":")[0]
    message = ((f.reason or "").strip().splitlines() or [""])[0]
    return {"kind": "compile_error", "graph_id": g.id, "graph_nodes": len(nodes), "mode": "dynamo",
            "exception": exception, "message": message, "nodes": nodes, "params": params,
            "backend": {"name": g.backend, "named": g.backend in _TORCH_BACKENDS},
            "failing_node": failing}


# backends torch registers by name (the ones a standalone script can pass to torch.compile)
_TORCH_BACKENDS = {"inductor", "aot_eager", "aot_eager_decomp_partition", "eager", "cudagraphs",
                   "aot_inductor", "onnxrt", "tvm", "openxla", "tensorrt", "aot_ts"}
