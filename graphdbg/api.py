"""Python API: `graphdbg.compare(model, *inputs, backend=...)`.

Compiles ``fn`` with a fresh instance of ``backend`` (so an earlier compile in
this process is not reused), calls it once under a capture session that checks
every graph against eager, and returns the findings.
"""

from __future__ import annotations

import os
import tempfile
from functools import cached_property
from typing import Any, Callable

from .runfile.query import Finding, Run


class CompareReport:
    """Findings of `graphdbg.compare`, read back from its run file as typed
    records (`graphdbg.runfile.query.Finding` and `Graph`; no nodes)."""

    def __init__(self, run_file: str, output: Any) -> None:
        self.run_file = run_file
        self.output = output
        with Run(run_file) as run:
            self.diagnostics = run.findings()
            self.graphs = run.graphs()

    @cached_property
    def document(self) -> dict:
        """The `graphdbg report --json` document, read when first asked for
        (it holds every node of every graph)."""
        from .reporters.json import document
        return document(self.run_file)

    @property
    def divergences(self) -> list[Finding]:
        return [d for d in self.diagnostics if d.kind == "divergence"]

    @property
    def graph_breaks(self) -> list[Finding]:
        return [d for d in self.diagnostics if d.kind == "graph_break"]

    def _lines(self, items: list[Finding]) -> str:
        return "\n".join(f"  {d.kind} {d.file}:{d.line}: {d.message}"
                         + (f"\n      {d.code}" if d.code else "") for d in items)

    def assert_close(self) -> None:
        """Fail if compiled parts from eager anywhere beyond legitimate precision
        differences (miscompiles; random-stream and precision notes pass)."""
        bad = [d for d in self.divergences if d.severity == "error"]
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

    from graphdbg.hooks import Session
    from .core.options import CaptureOptions

    inner = lookup_backend(backend) if isinstance(backend, str) else backend
    name = backend if isinstance(backend, str) else getattr(backend, "__name__", "backend")

    def fresh_backend(gm, example_inputs, **kwargs):
        return inner(gm, example_inputs, **kwargs)

    fresh_backend.__name__ = name
    if run_file is None:
        fd, run_file = tempfile.mkstemp(prefix="graphdbg-compare-", suffix=".run")
        os.close(fd)
    options = CaptureOptions(eager=False, compare=True, compare_first=1, rtol=rtol, atol=atol,
                             localize=localize)
    with Session(run_file, options, argv=["<graphdbg.compare>"]):
        compiled = torch.compile(fn, backend=fresh_backend, **compile_kwargs)
        output = compiled(*inputs)
    return CompareReport(run_file, output)


class GraphCheckReport:
    """What `graphdbg.check_graph` found: one entry per broken node."""

    def __init__(self, check) -> None:
        from .core.sourcemap import code_line
        self.nodes_checked = check.checked
        self.unchecked = list(check.unchecked)
        self.problems: list[dict] = []
        for p in check.problems:
            file, line, by_pass = p.site()
            self.problems.append({
                "check": p.check, "severity": p.severity, "node": p.node, "target": p.target,
                "message": p.message, "file": file, "line": line,
                "code": code_line(file, line) if file else None, "created_by_pass": by_pass})

    @property
    def ok(self) -> bool:
        return not any(p["severity"] == "error" for p in self.problems)

    def assert_ok(self) -> None:
        if not self.ok:
            raise AssertionError("malformed graph:\n" + str(self))

    def __bool__(self) -> bool:
        return self.ok

    def __repr__(self) -> str:
        return (f"<GraphCheckReport {len(self.problems)} problem(s), "
                f"{self.nodes_checked} node(s) run on fake tensors>")

    def __str__(self) -> str:
        lines = []
        for p in self.problems:
            where = f"{p['file']}:{p['line']}" if p["file"] else "no source line"
            made = " (node made by a graph transformation)" if p["created_by_pass"] else ""
            lines.append(f"  {p['severity']} {p['check']} at {where}{made}: {p['message']}")
            if p["code"]:
                lines.append(f"      {p['code']}")
        return "\n".join(lines) if lines else "graph is well-formed"


def check_graph(gm: Any, *example_inputs: Any) -> GraphCheckReport:
    """Check an FX GraphModule for malformed nodes: use before definition,
    erased or foreign nodes still used, missing output or attributes, wrong
    arity or argument types, shape or dtype mismatches (each node run on fake
    tensors, so nothing is computed), dangling nodes. Each problem names the
    node and its source line: the user's line from its ``stack_trace``, or,
    for nodes a graph transformation added while graphdbg was capturing, the
    line of the pass that created it (for nodes ``symbolic_trace`` made while
    capturing: the traced line; else the line that made the node's module).
    A problem with none of these has ``file`` None here. Inside `graphdbg
    run` (or a `graphdbg.capture`), the findings are also recorded in the
    run file, where such a problem sits at the line that called check_graph.

        report = graphdbg.check_graph(gm, x)
        report.assert_ok()
    """
    from graphdbg.hooks.check.lint import lint_graph
    from graphdbg.hooks.session import current

    result = lint_graph(gm, example_inputs)
    session = current()
    if session is not None:
        session.record_graph_check(result)
    return GraphCheckReport(result)
