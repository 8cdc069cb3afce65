"""Graph breaks and recompiles, from torch's structured trace (trace.py).
Apart because a recompile is a small state machine: held from torch's
announcement until its compile starts (a recompile the limit refuses is part
of the limit's finding instead), and the frames one call recompiles for the
same change join one finding.

A mixin of `Findings` (writer.py): it writes through `_add`/`_update`, reads
`_written` back, remembers exceptions with `_remember`, and places a finding
with no line of its own with `_user_call` (checks.py).
"""

from __future__ import annotations

import os
import re
import weakref
from dataclasses import dataclass

from graphdbg.runfile.details import CompileErrorDetail, GraphBreakDetail, RecompileDetail
from graphdbg.core.sourcemap import Frame, code_line, original_function

from ..record.ddp import DDP_HINT, FSDP_HINT, expected_break
from ..placement.cells import cell_name
from ..placement.guards import exception_chain
from ..placement.internal import in_library, is_internal, is_internal_frame, wrapper_at
from ..placement.nodes import innermost_user
from .guards import GuardFailure, carried, describe, describe_repeats, hint

_OWNERS = {"ddp": "DistributedDataParallel's own forward", "fsdp": "FSDP2's hooks"}


class Recompiles:
    """Mixin of `Findings`: graph breaks, recompiles and the recompile limit."""

    def __init__(self) -> None:
        super().__init__()
        # code object -> (finding key, frame, stack, guards) of its latest recompile
        self._recompiled: dict[str, tuple] = {}
        self._limit_key: str | None = None
        # a recompile torch announced, not yet started (or refused by the limit)
        self._pending: _Recompile | None = None
        # the latest recompile's cause: the frames one call recompiles for it join its finding
        self._group: dict | None = None
        self._recompile_text: dict[str, str] = {}  # finding key -> message without its frames
        # exceptions of this compile's graph breaks: a frame that fails with one
        # was skipped by Dynamo (it runs eagerly), no compile error
        self._breaks: list[tuple[weakref.ref, str]] = []

    # -- compile events (from torch's structured trace) ---------------------------------
    def graph_break(self, info: dict, cid: str | None, gb_type: str | None,
                    exc: BaseException | None = None) -> None:
        """A graph break, ``info`` as `trace.parse_graph_break` gives it: one
        finding per (user line, break type), counted up on repeats. ``exc``:
        Dynamo's exception for it; when the frame's compile then fails with
        it, Dynamo skipped the frame (`skipped_at_graph_break`)."""
        w = self.writer
        kept = [(f, c) for f, c in info["frames"]
                if not is_internal_frame(f.file, f.line, f.function)]
        frames = [f for f, _ in kept]
        codes = [c for _, c in kept]
        stack = w.stack_id(frames, codes)
        user = innermost_user(frames)
        user_id = None
        if user is not None:
            code = codes[frames.index(user)]
            user_id = w.frame_id(*user, code=code or None)
        gb_type = gb_type or info["headline"]
        where = f"{user.file}:{user.line}" if user else "?"
        key = f"graph_break|{where}|{gb_type}"
        owner = expected_break([f for f, _ in info["frames"]])   # DDP's or FSDP2's own code
        self._add(
            key,
            kind="graph_break", severity="info" if owner else "warning",
            message=(f"graph break in {_OWNERS[owner]} (expected): {info['headline']}"
                     if owner else f"graph break: {info['headline']}"),
            reason=info["reason"],
            hint=(DDP_HINT if owner == "ddp" else FSDP_HINT) if owner
            else "\n".join(info["hints"]) or None,
            user_frame=user_id, stack=stack, compile_id=cid,
            detail=GraphBreakDetail.of(gb_id=info["gb_id"], gb_type=gb_type,
                                       explanation=info["explanation"], frame_skipped=False,
                                       expected_in=owner))
        if exc is not None:
            self._breaks.append((weakref.ref(exc), key))
        self.ctx.count("graph_break_events")

    def skipped_at_graph_break(self, exc: BaseException | None, m: dict) -> bool:
        """True when a frame's compile fails with the exception of one of its
        graph breaks: Dynamo could not resume after the break (inside a
        ``with`` of a context manager it cannot trace, say) and skips the
        frame, which runs eagerly; the program goes on. The graph break says
        so; it is no compile error."""
        if exc is None:
            return False
        chain = exception_chain(exc)
        for ref, key in self._breaks:
            e = ref()
            if e is None or not any(e is c for c in chain):
                continue
            row = self._written.get(key)
            if row is not None and not row["detail"].frame_skipped:
                func, resumed = original_function(m.get("co_name") or "?")
                line = resumed or m.get("co_firstlineno")
                where = (f" at {os.path.basename(m['co_filename'])}:{line}"
                         if m.get("co_filename") else "")
                self._update(key, detail=row["detail"].updated(
                    frame_skipped=True, skipped_function=f"{func}(){where}"))
                self._update(key, message=f"{row['message']} (torch.compile cannot resume "
                                          f"after it: {func}(){where} runs eagerly)")
            return True
        return False

    def recompile(self, code: Frame | None, guards: list[GuardFailure], now: str | None,
                  site: Frame | None, users: list[Frame], reasons: list[str],
                  cid: str | None) -> None:
        """Dynamo is about to recompile ``code`` (torch's ``recompile_reasons``):
        held until the compile starts (`compile_started`), when it is written;
        a recompile the recompile limit refuses is no recompile, but part of
        the limit's finding (`recompile_limit`).

        ``guards`` are torch's reasons, one per cached version, newest first:
        the newest version's failed guard is what changed since the last
        compile; the others are kept in the detail."""
        if self._pending is not None:  # (never two at once; written rather than lost)
            self._write_recompile(self._pending)
            self._pending = None
        if guards and guards[0].kind == "backend" and self.ctx.own_backend:
            return   # graphdbg.compare's own backend met the program's compiled code
        if code is not None:   # the code after a graph break: its ___stackN named
            resumed = original_function(code.function)[1]
            guards = [carried(g, code.file, resumed) for g in guards]
        self._pending = _Recompile(code, guards, now, site, list(users), list(reasons), cid)

    def compile_started(self, cid: str | None) -> None:
        """Dynamo started compiling a frame (``dynamo_start``): the recompile
        torch announced for it goes ahead."""
        if self._pending is not None:
            pending, self._pending = self._pending, None
            self._write_recompile(pending)

    def compile_finished(self, cid: str | None, exc: BaseException | None) -> None:
        """A frame's compile ended (``compilation_metrics``; ``exc``: the
        failure in flight). A recompile still held here was refused by the
        recompile limit (its warning, which `recompile_limit` reads, did not
        reach us: a logging level raised), or went ahead and failed."""
        pending, self._pending = self._pending, None
        if pending is not None:
            limit = _limit_exceeded(exc)
            if limit is None:
                self._write_recompile(pending)
            else:
                code = pending.code
                func_info = (f"'{code.function}' ({code.file}:{code.line})" if code is not None
                             else "?")
                self._pending = pending
                self.recompile_limit(limit[0], limit[1], func_info, pending.reasons[0], [])
                self._pending = None
        self._breaks.clear()

    def _locate(self, p: "_Recompile") -> tuple[str, int | None, int | None, str]:
        """(the function's name, user frame id, stack id, code key) of a
        recompile: at the line that installed the failed guard when torch
        knows it (a library's line stays, the user's call above it), else at
        the user's call."""
        w = self.writer
        code, guard = p.code, p.guards[0]
        fn = "?"
        if code is not None:
            fn = _function_name(code)
            named = self._whole_compile(code, p.cid)
            if named is not None:
                fn = named
        source = [(f, c) for f, c in guard.source
                  if not is_internal_frame(f.file, f.line, f.function)]
        frames = list(p.users)
        codes = [None] * len(frames)
        for f, c in source:
            if f not in frames:
                frames.append(f)
                codes.append(c or None)
        where = innermost_user(frames) if source else p.site
        user_id = None
        if where is not None:
            c = codes[frames.index(where)] if where in frames else None
            user_id = w.frame_id(*where, code=c)
        stack = w.stack_id(frames, [c or code_line(f.file, f.line) for f, c in zip(frames, codes)])
        code_key = f"{code.file}:{code.line}:{code.function}" if code else "?"
        return fn, user_id, stack, code_key

    def _write_recompile(self, p: "_Recompile") -> None:
        """A recompile that went ahead: one finding per cause. A cause is a
        (code object, failed guard), counted up when the same guard fails
        again; the frames that one call recompiles for the same change (a
        forward that graph-breaks into several frames, each guarding the
        new size) join the finding of the first, which lists them. Each frame
        recompiled counts one, as torch counts them."""
        guard = p.guards[0]
        fn, user_id, stack, code_key = self._locate(p)
        actual = guard.actual if guard.actual is not None else p.now
        change = (guard.kind, guard.expected, actual)
        group = self._group
        frame = {"function": p.code.function if p.code else None,
                 "file": p.code.file if p.code else None, "line": p.code.line if p.code else None,
                 "name": fn, "guard": guard.text, "recompiles": 1}
        if group is not None and group["change"] == change and code_key not in group["codes"] \
                and _same_call(group, p):
            # another frame of the same call, recompiled for the same change
            key = group["key"]
            group["codes"].add(code_key)
            self.writer.diagnostic(key, kind="recompile", severity="warning", message="",
                                   compile_id=p.cid)  # counts up
            detail = self._written[key]["detail"]
            frames = _with_frame(detail.frames, frame)
            events = (detail.events + [{"compile_id": p.cid, "reasons": p.reasons}])[-20:]
            detail = detail.updated(frames=frames[:50], events=events,
                                    frame_recompiles=detail.frame_recompiles + 1)
            self._update(key, detail=detail,
                         message=_with_frames(self._recompile_text[key], frames))
        else:
            key = f"recompile|{code_key}|{guard.key}"
            first = key not in self._written
            self._add(
                key, kind="recompile", severity="warning",
                message=f"recompile of {fn}: {describe(guard, p.now)}",
                reason="\n".join(p.reasons), hint=hint(guard, p.now), user_frame=user_id,
                stack=stack, compile_id=p.cid,
                detail=RecompileDetail.of(
                    function=p.code.function if p.code else None,
                    def_file=p.code.file if p.code else None,
                    def_line=p.code.line if p.code else None,
                    guard=guard.text, guard_kind=guard.kind, subject=guard.subject,
                    guard_located=any(not is_internal(f.file) for f, _ in guard.source),
                    changes=[], events=[], frames=[], frame_recompiles=0))
            detail = self._written[key]["detail"]
            changes = detail.changes + [{"expected": guard.expected, "actual": actual}]
            events = (detail.events + [{"compile_id": p.cid, "reasons": p.reasons}])[-20:]
            frames = _with_frame(detail.frames, frame)
            text = (f"recompile of {fn}: "
                    + (describe(guard, p.now) if first else describe_repeats(guard, changes)))
            self._recompile_text[key] = text
            self._update(key, message=_with_frames(text, frames),
                         detail=detail.updated(changes=changes[-50:], events=events,
                                               frames=frames[:50],
                                               frame_recompiles=detail.frame_recompiles + 1))
            self._group = {"key": key, "change": change, "codes": {code_key},
                           "site": p.site, "users": p.users}
        if p.code is not None:
            self._recompiled[code_key] = (key, user_id, stack, p.guards)
        self.ctx.count("recompiles")

    def _whole_compile(self, code: Frame, cid: str | None) -> str | None:
        """For torch's own frame (a module compiled whole: `inner` in
        external_utils.py) or a library's (a model's forward decorator), the
        name its graphs got: `Sequential (torch.compile) at model.py:9`."""
        if not cid or not (is_internal(code.file) or in_library(code.file)  # transformers' `wrapper`
                           or wrapper_at(code.file, code.line, code.function)):   # a user's
            return None
        prefix = cid.rsplit("/", 1)[0] + "/"
        for g in self.ctx.graphs.values():
            if (g.compile_id or "").startswith(prefix) and g.code_file \
                    and not is_internal(g.code_file):
                return f"{g.code_name} at {os.path.basename(g.code_file)}:{g.code_line}"
        return None

    def recompile_limit(self, limit_type: str, limit, func_info: str, reason,
                        users: list[Frame]) -> None:
        """Dynamo gave up on a function after too many recompiles, refusing the
        recompile it was asked for: an error at the line of the guard whose
        failure it refused (no recompile: the function runs eagerly). Of kind
        `compile_error`, as torch fails that compile: a recompile count is
        the recompiles that happened."""
        m = re.match(r"'(?P<name>.*)' \((?P<file>.*):(?P<line>\d+)\)$", str(func_info))
        name = m["name"] if m else str(func_info)
        fn = f"{name}() at {_where(m['file'], m['line'])}" if m else name
        code_key = f"{m['file']}:{m['line']}:{m['name']}" if m else None
        refused, self._pending = self._pending, None
        if refused is not None and refused.code is not None and code_key is not None \
                and f"{refused.code.file}:{refused.code.line}:{refused.code.function}" != code_key:
            self._write_recompile(refused)  # (another function's: not this one's refusal)
            refused = None
        last = self._recompiled.get(code_key) if code_key else None
        refused_detail = None
        if refused is not None:
            _, user_id, stack, _ = self._locate(refused)
            guards = refused.guards
            g = guards[0]
            own = f"recompile|{code_key}|{g.key}"
            guard_key = own if own in self._written else (last[0] if last else None)
            refused_detail = {"compile_id": refused.cid, "guard": g.text,
                              "change": describe(g, refused.now), "reasons": refused.reasons}
        elif last is not None:
            guard_key, user_id, stack, guards = last
            g = guards[0]
        if refused is not None or last is not None:
            compiled_for = []
            for other in guards:
                if other.key == g.key and other.expected and other.expected not in compiled_for:
                    compiled_for.append(other.expected)
            if g.kind in ("value", "training", "len", "size", "symbolic") and compiled_for:
                what = (f"dim {g.index} of {g.subject}" if g.kind == "size" and g.index is not None
                        else g.subject)
                values = ", ".join(reversed(compiled_for))
                runs = f"calls whose {what} is not one of {values} (the values it was compiled for) " \
                       f"now run eagerly"
            else:
                runs = "calls that fail the guards of its compiled versions now run eagerly"
            detail_guard = {"guard_finding": guard_key, "guard": g.text, "compiled_for": compiled_for}
        else:
            user_id, stack = self._user_call(users)
            runs = "calls that fail the guards of its compiled versions now run eagerly"
            detail_guard = {}
        if detail_guard.get("guard_finding"):
            advice = (f"Stop the recompiles (see the recompile finding at this line) or raise "
                      f"torch._dynamo.config.{limit_type}.")
        elif detail_guard:  # no recompile before (a limit of 1): what the guard wants
            advice = f"{hint(g, refused.now if refused else None)} Or raise " \
                     f"torch._dynamo.config.{limit_type}."
        else:
            advice = f"Stop the recompiles or raise torch._dynamo.config.{limit_type}."
        refusal = f" ({refused_detail['change']})" if refused_detail else ""
        self._add(
            f"recompile_limit|{func_info}",
            kind="compile_error", severity="error",
            message=f"recompile limit hit ({limit_type}={limit}): {fn} is not compiled "
                    f"again{refusal}; {runs}",
            reason=f"last reason: {reason}",
            hint=advice,
            user_frame=user_id, stack=stack,
            compile_id=refused.cid if refused is not None else None,
            detail=CompileErrorDetail.of(recompile_limit=True, limit_type=limit_type, limit=limit,
                                         function=str(func_info), last_reason=str(reason),
                                         refused=refused_detail, **detail_guard))
        self._limit_key = f"recompile_limit|{func_info}"
        self._group = None
        self.ctx.count("recompile_limit_hits")

    def recompile_limit_raised(self, exc: BaseException | None) -> bool:
        """True for Dynamo's own "recompile limit exceeded" failure, which the
        recompile-limit finding already records (under fullgraph it reaches
        the program: remembered so that its stack joins that finding)."""
        if self._limit_key is None or _limit_exceeded(exc) is None:
            return False
        self._remember(exc, self._limit_key)
        return True


@dataclass
class _Recompile:
    """A frame's recompile as torch announces it (``recompile_reasons``)."""
    code: Frame | None          # the code object recompiled (its file, def line, name)
    guards: list[GuardFailure]  # its failed guards, the change first
    now: str | None             # the guarded value now, read from the frame
    site: Frame | None          # the user's call into compiled code
    users: list[Frame]          # the user's frames down to that call
    reasons: list[str]          # torch's text
    cid: str | None


def _function_name(code: Frame) -> str:
    """`forward() at model.py:12` (a resume function: the line it resumes at)."""
    func, resumed = original_function(code.function)
    return f"{func}() at {_where(code.file, resumed or code.line)}"


def _where(file: str, line) -> str:
    """``model.py:12``, or a notebook cell as IPython names it (``Cell In[2], line 5``)."""
    cell = cell_name(file)
    return f"{cell}, line {line}" if cell else f"{os.path.basename(file)}:{line}"


def _same_call(group: dict, p: _Recompile) -> bool:
    """Whether a recompile comes from the user's call that made the group's:
    the same call site (the user's line that called into compiled code, which
    the frames Dynamo compiles below it share: resume functions after graph
    breaks, functions it could not inline) with the same stack above it.
    (Two calls from one line in a loop are told apart by their frames: a call
    recompiles each frame once.)"""
    return p.site == group["site"] and p.users == group["users"]


def _with_frame(frames: list[dict], frame: dict) -> list[dict]:
    """A finding's recompiled frames with ``frame`` counted in."""
    out = [dict(f) for f in frames]
    same = next((f for f in out if (f["file"], f["line"], f["function"])
                 == (frame["file"], frame["line"], frame["function"])), None)
    if same is not None:
        same["recompiles"] += 1
    else:
        out.append(frame)
    return out


def _with_frames(text: str, frames: list[dict]) -> str:
    """A recompile's message, with the frames it recompiled when more than one."""
    if len(frames) < 2:
        return text
    names = [f["name"] for f in frames]
    shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
    return f"{text} ({len(frames)} compiled frames recompiled: {shown})"


_LIMIT_TYPE = re.compile(r"Limit type: (\w+)")
_LIMIT_VALUE = re.compile(r"currently set to (\d+)")


def _limit_exceeded(exc: BaseException | None) -> tuple[str, int | None] | None:
    """(limit type, limit) when ``exc`` is Dynamo's refusal of a recompile at
    the recompile limit, else None."""
    if exc is None:
        return None
    chain = exception_chain(exc)
    if not any(type(e).__name__ == "FailOnRecompileLimitHit"
               or getattr(e, "gb_type", None) == "Dynamo recompile limit exceeded" for e in chain):
        return None
    text = "\n".join(str(e) for e in chain)
    t, v = _LIMIT_TYPE.search(text), _LIMIT_VALUE.search(text)
    return (t.group(1) if t else "recompile_limit"), (int(v.group(1)) if v else None)
