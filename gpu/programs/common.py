"""What the GPU check's programs share: the device, a small GPT-like block,
and one JSON line of the program's own figures (read by gpu/check.py)."""

from __future__ import annotations

import argparse
import json
import time

import torch
from torch import nn


def args(extra=None) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--width", type=int, default=512)
    if extra:
        extra(p)
    return p.parse_args()


class Block(nn.Module):
    def __init__(self, width: int, heads: int = 8) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.fc = nn.Linear(width, 4 * width)
        self.out = nn.Linear(4 * width, width)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.out(torch.nn.functional.gelu(self.fc(self.ln2(x))))


class Net(nn.Module):
    def __init__(self, width: int, layers: int = 4, vocab: int = 1024) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, width)
        self.blocks = nn.Sequential(*[Block(width) for _ in range(layers)])
        self.head = nn.Linear(width, vocab)

    def forward(self, idx):
        return self.head(self.blocks(self.emb(idx)))


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(device: str):
    sync(device)
    return time.perf_counter()


def report(**figures) -> None:
    print("GPU-CHECK " + json.dumps(figures), flush=True)
