"""Exports that narrow or fix a size the program declared dynamic, and a
branch on a tensor's value, each through torch.export and torch.onnx.export
(tests/e2e/test_placement_exports.py): one finding each, at the marked line that
must change. Models of different shapes: a positional table sliced to the input's
length, a `view` and a `reshape` with numbers, a fixed-size table added to the
input, a data-dependent `if`."""
import sys
import warnings

import torch
from torch.export import Dim

warnings.simplefilter("ignore")
CASES = sys.argv[1:]


def attempt(name, export):
    if CASES and name not in CASES:
        return
    try:
        export()
        print(name, "exported")
    except Exception as exc:
        print(name, "failed:", type(exc).__name__)


# -- 1. a Dim range that slicing narrows ---------------------------------------------------
class PositionalTable(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(64, 64))
        self.out = torch.nn.Linear(64, 8)

    def forward(self, x):
        n = x.shape[1]
        pos = self.table[:, :n]  # MARK slice export
        x = x + pos.t()
        return self.out(x)


class Cache(torch.nn.Module):
    """A key cache sliced to the query's length, in a helper method."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("keys", torch.randn(32, 16))

    def recent(self, t):
        return self.keys[:t]  # MARK slice helper

    def forward(self, q):
        k = self.recent(q.shape[0])
        return q * k.sigmoid()


class PositionalEncoding(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("pe", torch.randn(1, 32, 16))

    def forward(self, x):
        return x + self.pe[:, : x.size(1)]  # MARK slice onnx


class Encoder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pos = PositionalEncoding()
        self.proj = torch.nn.Linear(16, 16)

    def forward(self, x):
        return self.proj(self.pos(x))


attempt("slice_export", lambda: torch.export.export(  # MARK slice export call
    PositionalTable(), (torch.randn(2, 16, 64),), dynamic_shapes={"x": {1: Dim("n", max=512)}}))
attempt("slice_strict", lambda: torch.export.export(  # MARK slice strict call
    PositionalTable(), (torch.randn(2, 16, 64),), dynamic_shapes={"x": {1: Dim("n", max=512)}},
    strict=True))
attempt("slice_helper_export", lambda: torch.export.export(  # MARK slice helper call
    Cache(), (torch.randn(8, 16),), dynamic_shapes={"q": {0: Dim("t", max=100)}}))
attempt("slice_onnx", lambda: torch.onnx.export(  # MARK slice onnx call
    Encoder(), (torch.randn(2, 8, 16),), dynamic_shapes={"x": {1: Dim("t", max=100)}},
    verbose=False))


# -- 2. a batch declared dynamic that the code fixes ----------------------------------------
class Heads(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(32, 32)

    def forward(self, x):
        h = self.proj(x)
        h = h.view(2, 32)  # MARK view fixes
        return h.relu()


class Tokens(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pos = torch.nn.Parameter(torch.randn(16, 8))

    def forward(self, tok):
        h = tok + self.pos  # MARK table fixes
        return h.sum(-1)


class Flatten(torch.nn.Module):
    def forward(self, img):
        flat = img.reshape(3, 16)  # MARK reshape fixes
        return flat.mean(-1)


attempt("view_onnx", lambda: torch.onnx.export(  # MARK view onnx call
    Heads(), (torch.randn(2, 32),), input_names=["x"], dynamic_axes={"x": {0: "batch"}},
    verbose=False))
attempt("view_export", lambda: torch.export.export(  # MARK view export call
    Heads(), (torch.randn(2, 32),), dynamic_shapes={"x": {0: Dim.DYNAMIC}}))
attempt("table_onnx", lambda: torch.onnx.export(  # MARK table onnx call
    Tokens(), (torch.randn(16, 8),), input_names=["tok"], dynamic_axes={"tok": {0: "seq"}},
    verbose=False))
attempt("table_export", lambda: torch.export.export(  # MARK table export call
    Tokens(), (torch.randn(16, 8),), dynamic_shapes={"tok": {0: Dim.AUTO}}))
attempt("reshape_onnx", lambda: torch.onnx.export(  # MARK reshape onnx call
    Flatten(), (torch.randn(3, 4, 4),), dynamic_shapes={"img": {0: Dim.DYNAMIC}}, verbose=False))


# -- 3. a branch on a tensor's value -------------------------------------------------------
class Threshold(torch.nn.Module):
    def gate(self, x):
        if x.mean() > 0.5:  # MARK branch onnx
            return x * 2
        return x - 1

    def forward(self, x):
        return self.gate(x) + 1


class Clip(torch.nn.Module):
    def forward(self, x):
        y = x.abs()
        if (y > 3).any():  # MARK branch export
            y = y.clamp(max=3)
        return y


def export_gate():
    return torch.onnx.export(Threshold(), (torch.randn(4),), verbose=False)  # MARK branch onnx call


attempt("branch_onnx", export_gate)
attempt("branch_export", lambda: torch.export.export(  # MARK branch export call
    Clip(), (torch.randn(5),)))
