"""Plain eager PyTorch, no torch.compile anywhere.

Demonstrates a small conv net (Conv2d, BatchNorm2d, ReLU, MaxPool2d, Linear)
trained eagerly for three iterations: forward, cross-entropy loss, backward,
SGD step, zero_grad.  ``--backend`` is accepted for a uniform command line but
is unused, since nothing is compiled.

Expected graphdbg findings: none -- no compiled frames, no graphs, no graph
breaks and no recompiles (torch counts unique_graphs == 0).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from sample_cli import parse_args, save_outputs


class SmallConvNet(nn.Module):
    def __init__(self, n_classes=5):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, kernel_size=3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, kernel_size=3, padding=1)
        self.bn2 = nn.BatchNorm2d(16)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(16 * 4 * 4, n_classes)

    def forward(self, x):
        x = self.pool(F.relu(self.bn1(self.conv1(x))))
        x = self.pool(F.relu(self.bn2(self.conv2(x))))
        return self.fc(x.flatten(1))


def main():
    args = parse_args("Eager-only conv net training, no torch.compile.", backend_help="unused: nothing is compiled")
    torch.manual_seed(0)

    model = SmallConvNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    images = torch.randn(8, 3, 16, 16)
    labels = torch.randint(0, 5, (8,))

    losses = []
    for _ in range(3):
        logits = model(images)
        loss = F.cross_entropy(logits, labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.detach())

    outputs = {"logits": logits, "losses": torch.stack(losses)}
    outputs.update({f"param.{name}": p for name, p in model.named_parameters()})
    if args.save:
        save_outputs(outputs, args.save)
    print(f"eager_only: 3 steps, loss {losses[0].item():.4f} -> {losses[-1].item():.4f}")


if __name__ == "__main__":
    main()
