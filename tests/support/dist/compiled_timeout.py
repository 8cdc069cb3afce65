"""A compiled collective that times out on one rank: rank 0 calls an
inductor-compiled all_reduce that rank 1 never joins (it is busy elsewhere),
so gloo's recv times out inside inductor's generated module
(torchinductor_<user>/xx/<hash>.py in the temp folder). The error belongs
at the user's compiled function and its call, not in the generated code
(tests/e2e/test_placement_generated.py)."""
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc

dist.init_process_group("gloo", timeout=timedelta(seconds=60))
rank = dist.get_rank()
# the all_reduce's own group, whose timeout is short: both ranks make it together
# right after init, well within it (the start-up, slower, is under init's; the
# store barrier of a new group waits at least 10 s)
pair = dist.new_group(timeout=timedelta(seconds=float(os.environ.get("PG_TIMEOUT", "2"))))


@torch.compile(backend="inductor")                     # MARK summed def
def summed(x):
    return fc.all_reduce(x, "sum", pair)                # MARK all_reduce


if rank == 1:
    time.sleep(60)     # busy elsewhere: rank 0 times out in its all_reduce; torchrun ends this rank
else:
    summed(torch.ones(4))                              # MARK summed call
