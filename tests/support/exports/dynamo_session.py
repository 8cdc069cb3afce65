"""The default exporter (dynamo=True) writing the ONNX file, both ways, and
the program's own ONNX Runtime session on it (tests/e2e/test_export_session.py):
a model whose logaddexp the exporter translates in a form that overflows for
large |x| (exported on small inputs, where it is right), its file written by
torch.onnx.export itself and by ONNXProgram.save, each run by an
InferenceSession on small and on large inputs (the saved one also from its
bytes); then a clean MLP run the same
way. Run from its own folder: it writes its .onnx files there and prints the
outputs."""

import io

import numpy as np
import onnxruntime
import torch


class LogSumExp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(6, 6)

    def forward(self, x, y):
        h = self.proj(x) * 0 + x
        return torch.logaddexp(h, y)  # MARK LOGADDEXP_LINE


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 16)
        self.fc2 = torch.nn.Linear(16, 3)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def show(name, values):
    print(name, np.array2string(values, precision=9, floatmode="fixed"), values.tobytes().hex())


torch.manual_seed(0)
model = LogSumExp().eval()
small = (torch.randn(2, 6), torch.randn(2, 6))
torch.onnx.export(model, small, "written.onnx", dynamo=True, verbose=False)  # MARK EXPORT_PATH
program = torch.onnx.export(model, small, dynamo=True, verbose=False)  # MARK EXPORT_SAVE
program.save("saved.onnx")  # MARK SAVE_CALL

rng = np.random.default_rng(0)
low = rng.standard_normal((2, 6), dtype=np.float32)
big_x = np.array([[-200.0, -50.0, 0.5, 50.0, 200.0, 1.0]] * 2, dtype=np.float32)
big_y = np.array([[-200.0, -40.0, 0.2, 60.0, 150.0, -1.0]] * 2, dtype=np.float32)
for name in ("written.onnx", "saved.onnx"):
    session = onnxruntime.InferenceSession(name)
    feeds = [i.name for i in session.get_inputs()]
    show(f"{name} small", session.run(None, {feeds[0]: low, feeds[1]: low * 0.5})[0])  # MARK RUN_SMALL
    show(f"{name} large", session.run(None, {feeds[0]: big_x, feeds[1]: big_y})[0])  # MARK RUN_LARGE

with open("saved.onnx", "rb") as fh:   # the same file, opened from its bytes
    from_bytes = onnxruntime.InferenceSession(fh.read())
feeds = [i.name for i in from_bytes.get_inputs()]
show("bytes large", from_bytes.run(None, {feeds[0]: big_x, feeds[1]: big_y})[0])  # MARK RUN_BYTES

mlp = Mlp().eval()
torch.onnx.export(mlp, (torch.randn(4, 6),), "mlp.onnx", dynamo=True, verbose=False)  # MARK MLP_EXPORT
mlp_session = onnxruntime.InferenceSession("mlp.onnx")
for batch in (4, 4):
    x = rng.standard_normal((batch, 6), dtype=np.float32)
    show("mlp", mlp_session.run(None, {mlp_session.get_inputs()[0].name: x})[0])  # MARK MLP_RUN

buffer = io.BytesIO()   # exported to a buffer, its session made from the bytes
torch.onnx.export(mlp, (torch.randn(4, 6),), buffer, dynamo=True, verbose=False)  # MARK MLP_BUFFER
buffer_session = onnxruntime.InferenceSession(buffer.getvalue())
show("mlp buffer", buffer_session.run(None, {buffer_session.get_inputs()[0].name: x})[0])
