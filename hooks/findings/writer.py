"""The findings writer: every finding of a capture is written here, from
plain data (graph id, FX node, user frames, exception, localisation), by the
recorders that observed it (trace.py, backend.py, divergence.py, exports.py)
and by the runner for the program's own uncaught error.

Each finding sits at the user's line: the deepest frame outside torch and
graphdbg (a library such as transformers keeps its own line, with the user's
call in the stack); for an FX node, its ``stack_trace``, or the line of the
user's pass that created it.

Every exception recorded here is remembered by id (with its type and first
line): when the program then dies of it, the finding gets the program's
stack instead of a second, `runtime_error`, finding.
"""

from __future__ import annotations

import os
import re
import sys
import traceback
import weakref
from dataclasses import dataclass

from graphdbg.runfile.details import (CheckSkippedDetail, CompileErrorDetail, Detail,
                                      DivergenceDetail, GraphBreakDetail, MalformedGraphDetail,
                                      NanInfDetail, RecompileDetail, RuntimeErrorDetail)
from graphdbg.runfile.writer import RunWriter
from graphdbg.core.sourcemap import (Frame, code_line, in_library, innermost_user, is_internal,
                                     original_function, parse_traceback, user_frames)

from .. import compat
from ..record import creation
from ..record.ddp import DDP_HINT, FSDP_HINT, expected_break
from ..check import fakecheck
from ..context import CaptureContext
from .exported import ExportFindings
from .exceptions import (compiler_error, constraint_guards, data_dependent_symbols,
                         exception_chain, explain_unsupported, failing_node, headline,
                         last_traced_node, node_named_in, raised_in_user_code, symbol_origins)
from .frames import node_source, node_target
from .guards import GuardFailure, describe, describe_repeats, hint
from ..check.numerics import finite_or_none

_SEVERITY = {"miscompile": "error", "shape": "error", "dtype": "error",
             "precision": "info", "random": "warning"}


_OWNERS = {"ddp": "DistributedDataParallel's own forward", "fsdp": "FSDP2's hooks"}


class Findings(ExportFindings):
    def __init__(self, ctx: CaptureContext) -> None:
        self.ctx = ctx
        self.writer: RunWriter = ctx.writer
        self._compile_error_cids: set = set()
        # exceptions already recorded, by id (with their type and text, to rule
        # out a reused id): not recorded again when the program dies of one
        self._recorded_excs: dict[int, tuple[str, str, str]] = {}
        # stack, detail (its details.py record) and message of each finding written, by key
        # (the run file is write-only here)
        self._written: dict[str, dict] = {}
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
        # a failing compile's checks made while its graph was whole: (exc, fake mismatches)
        self._failing: tuple[BaseException, list] | None = None

    # -- writing -------------------------------------------------------------------------
    def _add(self, key: str, *, detail: Detail, **fields) -> None:
        """A finding; a repeat of the same key only counts up."""
        self.writer.diagnostic(key, detail=detail, **fields)
        self._written.setdefault(key, {"stack": fields.get("stack"), "detail": detail,
                                       "message": fields.get("message")})

    def _update(self, key: str, **fields) -> None:
        self.writer.update_diagnostic(key, **fields)
        seen = self._written.get(key)
        if seen is not None:
            seen.update({k: fields[k] for k in ("stack", "detail", "message") if k in fields})

    # -- compile events (from torch's structured trace) ---------------------------------
    def graph_break(self, info: dict, cid: str | None, gb_type: str | None,
                    exc: BaseException | None = None) -> None:
        """A graph break, ``info`` as `trace.parse_graph_break` gives it: one
        finding per (user line, break type), counted up on repeats. ``exc``:
        Dynamo's exception for it; when the frame's compile then fails with
        it, Dynamo skipped the frame (`skipped_at_graph_break`)."""
        w = self.writer
        kept = [(f, c) for f, c in info["frames"] if not is_internal(f.file)]
        frames = [f for f, _ in kept]
        codes = [c for _, c in kept]
        stack = w.stack_id(frames, codes)
        user = innermost_user(frames)
        user_id = None
        if user is not None:
            code = codes[frames.index(user)]
            user_id = w.frame_id(user.file, user.line, user.function, code or None)
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
        source = [(f, c) for f, c in guard.source if not is_internal(f.file)]
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
            user_id = w.frame_id(where.file, where.line, where.function, c)
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
        if not cid or not (is_internal(code.file) or in_library(code.file)):  # transformers' `wrapper`
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
        fn = f"{name}() at {os.path.basename(m['file'])}:{m['line']}" if m else name
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

    # -- eager vs compiled ---------------------------------------------------------------
    def divergence(self, graph_id: int, node, call_idx: int, kind: str, final, loc, *,
                   output: int | None, mutated_input: int | None,
                   direction: str = "forward") -> None:
        """Compiled parts from eager at ``node`` (a `localize.Localization`
        ``loc`` says how it was found; ``final`` is the difference at the
        graph's output or mutated input)."""
        w = self.writer
        name = loc.node
        user_id, stack, mpath, mcls = node_source(w, node) if node is not None else (None,) * 4
        if user_id is None:  # a graph of torch's code only (a compiled optimizer step)
            user_id, stack = self._graph_site(graph_id)
        d = loc.diff or final
        stage = self.ctx.graphs[graph_id].backend if loc.stage == "user" else loc.stage
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
        detail = DivergenceDetail.of(
            classification=kind, call=call_idx, direction=direction,
            output=output, mutated_input=mutated_input,
            node=name, target=loc.target, module_path=mpath, module_class=mcls,
            stage=stage, method=loc.method, compiles=loc.compiles,
            stage_compiles=loc.by_stage.get(loc.stage, 0), seconds=round(loc.seconds, 3),
            compiles_by_stage={(stage if k == "user" else k): v for k, v in loc.by_stage.items()},
            max_abs=finite_or_none(d.max_abs), max_rel=finite_or_none(d.max_rel),
            eager_vs_fp64=d.eager_vs_fp64, compiled_vs_fp64=d.compiled_vs_fp64,
            dtype=d.dtype, isolated=loc.isolated, undecided=loc.undecided,
            output_max_abs=finite_or_none(final.max_abs),
            output_max_rel=finite_or_none(final.max_rel))
        self._add(f"divergence|{graph_id}|{name}|{kind}|{direction}", kind="divergence",
                  severity=_SEVERITY.get(kind, "error"), message=message, hint=hint,
                  user_frame=user_id, stack=stack, graph_id=graph_id, node=name, op=loc.target,
                  detail=detail)

    def aliasing(self, graph_id: int, call_idx: int, output: int, compiled: int | None,
                 eager: int | None) -> None:
        """Output ``output`` aliases input ``compiled`` compiled and ``eager`` eagerly."""
        def says(a):
            return "a copy" if a is None else f"a view of input {a}"
        user_id, _ = self._graph_site(graph_id)
        self._add(
            f"aliasing|{graph_id}|{output}", kind="divergence", severity="warning",
            message=f"output {output} is {says(compiled)} compiled but {says(eager)} in eager",
            hint="In-place changes through this output reach the input in one mode and not in "
                 "the other.",
            user_frame=user_id, graph_id=graph_id,
            detail=DivergenceDetail.of(classification="aliasing", call=call_idx, output=output,
                                       compiled_aliases_input=compiled, eager_aliases_input=eager))

    def _graph_site(self, graph_id: int) -> tuple[int | None, int | None]:
        """(frame id, stack id) for a finding about a graph whose node names no
        user line (its nodes are torch's code: ``torch.compile(opt.step)``):
        the compiled function when it is the user's, else the user's call
        into compiled code on the stack now (a check made during the call)."""
        g = self.ctx.graphs[graph_id]
        if g.code_file and not is_internal(g.code_file):
            return self.writer.frame_id(g.code_file, g.code_line or 0, g.code_name or "?"), None
        return self._user_call()

    def _user_call(self, caller: list[Frame] | None = None) -> tuple[int | None, int | None]:
        """(frame id, stack id) of the user's call on the stack now (``caller``:
        the user's frames, when taken already), or (None, None) without one:
        where a finding goes that has no line of its own (a graph of torch's
        code only, ``torch.compile(nn.Linear(...))``; a toolchain's failure)."""
        if caller is None:
            caller = _user_stack()
        if not caller:
            return None, None
        return self.writer.frame_id(*caller[-1]), self.writer.stack_id(caller)

    def check_skipped(self, graph_id: int, need: int, limit: int, what: str) -> None:
        """Graph ``graph_id`` (compiled, or an export) is not checked against
        eager: the check would take more memory than its budget."""
        from ..check.checkcost import human
        g = self.ctx.graphs[graph_id]
        user_id = self.writer.frame_id(g.code_file, g.code_line, g.code_name or "?") \
            if g.code_file else None
        self._add(
            f"check_skipped|{graph_id}", kind="check_skipped", severity="info",
            message=f"graph {graph_id} ({g.code_name or '?'}) was not checked against eager: the "
                    f"check needs about {human(need)}, over its budget of {human(limit)} ({what})",
            hint=("Check a smaller piece: graphdbg.check_export(submodule, inputs) on one block "
                  if g.backend in ("torch.export", "onnx") else
                  "Check a smaller piece: graphdbg.compare(submodule, *inputs) on one block ")
            + "or a smaller batch; or give the check more room with --compare-memory MIB.",
            user_frame=user_id, graph_id=graph_id,
            detail=CheckSkippedDetail.of(need_bytes=need, budget_bytes=limit, budget=what))

    def collectives_not_checked(self, graph_id: int, collectives: list[tuple[str, str]]) -> None:
        """Graph ``graph_id`` runs collectives, (node, op) each: checking it
        would issue them a second time on this rank alone, and every other
        rank would wait for them (until its timeout). Such a graph is
        recorded, never re-run. Placed at the first collective's line."""
        g = self.ctx.graphs[graph_id]
        user_id = next((g.node_frames[n] for n, _ in collectives if n in g.node_frames), None)
        if user_id is None and g.code_file:
            user_id = self.writer.frame_id(g.code_file, g.code_line, g.code_name or "?")
        ops = [op for _, op in collectives]
        names = sorted(set(ops))
        self._add(
            f"check_skipped|{graph_id}", kind="check_skipped", severity="info",
            message=f"graph {graph_id}{f' ({g.code_name})' if g.code_name else ''} was not "
                    f"checked against eager: it "
                    f"runs {len(ops)} collective(s) ({', '.join(names[:4])}), which a check "
                    f"would issue again on this rank alone",
            hint="Check the model without its process group: graphdbg.compare(model, *inputs) "
                 "in one process, or the layers between the collectives.",
            user_frame=user_id, graph_id=graph_id,
            detail=CheckSkippedDetail.of(collectives=list(ops)))

    def nonfinite(self, graph_id: int, node, where: str, call_idx: int, *, value: str = "NaN/Inf",
                  reaches: str | None = None, from_inf=None, direction: str = "forward",
                  gradient_of: list[str] | None = None, compiled_too: bool | None = None,
                  masked_by=None, loc=None) -> None:
        """NaN/Inf in a graph's ``where`` ("eager" or "compiled") run, at ``node``.

        Forward: they reach a graph's output (or an input it writes, such as a
        parameter) and first appear at ``node``. Infinities consumed on the way
        (a causal mask's -inf before softmax) are not findings. ``from_inf``:
        the node that made the infinities a NaN came from.

        Backward: the gradients of ``gradient_of`` (graph inputs, parameters)
        are NaN/Inf while the forward is finite; ``node`` is the forward node
        whose backward first makes them (``loc``: the prefix bisection).
        Eager's are the program's own (a warning; ``compiled_too`` says
        whether the compiled gradients are non-finite as well); compiled only,
        an error. ``masked_by``: a ``where``/``masked_fill`` downstream of
        ``node`` that masks its values (the where-trap)."""
        user_id, stack, mpath, mcls = node_source(self.writer, node)
        if user_id is None:
            user_id, stack = self._graph_site(graph_id)
        target = node_target(node)
        if direction == "backward":
            self._nonfinite_gradient(graph_id, node, target, where, call_idx, value, user_id,
                                     stack, mpath, mcls, gradient_of or [], compiled_too,
                                     masked_by, loc)
            return
        cause = None
        if from_inf is not None:
            f_id = node_source(self.writer, from_inf)[0]
            f = self.writer.frame(f_id) if f_id else None
            cause = {"node": from_inf.name, "op": node_target(from_inf),
                     "file": f["file"] if f else None, "line": f["line"] if f else None}
        made = (f", made at {cause['op']}"
                + (f" ({os.path.basename(cause['file'])}:{cause['line']})" if cause["file"] else "")
                if cause else "")
        self._add(
            f"nan_inf|{graph_id}|{node.name}|{where}", kind="nan_inf", severity="warning",
            message=f"{value} in {where} first appears at {target} (node {node.name})"
                    + (f" and reaches {reaches}" if reaches else ""),
            hint=(f"Its inputs hold infinities{made}; this op turns them into NaN."
                  if cause else "Its inputs are finite: this op creates the non-finite values."),
            user_frame=user_id, stack=stack, graph_id=graph_id, node=node.name, op=target,
            detail=NanInfDetail.of(where=where, direction=direction, call=call_idx,
                                   module_path=mpath, module_class=mcls,
                                   value=value, reaches=reaches, from_inf=cause))

    def _nonfinite_gradient(self, graph_id: int, node, target: str, where: str, call_idx: int,
                            value: str, user_id, stack, mpath, mcls, gradient_of: list[str],
                            compiled_too: bool | None, masked_by, loc) -> None:
        short = target.rsplit(".", 1)[-1]
        of = ", ".join(gradient_of[:3]) + (f" and {len(gradient_of) - 3} more"
                                           if len(gradient_of) > 3 else "")
        what = f"the gradient{'s' if len(gradient_of) > 1 else ''} of {of}" if of else "the gradients"
        if where == "eager":
            mode = ", in eager too" if compiled_too else ", in eager only (compiled gradients are finite)"
        else:
            mode = ", compiled only (eager's gradients are finite)"
        message = f"{value} in {what} first appears in the backward of {target} (node {node.name})" + mode
        if masked_by is not None:
            mask_op = node_target(masked_by).rsplit(".", 1)[-1]
            hint = (f"torch.{mask_op} evaluates both branches; the masked branch's {value} gradient "
                    f"still flows (0 * inf is NaN): mask the input of {short}, e.g. "
                    f"x.clamp(min=eps) or torch.where(x > 0, x, 1).{short}().")
        elif where == "eager":
            hint = (f"The forward values are finite but the derivative of {short} is not at these "
                    "inputs (sqrt, norm or pow with an exponent below 1 at 0; log or a division at "
                    "0): keep its input off the singular point, e.g. x.clamp(min=eps), or add a "
                    "small eps to it. The program's own backward gets the same values.")
        else:
            hint = ("Eager's gradients are finite for the same upstream gradient: the compiled "
                    f"backward of {short} makes the non-finite values; look at how the backend "
                    "lowers its backward.")
        self._add(
            f"nan_inf|{graph_id}|{node.name}|{where}|backward", kind="nan_inf",
            severity="warning" if where == "eager" else "error",
            message=message, hint=hint,
            user_frame=user_id, stack=stack, graph_id=graph_id, node=node.name, op=target,
            detail=NanInfDetail.of(
                where=where, direction="backward", call=call_idx,
                module_path=mpath, module_class=mcls, value=value,
                gradient_of=gradient_of, compiled_too=compiled_too,
                masked_by=({"node": masked_by.name, "op": node_target(masked_by)}
                           if masked_by is not None else None),
                method=loc.method if loc else None,
                compiles=loc.compiles if loc else 0,
                seconds=round(loc.seconds, 3) if loc else None,
                undecided=loc.undecided if loc else []))

    # -- failures ------------------------------------------------------------------------
    def runtime_error(self, exc: BaseException) -> None:
        """The program's own error, at the innermost user frame of its traceback."""
        key = self.recorded_as(exc)
        if key is not None:
            self.uncaught(exc, key)
            return
        users = user_frames(traceback.extract_tb(exc.__traceback__))
        w = self.writer
        stack = w.stack_id(users)
        user = users[-1] if users else None
        text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        self._add(
            f"runtime_error|{user.file if user else '?'}:{user.line if user else 0}|{type(exc).__name__}",
            kind="runtime_error", severity="error",
            message=headline(exc),
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

    def export_failure(self, exc: BaseException, strict: bool = False, *,
                       specialized: list[dict] | None = None, via: str | None = None) -> None:
        """torch.export raised: the user's line it failed at and, for
        data-dependent errors, the nodes (and lines) that made the unbacked
        symbols it could not decide on."""
        w = self.writer
        chain = exception_chain(exc)
        caller = _user_stack()
        inner: list[Frame] = []
        for e in chain:  # non-strict export runs the user's forward: its frames are here
            user = user_frames(traceback.extract_tb(e.__traceback__))
            if len(user) > len(inner):
                inner = user
        if not inner:
            real = next((getattr(e, "real_stack", None) for e in chain
                         if getattr(e, "real_stack", None)), None)
            inner = user_frames(real or [])
        user_id = stack = None
        guards = constraint_guards(exc)
        # a size declared dynamic that the code made a constant: the line that did
        fixed = [s for s in specialized or () if s.get("site")] \
            if any("to be a constant" in str(e) for e in chain) else []
        if guards:  # a Dim range the code does not support: at the code that narrows it
            site = Frame(*guards[0][:3])
            user_id, stack = w.frame_id(*site), w.stack_id(caller + [site])
        elif fixed:
            site = Frame(*fixed[0]["site"])
            user_id, stack = w.frame_id(*site), w.stack_id(caller + [site])
        elif inner:
            user_id = w.frame_id(*inner[-1])
            stack = w.stack_id(caller + inner)
        else:
            node = last_traced_node(exc)
            if node is not None:
                user_id, node_stack = self.node_site(node)
                stack = w.stack_id(caller + [Frame(*f) for f in w.stack_frames(node_stack)]) \
                    if node_stack else None
        if user_id is None and caller:
            user_id, stack = self._user_call(caller)
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
        # torch.onnx colours its error text: the run file keeps plain text
        reason = re.sub(r"\x1b\[[0-9;]*m", "", "\n\n".join(str(e) for e in chain))[:100000]
        explanation, hints = explain_unsupported(reason)
        if unbacked:
            made = "; ".join(
                f"{u['symbol']} comes from {u['op']}"
                + (f" at {os.path.basename(u['file'])}:{u['line']}" + (f" `{u['code']}`" if u["code"] else "")
                   if u["file"] else "") for u in unbacked)
            hint = (f"{made}. Export cannot know its value: state what holds with torch._check(...) "
                    "(or torch._check_is_size) after it is made, or branch with torch.cond.")
        elif guards:
            file, line, _, guard = guards[0]
            code = code_line(file, line)
            fixes = re.search(r"Suggested fixes:\s*\n\s*(.+)", reason)
            hint = (f"{os.path.basename(file)}:{line}" + (f" `{code}`" if code else "")
                    + f" makes the guard {guard} on a size you declared dynamic, so not every "
                    "size in its range works. Narrow the range to what the code supports"
                    + (f" (torch suggests {fixes[1].strip()})" if fixes else "")
                    + ", or make the code size-independent (torch.cond, torch._check).")
        elif fixed:
            file, line, _ = fixed[0]["site"]
            code = code_line(file, line)
            fixes = re.search(r"Suggested fixes:\s*\n\s*(.+)", reason)
            hint = (f"{os.path.basename(file)}:{line}" + (f" `{code}`" if code else "")
                    + f" makes a size you declared dynamic a constant ({fixed[0]['value']}, "
                    f"{fixed[0]['reason']}). Make the line size-independent, or declare the size "
                    "static" + (f" (torch suggests {fixes[1].strip()})" if fixes else "") + ".")
        else:
            hint = hints[0] if hints else None
        key = self.recorded_as(exc)
        fields = dict(kind="compile_error", severity="error",
                      message=f"{via or 'torch.export'} failed: {headline(exc)}"[:500],
                      reason=reason,
                      hint=hint, user_frame=user_id, stack=stack,
                      detail=CompileErrorDetail.of(
                          export=True, strict=strict, exception=type(exc).__name__,
                          data_dependent=data_dependent, unbacked=unbacked,
                          guards=[{"file": f, "line": ln, "function": fn, "guard": g}
                                  for f, ln, fn, g in guards[:8]],
                          explanation=explanation, hints=hints, traceback=_format_tb(exc),
                          **({"via": via} if via else {}),
                          **({"specialized": [
                              {"size": s.get("source"), "value": s.get("value"),
                               "reason": s.get("reason"), "file": s["site"][0],
                               "line": s["site"][1]} for s in fixed]} if fixed else {})))
        if key is not None:  # Dynamo (strict export) recorded it already: say it better
            self._update(key, **{k: v for k, v in fields.items() if k != "kind"})
        else:
            key = f"export|{user_id}|{type(exc).__name__}|{str(exc)[:200]}"
            self._add(key, **fields)
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
        if user:
            file, line, function = user[-1]
        elif not (file and line) or is_internal(file):
            # only torch's code was being compiled (torch.compile(nn.Linear(...))), or
            # no line known: the user's call
            user = _user_stack()
            file, line, function = user[-1] if user else (None, None, function)
        user_id = w.frame_id(file, line, function) if file and line else None
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
        row = self._written.get(key)
        if row is None:
            return
        # absolute, as the writer stores them (a script run as `rc.py` has relative paths)
        frames = [Frame(f.filename if f.filename.startswith("<") else os.path.abspath(f.filename),
                        f.lineno or 0, f.name)
                  for f in traceback.extract_tb(exc.__traceback__)]
        outer: list[Frame] = []  # the program's frames down to its call into torch
        for f in frames:
            if not is_internal(f.file):
                outer.append(f)
            elif outer:
                break
        inner = [Frame(*f) for f in w.stack_frames(row["stack"])] if row.get("stack") else []
        if outer and outer[-1] in inner:
            # the finding's stack already holds the program's call (the caller's
            # whole stack, when only torch's code was compiled): from the program's frame on
            merged = inner[inner.index(outer[0]):] if outer[0] in inner else inner
        else:
            merged = outer + [f for f in inner if f not in outer]
        stack = w.stack_id(merged) or row.get("stack")
        # the error the finding is about, not torch's error in cleaning up after it
        cause = compat.unwrap_cleanup_error(exc)
        detail = row["detail"].updated(uncaught=True, exception=type(cause).__name__)
        self._update(key, stack=stack, detail=detail)


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


def _user_stack() -> list[Frame]:
    """The user's frames on the stack now, outermost first (torch's and
    graphdbg's left out: how deep in them this is called does not matter)."""
    return user_frames(traceback.extract_stack(sys._getframe(1)))


def _function_name(code: Frame) -> str:
    """`forward() at model.py:12` (a resume function: the line it resumes at)."""
    func, resumed = original_function(code.function)
    return f"{func}() at {os.path.basename(code.file)}:{resumed or code.line}"


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


