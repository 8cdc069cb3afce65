"""The compiled steady-state probe of issue 34: what one compiled call costs.

An inductor-compiled MLP (Linear 256->512, GELU, Linear 512->512, LayerNorm,
Linear 512->256), batch 64, called 2,000 times under no_grad on one torch
thread after a warm-up (the compile, graphdbg's checks and kernel timing of
the first calls). A plain script: run it plain or under `graphdbg run`; it
prints its loop's time as JSON on its last stdout line, so process start and
the compile are left out (`make bench`'s `compiled` section runs it).

    python benchmarks/compiled_probe.py [--calls 2000] [--warmup 50]
        [--cprofile FILE]   profile the timed loop (cProfile, pstats file)
"""

from __future__ import annotations

import argparse
import cProfile
import json
import time

import torch


def probe_model() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 512),
        torch.nn.LayerNorm(512), torch.nn.Linear(512, 256)).eval()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--cprofile", default=None, help="write the timed loop's profile here")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    compiled = torch.compile(probe_model(), backend="inductor")
    x = torch.randn(64, 256)
    prof = cProfile.Profile() if args.cprofile else None
    with torch.no_grad():
        for _ in range(args.warmup):
            compiled(x)
        if prof is not None:
            prof.enable()
        t0 = time.perf_counter()
        for _ in range(args.calls):
            compiled(x)
        loop = time.perf_counter() - t0
        if prof is not None:
            prof.disable()
            prof.dump_stats(args.cprofile)
    print(json.dumps({"loop_s": loop, "per_call_us": loop / args.calls * 1e6,
                      "calls": args.calls}), flush=True)


if __name__ == "__main__":
    main()
