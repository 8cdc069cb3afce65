"""A clean fp32 model for compiled-vs-eager comparison: no divergence anywhere.

``CleanNet`` chains the three usual model families in one module: a small CNN
(Conv2d, BatchNorm2d in eval mode, ReLU, max pooling, a second conv block),
whose feature map becomes 64 tokens of width 32; one pre-LayerNorm
transformer block (hand-written multi-head attention with softmax, residual,
LayerNorm, GELU MLP); and an MLP head (mean over tokens, Linear-ReLU-Linear).
It is compiled with ``--backend`` (default ``inductor``) and called twice on
inputs of the same shape under ``torch.no_grad()``.

Compiled and eager outputs agree to float32 rounding (the sample prints the
max abs difference, about 1e-6 with inductor, 0 with aot_eager): inductor
reorders reductions and fuses ops, which changes the last bits, not the
values.

Expected graphdbg findings: none -- 1 graph, no graph breaks, no recompiles,
and zero divergence or precision findings when each node of the compiled
graph is checked against eager.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from sample_cli import parse_args, save_outputs


class CleanNet(nn.Module):
    def __init__(self, d=32, n_heads=4, n_classes=10):
        super().__init__()
        self.n_heads = n_heads
        # CNN
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(16)
        self.embed = nn.Linear(16, d)
        # transformer block
        self.norm1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.norm2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 2 * d)
        self.fc2 = nn.Linear(2 * d, d)
        # MLP head
        self.head1 = nn.Linear(d, d)
        self.head2 = nn.Linear(d, n_classes)

    def forward(self, img):
        f = F.max_pool2d(F.relu(self.bn1(self.conv1(img))), 2)
        f = F.relu(self.bn2(self.conv2(f)))
        x = self.embed(f.flatten(2).transpose(1, 2))

        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(d, dim=-1)
        q = q.view(b, t, self.n_heads, d // self.n_heads).transpose(1, 2)
        k = k.view(b, t, self.n_heads, d // self.n_heads).transpose(1, 2)
        v = v.view(b, t, self.n_heads, d // self.n_heads).transpose(1, 2)
        attn = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d // self.n_heads), dim=-1)
        x = x + self.proj((attn @ v).transpose(1, 2).reshape(b, t, d))
        x = x + self.fc2(F.gelu(self.fc1(self.norm2(x))))

        return self.head2(F.relu(self.head1(x.mean(dim=1))))


def main():
    args = parse_args("Clean fp32 CNN + transformer block + MLP: compiled matches eager.")
    torch.manual_seed(0)

    model = CleanNet().eval()
    with torch.no_grad():  # non-trivial eval-mode BatchNorm statistics
        for bn in (model.bn1, model.bn2):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 1.5)
    compiled = torch.compile(model, backend=args.backend)

    outputs = {}
    diff = 0.0
    with torch.no_grad():
        for step in range(2):
            img = torch.randn(2, 3, 16, 16)
            outputs[f"out_{step}"] = out = compiled(img)
            diff = max(diff, (out - model(img)).abs().max().item())

    if args.save:
        save_outputs(outputs, args.save)
    total = sum(v.sum().item() for v in outputs.values())
    print(f"clean_compare: 2 calls, max |compiled - eager| = {diff:.3e}, output checksum {total:.4f}")


if __name__ == "__main__":
    main()
