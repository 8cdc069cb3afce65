"""torch.export fails on a data-dependent branch, deep inside the exporter.

A detection head keeps the boxes whose score passes a threshold and pads the
result to a fixed count. How many boxes pass is known only from the data
(``.item()``), so export makes an *unbacked* symbol for it; the ``if`` that
compares it with ``max_det`` cannot be decided at export time and
torch.export raises GuardOnDataDependentSymNode ("Could not guard on
data-dependent expression u0 < 8"), pointing at the exporter's frames and an
anonymous symbol. Eager runs fine.

Expected graphdbg findings: a compile_error at the ``if`` marked below, whose
hint says where u0 came from (the ``.item()`` line, aten.item). The program
ends with the same exception and exit status 1.
"""

import torch
import torch.nn as nn
from sample_cli import parse_args


class DetectionHead(nn.Module):
    def __init__(self, dim=16, max_det=8, threshold=0.5):
        super().__init__()
        self.score = nn.Linear(dim, 1)
        self.box = nn.Linear(dim, 4)
        self.max_det, self.threshold = max_det, threshold

    def forward(self, feats):
        scores = torch.sigmoid(self.score(feats)).squeeze(-1)
        boxes = self.box(feats)
        keep = scores > self.threshold
        n = keep.sum().item()
        kept = boxes[keep]
        if n < self.max_det:  # graphdbg-expect: compile_error
            kept = torch.cat([kept, kept.new_zeros(self.max_det - n, 4)])
        return kept[: self.max_det]


def main():
    parse_args(__doc__.splitlines()[0], "unused: this sample exports, it does not compile")
    torch.manual_seed(0)
    head = DetectionHead()
    feats = torch.randn(20, 16)
    print("eager:", tuple(head(feats).shape))
    program = torch.export.export(head, (feats,))
    print(program)


if __name__ == "__main__":
    main()
