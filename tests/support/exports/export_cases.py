"""Exports that fail or fix sizes, and a float16 ONNX export: each finding at
its own marked line (tests/e2e/test_exports.py)."""
import io
import warnings

import torch
from torch.export import Dim

warnings.simplefilter("ignore", DeprecationWarning)


class Airy(torch.nn.Module):
    def forward(self, x):
        y = torch.sin(x)
        y = torch.special.airy_ai(y)  # NO_TRANSLATION
        return y + 1


try:
    torch.onnx.export(Airy(), (torch.randn(3),), dynamo=True, verbose=False)  # AIRY_CALL
except Exception as exc:
    print("export failed:", type(exc).__name__)

try:  # the TorchScript exporter: its failure at the op it translates
    torch.onnx.export(Airy(), (torch.randn(3),), io.BytesIO(), dynamo=False)  # LEGACY_CALL
except Exception as exc:
    print("legacy export failed:", type(exc).__name__)


class Halves(torch.nn.Module):
    def forward(self, x):
        a, b = x.split(x.shape[0] // 2)
        if x.shape[0] > 8:  # RANGE_GUARD
            return a * b
        return a + b


class Rows(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        return y.reshape(4, 16)  # FIXES_BATCH


batch = Dim("batch", min=2, max=64)
try:
    torch.export.export(Halves(), (torch.randn(16, 4),), dynamic_shapes={"x": {0: batch}})  # RANGE_CALL
except Exception as exc:
    print("export failed:", type(exc).__name__)

try:
    torch.export.export(Rows(), (torch.randn(4, 16),), dynamic_shapes={"x": {0: Dim("rows")}})  # NAMED_CALL
except Exception as exc:
    print("export failed:", type(exc).__name__)

ep = torch.export.export(Rows(), (torch.randn(4, 16),), dynamic_shapes={"x": {0: Dim.AUTO}})  # AUTO_CALL
print("exported", ep.module()(torch.randn(4, 16)).shape)


class Gate(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.use_relu = True

    def forward(self, x):
        if self.use_relu:
            return torch.relu(x) + 1  # GATE_RELU
        return torch.tanh(x) + 1  # GATE_TANH


gate = Gate()
gated = torch.export.export(gate, (torch.randn(8),)).module()  # GATE_CALL
print("gate", gated(torch.randn(8)).sum().item())
gate.use_relu = False   # the exported program still takes the relu branch
print("gate again", gated(torch.randn(8)).sum().item())  # GATE_AGAIN


class Waves(torch.nn.Module):
    def forward(self, x):
        angles = x * 5.0
        return torch.sin(angles) + torch.exp(x) / 3  # HALF_SIN


torch.manual_seed(0)
model = Waves().eval().half()
x = (torch.randn(64, 512) * 2).half()
program = torch.onnx.export(model, (x,), dynamo=True, verbose=False)  # HALF_CALL
print("sum", program(x)[0].float().sum().item())


class Noisy(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.fc(x)).relu()  # DROPOUT_LINE


noisy = Noisy()   # still in training mode: the export keeps the dropout
torch.onnx.export(noisy, (torch.randn(4, 8),), dynamo=True, verbose=False)
