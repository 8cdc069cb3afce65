"""Findings from failures: the program's uncaught error, a backend or a
frame compile that failed, a torch.export failure, a malformed graph, a
compiled call that raised. A mixin of `CaptureSession` (it uses the
session's ``writer``).

Every exception recorded here is remembered by id (with its type and first
line): when the program then dies of it, the finding gets the program's
stack instead of a second, `runtime_error`, finding.
"""

from __future__ import annotations

import os
import sys
import traceback

from graphdbg.sourcemap import Frame, is_internal

from . import creation
from .failures import (compiler_error, data_dependent_symbols, exception_chain,
                       explain_unsupported, failing_node, headline, last_traced_node,
                       node_named_in,
                       raised_in_user_code, symbol_origins)
from .frames import node_source, node_target


class FailureFindings:
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
            message=headline(exc),
            reason=text, user_frame=w.frame_id(*user) if user else None, stack=stack,
            detail={"exception": type(exc).__name__,
                    "traceback": "".join(traceback.format_exception(exc))[-20000:]})

    def backend_failure(self, graph_id: int, wrapper, exc: Exception, check=None,
                        gm=None) -> None:
        """A backend raised on a graph: name the node it was processing and the
        user's line that made that node; else a node of ``gm`` its message
        names; else, when the graph the backend was working on (``check``) is
        malformed, the broken node."""
        w = self.writer
        node = failing_node(exc)
        if node is None and gm is not None:
            node = node_named_in(exc, gm.graph)
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
