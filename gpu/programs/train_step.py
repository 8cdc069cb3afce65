"""An eager training loop on the GPU: forward, loss, backward, SGD step.
Run plain and under `graphdbg run` (and `--profile`) by gpu/check.py."""

import torch

from common import Net, args, report, timed

a = args()
torch.manual_seed(0)
model = Net(a.width).to(a.device)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
idx = torch.randint(0, 1024, (8, 128), device=a.device)
target = torch.randint(0, 1024, (8, 128), device=a.device)


def step():
    logits = model(idx)
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), target.flatten())
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


step()
t0 = timed(a.device)
for _ in range(a.steps):
    loss = step()
t1 = timed(a.device)
report(step_ms=(t1 - t0) / a.steps * 1e3, loss=float(loss))
