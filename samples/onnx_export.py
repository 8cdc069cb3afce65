"""A small text classifier shipped two ways, as a user would: `torch.export`
(for serving) with the batch declared dynamic, and ONNX (for ONNX Runtime)
with a hand-written translation of the tanh GELU. Two bugs that no error
shows:

- `pool` flattens with a batch size from the config, so the export fixes the
  batch to 8 although the call declared it dynamic (`Dim.AUTO`): the exported
  program takes only batches of 8. (graphdbg: a warning at the `.view`.)
- the GELU translation has a typo in its cubic coefficient (0.44715 for
  0.044715): ONNX Runtime's logits are off (max ~0.1) and nothing fails.
  (graphdbg: a divergence at the `gelu` line, found node by node in ONNX
  Runtime.)

Needs onnx, onnxruntime and onnxscript (`pip install 'graphdbg[onnx]'`).
`--save out.safetensors` writes the eager, exported and ONNX logits.

    graphdbg run samples/onnx_export.py
"""

import argparse

import torch
from onnxscript import opset18 as op
from torch.export import Dim

BATCH, SEQ, VOCAB, DIM = 8, 12, 100, 32


class Classifier(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, DIM)
        self.norm = torch.nn.LayerNorm(DIM)
        self.up = torch.nn.Linear(DIM, 4 * DIM)
        self.down = torch.nn.Linear(4 * DIM, DIM)
        self.head = torch.nn.Linear(SEQ * DIM, 3)

    def forward(self, ids):
        h = self.norm(self.embed(ids))
        u = torch.nn.functional.gelu(self.up(h), approximate="tanh")  # graphdbg-expect: divergence
        h = h + self.down(u)
        pooled = h.reshape(BATCH, -1)  # graphdbg-expect: export_specialized
        return self.head(pooled)


def gelu_tanh(x, approximate: str = "tanh"):
    """aten.gelu(approximate="tanh") in ONNX ops: 0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³)))."""
    cube = op.Mul(x, op.Mul(x, x))
    inner = op.Mul(op.Constant(value_float=0.7978845608),
                   op.Add(x, op.Mul(op.Constant(value_float=0.44715), cube)))
    return op.Mul(op.Mul(op.Constant(value_float=0.5), x),
                  op.Add(op.Constant(value_float=1.0), op.Tanh(inner)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--save", help="write the logits (safetensors)")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = Classifier().eval()
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))

    exported = torch.export.export(model, (ids,), dynamic_shapes={"ids": {0: Dim.AUTO}})
    served = exported.module()(ids)

    program = torch.onnx.export(model, (ids,), dynamo=True, verbose=False,
                                custom_translation_table={torch.ops.aten.gelu.default: gelu_tanh})
    onnx_logits = program(ids)[0]

    eager = model(ids)
    print(f"exported vs eager: max |diff| {(served - eager).abs().max().item():.2e}")
    print(f"ONNX vs eager:     max |diff| {(onnx_logits - eager).abs().max().item():.2e}")
    if args.save:
        from safetensors.torch import save_file
        save_file({"eager": eager, "exported": served, "onnx": onnx_logits}, args.save)


if __name__ == "__main__":
    main()
