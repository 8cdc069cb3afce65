"""The design note's model, exported the way torch's error suggests: a
data-dependent branch, `torch.export.draft_export`, then ONNX from the
exported program. The ONNX program is run on inputs of both branches."""
import torch


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear1 = torch.nn.Linear(10, 20)
        self.linear2 = torch.nn.Linear(20, 5)

    def forward(self, x):
        if x.mean() > 0.5:  # BRANCH_LINE
            x = self.linear1(x)
        else:
            x = torch.relu(self.linear1(x))
        return self.linear2(x)


def digest(t: torch.Tensor) -> list[str]:
    return [v.hex() for v in t.double().flatten()[:10].tolist()]


torch.manual_seed(0)
model = Model().eval()
high = torch.rand(2, 10) + 0.5            # takes the first branch
low = -torch.rand(2, 10)                  # takes the other
ep = torch.export.draft_export(model, (high,))  # DRAFT_CALL
program = torch.onnx.export(ep, (high,), dynamo=True, verbose=False)  # ONNX_CALL
print("onnx high", digest(program(high)[0]))
print("onnx low", digest(program(low)[0]))  # LOW_CALL
print("eager low", digest(model(low)))
