"""Compiled time per source line: inductor's kernels, timed and mapped to user lines.

Inductor's provenance tracking (``config.trace.provenance_tracking_level``)
marks each kernel call in the generated wrapper with
``# [Provenance debug handles] NAME:H`` and emits, after the output code of
each compiled graph, the user stack traces and the Dynamo (pre-grad) nodes of
the FX nodes each kernel computes. torch keeps both in an FX graph cache entry
(provenance is part of the cache key), so a cache hit brings them too.

The times: for the first `SAMPLED_CALLS` calls of a graph, the generated
module's kernel globals (``cpp_fused_*``, ``triton_*``, ``extern_kernels``)
are replaced by timing wrappers; then the originals come back, and later
calls of a forward or inference module cost nothing (its graph's calls are
counted by the recording backend). A backward module, whose calls only its
kernels see, keeps one counting shim on its first kernel: one Python call
per backward, and a kernel reached through a namespace (``extern_kernels.mm``)
is counted through a copy of the namespace, so no attribute lookup runs
Python code. The
wrappers check each kernel against the order the wrapper code calls them in;
a mismatch (a branch in the wrapper) drops the module's times rather than
misattribute them. CPU kernels run synchronously and are timed with the
clock; CUDA ones with events, read after the sampled calls.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
import time
from typing import Any

from graphdbg.runfile.records import EventRow
from graphdbg.runfile.writer import dumps

from ..context import CaptureContext
from ..placement.nodes import user_frames_of_text

SAMPLED_CALLS = 6
_HANDLE = re.compile(r"^[ \t]*# \[Provenance debug handles\] (\S+):(\d+)[ \t]*$", re.M)
_AOT_ID = re.compile(r"# AOT ID: \['\d+_(\w+)'\]")


def provenance_config():
    """inductor's trace config if it has provenance tracking, else None."""
    try:
        import torch._inductor.config as inductor_config
    except Exception:
        return None
    trace = getattr(inductor_config, "trace", None)
    return trace if hasattr(trace, "provenance_tracking_level") else None


class _Timed:
    """A kernel (callable, or a triton kernel with ``.run``) that reports each call."""

    __slots__ = ("_mod", "_name", "_fn")

    def __init__(self, mod: "ModuleKernels", name: str, fn: Any) -> None:
        self._mod, self._name, self._fn = mod, name, fn

    def __call__(self, *args, **kwargs):
        return self._mod.timed(self._name, self._fn, args, kwargs)

    def run(self, *args, **kwargs):
        return self._mod.timed(self._name, self._fn.run, args, kwargs)

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._fn, attr)


class _Namespace:
    """``extern_kernels`` (or ``aten``...) with the kernels called through it
    timed, while the module's calls are sampled."""

    __slots__ = ("_mod", "_prefix", "_obj")

    def __init__(self, mod: "ModuleKernels", prefix: str, obj: Any) -> None:
        self._mod, self._prefix, self._obj = mod, prefix, obj

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self._obj, attr)
        full = f"{self._prefix}.{attr}"
        names = self._mod.names
        if full in names:
            return _Timed(self._mod, full, value)
        if any(n.startswith(full + ".") for n in names):
            return _Namespace(self._mod, full, value)
        return value


class _CountingNamespace:
    """A copy of a kernel namespace (``extern_kernels``) whose one attribute is
    a `_Counting` shim. Its attributes live in the copy's ``__dict__``, so the
    generated code's lookups are plain ones; ``__getattr__`` runs only for a
    name the copy lacks (added to the namespace later), from the original."""

    def __init__(self, obj: Any, attr: str, counting: "_Counting") -> None:
        self.__dict__.update(vars(obj))
        self.__dict__["_graphdbg_namespace"] = obj
        self.__dict__[attr] = counting

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.__dict__["_graphdbg_namespace"], attr)


class _Counting:
    """The first kernel after sampling: counts the graph's calls, nothing else."""

    __slots__ = ("_mod", "_fn")

    def __init__(self, mod: "ModuleKernels", fn: Any) -> None:
        self._mod, self._fn = mod, fn

    def __call__(self, *args, **kwargs):
        if not self._mod.ctx.in_own_work:
            self._mod.counted += 1
        return self._fn(*args, **kwargs)

    def run(self, *args, **kwargs):
        if not self._mod.ctx.in_own_work:
            self._mod.counted += 1
        return self._fn.run(*args, **kwargs)

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._fn, attr)


class ModuleKernels:
    """One generated module (a forward, backward or inference graph of a compile)."""

    def __init__(self, ctx: CaptureContext, cid: str | None, path: str, code: str) -> None:
        self.ctx, self.cid, self.path = ctx, cid, path
        m = _AOT_ID.search(code[:400])
        self.part = m.group(1) if m else None
        self.order = [(name, int(h)) for name, h in _HANDLE.findall(code)]
        self.names = {name for name, _ in self.order}
        self.cuda = "triton" in code or "_cuda(" in code
        self.traces: dict[str, list[str]] = {}
        self.nodes: dict[str, list[str]] = {}
        self.module = None
        self.patched: dict[str, Any] = {}     # global name -> original
        self.samples: list[list[Any]] = [[] for _ in self.order]
        self.pos = 0
        self.calls = 0                        # full calls timed
        self.counted = 0                      # calls of the first kernel after the timed ones
        self.sampling = False
        self.broken: str | None = None
        # the graph being compiled now: the newest with this compile id (ids
        # repeat after torch._dynamo.reset())
        same = [g for g in ctx.graphs.values() if g.compile_id == cid]
        self.graph = max(same, key=lambda g: g.id) if same else None

    # -- instrumentation ------------------------------------------------------------
    def instrument(self, module: Any) -> None:
        self.module = module
        g = module.__dict__
        order = [(n, h) for n, h in self.order if n.split(".")[0] in g and n.split(".")[0] != "torch"]
        if not order:
            return
        self.order = order
        self.names = {n for n, _ in order}
        self.samples = [[] for _ in order]
        for base in sorted({n.split(".")[0] for n in self.names}):
            orig = g[base]
            self.patched[base] = orig
            g[base] = _Timed(self, base, orig) if base in self.names else _Namespace(self, base, orig)
        self.sampling = True

    def timed(self, name: str, fn: Any, args: tuple, kwargs: dict) -> Any:
        if not self.sampling or self.ctx.in_own_work:  # graphdbg's check calls are not the program's
            return fn(*args, **kwargs)
        expected = self.order[self.pos][0]
        if name != expected:
            self.broken = f"kernel {name} called where the wrapper code calls {expected}"
            self.restore(count=False)
            return fn(*args, **kwargs)
        if self.cuda:
            import torch
            if torch.cuda.is_current_stream_capturing():  # a CUDA graph records: no events
                return fn(*args, **kwargs)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            out = fn(*args, **kwargs)
            end.record()
            self.samples[self.pos].append((start, end))
        else:
            t0 = time.perf_counter_ns()
            out = fn(*args, **kwargs)
            self.samples[self.pos].append(time.perf_counter_ns() - t0)
        self.pos += 1
        if self.pos == len(self.order):
            self.pos = 0
            self.calls += 1
            if self.calls >= SAMPLED_CALLS:
                self.restore(count=True)
        return out

    def restore(self, count: bool) -> None:
        """Put the module's kernels back; with ``count``, a backward module's
        first kernel keeps a counting shim so its later calls are counted
        (a forward's are counted by the recording backend: nothing stays)."""
        self.sampling = False
        if self.module is None:
            return
        g = self.module.__dict__
        for base, orig in self.patched.items():
            g[base] = orig
        if count and self.order and self.broken is None and self.part == "backward":
            first = self.order[0][0]
            base, _, attr = first.partition(".")
            orig = self.patched[base]
            if not attr:
                g[base] = _Counting(self, orig)
            elif "." not in attr and hasattr(orig, "__dict__"):
                g[base] = _CountingNamespace(orig, attr, _Counting(self, getattr(orig, attr)))
        self._resolve_events()

    def unpatch(self) -> None:
        if self.module is not None:
            g = self.module.__dict__
            for base, orig in self.patched.items():
                g[base] = orig
        self.sampling = False

    def _resolve_events(self) -> None:
        if not self.cuda:
            return
        for i, got in enumerate(self.samples):
            out = []
            for s in got:
                if isinstance(s, tuple):
                    s[1].synchronize()
                    out.append(int(s[0].elapsed_time(s[1]) * 1e6))
                else:
                    out.append(s)
            self.samples[i] = out

    # -- result ------------------------------------------------------------------------
    def _frames(self, key: str, graph, writer) -> list[int]:
        """This run's user frames of the lines a kernel computes. Inductor's
        provenance may come from its cache, written by another run: another
        checkout's paths, line numbers from before an edit. So the Dynamo nodes
        it names (forward) are looked up in this run's graph, and its stack
        traces (backward) matched to this run's node frames by function and
        code text (the nearest line among equals); what matches nothing is
        left out."""
        node_frames = graph.node_frames if graph is not None else {}
        out: list[int] = []
        for node in self.nodes.get(key, ()):
            fid = node_frames.get(node)
            if fid is not None and fid not in out:
                out.append(fid)
        if out:
            return out
        by_code: dict[tuple, list[tuple[int, int]]] = {}
        for fid in set(node_frames.values()):
            f = writer.frame(fid)
            if f is not None:
                by_code.setdefault((f["function"], (f["code"] or "").strip()), []).append((f["line"], fid))
        for text in self.traces.get(key, []):
            frames = user_frames_of_text(text)
            if not frames:
                continue
            user, code = frames[-1]
            cands = by_code.get((user.function, code.strip()))
            if cands:
                fid = min(cands, key=lambda c: abs(c[0] - user.line))[1]
                if fid not in out:
                    out.append(fid)
        return out

    def record(self, ctx: CaptureContext) -> dict | None:
        self._resolve_events()
        if self.module is None or not self.patched:
            return None
        calls_timed = min(len(s) for s in self.samples) if self.samples else 0
        graph = self.graph
        kernels = []
        for (name, handle), got in zip(self.order, self.samples):
            got = got[:calls_timed] if calls_timed else got
            steady = got[1:] or got
            key = f"{name}:{handle}"
            frames = self._frames(key, graph, ctx.writer)
            # the fastest steady call: load on a busy machine only ever adds
            # time (a median of five still took a 400x outlier here)
            kernels.append({"name": name, "handle": handle,
                            "ns": min(steady) if steady else None,
                            "median_ns": int(statistics.median(steady)) if steady else None,
                            "samples": len(got) - 1 if len(got) > 1 else 0,
                            "first_ns": got[0] if got else None,
                            "frames": frames, "nodes": self.nodes.get(key, [])})
        first = self.order[0][0] if self.order else None
        per_call = sum(1 for n, _ in self.order if n == first) or 1  # extern_kernels.mm twice a call
        return {"part": self.part, "graph_id": graph.id if graph is not None else None,
                "output_code": self.path, "device": "cuda" if self.cuda else "cpu",
                "calls": self.calls + self.counted // per_call, "calls_timed": calls_timed, "broken": self.broken,
                "kernels": kernels}


class KernelTimes:
    """Receives inductor's output code and provenance from the trace handler,
    instruments each generated module, writes the times when the session stops."""

    def __init__(self, ctx: CaptureContext) -> None:
        self.ctx = ctx
        self.modules: list[ModuleKernels] = []
        self._pending: ModuleKernels | None = None
        self._config = None
        self._saved_level = None
        self._instrumented: set[int] = set()

    def install(self) -> None:
        """Turns inductor's provenance tracking on (level 1) for the session."""
        if not self.ctx.options.kernel_times:
            return
        cfg = provenance_config()
        if cfg is None:
            self.ctx.writer.set_meta(kernel_times="inductor here has no provenance tracking")
            return
        self._config, self._saved_level = cfg, cfg.provenance_tracking_level
        if not cfg.provenance_tracking_level:
            cfg.provenance_tracking_level = 1

    def uninstall(self) -> None:
        if self._config is not None:
            self._config.provenance_tracking_level = self._saved_level
            self._config = None
        ctx = self.ctx
        for mod in self.modules:
            mod.unpatch()
            try:
                rec = mod.record(ctx)
            except Exception as exc:
                ctx.internal_error("kernel times", exc)
                continue
            if rec is not None:
                ctx.writer.add(EventRow(
                    seq=ctx.next_seq(), t=ctx.now(), name="graphdbg_kernel_times",
                    compile_id=mod.cid, metadata=dumps({"graphdbg_kernel_times": rec}),
                    payload=None))
        self.modules = []

    # -- from the trace handler -----------------------------------------------------
    def output_code(self, cid: str | None, md: dict, code: str | None) -> None:
        if self._config is None or not code:
            return
        path = (md.get("inductor_output_code") or {}).get("file_path")
        if not path or "[Provenance debug handles]" not in code:
            self._pending = None
            return
        mod = ModuleKernels(self.ctx, cid, path, code)
        self._pending = mod
        self.modules.append(mod)
        self._attach(mod)

    def stack_traces(self, payload: str | None) -> None:
        mod = self._pending
        if mod is None or not payload:
            return
        mod.traces = {k: v for k, v in json.loads(payload).items() if isinstance(v, list)}
        self._attach(mod)

    def node_mappings(self, payload: str | None) -> None:
        mod = self._pending
        if mod is None or not payload:
            return
        m = json.loads(payload)
        post_to_pre = m.get("postToPre") or {}
        for key, posts in (m.get("cppCodeToPost") or {}).items():
            pre: list[str] = []
            for p in posts:
                pre += [n for n in post_to_pre.get(p, []) if n not in pre]
            mod.nodes[key] = pre

    def _attach(self, mod: ModuleKernels) -> None:
        """Instrument the module once torch has loaded it (before the output code
        is logged on a cache hit, after it on a fresh compile)."""
        if mod.module is not None:
            return
        cache = sys.modules.get("torch._inductor.codecache")
        pcc = getattr(cache, "PyCodeCache", None)
        loaded = list(getattr(pcc, "modules", ()) or ())
        loaded += list((getattr(pcc, "modules_no_attr", None) or {}).values())
        for module in reversed(loaded):  # the newest load of that file
            if getattr(module, "__file__", None) == mod.path:
                if id(module) not in self._instrumented:  # one module, one set of wrappers
                    self._instrumented.add(id(module))
                    mod.instrument(module)
                return
