"""Python API: `graphdbg.compare(model, *inputs, backend=...)`,
`graphdbg.check_graph(gm, *inputs)`, `graphdbg.check_export(model, args)`.

`compare` compiles ``fn`` with a fresh instance of ``backend`` (so an earlier
compile in this process is not reused), calls it once under a capture session
that checks every graph against eager, and returns the findings.
`check_export` exports a model (torch.export or ONNX) under a capture session
that checks the export against eager, and returns the findings.
"""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from functools import cached_property
from typing import Any, Callable

from .runfile.query import Finding, Run


def _remove_run(path: str) -> None:
    for suffix in ("", "-journal", "-wal", "-shm"):
        try:
            os.remove(path + suffix)
        except FileNotFoundError:
            pass


class _RunBytes:
    """A temporary run file deleted at once, kept in memory (a compare's is
    about a megabyte) and written back to a temporary file only while a view
    (the JSON document, the notebook's display) reads it."""

    def __init__(self, path: str) -> None:
        with open(path, "rb") as f:
            self.data = f.read()

    @contextmanager
    def file(self):
        fd, path = tempfile.mkstemp(prefix="graphdbg-view-", suffix=".run")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(self.data)
            yield path
        finally:
            _remove_run(path)


class CompareReport:
    """Findings of `graphdbg.compare`, read back from its run file as typed
    records (`graphdbg.runfile.query.Finding` and `Graph`; no nodes).
    ``run_file``: the run file the caller named; None for the temporary one,
    deleted (the report keeps its bytes for ``document`` and the display)."""

    def __init__(self, run_file: str, output: Any, temporary: bool = False) -> None:
        self.run_file: str | None = run_file
        self.output = output
        with Run(run_file) as run:
            self.diagnostics = run.findings()
            self.graphs = run.graphs()
        self._kept = None
        if temporary:
            self._kept = _RunBytes(run_file)
            _remove_run(run_file)
            self.run_file = None

    @contextmanager
    def _file(self):
        if self._kept is None:
            yield self.run_file
        else:
            with self._kept.file() as path:
                yield path

    @cached_property
    def document(self) -> dict:
        """The `graphdbg report --json` document, read when first asked for
        (it holds every node of every graph)."""
        from .reporters.json import document
        with self._file() as path:
            return document(path)

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        from .display import mimebundle
        with self._file() as path:
            # a deleted run file's next commands name the file compare(path=) would keep
            return mimebundle(path, self._head(), None if self._kept is None else "c.run")

    def _head(self) -> str:
        bad = [d for d in self.divergences if d.severity == "error"]
        verdict = (f"compiled differs from eager at {len(bad)} place(s)" if bad
                   else "compiled matches eager")
        breaks = f", {len(self.graph_breaks)} graph break(s)" if self.graph_breaks else ""
        return (f"graphdbg.compare: {verdict}; {len(self.graphs)} graph(s){breaks}"
                + (f" — graphdbg report {self.run_file}" if self.run_file else
                   " (its run file is deleted: compare(..., path='c.run') keeps one)"))

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
                f"{len(self.graph_breaks)} graph break(s); {self.run_file or 'run file deleted'}>")

    def __str__(self) -> str:
        return repr(self) + ("\n" + self._lines(self.diagnostics) if self.diagnostics else "")


def compare(fn: Callable, *inputs: Any, backend: str | Callable = "inductor",
            rtol: float | None = None, atol: float | None = None, localize: str = "auto",
            run_file: str | None = None, path: str | None = None,
            **compile_kwargs: Any) -> CompareReport:
    """Compile ``fn`` with ``backend``, run it on ``inputs`` once, check every
    graph (values and, when inputs require grad, gradients) against eager.

        report = graphdbg.compare(model, x, backend="inductor")
        report.assert_close(); report.assert_no_graph_breaks()

    ``path`` (or ``run_file``): keep the run file there (for `graphdbg tui`);
    without it the run file is temporary and deleted before this returns.
    ``fn`` compiled by the program before: compare's own backend makes Dynamo
    compile it again, which is not reported as the program's recompile.
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
    run_file = run_file or path
    temporary = run_file is None
    if temporary:
        fd, run_file = tempfile.mkstemp(prefix="graphdbg-compare-", suffix=".run")
        os.close(fd)
    options = CaptureOptions(eager=False, compare=True, compare_first=1, rtol=rtol, atol=atol,
                             localize=localize)
    try:
        with Session(run_file, options, argv=["<graphdbg.compare>"], own_backend=True,
                     durable=not temporary):
            compiled = torch.compile(fn, backend=fresh_backend, **compile_kwargs)
            output = compiled(*inputs)
    except BaseException:
        if temporary:
            _remove_run(run_file)
        raise
    return CompareReport(run_file, output, temporary=temporary)


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


class ExportReport:
    """What `graphdbg.check_export` found: the export (``program``: the
    ExportedProgram or ONNXProgram; None when it raised, then ``error`` is
    its exception), its findings read back from the run file (typed
    records, as `CompareReport`'s), and what keeps it from matching eager
    (``problems``, `graphdbg.testing.Violation`s; none: ``ok``)."""

    def __init__(self, run_file: str, *, call: str, site: str | None, program: Any,
                 error: BaseException | None, allow: tuple[str, ...] = ()) -> None:
        from .testing import Violation, export_violations, exported_by
        self.run_file: str | None = run_file
        self.call, self.site = call, site
        self.program, self.error = program, error
        with Run(run_file) as run:
            self.findings = run.findings()
            self.graphs = [g for g in run.graphs() if g.export is not None]
            self.problems = export_violations(run, allow=allow)
        if error is not None and not any(exported_by(f) == "failed"
                                         for v in self.problems for f in v.findings):
            # the export raised and no finding of graphdbg's says so: its exception does
            self.problems.insert(0, Violation(_raised(error)))
        elif error is None and not self.graphs and not self.problems:
            self.problems.append(Violation("graphdbg did not see the export (nothing recorded)"))

    @property
    def ok(self) -> bool:
        return not self.problems

    def __bool__(self) -> bool:
        return self.ok

    @property
    def divergences(self) -> list[Finding]:
        return [d for d in self.findings if d.kind == "divergence"]

    @property
    def text(self) -> str:
        """The failure as the pytest plugin writes one ("" when ok)."""
        from .testing import failure_text
        if self.ok:
            return ""
        what = "failed" if self.error is not None else "does not match eager"
        head = f"{self.call}" + (f" at {self.site}" if self.site else "") + f": the export {what}"
        return failure_text(head, self.problems, self.run_file)

    def assert_ok(self) -> None:
        """AssertionError with the failure text (for each finding: kind,
        file:line, the code, message, detail, hint) unless the model exported
        and matches eager; a failed export's own exception is chained to it."""
        __tracebackhide__ = True
        if not self.ok:
            exc = AssertionError(self.text)
            exc.graphdbg_listed = True   # the plugin adds no second copy of the findings
            raise exc from self.error

    def __repr__(self) -> str:
        state = "ok" if self.ok else f"{len(self.problems)} problem(s)"
        return (f"<ExportReport {self.call}: {state}, {len(self.findings)} finding(s); "
                f"{self.run_file or 'run file deleted'}>")

    def __str__(self) -> str:
        return self.text or f"{self.call}: exported, matches eager"

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        head = (f"graphdbg.{self.call}: " + ("exported, matches eager" if self.ok else
                f"{len(self.problems)} problem(s) — graphdbg report {self.run_file}"))
        if self.run_file is None:   # matched, and its temporary run file is gone
            return {"text/plain": head}
        from .display import mimebundle
        return mimebundle(self.run_file, head)


def _raised(exc: BaseException) -> str:
    """A failed export no finding describes: its exception at the innermost
    user line of its traceback."""
    from .core.format import short
    from .hooks.placement.nodes import raised_at
    frames = raised_at(exc)
    where = f" at {short(frames[-1].file)}:{frames[-1].line}" if frames else ""
    first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), "")[:300]
    return f"the export raised {type(exc).__name__}{where}: {first}"


def _caller() -> str | None:
    """The user's line that called graphdbg, as the failure text shows it."""
    from .core.format import short
    from .hooks.placement.stack import user_frame
    f = user_frame(1)
    return None if f is None else f"{short(f.file)}:{f.line}"


def check_export(model: Any, args: tuple | Any = (), kwargs: dict | None = None, *,
                 onnx: bool = False, dynamic_shapes: Any = None, strict: bool = False,
                 rtol: float | None = None, atol: float | None = None, path: str | None = None,
                 allow: tuple[str, ...] | list[str] | str = (),
                 **export_kwargs: Any) -> ExportReport:
    """Export ``model`` on ``args``/``kwargs`` (``torch.export.export``, or
    ``torch.onnx.export(dynamo=True)`` with ``onnx=True``) under a capture,
    and check the export against eager on those inputs: the exported program
    against the model, and for ONNX, ONNX Runtime against the exported
    program node by node (the first node that departs names the user's
    line). A failed export is recorded at the line it failed at, not raised.

        report = graphdbg.check_export(model, (x,), onnx=True)
        report.assert_ok()      # AssertionError: kind, file:line, code, message, hint

    ``strict`` is torch.export's (with ``onnx=True`` the model is exported
    by torch.export first, then the ExportedProgram to ONNX);
    ``dynamic_shapes`` that of both; any other keyword goes to the export
    function (``custom_translation_table=``, ``opset_version=``,
    ``preserve_module_call_signature=``...). ``rtol``/``atol``: the check's
    tolerances (None: per dtype, as `graphdbg run`). ``allow``: finding
    kinds (``"export_specialized"``) or regular expressions on messages
    that do not fail it. ``path``: the run file (default: a temporary one,
    deleted when the export matches, kept for `graphdbg tui` when not).
    With ``onnx=True`` and onnx, onnxruntime or onnxscript not installed:
    `graphdbg.OnnxUnavailable` (an ImportError; ``pytest.skip(str(exc))``).
    """
    import torch
    import torch.export

    from graphdbg.hooks import Session
    from .core.options import CaptureOptions
    from .testing import ONNX_INSTALL, OnnxUnavailable, onnx_missing

    if onnx:
        lacking = onnx_missing()
        if lacking:
            raise OnnxUnavailable(f"graphdbg.check_export(onnx=True) needs {', '.join(lacking)}: "
                                  f"{ONNX_INSTALL}", lacking)
    if not isinstance(args, tuple):
        args = tuple(args) if isinstance(args, list) else (args,)
    allow = (allow,) if isinstance(allow, str) else tuple(allow)
    site = _caller()
    name = type(model).__name__ if isinstance(model, torch.nn.Module) else \
        getattr(model, "__qualname__", None) or type(model).__name__
    call = f"check_export({name}{', onnx=True' if onnx else ''})"
    temporary = path is None
    if path is None:
        fd, path = tempfile.mkstemp(prefix="graphdbg-export-", suffix=".run")
        os.close(fd)
    options = CaptureOptions(eager=False, compare=True, compare_first=1, rtol=rtol, atol=atol)
    program = error = None
    with Session(path, options, argv=["<graphdbg.check_export>", call]):
        try:
            if not onnx:
                program = torch.export.export(model, args, kwargs, dynamic_shapes=dynamic_shapes,
                                              strict=strict, **export_kwargs)
            else:
                import torch.onnx
                source = model
                if strict:
                    source = torch.export.export(model, args, kwargs,
                                                 dynamic_shapes=dynamic_shapes, strict=True)
                export_kwargs.setdefault("verbose", False)
                program = torch.onnx.export(
                    source, args, kwargs=kwargs, dynamo=True,
                    dynamic_shapes=None if strict else dynamic_shapes, **export_kwargs)
        except Exception as exc:  # noqa: BLE001 - recorded at its line, re-raised by assert_ok
            error = exc
    report = ExportReport(path, call=call, site=site, program=program, error=error, allow=allow)
    if temporary and report.ok:
        _remove_run(path)
        report.run_file = None   # nothing to look at
    return report
