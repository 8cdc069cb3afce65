"""The design notes' warning, end to end: a static graph freezes the Python
control flow it was traced through. A small model whose forward branches on
its input (`if x.mean() > 0.5`) is trained eagerly, compiled, then shipped
three ways, and each deployed copy is run on inputs that take both branches:

- `torch.compile`: graph breaks at the print and at the branch; compiled
  results equal eager (Dynamo guards the branch and re-checks it per call).
- `torch.onnx.export(dynamo=False)` (the TorchScript exporter, what most
  tutorials use): the trace takes one branch and the ONNX file has only it
  (Gemm, Relu, Gemm); torch prints a TracerWarning and nothing else. The
  user's own `onnxruntime.InferenceSession` then answers the other branch's
  inputs wrongly (max ~0.25 off).
- `torch.export.draft_export` (which torch's error suggests), converted to
  ONNX: the exported program asserts the branch at run time, the ONNX
  program drops the assertion and answers the other branch's inputs wrongly.
- `torch.onnx.export(dynamo=True)` (the default) refuses the branch: caught
  here, as a user trying the three would.

What graphdbg says, all at the `if` line (50): the TorchScript trace froze
the branch (warning) and the program's own InferenceSession got inputs that
take the other one (error, the max difference); draft_export assumed the
branch (warning), the ONNX conversion dropped its assertion (warning) and
the ONNX program's call on the other branch differs (error); the default
exporter refused the branch (compile_error); and the two graph breaks.

Needs onnx, onnxruntime and onnxscript (`pip install 'graphdbg[onnx]'`).
`--save out.safetensors` writes the ONNX Runtime outputs.

    graphdbg run samples/frozen_branch.py
"""

import argparse
import os
import tempfile

import numpy as np
import onnxruntime as ort
import torch


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear1 = torch.nn.Linear(10, 10)
        self.linear2 = torch.nn.Linear(10, 1)

    def forward(self, x):
        if self.training:
            print(f"Input shape: {x.shape}")  # graphdbg-expect: graph_break
        if x.mean() > 0.5:  # graphdbg-expect: graph_break divergence export_specialized compile_error
            x = self.linear1(x)
        else:
            x = torch.relu(self.linear1(x))
        return self.linear2(x)


def batches(low: bool):
    """Inputs whose mean is below 0.5 (the else branch) or above it."""
    g = torch.Generator().manual_seed(1 if low else 2)
    x = torch.randn(4, 10, generator=g)
    return x if low else x + 1.0


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--backend", default="inductor")
    p.add_argument("--save", default=None)
    args = p.parse_args()
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(3):  # train eagerly
        x = torch.randn(8, 10)
        loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
    compiled = torch.compile(model, backend=args.backend)
    for low in (True, False):  # compiled, both branches: guarded, right
        compiled(batches(low))

    model.eval()
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.onnx")
        example = batches(low=True)[:2]  # mean below 0.5: the trace takes the else branch
        torch.onnx.export(model, example, path, input_names=["input"], output_names=["output"],
                          dynamic_axes={"input": {0: "batch_size"}}, dynamo=False)
        session = ort.InferenceSession(path)
        for low in (True, False):
            x = batches(low)
            got = session.run(None, {"input": x.numpy()})[0]
            want = model(x).detach().numpy()
            out[f"torchscript_{'low' if low else 'high'}"] = torch.from_numpy(got)
            print(f"TorchScript ONNX, {'else' if low else 'if'} branch: "
                  f"max |ORT - eager| = {np.abs(got - want).max():.3g}")

        ep = torch.export.draft_export(model, (example,),
                                       dynamic_shapes=({0: torch.export.Dim.AUTO},))
        program = torch.onnx.export(ep, (example,), dynamo=True)
        for low in (True, False):
            x = batches(low)
            got = program(x)[0]
            want = model(x)
            out[f"draft_{'low' if low else 'high'}"] = got.detach()
            print(f"draft_export ONNX, {'else' if low else 'if'} branch: "
                  f"max |ORT - eager| = {(got - want).abs().max().item():.3g}")

        try:
            torch.onnx.export(model, (example,), dynamo=True)
        except Exception as exc:  # the default exporter refuses the branch
            print(f"torch.onnx.export(dynamo=True) refused: {type(exc).__name__}")
    if args.save:
        from safetensors.torch import save_file
        save_file({k: v.contiguous() for k, v in out.items()}, args.save)


if __name__ == "__main__":
    main()
