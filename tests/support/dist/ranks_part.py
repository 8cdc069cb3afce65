"""Ranks that part ways: rank 1 recompiles and breaks a graph where rank 0
does not, then the ranks' compiled graphs issue different collectives and
the job hangs: rank 0 waits in its second all_reduce, which rank 1 never
issues (until the process group's timeout, or a kill). On gloo a rank that
went on to another collective would crash the job on the mismatch; here
rank 1 is busy elsewhere, as a rank stuck in its data loader is."""
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc

dist.init_process_group("gloo", timeout=timedelta(seconds=float(os.environ.get("PG_TIMEOUT", "600"))))
rank = dist.get_rank()


@torch.compile(backend="eager")
def scaled(x, s):
    return x * s + 1                                     # SCALED_BODY


@torch.compile(backend="eager")
def head(x):
    y = x.relu()
    if rank == 1:
        print("rank 1 logs here", file=sys.stderr)      # RANK_BREAK
    return y.sum()


@torch.compile(backend="eager")                          # SYNCED_DEF
def synced(x):
    y = fc.all_reduce(x, "sum", dist.group.WORLD)        # FIRST_ALLREDUCE
    if rank == 0:
        y = fc.all_reduce(y * 2, "sum", dist.group.WORLD)    # RANK0_ALLREDUCE
    return y + 1


for step in range(3):
    s = 2.0 if (rank == 1 and step == 2) else 1.0        # RANK_SCALE
    out = scaled(torch.ones(4) * (step + 1), s)
    head(out)
    dist.all_reduce(out)
print(f"rank {rank} in step", flush=True)
synced(torch.ones(4))                                    # SYNCED_CALL
if rank == 1:
    time.sleep(float(os.environ.get("RANK1_SLEEP", "600")))  # RANK1_SLEEP: busy elsewhere
print(f"rank {rank} done", flush=True)
dist.destroy_process_group()
