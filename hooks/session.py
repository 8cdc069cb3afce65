"""A capture session: owns the run-file writer and installs the recorders.

    session = CaptureSession(RunWriter("x.run"), values="stats")
    session.start()
    ...   # the program runs
    session.stop(exit_status=0)
"""

from __future__ import annotations

import collections
import itertools
import os
import re
import sys
import threading
import time
import traceback
from typing import Any

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode, _pop_mode, _push_mode

from graphdbg.runfile import RunWriter, dumps
from graphdbg.sourcemap import Frame, is_internal

from . import creation, tensorstats
from .backend import BackendRecorder
from .eager import EagerRecorder
from .exports import ExportRecorder
from .frames import node_source, node_target
from .progress import CompileProgress
from .trace import TraceCapture


SUPPORTED_TORCH = ((2, 13), (2, 15))  # [low, high), as pyproject.toml declares

_current: "CaptureSession | None" = None


def current() -> "CaptureSession | None":
    """The session capturing this process, if any (`graphdbg.check_graph` records into it)."""
    return _current if _current is not None and _current.active else None


def check_torch_version() -> None:
    """graphdbg relies on dispatch modes Dynamo can ignore and on the structured
    trace of torch 2.13/2.14; other versions are refused up front."""
    from graphdbg.errors import GraphdbgError
    from torch.utils._python_dispatch import TorchDispatchMode
    try:
        major, minor = (int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
    except ValueError:
        major, minor = 0, 0
    (lo, hi) = SUPPORTED_TORCH
    if not (lo <= (major, minor) < hi) or not hasattr(TorchDispatchMode, "ignore_compile_internals"):
        raise GraphdbgError(
            f"torch {torch.__version__} is not supported: graphdbg needs torch>={lo[0]}.{lo[1]},"
            f"<{hi[0]}.{hi[1]}")


class CaptureSession:
    def __init__(self, writer: RunWriter, *, values: str = "stats", eager: bool = True,
                 max_ops: int = 200_000, tensor_budget: int = 64 * 1024 * 1024,
                 progress: bool = False, keep: str | None = None, compare: bool = True,
                 compare_first: int = 3, compare_every: int = 0,
                 rtol: float | None = None, atol: float | None = None,
                 localize: str = "auto", check_graphs: bool = True) -> None:
        if values not in tensorstats.TIERS:
            raise ValueError(f"values must be one of {tensorstats.TIERS}")
        self.writer = writer
        self.values = values
        self.record_eager = eager
        self.max_ops = max_ops
        self.tensor_budget = tensor_budget
        self.keep = re.compile(keep) if keep else None
        self.compare = compare
        self.compare_first = compare_first
        self.compare_every = compare_every
        self.rtol, self.atol = rtol, atol
        self.localize = localize
        self.check_graphs = check_graphs
        self.checking = False
        self._compile_error_cids: set = set()
        # exceptions already recorded as compile errors, by id (with their
        # type and text to rule out a reused id): not recorded again when the
        # program dies of one of them
        self._recorded_excs: dict[int, tuple[str, str, str]] = {}
        self.active = False
        self.ops_dropped = 0
        self.counts: collections.Counter = collections.Counter()
        self.internal_errors: list[str] = []
        self._seq = itertools.count(1)
        self._graph_ids = itertools.count(1)
        self._t0 = time.monotonic()
        self._in_compiled = 0
        self._lock = threading.Lock()
        self.backend = BackendRecorder(self)
        self.trace = TraceCapture(self)
        self.exports = ExportRecorder(self)
        self.eager_mode: EagerRecorder | None = None
        self.progress = CompileProgress(progress)
        self._pid = os.getpid()

    # -- ids and time --------------------------------------------------------
    def next_seq(self) -> int:
        return next(self._seq)

    def new_graph_id(self) -> int:
        return next(self._graph_ids)

    def now(self) -> float:
        return time.monotonic() - self._t0

    # -- lifecycle -------------------------------------------------------------
    def start(self) -> None:
        check_torch_version()
        self.writer.set_meta(
            torch=torch.__version__, python=sys.version.split()[0], values=self.values,
            device=_device_description(), pid=os.getpid())
        self.trace.install()
        self.backend.install()
        creation.install()
        self.exports.install()
        self.active = True
        global _current
        _current = self
        if self.record_eager:
            self.eager_mode = EagerRecorder(self)
            self.eager_mode.__enter__()
        os.register_at_fork(after_in_child=self._after_fork_child)

    def stop(self, **final_meta: Any) -> None:
        if not self.active:
            return
        self.active = False
        self.progress.end()
        if self.eager_mode is not None:
            mode, self.eager_mode = self.eager_mode, None
            try:
                if _get_current_dispatch_mode() is mode:
                    mode.__exit__(None, None, None)
            except Exception as exc:
                self.internal_error("stopping eager recorder", exc)
        self.backend.uninstall()
        self.trace.uninstall()
        creation.uninstall()
        self.exports.uninstall()
        global _current
        if _current is self:
            _current = None
        if os.getpid() != self._pid:
            return
        from torch._dynamo.utils import counters
        torch_counters = {
            "unique_graphs": counters["stats"].get("unique_graphs", 0),
            "calls_captured": counters["stats"].get("calls_captured", 0),
            "graph_breaks": sum(counters["graph_break"].values()),
        }
        self.writer.close(
            torch_counters=torch_counters, counts=dict(self.counts),
            ops_dropped=self.ops_dropped, internal_errors=self.internal_errors[:50],
            **final_meta)

    def _after_fork_child(self) -> None:
        # A forked child (DataLoader workers) must never write to the parent's file.
        if os.getpid() != self._pid:
            self.active = False
            self.writer.abandon()

    # -- compiled regions ------------------------------------------------------------
    def enter_compiled(self):
        """Switch the eager recorder off while a compiled graph runs."""
        self._in_compiled += 1
        mode = self.eager_mode
        try:
            if mode is not None and _get_current_dispatch_mode() is mode:
                _pop_mode()
                return mode
        except Exception as exc:
            self.internal_error("pausing eager recorder", exc)
        return None

    def exit_compiled(self, popped) -> None:
        self._in_compiled -= 1
        if popped is not None:
            _push_mode(popped)

    @property
    def in_compiled(self) -> bool:
        return self._in_compiled > 0

    def record_call(self, graph_id: int, call_idx: int, wall_ns: int, out: Any) -> None:
        if not self.active:
            return
        outputs = []
        tensors = tensorstats.flat_tensors(out)
        for t in tensors:
            shape, dtype = tensorstats.describe(t)
            outputs.append({"shape": shape, "dtype": dtype,
                            "stats": tensorstats.summarize(t, self.values)})
        seq = self.next_seq()
        self.writer.add("calls", (seq, graph_id, call_idx, wall_ns, dumps(outputs)))
        if self.values == "full" and call_idx < 4:
            g = self.writer.graph(graph_id)
            self.keep_tensors(f"call:{seq}", tensors, f"{g.get('code_name') or ''} graph {graph_id}")

    def keep_tensors(self, owner: str, tensors: list, label: str = "") -> None:
        """`--values full`: keep tensors as safetensors blobs within the budget,
        only for what `--keep` selects (op name, module path, graph function)."""
        if self.keep is not None and not self.keep.search(label):
            return
        from safetensors.torch import save
        for i, t in enumerate(tensors):
            if not tensorstats._plain(t):
                continue
            size = t.numel() * t.element_size()
            if size > self.tensor_budget:
                self.counts["tensors_over_budget"] += 1
                continue
            self.tensor_budget -= size
            with torch.no_grad():
                blob = save({"value": t.detach().to("cpu").contiguous().clone()})
            self.writer.add("tensors", (owner, str(i), blob))

    # -- findings from the eager-vs-compiled check ------------------------------------
    def bisect_progress(self, title: str):
        from .progress import BisectProgress
        return BisectProgress(self.progress.enabled, title)

    def record_node_times(self, graph_id: int, times_ns: dict[str, int]) -> None:
        for name, ns in times_ns.items():
            self.writer.add("node_times", (graph_id, name, ns))

    def report_divergence(self, checker, call_idx: int, index: int, final, loc,
                          direction: str = "forward") -> None:
        from .compare import is_random
        w = self.writer
        name = loc.node
        node = checker.nodes.get(name) if name else None
        user_id, stack, mpath, mcls = node_source(w, node) if node is not None else (None,) * 4
        d = loc.diff or final
        kind = d.kind
        if node is not None and is_random(node) and kind != "precision":
            kind = "random"
        severity = {"miscompile": "error", "shape": "error", "dtype": "error",
                    "precision": "info", "random": "warning"}.get(kind, "error")
        stage = {"user": w.graph(checker.graph_id).get("backend")}.get(loc.stage, loc.stage)
        what = f"{loc.target or name}" if name else "an output"
        if kind == "random":
            message = f"compiled and eager draw different random numbers at {what}"
            hint = ("Different random streams, not a miscompile: the compiled graph draws its "
                    "random numbers differently (decomposed random ops, inductor's own generator); "
                    "torch._inductor.config.fallback_random = True makes inductor match eager. The "
                    "rest of the graph was checked with the compiled draws replayed.")
        elif kind == "precision":
            message = (f"compiled differs from eager at {what} but is as close or closer to float64 "
                       f"({d.dtype})")
            hint = ("Inductor keeps low-precision intermediates in float32; "
                    "torch._inductor.config.emulate_precision_casts = True rounds like eager.")
        elif direction == "backward":
            message = (f"compiled gradients diverge from eager in the backward of {what}"
                       + (f" (stage {stage})" if stage else ""))
            hint = ("The forward values match; the backward of this line's op is wrong "
                    "(gradients of inputs and parameters compared with the same upstream gradient).")
        else:
            message = f"compiled diverges from eager at {what}" + (f" (stage {stage})" if stage else "")
            hint = ("The op is wrong on its own inputs: look at how the backend lowers it."
                    if loc.isolated and loc.isolated.get("diverges")
                    else "The node alone matches eager: the error comes from how it is fused or "
                         "from earlier nodes' rounding.")
        detail = {
            "classification": kind, "call": call_idx, "direction": direction,
            "output": index if index >= 0 else None,
            "mutated_input": (-1 - index) if index < 0 else None,
            "node": name, "target": loc.target, "module_path": mpath, "module_class": mcls,
            "stage": stage, "method": loc.method, "compiles": loc.compiles,
            "stage_compiles": loc.by_stage.get(loc.stage, 0), "seconds": round(loc.seconds, 3),
            "compiles_by_stage": {({"user": stage}.get(k, k)): v for k, v in loc.by_stage.items()},
            "max_abs": _finite(d.max_abs), "max_rel": _finite(d.max_rel),
            "eager_vs_fp64": d.eager_vs_fp64, "compiled_vs_fp64": d.compiled_vs_fp64,
            "dtype": d.dtype, "isolated": loc.isolated, "undecided": loc.undecided,
            "output_max_abs": _finite(final.max_abs), "output_max_rel": _finite(final.max_rel),
        }
        w.diagnostic(f"divergence|{checker.graph_id}|{name}|{kind}|{direction}", kind="divergence",
                     severity=severity, message=message, hint=hint, user_frame=user_id,
                     stack=stack, graph_id=checker.graph_id, node=name, op=loc.target,
                     detail=detail)

    def report_aliasing(self, checker, call_idx: int, output: int, compiled: int | None,
                        eager: int | None) -> None:
        def says(a):
            return "a copy" if a is None else f"a view of input {a}"
        g = self.writer.graph(checker.graph_id)
        user_id = self.writer.frame_id(g["code_file"], g["code_line"], g.get("code_name") or "?") \
            if g.get("code_file") else None
        self.writer.diagnostic(
            f"aliasing|{checker.graph_id}|{output}", kind="divergence", severity="warning",
            message=f"output {output} is {says(compiled)} compiled but {says(eager)} in eager",
            hint="In-place changes through this output reach the input in one mode and not in "
                 "the other.",
            user_frame=user_id, graph_id=checker.graph_id,
            detail={"classification": "aliasing", "call": call_idx, "output": output,
                    "compiled_aliases_input": compiled, "eager_aliases_input": eager})

    def report_nonfinite(self, checker, name: str, where: str, call_idx: int) -> None:
        user_id, stack, mpath, mcls = node_source(self.writer, checker.nodes[name])
        target = node_target(checker.nodes[name])
        self.writer.diagnostic(
            f"nan_inf|{checker.graph_id}|{name}|{where}", kind="nan_inf", severity="warning",
            message=f"first NaN/Inf in {where} appears at {target} (node {name})",
            hint="Its inputs are finite: this op creates the non-finite values.",
            user_frame=user_id, stack=stack, graph_id=checker.graph_id, node=name, op=target,
            detail={"where": where, "call": call_idx, "module_path": mpath, "module_class": mcls})

    # -- findings from the runner ----------------------------------------------------
    def runtime_error(self, exc: BaseException) -> None:
        key = self.recorded_as(exc)
        if key is not None:
            self.uncaught(exc, key)
            return
        frames = [Frame(f.filename, f.lineno or 0, f.name)
                  for f in traceback.extract_tb(exc.__traceback__)]
        user_frames = [f for f in frames if not is_internal(f.file)]
        w = self.writer
        stack = w.stack_id(user_frames)
        user = user_frames[-1] if user_frames else None
        text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        w.diagnostic(
            f"runtime_error|{user.file if user else '?'}:{user.line if user else 0}|{type(exc).__name__}",
            kind="runtime_error", severity="error",
            message=_headline(exc),
            reason=text, user_frame=w.frame_id(*user) if user else None, stack=stack,
            detail={"exception": type(exc).__name__,
                    "traceback": "".join(traceback.format_exception(exc))[-20000:]})

    def backend_failure(self, graph_id: int, wrapper, exc: Exception, check=None) -> None:
        """A backend raised on a graph: name the node it was processing and the
        user's line that made that node; when it names none and the graph the
        backend was working on (``check``) is malformed, the broken node."""
        from .failures import compiler_error, failing_node, headline, raised_in_user_code
        w = self.writer
        node = failing_node(exc)
        if node is None and check is not None:
            node = next((p.fx_node for p in check.problems
                         if p.severity == "error" and p.fx_node is not None), None)
        user_id = stack = None
        target = None
        hint = None
        if node is not None:
            user_id, stack = self.node_site(node, prefer_creator=check is not None and not check.ok)
            target = node_target(node)
        else:
            # no node to blame (a toolchain failure): the user's call that compiled
            caller = [Frame(f.filename, f.lineno or 0, f.name)
                      for f in traceback.extract_stack(sys._getframe(1)) if not is_internal(f.filename)]
            if caller:
                user_id, stack = w.frame_id(*caller[-1]), w.stack_id(caller)
        raised = raised_in_user_code(exc)
        if compiler_error(exc):
            hint = ("The C++ compiler rejected inductor's code or flags for this graph: check "
                    "torch._inductor.config.cpp (cxx, march), the CXX environment variable and the "
                    "compiler's full output in the run file.")
        elif raised is not None:
            hint = f"Raised by your code: {os.path.basename(raised[0])}:{raised[1]} in {raised[2]}."
        g = w.graph(graph_id)
        backend = g.get("backend") or getattr(wrapper, "__name__", "backend")
        where = f" at {target}" if target else ""
        self._compile_error_cids.add(g.get("compile_id"))
        w.diagnostic(
            f"compile_error|graph{graph_id}", kind="compile_error", severity="error",
            message=f"backend {backend!r} failed{where}: {headline(exc)}",
            reason=str(exc)[:100000],
            hint=("The graph the backend was given is malformed: see the malformed_graph findings."
                  if check is not None and not check.ok else hint or
                  (None if node is not None else "The error names no FX node; see the full text.")),
            user_frame=user_id, stack=stack, graph_id=graph_id,
            node=node.name if node is not None else None, op=target,
            compile_id=g.get("compile_id"),
            detail={"exception": type(exc).__name__, "backend": backend,
                    "raised_at": list(raised) if raised else None,
                    "compiler_error": compiler_error(exc),
                    "traceback": "".join(traceback.format_exception(exc))[-20000:]})
        self._remember(exc, f"compile_error|graph{graph_id}")

    def export_failure(self, exc: BaseException, strict: bool = False) -> None:
        """torch.export raised: the user's line it failed at and, for
        data-dependent errors, the nodes (and lines) that made the unbacked
        symbols it could not decide on."""
        from .failures import (data_dependent_symbols, exception_chain, explain_unsupported,
                               headline, last_traced_node, symbol_origins)
        w = self.writer
        chain = exception_chain(exc)
        caller = [Frame(f.filename, f.lineno or 0, f.name)
                  for f in traceback.extract_stack(sys._getframe(2)) if not is_internal(f.filename)]
        inner: list[Frame] = []
        for e in chain:  # non-strict export runs the user's forward: its frames are here
            user = [Frame(f.filename, f.lineno or 0, f.name)
                    for f in traceback.extract_tb(e.__traceback__) if not is_internal(f.filename)]
            if len(user) > len(inner):
                inner = user
        if not inner:
            real = next((getattr(e, "real_stack", None) for e in chain
                         if getattr(e, "real_stack", None)), None)
            inner = [Frame(f.filename, f.lineno or 0, f.name) for f in real or []
                     if not is_internal(f.filename)]
        user_id = stack = None
        if inner:
            user_id = w.frame_id(*inner[-1])
            stack = w.stack_id(caller + inner)
        else:
            node = last_traced_node(exc)
            if node is not None:
                user_id, node_stack = self.node_site(node)
                stack = w.stack_id(caller + [Frame(*f) for f in w.stack_frames(node_stack)]) \
                    if node_stack else None
        if user_id is None and caller:
            user_id, stack = w.frame_id(*caller[-1]), w.stack_id(caller)
        data_dependent = any(type(e).__name__ == "GuardOnDataDependentSymNode"
                             or "data-dependent" in str(e).split("\n", 1)[0] for e in chain)
        unbacked = []
        if data_dependent:
            for sym, node in symbol_origins(exc, data_dependent_symbols(exc)):
                fid, _ = self.node_site(node)
                f = w.frame(fid) if fid else None
                unbacked.append({"symbol": sym, "node": node.name, "op": node_target(node),
                                 "file": f["file"] if f else None, "line": f["line"] if f else None,
                                 "code": f["code"] if f else None})
        reason = "\n\n".join(str(e) for e in chain)[:100000]
        explanation, hints = explain_unsupported(reason)
        if unbacked:
            made = "; ".join(
                f"{u['symbol']} comes from {u['op']}"
                + (f" at {os.path.basename(u['file'])}:{u['line']}" + (f" `{u['code']}`" if u["code"] else "")
                   if u["file"] else "") for u in unbacked)
            hint = (f"{made}. Export cannot know its value: state what holds with torch._check(...) "
                    "(or torch._check_is_size) after it is made, or branch with torch.cond.")
        else:
            hint = hints[0] if hints else None
        key = self.recorded_as(exc)
        fields = dict(kind="compile_error", severity="error",
                      message=f"torch.export failed: {headline(exc)}"[:500], reason=reason,
                      hint=hint, user_frame=user_id, stack=stack,
                      detail={"export": True, "strict": strict, "exception": type(exc).__name__,
                              "data_dependent": data_dependent, "unbacked": unbacked,
                              "explanation": explanation, "hints": hints,
                              "traceback": _format_tb(exc)})
        if key is not None:  # Dynamo (strict export) recorded it already: say it better
            w.update_diagnostic(key, **{k: v for k, v in fields.items() if k not in ("kind",)})
        else:
            key = f"export|{user_id}|{type(exc).__name__}|{str(exc)[:200]}"
            w.diagnostic(key, **fields)
        self._remember(exc, key)

    def node_site(self, node, prefer_creator: bool = False) -> tuple[int | None, int | None]:
        """(user frame id, stack id) of an FX node: its ``stack_trace``, or the
        line of the user's graph transformation that created it (first, with
        ``prefer_creator``: a broken node is the pass's bug even when the
        pass copied the meta of the node it replaced)."""
        w = self.writer
        site = creation.created_at(node)
        if site is not None and prefer_creator:
            return w.frame_id(*site), w.stack_id([site])
        user_id, stack, _, _ = node_source(w, node)
        if user_id is None and site is not None:
            user_id, stack = w.frame_id(*site), w.stack_id([site])
        return user_id, stack

    def malformed_graph(self, graph_id: int | None, check, stage: str) -> None:
        """Record what `graphcheck.check_graph` found in a graph."""
        w = self.writer
        for p in check.problems:
            user_id = stack = None
            if p.fx_node is not None:
                user_id, stack = self.node_site(p.fx_node, prefer_creator=True)
            by_pass = p.created_at is not None
            hint = _MALFORMED_HINTS.get(p.check)
            if by_pass:
                model = node_source(w, p.fx_node)[0] if p.stack_trace else None
                f = w.frame(model) if model else None
                stands = (f" It stands for {os.path.basename(f['file'])}:{f['line']} `{f['code']}`."
                          if f and f.get("code") else "")
                hint = (f"{p.node} was made by your graph transformation ({p.created_at[2]}).{stands} "
                        + (hint or ""))
            w.diagnostic(
                f"malformed|{graph_id}|{stage}|{p.node}|{p.check}", kind="malformed_graph",
                severity=p.severity, message=p.message[:500], hint=hint, user_frame=user_id,
                stack=stack, graph_id=graph_id, node=p.node, op=p.target,
                detail={"check": p.check, "stage": stage, "created_by_pass": by_pass,
                        "created_at": list(p.created_at) if p.created_at else None,
                        "nodes_checked": check.checked, "unchecked": check.unchecked[:20]})

    def runtime_failure_at_node(self, checker, call_idx: int, node, exc: BaseException,
                                replay_exc: BaseException | None) -> None:
        from .failures import headline
        w = self.writer
        user_id = stack = None
        target = None
        if node is not None:
            user_id, stack, _, _ = node_source(w, node)
            target = node_target(node)
            message = f"compiled graph {checker.graph_id} fails at {target}: {headline(exc)}"
        else:
            g = w.graph(checker.graph_id)
            if g.get("code_file"):
                user_id = w.frame_id(g["code_file"], g["code_line"], g.get("code_name") or "?")
            message = (f"compiled graph {checker.graph_id} fails on inputs that eager runs fine: "
                       f"{headline(exc)}")
        key = f"runtime_error|graph{checker.graph_id}|{node.name if node is not None else '-'}"
        self._remember(exc, key)
        w.diagnostic(
            key,
            kind="runtime_error", severity="error", message=message, reason=str(exc)[:100000],
            user_frame=user_id, stack=stack, graph_id=checker.graph_id,
            node=node.name if node is not None else None, op=target,
            detail={"call": call_idx, "exception": type(exc).__name__,
                    "eager_replay": None if replay_exc is None else headline(replay_exc)})

    def compile_failure(self, m: dict, cid: str | None, exc: BaseException | None = None) -> None:
        """A frame's compile failed (Dynamo's Unsupported under fullgraph,
        TorchRuntimeError from fake tensors, an export or guard error...).
        ``exc`` is the exception on its way out, when the trace handler sees it."""
        if cid in self._compile_error_cids:
            return  # already mapped to its node by backend_failure
        from .failures import explain_unsupported, headline
        w = self.writer
        file, line = m.get("fail_user_frame_filename"), m.get("fail_user_frame_lineno")
        real = list(getattr(exc, "real_stack", None) or [])
        user = [Frame(f.filename, f.lineno or 0, f.name) for f in real if not is_internal(f.filename)]
        if not user and exc is not None:
            # guard-time errors (ConstraintViolationError) carry the user stack in their text
            from graphdbg.sourcemap import parse_traceback
            user = [f for f, _ in parse_traceback(str(exc)) if not is_internal(f.file)]
        if user and not (file and line):
            file, line = user[-1].file, user[-1].line
        user_id = w.frame_id(file, line, user[-1].function if user else (m.get("co_name") or "?")) \
            if file and line else None
        stack = w.stack_id(user) if user else None
        reason = str(m.get("fail_reason") or (str(exc) if exc is not None else ""))
        message = headline(exc) if exc is not None else \
            f"{m.get('fail_type')}: {reason.splitlines()[0] if reason else ''}"
        explanation, hints = explain_unsupported(reason)
        key = f"compile_error|{file}:{line}|{m.get('fail_type')}|{reason[:200]}"
        w.diagnostic(
            key, kind="compile_error", severity="error", message=message[:500],
            reason=reason, hint=hints[0] if hints else None, user_frame=user_id, stack=stack,
            compile_id=cid,
            detail={"fail_type": m.get("fail_type"), "explanation": explanation, "hints": hints,
                    "traceback": _format_tb(exc)})
        self._remember(exc, key)

    def _remember(self, exc: BaseException | None, key: str) -> None:
        """Note that ``exc`` (and what wraps it) is recorded under ``key``."""
        if exc is None:
            return
        if len(self._recorded_excs) > 200:
            self._recorded_excs.clear()
        self._recorded_excs[id(exc)] = (key, type(exc).__name__, _first_line(exc))

    def recorded_as(self, exc: BaseException) -> str | None:
        """The diagnostic key an exception (or one it wraps, or one that wraps
        it) was recorded under, if it already was."""
        from .failures import exception_chain
        for e in exception_chain(exc):
            hit = self._recorded_excs.get(id(e))
            # (Dynamo appends advice to messages on the way out: first line only)
            if hit is not None and hit[1:] == (type(e).__name__, _first_line(e)):
                return hit[0]
        return None

    def uncaught(self, exc: BaseException, key: str) -> None:
        """The program died of an error already recorded: add the program's
        stack to that finding instead of recording it twice."""
        w = self.writer
        row = w.diagnostic_row(key)
        if row is None:
            return
        frames = [Frame(f.filename, f.lineno or 0, f.name)
                  for f in traceback.extract_tb(exc.__traceback__)]
        outer: list[Frame] = []  # the program's frames down to its call into torch
        for f in frames:
            if not is_internal(f.file):
                outer.append(f)
            elif outer:
                break
        inner = [Frame(*f) for f in w.stack_frames(row["stack"])] if row.get("stack") else []
        stack = w.stack_id(outer + [f for f in inner if f not in outer]) or row.get("stack")
        detail = dict(row.get("detail") or {}, uncaught=True, exception=type(exc).__name__)
        w.update_diagnostic(key, stack=stack, detail=detail)

    def internal_error(self, where: str, exc: BaseException) -> None:
        self.counts["internal_errors"] += 1
        if len(self.internal_errors) < 50:
            self.internal_errors.append(f"{where}: {type(exc).__name__}: {exc}")


def _finite(x: float | None) -> float | None:
    import math
    return x if x is None or math.isfinite(x) else None


def _headline(exc: BaseException) -> str:
    """`Type: first line of the message` (torch's messages end in boilerplate),
    with the wrapped error for wrappers such as BackendCompilerFailed."""
    from .failures import headline
    return headline(exc)


_MALFORMED_HINTS = {
    "use_before_def": "Insert the node after its inputs (graph.inserting_after) or move it.",
    "erased_node": "Rewire users (node.replace_all_uses_with) before graph.erase_node.",
    "foreign_node": "Copy nodes between graphs with graph.node_copy / graph_copy, not by reference.",
    "output": "A graph has exactly one output node, last.",
    "missing_attr": "Register the attribute or submodule on the GraphModule before using it.",
    "arity": "The node's arguments do not fit the op's signature.",
    "shape": "A node's shape does not fit its op or its recorded meta; check the pass that made it.",
    "dtype": "A node's dtype does not fit its op or its recorded meta; check the pass that made it.",
    "dangling": "A pass added or kept a node and never used its value (missing replace_all_uses_with?).",
}


def _first_line(exc: BaseException) -> str:
    return str(exc).split("\n", 1)[0][:200]


def _format_tb(exc: BaseException | None) -> str | None:
    if exc is None:
        return None
    return "".join(traceback.format_exception(exc))[-20000:]


def _device_description() -> str:
    if torch.cuda.is_available():
        return f"cuda: {torch.cuda.get_device_name(0)}"
    return "cpu"
