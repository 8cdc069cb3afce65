"""Where a compile or a compiled call failed, in the user's code.

Errors from backends (BackendCompilerFailed, InductorError, a custom pass)
name no user line. The FX node that was being processed when the error was
raised is still reachable from the traceback's frames (a backend's loop
variable, inductor's ``GraphLowering.current_node``, an Interpreter's
``run_node(n)``), and nodes carry the user's ``stack_trace``.
"""

from __future__ import annotations

import re

import torch
import torch.fx

from ..placement.guards import exception_chain

_NODE_LOCALS = ("n", "node", "current_node", "fx_node", "origin_node")


def failing_node(exc: BaseException) -> torch.fx.Node | None:
    """The FX node being processed where the innermost error was raised."""
    for e in reversed(exception_chain(exc)):
        frames = []
        tb = e.__traceback__
        while tb is not None:
            frames.append(tb.tb_frame)
            tb = tb.tb_next
        for f in reversed(frames):
            local = f.f_locals
            for name in _NODE_LOCALS:
                v = local.get(name)
                if isinstance(v, torch.fx.Node) and v.op not in ("output", "placeholder"):
                    return v
            owner = local.get("self")
            v = getattr(owner, "current_node", None) if owner is not None else None
            if isinstance(v, torch.fx.Node) and v.op not in ("output", "placeholder"):
                return v
    return None


def compiler_error(exc: BaseException) -> str | None:
    """The C++ compiler's first ``error:`` line, for a failed kernel or header compile."""
    for e in exception_chain(exc):
        if type(e).__name__ not in ("CppCompileError", "CalledProcessError"):
            continue
        out = getattr(e, "output", None)
        text = out.decode("utf-8", "replace") if isinstance(out, bytes) else str(out or e)
        line = next((ln.strip() for ln in text.splitlines() if "error:" in ln), None)
        if line:
            return line[:300]
    return None


_NAMED_NODE = re.compile(r"\b[Nn]ode[: ]+['\"`%]?([A-Za-z_]\w*)")


def node_named_in(exc: BaseException, graph: torch.fx.Graph) -> torch.fx.Node | None:
    """A node of ``graph`` that the error's text names ("node 'tanh'",
    "Node tanh_1"), for errors that carry a name but no node object."""
    by_name = {n.name: n for n in graph.nodes if n.op not in ("placeholder", "output")}
    for e in reversed(exception_chain(exc)):
        for name in _NAMED_NODE.findall(str(e)):
            if name in by_name:
                return by_name[name]
    return None


def headline(exc: BaseException) -> str:
    """`Type: first line` of the innermost error, under the wrapper's name."""
    cc = compiler_error(exc)
    if cc is not None:
        return f"{type(exc).__name__} (C++ compile failed: {cc})"
    inner = exception_chain(exc)[-1]
    lines = [ln.strip() for ln in str(inner).splitlines() if ln.strip()]
    first = lines[0] if lines else ""
    bullet = next((ln for ln in lines[1:4] if ln.startswith("- ")), None)
    if bullet and first.endswith(("!", ":")) or bullet and "For more information" in first:
        first = first.split("For more information")[0].strip() + " " + bullet
    text = f"{type(inner).__name__}: {first}" if first else type(inner).__name__
    if inner is not exc:
        text = f"{type(exc).__name__} ({text})"
    return text[:500]


def explain_unsupported(text: str) -> tuple[str | None, list[str]]:
    """The ``Explanation:`` and ``Hint:`` lines of Dynamo's messages."""
    explanation, hints = None, []
    for ln in text.splitlines():
        ln = ln.strip()
        if ln.startswith("Explanation:") and explanation is None:
            explanation = ln[len("Explanation:"):].strip()
        elif ln.startswith("Hint:"):
            hints.append(ln[len("Hint:"):].strip())
    return explanation, hints


def _graphs_in_traceback(chain: list[BaseException]) -> list[torch.fx.Graph]:
    """FX graphs being built when the error was raised: a tracer's ``graph``
    (non-strict export), Dynamo's ``output_graph``, a ``graph`` local."""
    found: dict[int, torch.fx.Graph] = {}
    for e in chain:
        tb = e.__traceback__
        while tb is not None:
            for v in list(tb.tb_frame.f_locals.values()):
                for g in (v, getattr(v, "graph", None)):
                    if isinstance(g, torch.fx.Graph) and id(g) not in found:
                        found[id(g)] = g
            tb = tb.tb_next
    # graphs with source lines first (Dynamo's and the tracer's, not shape-env scratch graphs)
    return sorted(found.values(),
                  key=lambda g: -sum(1 for n in g.nodes if n.meta.get("stack_trace")))


def _symbols_of(value) -> set[str]:
    out: set[str] = set()
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        out |= {str(s) for s in value.node.expr.free_symbols}
    elif isinstance(value, torch.Tensor):
        for d in value.shape:
            if isinstance(d, torch.SymInt):
                out |= {str(s) for s in d.node.expr.free_symbols}
    return out


def data_dependent_symbols(exc: BaseException) -> list[str]:
    """The unbacked symbols (u0, u1...) a data-dependent error is about."""
    for e in exception_chain(exc):
        cond = getattr(e, "cond", None)
        if cond is not None and hasattr(cond, "free_symbols"):
            return sorted(str(s) for s in cond.free_symbols)
    text = "\n".join(str(e).split("\n", 1)[0] for e in exception_chain(exc))
    return sorted(set(re.findall(r"\bu\d+\b", text)), key=lambda s: int(s[1:]))


def symbol_origins(exc: BaseException, symbols: list[str]) -> list[tuple[str, torch.fx.Node]]:
    """For each unbacked symbol, the FX node that created it (the first node
    whose value mentions it), then the symbols that node was computed from."""
    graphs = _graphs_in_traceback(exception_chain(exc))
    origins: list[tuple[str, torch.fx.Node]] = []
    todo, seen = list(symbols), set()
    while todo and len(origins) < 8:
        sym = todo.pop(0)
        if sym in seen:
            continue
        seen.add(sym)
        for g in graphs:
            node = next((n for n in g.nodes if n.op != "placeholder"
                         and sym in _symbols_of(n.meta.get("val", n.meta.get("example_value")))), None)
            if node is not None:
                origins.append((sym, node))
                for inp in node.all_input_nodes:
                    todo += sorted(_symbols_of(inp.meta.get("val", inp.meta.get("example_value")))
                                   - seen)
                break
    return origins


def last_traced_node(exc: BaseException) -> torch.fx.Node | None:
    """The newest node with a source line in the graph being built."""
    for g in _graphs_in_traceback(exception_chain(exc)):
        for n in reversed(list(g.nodes)):
            if n.meta.get("stack_trace"):
                return n
    return None
