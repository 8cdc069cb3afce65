"""What the pytest plugin gives a test: a recorder around the test, its
counts and findings (read through `graphdbg.runfile.query`), assertions, and the
text of a failure.

    def test_model(graphdbg):                 # the `graphdbg` fixture
        out = torch.compile(model)(x)
        graphdbg.assert_no_graph_breaks()
        graphdbg.assert_close()
        with graphdbg.expect(graphs=0, recompiles=0):
            torch.compile(model)(x)           # a second call compiles nothing
        torch.onnx.export(model, (x,), dynamo=True)
        graphdbg.assert_exports_match()       # exported, and ONNX Runtime matches eager

The plugin itself (options, marker, hooks) is `graphdbg.pytest_plugin`.
Imports neither torch nor textual at load: torch comes with the first
recorded test.
"""

from __future__ import annotations

import os
import re
import unittest
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from .core.format import at, caret, short
from .repro.base import REPRO_KINDS  # what graphdbg repro makes scripts of (torch-free)
from .runfile.details import CompileErrorDetail, DivergenceDetail, SpecializedDetail
from .runfile.query import Finding, Graph, Run

# what the marker and the session summary count; each is the sum of its
# findings' counts (a finding is one site, hit `count` times)
COUNTED = {"graph_breaks": "graph_break", "recompiles": "recompile"}


@dataclass(frozen=True)
class Counts:
    """What a test's compiles came to so far."""
    graphs: int = 0           # graphs compiled
    graph_breaks: int = 0     # graph breaks (every time one was hit)
    recompiles: int = 0       # recompiles (every one)
    divergences: int = 0      # compiled parted from eager beyond precision (sites)
    errors: int = 0           # findings of severity error (sites)
    compile_s: float = 0.0    # time in compiles

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Limits:
    """`@pytest.mark.graphdbg(...)`: what every compile in a test must keep to.
    None: not checked. ``allow``: finding kinds or regular expressions on a
    finding's message that are tolerated. ``given``: the arguments the marker
    was written with, in its order (a failure names those, not the defaults)."""
    max_graph_breaks: int | None = 0
    max_recompiles: int | None = 0
    max_graphs: int | None = None
    compare: bool = True
    rtol: float | None = None
    atol: float | None = None
    allow: tuple[str, ...] = ()
    given: tuple[str, ...] = ()

    @classmethod
    def from_marker(cls, args: Sequence, kwargs: dict) -> Limits:
        if args:
            raise TypeError("@pytest.mark.graphdbg takes keyword arguments only, e.g. "
                            "@pytest.mark.graphdbg(max_graph_breaks=0)")
        known = set(cls.__dataclass_fields__) - {"given"}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise TypeError(f"@pytest.mark.graphdbg got unknown argument(s) {unknown}; "
                            f"known: {sorted(known)}")
        kw = dict(kwargs)
        allow = kw.pop("allow", ())
        if isinstance(allow, str):
            allow = (allow,)
        for pattern in allow:
            re.compile(pattern)     # a bad pattern fails the test's setup, not later
        return cls(**kw, allow=tuple(allow), given=tuple(kwargs))

    def describe(self) -> str:
        """The marker as it was written."""
        parts = [f"{k}={list(self.allow)!r}" if k == "allow" else f"{k}={getattr(self, k)!r}"
                 for k in self.given]
        return f"@pytest.mark.graphdbg({', '.join(parts)})"

    def limit(self, name: str) -> str:
        """One limit as the marker holds it: `max_graph_breaks=0`, with
        `, the default` when the marker did not write it."""
        return f"{name}={getattr(self, name)!r}" + ("" if name in self.given else ", the default")


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def allowed(f: Finding, allow: Iterable[str]) -> bool:
    """A finding tolerated by ``allow``: its kind, or a pattern its message matches."""
    for a in allow:
        if a == f.kind or re.search(a, f.message or ""):
            return True
    return False


@dataclass
class Violation:
    """One limit a test went over, with the findings behind it; ``limit``:
    the marker's limit it went over, as written (`max_graph_breaks=0`)."""
    what: str
    findings: list[Finding] = field(default_factory=list)
    limit: str = ""

    def __str__(self) -> str:
        return f"{self.what} ({self.limit})" if self.limit else self.what


def _judged_close(f: Finding, rtol: float | None, atol: float | None) -> bool:
    """Whether a divergence is within explicit tolerances, judged on its
    recorded largest errors: close when the absolute error is within atol or
    the relative one within rtol (as allclose, element by element, at worst)."""
    d = f.detail
    max_abs, max_rel = (d.max_abs, d.max_rel) if isinstance(d, DivergenceDetail) else (None, None)
    if max_abs is None and max_rel is None:
        return False     # a shape/dtype difference, or non-finite errors
    return ((atol is not None and max_abs is not None and max_abs <= atol)
            or (rtol is not None and max_rel is not None and max_rel <= rtol))


def divergences(findings: Iterable[Finding], rtol: float | None = None,
                atol: float | None = None) -> list[Finding]:
    """The divergences that fail `assert_close`: without tolerances, the
    ones the check judged errors (miscompiles, shape and dtype changes; not
    precision or random-stream notes); with them, any whose recorded error
    is beyond both."""
    out = []
    for f in findings:
        if f.kind != "divergence":
            continue
        if rtol is None and atol is None:
            if f.severity == "error":
                out.append(f)
        elif not (isinstance(f.detail, DivergenceDetail)
                  and f.detail.classification in ("aliasing", "random")) \
                and not _judged_close(f, rtol, atol):
            out.append(f)
    return out


def counts_of(run: Run) -> Counts:
    findings = run.findings()
    by_kind = {name: sum(f.count for f in findings if f.kind == kind)
               for name, kind in COUNTED.items()}
    graphs = run.graphs()
    return Counts(graphs=len(graphs), **by_kind,
                  divergences=len(divergences(findings)),
                  errors=sum(f.severity == "error" for f in findings),
                  compile_s=round(sum(g.compile_time_s or 0.0 for g in graphs), 3))


def violations(run: Run, limits: Limits) -> list[Violation]:
    """What a test's run goes over, given the marker's limits."""
    findings = [f for f in run.findings() if not allowed(f, limits.allow)]
    out = []
    for name, kind in COUNTED.items():
        most = getattr(limits, f"max_{name}")
        hits = [f for f in findings if f.kind == kind]
        n = sum(f.count for f in hits)
        if most is not None and n > most:
            out.append(Violation(_count(n, kind.replace("_", " "), name.replace("_", " ")), hits,
                                 limits.limit(f"max_{name}")))
    if limits.max_graphs is not None:
        n = len(run.graphs())
        if n > limits.max_graphs:
            out.append(Violation(f"{_count(n, 'graph', 'graphs')} compiled",
                                 limit=limits.limit("max_graphs")))
    if limits.compare:
        bad = divergences(findings, limits.rtol, limits.atol)
        compiled = [f for f in bad if exported_by(f) is None]
        if compiled:
            out.append(Violation(f"compiled differs from eager at {len(compiled)} place(s)",
                                 compiled))
        exports = [f for f in bad if exported_by(f) is not None]
        if exports:
            out.append(Violation(f"an export differs from eager at {len(exports)} place(s)",
                                 exports))
    errors = [f for f in findings if f.severity == "error"
              and f.kind not in ("divergence", "recompile")]   # those two counted above
    failed = [f for f in errors if exported_by(f) is not None]
    if failed:
        out.append(Violation(f"{len(failed)} export(s) failed", failed))
    errors = [f for f in errors if exported_by(f) is None]
    if errors:
        out.append(Violation(f"{len(errors)} error(s) in compiles", errors))
    return out


# -- exports (torch.export.export, torch.onnx.export) ---------------------------------

ONNX_PACKAGES = ("onnx", "onnxruntime", "onnxscript")
ONNX_INSTALL = "pip install 'graphdbg[onnx]'"


class OnnxUnavailable(ImportError):
    """An ONNX export cannot be checked against eager here: onnx, onnxruntime
    or onnxscript is not installed. One line, with what to install; an
    ImportError, so a test can skip on it:

        try:
            report = graphdbg.check_export(model, (x,), onnx=True)
        except graphdbg.OnnxUnavailable as exc:
            pytest.skip(str(exc))
    """

    def __init__(self, message: str, missing: Sequence[str] = ()) -> None:
        super().__init__(message, name=missing[0] if missing else None)
        self.missing = list(missing)


def onnx_missing() -> list[str]:
    """The packages an ONNX export and its check need that are not installed."""
    import importlib.util
    out = []
    for name in ONNX_PACKAGES:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            out.append(name)
    return out


def exported_by(f: Finding) -> str | None:
    """Which check of an export a finding comes from: "onnx" (ONNX Runtime
    against the exported program, node by node), "export" (the exported
    program against the eager model), "failed" (the export raised),
    "specialized" (a size declared dynamic that the export fixed); None: not
    an export's finding."""
    d = f.detail
    if isinstance(d, DivergenceDetail) and d.exported:
        return "onnx" if d.onnx_ops is not None or (d.method or "").startswith("onnx") \
            else "export"
    if isinstance(d, CompileErrorDetail) and d.export:
        return "failed"
    if isinstance(d, SpecializedDetail) or f.kind == "export_specialized":
        return "specialized"
    return None


def _sites(found: Sequence[Finding], exports: dict[int, Graph]) -> str:
    """` (torch.onnx.export at test_model.py:12)`: the export calls behind findings."""
    seen = []
    for f in found:
        g = exports.get(f.graph_id) if f.graph_id is not None else None
        if g is not None and g.file:
            via = (g.export or {}).get("via") or "export"
            text = f"{via} at {short(g.file)}:{g.line}"
            if text not in seen:
                seen.append(text)
    return f" ({'; '.join(seen)})" if seen else ""


def export_violations(run: Run, *, allow: Iterable[str] = (), rtol: float | None = None,
                      atol: float | None = None) -> list[Violation]:
    """What keeps a run's exports from matching eager: exports that raised,
    ONNX Runtime departing from the exported program (node by node), the
    exported program departing from its eager model, sizes declared dynamic
    that an export fixed, and checks graphdbg could not finish. ``rtol``/
    ``atol`` loosen the divergences as `divergences` does; ``allow`` as the
    marker's."""
    findings = [f for f in run.findings() if not allowed(f, allow)]
    exports = {g.id: g for g in run.graphs() if g.export is not None}
    out = []
    failed = [f for f in findings if exported_by(f) == "failed"]
    if failed:
        out.append(Violation(f"{len(failed)} export(s) failed", failed))
    bad = divergences(findings, rtol, atol)
    for by, what in (("onnx", "ONNX Runtime differs from eager"),
                     ("export", "the exported program differs from eager")):
        found = [f for f in bad if exported_by(f) == by]
        if found:
            out.append(Violation(f"{what} at {len(found)} place(s){_sites(found, exports)}",
                                 found))
    fixed = [f for f in findings if exported_by(f) == "specialized"]
    if fixed:
        out.append(Violation(f"{len(fixed)} size(s) declared dynamic fixed by the export"
                             f"{_sites(fixed, exports)}", fixed))
    broken = [e for e in run.info.internal_errors
              if re.match(r"(export|ONNX) check of graph|(onnx )?export recorder|"
                          r"(export|onnx)-error mapper", str(e))]
    if broken:
        out.append(Violation("graphdbg could not check the export against eager: "
                             + "; ".join(map(str, broken))[:500]))
    return out


def exports_not_checked(run: Run) -> list[str]:
    """Why exports were not checked against eager (an ONNX program without
    onnxruntime), one reason per export."""
    return [str(g.export["not_checked"]) for g in run.graphs()
            if g.export is not None and g.export.get("not_checked")]


# -- the text of a failure ------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _first_line(text: str | None, limit: int = 240) -> str:
    line = next((ln.strip() for ln in _ANSI.sub("", text or "").splitlines() if ln.strip()), "")
    line = re.split(r"\s{2,}#", line)[0]     # torch's guard text trails the source as a comment
    return line if len(line) <= limit else line[:limit - 1] + "…"


_RUNNER = re.compile(r"[/\\](_pytest|pluggy|xdist|execnet)[/\\]")
# the standard library's unittest, which runs a TestCase's setUp, method and
# tearDown (its folder only: a project's own tests/unittest/ is the user's)
_UNITTEST = os.path.dirname(os.path.abspath(unittest.__file__)) + os.sep


def _runner_frame(file: str | None) -> bool:
    return bool(file) and (bool(_RUNNER.search(file)) or file.startswith(_UNITTEST))


def finding_text(f: Finding) -> list[str]:
    """A finding as the failure report shows it: where, the code with a
    caret, the message, torch's reason in one line, the hint."""
    times = f" (×{f.count})" if f.count > 1 else ""
    fn = f" in {f.function}" if f.function else ""
    out = [f"{f.kind.replace('_', ' ')} at {at(f.file, f.line, f.cell)}{fn}{times}"]
    if f.code:
        out.append(f"  {f.line:>5} | {f.code}")
        out.append(f"  {'':>5}   {caret(f.code, f.col, f.end_col)}")   # under its span, if known
    out.append(f"  {f.message}")
    if isinstance(f.detail, (DivergenceDetail, SpecializedDetail)):
        out.append(f"  {f.detail.summary()}")
    fixes = f.detail.fixes if isinstance(f.detail, CompileErrorDetail) else None
    reason = _first_line(f.reason)
    # an op with no ONNX translation: the message says what torch's reason
    # buries under the exporter's steps
    if reason and reason not in (f.message or "") and not (
            isinstance(f.detail, CompileErrorDetail) and f.detail.onnx_op):
        out.append(f"  torch: {reason}")
    hint = f.hint or ""
    if fixes and fixes[0] in hint:   # the ways out one a line, not cut off
        out.append(f"  hint: {_first_line(hint[:hint.index(fixes[0])].rstrip(' :;'), 300)}:")
        out += [f"    - {_first_line(x, 300)}" for x in fixes]
    elif hint:
        out.append(f"  hint: {_first_line(hint, 300)}")
    # the test runner's frames (pytest calling the test, and what called pytest)
    # are not the user's: the chain starts at the test function
    stack = list(f.stack[:-1])
    runner = [i for i, c in enumerate(stack) if _runner_frame(c.file)]
    callers = stack[runner[-1] + 1:][-2:] if runner else stack[-2:]
    if callers:
        out.append("  called from " + " <- ".join(
            f"{at(c.file, c.line, c.cell)} {c.function}" for c in reversed(callers)))
    return out



def repro_line(f: Finding, run_path: str | None, number: int | None) -> list[str]:
    """`repro: graphdbg repro RUN N` for a finding `graphdbg repro` makes a script of."""
    if f.kind not in REPRO_KINDS or not run_path or number is None:
        return []
    return [f"  repro: graphdbg repro {short(run_path)} {number}"]


def finding_numbers(run_path: str | None) -> dict[int, int]:
    """Each finding's number as `graphdbg report` (and `graphdbg repro`) counts them."""
    if not run_path or not os.path.exists(run_path):
        return {}
    try:
        with Run(run_path) as run:
            return {f.id: i + 1 for i, f in enumerate(run.findings())}
    except Exception:
        return {}


def failure_text(head: str, found: Sequence[Violation], run_path: str | None) -> str:
    lines = [head]
    shown: set[int] = set()
    numbers = finding_numbers(run_path) if any(
        f.kind in REPRO_KINDS for v in found for f in v.findings) else {}
    for v in found:
        lines.append(f"- {v}")
        for f in v.findings:
            if f.id in shown:
                continue
            shown.add(f.id)
            lines += ["    " + ln for ln in finding_text(f) + repro_line(f, run_path, numbers.get(f.id))]
    if run_path:
        lines += [f"run saved: {short(run_path)}",
                  f"open it:   graphdbg tui {short(run_path)}"]
    return "\n".join(lines)


# -- the recorder (the `graphdbg` fixture) -----------------------------------------------

class Recorder:
    """Captures one test's torch.compile activity into a run file.

    The plugin starts it before the test's setup (its fixtures) and stops
    it when the test's call ends (a unittest.TestCase's setUp, method and
    tearDown included); the assertions read the run (so far, or after it
    stopped, until the plugin deletes a passing test's run when its teardown
    ends) through the query layer. Each recorded test starts from Dynamo's
    empty cache (`torch._dynamo.reset()`, as torch's own tests do) so that
    its graphs, breaks and recompiles are its own, whatever ran before it.
    ``durable=False`` (the plugin's): the run file is written without fsync,
    as most are deleted when their test passes."""

    def __init__(self, path: str, *, nodeid: str = "", compare: bool = True,
                 rtol: float | None = None, atol: float | None = None,
                 compare_first: int = 1, durable: bool = True) -> None:
        self.path = path
        self.nodeid = nodeid
        self.compare, self.rtol, self.atol = compare, rtol, atol
        self.compare_first = compare_first
        self.durable = durable
        self._session = None
        self.started = False

    # -- lifecycle (the plugin's) ------------------------------------------------------
    def start(self) -> None:
        import torch._dynamo

        from graphdbg.hooks import Session
        from .core.options import CaptureOptions
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        # the program's own eager ops are not recorded: a test asserts on
        # compiles, and a dispatch mode per op would slow every test down
        options = CaptureOptions(eager=False, compare=self.compare,
                                 compare_first=self.compare_first, rtol=self.rtol,
                                 atol=self.atol)
        torch._dynamo.reset()
        session = Session(self.path, options, argv=["pytest", self.nodeid],
                          durable=self.durable)
        session.start()   # one that fails leaves no file behind
        self._session = session
        self.started = True

    def stop(self, failed: bool = False) -> None:
        session, self._session = self._session, None
        if session is None:
            return
        if failed:
            session.set_exit(1, "failed")
        session.stop()
        import torch._dynamo
        # what was compiled under the recorder stays out of later tests
        torch._dynamo.reset()

    @property
    def recording(self) -> bool:
        return self._session is not None

    def run(self) -> Run:
        """The run so far (open it in a `with`)."""
        if self._session is not None:
            # gradient checks wait for a graph's next call (memory): an
            # assertion now must see them
            self._session.finish_checks()
            self._session.flush()
        if not self.started:
            raise RuntimeError("the graphdbg recorder has not started: it records a test from "
                               "its setup to the end of its call")
        return Run(self.path)

    # -- what a test reads ----------------------------------------------------------------
    @property
    def findings(self) -> list[Finding]:
        """Every finding so far, errors first."""
        with self.run() as run:
            return run.findings()

    def counts(self) -> Counts:
        """Graphs compiled, graph breaks, recompiles, divergences, errors so far."""
        with self.run() as run:
            return counts_of(run)

    # -- assertions ------------------------------------------------------------------------
    def _fail(self, head: str, found: Sequence[Finding]) -> None:
        __tracebackhide__ = True
        exc = AssertionError(failure_text(head, [Violation("", list(found))] if found else [],
                                          self.path).replace("\n- \n", "\n"))
        exc.graphdbg_listed = True   # its message lists the findings: no second copy in the report
        raise exc

    def _of_kind(self, kind: str) -> list[Finding]:
        return [f for f in self.findings if f.kind == kind]

    def assert_no_graph_breaks(self) -> None:
        __tracebackhide__ = True
        found = self._of_kind("graph_break")
        if found:
            n = sum(f.count for f in found)
            self._fail(f"{n} graph break(s) at {len(found)} place(s)", found)

    def assert_max_recompiles(self, n: int) -> None:
        __tracebackhide__ = True
        found = self._of_kind("recompile")
        total = sum(f.count for f in found)
        if total > n:
            self._fail(f"{total} recompile(s), at most {n} expected", found)

    def assert_graphs(self, n: int) -> None:
        """Exactly ``n`` graphs were compiled."""
        __tracebackhide__ = True
        with self.run() as run:
            graphs = run.graphs()
            breaks = [f for f in run.findings() if f.kind == "graph_break"]
        if len(graphs) != n:
            names = ", ".join(f"{g.function or '?'} at {short(g.file)}:{g.line}" for g in graphs)
            head = f"{len(graphs)} graph(s) compiled, {n} expected" + (
                f": {names}" if names else "")
            self._fail(head, breaks)

    def assert_close(self, rtol: float | None = None, atol: float | None = None) -> None:
        """Compiled matches eager: no divergence the check judged an error
        (rtol/atol None), or none whose recorded largest error is beyond
        these tolerances. They can loosen the check, not tighten it (what the
        check found within its own tolerances is not recorded): for a tighter
        check give rtol/atol to the marker, and the check runs with them."""
        __tracebackhide__ = True
        if not self.compare:
            raise RuntimeError("assert_close needs the eager-vs-compiled check: this test "
                               "records with compare=False")
        found = divergences(self.findings, rtol, atol)
        if found:
            tol = "" if rtol is None and atol is None else f" (rtol={rtol}, atol={atol})"
            self._fail(f"compiled differs from eager at {len(found)} place(s){tol}", found)

    def assert_no_errors(self) -> None:
        """No finding of severity error: compile errors, malformed graphs,
        miscompiles, NaN/Inf only in the compiled run, recompile limits."""
        __tracebackhide__ = True
        found = [f for f in self.findings if f.severity == "error"]
        if found:
            self._fail(f"{len(found)} error(s)", found)

    def assert_no_nan(self) -> None:
        __tracebackhide__ = True
        found = self._of_kind("nan_inf")
        if found:
            self._fail(f"NaN/Inf at {len(found)} place(s)", found)

    def assert_exports_match(self, rtol: float | None = None, atol: float | None = None, *,
                             allow: Iterable[str] = ()) -> None:
        """Every torch.export.export and torch.onnx.export of the test so far
        exported and matches eager on its example inputs: none raised, the
        exported program computes what its model computes, ONNX Runtime what
        the exported program computes (node by node), and no size declared
        dynamic was fixed. rtol/atol loosen the divergences as in
        `assert_close`; ``allow`` tolerates finding kinds or messages, as the
        marker's. Fails too when the test exported nothing (an export
        function imported by name before the test started is not seen: call
        it as ``torch.export.export``/``torch.onnx.export``), and raises
        `OnnxUnavailable` when an ONNX export could not be checked for want
        of onnxruntime."""
        __tracebackhide__ = True
        if not self.compare:
            raise RuntimeError("assert_exports_match needs the check against eager: this test "
                               "records with compare=False")
        allow = (allow,) if isinstance(allow, str) else tuple(allow)
        with self.run() as run:
            n = sum(g.export is not None for g in run.graphs())
            found = export_violations(run, allow=allow, rtol=rtol, atol=atol)
            failed = sum(exported_by(f) == "failed" for f in run.findings())
            unchecked = exports_not_checked(run)
        if n + failed == 0:
            self._fail_with("no export was recorded in this test: graphdbg sees torch.export.export"
                            " and torch.onnx.export called through their modules while the test "
                            "records (a function imported by name before the test started, "
                            "`from torch.export import export`, is not seen)", [])
        if unchecked and not found:
            # "onnx, onnxruntime not installed (pip install ...)"
            named = re.split(r",\s*", unchecked[0].split(" not installed")[0])
            raise OnnxUnavailable(f"an ONNX export was not checked against eager: {unchecked[0]}",
                                  [m for m in ONNX_PACKAGES if m in named])
        if found:
            self._fail_with(f"the test's exports do not match eager ({n + failed} export(s))",
                            found)

    def _fail_with(self, head: str, found: Sequence[Violation]) -> None:
        __tracebackhide__ = True
        exc = AssertionError(failure_text(head, found, self.path))
        exc.graphdbg_listed = True
        raise exc

    def expect(self, *, graphs: int | None = None, graph_breaks: int | None = None,
               recompiles: int | None = None) -> Expect:
        """A block that must add exactly these counts (None: not checked)."""
        return Expect(self, {"graphs": graphs, "graph_breaks": graph_breaks,
                             "recompiles": recompiles})

    def __repr__(self) -> str:
        state = "recording" if self.recording else "stopped" if self.started else "not started"
        return f"<graphdbg recorder {state} {short(self.path)}>"


class Expect:
    """`with graphdbg.expect(graphs=1, recompiles=0): ...` (counts added
    inside the block, as vLLM's `CompilationCounter.expect`)."""

    def __init__(self, recorder: Recorder, wanted: dict) -> None:
        self.recorder = recorder
        self.wanted = {k: v for k, v in wanted.items() if v is not None}
        self.before: Counts | None = None
        self._seen: set[int] = set()

    def __enter__(self) -> Expect:  # noqa: PYI034
        __tracebackhide__ = True
        self.before = self.recorder.counts()
        self._seen = {(f.id, f.count) for f in self.recorder.findings}
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        __tracebackhide__ = True
        if exc_type is not None:
            return
        after = self.recorder.counts()
        got = {k: getattr(after, k) - getattr(self.before, k) for k in self.wanted}
        wrong = {k: v for k, v in got.items() if v != self.wanted[k]}
        if wrong:
            head = "inside the block: " + ", ".join(
                f"{k.replace('_', ' ')} {got[k]} (expected {self.wanted[k]})" for k in wrong)
            new = [f for f in self.recorder.findings if (f.id, f.count) not in self._seen
                   and f.kind in {COUNTED.get(k) for k in wrong} | {"graph_break"}]
            self.recorder._fail(head, new)
