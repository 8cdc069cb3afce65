"""Two DDP ranks on one device (torchrun --nproc-per-node 2): NCCL where it
allows two ranks on one GPU, else gloo (--backend)."""

import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from common import Net, args, report, timed

a = args(lambda p: p.add_argument("--backend", default="nccl"))
dist.init_process_group(a.backend)
rank = dist.get_rank()
if a.device.startswith("cuda"):
    torch.cuda.set_device(0)
torch.manual_seed(rank)
model = DistributedDataParallel(Net(a.width, layers=2).to(a.device))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
idx = torch.randint(0, 1024, (4, 64), device=a.device)
target = torch.randint(0, 1024, (4, 64), device=a.device)
t0 = timed(a.device)
for _ in range(a.steps):
    loss = torch.nn.functional.cross_entropy(model(idx).flatten(0, 1), target.flatten())
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
t1 = timed(a.device)
# every rank's parameters agree after the all-reduced steps
p = next(model.parameters()).detach().clone()
dist.all_reduce(p)
same = bool(torch.allclose(p / dist.get_world_size(), next(model.parameters())))
if rank == 0:
    report(step_ms=(t1 - t0) / a.steps * 1e3, backend=a.backend, params_agree=same,
           world=int(os.environ.get("WORLD_SIZE", "1")))
dist.destroy_process_group()
