"""A custom ONNX translation with a wrong constant: the exported ONNX model's
gelu is off, ONNX Runtime gives other numbers than eager. Then the program
runs the ONNX program on new inputs, after changing a flag the forward reads
(the exported program kept the old value)."""
import torch
from onnxscript import opset18 as op


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 16)
        self.scale = 1.0

    def forward(self, x):
        h = self.fc1(x)
        h = torch.nn.functional.gelu(h, approximate="tanh")  # GELU_LINE
        h = self.fc2(h) * self.scale  # SCALE_LINE
        return h.softmax(-1)


def gelu_tanh(x, approximate: str = "tanh"):
    # 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))), with a wrong constant
    inner = op.Mul(op.Constant(value_float=0.7978845608), op.Add(
        x, op.Mul(op.Constant(value_float=0.44715), op.Mul(x, op.Mul(x, x)))))
    return op.Mul(op.Mul(op.Constant(value_float=0.5), x), op.Add(op.Constant(value_float=1.0),
                                                                   op.Tanh(inner)))


torch.manual_seed(0)
model = Block().eval()
x = torch.randn(4, 16)
program = torch.onnx.export(model, (x,), dynamo=True, verbose=False,  # EXPORT_CALL
                            custom_translation_table={torch.ops.aten.gelu.default: gelu_tanh})

def digest(t: torch.Tensor) -> list[str]:
    return [v.hex() for v in t.double().flatten()[:16].tolist()]


print("onnx output", digest(program(x)[0]))
print("eager output", digest(model(x)))
model.scale = 2.0   # the exported program still multiplies by 1.0
print("onnx again", digest(program(torch.randn(4, 16))[0]))  # SECOND_CALL
