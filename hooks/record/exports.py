"""Exports: `torch.export.export` and `torch.onnx.export`, recorded and checked.

While a session runs, both functions are wrapped (the module attributes
only: a program that imported them before the session began still has its
failures recorded when the error reaches the top, by the runner). The
wrappers return the very same object and re-raise the very same exception.

A successful export becomes a graph of its own in the run file: kind
``export`` (the exported program's graph) or ``onnx`` (the graph the ONNX
exporter translated, each FX node with the ONNX ops made from it, and the
opset), at the user's export call, with a ``graphdbg_export`` event saying
what it is. Then (unless ``--no-compare``) it is checked against eager on
the export's example inputs (hooks/check/exported.py, hooks/check/onnxcheck.py);
an ONNX program is checked again on the first inputs the program runs it
on (``ONNXProgram.__call__``, as many calls as ``--compare-first``).

A failure is recorded at the user's line: torch.export's as before
(`Findings.export_failure`), the ONNX translation's at the line that called
the op with no translation. A size the user declared dynamic (``Dim.AUTO``,
``dynamic_axes``) that the code specialised is a warning at the line that
specialised it (hooks/record/dims.py watches what an export fixes).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import itertools
import os
import operator
import sys
import threading
import time
import warnings
import weakref
from typing import Any

import torch
import torch.export
from torch.utils import _pytree

from graphdbg.core.sourcemap import Frame
from graphdbg.runfile.records import CallRow, EventRow, NodeRow, NodeValueRow
from graphdbg.runfile.writer import dumps

from ..check import checkcost, exported, onnxcheck
from ..check.nodevalues import _distance, value_summary
from ..check.numerics import Tolerance
from ..check.subgraphs import preserved_rng, rng_state
from ..context import CaptureContext
from ..placement.modules import node_target
from ..placement.nodes import node_source
from ..placement.stack import user_stack
from ..findings.writer import Findings
from . import dims, draft, dynfile, tsexport
from .backend import _arg_text, _describe_value

_local = threading.local()
_TENSOR = object()   # a tensor's place among an export's example inputs


@contextlib.contextmanager
def _warnings_at(caller: list[Frame]):
    """Warnings the exporter gives with ``stacklevel=2`` ("Exporting a model
    while it is in training mode") would name this wrapper's line: they are
    caught and given again at the user's export call (others at their own
    place), through the program's warning filters. A warning the filters turn
    into an error is raised when the export returns, not inside it."""
    caught: list = []
    failed = False
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield
    except BaseException:
        failed = True
        raise
    finally:
        site = caller[-1] if caller else None
        for w in caught:
            file, line = w.filename, w.lineno
            if site is not None and file == __file__:
                file, line = site.file, site.line
            module = _module_of(file)
            try:
                warnings.warn_explicit(w.message, w.category, file, line, module=module,
                                       registry=_REGISTRIES.setdefault(file, {}))
            except Exception:
                if not failed:   # the export's own exception goes first
                    raise


_REGISTRIES: dict[str, dict] = {}   # "once per location" across exports, as warnings keeps it


def _module_of(file: str) -> str:
    """The name of the module whose file ``file`` is, as Python's warnings
    give it to the filters (``__main__`` for the program's script: torch's
    ``TracerWarning`` filter ignores modules named ``torch...``)."""
    for name, mod in list(sys.modules.items()):
        if getattr(mod, "__file__", None) == file:
            return name
    return os.path.splitext(os.path.basename(file))[0]


def _model_name(model: Any) -> str:
    if isinstance(model, torch.export.ExportedProgram):
        return "ExportedProgram"
    return type(model).__name__ if isinstance(model, torch.nn.Module) else \
        getattr(model, "__qualname__", None) or type(model).__name__


def _user_site() -> list[Frame]:
    return user_stack()


def _names(names) -> list[str]:
    """The inputs' names (``names()``), or none when they cannot be told."""
    try:
        return list(names() or ())
    except Exception:
        return []


def _declared(dynamic_shapes: Any, dynamic_axes: Any, names: list[str]) -> dict[str, str]:
    """The sizes an export call declares dynamic (`dims.declared_dynamic`);
    nothing when it cannot tell."""
    if dynamic_shapes is None and dynamic_axes is None:
        return {}
    try:
        return dims.declared_dynamic(dynamic_shapes, dynamic_axes, names)
    except Exception:
        return {}


def _describe(kind: str, obj, declared: dict[str, str], specialized: list[dict], strict: bool,
              compare: bool, via: str | None = None) -> tuple[dict, list[dict], str | None]:
    """The ``graphdbg_export`` event's fields (docs/run-file.md), the sizes
    declared dynamic that the export fixed (each with how it was declared),
    and the ONNX runtime that will check it (None: not checked)."""
    meta: dict[str, Any] = {"kind": kind,
                            "via": via or ("torch.export.export" if kind == "export"
                                           else "torch.onnx.export"),
                            "strict": strict, "dynamic": declared or None}
    if kind == "onnx":
        meta.update(opset=onnxcheck.opset(obj), onnx_nodes=sum(1 for _ in obj.model.graph),
                    onnx_ops=onnxcheck.onnx_ops(obj))
    fixed = []
    for s in specialized:   # `L['x'].size()[0]` against the declared `x.size()[0]`
        src = s.get("source") or ""
        how = next((d for key, d in declared.items() if src.endswith(key.split(".", 1)[-1])
                    and key.split(".", 1)[0] in src), None)
        if how is not None:
            fixed.append({**s, "declared": how})
    meta["specialized"] = [{k: v for k, v in s.items() if k not in ("site", "stack", "op")} | {
        "file": s["site"][0] if s.get("site") else None,
        "line": s["site"][1] if s.get("site") else None} for s in fixed] or None
    runtime = None
    if kind == "onnx":
        lacking = onnxcheck.missing()
        runtime = onnxcheck.runtime_version() if not lacking else None
        meta["runtime"] = runtime
        if lacking and compare:
            meta["not_checked"] = f"{', '.join(lacking)} not installed ({onnxcheck.INSTALL})"
    return meta, fixed, runtime


class ExportRecorder:
    def __init__(self, ctx: CaptureContext, findings: Findings) -> None:
        self.ctx = ctx
        self.findings = findings
        self._orig: dict[str, Any] = {}
        # ONNX programs recorded: id -> (graph id, weak model, call counter, ...)
        self._programs: dict[int, tuple] = {}
        # exported programs recorded: id -> (graph id, weak model, call counter, tol)
        self._exported_programs: dict[int, tuple] = {}
        self._hooks: list = []   # forward hooks on the modules ep.module() made
        # ONNX program id -> the exported program it was made from (weakly);
        # model -> the program draft_export made of it last (both weakly)
        self._sources: dict[int, weakref.ref] = {}
        self._drafts: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    # -- install ------------------------------------------------------------------------
    def install(self) -> None:
        if self._orig:
            return
        recorder = self
        orig_export = self._orig["export"] = torch.export.export

        @functools.wraps(orig_export)
        def export(*args, **kwargs):
            return recorder._export(orig_export, args, kwargs)

        export._graphdbg_hook = True
        torch.export.export = export
        self._orig["draft_export"] = draft.install(self)
        orig_module = self._orig["module"] = torch.export.ExportedProgram.module

        @functools.wraps(orig_module)
        def module(ep, *args, **kwargs):
            gm = orig_module(ep, *args, **kwargs)
            r = recorder if recorder.ctx.active else None
            entry = r._exported_programs.get(id(ep)) if r is not None else None
            if entry is not None and not getattr(_local, "busy", False):
                try:
                    r._watch_module(gm, entry)
                except Exception as exc:
                    r.ctx.internal_error("exported module recorder", exc)
            return gm

        module._graphdbg_hook = True
        torch.export.ExportedProgram.module = module
        try:
            torch_onnx = importlib.import_module("torch.onnx")
            orig_onnx = self._orig["onnx"] = torch_onnx.export
        except Exception:
            return

        @functools.wraps(orig_onnx)
        def onnx_export(*args, **kwargs):
            return recorder._onnx_export(orig_onnx, args, kwargs)

        onnx_export._graphdbg_hook = True
        torch_onnx.export = onnx_export
        try:
            from torch.onnx import ONNXProgram
            orig_call = self._orig["onnx_call"] = ONNXProgram.__call__
        except Exception:
            return

        @functools.wraps(orig_call)
        def __call__(program, *args, **kwargs):
            r = recorder if recorder.ctx.active else None
            entry = r._programs.get(id(program)) if r is not None else None
            if entry is None or getattr(_local, "busy", False):
                return orig_call(program, *args, **kwargs)
            return r._onnx_call(orig_call, entry, program, args, kwargs)

        __call__._graphdbg_hook = True
        ONNXProgram.__call__ = __call__
        self._orig["onnx_save"] = dynfile.install(self, _local, _TENSOR)   # the file a session opens

    def uninstall(self) -> None:
        for handle in self._hooks:
            handle.remove()
        self._hooks = []
        self._exported_programs = {}
        self._sources = {}
        self._drafts = weakref.WeakKeyDictionary()
        if "export" in self._orig:
            torch.export.export = self._orig["export"]
        draft.uninstall(self._orig.get("draft_export"))
        if "module" in self._orig:
            torch.export.ExportedProgram.module = self._orig["module"]
        if "onnx" in self._orig:
            torch.onnx.export = self._orig["onnx"]
        if "onnx_call" in self._orig:
            from torch.onnx import ONNXProgram
            ONNXProgram.__call__ = self._orig["onnx_call"]
        dynfile.uninstall(self._orig.get("onnx_save"))
        self._orig = {}
        self._programs = {}

    # -- torch.export.export -----------------------------------------------------------
    def _export(self, orig, args: tuple, kwargs: dict, via: str = "torch.export.export"):
        ctx = self.ctx
        if not ctx.active or getattr(_local, "busy", False):
            return orig(*args, **kwargs)   # inside another export (torch.onnx.export, a nested session)
        caller = _user_site()
        strict = bool(kwargs.get("strict", False))
        model, ex_args = args[0] if args else kwargs.get("mod"), \
            (args[1] if len(args) > 1 else kwargs.get("args", ()))
        names = _names(lambda: dims.input_names(model, ex_args if isinstance(ex_args, tuple) else ()))
        declared = _declared(kwargs.get("dynamic_shapes"), None, names)
        ep, seconds, spec = self._call_export(
            orig, args, kwargs, caller, names, "export-error mapper",
            lambda exc, spec: self.findings.export_failure(
                exc, strict=strict, specialized=spec.seen, declared=declared, sites=spec.sites,
                names=names))
        try:
            ex_kwargs = (args[2] if len(args) > 2 else kwargs.get("kwargs")) or {}
            self._exported(
                "export", ep, model, tuple(ex_args) if isinstance(ex_args, (list, tuple)) else (ex_args,),
                ex_kwargs, caller, seconds, spec, declared, strict=strict, via=via)
        except Exception as exc:
            ctx.internal_error("export recorder", exc)
        return ep

    # -- torch.onnx.export ---------------------------------------------------------------
    def _onnx_export(self, orig, args: tuple, kwargs: dict):
        ctx = self.ctx
        if not ctx.active or getattr(_local, "busy", False):
            return orig(*args, **kwargs)
        model = args[0] if args else kwargs.get("model")
        ex_args = args[1] if len(args) > 1 else kwargs.get("args", ())
        if isinstance(ex_args, torch.Tensor):
            ex_args = (ex_args,)
        ex_kwargs = kwargs.get("kwargs") or {}
        dynamo = kwargs.get("dynamo", True) or isinstance(model, torch.export.ExportedProgram)
        caller = _user_site()
        names = _names(lambda: list(kwargs.get("input_names") or ())
                       or dims.input_names(model, tuple(ex_args)))
        declared = _declared(kwargs.get("dynamic_shapes"), kwargs.get("dynamic_axes"), names)
        legacy = None if dynamo else tsexport.Legacy(orig, caller)   # hooks/record/tsexport.py
        program, seconds, spec = self._call_export(
            legacy or orig, args, kwargs, caller, names, "onnx-error mapper",
            lambda exc, spec: self.findings.onnx_failure(
                exc, caller, legacy=not dynamo, specialized=spec.seen, declared=declared,
                sites=spec.sites, names=names))
        if program is None or getattr(program, "exported_program", None) is None:
            if legacy is not None:   # the TorchScript exporter: its file, its frozen lines
                legacy.recorded(ctx, self.findings, model, args, kwargs, tuple(ex_args),
                                ex_kwargs, caller, seconds)
            return program
        # an exported program recorded here (checked against its model), or
        # a model draft-exported here (its assertions are the ONNX program's)
        source = model if isinstance(model, torch.export.ExportedProgram) else None
        if source is None and isinstance(model, torch.nn.Module) and model in self._drafts:
            source = self._drafts[model]()
        entry = self._exported_programs.get(id(source)) if source is not None else None
        try:
            self._exported("onnx", program, model, tuple(ex_args), ex_kwargs, caller, seconds,
                           spec, declared, model_ref=entry[1] if entry else None, source=source)
        except Exception as exc:
            ctx.internal_error("onnx export recorder", exc)
        try:   # the file it wrote, which the program's InferenceSession may open
            dynfile.written(self, program, args[2] if len(args) > 2 else kwargs.get("f"),
                            _TENSOR)
        except Exception as exc:
            ctx.internal_error("onnx export recorder", exc)
        return program

    def _call_export(self, orig, args: tuple, kwargs: dict, caller: list[Frame], names: list[str],
                     mapper: str, on_failure) -> tuple[Any, float, dims.Specializations]:
        """The program's export call, as without graphdbg: (its result, its
        seconds, the sizes it fixed and the guards it added, with their lines:
        `dims.Specializations`, its inputs' ``names`` known). Its exception is
        recorded (``on_failure(exc, those)``) and re-raised. While it runs, an
        outer session's wrapper (nested captures) and torch.export inside
        torch.onnx.export pass through, and its ops are not the program's."""
        spec = dims.Specializations(names)
        t0 = time.perf_counter()
        _local.busy = True
        try:
            with spec, self.ctx.compiled_code(), _warnings_at(caller):
                result = orig(*args, **kwargs)
        except Exception as exc:
            try:
                on_failure(exc, spec)
            except Exception as inner:
                self.ctx.internal_error(mapper, inner)
            raise
        finally:
            _local.busy = False
        return result, time.perf_counter() - t0, spec

    # -- a successful export -------------------------------------------------------------
    def _exported(self, kind: str, obj, model, args: tuple, kwargs: dict, caller: list[Frame],
                  seconds: float, spec: dims.Specializations, declared: dict[str, str],
                  strict: bool = False, via: str | None = None, model_ref=None,
                  source=None) -> None:
        """A successful export: its graph, what it is, its findings, its checks.
        ``model_ref``: the model of the exported program ``source`` an ONNX
        program was converted from (checked against it)."""
        ctx = self.ctx
        ep = obj if kind == "export" else obj.exported_program
        gid = self._record_graph(kind, ep, model, caller, seconds, via)
        meta, fixed, runtime = _describe(kind, obj, declared, spec.seen, strict,
                                         ctx.options.compare, via)
        ctx.writer.add(EventRow(seq=ctx.next_seq(), t=ctx.now(), name="graphdbg_export",
                                compile_id=None,
                                metadata=dumps({"graphdbg_export": {"graph_id": gid, **meta}}),
                                payload=None))
        for s in fixed:
            self.findings.export_specialized(gid, s, kind)
        if kind == "onnx":   # a range the code narrows, which the ONNX program does not check
            for n in dims.narrowed(ep, spec.sites, declared):
                self.findings.export_narrowed(gid, n, caller)
            assumed = draft.assumptions(source if source is not None else ep)
            for a in draft.dropped(obj, source):   # runtime assertions the ONNX graph lacks
                self.findings.onnx_dropped_assert(gid, a, assumed)
            if source is not None:
                self._sources[id(obj)] = weakref.ref(source)
                weakref.finalize(obj, self._sources.pop, id(obj), None)
        if kind == "export" and via == "torch.export.draft_export":
            for a in draft.assumptions(obj):
                self.findings.draft_assumption(gid, a)
            if isinstance(model, torch.nn.Module):
                self._drafts[model] = weakref.ref(obj)
        if meta.get("not_checked"):
            self.findings.onnx_not_checked(gid, meta["not_checked"])
        if not ctx.options.compare:
            return
        need = checkcost.export_estimate(ep, kind == "onnx" and runtime is not None)
        limit, what = checkcost.budget(ctx.options.compare_memory, args)
        if limit is not None and need > limit:
            self.findings.check_skipped(gid, need, limit, what)
            return
        tol = Tolerance(ctx.options.rtol, ctx.options.atol)
        if model_ref is None:
            model_ref = weakref.ref(model) if isinstance(model, torch.nn.Module) else None
        with ctx.own_work():
            self._check(kind, obj, ep, model_ref, gid, args, kwargs, tol, 0, runtime)
        # later calls: ep.module()'s modules, the ONNX program's runs (weakly: the
        # entries go when the program lets go of the export)
        if kind == "export" and model_ref is not None:
            self._exported_programs[id(obj)] = (gid, model_ref, itertools.count(), tol)
            weakref.finalize(obj, self._exported_programs.pop, id(obj), None)
        if kind == "onnx" and runtime is not None:
            # a run gets flat inputs: the example's structure (its non-tensor
            # leaves, no tensor kept) says where they go
            leaves, spec = _pytree.tree_flatten((tuple(args), dict(kwargs)))
            shape = ([_TENSOR if isinstance(v, torch.Tensor) else v for v in leaves], spec)
            self._programs[id(obj)] = (gid, model_ref, itertools.count(), tol, runtime, shape)
            weakref.finalize(obj, self._programs.pop, id(obj), None)

    def _record_graph(self, kind: str, ep, model, caller: list[Frame], seconds: float,
                      via: str | None = None) -> int:
        """The exported program's graph and its nodes (user lines from their
        ``stack_trace``), at the user's export call: its graph id."""
        ctx, w = self.ctx, self.ctx.writer
        graph = ctx.new_graph()
        gm = ep.graph_module
        graph.backend = "torch.export" if kind == "export" else "onnx"
        graph.code_name = f"{_model_name(model)} (" + \
            ("torch.export" if kind == "export" else "torch.onnx.export") + ")"
        if via == "torch.export.draft_export":
            graph.code_name = f"{_model_name(model)} (torch.export.draft_export)"
        n_ops = 0
        for idx, node in enumerate(gm.graph.nodes):
            if node.op in ("call_function", "call_method", "call_module"):
                n_ops += 1
            shapes, dtypes = _describe_value(node.meta.get("val"))
            user_id, stack, mpath, mcls = node_source(w, node)
            if user_id is not None:
                graph.node_frames[node.name] = user_id
            w.add(NodeRow(graph_id=graph.id, idx=idx, name=node.name, op=node.op,
                          target=node_target(node, gm), shapes=dumps(shapes), dtypes=dumps(dtypes),
                          user_frame=user_id, stack=stack, module_path=mpath, module_class=mcls,
                          args=_arg_text(node)))
        try:
            code = gm.code
        except Exception:
            code = None
        fields = dict(backend=graph.backend, code_name=graph.code_name, n_nodes=len(gm.graph.nodes),
                      n_ops=n_ops, n_inputs=sum(1 for n in gm.graph.nodes if n.op == "placeholder"),
                      status="exported", backend_time_s=seconds, graph_code=code,
                      created_seq=ctx.next_seq())
        if caller:
            site = caller[-1]
            graph.code_file, graph.code_line = site.file, site.line
            fields.update(code_file=site.file, code_line=site.line,
                          user_frame=w.frame_id(*site), stack=w.stack_id(caller))
        w.put_graph(graph.id, **fields)
        return graph.id

    def _check(self, kind: str, obj, ep, model_ref, gid: int, args: tuple, kwargs: dict,
               tol: Tolerance, call_idx: int, runtime: str | None, gm=None) -> bool:
        """Checks one call; True when it wrote a divergence."""
        ctx = self.ctx
        rng = rng_state()
        model = model_ref() if model_ref is not None else None
        values: dict = {}   # the exported program's node values: both checks read them
        if model is not None:
            try:
                if gm is None:
                    _local.busy = True   # our own module: not one of the program's
                    try:
                        gm = ep.module()
                    finally:
                        _local.busy = False
                found = exported.check(model, ep, gm, args, kwargs, tol, rng, values)
                src = self._sources.get(id(obj)) if kind == "onnx" and found else None
                if src is not None and src() is not None:
                    _local.busy = True
                    try:   # the branch the export traced, which these inputs do not take
                        failing = draft.failing(src(), args, kwargs)
                    finally:
                        _local.busy = False
                    if failing:
                        found = draft.at_branch(found, failing[0])
                if found is not None:
                    self.findings.export_divergence(gid, kind, call_idx, found)
                    return True  # the exported program already differs from eager
            except Exception as exc:
                ctx.internal_error(f"export check of graph {gid}", exc)
        if kind != "onnx" or runtime is None:
            return False
        try:
            _local.busy = True
            with preserved_rng():
                result = onnxcheck.check(obj, args, kwargs, tol, rng, gm, values)
        except Exception as exc:
            ctx.internal_error(f"ONNX check of graph {gid}", exc)
            return False
        finally:
            _local.busy = False
        self._node_values(gid, call_idx, result)
        roots = result.roots or ([result.first] if result.first is not None else [])
        for root in roots:
            # each independent departure at its own node and line
            node = next((n for n in ep.graph.nodes if n.name == root.name), None) \
                or next((n for n in result.gm.graph.nodes if n.name == root.name), None)
            if root.diff.kind == "random" and node is not None \
                    and node.target is operator.getitem:
                node = node.args[0]   # native_dropout, not its (output, mask)'s element
            ops = onnxcheck.onnx_ops(obj).get(node.name if node is not None else "") or []
            output, index = result.reaches.get(root.name) or (result.output, result.output_index)
            self.findings.onnx_divergence(gid, call_idx, node, root.diff, ops,
                                          onnxcheck.opset(obj), runtime, output, index)
        return bool(roots)

    def _node_values(self, gid: int, call_idx: int, result) -> None:
        tier = self.ctx.options.values
        if tier == "none":
            return
        tier = "health" if tier == "health" else "stats"
        import json

        def text(v):
            s = value_summary(v, tier) if v is not None else None
            return None if s is None else json.dumps(s, separators=(",", ":"), default=str)

        for r in result.nodes:
            d = r.diff
            self.ctx.writer.add(NodeValueRow(
                graph_id=gid, call_idx=call_idx, node=r.name, status=r.status,
                kind=d.kind if d is not None else None,
                compiled_from="onnxruntime" if r.onnx is not None else None,
                max_abs=_finite(d.max_abs) if d is not None else None,
                max_rel=_finite(d.max_rel) if d is not None else None,
                eager_vs_fp64=_distance(r.judge, r.eager) if r.judge is not None else None,
                compiled_vs_fp64=_distance(r.judge, r.onnx) if r.judge is not None else None,
                eager_stats=text(r.eager), compiled_stats=text(r.onnx),
                fp64_stats=text(r.judge) if r.judge is not None else None))

    # -- later calls of an exported program's module ---------------------------------------
    def _watch_module(self, gm, entry: tuple) -> None:
        """Times each call of ``gm`` (made by ``ep.module()``) and checks the
        first ``--compare-first`` against the eager model on their inputs."""
        gid, model_ref, counter, tol = entry
        recorder = weakref.ref(self)
        started: list[int] = []   # the module does not keep ``ep`` alive: neither do we

        def before(module, args, kwargs):
            started.append(time.perf_counter_ns())

        def after(module, args, kwargs, out):
            r = recorder()
            if r is None or not r.ctx.active or not started:
                return None
            dt = time.perf_counter_ns() - started.pop()
            ctx = r.ctx
            call_idx = next(counter) + 1   # 0: the export's example inputs
            try:
                ctx.writer.add(CallRow(seq=ctx.next_seq(), graph_id=gid, call_idx=call_idx,
                                       wall_ns=dt, outputs=_outputs_text(out)))
            except Exception as exc:
                ctx.internal_error("exported module recorder", exc)
            if ctx.options.compare and call_idx < ctx.options.compare_first \
                    and not ctx.in_own_work:
                with ctx.own_work():
                    r._check("export", None, None, model_ref, gid, tuple(args), dict(kwargs),
                             tol, call_idx, None, gm=module)
            return None

        self._hooks.append(gm.register_forward_pre_hook(before, with_kwargs=True))
        self._hooks.append(gm.register_forward_hook(after, with_kwargs=True))

    # -- later runs of an ONNX program -----------------------------------------------------
    def _onnx_call(self, orig, entry: tuple, program, args: tuple, kwargs: dict):
        ctx = self.ctx
        gid, model_ref, counter, tol, runtime, (leaves, spec) = entry
        call_idx = next(counter) + 1   # 0: the export's example inputs
        t0 = time.perf_counter_ns()
        with ctx.compiled_code():   # ONNX Runtime's run, not the program's eager ops
            out = orig(program, *args, **kwargs)
        dt = time.perf_counter_ns() - t0
        try:
            ctx.writer.add(CallRow(seq=ctx.next_seq(), graph_id=gid, call_idx=call_idx, wall_ns=dt,
                                   outputs=_outputs_text(out)))
        except Exception as exc:
            ctx.internal_error("ONNX call recorder", exc)
        if ctx.options.compare and call_idx < ctx.options.compare_first:
            given = [v for v in _pytree.tree_leaves((args, kwargs)) if v is not None]
            if sum(v is _TENSOR for v in leaves) == len(given) and \
                    all(isinstance(v, torch.Tensor) for v in given):
                it = iter(given)
                ex_args, ex_kwargs = _pytree.tree_unflatten(
                    [next(it) if v is _TENSOR else v for v in leaves], spec)
                with ctx.own_work():
                    self._check("onnx", program, program.exported_program, model_ref, gid,
                                ex_args, ex_kwargs, tol, call_idx, runtime)
        return out


def _outputs_text(out: Any) -> str:
    """A call's outputs as the calls table holds them (shapes and dtypes;
    no statistics: an exported program's call is not summarised)."""
    return dumps([{"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""),
                   "stats": None} for t in _pytree.tree_leaves(out) if isinstance(t, torch.Tensor)])


def _finite(x: float | None) -> float | None:
    import math
    return x if x is None or math.isfinite(x) else None
