"""draft_export of a model that torch.compile ran before: the report names
the user's file by an index torch interned during the earlier compile."""
import torch


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear1 = torch.nn.Linear(10, 20)

    def forward(self, x):
        if x.mean() > 0.5:  # BRANCH_LINE
            return self.linear1(x)
        return torch.relu(self.linear1(x))


torch.manual_seed(0)
model = Model().eval()
high = torch.rand(2, 10) + 0.5
torch.compile(model, backend="eager")(high)
ep = torch.export.draft_export(model, (high,))  # DRAFT_CALL
print(ep.module()(high).shape)
