"""Findings of graphdbg's own checks on a captured graph (divergence.py,
numerics): compiled against eager, aliasing, non-finite values, and graphs
not checked. Also where a finding sits when it names an FX node
(`node_site`) or has no line of its own (`_graph_site`, `_user_call`):
every kind of finding places itself with these.

A mixin of `Findings` (writer.py): it writes through `_add`.
"""

from __future__ import annotations

import os

from graphdbg.runfile.details import CheckSkippedDetail, DivergenceDetail, NanInfDetail
from graphdbg.core.sourcemap import Frame

from ..placement import creation
from ..check.numerics import finite_or_none
from .common import _SEVERITY
from ..placement.modules import node_target
from ..placement.nodes import node_source
from ..placement.stack import user_stack
from ..placement.internal import is_internal


class Checks:
    """Mixin of `Findings`: the checks' findings, and where a node or graph sits."""

    # -- eager vs compiled ---------------------------------------------------------------
    def divergence(self, graph_id: int, node, call_idx: int, kind: str, final, loc, *,
                   output: int | None, mutated_input: int | None,
                   direction: str = "forward", consumed=None) -> None:
        """Compiled parts from eager at ``node`` (a `localize.Localization`
        ``loc`` says how it was found; ``final`` is the difference at the
        graph's output or mutated input; ``consumed``: for eager's NaN/Inf,
        the node that made them finite again).

        One finding per cause: the same verdict at the same user line and op
        (a layer's line in every layer of a model, each graph of a model
        compiled again) counts up, its graphs and compile ids listed."""
        w = self.writer
        name = loc.node
        user_id, stack, mpath, mcls = node_source(w, node) if node is not None else (None,) * 4
        if user_id is None:  # a graph of torch's code only (a compiled optimizer step)
            user_id, stack = self._graph_site(graph_id)
        d = loc.diff or final
        stage = self.ctx.graphs[graph_id].backend if loc.stage == "user" else loc.stage
        what = f"{loc.target or name}" if name else "an output"
        severity = _SEVERITY.get(kind, "error")
        made_finite = None
        if kind == "nonfinite":
            message, hint, severity, made_finite = self._nonfinite_text(d, what, consumed)
        elif kind == "random":
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
        nonfinite = dict(nonfinite_side=d.side, nonfinite_value=d.value,
                         fp64_finite=d.fp64_finite, made_finite_at=made_finite) \
            if kind == "nonfinite" else {}
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
            output_max_rel=finite_or_none(final.max_rel), **nonfinite, graphs=[graph_id])
        key = self._cause_key("divergence", graph_id, name, kind, direction, user_id, loc.target)
        self._add(key, kind="divergence", severity=severity, message=message, hint=hint,
                  user_frame=user_id, stack=stack, graph_id=graph_id, node=name, op=loc.target,
                  compile_id=self.ctx.graphs[graph_id].compile_id, detail=detail)
        self._seen_in_graph(key, graph_id)

    def _cause_key(self, kind: str, graph_id: int, node: str | None, verdict: str,
                   direction: str, user_id: int | None, op: str | None) -> str:
        """A finding's key as its cause: the verdict, the user's line and the
        op (not the graph, node name or call, which differ between layers and
        recompiles of the same line); without a line, the graph's node."""
        if user_id is not None and op:
            f = self.writer.frame(user_id)
            if f is not None:
                return f"{kind}|{verdict}|{direction}|{f['file']}:{f['line']}|{op}"
        return f"{kind}|{graph_id}|{node}|{verdict}|{direction}"

    def _seen_in_graph(self, key: str, graph_id: int) -> None:
        """A repeat of a finding in another graph: listed in its detail."""
        row = self._written.get(key)
        detail = row["detail"] if row else None
        if detail is not None and graph_id not in (detail.graphs or []):
            self._update(key, detail=detail.updated(graphs=[*(detail.graphs or []), graph_id][:50]))

    def _nonfinite_text(self, d, what: str, consumed) -> tuple[str, str, str, dict | None]:
        """(message, hint, severity, where eager's became finite) of NaN/Inf
        on one side only. Eager's own overflow (float64 finite there) is the
        program's, not the compiler's: the compiled side is the closer one."""
        value = d.value or "NaN/Inf"
        made = None
        if consumed is not None:
            f_id = node_source(self.writer, consumed)[0]
            f = self.writer.frame(f_id) if f_id else None
            made = {"node": consumed.name, "op": node_target(consumed),
                    "file": f["file"] if f else None, "line": f["line"] if f else None}
        goes = "overflows to inf" if value == "Inf" else "goes NaN"
        fp64 = {True: "float64 stays finite there", False: "float64 is NaN/Inf there too",
                None: "float64 not known"}[d.fp64_finite]
        if d.side == "eager" and made:
            where = f" ({os.path.basename(made['file'])}:{made['line']})" if made["file"] else ""
            message = (f"eager {goes} at {what} ({d.dtype}; {fp64}), compiled does not: "
                       f"{made['op']}{where} turns eager's {value} into finite values that "
                       f"differ from compiled's")
        elif d.side == "eager":
            message = f"eager {goes} at {what} ({d.dtype}), compiled stays finite ({fp64})"
        if d.side == "eager":
            if d.fp64_finite:
                hint = (f"Not a miscompile: the compiled code is the closer one to float64 (it "
                        f"keeps intermediates in higher precision); eager's {d.dtype} {value} "
                        f"is the program's own. Compute this in float32 (x.float()) to make "
                        f"eager finite too.")
            else:
                hint = (f"Eager's {value} here is the program's own (float64 has it too); the "
                        f"compiled code does not produce it. Check the inputs of this line.")
            return message, hint, "warning", made
        other = "both sides, each where the other is finite" if d.side == "both" else "compiled"
        message = f"{other} {goes} at {what} ({d.dtype}), eager stays finite ({fp64})" \
            if d.side != "both" else f"NaN/Inf on {other} at {what} ({d.dtype}; {fp64})"
        hint = ("The compiled code makes non-finite values that eager does not: how the backend "
                "computes this op (its precision, its handling of edge cases) differs from eager."
                if d.fp64_finite is not False else
                "float64 is non-finite here too: eager's finite value is its own rounding.")
        return message, hint, ("error" if d.fp64_finite is not False else "warning"), made

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
            caller = user_stack()
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
