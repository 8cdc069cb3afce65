"""Errors: the program's own, a backend's, a compiled call's, a frame's
failed compile, and a malformed graph, each at the user's line it comes
from (the node the error names, the line that made that node, or the user's
call when torch's code alone was compiled).

A mixin of `Findings` (writer.py): it writes through `_add`, remembers each
exception with `_remember` (so that the program dying of it adds its stack,
`uncaught`) and places findings with `node_site`/`_user_call` (checks.py).
"""

from __future__ import annotations

import os
import traceback

from graphdbg.runfile.details import CompileErrorDetail, MalformedGraphDetail, RuntimeErrorDetail
from graphdbg.core.sourcemap import parse_traceback

from ..check import fakecheck
from .common import _format_tb
from .exceptions import (compiler_error, explain_unsupported, failing_node, headline,
                         node_named_in)
from ..placement.guards import exception_chain, raised_in_user_code
from ..placement.modules import node_target
from ..placement.nodes import node_source, raised_at, user_frames
from ..placement.stack import user_stack
from ..placement.internal import is_internal


class Failures:
    """Mixin of `Findings`: errors and failed compiles."""

    def __init__(self) -> None:
        super().__init__()
        self._compile_error_cids: set = set()
        # a failing compile's checks made while its graph was whole: (exc, fake mismatches)
        self._failing: tuple[BaseException, list] | None = None

    # -- failures ------------------------------------------------------------------------
    def runtime_error(self, exc: BaseException) -> None:
        """The program's own error, at the innermost user frame of its traceback."""
        key = self.recorded_as(exc)
        if key is not None:
            self.uncaught(exc, key)
            return
        users = raised_at(exc)
        w = self.writer
        stack = w.stack_id(users)
        user = users[-1] if users else None
        text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        # Ctrl-C (SIGINT) is the user's own stop, not the program's error: where
        # it was stopped is worth knowing (a hang), at info level
        interrupted = isinstance(exc, KeyboardInterrupt)
        self._add(
            f"runtime_error|{user.file if user else '?'}:{user.line if user else 0}|{type(exc).__name__}",
            kind="runtime_error", severity="info" if interrupted else "error",
            message=("interrupted here (KeyboardInterrupt: Ctrl-C or SIGINT)" if interrupted
                     else headline(exc)),
            reason=text, user_frame=w.frame_id(*user) if user else None, stack=stack,
            detail=RuntimeErrorDetail.of(exception=type(exc).__name__, traceback=_format_tb(exc)))

    def backend_failure(self, graph_id: int, wrapper, exc: Exception, check=None,
                        gm=None) -> None:
        """A backend raised on a graph: name the node it was processing and the
        user's line that made that node; else a node of ``gm`` its message
        names; else, when the graph the backend was working on (``check``) is
        malformed, the broken node."""
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
        if user_id is None:
            # no node to blame (a toolchain failure), or a node of torch's code only
            # (torch.compile(nn.Linear(...))): the user's call that compiled
            user_id, stack = self._user_call()
        raised = raised_in_user_code(exc)
        if compiler_error(exc):
            hint = ("The C++ compiler rejected inductor's code or flags for this graph: check "
                    "torch._inductor.config.cpp (cxx, march), the CXX environment variable and the "
                    "compiler's full output in the run file.")
        elif raised is not None:
            hint = f"Raised by your code: {os.path.basename(raised[0])}:{raised[1]} in {raised[2]}."
        g = self.ctx.graphs[graph_id]
        backend = g.backend or getattr(wrapper, "__name__", "backend")
        where = f" at {target}" if target else ""
        self._compile_error_cids.add(g.compile_id)
        self._add(
            f"compile_error|graph{graph_id}", kind="compile_error", severity="error",
            message=f"backend {backend!r} failed{where}: {headline(exc)}",
            reason=str(exc)[:100000],
            hint=("The graph the backend was given is malformed: see the malformed_graph findings."
                  if check is not None and not check.ok else hint or
                  (None if node is not None else "The error names no FX node; see the full text.")),
            user_frame=user_id, stack=stack, graph_id=graph_id,
            node=node.name if node is not None else None, op=target,
            compile_id=g.compile_id,
            detail=CompileErrorDetail.of(exception=type(exc).__name__, backend=backend,
                                         raised_at=list(raised) if raised else None,
                                         compiler_error=compiler_error(exc),
                                         traceback=_format_tb(exc)))
        self._remember(exc, f"compile_error|graph{graph_id}")

    def malformed_graph(self, graph_id: int | None, check, stage: str) -> None:
        """Record what `lint.lint_graph` found in a graph."""
        w = self.writer
        caller = None
        for p in check.problems:
            user_id = stack = None
            if p.fx_node is not None:
                user_id, stack = self.node_site(p.fx_node, prefer_creator=True)
            by_pass = p.created_at is not None
            hint = _MALFORMED_HINTS.get(p.check)
            if user_id is None:
                # no line of its own (no node; a node traced before the session
                # began): at the user's call that checked, or compiled, the graph
                if caller is None:
                    caller = self._user_call()
                user_id, stack = caller
                if user_id is not None:
                    hint = (f"{p.node or 'The graph'} has no source line of its own: shown at "
                            f"your call that {'checked' if stage == 'check_graph' else 'compiled'} "
                            f"the graph. " + (hint or ""))
            if by_pass:
                model = node_source(w, p.fx_node)[0] if p.stack_trace else None
                f = w.frame(model) if model else None
                stands = (f" It stands for {os.path.basename(f['file'])}:{f['line']} `{f['code']}`."
                          if f and f.get("code") else "")
                hint = (f"{p.node} was made by your graph transformation ({p.created_at[2]}).{stands} "
                        + (hint or ""))
            self._add(
                f"malformed|{graph_id}|{stage}|{p.node}|{p.check}", kind="malformed_graph",
                severity=p.severity, message=p.message[:500], hint=hint, user_frame=user_id,
                stack=stack, graph_id=graph_id, node=p.node, op=p.target,
                detail=MalformedGraphDetail.of(
                    check=p.check, stage=stage, created_by_pass=by_pass,
                    created_at=list(p.created_at) if p.created_at else None,
                    nodes_checked=check.checked, unchecked=check.unchecked[:20]))

    def compiled_call_failed(self, graph_id: int, call_idx: int, node, exc: BaseException,
                             replay_exc: BaseException | None) -> None:
        """A compiled call raised: at ``node`` when replaying the graph eagerly
        fails there too, else at the compiled function's line."""
        w = self.writer
        user_id = stack = None
        target = None
        wrong_fakes = []
        if node is not None:
            user_id, stack, _, _ = node_source(w, node)
            target = node_target(node)
            message = f"compiled graph {graph_id} fails at {target}: {headline(exc)}"
            # the failing value came out of a custom op whose fake disagrees with it?
            wrong_fakes = fakecheck.checked(self.ctx, fakecheck.at_replay_failure, node,
                                            replay_exc)
        else:
            g = self.ctx.graphs[graph_id]
            if g.code_file and not is_internal(g.code_file):
                user_id = w.frame_id(g.code_file, g.code_line, g.code_name or "?")
            message = (f"compiled graph {graph_id} fails on inputs that eager runs fine: "
                       f"{headline(exc)}")
        if user_id is None:  # only torch's code in the graph (torch.compile(nn.Linear(...)))
            user_id, stack = self._user_call()
        key = f"runtime_error|graph{graph_id}|{node.name if node is not None else '-'}"
        self._remember(exc, key)
        self._add(
            key,
            kind="runtime_error", severity="error", message=message, reason=str(exc)[:100000],
            hint=fakecheck.hint(wrong_fakes, at_run_time=True) if wrong_fakes else None,
            user_frame=user_id, stack=stack, graph_id=graph_id,
            node=node.name if node is not None else None, op=target,
            detail=RuntimeErrorDetail.of(
                call=call_idx, exception=type(exc).__name__,
                eager_replay=None if replay_exc is None else headline(replay_exc),
                **({"fake_mismatch": [f.as_dict() for f in wrong_fakes]} if wrong_fakes else {})))

    def compile_failing(self, exc: BaseException | None) -> None:
        """Dynamo is failing a frame with ``exc`` and its graph is still whole
        (compat.DYNAMO_ERROR_ARTIFACT): check the custom ops' fakes now; the
        finding is written when the compile's metrics arrive."""
        if exc is None or self.recorded_as(exc) is not None:
            return
        self._failing = (exc, fakecheck.checked(self.ctx, fakecheck.at_compile_failure, exc))

    def _fake_mismatches(self, exc: BaseException) -> list:
        failing, self._failing = self._failing, None
        if failing is not None and any(e is failing[0] for e in exception_chain(exc)):
            return failing[1]
        return fakecheck.checked(self.ctx, fakecheck.at_compile_failure, exc)

    def compile_failure(self, m: dict, cid: str | None, exc: BaseException | None = None) -> None:
        """A frame's compile failed (Dynamo's Unsupported under fullgraph,
        TorchRuntimeError from fake tensors, an export or guard error...).
        ``exc`` is the exception on its way out, when the trace handler sees it."""
        if cid in self._compile_error_cids:
            return  # already mapped to its node by backend_failure
        w = self.writer
        # the deepest frame outside torch: torch's own fail_user_frame may be a
        # torch file (F.linear inside nn.Linear's forward); torch frames stay out
        real = list(getattr(exc, "real_stack", None) or [])
        user = user_frames(real)
        if not user and exc is not None:
            # guard-time errors (ConstraintViolationError) carry the user stack in their text
            user = user_frames(f for f, _ in parse_traceback(str(exc)))
        file, line = m.get("fail_user_frame_filename"), m.get("fail_user_frame_lineno")
        function = m.get("co_name") or "?"
        span: list = []   # the caret's (col, end_col) with the user's frame
        if user:
            file, line, function, *span = user[-1]
        elif not (file and line) or is_internal(file):
            # only torch's code was being compiled (torch.compile(nn.Linear(...))), or
            # no line known: the user's call
            user = user_stack()
            file, line, function, *span = user[-1] if user else (None, None, function)
        user_id = w.frame_id(file, line, function, *span) if file and line else None
        stack = w.stack_id(user) if user else None
        reason = str(m.get("fail_reason") or (str(exc) if exc is not None else ""))
        message = headline(exc) if exc is not None else \
            f"{m.get('fail_type')}: {reason.splitlines()[0] if reason else ''}"
        explanation, hints = explain_unsupported(reason)
        # a custom op's wrong fake made the value that failed: say so, at its register_fake
        wrong_fakes = self._fake_mismatches(exc) if exc is not None else []
        advice = fakecheck.hint(wrong_fakes) if wrong_fakes else (hints[0] if hints else None)
        key = f"compile_error|{file}:{line}|{m.get('fail_type')}|{reason[:200]}"
        self._add(
            key, kind="compile_error", severity="error", message=message[:500],
            reason=reason, hint=advice, user_frame=user_id, stack=stack,
            compile_id=cid,
            detail=CompileErrorDetail.of(
                fail_type=m.get("fail_type"), explanation=explanation, hints=hints,
                **({"fake_mismatch": [f.as_dict() for f in wrong_fakes]} if wrong_fakes else {}),
                traceback=_format_tb(exc)))
        self._remember(exc, key)


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
