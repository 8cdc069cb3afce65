"""Eager-capture overhead of `graphdbg run --values TIER` against plain eager.

Measured interleaved in one process with torch threads = 1 (these machines are
noisy): each round times the same workload once plain and once under a fresh
capture session, and the reported figure is the median of per-round ratios.

    python benchmarks/eager_overhead.py [--tier stats] [--rounds 7]
    python benchmarks/eager_overhead.py --tier none,health,stats --workload tiny-ops

Workloads: a GPT-2-like model built from a transformers config (random
weights, no download) and a net of many tiny elementwise ops.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import torch


def gpt2_like(batch: int = 2, seq: int = 64, n_layer: int = 4, n_embd: int = 256):
    """A no-grad forward of a GPT-2-like model (random weights, no download)."""
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(n_layer=n_layer, n_embd=n_embd, n_head=4, vocab_size=1000,
                     n_positions=max(128, seq), bos_token_id=999, eos_token_id=999,
                     attn_implementation="eager")
    model = GPT2LMHeadModel(cfg).eval()
    ids = torch.randint(0, cfg.vocab_size, (batch, seq))

    def step():
        with torch.no_grad():
            return model(ids).logits
    step.model, step.ids = model, ids
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


@contextmanager
def capture_session(path: str, tier: str, max_ops: int = 10_000_000):
    """A graphdbg capture session writing `path`, as `graphdbg run --values TIER`
    starts one; yields the session."""
    from graphdbg.hooks import Session
    from graphdbg.core.options import CaptureOptions

    session = Session(path, CaptureOptions(values=tier, max_ops=max_ops))
    session.start()
    try:
        yield session
    finally:
        session.stop()


def measure(name: str, fn, tier: str, rounds: int, reps: int, warm: bool = False) -> dict:
    fn()  # warm up
    ratios, plain_s, captured_s, ops = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            plain = timed(fn, reps)
            with capture_session(str(Path(tmp) / f"{name}{r}.run"), tier) as session:
                mode = session._ctx.eager_mode  # its rows: the ops it recorded
                if warm:  # steady state: first-call interning and naming done
                    fn()
                    rows0 = mode.rows if mode is not None else 0
                else:
                    rows0 = 0
                captured = timed(fn, reps)
            ops.append((mode.rows - rows0) / reps if mode is not None else 0)
            ratios.append(captured / plain)
            plain_s.append(plain)
            captured_s.append(captured)
    # overhead per recorded op, per round
    per_op = [(c - p) / o * 1e6 for c, p, o in zip(captured_s, plain_s, ops) if o]
    return {"workload": name, "tier": tier, "plain_ms": statistics.median(plain_s) * 1e3,
            "captured_ms": statistics.median(captured_s) * 1e3,
            "ratio": statistics.median(ratios), "min_ratio": min(ratios), "max_ratio": max(ratios),
            "ops": statistics.median(ops),
            "per_op_us": statistics.median(per_op) if per_op else 0.0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tier", default="stats",
                    help="none, health, stats or full; several separated by commas")
    ap.add_argument("--workload", default="gpt2-like,tiny-ops",
                    help="gpt2-like and/or tiny-ops, separated by commas")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--warm", action="store_true",
                    help="run the workload once under capture before timing it "
                         "(excludes each session's first-call costs)")
    args = ap.parse_args()
    tiers = args.tier.split(",")
    for tier in tiers:
        if tier not in ("none", "health", "stats", "full"):
            ap.error(f"unknown tier {tier!r}")
    builders = {"gpt2-like": gpt2_like, "tiny-ops": tiny_ops}
    names = args.workload.split(",")
    for name in names:
        if name not in builders:
            ap.error(f"unknown workload {name!r}")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    workloads = [(name, builders[name]()) for name in names]
    for tier in tiers:
        for name, fn in workloads:
            m = measure(name, fn, tier, args.rounds, args.reps, args.warm)
            print(f"{m['workload']:10s} tier={m['tier']:6s} plain {m['plain_ms']:8.2f} ms  "
                  f"captured {m['captured_ms']:8.2f} ms  overhead x{m['ratio']:.2f} "
                  f"(rounds: x{m['min_ratio']:.2f}..x{m['max_ratio']:.2f})  "
                  f"{m['ops']:.0f} ops/step, {m['per_op_us']:.1f} us/op", flush=True)


if __name__ == "__main__":
    main()
