"""`--values full`: tensors kept in the run file as safetensors blobs, within
a byte budget, for what `--keep` selects (op name, module path, graph function)."""

from __future__ import annotations

import re

import torch

from graphdbg.runfile.records import TensorRow

from . import tensorstats
from ..context import CaptureContext


class TensorKeeper:
    def __init__(self, ctx: CaptureContext) -> None:
        self.ctx = ctx
        self.budget = ctx.options.tensor_budget
        self.select = re.compile(ctx.options.keep) if ctx.options.keep else None

    def keep(self, owner: str, tensors: list, label: str = "") -> None:
        if self.select is not None and not self.select.search(label):
            return
        from safetensors.torch import save
        for i, t in enumerate(tensors):
            if not tensorstats.is_plain(t):
                continue
            size = t.numel() * t.element_size()
            if size > self.budget:
                self.ctx.count("tensors_over_budget")
                continue
            self.budget -= size
            with torch.no_grad():
                blob = save({"value": t.detach().to("cpu").contiguous().clone()})
            self.ctx.writer.add(TensorRow(id=None, owner=owner, name=str(i), safetensors=blob))
