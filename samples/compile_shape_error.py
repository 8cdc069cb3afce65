"""A shape error that only exists when compiled: eager runs, torch.compile fails.

A small sequence model adds a learned positional embedding of fixed length
(16 positions) to its input. The training script marks the sequence length
dynamic (``torch._dynamo.mark_dynamic(x, 1)``) so that later batches with
other lengths reuse one graph. Eager runs fine on the 16-token batch; but to
add a 16-row table, the compiled graph must assume the length *is* 16, which
contradicts "dynamic": Dynamo raises ConstraintViolationError at compile
time, from guard code far from the model, with the offending line only in
the error text's "User stack".

Expected graphdbg findings: one compile_error at the line marked below (the
add that specialised the length), with torch's advice as the message; the
program still ends with the same exception and exit status 1.
"""

import torch
import torch.nn as nn
from sample_cli import parse_args


class Encoder(nn.Module):
    def __init__(self, dim=32, max_len=16):
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.pos = nn.Parameter(torch.randn(max_len, dim) * 0.02)

    def forward(self, x):
        h = self.proj(x)
        h = h + self.pos  # graphdbg-expect: compile_error
        return torch.relu(h).mean(1)


def main():
    args = parse_args(__doc__.splitlines()[0], "torch.compile backend (default: inductor)")
    torch.manual_seed(0)
    model = Encoder()
    x = torch.randn(4, 16, 32)
    print("eager:", tuple(model(x).shape))
    torch._dynamo.mark_dynamic(x, 1)  # sequence length varies between batches
    compiled = torch.compile(model, backend=args.backend)
    print("compiled:", tuple(compiled(x).shape))


if __name__ == "__main__":
    main()
