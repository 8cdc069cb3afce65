"""Exporter numerics that ONNX Runtime 1.32 gets wrong on torch 2.13's
dynamo exporter, each on its own line of one model: log-sum-exp terms that
overflow for large |x|, label smoothing off, NaN ignored by max/amax/argmax.
One export, checked by graphdbg against the exported program node by node."""
import torch
import torch.nn.functional as F


class Numerics(torch.nn.Module):
    def forward(self, x, y, target, nan):
        a = torch.logaddexp(x, y)  # LOGADDEXP_LINE
        b = F.binary_cross_entropy_with_logits(x, torch.sigmoid(y), reduction="none")  # BCE_LINE
        c = torch.special.log_ndtr(x)  # LOG_NDTR_LINE
        d = F.cross_entropy(y, target, label_smoothing=0.1)  # SMOOTHING_LINE
        e = nan.max()  # MAX_LINE
        f = nan.amax(dim=1)  # AMAX_LINE
        g = nan.argmax(dim=1)  # ARGMAX_LINE
        return a, b, c, d, e, f, g


torch.manual_seed(0)
x = torch.tensor([[-200.0, -50.0, 0.5, 50.0, 200.0, 1.0]]).repeat(4, 1)
y = torch.tensor([[-200.0, -40.0, 0.2, 60.0, 150.0, -1.0]]).repeat(4, 1)
target = torch.tensor([0, 3, 4, 5])
nan = torch.randn(4, 6)
nan[:, 2] = float("nan")
model = Numerics().eval()
program = torch.onnx.export(model, (x, y, target, nan), dynamo=True, verbose=False)  # EXPORT_CALL


def digest(t: torch.Tensor) -> list[str]:
    return [v.hex() for v in t.double().flatten()[:8].tolist()]


for name, out in zip("abcdefg", model(x, y, target, nan)):
    print(name, digest(out))
