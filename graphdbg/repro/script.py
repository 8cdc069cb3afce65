"""repro.py's text for a divergence or a compile error, from a repro spec
(docs/repro.md). The script imports torch, safetensors and the standard
library only; it exits 1 while the problem is there, 0 once it is gone, and
another status when it fails some other way."""

from __future__ import annotations

from . import codegen

HEAD = '''#!/usr/bin/env python
"""{what}

Written by `graphdbg repro` from {source}. Run: python repro.py
Exit status 1: reproduced (the bug is there); 0: gone; other: something else failed.
"""
import math  # noqa: F401  (the graph's code may use it)
import operator  # noqa: F401
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
'''

_TOLS = '''
# the check's tolerances (hooks/check/numerics.py): per dtype, or the run's --rtol/--atol
TOLERANCE = {{"float64": (1e-7, 1e-7), "float32": (1e-4, 1e-5), "float16": (1e-3, 1e-3),
             "bfloat16": (1.6e-2, 1e-2)}}
RTOL, ATOL = {rtol!r}, {atol!r}  # the run's --rtol/--atol (None: the dtype's)
LOW_PRECISION = ("float16", "bfloat16")


def summary(name, t):
    t = t.detach()
    f = t[torch.isfinite(t)].double() if t.is_floating_point() else t.double()
    stats = (f"min {{f.min().item():.6g}}  max {{f.max().item():.6g}}  mean {{f.mean().item():.6g}}"
             if f.numel() else "no finite values")
    bad = (~torch.isfinite(t)).sum().item() if t.is_floating_point() else 0
    print(f"  {{name:9}} {{tuple(t.shape)}} {{str(t.dtype).replace('torch.', '')}}  {{stats}}"
          + (f"  ({{bad}} NaN/Inf)" if bad else ""))


def rmse(a, b):
    d = (a - b)[torch.isfinite(a - b)]
    return d.pow(2).mean().sqrt().item() if d.numel() else 0.0


def judge(eager, compiled, fp64):
    """The check's rule: compiled and eager differ beyond the tolerance
    (allclose) and, against float64, compiled's error is more than twice
    eager's plus a tenth of the tolerance (a precision difference counts in
    float16/bfloat16 only); NaN/Inf on one side only always counts."""
    dtype = str(eager.dtype).replace("torch.", "")
    rtol, atol = TOLERANCE.get(dtype, (1e-4, 1e-5))
    rtol, atol = (rtol if RTOL is None else RTOL), (atol if ATOL is None else ATOL)
    if compiled.shape != eager.shape or compiled.dtype != eager.dtype:
        return True, f"compiled is {{tuple(compiled.shape)}} {{compiled.dtype}}, eager {{tuple(eager.shape)}} {{eager.dtype}}"
    if not eager.is_floating_point():
        same = torch.equal(compiled, eager)
        return not same, "equal" if same else "integer values differ"
    c, e = compiled.detach().double(), eager.detach().double()
    if torch.isclose(c, e, rtol=rtol, atol=atol, equal_nan=True).all():
        return False, f"within rtol {{rtol:g}}, atol {{atol:g}}"
    fin = torch.isfinite(c) & torch.isfinite(e)
    apart = (c - e)[fin].abs().max().item() if fin.any() else float("inf")
    if not torch.equal(torch.isfinite(c), torch.isfinite(e)) or not torch.equal(c.isnan(), e.isnan()):
        return True, f"NaN/Inf where the other has none (max |compiled - eager| = {{apart:.3e}})"
    if fp64 is None:
        return True, f"max |compiled - eager| = {{apart:.3e}} (no float64 judge)"
    j = fp64.detach().double()
    err_c, err_e = rmse(c, j), rmse(e, j)
    text = (f"max |compiled - eager| = {{apart:.3e}}; rmse(compiled, float64) = {{err_c:.3e}}, "
            f"rmse(eager, float64) = {{err_e:.3e}} (rtol {{rtol:g}}, atol {{atol:g}})")
    if err_c <= 2 * err_e + max(rtol, atol) / 10:
        return dtype in LOW_PRECISION, text + ": a precision difference"
    return True, text
'''

_DIV_MAIN = '''

def main():
    from safetensors.torch import load_file
    saved = load_file(os.path.join(HERE, "inputs.safetensors"))
    args = [{args}]
{marks}    with torch.no_grad():
        eager = reference(*args)[0]
        compiled = torch.compile({compiled_fn}, backend={backend!r}{options}, fullgraph=True)(*args)[0]
        fp64 = reference(*[a.double() if isinstance(a, torch.Tensor) and a.is_floating_point()
                           else a for a in args])[0]
    print({title!r})
    summary("eager", eager)
    summary("compiled", compiled)
    summary("float64", fp64)
    bad, text = judge(eager, compiled, fp64)
    print("  " + text)
    if bad:
        print("DIVERGES: compiled differs from eager beyond tolerance (the bug is there)")
        return 1
    print("agrees: compiled matches eager within tolerance (the bug is gone)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''


_GRAD_MAIN = '''

GRAD_OF = {grad_of!r}  # the inputs whose gradients the check compared ({grad_names})


def gradients(fn, args, float64=False):
    """The gradients of GRAD_OF for the check's upstream gradient: standard
    normal, drawn in float64 from a generator seeded 0, one per output in order."""
    args = [a.detach().double() if float64 and isinstance(a, torch.Tensor)
            and a.is_floating_point() else a for a in args]
    leaves = []
    for i in GRAD_OF:
        args[i] = args[i].detach().clone().requires_grad_(True)
        leaves.append(args[i])
    with torch.enable_grad():
        outs = [o for o in fn(*args) if isinstance(o, torch.Tensor) and o.requires_grad
                and o.is_floating_point()]
        gen = torch.Generator().manual_seed(0)
        ups = [torch.randn(tuple(o.shape), generator=gen, dtype=torch.float64).to(o.dtype)
               for o in outs]
        got = torch.autograd.grad(outs, leaves, ups, allow_unused=True)
    return [g if g is not None else torch.zeros_like(x) for g, x in zip(got, leaves)]


def main():
    from safetensors.torch import load_file
    saved = load_file(os.path.join(HERE, "inputs.safetensors"))
    args = [{args}]
{marks}    eager = gradients(reference, args)
    compiled = gradients(torch.compile({compiled_fn}, backend={backend!r}{options}, fullgraph=True), args)
    fp64 = gradients(reference, args, float64=True)
    print({title!r})
    bad = False
    for i, (g_e, g_c, g_j) in enumerate(zip(eager, compiled, fp64)):
        print(f" gradient of {{{grad_names!r}[i]}}:")
        summary("eager", g_e)
        summary("compiled", g_c)
        summary("float64", g_j)
        diverges, text = judge(g_e, g_c, g_j)
        print("  " + text)
        bad = bad or diverges
    if bad:
        print("DIVERGES: compiled gradients differ from eager beyond tolerance (the bug is there)")
        return 1
    print("agrees: compiled gradients match eager within tolerance (the bug is gone)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''


def _dynamic(spec: dict, phs: list[dict]) -> tuple[str, str]:
    """(torch.compile's ``, dynamic=...`` argument, mark_dynamic lines) as the
    program compiled: ``dynamic=True/False`` as given; else the dims the
    graph had symbolic (automatic dynamic after a recompile) marked."""
    dyn = spec.get("dynamic")
    if dyn is not None:
        return f", dynamic={bool(dyn)!r}", ""
    scalars = spec.get("scalars") or {}
    marks = "".join(f"    torch._dynamo.mark_dynamic(args[{i}], {d})\n"
                    for i, n in enumerate(phs) if n["name"] not in scalars
                    for d in (n.get("meta") or {}).get("dynamic") or [])
    return "", marks


def _input_expr(ph: dict, scalars: dict) -> str:
    name = ph["name"]
    if name in scalars:
        return repr(scalars[name])
    meta = ph.get("meta") or {}
    stride, shape = meta.get("stride"), meta.get("shape")
    if stride and shape and stride != _contiguous(shape):
        return (f"torch.empty_strided({tuple(shape)!r}, {tuple(stride)!r}, "
                f"dtype=saved[{name!r}].dtype).copy_(saved[{name!r}])")
    return f"saved[{name!r}]"


def _contiguous(shape: list[int]) -> list[int]:
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= max(int(s), 1)
    return list(reversed(out))


def divergence(spec: dict, what: str, source: str, tolerance: tuple | None = None) -> str:
    """``tolerance``: (rtol, atol) for every dtype where the spec has not the
    check's (a spec recorded before they were kept); None: per dtype."""
    nodes = spec["nodes"]
    backend = spec["backend"]
    tol = spec.get("tolerance") or {}
    rtol, atol = tol.get("rtol"), tol.get("atol")
    if "tolerance" not in spec and tolerance is not None:
        rtol, atol = tolerance
    parts = [HEAD.format(what=what, source=source), _TOLS.format(rtol=rtol, atol=atol), "\n\n",
             codegen.function("reference", nodes,
                              doc=f"{spec['cut']}: graph {spec['graph_id']}'s {spec['node']}, "
                                  f"eagerly (and in float64)")]
    compiled_fn = "reference"
    name = backend["name"]
    if not backend.get("named"):
        parts += ["\n\n", codegen.function(
            "handed", backend["handed"],
            doc=f"the graph the program's backend {name} handed to {backend['stand_in']}")]
        compiled_fn, name = "handed", backend["stand_in"]
    scalars = spec.get("scalars") or {}
    phs = [n for n in nodes if n["op"] == "placeholder"]
    args = ", ".join(_input_expr(n, scalars) for n in phs)
    dyn_arg, marks = _dynamic(spec, phs)
    options = _options_arg(backend) + dyn_arg
    if spec.get("direction") == "backward":
        title = (f"graph {spec['graph_id']}, node {spec['node']} ({spec.get('target')}): "
                 f"input gradients eager, compiled ({name}), float64")
        index = {n["name"]: i for i, n in enumerate(phs)}
        grad_of = [index[g] for g in spec.get("grad_of") or [] if g in index]
        parts.append(_GRAD_MAIN.format(args=args, compiled_fn=compiled_fn, backend=name,
                                       title=title, options=options, marks=marks,
                                       grad_of=grad_of,
                                       grad_names=[phs[i]["name"] for i in grad_of]))
        return "".join(parts)
    title = (f"graph {spec['graph_id']}, node {spec['node']} ({spec.get('target')}): "
             f"eager, compiled ({name}), float64")
    parts.append(_DIV_MAIN.format(args=args, compiled_fn=compiled_fn, backend=name, title=title,
                                  options=options, marks=marks))
    return "".join(parts)


_ERR_MAIN = '''

EXPECTED = ({exception!r}, {message!r})


def make(shape, stride, dtype, name=None):
    """An input of the recorded shape, strides and dtype: the program's values
    where they were recorded (inputs.safetensors), else random (normal)."""
    dtype = getattr(torch, dtype)
    t = torch.empty_strided(shape, stride, dtype=dtype)
    if name is not None:
        from safetensors.torch import load_file
        return t.copy_(load_file(os.path.join(HERE, "inputs.safetensors"))[name])
    return t.normal_() if dtype.is_floating_point else t.zero_()


def innermost(exc):
    while getattr(exc, "inner_exception", None) is not None or exc.__cause__ is not None:
        exc = getattr(exc, "inner_exception", None) or exc.__cause__
    return exc


def main():
    torch.manual_seed(0)
    inputs = [{inputs}]
    try:
{body}
    except Exception as exc:
        inner = innermost(exc)
        got = (type(inner).__name__, (str(inner).strip().splitlines() or [""])[0])
        print(f"raised {{got[0]}}: {{got[1]}}")
        if got == EXPECTED:
            print("REPRODUCED: the same exception and message as in the program")
            return 1
        print(f"a different error than the program's ({{EXPECTED[0]}}: {{EXPECTED[1]}})")
        return 2
    print("no error: the bug is gone")
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''

_BACKEND_BODY = '''        from torch._dynamo.backends.registry import lookup_backend
        gm = torch.fx.GraphModule(torch.nn.Module(), build_graph())
        compiled = lookup_backend({backend!r})(gm, list(inputs))
        compiled(*inputs)'''

# the same under the program's torch.compile mode/options (inductor's config)
_BACKEND_BODY_OPTIONS = '''        from torch._dynamo.backends.registry import lookup_backend
        import torch._inductor.config
        gm = torch.fx.GraphModule(torch.nn.Module(), build_graph())
        with torch._inductor.config.patch({opts!r}):
            compiled = lookup_backend({backend!r})(gm, list(inputs))
            compiled(*inputs)'''

_DYNAMO_BODY = '''{marks}
        torch.compile(graph, backend={backend!r}{options}, fullgraph=True)(*inputs)'''


def _options_arg(backend: dict) -> str:
    """``, options={...}``: the program's torch.compile mode/options, where the
    backend compiled with is the program's own (not a stand-in)."""
    opts = backend.get("options") if backend.get("named") else None
    return f", options={opts!r}" if opts else ""


def compile_error(spec: dict, what: str, source: str) -> str:
    nodes = spec["nodes"]
    backend = spec["backend"]
    name = backend["name"] if backend.get("named") else backend.get("stand_in", "aot_eager")
    phs = [n for n in nodes if n["op"] == "placeholder"]
    if any(not n.get("meta") for n in phs):
        raise codegen.Unrenderable("an input of the graph is not a tensor of known shape")
    saved = set(spec.get("values") or ())
    inputs = ", ".join(
        repr(m["int"]) if "int" in m else
        f"make({tuple(m['shape'])!r}, {tuple(m.get('stride') or _contiguous(m['shape']))!r}, "
        f"{m['dtype']!r}" + (f", {n['name']!r})" if n["name"] in saved else ")")
        for n, m in ((n, n["meta"]) for n in phs))
    if spec.get("mode") == "dynamo":
        graph_code = codegen.function("graph", nodes, params=spec.get("params"))
        marks = "\n".join(f"        torch._dynamo.mark_dynamic(inputs[{i}], {d})"
                          for i, n in enumerate(phs) for d in n["meta"].get("dynamic") or [])
        body = _DYNAMO_BODY.format(marks=marks or "        pass", backend=name,
                                   options=_options_arg(backend))
    else:
        graph_code = codegen.builder("build_graph", nodes)
        opts = backend.get("options") if backend.get("named") else None
        body = (_BACKEND_BODY_OPTIONS.format(backend=name, opts=opts) if opts
                else _BACKEND_BODY.format(backend=name))
    return "".join([HEAD.format(what=what, source=source), "\n\n", graph_code,
                    _ERR_MAIN.format(exception=spec["exception"], message=spec["message"],
                                     inputs=inputs, body=body)])
