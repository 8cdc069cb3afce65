"""Findings of exports (hooks/record/exports.py), each at the user's line:
an ONNX translation that departs from eager, an exported program that
computes something else than its model, an op with no ONNX translation, a
size declared dynamic that the export fixed, an ONNX program not checked.

A mixin of `Findings` (hooks/findings/writer.py): it writes through the same
`_add`, with the same keys and severities.
"""

from __future__ import annotations

import os
import re
import traceback

import torch

from graphdbg.runfile.details import (CheckSkippedDetail, CompileErrorDetail, DivergenceDetail,
                                      SpecializedDetail)
from graphdbg.core.sourcemap import Frame, code_line, user_frames

from .exceptions import exception_chain, headline
from .frames import node_source, node_target
from ..check.numerics import finite_or_none

_SEVERITY = {"miscompile": "error", "shape": "error", "dtype": "error",
             "precision": "info", "random": "warning"}
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


class ExportFindings:
    """Mixin of `Findings`: the export findings."""

    def onnx_failure(self, exc: BaseException, caller: list[Frame], *, legacy: bool = False,
                     specialized: list[dict] | None = None) -> None:
        """torch.onnx.export raised. A translation failure (no ONNX function
        for an op) is placed at the line that called the op; a failure of its
        torch.export step as torch.export's own; the legacy TorchScript
        exporter's at the innermost user frame of its traceback."""
        chain = exception_chain(exc)
        names = [type(e).__name__ for e in chain]
        if "TorchExportError" in names and len(chain) > 1:
            inner = chain[chain.index(next(e for e in chain if type(e).__name__ == "TorchExportError")) + 1:]
            if inner:  # torch.export's own failure, said as such
                self.export_failure(exc, specialized=specialized, via="torch.onnx.export")
                return
        w = self.writer
        node = _onnx_node(exc)
        user_id = stack = None
        if node is not None:
            user_id, stack, _, _ = node_source(w, node)
        if user_id is None:
            frames = []
            for e in chain:
                frames = user_frames(traceback.extract_tb(e.__traceback__)) or frames
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
        w = self.writer
        site = s.get("site")
        user_id = w.frame_id(*site) if site else None
        if user_id is None:
            user_id, _ = self._graph_site(graph_id)
        size = s.get("source") or s.get("symbol")
        size = re.sub(r"^L\['([^']+)'\]", r"\1", size or "?")
        where = _basename_line(site[0], site[1]) if site else "the code"
        via = "torch.onnx.export" if kind == "onnx" else "torch.export"
        self._add(f"specialized|{graph_id}|{size}", kind="export_specialized", severity="warning",
                  message=f"{via} fixed {size} to {s.get('value')}, which you declared dynamic "
                          f"({s.get('declared')})",
                  hint=f"{where} makes the size a constant ({s.get('reason')}): the exported "
                       f"program only takes inputs with {size} == {s.get('value')}. Make that line "
                       "size-independent (compute from x.shape, torch._check for a range), or "
                       "declare it static (Dim.STATIC) if that is what you mean.",
                  user_frame=user_id, graph_id=graph_id,
                  detail=SpecializedDetail.of(size=size, value=s.get("value"),
                                              declared=s.get("declared"), symbol=s.get("symbol"),
                                              reason=s.get("reason"), exported=kind))

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
        if kind == "random":
            message = f"ONNX Runtime draws other random numbers than eager at {what}"
            hint = ("ONNX Runtime has its own random streams: the model was exported with a "
                    "random op running (dropout in training mode?). Export after model.eval() "
                    "for inference; nodes after this one were not judged.")
        elif kind == "precision":
            message = (f"ONNX Runtime differs from eager at {what} but is as close or closer to "
                       f"float64 ({d.dtype})")
            hint = (f"A precision difference, not a wrong translation: ONNX Runtime computes "
                    f"{d.dtype} ops in {d.dtype} where torch's kernels keep float32 "
                    "intermediates (or the ONNX op's documented semantics are looser). Compare in "
                    "float32, or accept it with looser tolerances (--rtol/--atol).")
        else:
            message = f"ONNX Runtime diverges from eager at {what}"
            hint = (f"The ONNX ops translated from this node compute something else than torch "
                    f"on the same inputs ({on}; every earlier node matches). Check a "
                    f"custom_translation_table entry for {target}, or the translation in "
                    f"opset {opset}.")
        self._add(f"divergence|{graph_id}|{node.name if node is not None else None}|{kind}|onnx",
                  kind="divergence", severity=_SEVERITY.get(kind, "error"), message=message,
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
                      output_max_rel=finite_or_none(output.max_rel) if output else None))

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
        classification = d.kind if d.kind in ("precision", "shape", "dtype") else "miscompile"
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
        elif found.how == "values":
            message = f"the exported program ({via}) diverges from eager at {line}"
            hint = (f"Same ops, other values on {on}: a Python number or attribute the forward "
                    "reads was fixed at export time (the exported program holds its value then), "
                    "or the program changed it since. Pass it as an input, or export again.")
        else:
            message = f"the exported program ({via}) diverges from eager at an output"
            hint = f"The outputs differ on {on}; no line of the forward could be told apart."
        self._add(f"divergence|{graph_id}|export|{found.line}", kind="divergence",
                  severity=_SEVERITY.get(classification, "error"), message=message, hint=hint,
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
