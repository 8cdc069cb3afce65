"""What every repro is made of (`Plan`), the kinds graphdbg repro makes, and
its refusal; shared by plan.py and cutout.py. Torch-free."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.errors import GraphdbgError

REPRO_KINDS = ("divergence", "compile_error", "malformed_graph", "graph_break", "recompile")


class Refused(GraphdbgError):
    """A finding that has no standalone repro, with why (exit 1)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, exit_code=1)


@dataclass
class Plan:
    number: int
    kind: str           # divergence, compile_error (a malformed graph's repro is its failure's),
    #                     graph_break or recompile (cutout.py)
    spec: dict
    blob: bytes         # inputs.safetensors (empty for a compile error)
    what: str           # README's first line
    note: str | None    # about the backend, said in the README and by the CLI
    cut: str | None = None  # a compile error's failing node: the graph is cut down to it first
