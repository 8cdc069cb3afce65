"""A compiled model whose backend corrupts exactly one op: compiled != eager.

The model is a residual MLP (a stem Linear, four pre-LayerNorm blocks of
Linear-GELU-Linear with a residual add, a ``tanh`` squashing between blocks 2
and 3, a final LayerNorm and a Linear head): one Dynamo graph of 56 nodes
(31 placeholders -- the input and 30 parameters -- 24 op nodes, the output).

It is compiled with ``FaultyBackend``, a backend defined in this file: it
takes the FX graph Dynamo hands it, finds the first ``torch.tanh`` node,
inserts ``torch.mul(tanh, 1.01)`` after it and redirects every user of the
tanh to the product, then compiles the changed graph with the real backend
named by ``--backend`` (default ``inductor``).  So the compiled output
differs from the eager output (max abs difference 7.9e-3, printed, with any
backend; inductor's own rounding stays below 1e-6 on every node), and the
first node where compiled values leave eager's is the ``tanh`` in
``forward`` (9.7e-3 there).  The LayerNorm right after it hides the scale
(1e-6); the residual stream carries it to the output.  Graphs without a
``tanh`` node (a prefix or a single node of the graph cut out and compiled
again by a debugger) are compiled unchanged; a graph that contains the tanh
node gets the fault again.

Expected graphdbg findings: 1 graph, no graph breaks, no recompiles, and one
divergence, at the ``torch.tanh`` line marked with the expectation comment
below (the scaled node carries the tanh's stack trace).  Everything before
it (stem and blocks 1-2) matches eager within the backend's rounding.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from sample_cli import parse_args, save_outputs


class FaultyBackend:
    """Scale the output of the first node with target `target` by `factor`, then compile
    with the real backend `inner`.  `mutated` records the node names it changed."""

    def __init__(self, inner, target=torch.tanh, factor=1.01):
        self.inner, self.target, self.factor = inner, target, factor
        self.mutated = []

    def __call__(self, gm, example_inputs):
        import copy

        from torch._dynamo.backends.registry import lookup_backend

        graph = copy.deepcopy(gm.graph)  # leave the caller's graph as it was
        for node in graph.nodes:
            if node.op == "call_function" and node.target is self.target:
                users = list(node.users)
                with graph.inserting_after(node):
                    scaled = graph.call_function(torch.mul, (node, self.factor))
                scaled.meta = copy.copy(node.meta)  # same stack trace: same source line
                for user in users:
                    user.replace_input_with(node, scaled)
                self.mutated.append(node.name)
                gm = torch.fx.GraphModule(gm, graph)
                break
        return lookup_backend(self.inner)(gm, example_inputs)


class Block(nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, hidden)
        self.fc2 = nn.Linear(hidden, d)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


class ResidualMLP(nn.Module):
    def __init__(self, d_in=16, d=32, hidden=64, d_out=10, n_blocks=4):
        super().__init__()
        self.stem = nn.Linear(d_in, d)
        self.blocks = nn.ModuleList(Block(d, hidden) for _ in range(n_blocks))
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, d_out)

    def forward(self, x):
        h = self.stem(x)
        h = self.blocks[0](h)
        h = self.blocks[1](h)
        h = torch.tanh(h)  # graphdbg-expect: divergence
        h = self.blocks[2](h)
        h = self.blocks[3](h)
        return self.head(self.norm(h))


def main():
    args = parse_args("A fault-injecting backend scales one op's output by 1.01.",
                      backend_help="real backend the faulty one wraps (default: inductor)")
    torch.manual_seed(0)

    model = ResidualMLP().eval()
    backend = FaultyBackend(args.backend)
    compiled = torch.compile(model, backend=backend)

    with torch.no_grad():
        x = torch.randn(8, 16)
        out = compiled(x)
        ref = model(x)

    if args.save:
        save_outputs({"compiled": out, "eager": ref}, args.save)
    diff = (out - ref).abs().max().item()
    print(f"divergence_faulty: scaled {sorted(set(backend.mutated))} by 1.01; "
          f"max |compiled - eager| = {diff:.3e}, output checksum {out.sum().item():.4f}")


if __name__ == "__main__":
    main()
