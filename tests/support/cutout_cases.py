"""Graph breaks and recompiles of different shapes, for `graphdbg repro`'s
cut-outs (tests/e2e/test_repro_cutout.py): each compiled function is its own
case; the marked lines are where graphdbg places each finding."""

import math

import torch
import torch.nn as nn

LIMIT = 3.0


def _center(x):
    return x - x.mean()


@torch.compile(backend="eager")
def shout(x):
    y = _center(torch.sin(x)) * math.pi
    print("shout:", y.shape)  # graphdbg-expect: graph_break
    return y + 1


def report(t, tag):
    return t * t.sum().item()  # graphdbg-expect: graph_break


def pipeline(x, tag="p"):
    h = torch.cos(x) * 2
    return report(h, tag) + 1


def clipped(x):
    if x.max() > LIMIT:  # graphdbg-expect: graph_break
        return x.clamp(max=LIMIT)
    return x


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        h = self.fc(x)
        print("head", h.shape)  # graphdbg-expect: graph_break
        return h.relu()


def widen(x):
    return torch.cat([x, x * 2], dim=-1)


def repeat(x, n):
    return x.repeat(n, 1) + n  # graphdbg-expect: recompile


def pooled(x):
    return x.sum(0) / x.shape[0]


def main():
    torch.manual_seed(0)
    x = torch.randn(4, 8)
    with torch.no_grad():
        shout(x)
        torch.compile(pipeline, backend="eager")(x)
        torch.compile(clipped, backend="eager")(x)
        torch.compile(Head(), backend="eager")(x)
        w = torch.compile(widen, backend="eager", dynamic=False)
        w(x)
        w(torch.randn(6, 8))  # graphdbg-expect: recompile
        r = torch.compile(repeat, backend="eager")
        r(x, 2)
        r(x, 3)
        p = torch.compile(pooled, backend="eager", dynamic=True)
        p(torch.randn(5, 8))
        p(torch.randn(1, 8))  # graphdbg-expect: recompile
    print("cutout cases: done")


if __name__ == "__main__":
    main()
