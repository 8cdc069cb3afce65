"""Compile events from torch's structured trace, received in-process.

torch emits its structured trace (what TORCH_TRACE writes and tlparse reads) to
the ``torch.__trace`` logger whenever that logger has a handler. We attach one:
no environment variables, no second step. From it we take graph breaks (with
torch's full reason, the gb id, hints and the user stack), recompiles (with the
failed guard), compile errors and compile times.

Recompile-limit hits are a plain warning on ``torch._dynamo.convert_frame``;
a second handler catches those.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import traceback
from typing import TYPE_CHECKING, Any

import torch._logging._internal as torch_logging

from graphdbg.runfile import dumps
from graphdbg.sourcemap import Frame, innermost_user, is_internal, original_function, parse_traceback

if TYPE_CHECKING:
    from .session import CaptureSession

# Kept in the run file's events table (others are dropped: chromium timing
# events, fake-tensor descriptions and bytecode dumps are bulky and not used).
_KEEP = {"dynamo_start", "compilation_metrics", "dynamo_output_graph",
         "dynamo_cpp_guards_str", "dynamo_graph_break_reason", "recompile_reasons",
         "inductor_output_code", "aot_joint_graph", "aot_forward_graph",
         "aot_backward_graph", "aot_inference_graph", "guard_added",
         "artifact:dynamo_graph_break_reason", "artifact:recompile_reasons",
         "artifact:fx_graph_cache_hit", "artifact:fx_graph_cache_miss"}
_MAX_PAYLOAD = 512 * 1024
_EVAL_FRAME = os.path.join("torch", "_dynamo", "eval_frame.py")
_GB_ID = re.compile(r"/gb/(gb\d+)\.html")


def _compile_id(md: dict) -> str | None:
    if "frame_id" not in md:
        return None
    cid = f"{md['frame_id']}/{md.get('frame_compile_id', 0)}"
    if md.get("compiled_autograd_id") is not None:
        cid = f"!{md['compiled_autograd_id']}/{cid}"
    return cid


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
    frames = parse_traceback(tb)
    gb = _GB_ID.search(payload)
    # the first meaningful line of the reason names the kind of break
    headline = next((ln.strip() for ln in reason_lines[1:] if ln.strip()
                     and not ln.strip().startswith(("Explanation:", "Hint:"))), "")
    if reason_lines and not reason_lines[0].startswith("Encountered graph break"):
        headline = reason_lines[0]
    explanation = next((ln.strip()[len("Explanation:"):].strip() for ln in reason_lines
                        if ln.strip().startswith("Explanation:")), "")
    return {"reason": reason, "hints": hints, "frames": frames,
            "gb_id": gb.group(1) if gb else None, "headline": headline or reason[:200],
            "explanation": explanation}


def _guard_text(reason: str) -> str:
    """First line of a guard-failure reason, without its "0/0: " cache-entry
    prefix and the trailing "# code  # file:line" comment."""
    line = re.sub(r"^\d+/\d+: ", "", reason.strip().splitlines()[0] if reason.strip() else "")
    line = re.split(r"\s{2,}#", line)[0].strip()
    line = re.sub(r"\._modules\['([^']+)'\]", r".\1", line)  # blocks.0.drop, as the user writes it
    if not line.startswith(("tensor ", "type of", "id of", "len of")) and "mismatch" not in line:
        line = f"guard failed: {line}"
    return line


def _recompile_hint(guard: str) -> str:
    if "size mismatch" in guard or "stride mismatch" in guard:
        return ("An input's shape changed. If it keeps changing, mark that dimension "
                "dynamic (torch._dynamo.mark_dynamic) or compile with dynamic=True.")
    if ".training" in guard:
        return ("A module switched between train() and eval(). One compile per mode is "
                "expected; many modules toggling means many recompiles.")
    if "dtype" in guard or "device" in guard or "requires_grad" in guard:
        return "An input's dtype, device or requires_grad changed between calls."
    if "==" in guard:
        return ("A Python value the graph was specialised on changed. Pass it as a "
                "tensor, or keep it constant across calls.")
    return "A guard on the compiled code failed for this call (see the reason)."


class TraceHandler(logging.Handler):
    def __init__(self, session: "CaptureSession") -> None:
        super().__init__(level=logging.DEBUG)
        self.session = session
        self._strings: dict[int, str] = {}
        self._metrics_code: dict[str, tuple[str, str, int]] = {}

    def emit(self, record: logging.LogRecord) -> None:
        session = self.session
        if not session.active or session.checking:  # our own check compiles are not the program's
            return
        try:
            self._handle(getattr(record, "metadata", {}) or {}, getattr(record, "payload", None))
        except Exception as exc:
            session.internal_error("trace handler", exc)

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
        session = self.session
        if key in _KEEP:
            text = payload if payload is None or len(payload) <= _MAX_PAYLOAD else payload[:_MAX_PAYLOAD]
            session.writer.add("events", (session.next_seq(), session.now(), key, cid,
                                          dumps(md), text))
        if key == "dynamo_start":
            self._progress_start(md["dynamo_start"].get("stack") or [], cid)
        if key == "artifact:dynamo_graph_break_reason" and payload:
            self._graph_break(payload, cid)
        elif key == "artifact:recompile_reasons" and payload:
            self._recompile(payload, cid)
        elif key == "compilation_metrics":
            self._metrics(md["compilation_metrics"], cid)

    def _progress_start(self, stack: list, cid: str | None) -> None:
        progress = self.session.progress
        if not progress.enabled or not stack:
            return
        top = stack[-1]
        func, _ = original_function(top.get("name", "?"))
        file = self._strings.get(top.get("filename"), "?")
        progress.begin(f"graphdbg: torch.compile is tracing {func} "
                       f"({os.path.basename(file)}:{top.get('line')}) [{cid}]")

    # -- graph breaks -------------------------------------------------------------
    def _graph_break(self, payload: str, cid: str | None) -> None:
        info = parse_graph_break(payload)
        w = self.session.writer
        kept = [(f, c) for f, c in info["frames"] if not is_internal(f.file)]
        frames = [f for f, _ in kept]
        codes = [c for _, c in kept]
        stack = w.stack_id(frames, codes)
        user = innermost_user(frames)
        user_id = None
        if user is not None:
            code = codes[frames.index(user)]
            user_id = w.frame_id(user.file, user.line, user.function, code or None)
        exc = sys.exc_info()[1]
        gb_type = getattr(exc, "gb_type", None) or info["headline"]
        where = f"{user.file}:{user.line}" if user else "?"
        w.diagnostic(
            f"graph_break|{where}|{gb_type}",
            kind="graph_break", severity="warning",
            message=f"graph break: {info['headline']}",
            reason=info["reason"], hint="\n".join(info["hints"]) or None,
            user_frame=user_id, stack=stack, compile_id=cid,
            detail={"gb_id": info["gb_id"], "gb_type": gb_type,
                    "explanation": info["explanation"]})
        self.session.counts["graph_break_events"] += 1

    # -- recompiles ----------------------------------------------------------------
    def _recompile(self, payload: str, cid: str | None) -> None:
        try:
            reasons = json.loads(payload)
            if isinstance(reasons, str):
                reasons = [reasons]
        except ValueError:
            reasons = [payload]
        reasons = [str(r) for r in reasons] or ["(no reason given)"]
        site, user_frames = self._entry_call_site()
        w = self.session.writer
        stack = w.stack_id(user_frames)
        user_id = w.frame_id(*site) if site else None
        first = _guard_text(reasons[0])
        where = f"{site.file}:{site.line}" if site else "?"
        # One finding per call site: a changed input re-guards every frame and
        # resume function under that call, each a recompile of its own in torch.
        row = w.diagnostic(
            f"recompile|{where}",
            kind="recompile", severity="warning",
            message=f"recompile: {first}",
            reason="\n".join(reasons),
            hint=_recompile_hint(first),
            user_frame=user_id, stack=stack, compile_id=cid,
            detail={"reasons": []})
        row["detail"]["reasons"].append({"compile_id": cid, "reasons": reasons})
        self.session.counts["recompiles"] += 1

    @staticmethod
    def _entry_call_site() -> tuple[Frame | None, list[Frame]]:
        """The user's call into compiled code that is being recompiled now: the
        last user frame before the first Dynamo eval_frame frame on the stack."""
        frames = [Frame(f.filename, f.lineno or 0, f.name)
                  for f in traceback.extract_stack(sys._getframe(2))]
        site = None
        for i, f in enumerate(frames):
            if f.file.endswith(_EVAL_FRAME):
                site = next((p for p in reversed(frames[:i]) if not is_internal(p.file)), None)
                break
        user_frames = [f for f in frames if not is_internal(f.file)]
        if site is None and user_frames:
            site = user_frames[-1]
        if site is not None and site in user_frames:
            user_frames = user_frames[:user_frames.index(site) + 1]
        return site, user_frames

    # -- compile metrics -------------------------------------------------------------
    def _metrics(self, m: dict, cid: str | None) -> None:
        w = self.session.writer
        cid = m.get("compile_id") or cid
        func, resumed_at = original_function(m.get("co_name") or "")
        frame_id = None
        if m.get("co_filename"):
            line = resumed_at or m.get("co_firstlineno") or 0
            frame_id = w.frame_id(m["co_filename"], line, func)
        for g in w.graphs_for_compile(cid):
            w.put_graph(g["id"], code_name=func, code_file=m.get("co_filename"),
                        code_line=resumed_at or m.get("co_firstlineno"),
                        user_frame=frame_id,
                        compile_time_s=m.get("entire_frame_compile_time_s"))
        self.session.counts["frame_compiles"] += 1
        self.session.progress.end()
        if m.get("fail_type"):
            # emitted while the failure propagates: the exception is in flight
            self.session.compile_failure(m, cid, sys.exc_info()[1])


class RecompileLimitHandler(logging.Handler):
    """Catches Dynamo's "hit config.recompile_limit" warning."""

    def __init__(self, session: "CaptureSession") -> None:
        super().__init__(level=logging.WARNING)
        self.session = session

    def emit(self, record: logging.LogRecord) -> None:
        if not self.session.active or not str(record.msg).startswith("torch._dynamo hit config."):
            return
        try:
            limit_type, limit, func_info, reason = record.args[:4]
            m = re.match(r"'(?P<name>.*)' \((?P<file>.*):(?P<line>\d+)\)$", str(func_info))
            w = self.session.writer
            frames = [Frame(f.filename, f.lineno or 0, f.name)
                      for f in traceback.extract_stack(sys._getframe(1))]
            user_frames = [f for f in frames if not is_internal(f.file)]
            user = user_frames[-1] if user_frames else None
            w.diagnostic(
                f"recompile_limit|{func_info}",
                kind="recompile", severity="error",
                message=f"recompile limit hit ({limit_type}={limit}): {m['name'] if m else func_info} "
                        f"now runs eagerly",
                reason=f"last reason: {reason}",
                hint=f"Stop the recompiles (see the recompile findings) or raise "
                     f"torch._dynamo.config.{limit_type}.",
                user_frame=w.frame_id(*user) if user else None,
                stack=w.stack_id(user_frames),
                detail={"limit_type": limit_type, "limit": limit, "function": str(func_info),
                        "last_reason": str(reason)})
            self.session.counts["recompile_limit_hits"] += 1
        except Exception as exc:
            self.session.internal_error("recompile-limit handler", exc)


class TraceCapture:
    """Installs both handlers, and re-installs ours if the program resets
    torch's logging (``torch._logging.set_logs`` clears trace handlers)."""

    def __init__(self, session: "CaptureSession") -> None:
        self.session = session
        self.handler = TraceHandler(session)
        self.limit_handler = RecompileLimitHandler(session)
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
