"""The design note's model, exported by the TorchScript exporter
(dynamo=False) and run in the program's own ONNX Runtime session on inputs
of both branches (tests/e2e/test_export_torchscript.py); then a clean CNN with a
dynamic batch, its session run on two batch sizes. Run from its own folder:
it writes model.onnx and cnn.onnx there, and prints the outputs."""

import numpy as np
import onnxruntime
import torch


class Branchy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear1 = torch.nn.Linear(10, 10)
        self.linear2 = torch.nn.Linear(10, 2)

    def forward(self, x):
        if x.mean() > 0.5:  # MARK IF_LINE
            x = self.linear1(x)
        else:
            x = torch.relu(self.linear1(x))
        return self.linear2(x)


class SmallCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.pool = torch.nn.AdaptiveAvgPool2d(1)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(self.pool(torch.relu(self.conv(x))).flatten(1))


def show(name, values):
    print(name, np.array2string(values, precision=9, floatmode="fixed"), values.tobytes().hex())


torch.manual_seed(0)
model = Branchy()
torch.onnx.export(model, torch.randn(1, 10), "model.onnx", input_names=['input'],  # MARK EXPORT_CALL
                  output_names=['output'], dynamic_axes={'input': {0: 'batch_size'}}, dynamo=False)
session = onnxruntime.InferenceSession("model.onnx")
rng = np.random.default_rng(0)
low = (rng.random((3, 10), dtype=np.float32) - 0.5)          # mean < 0.5: the traced branch
high = (rng.random((3, 10), dtype=np.float32) + 1.0)         # mean > 0.5: the other one
show("low", session.run(None, {"input": low})[0])   # MARK RUN_LOW
show("high", session.run(None, {"input": high})[0])  # MARK RUN_HIGH

cnn = SmallCNN().eval()
torch.onnx.export(cnn, torch.randn(2, 3, 16, 16), "cnn.onnx", input_names=['image'],  # MARK CNN_EXPORT
                  output_names=['logits'], dynamic_axes={'image': {0: 'batch'}}, dynamo=False)
cnn_session = onnxruntime.InferenceSession("cnn.onnx")
for batch in (1, 5):
    images = rng.standard_normal((batch, 3, 16, 16), dtype=np.float32)
    show(f"cnn{batch}", cnn_session.run(["logits"], {"image": images})[0])  # MARK CNN_RUN
