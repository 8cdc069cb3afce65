"""An exported program with a dynamic batch converted to ONNX, then used
with another batch size (its own module, and the ONNX program), after an
earlier torch.compile of the same model."""
import torch


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(10, 3)

    def forward(self, x):
        return torch.relu(self.fc(x))


torch.manual_seed(0)
model = Net().eval()
torch.compile(model, backend="eager")(torch.randn(3, 10))
ep = torch.export.export(model, (torch.randn(2, 10),),
                         dynamic_shapes=({0: torch.export.Dim.AUTO},))  # EXPORT
program = torch.onnx.export(ep, (torch.randn(2, 10),), dynamo=True)
x = torch.randn(4, 10)
print("ep batch 4", ep.module()(x).shape[0])   # refused if the batch was specialised
print("onnx batch 4", program(x)[0].shape[0])
print("range", ep.range_constraints)
