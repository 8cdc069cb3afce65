"""Python source from a recorded graph (`hooks/check/reprorecord.py`'s node
list): a plain function (eager, compiled, float64 runs) or FX builder code
that keeps the recorded node order (a malformed graph stays malformed).
Pure text work: no torch here."""

from __future__ import annotations

import keyword
import re
from typing import Any, Callable

_IDENT = re.compile(r"^[A-Za-z_]\w*$")


class Unrenderable(Exception):
    """A recorded graph that cannot be written as standalone code."""


def ident(name: str) -> str:
    if not _IDENT.match(name) or keyword.iskeyword(name) or name in ("torch", "operator", "math"):
        raise Unrenderable(f"node name {name!r} is not a Python name")
    return name


def expr(a: Any, ref: Callable[[str], str] = ident) -> str:
    """The Python expression of an encoded argument; nodes through ``ref``."""
    if a is None or isinstance(a, (bool, int, float, str)):
        return repr(a)
    if not isinstance(a, dict) or len(a) != 1:
        raise Unrenderable(f"an argument {a!r}")
    (k, v), = a.items()
    if k == "node":
        return ref(v)
    if k == "tuple":
        items = [expr(x, ref) for x in v]
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    if k == "list":
        return "[" + ", ".join(expr(x, ref) for x in v) + "]"
    if k == "dict":
        return "{" + ", ".join(f"{k2!r}: {expr(x, ref)}" for k2, x in v) + "}"
    if k == "torch":
        return v
    if k == "device":
        return f"torch.device({v!r})"
    if k == "slice":
        return "slice(" + ", ".join(expr(x, ref) for x in v) + ")"
    if k == "ellipsis":
        return "..."
    if k == "float":
        return f"float({v!r})"
    raise Unrenderable(f"an argument {a!r}")


def _call_args(node: dict, ref: Callable[[str], str] = ident) -> tuple[list[str], list[str]]:
    args = [expr(x, ref) for x in node.get("args", {"tuple": []})["tuple"]]
    kwargs = [f"{k}={expr(v, ref)}" for k, v in node.get("kwargs", {"dict": []})["dict"]]
    return args, kwargs


def target_expr(target: str) -> str:
    return target[len("builtins."):] if target.startswith("builtins.") else target


def function(name: str, nodes: list[dict], params: dict[str, str] | None = None,
             doc: str | None = None) -> str:
    """``def name(<placeholders>):`` running the nodes in order; ``params``
    renames placeholders (the function's parameter names)."""
    params = params or {}
    ph = [n["name"] for n in nodes if n["op"] == "placeholder"]
    lines = [f"def {name}({', '.join(ident(params.get(p, p)) for p in ph)}):"]
    if doc:
        lines.append(f"    {doc!r}")
    for p in ph:
        if params.get(p, p) != p:
            lines.append(f"    {ident(p)} = {params[p]}")
    for n in nodes:
        op = n["op"]
        if op == "placeholder":
            continue
        if "args_text" in n:  # from the run file's nodes table: the arguments' text
            lines.append(_from_text(n))
            continue
        if op == "output":
            (out,) = n["args"]["tuple"]
            lines.append(f"    return {expr(out)}")
            continue
        args, kwargs = _call_args(n)
        if op == "call_function":
            call = f"{target_expr(n['target'])}({', '.join(args + kwargs)})"
        elif op == "call_method":
            call = f"{args[0]}.{ident(n['target'])}({', '.join(args[1:] + kwargs)})"
        else:
            raise Unrenderable(f"node {n['name']} ({op})")
        lines.append(f"    {ident(n['name'])} = {call}")
    return "\n".join(lines) + "\n"


def _from_text(n: dict) -> str:
    """A node whose arguments are the nodes table's text (node names and reprs)."""
    text, op = n["args_text"], n["op"]
    if op == "output":
        return f"    return {text}"
    if op == "call_function":
        return f"    {ident(n['name'])} = {target_expr(n['target'])}({text})"
    if op == "call_method":
        first, _, rest = text.partition(", ")
        return f"    {ident(n['name'])} = {ident(first)}.{ident(n['target'])}({rest})"
    raise Unrenderable(f"node {n['name']} ({op})")


def _deps(a: Any) -> set[str]:
    if isinstance(a, dict):
        if set(a) == {"node"}:
            return {a["node"]}
        return set().union(*(_deps(v) for v in a.values())) if a else set()
    if isinstance(a, (list, tuple)):
        return set().union(*(_deps(v) for v in a)) if a else set()
    return set()


def builder(name: str, nodes: list[dict]) -> str:
    """``def name():`` returning a ``torch.fx.Graph`` with the nodes in the
    recorded order, a use before a definition included: nodes are created
    once their inputs exist, then moved into the recorded order."""
    made: set[str] = set()
    pending = list(nodes)
    lines = [f"def {name}():", "    g = torch.fx.Graph()", "    n = {}"]
    ref = (lambda x: f"n[{x!r}]")
    while pending:
        ready = [x for x in pending if _deps([x.get("args"), x.get("kwargs")]) <= made]
        if not ready:
            raise Unrenderable("the graph refers to nodes it does not have")
        for x in ready:
            pending.remove(x)
            made.add(x["name"])
            if x["op"] == "placeholder":
                lines.append(f"    n[{x['name']!r}] = g.placeholder({x['name']!r})")
                continue
            if x["op"] == "output":
                lines.append(f"    n[{x['name']!r}] = g.output({expr(x['args']['tuple'][0], ref)})")
                continue
            args, kwargs = _call_args(x, ref)
            a = "(" + "".join(f"{v}, " for v in args) + ")"
            kw = "{" + ", ".join(f"{k.split('=', 1)[0]!r}: {k.split('=', 1)[1]}" for k in kwargs) + "}"
            target = target_expr(x["target"]) if x["op"] == "call_function" else repr(x["target"])
            lines.append(f"    n[{x['name']!r}] = g.create_node({x['op']!r}, {target}, {a}, {kw}, "
                         f"name={x['name']!r})")
    order = [x["name"] for x in nodes]
    lines += [f"    order = [n[k] for k in {order!r}]",
              "    for a, b in zip(order, order[1:]):",
              "        a.append(b)  # the recorded order, as the failing graph had it",
              "    return g"]
    return "\n".join(lines) + "\n"
