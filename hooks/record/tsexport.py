"""The TorchScript ONNX exporter (``torch.onnx.export(..., dynamo=False)``), recorded.

The TorchScript exporter traces the model once, with the example inputs, and
writes the ONNX file: a Python ``if`` on a tensor (``if x.mean() > 0.5:``)
runs once, and only the branch it took is in the file. torch says so only in
a ``TracerWarning`` ("Converting a tensor to a Python boolean might cause the
trace to be incorrect") at the ``if`` line.

While such an export runs, `Conversions` watches the tensor conversions to
Python values (``bool``, ``int``, ``float``, ``index``, ``.item()``: the
class attributes of ``torch.Tensor``, put back when it returns): each one's
value and the user's line (hooks/placement/conversions.py), and the warnings
the export gives, caught and given again unchanged, at their own place (the
wrapper's frame is not theirs), after it returns, through the program's
filters (hooks/record/exports.py then gives them to the program). The
ONNX file is the exporter's, untouched: graphdbg only reads it.

`record` writes the export as a graph of kind ``onnx`` (``via``
``torch.onnx.export(dynamo=False)``, the ONNX file's nodes), its
``graphdbg_export`` event (the file, the example inputs' shapes, the
TracerWarnings), a warning finding at each line whose conversion the trace
froze (hooks/findings/frozen.py), and keeps what the program's own ONNX
Runtime session is checked against (hooks/record/ortsession.py): the model,
weakly, and the values each frozen line had.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
import warnings
import weakref
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils import _pytree

from graphdbg.core.sourcemap import Frame
from graphdbg.runfile.records import EventRow, NodeRow
from graphdbg.runfile.writer import dumps

from ..check.numerics import Tolerance
from ..findings import frozen
from ..placement.conversions import conversion_stack, doc_string_stack, warning_site

VIA = "torch.onnx.export(dynamo=False)"
# torch.Tensor's conversions to Python values, and what each makes
_CONVERSIONS = {"__bool__": "bool", "__int__": "int", "__float__": "float",
                "__index__": "index", "item": "number"}
# the TracerWarning of a conversion ("Converting a tensor to a Python boolean ...")
_CONVERTING = "Converting a tensor to a Python "
# torch's own filter for them (TracerWarning.ignore_lib_warnings): a conversion
# in torch's modules (a size check in nn.functional) is torch's, never shown
_TORCH_OWN = re.compile(r"torch.(?!jit)")


@dataclass
class Conversion:
    kind: str                     # bool | int | float | index | number
    value: Any
    site: tuple[str, int, str]    # where a warning of it is shown (file, line, module)
    stack: list[Frame]            # the user's stack, the converting line innermost
    warned: list = field(default_factory=list)   # the warnings it raised


class Conversions:
    """While it is entered, on this thread: every tensor converted to a
    Python value (`Conversion`, in order). ``catch``: the warnings given
    meanwhile are caught and given again, at their own place, on exit."""

    _lock = threading.Lock()

    def __init__(self, catch: bool = False, site: Frame | None = None) -> None:
        self.catch = catch
        self.site = site   # the program's call: where a warning this module's frame owns goes
        self.seen: list[Conversion] = []
        self.warnings: list = []      # (warning message, file, line, module), in order
        self._saved: dict[str, Any] = {}
        self._owner = threading.get_ident()
        self._catcher = None
        self._caught: list = []

    def __enter__(self) -> Conversions:
        if self.catch:
            self._catcher = warnings.catch_warnings(record=True)
            self._caught = self._catcher.__enter__()
            warnings.simplefilter("always")
        with self._lock:
            for name in _CONVERSIONS:
                self._saved[name] = torch.Tensor.__dict__.get(name, _ABSENT)
                setattr(torch.Tensor, name, self._wrap(name, getattr(torch.Tensor, name)))
        return self

    def __exit__(self, *exc) -> None:
        with self._lock:
            for name, was in self._saved.items():
                if was is _ABSENT:
                    delattr(torch.Tensor, name)
                else:
                    setattr(torch.Tensor, name, was)
            self._saved = {}
        if self._catcher is None:
            return
        self._catcher.__exit__(None, None, None)
        caught, self._catcher, self._caught = self._caught, None, []
        placed = {id(w): c.site for c in self.seen for w in c.warned}
        for w in caught:   # again, at their own place: the exporter's wrapper gives them on
            file, line, module = placed.get(id(w)) or \
                (w.filename, w.lineno, os.path.splitext(os.path.basename(w.filename))[0])
            if file == __file__ and self.site is not None:   # stacklevel=2: the program's call
                file, line = self.site.file, self.site.line
            self.warnings.append((w.message, w.category, file, line))
            try:
                warnings.warn_explicit(w.message, w.category, file, line, module=module)
            except Exception:
                if exc[0] is None:
                    raise

    def _wrap(self, name: str, orig):
        watch, kind = self, _CONVERSIONS[name]

        def conversion(tensor, *args, **kwargs):
            if threading.get_ident() != watch._owner:
                return orig(tensor, *args, **kwargs)
            before = len(watch._caught)
            value = orig(tensor, *args, **kwargs)
            try:
                c = Conversion(kind, value, warning_site(), conversion_stack(),
                               list(watch._caught[before:]))
                watch.seen.append(c)
            except Exception:   # an observer: never the program's error
                pass
            return value

        conversion.__name__ = name
        return conversion

    def values_at(self) -> dict[tuple[str, int], list]:
        """{(file, line) of the converting user line: its values, in order}."""
        out: dict[tuple[str, int], list] = {}
        for c in self.seen:
            if c.stack:
                out.setdefault((c.stack[-1].file, c.stack[-1].line), []).append(c.value)
        return out


_ABSENT = object()
_KEEP_BYTES = 64 * 2**20   # a model exported to a buffer is kept for the line check up to this


class DocStrings:
    """While entered, on this thread: the ONNX graph the TorchScript exporter
    serialises (``torch._C.Graph._export_onnx``, the class attribute, put
    back on exit) is serialised once more with each node's ``doc_string``
    (the stack it was traced at; torch strips it unless ``verbose=True``) and
    no weights: ``proto``. The exporter's own call, and the file it writes,
    are untouched."""

    def __init__(self) -> None:
        self.proto: bytes | None = None
        self._owner = threading.get_ident()
        self._saved: Any = None

    def __enter__(self) -> DocStrings:
        cls = torch._C.Graph
        orig = self._saved = cls.__dict__.get("_export_onnx")
        if orig is None:
            return self
        watch = self

        def _export_onnx(graph, *args, **kwargs):
            result = orig(graph, *args, **kwargs)
            # (params, opset, dynamic_axes, defer_weights, operator_export_type,
            #  strip_doc_string, ...): the layout torch 2.x calls it with
            if threading.get_ident() == watch._owner and not kwargs and len(args) >= 6 \
                    and isinstance(args[0], dict) and isinstance(args[5], bool):
                try:
                    again = orig(graph, {}, *args[1:5], False, *args[6:])
                    watch.proto = again[0] if isinstance(again, tuple) else None
                except Exception:   # an observer: the export goes on without lines
                    watch.proto = None
            return result

        cls._export_onnx = _export_onnx
        return self

    def __exit__(self, *exc) -> None:
        if self._saved is not None:
            torch._C.Graph._export_onnx = self._saved
            self._saved = None

    def stacks(self, nodes: list) -> list[list[Frame]] | None:
        """Each of ``nodes``' (the written file's) user stack, outermost
        first; None when the graph serialised here is not the file's."""
        if self.proto is None:
            return None
        import onnx
        mine = list(onnx.load_from_string(self.proto).graph.node)
        if len(mine) != len(nodes) or any(a.op_type != b.op_type for a, b in zip(mine, nodes)):
            return None
        return [doc_string_stack(n.doc_string) for n in mine]


# id(capture context) -> what checks the sessions on its exported files
# (hooks/record/ortsession.py's SessionWatch, while installed)
_WATCHES: dict[int, Any] = {}


def watch_sessions(ctx, watch) -> None:
    """``watch.add(ExportedFile)`` is told of each file exported under ``ctx``."""
    _WATCHES[id(ctx)] = watch


def unwatch_sessions(ctx, watch) -> None:
    if _WATCHES.get(id(ctx)) is watch:
        del _WATCHES[id(ctx)]


def _target(args: tuple, kwargs: dict):
    return args[2] if len(args) > 2 else kwargs.get("f")


@dataclass
class ExportedFile:
    """An ONNX file exported in this run (the TorchScript exporter's, or a
    dynamo=True export's): what the program's InferenceSession on it is
    checked against."""
    graph_id: int
    model: Any                         # weakref to the nn.Module (None: not a module)
    path: str | None                   # realpath
    stat: tuple | None                 # (size, mtime_ns) as written
    digest: str | None                 # sha256 of the model bytes
    inputs: list[str]                  # the ONNX graph's inputs, in order
    outputs: list[str]
    leaves: list                       # the example inputs' pytree leaves (_TENSOR for a tensor)
    spec: Any
    training: list[bool] | None        # each module's training flag as exported (modules() order)
    frozen: dict                       # {(file, line): (kind, [values at export])}
    tol: Tolerance
    runtime: str | None
    # a dynamo=True export's file (hooks/record/dynfile.py): a differing run
    # localised node by node (True when that named the line), and the ONNX
    # program's call counter its runs share
    localise: Any = None
    counter: Any = None
    # a TorchScript export's file: each ONNX node's user stack (hooks/check/tsonnx.py
    # checks it line by line), and its bytes when it went to a buffer
    node_stacks: list | None = None
    data: bytes | None = None


_TENSOR = object()


def _onnx_model(target):
    """The ONNX model the export wrote (its graph, no external data), the
    bytes' digest and the bytes (when small) when it went to a buffer; (None,
    None, None) when unreadable."""
    import onnx
    if isinstance(target, (str, os.PathLike)):
        return onnx.load(os.fspath(target), load_external_data=False), None, None
    getvalue = getattr(target, "getvalue", None)
    if getvalue is not None:
        data = getvalue()
        return onnx.load_from_string(data), hashlib.sha256(data).hexdigest(), \
            data if len(data) <= _KEEP_BYTES else None
    return None, None, None


def _training(model, kwargs: dict) -> list[bool] | None:
    """The training flags the exporter traced the model with: eval unless
    ``training`` says TRAINING or PRESERVE."""
    if not isinstance(model, torch.nn.Module):
        return None
    mode = kwargs.get("training")
    name = getattr(mode, "name", str(mode or "EVAL")).upper()
    if name.endswith("PRESERVE"):
        return [m.training for m in model.modules()]
    return [name.endswith("TRAINING")] * sum(1 for _ in model.modules())


def record(ctx, findings, model, args: tuple, kwargs: dict, ex_args: tuple, ex_kwargs: dict,
           caller: list[Frame], seconds: float, conv: Conversions, runtime: str | None,
           docs: DocStrings | None = None) -> ExportedFile | None:
    """A successful TorchScript export: its graph, event and findings; what a
    session on its file is checked against (None: no file to know it by)."""
    target = _target(args, kwargs)
    onnx_model, digest, data = _onnx_model(target)
    w = ctx.writer
    graph = ctx.new_graph()
    graph.backend = "onnx"
    name = type(model).__name__ if isinstance(model, torch.nn.Module) else \
        getattr(model, "__qualname__", None) or type(model).__name__
    graph.code_name = f"{name} ({VIA})"
    nodes = list(onnx_model.graph.node) if onnx_model is not None else []
    initializers = {i.name for i in onnx_model.graph.initializer} if onnx_model is not None else set()
    inputs = [i.name for i in onnx_model.graph.input if i.name not in initializers] \
        if onnx_model is not None else []
    outputs = [o.name for o in onnx_model.graph.output] if onnx_model is not None else []
    stacks = docs.stacks(nodes) if docs is not None and nodes else None
    for idx, node in enumerate(nodes):
        op = node.op_type if not node.domain else f"{node.domain}::{node.op_type}"
        st = stacks[idx] if stacks else None
        w.add(NodeRow(graph_id=graph.id, idx=idx, name=node.name or f"{op}_{idx}",
                      op="call_function", target=op, shapes=None, dtypes=None,
                      user_frame=w.frame_id(*st[-1]) if st else None,
                      stack=w.stack_id(st) if st else None, module_path=None, module_class=None,
                      args=", ".join(node.input)))
    fields = dict(backend="onnx", code_name=graph.code_name, n_nodes=len(nodes), n_ops=len(nodes),
                  n_inputs=len(inputs), status="exported", backend_time_s=seconds,
                  graph_code=None, created_seq=ctx.next_seq())
    if caller:
        site = caller[-1]
        graph.code_file, graph.code_line = site.file, site.line
        fields.update(code_file=site.file, code_line=site.line, user_frame=w.frame_id(*site),
                      stack=w.stack_id(caller))
    w.put_graph(graph.id, **fields)
    # the conversions the trace froze: those torch warned about
    traced = [(c, m) for c in conv.seen for m in c.warned
              if issubclass(m.category, torch.jit.TracerWarning) and _CONVERTING in str(m.message)
              and not _TORCH_OWN.match(c.site[2])]
    path = os.path.realpath(os.fspath(target)) if isinstance(target, (str, os.PathLike)) else None
    shapes = [list(t.shape) if isinstance(t, torch.Tensor) else None
              for t in _pytree.tree_leaves((ex_args, ex_kwargs))]
    opset = None
    if onnx_model is not None:
        opset = next((int(o.version) for o in onnx_model.opset_import if o.domain in ("", "ai.onnx")),
                     None)
    meta = {"graph_id": graph.id, "kind": "onnx", "via": VIA, "strict": False,
            "dynamic": {k: "dynamic_axes" for k in (kwargs.get("dynamic_axes") or {})} or None,
            "specialized": None, "opset": opset, "onnx_nodes": len(nodes), "onnx_ops": None,
            "runtime": runtime, "path": path, "input_shapes": shapes,
            "inputs": inputs, "outputs": outputs,
            "tracer_warnings": [{"file": c.site[0], "line": c.site[1], "converted": c.kind,
                                 "value": _plain(c.value), "message": str(m.message)[:300]}
                                for c, m in traced] or None}
    if runtime is None:
        meta["not_checked"] = "onnxruntime not installed (pip install 'graphdbg[onnx]')"
    w.add(EventRow(seq=ctx.next_seq(), t=ctx.now(), name="graphdbg_export", compile_id=None,
                   metadata=dumps({"graphdbg_export": meta}), payload=None))
    seen_lines: dict[tuple[str, int], tuple[str, list]] = {}
    values = conv.values_at()
    for c, m in traced:
        if not c.stack:
            continue
        at = (c.stack[-1].file, c.stack[-1].line)
        if at in seen_lines:
            continue
        seen_lines[at] = (c.kind, values.get(at, [c.value]))
        frozen.traced_value(findings, graph.id, c.kind, c.value, c.stack, str(m.message), caller)
    if path is None and digest is None:
        return None
    try:
        st = os.stat(path) if path else None
    except OSError:
        st = None
    leaves, spec = _pytree.tree_flatten((tuple(ex_args), dict(ex_kwargs)))
    return ExportedFile(
        graph.id, weakref.ref(model) if isinstance(model, torch.nn.Module) else None, path,
        (st.st_size, st.st_mtime_ns) if st else None, digest, inputs, outputs,
        [_TENSOR if isinstance(v, torch.Tensor) else v for v in leaves], spec,
        _training(model, kwargs), seen_lines, Tolerance(ctx.options.rtol, ctx.options.atol),
        runtime, node_stacks=stacks, data=data)


def _plain(v: Any) -> Any:
    return v if isinstance(v, (bool, int, float)) or v is None else str(v)


class Legacy:
    """The TorchScript exporter's call, for hooks/record/exports.py: ``orig``
    run under `Conversions` (warnings caught and given again), then
    `recorded` writes what it made."""

    def __init__(self, orig, caller: list[Frame]) -> None:
        self.orig = orig
        self.conv = Conversions(catch=True, site=caller[-1] if caller else None)
        self.docs = DocStrings()

    def __call__(self, *args, **kwargs):
        with self.conv, self.docs:
            return self.orig(*args, **kwargs)

    def recorded(self, ctx, findings, model, args: tuple, kwargs: dict, ex_args: tuple,
                 ex_kwargs: dict, caller: list[Frame], seconds: float) -> None:
        from ..check import onnxcheck
        try:
            runtime = onnxcheck.runtime_version() if not onnxcheck.missing() else None
            exported = record(ctx, findings, model, args, kwargs, ex_args, ex_kwargs, caller,
                              seconds, self.conv, runtime, self.docs)
            watch = _WATCHES.get(id(ctx))
            if exported is not None and runtime is not None and watch is not None:
                watch.add(exported)
        except Exception as exc:
            ctx.internal_error("TorchScript export recorder", exc)
