"""A clean torch.compile run: a small MLP compiled once and called several times.

Demonstrates the baseline "nothing to see" case: an ``nn.Module`` MLP is
compiled with ``torch.compile`` and called four times with inputs of the same
shape, dtype and device, with grad mode and train/eval mode unchanged.

Expected graphdbg findings: none -- no graph breaks and no recompiles.
Exactly one graph is compiled (torch counts unique_graphs == 1).
"""

import torch
import torch.nn as nn
from sample_cli import parse_args, save_outputs


class MLP(nn.Module):
    def __init__(self, d_in=32, d_hidden=64, d_out=10):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.fc2 = nn.Linear(d_hidden, d_hidden)
        self.fc3 = nn.Linear(d_hidden, d_out)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        h = torch.relu(self.fc2(h)) + h
        return self.fc3(h)


def main():
    args = parse_args("Compiled MLP, no graph breaks, no recompiles.")
    torch.manual_seed(0)

    model = MLP().eval()
    compiled = torch.compile(model, backend=args.backend)

    outputs = {}
    with torch.no_grad():
        for step in range(4):
            x = torch.randn(8, 32)
            outputs[f"out_{step}"] = compiled(x)

    if args.save:
        save_outputs(outputs, args.save)
    total = sum(v.sum().item() for v in outputs.values())
    print(f"mlp_clean: 4 calls, output checksum {total:.4f}")


if __name__ == "__main__":
    main()
