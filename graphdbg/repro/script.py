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
TOLERANCE = {{"float64": (1e-7, 1e-7), "float32": ({rtol}, {atol}), "float16": (1e-3, 1e-5),
             "bfloat16": (1.6e-2, 1e-5)}}


def summary(name, t):
    t = t.detach()
    f = t[torch.isfinite(t)].double() if t.is_floating_point() else t.double()
    stats = (f"min {{f.min().item():.6g}}  max {{f.max().item():.6g}}  mean {{f.mean().item():.6g}}"
             if f.numel() else "no finite values")
    bad = (~torch.isfinite(t)).sum().item() if t.is_floating_point() else 0
    print(f"  {{name:9}} {{tuple(t.shape)}} {{str(t.dtype).replace('torch.', '')}}  {{stats}}"
          + (f"  ({{bad}} NaN/Inf)" if bad else ""))


def judge(eager, compiled, fp64):
    """Diverges: compiled and eager differ beyond the dtype's tolerance and
    compiled is clearly further from float64 than eager is."""
    rtol, atol = TOLERANCE.get(str(eager.dtype).replace("torch.", ""), (1e-4, 1e-5))
    if compiled.shape != eager.shape or compiled.dtype != eager.dtype:
        return True, f"compiled is {{tuple(compiled.shape)}} {{compiled.dtype}}, eager {{tuple(eager.shape)}} {{eager.dtype}}"
    c, e, j = compiled.double(), eager.double(), fp64.double()
    if not torch.equal(torch.isfinite(c), torch.isfinite(e)):
        return True, "NaN/Inf where eager has none (or the other way)"
    fin = torch.isfinite(e)
    if not fin.any():
        return False, "no finite values to compare"
    apart = (c - e)[fin].abs().max().item()
    err_c = (c - j)[fin].abs().max().item()
    err_e = (e - j)[fin].abs().max().item()
    scale = e[fin].abs().max().item()
    text = (f"max |compiled - eager| = {{apart:.3e}}; max |compiled - float64| = {{err_c:.3e}}, "
            f"max |eager - float64| = {{err_e:.3e}}")
    return apart > atol + rtol * scale and err_c > 2 * err_e + atol, text
'''

_DIV_MAIN = '''

def main():
    from safetensors.torch import load_file
    saved = load_file(os.path.join(HERE, "inputs.safetensors"))
    args = [{args}]
    with torch.no_grad():
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


def divergence(spec: dict, what: str, source: str, tolerance: tuple[float, float]) -> str:
    nodes = spec["nodes"]
    backend = spec["backend"]
    parts = [HEAD.format(what=what, source=source),
             _TOLS.format(rtol=tolerance[0], atol=tolerance[1]), "\n\n",
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
    args = ", ".join(_input_expr(n, scalars) for n in nodes if n["op"] == "placeholder")
    title = (f"graph {spec['graph_id']}, node {spec['node']} ({spec.get('target')}): "
             f"eager, compiled ({name}), float64")
    parts.append(_DIV_MAIN.format(args=args, compiled_fn=compiled_fn, backend=name, title=title,
                                  options=_options_arg(backend)))
    return "".join(parts)


_ERR_MAIN = '''

EXPECTED = ({exception!r}, {message!r})


def make(shape, stride, dtype):
    dtype = getattr(torch, dtype)
    t = torch.empty_strided(shape, stride, dtype=dtype)
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
    inputs = ", ".join(
        repr(m["int"]) if "int" in m else
        f"make({tuple(m['shape'])!r}, {tuple(m.get('stride') or _contiguous(m['shape']))!r}, "
        f"{m['dtype']!r})" for m in (n["meta"] for n in phs))
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
