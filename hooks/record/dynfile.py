"""The file a ``dynamo=True`` ONNX export wrote, for the program's own session on it.

The default exporter writes its file itself (``torch.onnx.export(model,
args, "model.onnx")``) or the program saves the ONNX program it returned
(``program.save("model.onnx")``: ``ONNXProgram.save``, wrapped while a
session runs, the class attribute put back after; the same call, the same
result, the same exception). Either way, once the file is written, an
`ExportedFile` (hooks/record/tsexport.py) says what the program's
``onnxruntime.InferenceSession`` on it is checked against
(hooks/record/ortsession.py): the model's eager forward on the session's
inputs, by the ONNX graph's input names. A run that differs is then
localised as an ONNX program's own call is (`ExportRecorder._check`: the
exported program against the model, then ONNX Runtime against the exported
program node by node), so the finding is at the user's line of the first
FX node that departs; ``localise`` returns False when that names nothing.

Only programs the recorder checks (``ExportRecorder._programs``: a recorded
export, ONNX Runtime installed, ``--compare`` on) are known; the file is read
for its size and time, never written.
"""

from __future__ import annotations

import functools
import hashlib
import os
import weakref
from typing import Any

import torch

from . import tsexport
from .tsexport import _TENSOR, ExportedFile


def install(recorder, local, marker) -> Any:
    """Wraps ``ONNXProgram.save``: the original (None when there is none).
    ``local``: the recorder's thread state (``busy`` inside an export, whose
    own save is followed by `written` after it); ``marker``: its tensor
    marker among an export's example inputs."""
    try:
        from torch.onnx import ONNXProgram
    except Exception:
        return None
    orig = ONNXProgram.__dict__.get("save")
    if orig is None:
        return None

    @functools.wraps(orig)
    def save(program, destination, *args, **kwargs):
        result = orig(program, destination, *args, **kwargs)
        if recorder.ctx.active and not getattr(local, "busy", False):
            try:
                written(recorder, program, destination, marker)
            except Exception as exc:
                recorder.ctx.internal_error("ONNX program save recorder", exc)
        return result

    ONNXProgram.save = save
    return orig


def uninstall(orig) -> None:
    if orig is None:
        return
    from torch.onnx import ONNXProgram
    ONNXProgram.save = orig


def written(recorder, program, target, marker) -> None:
    """``program`` (recorded by ``recorder``) was written to ``target`` (a
    path, or a buffer: a session made from its bytes): a session opened on it
    is checked (another target, or a program not checked, is not followed)."""
    getvalue = getattr(target, "getvalue", None)
    if not isinstance(target, (str, os.PathLike)) and getvalue is None:
        return
    entry = recorder._programs.get(id(program))
    watch = tsexport._WATCHES.get(id(recorder.ctx))
    if entry is None or watch is None:
        return
    gid, model_ref, counter, tol, runtime, (leaves, spec) = entry
    model = model_ref() if model_ref is not None else None
    if model is None:
        return
    if getvalue is not None:   # a buffer: known by its bytes' digest
        path, st, digest = None, None, hashlib.sha256(getvalue()).hexdigest()
    else:
        path, st, digest = os.path.realpath(os.fspath(target)), os.stat(target), None
    graph = program.model.graph
    initializers = set(graph.initializers)
    inputs = [v.name for v in graph.inputs if v.name not in initializers]
    outputs = [v.name for v in graph.outputs]
    recorder_ref, program_ref = weakref.ref(recorder), [program]

    def localise(args: tuple, kwargs: dict, call_idx: int) -> bool:
        r, prog = recorder_ref(), (program_ref[0] if program_ref else None)
        if r is None or prog is None:
            return False
        return bool(r._check("onnx", prog, prog.exported_program, model_ref, gid, args, kwargs,
                             tol, call_idx, runtime))

    exported = ExportedFile(
        gid, model_ref, path, (st.st_size, st.st_mtime_ns) if st else None, digest, inputs, outputs,
        [_TENSOR if v is marker else v for v in leaves], spec,
        [m.training for m in model.modules()] if isinstance(model, torch.nn.Module) else None,
        {}, tol, runtime, localise=localise, counter=counter)
    # the ONNX program is kept for the check while the model lives (the
    # program may have let go of it: `torch.onnx.export(model, args, path)`)
    weakref.finalize(model, program_ref.clear)
    watch.add(exported)

