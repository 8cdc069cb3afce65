"""A compiled model trained for a few steps with AdamW.

Demonstrates a typical compiled training loop: the model is wrapped with
``torch.compile``; each of five steps (on one fixed batch) runs the compiled
forward, a cross-entropy loss, backward (through the compiled backward
graph), an AdamW step and ``zero_grad``.  The batch shape never changes and
the model stays in train mode, so nothing recompiles.

Expected graphdbg findings: none -- no graph breaks and no recompiles.
Torch compiles one forward graph (unique_graphs == 1); AOTAutograd also
compiles its backward.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from sample_cli import parse_args, save_outputs


class Net(nn.Module):
    def __init__(self, d_in=20, d_hidden=64, n_classes=3):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.norm = nn.LayerNorm(d_hidden)
        self.fc2 = nn.Linear(d_hidden, d_hidden)
        self.head = nn.Linear(d_hidden, n_classes)

    def forward(self, x):
        h = F.gelu(self.norm(self.fc1(x)))
        h = h + F.gelu(self.fc2(h))
        return self.head(h)


def main():
    args = parse_args("Compiled model trained with AdamW for a few steps.")
    torch.manual_seed(0)

    model = Net()
    compiled = torch.compile(model, backend=args.backend)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)

    inputs = torch.randn(16, 20)
    targets = torch.randint(0, 3, (16,))

    losses = []
    for _ in range(5):
        logits = compiled(inputs)
        loss = F.cross_entropy(logits, targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.detach())

    outputs = {"logits": logits, "losses": torch.stack(losses)}
    outputs.update({f"param.{name}": p for name, p in model.named_parameters()})
    if args.save:
        save_outputs(outputs, args.save)
    print(f"train_loop: 5 steps, loss {losses[0].item():.4f} -> {losses[-1].item():.4f}")


if __name__ == "__main__":
    main()
