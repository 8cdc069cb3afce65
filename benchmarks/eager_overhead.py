"""Eager-capture overhead of `graphdbg run --values TIER` against plain eager.

Measured interleaved in one process with torch threads = 1 (these machines are
noisy): each round times the same workload once plain and once under a fresh
capture session, and the reported figure is the median of per-round ratios.

    python benchmarks/eager_overhead.py [--tier stats] [--rounds 7]

Workloads: a GPT-2-like model built from a transformers config (random
weights, no download) and a net of many tiny elementwise ops.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch


def gpt2_like():
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(n_layer=4, n_embd=256, n_head=4, vocab_size=1000, n_positions=128,
                     attn_implementation="eager")
    model = GPT2LMHeadModel(cfg).eval()
    ids = torch.randint(0, cfg.vocab_size, (2, 64))

    def step():
        with torch.no_grad():
            return model(ids).logits
    return step


def tiny_ops(n_ops: int = 400):
    x = torch.randn(16)

    def step():
        y = x
        for i in range(n_ops // 4):
            y = (y * 1.0001 + 0.001).relu() - 0.0001
        return y
    return step


def timed(fn, reps: int) -> float:
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps


def measure(name: str, fn, tier: str, rounds: int, reps: int) -> dict:
    from graphdbg.hooks import CaptureSession
    from graphdbg.runfile import RunWriter

    fn()  # warm up
    ratios, plain_s, captured_s = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            plain = timed(fn, reps)
            session = CaptureSession(RunWriter(str(Path(tmp) / f"{name}{r}.run")), values=tier,
                                     max_ops=10_000_000)
            session.start()
            try:
                captured = timed(fn, reps)
            finally:
                session.stop(exit_status=0, status="complete")
            ratios.append(captured / plain)
            plain_s.append(plain)
            captured_s.append(captured)
    return {"workload": name, "tier": tier, "plain_ms": statistics.median(plain_s) * 1e3,
            "captured_ms": statistics.median(captured_s) * 1e3,
            "ratio": statistics.median(ratios), "min_ratio": min(ratios), "max_ratio": max(ratios)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tier", default="stats", choices=("none", "health", "stats", "full"))
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    for name, fn in (("gpt2-like", gpt2_like()), ("tiny-ops", tiny_ops())):
        m = measure(name, fn, args.tier, args.rounds, args.reps)
        print(f"{m['workload']:10s} tier={m['tier']:6s} plain {m['plain_ms']:8.2f} ms  "
              f"captured {m['captured_ms']:8.2f} ms  overhead x{m['ratio']:.2f} "
              f"(rounds: x{m['min_ratio']:.2f}..x{m['max_ratio']:.2f})")


if __name__ == "__main__":
    main()
