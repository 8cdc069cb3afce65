"""Python API: `graphdbg.compare(model, *inputs, backend=...)`.

Compiles ``fn`` with a fresh instance of ``backend`` (so an earlier compile in
this process is not reused), calls it once under a capture session that checks
every graph against eager, and returns the findings.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any, Callable


class CompareReport:
    """Findings of `graphdbg.compare`, read back from its run file."""

    def __init__(self, run_file: str, output: Any) -> None:
        from .report import document
        from .runfile import RunReader
        self.run_file = run_file
        self.output = output
        self.document = document(RunReader(run_file))
        self.diagnostics = self.document["diagnostics"]
        self.graphs = self.document["graphs"]

    @property
    def divergences(self) -> list[dict]:
        return [d for d in self.diagnostics if d["kind"] == "divergence"]

    @property
    def graph_breaks(self) -> list[dict]:
        return [d for d in self.diagnostics if d["kind"] == "graph_break"]

    def _lines(self, items: list[dict]) -> str:
        return "\n".join(f"  {d['kind']} {d['file']}:{d['line']}: {d['message']}"
                         + (f"\n      {d['code']}" if d.get("code") else "") for d in items)

    def assert_close(self) -> None:
        """Fail if compiled parts from eager anywhere beyond legitimate precision
        differences (miscompiles; random-stream and precision notes pass)."""
        bad = [d for d in self.divergences if d["severity"] == "error"]
        if bad:
            raise AssertionError("compiled differs from eager:\n" + self._lines(bad))

    def assert_no_graph_breaks(self) -> None:
        if self.graph_breaks:
            raise AssertionError("graph breaks:\n" + self._lines(self.graph_breaks))

    def __repr__(self) -> str:
        return (f"<CompareReport {len(self.graphs)} graph(s), {len(self.divergences)} divergence(s), "
                f"{len(self.graph_breaks)} graph break(s); {self.run_file}>")

    def __str__(self) -> str:
        return repr(self) + ("\n" + self._lines(self.diagnostics) if self.diagnostics else "")


def compare(fn: Callable, *inputs: Any, backend: str | Callable = "inductor",
            rtol: float | None = None, atol: float | None = None, localize: str = "auto",
            run_file: str | None = None, **compile_kwargs: Any) -> CompareReport:
    """Compile ``fn`` with ``backend``, run it on ``inputs`` once, check every
    graph (values and, when inputs require grad, gradients) against eager.

        report = graphdbg.compare(model, x, backend="inductor")
        report.assert_close(); report.assert_no_graph_breaks()
    """
    import torch
    from torch._dynamo.backends.registry import lookup_backend

    from .hooks import CaptureSession
    from .runfile import RunWriter

    inner = lookup_backend(backend) if isinstance(backend, str) else backend
    name = backend if isinstance(backend, str) else getattr(backend, "__name__", "backend")

    def fresh_backend(gm, example_inputs, **kwargs):
        return inner(gm, example_inputs, **kwargs)

    fresh_backend.__name__ = name
    if run_file is None:
        fd, run_file = tempfile.mkstemp(prefix="graphdbg-compare-", suffix=".run")
        os.close(fd)
    session = CaptureSession(RunWriter(run_file), eager=False, compare=True, compare_first=1,
                             rtol=rtol, atol=atol, localize=localize)
    session.writer.set_meta(argv=["<graphdbg.compare>"], module=False)
    session.start()
    status = "failed"
    try:
        compiled = torch.compile(fn, backend=fresh_backend, **compile_kwargs)
        output = compiled(*inputs)
        status = "complete"
    finally:
        session.stop(exit_status=0 if status == "complete" else 1, status=status)
    return CompareReport(run_file, output)
