"""Graph surgery and input handling for checking a graph against eager:
graphs cut down to chosen outputs or to one node, clones that keep strides,
the RNG state saved and replayed, and what a graph does to its inputs.

Everything here leaves the graph it is given untouched (copies are cut).
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any

import torch
import torch.fx

RANDOM_OPS = {"rand", "randn", "randint", "rand_like", "randn_like", "randint_like",
              "dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout",
              "feature_alpha_dropout", "bernoulli", "bernoulli_", "normal", "normal_",
              "uniform_", "multinomial", "randperm", "native_dropout", "exponential_",
              "random_", "rrelu"}
_DROPOUTS = ("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout",
             "feature_alpha_dropout")
_INPLACE_FUNCS = {"setitem", "copy_", "index_put_", "scatter_", "masked_fill_"}
COMPUTE_OPS = ("call_function", "call_method", "call_module")


def flat(value: Any) -> list:
    """Leaves of nested lists and tuples, in order."""
    out: list = []
    stack = [value]
    while stack:
        v = stack.pop(0)
        if isinstance(v, (list, tuple)):
            stack[0:0] = list(v)
        else:
            out.append(v)
    return out


def output_names(gm: torch.fx.GraphModule) -> list[str | None]:
    """The node behind each flat output of ``gm`` (None for constants)."""
    out = next(n for n in gm.graph.nodes if n.op == "output")
    return [a.name if isinstance(a, torch.fx.Node) else None for a in flat(out.args[0])]


def is_random(node: torch.fx.Node) -> bool:
    name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
    if name in _DROPOUTS:
        training = node.kwargs.get("training", node.args[2] if len(node.args) > 2 else True)
        return bool(training) if not isinstance(training, torch.fx.Node) else True
    return name in RANDOM_OPS


def mutates_inputs(gm: torch.fx.GraphModule) -> bool:
    """Conservative: does any node write in place (so inputs need cloning)?"""
    for n in gm.graph.nodes:
        if n.op == "call_method" and str(n.target).endswith("_") and not str(n.target).endswith("__"):
            return True
        if n.op == "call_function":
            name = getattr(n.target, "__name__", "")
            if (name.endswith("_") and not name.endswith("__")) or name in _INPLACE_FUNCS:
                return True
            if n.kwargs.get("inplace") is True or "out" in n.kwargs:
                return True
        if n.op == "call_module":
            mod = gm.get_submodule(str(n.target))
            if getattr(mod, "inplace", False) or isinstance(mod, torch.nn.modules.batchnorm._BatchNorm):
                return True
    return False


def clone(t: torch.Tensor) -> torch.Tensor:
    """A copy with the same sizes and strides: compiled code asserts the strides
    it was compiled for (a padded slice must stay padded)."""
    t = t.detach()
    if t.is_contiguous() or type(t) not in (torch.Tensor, torch.nn.Parameter):
        return t.clone()
    out = torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device=t.device)
    return out.copy_(t)


def clone_inputs(args) -> list:
    return [clone(a) if isinstance(a, torch.Tensor) else a for a in args]


def aliased_input(out: torch.Tensor, inputs) -> int | None:
    """Index of the input whose storage ``out`` shares, if any."""
    try:
        ptr = out.untyped_storage().data_ptr()
    except Exception:
        return None
    for i, a in enumerate(inputs):
        if isinstance(a, torch.Tensor):
            try:
                if a.untyped_storage().data_ptr() == ptr:
                    return i
            except Exception:
                continue
    return None


# -- the program's RNG: saved, replayed, restored --------------------------------------

def rng_state() -> tuple:
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    return torch.random.get_rng_state(), cuda


def set_rng(state: tuple | None) -> None:
    if state is None:
        return
    cpu, cuda = state
    torch.random.set_rng_state(cpu)
    if cuda is not None:
        torch.cuda.set_rng_state_all(cuda)


@contextlib.contextmanager
def preserved_rng():
    saved = rng_state()
    try:
        yield
    finally:
        set_rng(saved)


# -- cut-down graphs --------------------------------------------------------------------

def graph_with_outputs(gm: torch.fx.GraphModule, names: list[str]) -> torch.fx.GraphModule:
    """A copy of ``gm`` that returns the values of ``names`` (and nothing after them)."""
    new = copy.deepcopy(gm)
    by_name = {n.name: n for n in new.graph.nodes}
    out = next(n for n in new.graph.nodes if n.op == "output")
    out.args = (tuple(by_name[x] for x in names),)
    new.graph.eliminate_dead_code()
    new.recompile()
    return new


def single_node_graph(gm: torch.fx.GraphModule, name: str,
                      values: dict[str, Any]) -> tuple[torch.fx.GraphModule, list]:
    """``name`` alone, its tensor inputs as placeholders (others inlined)."""
    node = next(n for n in gm.graph.nodes if n.name == name)
    graph = torch.fx.Graph()
    inputs: list = []
    env: dict[torch.fx.Node, Any] = {}
    for inp in node.all_input_nodes:
        val = values.get(inp.name)
        if isinstance(val, torch.Tensor):
            ph = graph.placeholder(inp.name)
            ph.meta = dict(inp.meta)
            env[inp] = ph
            inputs.append(val)
        else:
            env[inp] = val
    new_node = graph.node_copy(node, lambda n: env[n])
    graph.output((new_node,))
    root = gm if node.op in ("call_module", "get_attr") else torch.nn.Module()
    return torch.fx.GraphModule(root, graph), inputs
