"""A clean export: a small CNN with a dynamic batch (torch.export.Dim),
through the dynamo ONNX exporter, run on batches of other sizes."""
import torch


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
            torch.nn.MaxPool2d(2), torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1))
        self.head = torch.nn.Linear(16, 10)

    def forward(self, x):
        return self.head(self.features(x).flatten(1)).log_softmax(-1)


torch.manual_seed(0)
model = Net().eval()
batch = torch.export.Dim("batch", min=1, max=64)
program = torch.onnx.export(model, (torch.randn(2, 3, 16, 16),), dynamo=True, verbose=False,
                            dynamic_shapes={"x": {0: batch}})
for n in (3, 5):
    x = torch.randn(n, 3, 16, 16)
    print(n, [v.hex() for v in program(x)[0].double().flatten()[:4].tolist()])
