"""DDP + torch.compile on gloo, then FSDP2 (fully_shard) + torch.compile: a
clean job (no false alarm expected). Prints each rank's losses bit for bit
(float.hex), which the tests compare with a plain torchrun of this file."""
import os

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(256, 256) for _ in range(6)])
        self.head = torch.nn.Linear(256, 8)

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return self.head(x)


torch.manual_seed(0)
model = Net()
ddp = DDP(model, bucket_cap_mb=1)        # 6 x 257 KiB of weights: 2 buckets
cmodel = torch.compile(ddp, backend="aot_eager")
opt = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.Generator().manual_seed(rank)
losses = []
for step in range(3):
    x = torch.randn(8, 256, generator=data)
    loss = cmodel(x).square().mean()                 # DDP_CALL
    loss.backward()
    opt.step()
    opt.zero_grad()
    losses.append(loss.item())

class Small(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(16, 32)
        self.b = torch.nn.Linear(32, 4)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


torch.manual_seed(1)
small = Small()
if os.environ.get("SKIP_FSDP") != "1":
    fully_shard(small.a)
    fully_shard(small.b)
    fully_shard(small)
    opt2 = torch.optim.SGD(small.parameters(), lr=0.01)

    @torch.compile(backend="aot_eager")
    def fsdp_loss(x):
        return small(x).square().mean()

    for step in range(2):
        loss = fsdp_loss(torch.randn(8, 16, generator=data))
        loss.backward()
        opt2.step()
        opt2.zero_grad()
        losses.append(loss.item())

print(f"losses rank {rank}: " + " ".join(v.hex() for v in losses), flush=True)
dist.destroy_process_group()
