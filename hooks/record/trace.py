"""Compile events from torch's structured trace, received in-process.

torch emits its structured trace (what TORCH_TRACE writes and tlparse reads) to
the ``torch.__trace`` logger whenever that logger has a handler. We attach one:
no environment variables, no second step. From it we take graph breaks (with
torch's full reason, the gb id, hints and the user stack), recompiles (with the
failed guard), compile errors and compile times.

Recompile-limit hits are a plain warning on ``torch._dynamo.convert_frame``;
a second handler catches those. A recompile is written when its compile
starts (``dynamo_start``): one that the limit refuses is no recompile (torch
logs its reasons all the same), and counts equal torch's own.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from typing import Any

import torch._logging._internal as torch_logging

from graphdbg.runfile.records import EventRow
from graphdbg.runfile.writer import dumps
from graphdbg.runfile.schema import COMPILE_PHASES
from graphdbg.core.sourcemap import Frame, original_function, parse_traceback

from .. import compat
from ..context import CaptureContext
from ..findings.writer import Findings
from ..findings.guards import current_value, newest_change, parse_reason
from ..placement import columns, stack
from ..placement.internal import is_internal
from ..placement.stack import generated_method
from .kernels import KernelTimes

# Kept in the run file's events table (others are dropped: chromium timing
# events, fake-tensor descriptions and bytecode dumps are bulky and not used).
_KEEP = {"dynamo_start", "compilation_metrics", "dynamo_output_graph",
         "dynamo_cpp_guards_str", "dynamo_graph_break_reason", "recompile_reasons",
         "inductor_output_code", "aot_joint_graph", "aot_forward_graph",
         "aot_backward_graph", "aot_inference_graph", "guard_added",
         "artifact:dynamo_graph_break_reason", "artifact:recompile_reasons",
         "artifact:fx_graph_cache_hit", "artifact:fx_graph_cache_miss"}
_MAX_PAYLOAD = 512 * 1024
_TIMED_EVENT = '"compile_file"'  # the chromium events read (others are not parsed)
_EVAL_FRAME = os.path.join("torch", "_dynamo", "eval_frame.py")
_GB_ID = re.compile(r"/gb/(gb\d+)\.html")


def _compile_id(md: dict) -> str | None:
    if "frame_id" not in md:
        return None
    cid = f"{md['frame_id']}/{md.get('frame_compile_id', 0)}"
    if md.get("compiled_autograd_id") is not None:
        cid = f"!{md['compiled_autograd_id']}/{cid}"
    return cid


def _frame_being_compiled():
    """The frame Dynamo is recompiling: the ``frame`` argument of torch's
    ``get_and_maybe_log_recompilation_reasons``, which emits the reasons."""
    for f in stack.outward():
        if f.f_code.co_name == "get_and_maybe_log_recompilation_reasons":
            return f.f_locals.get("frame")
    return None


def parse_graph_break(payload: str) -> dict:
    """Split torch's graph-break text into reason, hints, gb id and user stack."""
    reason_lines: list[str] = []
    hints: list[str] = []
    in_reason = False
    for line in payload.splitlines():
        if line.startswith("Graph Break Reason:"):
            in_reason = True
            reason_lines.append(line[len("Graph Break Reason:"):].strip())
            continue
        if line.startswith("User code traceback:") or line.startswith("Traceback (most recent call last)"):
            in_reason = False
        if in_reason:
            reason_lines.append(line.rstrip())
            if line.strip().startswith("Hint:"):
                hints.append(line.strip()[len("Hint:"):].strip())
    reason = "\n".join(reason_lines).strip()
    user_part = payload.split("User code traceback:", 1)
    if len(user_part) == 2:
        tb = user_part[1].split("\nTraceback (most recent call last)", 1)[0]
    else:
        # "cannot properly resume" variant: stack after "following user code:"
        tb = payload.split("following user code:", 1)[-1].split("\nTraceback (most recent call last)", 1)[0]
    frames = columns.narrow(parse_traceback(tb))   # torch's carets run to the line's end
    gb = _GB_ID.search(payload)
    # the first meaningful line of the reason names the kind of break
    headline = next((ln.strip() for ln in reason_lines[1:] if ln.strip()
                     and not ln.strip().startswith(("Explanation:", "Hint:"))), "")
    first = reason_lines[0].rstrip() if reason_lines else ""
    # "Encountered graph break when ...:" and "Failed to handle graph break
    # gracefully. Skipping the function ... Graph break encountered:" introduce
    # the break's own name on the next line
    if first and not (first.startswith("Encountered graph break")
                      or ("graph break" in first.lower() and first.endswith(":"))):
        headline = first
    explanation = next((ln.strip()[len("Explanation:"):].strip() for ln in reason_lines
                        if ln.strip().startswith("Explanation:")), "")
    return {"reason": reason, "hints": hints, "frames": frames,
            "gb_id": gb.group(1) if gb else None, "headline": headline or reason[:200],
            "explanation": explanation}


class TraceHandler(logging.Handler):
    def __init__(self, ctx: CaptureContext, findings: Findings, kernels: KernelTimes | None = None) -> None:
        super().__init__(level=logging.DEBUG)
        self.ctx = ctx
        self.findings = findings
        self.kernels = kernels
        self._strings: dict[int, str] = {}
        self._open: dict[tuple, float] = {}     # (compile id, thread) -> start of a C++ compile
        self._cpp_s: dict[str, float] = {}      # compile id -> seconds in C++ compiles
        self._started_at: dict[str, list] = {}  # compile id -> the user's [file, line, function]

    def emit(self, record: logging.LogRecord) -> None:
        ctx = self.ctx
        if not ctx.active:
            return
        try:
            md = getattr(record, "metadata", {}) or {}
            if ctx.in_own_work:  # graphdbg's own compiles are not the program's, but
                # a compiled graph's backward that our gradient check compiled first is
                if self.kernels is not None and _compile_id(md) is not None:
                    self._kernel_event(md, getattr(record, "payload", None))
                return
            self._handle(md, getattr(record, "payload", None))
        except Exception as exc:
            ctx.internal_error("trace handler", exc)

    def _handle(self, md: dict, payload: str | None) -> None:
        names = [k for k in md if k not in ("frame_id", "frame_compile_id", "attempt",
                                            "has_payload", "stack", "rank",
                                            "compiled_autograd_id", "subgraph_name")]
        if not names:
            return
        name = names[0]
        if name == "str":  # string interning for dynamo_start stacks
            s, idx = md["str"]
            self._strings[idx] = s
            return
        key = name
        if name == "artifact":
            key = f"artifact:{md['artifact'].get('name')}"
        cid = _compile_id(md)
        ctx = self.ctx
        if key in _KEEP:
            text = payload if payload is None or len(payload) <= _MAX_PAYLOAD else payload[:_MAX_PAYLOAD]
            ctx.writer.add(EventRow(seq=ctx.next_seq(), t=ctx.now(), name=key, compile_id=cid,
                                    metadata=dumps(md), payload=text))
        if key == "dynamo_start":
            self.findings.compile_started(cid)  # a recompile torch announced goes ahead
            stack = md["dynamo_start"].get("stack") or []
            self._progress_start(stack, cid)
            self._user_start(stack, cid)
        if key == "artifact:dynamo_graph_break_reason" and payload:
            self._graph_break(payload, cid)
        elif key == "artifact:recompile_reasons" and payload:
            self._recompile(payload, cid)
        elif key == f"artifact:{compat.DYNAMO_ERROR_ARTIFACT}":
            # the failed graph is still whole here (not at compilation_metrics)
            self.findings.compile_failing(sys.exc_info()[1])
        elif key == "compilation_metrics":
            self._metrics(md["compilation_metrics"], cid)
        elif key == "chromium_event" and payload and cid and _TIMED_EVENT in payload:
            self._timed(payload, cid)
        elif self.kernels is not None:
            self._kernel_event(md, payload)

    def _kernel_event(self, md: dict, payload: str | None) -> None:
        """Inductor's output code and provenance, for the kernel times."""
        kernels = self.kernels
        if "inductor_output_code" in md:
            kernels.output_code(_compile_id(md), md, payload)
        elif "artifact" in md:
            name = md["artifact"].get("name")
            if name == "inductor_provenance_tracking_kernel_stack_traces":
                kernels.stack_traces(payload)
            elif name == "inductor_provenance_tracking_node_mappings":
                kernels.node_mappings(payload)

    def _timed(self, payload: str, cid: str) -> None:
        """torch's timing events of a compile: the C++ compiles (inductor's
        `compile_file`) are summed per compile id for the breakdown."""
        e = json.loads(payload)
        if e.get("name") != "compile_file":
            return
        key = (cid, e.get("tid"))
        if e.get("ph") == "B":
            self._open[key] = e.get("ts", 0.0)
        elif e.get("ph") == "E" and key in self._open:
            self._cpp_s[cid] = self._cpp_s.get(cid, 0.0) + (e.get("ts", 0.0) - self._open.pop(key)) / 1e6
        elif e.get("ph") == "X":
            self._cpp_s[cid] = self._cpp_s.get(cid, 0.0) + e.get("dur", 0.0) / 1e6

    def _progress_start(self, stack: list, cid: str | None) -> None:
        progress = self.ctx.progress
        if not progress.enabled or not stack:
            return
        top = stack[-1]
        func, _ = original_function(top.get("name", "?"))
        file = self._strings.get(top.get("filename"), "?")
        progress.begin(f"graphdbg: torch.compile is tracing {func} "
                       f"({os.path.basename(file)}:{top.get('line')}) [{cid}]")

    def _user_start(self, stack: list, cid: str | None) -> None:
        """The user's innermost line in the stack a compile started from: where
        a compile of torch's own code (DDP's forward, a context manager's
        ``__init__``) is placed."""
        for top in reversed(stack):
            file = self._strings.get(top.get("filename"))
            if file and not is_internal(file):
                func, _ = original_function(top.get("name", "?"))
                self._started_at[cid] = [os.path.abspath(file), top.get("line"), func]
                return

    # -- graph breaks -------------------------------------------------------------
    def _graph_break(self, payload: str, cid: str | None) -> None:
        exc = sys.exc_info()[1]  # Dynamo's Unsupported, on its way to becoming a break
        self.findings.graph_break(parse_graph_break(payload), cid, getattr(exc, "gb_type", None),
                                  exc)

    # -- recompiles ----------------------------------------------------------------
    def _recompile(self, payload: str, cid: str | None) -> None:
        try:
            reasons = json.loads(payload)
            if isinstance(reasons, str):
                reasons = [reasons]
        except ValueError:
            reasons = [payload]
        reasons = [str(r) for r in reasons] or ["(no reason given)"]
        frame = _frame_being_compiled()
        code = None
        now = None
        guards = newest_change([parse_reason(r) for r in reasons])
        if frame is not None:
            c = frame.f_code
            code = Frame(c.co_filename, c.co_firstlineno, c.co_name)
            if c.co_filename == "<string>":  # exec'd: a dataclass's __init__, not a notebook cell
                code = generated_method(frame.f_locals.get("self", frame.f_locals.get("cls")),
                                        c) or code
            try:
                now = current_value(guards[0], frame.f_locals, frame.f_globals)
            except Exception:  # a frame torch lets us read, but never worth a failure
                now = None
        site, users = self._entry_call_site()
        self.findings.recompile(code, guards, now, site, users, reasons, cid)

    @staticmethod
    def _entry_call_site() -> tuple[Frame | None, list[Frame]]:
        """The user's call into compiled code that is being recompiled now: the
        last user frame before the first Dynamo eval_frame frame on the stack."""
        return stack.call_into(lambda code: code.co_filename.endswith(_EVAL_FRAME), skip=2)

    # -- compile metrics -------------------------------------------------------------
    def _metrics(self, m: dict, cid: str | None) -> None:
        ctx = self.ctx
        w = ctx.writer
        cid = m.get("compile_id") or cid
        func, resumed_at = original_function(m.get("co_name") or "")
        frame_id = None
        if m.get("co_filename"):
            line = resumed_at or m.get("co_firstlineno") or 0
            frame_id = w.frame_id(m["co_filename"], line, func)
        code_file = m.get("co_filename")
        if code_file and not code_file.startswith("<"):
            code_file = os.path.abspath(code_file)  # Dynamo keeps the path as given
        for g in ctx.graphs_for_compile(cid):
            if g.code_file is None:  # else backend.py named it (a module compiled whole)
                g.code_name, g.code_file = func, code_file
                g.code_line = resumed_at or m.get("co_firstlineno")
                w.put_graph(g.id, code_name=g.code_name, code_file=g.code_file,
                            code_line=g.code_line, user_frame=frame_id)
            w.put_graph(g.id, compile_time_s=m.get("entire_frame_compile_time_s"))
        if m.get("entire_frame_compile_time_s") is not None:
            ours = [g.backend_time_s for g in ctx.graphs_for_compile(cid)
                    if g.backend_time_s is not None]
            phases = compile_phases(m, self._cpp_s.pop(cid, 0.0), sum(ours) if ours else None)
            for g in ctx.graphs_for_compile(cid):
                g.metrics_seen = True
            started = self._started_at.pop(cid, None)
            if started is not None:
                phases["user"] = started
            w.add(EventRow(seq=ctx.next_seq(), t=ctx.now(), name="graphdbg_compile_time",
                           compile_id=cid, metadata=dumps({"graphdbg_compile_time": phases}),
                           payload=None))
        ctx.count("frame_compiles")
        ctx.progress.end()
        findings = self.findings
        exc = None
        skipped = False
        if m.get("fail_type"):
            # emitted while the failure propagates: the exception is in flight
            exc = sys.exc_info()[1]
            exc = compat.unwrap_cleanup_error(exc) if exc is not None else None
            # a graph break Dynamo cannot resume after: the frame runs eagerly
            skipped = findings.skipped_at_graph_break(exc, m)
        findings.compile_finished(cid, exc)
        if m.get("fail_type") and not skipped:
            if findings.recompile_limit_raised(exc):
                return  # the recompile-limit finding already says it, at the guard's line
            findings.compile_failure(m, cid, exc)


def compile_phases(m: dict, cpp_s: float, backend_own_s: float | None) -> dict:
    """One compile's time by phase, from torch's nested timers (compilation
    metrics: entire frame > backend > inductor > code generation) and the
    C++ compiles inside code generation; each phase is the difference of two
    nested totals, so they add up to the whole:

    dynamo    tracing bytecode, building guards (entire frame - backend)
    graphdbg  graphdbg's recording around the backend (backend - the backend's own call)
    backend   a backend without inductor (aot_eager, eager, a custom one)
    aot       AOT autograd, joint-graph passes (backend - inductor)
    cache     a compile served from inductor's FX graph cache or AOT autograd's
              cache (loading it; C++ built while loading is under cpp)
    lowering  inductor's passes and lowering (inductor - code generation)
    codegen   code generation, without the C++ compiles
    cpp       C++ compiles (inductor's `compile_file`)
    """
    def s(key):
        v = m.get(key)
        return float(v) if isinstance(v, (int, float)) else None
    total = s("entire_frame_compile_time_s") or 0.0
    backend = min(s("backend_compile_time_s") or 0.0, total)
    own = min(backend_own_s, backend) if backend_own_s is not None else backend
    inductor, codegen = s("inductor_compile_time_s"), s("code_gen_time_s")
    out = dict.fromkeys(COMPILE_PHASES, 0.0)
    out["dynamo"] = total - backend
    out["graphdbg"] = backend - own
    fx_cache = {"hits": int(m.get("inductor_fx_local_cache_hit_count") or 0)
                + int(m.get("inductor_fx_remote_cache_hit_count") or 0),
                "misses": int(m.get("inductor_fx_local_cache_miss_count") or 0)
                + int(m.get("inductor_fx_remote_cache_miss_count") or 0)}
    aot_cache = {"hits": int(m.get("aotautograd_local_cache_hit_count") or 0)
                 + int(m.get("aotautograd_remote_cache_hit_count") or 0),
                 "misses": int(m.get("aotautograd_local_cache_miss_count") or 0)
                 + int(m.get("aotautograd_remote_cache_miss_count") or 0)}
    if inductor is None:
        # AOT autograd's cache can serve the whole compiled graph: a load, not a
        # compile (but loading may build the C++ the cache does not hold)
        if aot_cache["hits"] and not aot_cache["misses"]:
            cpp = min(cpp_s, own)
            out.update(cache=own - cpp, cpp=cpp)
        else:
            out["backend"] = own
    else:
        inductor = min(inductor, own)
        codegen = min(codegen or 0.0, inductor)
        out["aot"] = own - inductor
        if fx_cache["hits"] and not fx_cache["misses"]:
            # a cache hit skips lowering and codegen: inductor loaded the cached
            # graph, building its C++ again when that was not kept
            cpp = min(cpp_s, inductor - codegen)
            out.update(cache=inductor - codegen - cpp, codegen=codegen, cpp=cpp)
        else:
            cpp = min(cpp_s, codegen)
            out.update(lowering=inductor - codegen, codegen=codegen - cpp, cpp=cpp)
    out = {k: round(v, 6) for k, v in out.items()}
    out["total"] = round(total, 6)
    out["fx_cache"] = fx_cache
    out["aot_cache"] = aot_cache
    out["failed"] = bool(m.get("fail_type"))
    return out


class RecompileLimitHandler(logging.Handler):
    """Catches Dynamo's "hit config.recompile_limit" warning."""

    def __init__(self, ctx: CaptureContext, findings: Findings) -> None:
        super().__init__(level=logging.WARNING)
        self.ctx = ctx
        self.findings = findings

    def emit(self, record: logging.LogRecord) -> None:
        if not self.ctx.active or not str(record.msg).startswith("torch._dynamo hit config."):
            return
        try:
            limit_type, limit, func_info, reason = record.args[:4]
            self.findings.recompile_limit(limit_type, limit, func_info, reason,
                                          stack.user_stack())
        except Exception as exc:
            self.ctx.internal_error("recompile-limit handler", exc)


class TraceCapture:
    """Installs both handlers, and re-installs ours if the program resets
    torch's logging (``torch._logging.set_logs`` clears trace handlers)."""

    def __init__(self, ctx: CaptureContext, findings: Findings, kernels: KernelTimes | None = None) -> None:
        self.handler = TraceHandler(ctx, findings, kernels)
        self.limit_handler = RecompileLimitHandler(ctx, findings)
        self._orig_init_logs = None
        self._limit_logger = logging.getLogger("torch._dynamo.convert_frame")

    def install(self) -> None:
        trace_log = torch_logging.trace_log
        trace_log.setLevel(logging.DEBUG)
        trace_log.addHandler(self.handler)
        self._limit_logger.addHandler(self.limit_handler)
        orig = torch_logging._init_logs
        self._orig_init_logs = orig
        handler = self.handler

        def _init_logs(*args: Any, **kwargs: Any):
            result = orig(*args, **kwargs)
            if handler not in torch_logging.trace_log.handlers:
                torch_logging.trace_log.setLevel(logging.DEBUG)
                torch_logging.trace_log.addHandler(handler)
            return result

        torch_logging._init_logs = _init_logs

    def uninstall(self) -> None:
        torch_logging.trace_log.removeHandler(self.handler)
        self._limit_logger.removeHandler(self.limit_handler)
        if self._orig_init_logs is not None:
            torch_logging._init_logs = self._orig_init_logs
            self._orig_init_logs = None
