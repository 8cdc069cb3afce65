"""Graph surgery and input handling for checking a graph against eager:
graphs cut down to chosen outputs or to one node, clones that keep strides,
the RNG state saved and replayed, and what a graph does to its inputs.

Everything here leaves the graph it is given untouched (copies are cut).
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import operator
from typing import Any

import torch
import torch.fx
from torch.utils._python_dispatch import TorchDispatchMode

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


DRAWS = "graphdbg_draws_random"  # node.meta key (graphdbg's own copy of the graph)


def is_random(node: torch.fx.Node) -> bool:
    """Whether the node drew random numbers when the reference ran it
    (`DrawWatch`; known once a check has looked, see `mark_random`)."""
    return bool(node.meta.get(DRAWS))


def mark_random(gm: torch.fx.GraphModule, names: set[str]) -> None:
    for n in gm.graph.nodes:
        if n.name in names:
            n.meta[DRAWS] = True


def _rng_marks(kwargs: dict) -> list[torch.Tensor]:
    """The state of every generator an op may draw from: an explicit
    ``generator=``, the CPU default one, the CUDA ones already in use (their
    seed and offset: host memory, no device sync)."""
    marks = []
    gen = kwargs.get("generator")
    if isinstance(gen, torch.Generator):
        marks.append(gen.get_state())
    marks.append(torch.default_generator.get_state())
    if torch.cuda.is_initialized():
        marks.extend(torch.cuda.get_rng_state(d) for d in range(torch.cuda.device_count()))
    return marks


class DrawWatch(TorchDispatchMode):
    """Whether an op that draws random numbers ran and drew. aten says which
    ops may draw: they carry the ``nondeterministic_seeded`` tag (dropout,
    bernoulli, rand*, rrelu, scaled_dot_product_attention and its kernels...),
    whatever the Python function that reached them is called. Whether one
    drew (SDPA with ``dropout_p=0`` does not) is told by its generator's
    state moving. A higher-order op (a checkpointed region) is run whole and
    judged the same way."""

    supports_higher_order_operators = True

    def __init__(self) -> None:
        super().__init__()
        self.drew = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.drew or not (isinstance(func, torch._ops.HigherOrderOperator)
                             or torch.Tag.nondeterministic_seeded in getattr(func, "tags", ())):
            return func(*args, **kwargs)
        before = _rng_marks(kwargs)
        out = func(*args, **kwargs)
        after = _rng_marks(kwargs)
        self.drew = len(before) != len(after) or not all(
            torch.equal(a, b) for a, b in zip(before, after))
        return out


_INPLACE_OPERATORS = {operator.iadd, operator.isub, operator.imul, operator.itruediv,
                      operator.ifloordiv, operator.imod, operator.ipow, operator.imatmul,
                      operator.iand, operator.ior, operator.ixor, operator.ilshift,
                      operator.irshift, operator.setitem}
_INPLACE_POSITION: dict[Any, int | None] = {}


def _inplace_position(target) -> int | None:
    """Position of a function's ``inplace`` parameter (F.relu: 1), if it has one."""
    try:
        return _INPLACE_POSITION[target]
    except (KeyError, TypeError):
        pass
    pos = None
    try:
        names = list(inspect.signature(target).parameters)
        pos = names.index("inplace") if "inplace" in names else None
    except (TypeError, ValueError):
        pass
    try:
        _INPLACE_POSITION[target] = pos
    except TypeError:
        pass
    return pos


def written_node(node: torch.fx.Node) -> torch.fx.Node | None:
    """The node whose tensor ``node`` writes in place (``x.add_``, ``x += y``,
    ``x[i] = v``, ``F.relu(x, inplace=True)``, ``out=x``), or None."""
    def first() -> torch.fx.Node | None:
        a = node.args[0] if node.args else None
        return a if isinstance(a, torch.fx.Node) else None
    if node.op == "call_method":
        name = str(node.target)
        return first() if name.endswith("_") and not name.endswith("__") else None
    if node.op == "call_function":
        target = node.target
        out = node.kwargs.get("out")
        if isinstance(out, torch.fx.Node):
            return out
        if isinstance(target, torch._ops.OpOverload):
            args = target._schema.arguments
            return first() if args and args[0].alias_info is not None and \
                args[0].alias_info.is_write else None
        name = getattr(target, "__name__", "")
        try:
            if target in _INPLACE_OPERATORS:
                return first()
        except TypeError:
            pass
        if name.endswith("_") and not name.endswith("__"):
            return first()
        if node.kwargs.get("inplace") is True:
            return first()
        pos = _inplace_position(target) if "inplace" not in node.kwargs else None
        if pos is not None and len(node.args) > pos and node.args[pos] is True:
            return first()
        return None
    if node.op == "call_module":
        root = node.graph.owning_module
        try:
            mod = root.get_submodule(str(node.target)) if root is not None else None
        except AttributeError:
            mod = None
        return first() if getattr(mod, "inplace", False) else None
    return None


def value_node(node: torch.fx.Node) -> torch.fx.Node:
    """The node whose tensor is ``node``'s value: the written tensor for
    ``x[i] = v`` (which returns None), else ``node`` itself."""
    if node.op == "call_function" and node.target is operator.setitem:
        w = written_node(node)
        if w is not None:
            return w
    return node


def mutates_inputs(gm: torch.fx.GraphModule) -> bool:
    """Conservative: does any node write in place (so inputs need cloning)?"""
    for n in gm.graph.nodes:
        if written_node(n) is not None:
            return True
        if n.op == "call_module":
            mod = gm.get_submodule(str(n.target))
            if isinstance(mod, torch.nn.modules.batchnorm._BatchNorm):
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

def graph_with_outputs(gm: torch.fx.GraphModule, names: list[str],
                       as_ran: set[str] | frozenset = frozenset()) -> torch.fx.GraphModule:
    """A copy of ``gm`` that returns the values of ``names`` as each was when
    its node ran (and runs nothing after them): ``as_ran`` names nodes whose
    tensor a later node writes in place; they are returned as copies taken
    right after the node ran. Nodes that write in place are kept up to the
    last of ``names`` (dead code elimination would drop an ``x.add_(1)``
    whose result is unused) and dropped after it."""
    new = copy.deepcopy(gm)
    nodes = list(new.graph.nodes)
    index = {n: i for i, n in enumerate(nodes)}
    by_name = {n.name: n for n in nodes}
    outs = []
    for x in names:
        n = by_name[x]
        src = value_node(n)
        if x in as_ran:
            with new.graph.inserting_after(n):
                src = new.graph.create_node("call_function", torch.clone, (src,),
                                            name=f"{x}_as_ran")
        outs.append(src)
    last = max((index[by_name[x]] for x in names), default=-1)
    out = next(n for n in new.graph.nodes if n.op == "output")
    out.args = (tuple(outs),)

    def keep(n: torch.fx.Node) -> bool:
        if n.op in ("placeholder", "output"):
            return True
        if written_node(n) is not None:
            return index.get(n, len(nodes)) <= last
        return n.is_impure()

    new.graph.eliminate_dead_code(is_impure_node=keep)
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
    value = value_node(node)  # x[i] = v: the written tensor
    graph.output((new_node if value is node else env[value],))
    root = gm if node.op in ("call_module", "get_attr") else torch.nn.Module()
    return torch.fx.GraphModule(root, graph), inputs
