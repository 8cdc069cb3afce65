"""The program's own ONNX Runtime session on a file it exported in this run.

Once the program has exported an ONNX file, with the TorchScript exporter
(hooks/record/tsexport.py) or the default one (the path given to
``torch.onnx.export``, or to ``ONNXProgram.save``: hooks/record/dynfile.py),
`SessionWatch` wraps
``onnxruntime.InferenceSession.__init__`` and ``.run`` (the class's
attributes, put back when the session stops; no session is touched). A
session created on that file (its realpath, unchanged since the export; or
the same model bytes) has its first ``--compare-first`` runs checked: the
exported model's eager forward (no_grad, the RNG saved and restored, the
training flags the export traced with) on the same inputs, mapped by the
ONNX graph's input names, against the outputs the session returned to the
program, by graphdbg's judge (hooks/check/numerics.py). The program gets
the session's outputs as they were: the check runs after, beside them.

A mismatch on a dynamo export's file is localised as an ONNX program's call
is (node by node, hooks/check/onnxcheck.py): found at the user's line of the
first FX node that departs. Otherwise a mismatch where a line the trace froze
(a tensor converted to a Python value) converts otherwise on these inputs is
found at that line, naming the branch; any other mismatch at the program's
``run`` line (hooks/findings/frozen.py).
"""

from __future__ import annotations

import copy
import hashlib
import os
import time
import weakref
from typing import Any

import torch
from torch.utils import _pytree

from graphdbg.runfile.records import CallRow
from graphdbg.runfile.writer import dumps

from ..check.numerics import compare_values, is_finding
from ..check import tsonnx
from ..check.subgraphs import preserved_rng
from ..findings import frozen
from ..placement.stack import user_stack
from . import tsexport
from .tsexport import _TENSOR, Conversions, ExportedFile

_JUDGE_MAX_PARAMS = 20_000_000   # the float64 judge: a copy of the model in float64, when small


class SessionWatch:
    def __init__(self, ctx, findings) -> None:
        self.ctx = ctx
        self.findings = findings
        self.files: list[ExportedFile] = []
        self._orig: dict[str, Any] = {}
        self._sessions: dict[int, tuple] = {}   # id(session) -> (ExportedFile, calls so far)

    def add(self, exported: ExportedFile) -> None:
        self.files.append(exported)
        self._wrap()

    # -- install -----------------------------------------------------------------------
    def install(self) -> None:
        """Ready for the session's exports: ONNX Runtime is wrapped at the
        first file exported (a program that exports none never imports it)."""
        tsexport.watch_sessions(self.ctx, self)

    def _wrap(self) -> None:
        if self._orig:
            return
        try:
            import onnxruntime
        except Exception:
            return
        cls = onnxruntime.InferenceSession
        watch = self
        init, run = cls.__init__, cls.run
        self._orig = {"cls": cls, "__init__": cls.__dict__.get("__init__"),
                      "run": cls.__dict__.get("run")}

        def __init__(session, path_or_bytes, *args, **kwargs):
            init(session, path_or_bytes, *args, **kwargs)
            if watch.ctx.active:
                try:
                    watch._created(session, path_or_bytes)
                except Exception as exc:
                    watch.ctx.internal_error("InferenceSession recorder", exc)

        def run_(session, *args, **kwargs):
            t0 = time.perf_counter_ns()
            out = run(session, *args, **kwargs)
            dt = time.perf_counter_ns() - t0
            entry = watch._sessions.get(id(session)) if watch.ctx.active else None
            if entry is not None and not watch.ctx.in_own_work:
                try:
                    watch._ran(entry, args, kwargs, out, dt)
                except Exception as exc:
                    watch.ctx.internal_error("InferenceSession check", exc)
            return out

        run_.__name__ = "run"
        for name, fn, orig in (("__init__", __init__, init), ("run", run_, run)):
            fn.__doc__, fn.__qualname__ = orig.__doc__, orig.__qualname__
            setattr(cls, name, fn)

    def uninstall(self) -> None:
        tsexport.unwatch_sessions(self.ctx, self)
        if self._orig:
            cls = self._orig["cls"]
            for name in ("__init__", "run"):
                if self._orig[name] is None:
                    delattr(cls, name)
                else:
                    setattr(cls, name, self._orig[name])
        self._orig = {}
        self._sessions = {}
        self.files = []

    # -- a session and its runs ----------------------------------------------------------
    def _created(self, session, source) -> None:
        exported = None
        if isinstance(source, (str, os.PathLike)):
            path = os.path.realpath(os.fspath(source))
            st = os.stat(path)
            exported = next((f for f in reversed(self.files) if f.path == path
                             and f.stat == (st.st_size, st.st_mtime_ns)), None)
        elif isinstance(source, (bytes, bytearray, memoryview)):
            digest = hashlib.sha256(source).hexdigest()
            exported = next((f for f in reversed(self.files) if f.digest == digest
                             or _same_bytes(f, digest, len(memoryview(source).cast("B")))),
                            None)
        if exported is None:
            return
        key = id(session)
        self._sessions[key] = (exported, [0], user_stack())
        weakref.finalize(session, self._sessions.pop, key, None)

    def _ran(self, entry: tuple, args: tuple, kwargs: dict, out, ns: int) -> None:
        """A run of a session on an exported file: a call of its graph (1 the
        first), checked while there are ``--compare-first``."""
        exported, count, _ = entry
        count[0] += 1
        # a dynamo export's runs share its ONNX program's numbering (0: the example inputs)
        call_idx = next(exported.counter) + 1 if exported.counter is not None else count[0]
        ctx = self.ctx
        outputs = [{"shape": list(getattr(v, "shape", ()) or ()),
                    "dtype": str(getattr(v, "dtype", "?")), "stats": None}
                   for v in (out if isinstance(out, (list, tuple)) else ())]
        ctx.writer.add(CallRow(seq=ctx.next_seq(), graph_id=exported.graph_id, call_idx=call_idx,
                               wall_ns=ns, outputs=dumps(outputs)))
        if not ctx.options.compare or count[0] > ctx.options.compare_first:
            return
        model = exported.model() if exported.model is not None else None
        if model is None:
            return
        output_names = args[0] if args else kwargs.get("output_names")
        feed = args[1] if len(args) > 1 else kwargs.get("input_feed")
        if not isinstance(feed, dict) or any(n not in feed for n in exported.inputs):
            return
        if sum(v is _TENSOR for v in exported.leaves) != len(exported.inputs):
            return   # inputs the export dropped or flattened otherwise: not mapped
        names = list(output_names) if output_names else list(exported.outputs)
        run_site = user_stack()
        with ctx.own_work():   # the inputs' copies are graphdbg's ops, not the program's
            given = iter([_tensor(feed[n]) for n in exported.inputs])
            ex_args, ex_kwargs = _pytree.tree_unflatten(
                [next(given) if v is _TENSOR else v for v in exported.leaves], exported.spec)
            self._check(exported, model, ex_args, ex_kwargs, names, out, call_idx, run_site, feed)

    def _check(self, exported: ExportedFile, model, args: tuple, kwargs: dict, names: list[str],
               out, call_idx: int, run_site, feed: dict) -> None:
        with _flags(model, exported.training), preserved_rng(), torch.no_grad(), \
                Conversions() as conv:
            eager = model(*args, **kwargs)
        leaves = [t for t in _pytree.tree_leaves(eager) if isinstance(t, torch.Tensor)]
        if len(leaves) != len(exported.outputs) or not isinstance(out, (list, tuple)):
            return
        worst = None
        for i, (name, got) in enumerate(zip(names, out)):
            if name not in exported.outputs:
                continue
            ort = _tensor(got)
            if ort is None:
                continue
            mine = leaves[exported.outputs.index(name)]
            d = compare_values(ort, mine, None, exported.tol)
            if is_finding(d) and d.kind == "miscompile":
                d = compare_values(ort, mine, _judge(model, exported, args, kwargs,
                                                     exported.outputs.index(name)), exported.tol)
            if is_finding(d) and (worst is None or d.max_abs > worst[0].max_abs):
                worst = (d, exported.outputs.index(name), name)
        if worst is None:
            return
        now = conv.values_at()
        branch = None
        for c in conv.seen:   # the first frozen line converted otherwise
            at = (c.stack[-1].file, c.stack[-1].line) if c.stack else None
            if at not in exported.frozen:
                continue
            kind, traced = exported.frozen[at]
            values = now.get(at, [])
            k = next((j for j, (a, b) in enumerate(zip(traced, values)) if a != b), None)
            if k is not None:
                branch = {"stack": c.stack, "kind": kind, "traced": traced[k], "now": values[k]}
                break
        d, index, name = worst
        if branch is None and exported.localise is not None and \
                exported.localise(args, kwargs, call_idx):
            return   # found at the first FX node that departs, at its line
        if branch is None and exported.node_stacks is not None:
            found = self._by_line(exported, model, args, kwargs, feed)
            if found is not None:
                frozen.session_line(self.findings, exported.graph_id, call_idx, found, d, index,
                                    name, exported.runtime)
                return
        frozen.session_divergence(self.findings, exported.graph_id, call_idx, d, index, name,
                                  exported.runtime, run_site, branch, [])

    def _by_line(self, exported: ExportedFile, model, args: tuple, kwargs: dict, feed: dict):
        """The first line of the model where ONNX Runtime computes otherwise
        (a TorchScript export's file: hooks/check/tsonnx.py), or None."""
        if exported.path is not None and exported.stat is not None:
            try:
                st = os.stat(exported.path)
            except OSError:
                return None
            if (st.st_size, st.st_mtime_ns) != exported.stat:
                return None   # written again since: not the file the lines are of

        def forward(m=model, a=args, k=kwargs):
            with _flags(m, exported.training), preserved_rng(), torch.no_grad():
                m(*a, **k)

        try:
            proto = tsonnx.load(exported.path, exported.data)
            if proto is None:
                return None
            return tsonnx.check(proto, exported.node_stacks, feed, forward,
                                _float64(model, exported, args, kwargs), exported.tol)
        except Exception as exc:   # the finding stays at the run line
            self.ctx.internal_error("ONNX line check", exc)
            return None


def _same_bytes(f: ExportedFile, digest: str, size: int) -> bool:
    """The file ``f`` was written to holds these bytes (read, when the size matches)."""
    if f.path is None or f.stat is None or f.stat[0] != size:
        return False
    try:
        with open(f.path, "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest() == digest
    except OSError:
        return False


class _flags:
    """The model's training flags as the export traced it, for the check's
    eager forward only (put back after)."""

    def __init__(self, model, flags: list[bool] | None) -> None:
        self.model, self.flags, self.saved = model, flags, None

    def __enter__(self) -> None:
        modules = list(self.model.modules()) if isinstance(self.model, torch.nn.Module) else []
        if self.flags is None or len(self.flags) != len(modules) or \
                all(m.training == f for m, f in zip(modules, self.flags)):
            return
        self.saved = [(m, m.training) for m in modules]
        for m, f in zip(modules, self.flags):
            m.training = f

    def __exit__(self, *exc) -> None:
        for m, f in self.saved or ():
            m.training = f


def _tensor(v) -> torch.Tensor | None:
    """A copy of an ONNX Runtime value (numpy array, OrtValue) as a tensor."""
    import numpy as np
    if hasattr(v, "numpy") and not isinstance(v, np.ndarray):
        v = v.numpy()
    if not isinstance(v, np.ndarray):
        return None
    return torch.from_numpy(np.array(v, copy=True))


def _float64(model, exported: ExportedFile, args: tuple, kwargs: dict):
    """Makes the model's forward in float64 on the inputs (a float64 copy of
    it, made when called) as a call; None when the model is large."""
    try:
        if sum(p.numel() for p in model.parameters()) > _JUDGE_MAX_PARAMS:
            return None
    except Exception:
        return None

    def make():
        twin = copy.deepcopy(model).double()
        a, k = _pytree.tree_map(lambda t: t.double() if isinstance(t, torch.Tensor)
                                and t.is_floating_point() else t, (args, kwargs))

        def forward():
            with _flags(twin, exported.training), preserved_rng(), torch.no_grad():
                twin(*a, **k)
        return forward
    return make


def _judge(model, exported: ExportedFile, args: tuple, kwargs: dict, index: int):
    """The output ``index`` of a float64 copy of the model on the inputs
    (None when the model is large or it cannot run in float64)."""
    try:
        if sum(p.numel() for p in model.parameters()) > _JUDGE_MAX_PARAMS:
            return None
        twin = copy.deepcopy(model).double()
        a, k = _pytree.tree_map(lambda t: t.double() if isinstance(t, torch.Tensor)
                                and t.is_floating_point() else t, (args, kwargs))
        with _flags(twin, exported.training), preserved_rng(), torch.no_grad():
            out = twin(*a, **k)
        leaves = [t for t in _pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
        return leaves[index]
    except Exception:
        return None
