"""The stats tier's cost on the GPT-2-like forward, beside torch.profiler's.

In one process, as `make bench`'s capture section does: each tool entered
once per round around 3 forwards, the order rotated from round to round,
median of the rounds' ratios to plain eager in the same round. Times are
wall time and this thread's CPU time (on a shared machine the CPU time is
steadier; graphdbg and the profiler do their work on this thread).

    python benchmarks/stats_tier.py [--rounds 5] [--reps 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from contextlib import nullcontext
from itertools import count
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from eager_overhead import capture_session  # noqa: E402
from workloads import gpt2_forward  # noqa: E402


def _profiler():
    from torch.profiler import ProfilerActivity, profile
    return profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    tmp = Path(tempfile.mkdtemp(prefix="graphdbg-stats-"))
    n = count()
    tools = {
        "plain eager": nullcontext,
        "torch.profiler": _profiler,
        "graphdbg none": lambda: capture_session(str(tmp / f"c{next(n)}.run"), "none"),
        "graphdbg stats": lambda: capture_session(str(tmp / f"c{next(n)}.run"), "stats"),
    }
    fn = gpt2_forward()
    names = list(tools)
    wall = {k: [] for k in names}
    cpu = {k: [] for k in names}
    for r in range(args.rounds + 1):   # round 0 warms every tool up, not counted
        k = r % len(names)
        for name in names[k:] + names[:k]:
            fn()
            with tools[name]():
                w0, c0 = time.perf_counter(), time.thread_time()
                for _ in range(args.reps):
                    fn()
                w, c = time.perf_counter() - w0, time.thread_time() - c0
            if r:
                wall[name].append(w)
                cpu[name].append(c)
    out = {}
    for name in names[1:]:
        rw = [a / b for a, b in zip(wall[name], wall["plain eager"])]
        rc = [a / b for a, b in zip(cpu[name], cpu["plain eager"])]
        out[name] = {"wall_ratio": statistics.median(rw), "wall_range": [min(rw), max(rw)],
                     "cpu_ratio": statistics.median(rc), "cpu_range": [min(rc), max(rc)]}
    out["plain eager"] = {"wall_s": statistics.median(wall["plain eager"]) / args.reps,
                          "cpu_s": statistics.median(cpu["plain eager"]) / args.reps}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
