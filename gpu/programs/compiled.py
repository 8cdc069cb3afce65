"""A model compiled with inductor (triton kernels on CUDA): a few training
steps (graphdbg checks the first calls against eager), then inference calls
timed in the steady state."""

import torch

from common import Net, args, report, timed

a = args(lambda p: p.add_argument("--calls", type=int, default=200))
torch.manual_seed(0)
model = Net(a.width, layers=2).to(a.device)
cmodel = torch.compile(model)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
idx = torch.randint(0, 1024, (8, 128), device=a.device)
target = torch.randint(0, 1024, (8, 128), device=a.device)

t0 = timed(a.device)
for _ in range(4):
    loss = torch.nn.functional.cross_entropy(cmodel(idx).flatten(0, 1), target.flatten())
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
t1 = timed(a.device)

with torch.no_grad():
    for _ in range(5):
        cmodel(idx)
    t2 = timed(a.device)
    for _ in range(a.calls):
        out = cmodel(idx)
    t3 = timed(a.device)
report(train_s=t1 - t0, call_us=(t3 - t2) / a.calls * 1e6, out_sum=float(out.float().sum()))
