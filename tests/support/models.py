"""Small deterministic models for graphdbg tests.

Every builder returns an ``nn.Module`` in eval mode whose weights depend only
on ``seed`` (built under ``torch.random.fork_rng``, so the caller's RNG state
is left alone), and every model has ``example_input()`` returning the same
tensor on every call (its own ``torch.Generator``).  Each compiles to ONE
Dynamo graph (no graph breaks)::

    import sys; sys.path.insert(0, "tests/support")
    from models import deep_mlp, dynamo_graph_sizes
    m = deep_mlp(8)
    out = torch.compile(m, backend="aot_eager")(m.example_input())
    dynamo_graph_sizes(m, m.example_input())   # [(nodes, op_nodes)] per graph

Models (node counts of the Dynamo graph, torch 2.13: all nodes / call nodes;
parameters are graph placeholders since Dynamo inlines nn.Modules):

``deep_mlp(n_layers=8)``     pre-LN residual MLP blocks (LayerNorm, Linear, GELU,
                             Linear, add) + final LayerNorm + head:
                             11*n_layers + 8 / 5*n_layers + 2 (n_layers=8: 96 / 42,
                             n_layers=4: 52 / 22); 5 call nodes and 6 params a block.
``small_cnn()``              conv-BN(eval)-ReLU-maxpool, conv-BN-ReLU-avgpool,
                             flatten, Linear: 26 / 10.
``transformer_block()``      one pre-LN block: q/k/v Linears, heads reshape, QK^T
                             scaled, softmax, AV, out-proj, residual, LayerNorm, GELU
                             MLP, residual: 42 / 24.
``bf16_chain()``             bf16 elementwise chain + reductions where inductor and
                             eager legitimately differ (inductor fuses the chain and
                             keeps fp32 between ops; eager rounds to bf16 after each
                             op): 14 / 11.  ``float64_reference(m, x)`` runs the same
                             ops in float64.  Measured (torch 2.13 CPU, inductor):
                             not bitwise equal, max |compiled-eager| 0.114;
                             mean |x-fp64|: eager 2.4e-2, compiled 9.5e-4;
                             max |x-fp64|: eager 0.113, compiled 2.4e-3.

Run ``python tests/support/models.py`` to print node counts and the bf16 numbers.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["deep_mlp", "small_cnn", "transformer_block", "bf16_chain", "float64_reference",
           "dynamo_graph_sizes", "MODELS"]


def _seeded(build, seed):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = build()
    return model.eval()


def _input(shape, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


# --------------------------------------------------------------------------


class _MLPBlock(nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, hidden)
        self.fc2 = nn.Linear(hidden, d)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


class DeepMLP(nn.Module):
    def __init__(self, n_layers, d, hidden, d_out):
        super().__init__()
        self.blocks = nn.ModuleList(_MLPBlock(d, hidden) for _ in range(n_layers))
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, d_out)
        self.d = d

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))

    def example_input(self, batch=8):
        return _input((batch, self.d), 1)


def deep_mlp(n_layers=8, d=32, hidden=64, d_out=10, seed=0) -> DeepMLP:
    return _seeded(lambda: DeepMLP(n_layers, d, hidden, d_out), seed)


# --------------------------------------------------------------------------


class SmallCNN(nn.Module):
    def __init__(self, n_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(16)
        self.fc = nn.Linear(16, n_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.adaptive_avg_pool2d(F.relu(self.bn2(self.conv2(x))), 1)
        return self.fc(torch.flatten(x, 1))

    def example_input(self, batch=2):
        return _input((batch, 3, 16, 16), 2)


def _randomise_bn(model):
    # non-trivial running statistics, so eval-mode BN is not the identity
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.2, 0.2)
    return model


def small_cnn(n_classes=10, seed=0) -> SmallCNN:
    return _seeded(lambda: _randomise_bn(SmallCNN(n_classes)), seed)


# --------------------------------------------------------------------------


class TransformerBlock(nn.Module):
    def __init__(self, d=32, n_heads=4, seq=8):
        super().__init__()
        self.n_heads, self.d, self.seq = n_heads, d, seq
        self.norm1 = nn.LayerNorm(d)
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)
        self.v = nn.Linear(d, d)
        self.proj = nn.Linear(d, d)
        self.norm2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        hd = d // self.n_heads
        h = self.norm1(x)
        q = self.q(h).view(b, t, self.n_heads, hd).transpose(1, 2)
        k = self.k(h).view(b, t, self.n_heads, hd).transpose(1, 2)
        v = self.v(h).view(b, t, self.n_heads, hd).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        attn = torch.softmax(scores, dim=-1)
        a = (attn @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(a)
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))

    def example_input(self, batch=2):
        return _input((batch, self.seq, self.d), 3)


def transformer_block(d=32, n_heads=4, seq=8, seed=0) -> TransformerBlock:
    return _seeded(lambda: TransformerBlock(d, n_heads, seq), seed)


# --------------------------------------------------------------------------


class BF16Chain(nn.Module):
    """bf16 elementwise chain (with a +64/-64 shift) + a mean.  Eager rounds every intermediate to bf16;
    inductor fuses the chain into one kernel that computes in fp32 and rounds once,
    so the compiled output differs from eager and is closer to a float64 reference."""

    def __init__(self, d=256):
        super().__init__()
        self.d = d
        self.scale = nn.Parameter(torch.rand(d, dtype=torch.bfloat16) + 0.5)

    def forward(self, x):
        h = x * self.scale
        h = (h + 64.0) - 64.0   # eager: h+64 rounded to bf16 (step 0.25-0.5) loses h's low bits
        h = torch.sin(h)
        h = h * h
        h = torch.exp(-h)
        h = torch.tanh(h * 1.3)
        return h - h.mean(dim=-1, keepdim=True)

    def example_input(self, batch=64):
        return _input((batch, self.d), 4, torch.bfloat16)


def bf16_chain(d=256, seed=0) -> BF16Chain:
    return _seeded(lambda: BF16Chain(d), seed)


def float64_reference(model: nn.Module, *inputs):
    """Run `model` with its parameters and inputs cast to float64 (a copy; model unchanged)."""
    import copy

    m64 = copy.deepcopy(model).to(torch.float64)
    with torch.no_grad():
        return m64(*(t.to(torch.float64) for t in inputs))


MODELS = {"deep_mlp": deep_mlp, "small_cnn": small_cnn, "transformer_block": transformer_block,
          "bf16_chain": bf16_chain}


# --------------------------------------------------------------------------


def dynamo_graph_sizes(model, *inputs) -> list[tuple[int, int]]:
    """(all nodes, call_function/call_method/call_module nodes) of each Dynamo graph."""
    sizes = []

    def counting(gm, example_inputs):
        n = list(gm.graph.nodes)
        sizes.append((len(n), sum(1 for x in n if x.op in ("call_function", "call_method", "call_module"))))
        return gm.forward

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(model, backend=counting)(*inputs)
    torch._dynamo.reset()
    return sizes


def _report():
    import time

    for name, build in MODELS.items():
        m = build()
        print(f"{name:18} Dynamo graphs (nodes, op nodes): {dynamo_graph_sizes(m, m.example_input())}")

    m = bf16_chain()
    x = m.example_input()
    with torch.no_grad():
        eager = m(x)
        t0 = time.perf_counter()
        compiled = torch.compile(m, backend="inductor")(x)
        dt = time.perf_counter() - t0
    ref = float64_reference(m, x)
    e_err = (eager.double() - ref).abs()
    c_err = (compiled.double() - ref).abs()
    print(f"bf16_chain: inductor compile+run {dt:.1f}s; bitwise equal to eager: {torch.equal(eager, compiled)}; "
          f"max |compiled-eager| {(compiled.double() - eager.double()).abs().max().item():.4g}")
    print(f"  |eager-fp64|    max {e_err.max().item():.4g} mean {e_err.mean().item():.4g}")
    print(f"  |compiled-fp64| max {c_err.max().item():.4g} mean {c_err.mean().item():.4g}")
    print(f"  |fp64| mean {ref.abs().mean().item():.4g}")


if __name__ == "__main__":
    _report()
