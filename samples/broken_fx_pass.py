"""A custom backend whose FX pass builds a malformed graph.

The backend fuses ``h * torch.sigmoid(h)`` into one ``F.silu(h)`` before it
hands the graph to the real backend. The pass has a classic bug: it inserts
the new node at the *sigmoid's input* (``inserting_before(h)``) instead of at
the multiply, so the silu node uses ``h`` before ``h`` is defined. FX only
notices later, when the graph's code is regenerated ("Node silu referenced
nonexistent value h", with aot_eager) or inductor lints it ("Argument 'h' of
Node 'silu' was used before it has been defined") -- no line of the pass, no
line of the model; the program dies with BackendCompilerFailed/InductorError.

Expected graphdbg findings: a malformed_graph (use before definition) at the
line of the pass that created the bad node, marked below, and the
compile_error pointing at the same line, with the model's call in its stack.
The exit status and exception are the ones of a plain run.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from sample_cli import parse_args


def fuse_silu(gm: torch.fx.GraphModule) -> int:
    """Replace `h * torch.sigmoid(h)` with `F.silu(h)`; returns how many."""
    graph = gm.graph
    fused = 0
    for mul in list(graph.nodes):
        if mul.op != "call_function" or mul.target not in (torch.mul, torch.ops.aten.mul.Tensor,
                                                            __import__("operator").mul):
            continue
        a, b = mul.args
        if not (isinstance(b, torch.fx.Node) and b.target is torch.sigmoid and b.args[0] is a):
            continue
        with graph.inserting_before(a):  # bug: must be inserting_before(mul)
            silu = graph.call_function(F.silu, (a,))  # graphdbg-expect: malformed_graph compile_error
        silu.meta = dict(mul.meta)
        mul.replace_all_uses_with(silu)
        graph.erase_node(mul)
        graph.erase_node(b)
        fused += 1
    gm.recompile()
    return fused


def make_backend(inner_name):
    from torch._dynamo.backends.registry import lookup_backend

    def fusing_backend(gm, example_inputs):
        fuse_silu(gm)
        return lookup_backend(inner_name)(gm, example_inputs)

    return fusing_backend


class Block(nn.Module):
    def __init__(self, dim=64):
        super().__init__()
        self.up = nn.Linear(dim, 4 * dim)
        self.down = nn.Linear(4 * dim, dim)

    def forward(self, x):
        h = self.up(x)
        h = h * torch.sigmoid(h)
        return x + self.down(h)


def main():
    args = parse_args(__doc__.splitlines()[0], "backend the fused graph goes to (default: inductor)")
    torch.manual_seed(0)
    model = Block()
    compiled = torch.compile(model, backend=make_backend(args.backend))
    print(compiled(torch.randn(8, 64)).sum().item())


if __name__ == "__main__":
    main()
