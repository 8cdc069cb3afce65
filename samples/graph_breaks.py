"""Several different graph-break causes inside torch.compile'd code.

Demonstrates five graph-break sites, each in its own compiled function or
module, with a different cause:

1. ``print()`` inside a compiled function (Dynamo cannot trace the builtin
   ``print`` with side effects on stdout);
2. data-dependent Python control flow: ``if x.sum() > 0:``;
3. ``Tensor.item()`` whose value feeds Python arithmetic and control flow
   (graph-breaks because ``capture_scalar_outputs`` is off by default);
4. a call to a C-extension builtin Dynamo cannot trace (``zlib.crc32``, used
   to hash a feature name into a bucket);
5. a break inside a helper function (``log_stats``) called from a compiled
   module's ``forward``: Dynamo reports the helper's line, not the caller's.

Expected graphdbg findings: 5 graph-break sites (the lines carrying an
expectation comment below) and no recompiles.  Dynamo logs 6 graph
breaks because the helper's break is hit twice: once while inlining
``log_stats`` from ``Block.forward`` and again when ``log_stats`` runs as its
own frame after the break.  Torch's ``counters["graph_break"]`` sums to 5:
it counts the helper twice but does not count the data-dependent ``if``
break at all (that one stays in ``counters["unimplemented"]``).
"""

import zlib

import torch
import torch.nn as nn
from sample_cli import parse_args, save_outputs


def debug_project(x, w):
    h = x @ w
    print(f"debug_project: hidden shape {tuple(h.shape)}")  # graphdbg-expect: graph_break
    return torch.relu(h)


def gated(x):
    if x.sum() > 0:  # graphdbg-expect: graph_break
        return x * 2.0
    return x - 1.0


def rescale(x):
    peak = x.abs().max().item()  # graphdbg-expect: graph_break
    factor = 1.0 / peak if peak > 1.0 else 1.0
    return x * factor


def hashed_lookup(table, name):
    bucket = zlib.crc32(name.encode("utf-8")) % table.shape[0]  # graphdbg-expect: graph_break
    return table[bucket] * 0.5


def log_stats(name, t):
    print(f"{name}: mean={t.mean().item():.4f}")  # graphdbg-expect: graph_break


class Block(nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.fc1 = nn.Linear(d, 2 * d)
        self.fc2 = nn.Linear(2 * d, d)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        log_stats("block.hidden", h)
        return x + self.fc2(h)


def main():
    args = parse_args("Graph breaks with several different causes.")
    torch.manual_seed(0)

    x = torch.randn(4, 16)
    w = torch.randn(16, 16)
    table = torch.randn(8, 16)
    block = Block().eval()

    c_debug_project = torch.compile(debug_project, backend=args.backend)
    c_gated = torch.compile(gated, backend=args.backend)
    c_rescale = torch.compile(rescale, backend=args.backend)
    c_hashed_lookup = torch.compile(hashed_lookup, backend=args.backend)
    c_block = torch.compile(block, backend=args.backend)

    with torch.no_grad():
        outputs = {
            "projected": c_debug_project(x, w),
            "gated": c_gated(x),
            "rescaled": c_rescale(x * 3.0),
            "hashed": c_hashed_lookup(table, "user_country"),
            "block": c_block(x),
        }

    if args.save:
        save_outputs(outputs, args.save)
    total = sum(v.sum().item() for v in outputs.values())
    print(f"graph_breaks: 5 compiled functions ran, output checksum {total:.4f}")


if __name__ == "__main__":
    main()
