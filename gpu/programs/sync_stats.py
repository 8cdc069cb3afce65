"""An eager loop under torch.cuda.set_sync_debug_mode("error"): any
synchronisation with the host inside the loop raises. The loop itself has
none; under `graphdbg run --values stats` graphdbg must add none either
(statistics reduced on the device, read back through pinned memory and a
polled event)."""

import torch

from torch import nn

from common import Block, args, report, timed

a = args()
torch.manual_seed(0)
# no embedding: its backward on CUDA may read a count back from the device
model = nn.Sequential(*[Block(a.width) for _ in range(4)]).to(a.device)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(8, 128, a.width, device=a.device)
target = torch.randn(8, 128, a.width, device=a.device)
cuda = a.device.startswith("cuda")

t0 = timed(a.device)
if cuda:
    torch.cuda.set_sync_debug_mode("error")
for _ in range(a.steps):
    loss = torch.nn.functional.mse_loss(model(x), target)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
if cuda:
    torch.cuda.set_sync_debug_mode(0)
t1 = timed(a.device)
report(step_ms=(t1 - t0) / a.steps * 1e3, loss=float(loss), sync_debug="error" if cuda else "off")
