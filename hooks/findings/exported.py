"""Findings of exports (hooks/record/exports.py), each at the user's line:
a failed export, an ONNX translation that departs from eager, an exported
program that computes something else than its model, an op with no ONNX
translation, a size declared dynamic that the export fixed, an ONNX program
not checked.

A mixin of `Findings` (hooks/findings/writer.py): it writes through the same
`_add`, with the same keys and severities, and places findings with the
checks' `node_site`, `_graph_site` and `_user_call` (checks.py).
"""

from __future__ import annotations

import os
import re
import traceback

import torch

from graphdbg.runfile.details import (CheckSkippedDetail, CompileErrorDetail, DivergenceDetail,
                                      SpecializedDetail)
from graphdbg.core.sourcemap import Frame, code_line

from .common import _SEVERITY, _format_tb
from .exceptions import (data_dependent_symbols, explain_unsupported, headline, last_traced_node,
                         symbol_origins)
from ..placement.conversions import symbolic_stack
from ..placement.exports import strategies
from ..placement.guards import constraint_guards, exception_chain
from ..placement.modules import node_target
from ..placement.nodes import node_source, raised_at, user_frames
from ..placement.stack import user_stack
from ..check.numerics import finite_or_none

_ANSI = re.compile(r"\x1b\[[0-9;]*m")   # torch.onnx colours its error text
_NO_FUNCTION = re.compile(r"No ONNX function found for <OpOverload\(op='([^']+)', overload='([^']+)'\)>")


def _onnx_node(exc: BaseException) -> torch.fx.Node | None:
    """The FX node the ONNX exporter was translating when it failed (a local
    of its translation frames)."""
    for e in exception_chain(exc):
        tb = e.__traceback__
        found = None
        while tb is not None:
            v = tb.tb_frame.f_locals.get("node")
            if isinstance(v, torch.fx.Node):
                found = v
            tb = tb.tb_next
        if found is not None:
            return found
    return None


def _counted(ops: list[str]) -> str:
    """`Mul ×5, Add ×2, Tanh`: ONNX ops in first-seen order, counted."""
    counts: dict[str, int] = {}
    for o in ops:
        counts[o] = counts.get(o, 0) + 1
    return ", ".join(f"{o} ×{n}" if n > 1 else o for o, n in counts.items()) or "?"


def _short(ops: list[str]) -> list[str]:
    """`torch.ops.aten.relu.default` -> `relu`, at most six of them."""
    out = [o.replace("torch.ops.", "").removeprefix("aten.").split(".")[0] for o in ops[:6]]
    return out + (["..."] if len(ops) > 6 else [])


def _basename_line(file: str, line: int) -> str:
    code = code_line(file, line)
    return f"{os.path.basename(file)}:{line}" + (f" `{code}`" if code else "")


# torch 2.13 names the input (inputs['x']), 2.15 its position (inputs[0])
_STATIC_SHAPE = re.compile(
    r"inferred a static shape of (\d+) for dimension inputs\[(?:'([^']+)'|\d+)\]\.shape\[(\d+)\]")
_CONSTANT = re.compile(r"You marked (\S+) as dynamic but your code specialized it to be a constant \((\d+)\)")
_STRATEGY = {"TorchExportNonStrictStrategy": "torch.export.export(strict=False)",
             "TorchExportStrictStrategy": "torch.export.export(strict=True)",
             "TorchExportDraftExportStrategy": "torch.export.draft_export"}
# what fixed a size, by the aten op that did: the way to keep it dynamic
_TAKES_SIZES = {"view", "reshape", "_unsafe_view", "_reshape_alias", "view_copy", "expand",
                "unflatten", "as_strided", "zeros", "ones", "empty", "full", "randn", "rand",
                "arange", "new_zeros", "new_ones", "new_empty", "new_full"}
_MEETS_TENSOR = {"add", "sub", "mul", "div", "where", "cat", "stack", "mm", "bmm", "matmul",
                 "addmm", "baddbmm", "copy_", "copy", "masked_fill", "maximum", "minimum",
                 "eq", "ne", "lt", "le", "gt", "ge", "pow", "rsub", "expand_as"}


def _size_name(s: dict) -> str:
    """`x.size()[0]` for a fixed size's source (`L['x'].size()[0]`)."""
    return re.sub(r"^L\['([^']+)'\]", r"\1", s.get("source") or s.get("symbol") or "?")


def _fixed_sizes(chain: list[BaseException], specialized: list[dict] | None) -> list[dict]:
    """The sizes declared dynamic that the export failed for fixing: torch's
    constraint error ("specialized it to be a constant"), torch.onnx's
    conflict ("inferred a static shape of 2 for dimension inputs['x']
    .shape[0]"). Those the error names; for a named ``Dim`` (the error says
    ``batch``, not the input), the first fixed to the number it says."""
    text = "\n".join(str(e) for e in chain)
    # (a size named by position only is matched by its value, below)
    named = [(f"{m[2]}.size()[{m[3]}]" if m[2] else None, int(m[1]))
             for m in _STATIC_SHAPE.finditer(text)]
    named += [(re.sub(r"^L\['([^']+)'\]", r"\1", m[1]), int(m[2])) for m in _CONSTANT.finditer(text)]
    placed, seen = [], set()
    for s in specialized or ():   # once each (torch.onnx's retry fixes it again)
        if s.get("site") and (_size_name(s), s.get("value")) not in seen:
            seen.add((_size_name(s), s.get("value")))
            placed.append(s)
    return [s for s in placed if (_size_name(s), s.get("value")) in named] \
        or [s for s in placed if s.get("value") in {v for _, v in named}][:1]


def _keep_dynamic(s: dict, declared: dict[str, str] | None) -> str:
    """What fixed a size declared dynamic, and how to keep it dynamic: by the
    op that fixed it (a size written as a number, a tensor of fixed size met)."""
    size = _size_name(s)
    value = s.get("value")
    how = (declared or {}).get(size) or s.get("declared")
    name, _, dim = size.partition(".size()[")
    shape = f"{name}.shape[{dim.rstrip(']')}]" if dim else "x.shape[...]"
    op = (s.get("op") or "").removeprefix("aten.").split(".")[0]
    site = s.get("site")
    code = (code_line(site[0], site[1]) if site else None) or ""
    # the call as the line writes it (reshape, not the view it decomposes to)
    op = next((n for n in sorted(_TAKES_SIZES) if op in _TAKES_SIZES and f"{n}(" in code), op)
    declared_as = f" (declared dynamic: {how})" if how else ""
    if op in _TAKES_SIZES:
        why = f"{op}(...) is given {size} as the number {value}{declared_as}"
        keep = f"pass -1 or {shape} there"
    elif op in _MEETS_TENSOR:
        why = (f"{op} needs {size} equal to a size that is {value} for good{declared_as}: "
               "a parameter, buffer or table of fixed size")
        keep = f"slice that tensor to the input (table[:{shape}]) so both grow together"
    elif op:
        why = f"{op} makes {size} the number {value}{declared_as}"
        keep = f"compute the size from the input ({shape}), not from a number"
    else:   # the line itself decided on the size: a branch, an assert
        why = f"this line decides on {size} == {value}{declared_as}"
        keep = f"branch with torch.cond, or compute from {shape} instead of comparing it"
    static = "leave it out of dynamic_axes" if how == "dynamic_axes" else "declare it Dim.STATIC"
    return (f"{why}, so the export fixed it to {value} (torch: {s.get('reason')}). To keep it "
            f"dynamic, {keep}; if it is always {value}, {static}.")


def _fixed_message(s: dict, declared: dict[str, str] | None) -> str:
    size = _size_name(s)
    how = (declared or {}).get(size) or s.get("declared")
    site = s.get("site")
    code = code_line(site[0], site[1]) if site else None
    return (f"{f'`{code}`' if code else 'the code'} fixes {size} to {s.get('value')}"
            + (f", which you declared dynamic ({how})" if how else ""))


def _strategies(exc: BaseException) -> list[tuple[str, BaseException | None]]:
    """torch.onnx.export's capture strategies that failed, in the order it
    tried them, each by the call it made."""
    return [(_STRATEGY.get(name, name), e) for name, e in strategies(exc)]


def _tried(via: str, tried: list[tuple[str, BaseException]]) -> str:
    return (f"{via} tried {len(tried)} ways to capture the model, and each failed: "
            + "; ".join(f"{label}: {_ANSI.sub('', headline(e)).rstrip('.')}" for label, e in tried)
            + ".")


def _tried_briefly(tried: list[tuple[str, BaseException]]) -> str:
    """`strict=False: GuardOnDataDependentSymNode: ...; strict=True: Unsupported: ...`"""
    return "; ".join(re.sub(r"^torch\.export\.export\((.*)\)$", r"\1", label) + ": "
                     + _ANSI.sub("", headline(e)).split("\n")[0][:200] for label, e in tried)


class ExportFindings:
    """Mixin of `Findings`: the export findings."""

    def export_failure(self, exc: BaseException, strict: bool = False, *,
                       specialized: list[dict] | None = None, via: str | None = None,
                       declared: dict[str, str] | None = None, sites=None,
                       names: list[str] | None = None) -> None:
        """torch.export raised: the user's line it failed at and, for
        data-dependent errors, the nodes (and lines) that made the unbacked
        symbols it could not decide on. ``sites``: the export's `ShapeSites`
        (where each guard and unbacked symbol was made); ``declared``: the
        sizes the call declared dynamic, and how. Under torch.onnx.export
        (``via``), its capture strategies' failures are one finding: a
        strategy's error Dynamo recorded already (its strict retry) becomes
        this one."""
        w = self.writer
        chain = exception_chain(exc)
        caller = user_stack()
        inner: list[Frame] = []
        for e in chain:  # non-strict export runs the user's forward: its frames are here
            user = raised_at(e)
            if len(user) > len(inner):
                inner = user
        if not inner:
            real = next((getattr(e, "real_stack", None) for e in chain
                         if getattr(e, "real_stack", None)), None)
            inner = user_frames(real or [])
        user_id = stack = None
        guards = constraint_guards(exc, sites, names or ())
        fixed = _fixed_sizes(chain, specialized)
        if fixed:  # a size declared dynamic made a constant: at the code that did
            user_id, stack = self._shape_site(caller, Frame(*fixed[0]["site"]),
                                              fixed[0].get("stack"))
        elif guards:  # a Dim range the code does not support: at the code that narrows it
            user_id, stack = self._shape_site(caller, Frame(*guards[0][:3]), guards[0].stack)
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
        unbacked = self._unbacked(exc, sites) if data_dependent else []
        tried = [(label, e) for label, e in _strategies(exc) if e is not None] if via else []
        # torch.onnx colours its error text: the run file keeps plain text
        reason = _ANSI.sub("", "\n\n".join(
            [str(e) for e in chain] + [f"{label}: {e}" for label, e in tried[1:]]))[:100000]
        explanation, hints = explain_unsupported(reason)
        if len(tried) > 1:
            explanation = _tried(via, tried) + (f" {explanation}" if explanation else "")
        fixes = re.search(r"Suggested fixes:\s*\n\s*(.+)", reason)
        if unbacked:
            made = "; ".join(
                f"{u['symbol']} comes from {u['op']}"
                + (f" at {os.path.basename(u['file'])}:{u['line']}" + (f" `{u['code']}`" if u["code"] else "")
                   if u["file"] else "") for u in unbacked)
            hint = (f"{made}. Export cannot know its value: state what holds with torch._check(...) "
                    "(or torch._check_is_size) after it is made, or branch with torch.cond.")
        elif fixed:
            hint = _keep_dynamic(fixed[0], declared)
            if fixes:
                hint = f"{hint[:-1]} (torch suggests {fixes[1].strip()})."
        elif guards:
            file, line, _, guard = guards[0][:4]
            hint = (_basename_line(file, line)
                    + f" makes the guard {guard} on a size you declared dynamic, so not every "
                    "size in its range works. Narrow the range to what the code supports"
                    + (f" (torch suggests {fixes[1].strip()})" if fixes else "")
                    + ", or make the code size-independent (torch.cond, torch._check).")
        else:
            hint = hints[0] if hints else None
        if len(tried) > 1 and hint:
            hint += (f" {via} tried {len(tried)} ways to capture the model "
                     f"({', '.join(label for label, _ in tried)}): each fails here.")
        fields = dict(kind="compile_error", severity="error",
                      message=f"{via or 'torch.export'} failed: "
                              + (_fixed_message(fixed[0], declared) if fixed
                                 else _tried_briefly(tried) if len(tried) > 1 else headline(exc)),
                      reason=reason, hint=hint, user_frame=user_id, stack=stack,
                      detail=CompileErrorDetail.of(
                          export=True, strict=strict, exception=type(exc).__name__,
                          data_dependent=data_dependent, unbacked=unbacked,
                          guards=[{"file": f, "line": ln, "function": fn, "guard": g}
                                  for f, ln, fn, g, _ in guards[:8]],
                          explanation=explanation, hints=hints, traceback=_format_tb(exc),
                          **({"via": via} if via else {}),
                          **({"strategies": [
                              {"strategy": label, "exception": type(e).__name__,
                               "message": _ANSI.sub("", headline(e)).split("\n")[0][:300]}
                              for label, e in tried]} if len(tried) > 1 else {}),
                          **({"specialized": [
                              {"size": _size_name(s), "value": s.get("value"),
                               "reason": s.get("reason"), "file": s["site"][0],
                               "line": s["site"][1]} for s in fixed]} if fixed else {})))
        fields["message"] = fields["message"][:500]
        # Dynamo recorded it already (a strict export, the ONNX exporter's strict
        # retry): that finding becomes this one
        key = next((k for e in [exc, *(e for _, e in tried)] if (k := self.recorded_as(e))), None)
        if key is not None:
            self._update(key, **{k: v for k, v in fields.items() if k != "kind"})
        else:
            key = f"export|{user_id}|{type(exc).__name__}|{str(exc)[:200]}"
            self._add(key, **fields)
        self._remember(exc, key)
        for _, e in tried:
            self._remember(e, key)

    def _shape_site(self, caller: list[Frame], site: Frame, stack: list[Frame] | None
                    ) -> tuple[int | None, int | None]:
        """(frame id, stack id) of a line the export's shape environment saw:
        ``stack`` its user's stack there (which starts with the program's call
        into the export), else the caller's then the line."""
        w = self.writer
        frames = list(stack or [site])
        if frames[-1] == site:   # the same line (a span is not part of a Frame's equality)
            site = frames[-1] = site if site.col is not None else frames[-1]
        if not (caller and len(frames) > len(caller)
                and [f[:3] for f in frames[:len(caller)]] == [f[:3] for f in caller]):
            frames = caller + frames
        return w.frame_id(*site), w.stack_id(frames)

    def _unbacked(self, exc: BaseException, sites) -> list[dict]:
        """Where each unbacked symbol of a data-dependent error was made: the
        line the export was tracing when torch made it (``sites``), else the
        line of the node that made it (a non-strict export's node names the
        forward's line only, not the helper's it called)."""
        w = self.writer
        out = []
        for sym, node in symbol_origins(exc, data_dependent_symbols(exc)):
            made = sites.unbacked.get(sym) if sites is not None else None
            if made:
                f = made[-1]
                file, line, code = f.file, f.line, code_line(f.file, f.line) or None
            else:
                fid, _ = self.node_site(node)
                row = w.frame(fid) if fid else None
                file, line, code = (row["file"], row["line"], row["code"]) if row else (None,) * 3
            out.append({"symbol": sym, "node": node.name, "op": node_target(node),
                        "file": file, "line": line, "code": code})
        return out

    def onnx_failure(self, exc: BaseException, caller: list[Frame], *, legacy: bool = False,
                     specialized: list[dict] | None = None, declared: dict[str, str] | None = None,
                     sites=None, names: list[str] | None = None) -> None:
        """torch.onnx.export raised. A translation failure (no ONNX function
        for an op) is placed at the line that called the op; a failure of its
        torch.export step as torch.export's own; the legacy TorchScript
        exporter's at the innermost user frame of its traceback."""
        chain = exception_chain(exc)
        names = [type(e).__name__ for e in chain]
        if "TorchExportError" in names and len(chain) > 1:
            inner = chain[chain.index(next(e for e in chain if type(e).__name__ == "TorchExportError")) + 1:]
            if inner:  # torch.export's own failure, said as such
                self.export_failure(exc, specialized=specialized, via="torch.onnx.export",
                                    declared=declared, sites=sites, names=names)
                return
        w = self.writer
        node = _onnx_node(exc)
        user_id = stack = None
        if node is not None:
            user_id, stack, _, _ = node_source(w, node)
        if user_id is None and legacy:   # the traced op whose translation raised
            frames = next((f for f in map(symbolic_stack, chain) if f), [])
            if frames:
                user_id, stack = w.frame_id(*frames[-1]), w.stack_id(frames)
        if user_id is None:
            frames = []
            for e in chain:
                frames = raised_at(e) or frames
            if frames:
                user_id, stack = w.frame_id(*frames[-1]), w.stack_id(caller + frames)
        if user_id is None and caller:
            user_id, stack = w.frame_id(*caller[-1]), w.stack_id(caller)
        text = _ANSI.sub("", "\n\n".join(str(e) for e in chain))
        m = _NO_FUNCTION.search(text)
        op = f"{m.group(1)}.{m.group(2)}" if m else (node_target(node) if node is not None else None)
        fixes = None
        if m or "DispatchError" in names:
            message = f"torch.onnx.export failed: no ONNX translation for {op}"
            fixes = [f"custom_translation_table={{torch.ops.{op}: my_onnxscript_fn}} in "
                     "torch.onnx.export (an onnxscript function computing it from ONNX ops)",
                     "compute it from ops ONNX has in the model (a decomposition), or register one "
                     "the exporter uses: ep.run_decompositions({...}) before exporting the "
                     "ExportedProgram",
                     "another opset_version, if a newer opset has the op"]
            hint = (f"ONNX has no function for {op}, which this line calls. Ways out: "
                    + "; ".join(fixes) + ".")
        else:
            message = f"torch.onnx.export failed: {headline(exc)}"[:500]
            hint = None
        key = f"onnx|{user_id}|{op}|{type(exc).__name__}"
        self._add(key, kind="compile_error", severity="error", message=message[:500],
                  reason=text[:100000], hint=hint, user_frame=user_id, stack=stack,
                  node=node.name if node is not None else None, op=op,
                  detail=CompileErrorDetail.of(
                      export=True, onnx=True, legacy_exporter=legacy, exception=type(exc).__name__,
                      onnx_op=op, node=node.name if node is not None else None, fixes=fixes,
                      traceback="".join(traceback.format_exception(exc))[-20000:]))
        self._remember(exc, key)

    def export_specialized(self, graph_id: int, s: dict, kind: str) -> None:
        """A size the user declared dynamic that the export fixed to a number."""
        site = s.get("site")
        if site:
            user_id, stack = self._shape_site([], Frame(*site), s.get("stack"))
        else:
            user_id, stack = self._graph_site(graph_id)
        size = _size_name(s)
        via = "torch.onnx.export" if kind == "onnx" else "torch.export"
        self._add(f"specialized|{graph_id}|{size}", kind="export_specialized", severity="warning",
                  message=f"{via} fixed {size} to {s.get('value')}, which you declared dynamic "
                          f"({s.get('declared')})",
                  hint=_keep_dynamic(s, None) + f" The exported program only takes inputs with "
                       f"{size} == {s.get('value')}.",
                  user_frame=user_id, stack=stack, graph_id=graph_id,
                  detail=SpecializedDetail.of(size=size, value=s.get("value"),
                                              declared=s.get("declared"), symbol=s.get("symbol"),
                                              reason=s.get("reason"), exported=kind))

    def export_narrowed(self, graph_id: int, n: dict, caller: list[Frame]) -> None:
        """A size declared dynamic that the code supports only up to a bound
        (a guard torch.onnx's capture deferred), while the ONNX program takes
        the whole declared range: at the line that narrows it (a slice of a
        fixed-size table), naming the line that needs the sizes equal."""
        stack = n.get("stack") or []
        if stack:
            user_id, stack_id = self._shape_site(caller, Frame(*stack[-1]), stack)
        else:
            user_id, stack_id = self._graph_site(graph_id)
        size, bound = n["size"], n["max"]
        upto = f"up to {n['declared_max']}"
        where = _basename_line(*tuple(stack[-1])[:2]) if stack else "The code"
        used = n.get("used")
        then = f", which {_basename_line(*tuple(used[-1])[:2])} needs equal to {size}," if used else ""
        self._add(f"narrowed|{graph_id}|{size}", kind="export_specialized", severity="warning",
                  message=f"torch.onnx.export keeps {size} dynamic ({upto}), but the code works "
                          f"only up to {bound}",
                  hint=f"{where} limits a length to {bound}{then} so only {n['guard']} works of "
                       f"the range you declared ({n['declared']}). torch.onnx.export kept the "
                       f"range and dropped that condition: the ONNX program takes {size} > {bound} "
                       "and ONNX Runtime fails or computes something else there. Narrow the "
                       f"range to what the code supports (max={bound}), or make the code work "
                       "for every size (a larger table, sizes computed from the input).",
                  user_frame=user_id, stack=stack_id, graph_id=graph_id,
                  detail=SpecializedDetail.of(size=size, value=bound, declared=n["declared"],
                                              symbol=n.get("symbol"),
                                              reason=f"range narrowed: only {n['guard']} works",
                                              exported="onnx"))

    def onnx_not_checked(self, graph_id: int, why: str) -> None:
        user_id, stack = self._graph_site(graph_id)
        self._add(f"check_skipped|{graph_id}", kind="check_skipped", severity="info",
                  message=f"the ONNX export (graph {graph_id}) was not checked against eager: {why}",
                  hint="The export itself is recorded; the check runs the ONNX program in ONNX "
                       "Runtime beside eager, node by node.",
                  user_frame=user_id, stack=stack, graph_id=graph_id,
                  detail=CheckSkippedDetail.of(budget="onnx"))

    def onnx_divergence(self, graph_id: int, call_idx: int, node, d, onnx_ops: list[str],
                        opset: int | None, runtime: str, output, output_index: int | None) -> None:
        """ONNX Runtime's value of ``node`` departs from eager's (the first
        node, in graph order, where it does)."""
        w = self.writer
        user_id, stack, mpath, mcls = node_source(w, node) if node is not None else (None,) * 4
        if user_id is None:
            user_id, stack = self._graph_site(graph_id)
        target = node_target(node) if node is not None else None
        what = f"{target} (ONNX {_counted(onnx_ops)})" if target else "an output"
        on = "the export's example inputs" if call_idx == 0 else f"call {call_idx} of the ONNX program"
        kind = d.kind
        message, hint, severity = onnx_wording(d, what, on, (
            f"Check a custom_translation_table entry for {target}, or the translation in "
            f"opset {opset}."))
        self._add(f"divergence|{graph_id}|{node.name if node is not None else None}|{kind}|onnx",
                  kind="divergence", message=message, severity=severity,
                  hint=hint, user_frame=user_id, stack=stack, graph_id=graph_id,
                  node=node.name if node is not None else None, op=target,
                  detail=DivergenceDetail.of(
                      classification=kind, call=call_idx, direction="forward",
                      output=output_index, node=node.name if node is not None else None,
                      target=target, module_path=mpath, module_class=mcls, stage=runtime,
                      method="onnx intermediates", exported="onnx", onnx_ops=onnx_ops,
                      opset=opset, max_abs=finite_or_none(d.max_abs),
                      max_rel=finite_or_none(d.max_rel), eager_vs_fp64=d.eager_vs_fp64,
                      compiled_vs_fp64=d.compiled_vs_fp64, dtype=d.dtype,
                      output_max_abs=finite_or_none(output.max_abs) if output else None,
                      output_max_rel=finite_or_none(output.max_rel) if output else None,
                      **(dict(nonfinite_side=d.side, nonfinite_value=d.value,
                              fp64_finite=d.fp64_finite) if kind == "nonfinite" else {})))

    def export_divergence(self, graph_id: int, kind: str, call_idx: int, found) -> None:
        """The exported program computes something else than its eager model
        (hooks/check/exported.py's `ExportCheck` says where)."""
        w = self.writer
        node = found.node
        user_id = stack = mpath = mcls = None
        if node is not None:
            user_id, stack, mpath, mcls = node_source(w, node)
        if user_id is None and found.line is not None:
            user_id = w.frame_id(found.line[0], found.line[1], "?")
        if user_id is None:
            user_id, stack = self._graph_site(graph_id)
        d = found.diff or found.output
        via = "torch.onnx.export" if kind == "onnx" else "torch.export"
        line = f"{os.path.basename(found.line[0])}:{found.line[1]}" if found.line else None
        on = "the export's example inputs" if call_idx == 0 else f"call {call_idx}"
        classification = d.kind if d.kind in ("precision", "shape", "dtype", "nonfinite") \
            else "miscompile"
        if found.how == "path":
            eager_at = found.eager_line
            elsewhere = f" at {os.path.basename(eager_at[0])}:{eager_at[1]}" \
                if eager_at and eager_at != found.line else ""
            message = f"the exported program ({via}) runs other code than eager at {line}"
            hint = (f"On {on}, the exported program runs {', '.join(_short(found.graph_ops))} here; "
                    f"eager ran {', '.join(_short(found.eager_ops)) or 'nothing'}{elsewhere}. "
                    "Export traced the forward once and fixed the Python control flow it took then "
                    "(a branch on a flag, a size or a Python value). Use torch.cond for a branch "
                    "that depends on the inputs, or export again after changing the flag.")
        elif found.how == "branch":
            message = (f"the ONNX program ({via}) takes the branch traced at export at {line}; "
                       "eager takes the other one")
            hint = (f"On {on}, the condition at {line} is not what it was on the export's example "
                    "inputs: the exported program asserted it at run time, the ONNX program "
                    "dropped the assertion and computes the traced branch. Export both branches "
                    "with torch.cond.")
        elif found.how == "values":
            message = f"the exported program ({via}) diverges from eager at {line}"
            hint = (f"Same ops, other values on {on}: a Python number or attribute the forward "
                    "reads was fixed at export time (the exported program holds its value then), "
                    "or the program changed it since. Pass it as an input, or export again.")
        else:
            message = f"the exported program ({via}) diverges from eager at an output"
            hint = f"The outputs differ on {on}; no line of the forward could be told apart."
        self._add(f"divergence|{graph_id}|export|{found.line}", kind="divergence",
                  severity="error" if classification == "nonfinite"
                  else _SEVERITY.get(classification, "error"), message=message, hint=hint,
                  user_frame=user_id, stack=stack, graph_id=graph_id,
                  node=node.name if node is not None else None,
                  op=node_target(node) if node is not None else None,
                  detail=DivergenceDetail.of(
                      classification=classification, call=call_idx, direction="forward",
                      output=found.output_index, node=node.name if node is not None else None,
                      target=node_target(node) if node is not None else None,
                      module_path=mpath, module_class=mcls, stage=via, method=f"lines ({found.how})",
                      exported=kind, eager_ops=found.eager_ops[:20], graph_ops=found.graph_ops[:20],
                      max_abs=finite_or_none(d.max_abs), max_rel=finite_or_none(d.max_rel),
                      eager_vs_fp64=d.eager_vs_fp64, compiled_vs_fp64=d.compiled_vs_fp64,
                      dtype=d.dtype, output_max_abs=finite_or_none(found.output.max_abs),
                      output_max_rel=finite_or_none(found.output.max_rel)))

    # -- draft_export: what it assumed, what an ONNX program made from it dropped -----------
    def _at(self, frames, graph_id: int) -> tuple[int | None, int | None]:
        if frames:
            return self.writer.frame_id(*frames[-1]), self.writer.stack_id(list(frames))
        return self._graph_site(graph_id)

    def draft_assumption(self, graph_id: int, a: dict) -> None:
        """A data-dependent decision `torch.export.draft_export` made on its
        example inputs (its report's), at the line that made it."""
        frames = a.get("frames") or []
        user_id, stack = self._at(frames, graph_id)
        cond = a.get("condition") or a["expr"]
        result = a.get("result")
        other = {"True": "False", "False": "True"}.get(result, "otherwise")
        self._add(f"draft_assumed|{graph_id}|{a['expr']}|{frames[-1] if frames else None}",
                  kind="export_specialized", severity="warning",
                  message=f"draft_export assumed {cond} is {result} here (the trace's branch); "
                          "the exported program asserts it at run time",
                  hint=f"draft_export could not decide {a['expr']} (it depends on the input's "
                       f"values) and traced the branch the example inputs take. Inputs for which "
                       f"{cond} is {other} fail the exported program's assertion; an ONNX "
                       "program converted from it has no assertion and gives them this branch's "
                       "result. Export both branches with torch.cond, or, if it always holds, "
                       f"say so with torch._check({cond}).",
                  user_frame=user_id, stack=stack, graph_id=graph_id,
                  detail=SpecializedDetail.of(size=cond, value=result, declared="draft_export",
                                              symbol=a["expr"], reason=f"assumed {a['expr']} is "
                                              f"{result} (data-dependent)", exported="export"))

    def onnx_dropped_assert(self, graph_id: int, a: dict, assumed: list[dict]) -> None:
        """A runtime assertion of the exported program that its ONNX program
        lacks, at the line it guards."""
        frames = a.get("frames") or []
        user_id, stack = self._at(frames, graph_id)
        cond = a.get("condition") or ", ".join(a["exprs"]) or "a condition"
        site = frames[-1] if frames else None
        result = next((x.get("result") for x in assumed if x.get("frames") and site
                       and tuple(x["frames"][-1])[:2] == tuple(site)[:2]), None)
        what = f"not ({cond})" if result == "False" else cond
        where = f" ({os.path.basename(site.file)}:{site.line})" if site else ""
        self._add(f"dropped_assert|{graph_id}|{site}", kind="export_specialized",
                  severity="warning",
                  message=f"the exported program asserts {what}{where}; the ONNX program dropped "
                          "it: inputs taking the other branch get the traced branch's result",
                  hint=f"torch.onnx.export translates no runtime assertion ({', '.join(a['exprs'])}"
                       "): ONNX Runtime runs the branch the export traced whatever the inputs, "
                       "and nothing fails. graphdbg checks the ONNX program's runs against the "
                       "model's eager forward; export both branches with torch.cond to keep them.",
                  user_frame=user_id, stack=stack, graph_id=graph_id,
                  detail=SpecializedDetail.of(size=cond, value=result, declared="draft_export",
                                              symbol=", ".join(a["exprs"]) or None,
                                              reason="runtime assertion dropped by the ONNX "
                                                     "export", exported="onnx"))


def onnx_wording(d, what: str, on: str, check: str, unit: str = "node") -> tuple[str, str, str]:
    """(message, hint, severity) of ONNX Runtime departing from eager at
    ``what`` (an op and its ONNX ops, or a line) on ``on`` (which call);
    ``check``: what to look at when it is a wrong translation; ``unit``:
    what ``what`` is (node | line)."""
    kind = d.kind
    if kind == "random":
        message = f"ONNX Runtime draws other random numbers than eager at {what}"
        hint = ("ONNX Runtime has its own random streams: the model was exported with a "
                "random op running (dropout in training mode?). Export after model.eval() "
                "for inference; nodes after this one were not judged.")
    elif kind == "nonfinite":
        goes = "overflows to inf" if d.value == "Inf" else "goes NaN"
        fp64 = {True: "float64 stays finite there", False: "float64 is NaN/Inf there too",
                None: "float64 not known"}[d.fp64_finite]
        side, other = ("eager", "ONNX Runtime") if d.side == "eager" else \
            ("ONNX Runtime", "eager")
        message = (f"ONNX Runtime ignores the {d.value} that eager and float64 carry at "
                   f"{what} ({d.dtype}): its result stays finite"
                   if d.side == "eager" and d.fp64_finite is False else
                   f"{side} {goes} at {what} ({d.dtype}), {other} stays finite ({fp64})"
                   if d.side != "both" else
                   f"eager and ONNX Runtime each go NaN/Inf where the other is finite at "
                   f"{what} ({fp64})")
        hint = (f"The ONNX ops translated from this {unit} treat an edge case otherwise than "
                f"torch on the same inputs ({on}): a fully masked attention row (torch "
                f"returns 0 there), a division by 0, an overflow in {d.dtype}. Every "
                f"earlier {unit} matches.")
        if d.side == "eager" and d.fp64_finite is False:
            hint = (f"torch carries the {d.value} of its input through this {unit} on {on}; the "
                    "ONNX ops translated from it skip it (ONNX Runtime's ReduceMax and "
                    "ArgMax ignore NaN), so the deployed model hides a NaN the model makes. "
                    f"Every earlier {unit} matches.")
        elif d.side != "eager" and d.fp64_finite:
            hint += (" The translation computes in a form that overflows for large |x| "
                     "where torch's kernel is stable (exp before log: logaddexp, "
                     "log-sigmoid, log_ndtr).")
    elif kind == "precision":
        message = (f"ONNX Runtime differs from eager at {what} but is as close or closer to "
                   f"float64 ({d.dtype})")
        hint = (f"A precision difference, not a wrong translation: ONNX Runtime computes "
                f"{d.dtype} ops in {d.dtype} where torch's kernels keep float32 "
                "intermediates (or the ONNX op's documented semantics are looser). Compare in "
                "float32, or accept it with looser tolerances (--rtol/--atol).")
    else:
        message = f"ONNX Runtime diverges from eager at {what}"
        hint = (f"The ONNX ops translated from this {unit} compute something else than torch "
                f"on the same inputs ({on}; every earlier {unit} matches). {check}")
    # NaN/Inf that ONNX Runtime makes and float64 does not: a wrong translation
    # ... or drops the NaN/Inf that torch and float64 both make (max ignoring NaN)
    severity = "error" if kind == "nonfinite" and (
        (d.side != "eager" and d.fp64_finite is not False)
        or (d.side == "eager" and d.fp64_finite is False)) else _SEVERITY.get(kind, "error")
    return message, hint, severity
