"""Three different recompile causes on compiled functions and modules.

Demonstrates guard failures that force Dynamo to compile the same code again:

1. input shape change: ``normalize`` is compiled with ``dynamic=False`` and
   is called with a (4, 16) tensor, then again with a (6, 16) tensor, so the
   size guard fails and it recompiles (no dynamic-shape fallback);
2. a Python scalar argument whose value changes: ``scaled_residual`` takes a
   float ``scale``; Dynamo specializes on the float's value, so calling it
   with 0.5 and then 2.0 recompiles;
3. a train/eval toggle: a compiled module containing ``BatchNorm1d`` and
   ``Dropout`` is called in train mode, then ``model.eval()`` is called and the
   next call recompiles because the guard on ``training`` fails.

Grad mode is kept the same throughout so each recompile has a single cause.
None of the compiled code graph-breaks.

Expected: 3 recompiles at the failed guards' lines (marked below: the size
guard at the call, ``scale`` where it is used, ``training`` where ``forward``
calls BatchNorm/Dropout), no graph breaks, 6 graphs (3 compiles + 3 recompiles).
"""

import torch
import torch.nn as nn
from sample_cli import parse_args, save_outputs


def normalize(x):
    return (x - x.mean(dim=-1, keepdim=True)) / (x.std(dim=-1, keepdim=True) + 1e-5)


def scaled_residual(x, scale):
    return x + scale * torch.tanh(x)  # graphdbg-expect: recompile


class Classifier(nn.Module):
    def __init__(self, d=16, n_classes=4):
        super().__init__()
        self.fc1 = nn.Linear(d, 32)
        self.bn = nn.BatchNorm1d(32)
        self.drop = nn.Dropout(0.1)
        self.fc2 = nn.Linear(32, n_classes)

    def forward(self, x):
        h = self.drop(torch.relu(self.bn(self.fc1(x))))  # graphdbg-expect: recompile
        return self.fc2(h)


def main():
    args = parse_args("Three recompile causes.")
    torch.manual_seed(0)
    outputs = {}

    with torch.no_grad():
        # 1. Shape change with dynamic=False.
        c_normalize = torch.compile(normalize, backend=args.backend, dynamic=False)
        outputs["norm_small"] = c_normalize(torch.randn(4, 16))
        outputs["norm_large"] = c_normalize(torch.randn(6, 16))  # graphdbg-expect: recompile

        # 2. A Python float argument whose value changes.
        c_scaled = torch.compile(scaled_residual, backend=args.backend)
        x = torch.randn(4, 16)
        outputs["scaled_half"] = c_scaled(x, 0.5)
        outputs["scaled_double"] = c_scaled(x, 2.0)

        # 3. Train/eval toggle of a module with BatchNorm and Dropout.
        model = Classifier()
        c_model = torch.compile(model, backend=args.backend)
        batch = torch.randn(8, 16)
        model.train()
        outputs["logits_train"] = c_model(batch)
        model.eval()
        outputs["logits_eval"] = c_model(batch)

    outputs["bn_running_mean"] = model.bn.running_mean
    outputs["bn_running_var"] = model.bn.running_var
    if args.save:
        save_outputs(outputs, args.save)
    total = sum(v.sum().item() for k, v in outputs.items() if k != "logits_train")
    print(f"recompiles: 6 compiled calls, output checksum {total:.4f}")


if __name__ == "__main__":
    main()
