"""Exporter numerics with the TorchScript exporter (dynamo=False), found at
their lines through the program's own ONNX Runtime session
(tests/e2e/test_export_ts_lines.py): binary_cross_entropy_with_logits, which the
exporter writes as log(sigmoid(x)) and ONNX Runtime overflows for large |x|,
after a loop of blocks (a file exported to a buffer, its session made from
the bytes); amax, whose ReduceMax ignores a NaN the model makes; and an op
the exporter cannot translate (logaddexp), the failure caught by the program.
Run from its own folder: it writes amax.onnx there and prints the outputs."""

import io

import numpy as np
import onnxruntime
import torch
import torch.nn.functional as F


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(6, 6)

    def forward(self, x):
        h = torch.tanh(self.linear(x))  # MARK BLOCK_LINE
        return x + 0.5 * h


class Scorer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block() for _ in range(3))

    def forward(self, x, target):
        for block in self.blocks:
            x = block(x)
        loss = F.binary_cross_entropy_with_logits(x * 20, target, reduction="none")  # MARK BCE_LINE
        return loss.sum(-1) + 1


class Peak(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.linspace(0.5, 1.5, 8))

    def forward(self, x, w):
        s = torch.log(w) + x * self.scale
        top = torch.amax(s, dim=-1)  # MARK AMAX_LINE
        return top * 2


class Soft(torch.nn.Module):
    def forward(self, a, b):
        return torch.logaddexp(a, b * 2)  # MARK LOGADDEXP_LINE


def show(name, values):
    print(name, np.array2string(values, precision=6, floatmode="fixed"), values.tobytes().hex())


torch.manual_seed(0)
rng = np.random.default_rng(0)
scorer = Scorer().eval()
buffer = io.BytesIO()
torch.onnx.export(scorer, (torch.randn(2, 6) * 0.01, torch.rand(2, 6)), buffer,  # MARK SCORER_EXPORT
                  input_names=["x", "target"], dynamic_axes={"x": {0: "b"}, "target": {0: "b"}},
                  dynamo=False)
session = onnxruntime.InferenceSession(buffer.getvalue())
target = rng.random((3, 6), dtype=np.float32)
small = (rng.standard_normal((3, 6), dtype=np.float32) * 0.01)
large = (rng.standard_normal((3, 6), dtype=np.float32) * 3.0)
show("small", session.run(None, {"x": small, "target": target})[0])   # MARK RUN_SMALL
show("large", session.run(None, {"x": large, "target": target})[0])   # MARK RUN_LARGE

peak = Peak().eval()
torch.onnx.export(peak, (torch.randn(3, 8), torch.rand(3, 8) + 0.5), "amax.onnx",  # MARK PEAK_EXPORT
                  input_names=["x", "w"], dynamo=False)
peak_session = onnxruntime.InferenceSession("amax.onnx")
x = rng.standard_normal((3, 8), dtype=np.float32)
w = rng.random((3, 8), dtype=np.float32) + 0.5
show("peak", peak_session.run(None, {"x": x, "w": w})[0])   # MARK RUN_CLEAN
w[1, 3] = -1.0   # log(-1): a NaN in one column of one row
show("nan", peak_session.run(None, {"x": x, "w": w})[0])   # MARK RUN_NAN

try:
    torch.onnx.export(Soft(), (torch.randn(3), torch.randn(3)), io.BytesIO(),  # MARK SOFT_EXPORT
                      dynamo=False)
except Exception as exc:
    print("export failed:", type(exc).__name__)
