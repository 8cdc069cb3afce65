"""Findings of the TorchScript exporter (hooks/record/tsexport.py) and of the
program's own ONNX Runtime session on its file (hooks/record/ortsession.py):

- a tensor converted to a Python value while the export traced (torch's
  TracerWarning): the trace took that branch, and the ONNX file always will
  (a warning at the converting line);
- the session's outputs differ from the model's on the same inputs: at the
  ``if`` line the trace froze when these inputs take the other branch (an
  error); else at the first line of the model that ONNX Runtime computes
  otherwise (hooks/check/tsonnx.py); else at the program's ``session.run``
  line.

Plain functions over `Findings` (hooks/findings/writer.py): they write
through its ``_add`` and place with the stacks the placement layer took.
"""

from __future__ import annotations

import os

from graphdbg.core.sourcemap import Frame, code_line
from graphdbg.runfile.details import DivergenceDetail, SpecializedDetail

from ..check.numerics import finite_or_none
from .exported import _counted, onnx_wording
from ..placement.internal import in_library

_WHAT = {"bool": "a Python bool", "int": "a Python int", "float": "a Python float",
         "index": "a Python index", "number": "a Python number (.item())"}


def _at(file: str, line: int) -> str:
    code = code_line(file, line)
    return f"{os.path.basename(file)}:{line}" + (f" `{code}`" if code else "")


def _stack(findings, stack: list[Frame], caller: list[Frame]) -> tuple[int | None, int | None]:
    """(frame id, stack id) at ``stack``'s innermost frame, the program's
    call (``caller``) outermost when the stack does not start there."""
    w = findings.writer
    frames = list(stack)
    if caller and [f[:3] for f in frames[:len(caller)]] != [f[:3] for f in caller]:
        frames = caller + frames
    return w.frame_id(*stack[-1]), w.stack_id(frames)


def _branch(kind: str, value) -> str:
    if kind == "bool":
        return f"the {value} branch"
    return f"the value {value}"


def traced_value(findings, graph_id: int, kind: str, value, stack: list[Frame], message: str,
                 caller: list[Frame]) -> None:
    """The TorchScript exporter's trace converted a tensor to a Python value
    at ``stack``'s line: the ONNX model keeps what it was then."""
    site = stack[-1]
    user_id, stack_id = _stack(findings, stack, caller)
    took = (f"the trace took the {value} branch here; an exported model will always take it"
            if kind == "bool" else
            f"the trace fixed {_WHAT.get(kind, kind)} here to {value}; an exported model will "
            "always use that value")
    # in a library (transformers' mask and attention helpers convert sizes and
    # flags as they trace): not the program's code to change, and most such
    # conversions are shapes the inputs keep; info, while the program's own
    # InferenceSession runs are checked and say it with an error where it matters
    library = in_library(site.file)
    fix = ("It is in a library: the ONNX model is right for inputs that take the same branch; "
           "graphdbg checks the program's InferenceSession runs on the file against the model."
           if library else "Write the branch as tensor ops (torch.where), or export with "
           "dynamo=True and torch.cond.")
    findings._add(
        f"traced|{graph_id}|{site.file}:{site.line}", kind="export_specialized",
        severity="info" if library else "warning",
        message=f"torch.onnx.export(dynamo=False): {took}",
        reason=message,
        hint=(f"This line converts a tensor to {_WHAT.get(kind, kind)} while the TorchScript "
              "exporter traces the model: the trace records no condition, only the ops that ran "
              f"with the example inputs ({_branch(kind, value)}). Inputs that would take "
              f"another branch get this one's result from the ONNX model, silently. {fix}"),
        user_frame=user_id, stack=stack_id, graph_id=graph_id,
        detail=SpecializedDetail.of(
            reason=f"a tensor converted to {_WHAT.get(kind, kind)} while tracing", exported="onnx",
            branch={"file": site.file, "line": site.line, "code": code_line(site.file, site.line),
                    "converted": kind,
                    "value": value if isinstance(value, (bool, int, float)) else str(value)}))


def session_divergence(findings, graph_id: int, call_idx: int, d, output: int | None,
                       output_name: str | None, runtime: str | None, run_site: list[Frame],
                       branch: dict | None, caller: list[Frame]) -> None:
    """The program's InferenceSession returned other outputs than the
    exported model's eager forward on the same inputs. ``branch``: the line
    whose conversion the trace froze and these inputs convert otherwise
    ({stack, kind, traced, now})."""
    out = f"output {output_name!r}" if output_name else f"output {output}"
    common = dict(classification="miscompile" if d.kind == "precision" else d.kind,
                  call=call_idx, direction="forward", output=output,
                  stage=f"{runtime or 'onnxruntime'} (the program's InferenceSession)",
                  exported="onnx", max_abs=finite_or_none(d.max_abs),
                  max_rel=finite_or_none(d.max_rel), eager_vs_fp64=d.eager_vs_fp64,
                  compiled_vs_fp64=d.compiled_vs_fp64, dtype=d.dtype,
                  output_max_abs=finite_or_none(d.max_abs), output_max_rel=finite_or_none(d.max_rel))
    diff = f"{out} differs by up to {d.max_abs:.3g}" if d.max_abs != float("inf") else \
        f"{out} differs (NaN/Inf or shape)"
    if branch is not None:
        site = branch["stack"][-1]
        user_id, stack_id = _stack(findings, branch["stack"], caller)
        kind, traced, now = branch["kind"], branch["traced"], branch["now"]
        where = f"{os.path.basename(site.file)}:{site.line}"
        message = (f"the trace took {_branch(kind, traced)} at {where}; these inputs take "
                   f"{'False' if traced is True else 'True' if traced is False else now}: the "
                   "ONNX model computes the other branch" if kind == "bool" else
                   f"the trace fixed {_WHAT.get(kind, kind)} at {where} to {traced}; these "
                   f"inputs give {now}: the ONNX model computes with the traced value")
        hint = (f"On call {call_idx} of the program's InferenceSession the model itself converts "
                f"{_at(site.file, site.line)} to {now}, where the trace saw {traced}: the ONNX "
                f"file holds only the ops of the traced branch, and {diff} from the model's. "
                "Write the branch as tensor ops (torch.where), or export with dynamo=True and "
                "torch.cond.")
        findings._add(f"divergence|{graph_id}|frozen|{site.file}:{site.line}", kind="divergence",
                      severity="error", message=message, hint=hint, user_frame=user_id,
                      stack=stack_id, graph_id=graph_id,
                      detail=DivergenceDetail.of(
                          **common, method="frozen branch",
                          branch={"file": site.file, "line": site.line,
                                  "code": code_line(site.file, site.line), "converted": kind,
                                  "traced": traced, "now": now}))
        return
    user_id, stack_id = findings._user_call(run_site or None) if run_site else (None, None)
    if user_id is None:
        user_id, stack_id = findings._graph_site(graph_id)
    findings._add(f"divergence|{graph_id}|session|{output}", kind="divergence",
                  severity="error" if d.kind in ("miscompile", "nonfinite", "shape", "dtype")
                  else "warning",
                  message=f"the program's InferenceSession differs from the exported model's "
                          f"eager forward: {diff}",
                  hint=(f"On call {call_idx} of the session, ONNX Runtime's {out} is not the "
                        "model's on the same inputs, and no Python value the trace converted "
                        "was converted otherwise: a translation of the TorchScript exporter, or "
                        "a model changed since the export."),
                  user_frame=user_id, stack=stack_id, graph_id=graph_id,
                  detail=DivergenceDetail.of(**common, method="outputs"))


def session_line(findings, graph_id: int, call_idx: int, found, out, output: int | None,
                 output_name: str | None, runtime: str | None) -> None:
    """The program's InferenceSession differs from the model, first at the
    line ``found`` (a `tsonnx.LineCheck`) names; ``out``: the output's diff."""
    d, site = found.diff, found.stack[-1]
    user_id, stack_id = _stack(findings, found.stack, [])
    ops = _counted(found.onnx_ops)
    what = f"{os.path.basename(site.file)}:{site.line} (ONNX {ops})"
    on = f"call {call_idx} of the program's InferenceSession"
    message, hint, severity = onnx_wording(
        d, what, on, "The TorchScript exporter's symbolic for an op on this line computes "
        "otherwise; try dynamo=True, or check the translation in this opset.", unit="line")
    findings._add(f"divergence|{graph_id}|session-line|{site.file}:{site.line}|{d.kind}",
                  kind="divergence", severity=severity, message=message, hint=hint,
                  user_frame=user_id, stack=stack_id, graph_id=graph_id,
                  detail=DivergenceDetail.of(
                      classification=d.kind, call=call_idx, direction="forward", output=output,
                      stage=f"{runtime or 'onnxruntime'} (the program's InferenceSession)",
                      method="onnx lines", exported="onnx", onnx_ops=found.onnx_ops[:20],
                      max_abs=finite_or_none(d.max_abs), max_rel=finite_or_none(d.max_rel),
                      eager_vs_fp64=d.eager_vs_fp64, compiled_vs_fp64=d.compiled_vs_fp64,
                      dtype=d.dtype, output_max_abs=finite_or_none(out.max_abs),
                      output_max_rel=finite_or_none(out.max_rel),
                      **(dict(nonfinite_side=d.side, nonfinite_value=d.value,
                              fp64_finite=d.fp64_finite) if d.kind == "nonfinite" else {})))
