"""Compiled-side recorder: sees every Dynamo graph on its way to the backend.

Every backend that Dynamo uses (a string name, a callable, inductor with
``mode=``/``options=``, a stance's backend, ``torch._dynamo.optimize``) is
wrapped by ``torch._dynamo.eval_frame.get_compiler_fn`` in a
``WrapBackendDebug``. Hooking its ``__call__`` records each graph without
changing any object Dynamo compares or guards on, so the program compiles the
same graphs as without graphdbg.

The compiled callable is wrapped to time its calls, summarise its outputs and
keep the eager recorder off while it runs. A call gets a row of its own
(``calls``) when it is sampled (`summarized_call`), checked, or runs in a step
whose eager ops are recorded; every other call (the steady state) only adds
to its graph's totals (`CallTotals`, the event ``graphdbg_call_totals``), so
graphdbg's cost per call stays a counter and a clock.

A module (or function) compiled whole whose code lives in torch --
``torch.compile(nn.Sequential(...))`` -- reaches the backend as torch's own
frame (``inner`` in torch/_dynamo/external_utils.py, ``_call_impl`` for
``module.compile()``). Such a graph is named after the module's class, at the
line of the user's ``torch.compile(...)`` call when the session saw it made
(``Sequential (torch.compile)``), else at the user's call that compiled it
(``Sequential (called)``); see `whole_compile_name`.
"""

from __future__ import annotations

import copy
import functools
import re
import time
import weakref
from typing import Any, Callable

import torch
from torch._dynamo.repro.after_dynamo import WrapBackendDebug

from graphdbg.runfile.records import CallRow, EventRow, NodeRow
from graphdbg.core.sourcemap import Frame
from graphdbg.runfile.writer import dumps

from . import ddp, tensorstats
from .. import compat
from ..check import lint, reprorecord
from ..context import CaptureContext
from ..check.divergence import DivergenceChecker
from ..findings.writer import Findings
from ..placement import creation
from ..placement.internal import def_line, in_library, is_internal, unwrap, wrapped_function
from ..placement.modules import node_target
from ..placement.nodes import node_source
from ..placement.stack import called_from, generated_method
from .ranks import graph_collectives
from .tensors import TensorKeeper

_perf_ns = time.perf_counter_ns
_innermost = torch._dynamo.eval_frame.innermost_fn
_fake_mode_set = torch._C._get_dispatch_mode
_FAKE = torch._C._TorchDispatchModeKey.FAKE
# the dispatch-mode stack through torch's C functions: torch.utils._python_dispatch's
# _pop_mode/_push_mode wrap these in Python checks a steady call need not pay for
_stack_len = torch._C._len_torch_dispatch_stack
_stack_at = torch._C._get_dispatch_stack_at
_stack_pop = torch._C._pop_torch_dispatch_stack
_stack_push = torch._C._push_on_torch_dispatch_stack


def _describe_value(value: Any) -> tuple[list, list]:
    shapes, dtypes = [], []
    for v in tensorstats.flat_tensors(value):
        s, d = tensorstats.describe(v)
        shapes.append(s)
        dtypes.append(d)
    if not shapes and isinstance(value, torch.SymInt):
        return [str(value)], ["SymInt"]
    return shapes, dtypes


def _arg_text(node: torch.fx.Node) -> str:
    text = ", ".join([*(repr(a) if not isinstance(a, torch.fx.Node) else a.name for a in node.args),
                      *(f"{k}={v.name if isinstance(v, torch.fx.Node) else repr(v)}"
                        for k, v in node.kwargs.items())])
    return text if len(text) <= 300 else text[:297] + "..."


def _fingerprint(gm) -> tuple:
    """Changes when a pass adds, removes or rewires nodes."""
    return tuple((id(n), n.target, tuple(id(a) for a in n.all_input_nodes)) for n in gm.graph.nodes)


_OBJECT_REPR = re.compile(r"^<(?:[\w.]+\.)?(\w+) object at 0x[0-9a-fA-F]+>$")


def backend_options(wrapper) -> dict | None:
    """torch.compile's ``mode=`` and ``options=`` of an inductor backend, as
    the options inductor runs with (a mode becomes its options), for a repro
    to compile with: plain values only. None for other backends (a string
    backend takes none)."""
    cfg = getattr(wrapper, "config", None)
    if getattr(wrapper, "compiler_name", None) != "inductor" or not isinstance(cfg, dict):
        return None
    return {k: v for k, v in cfg.items() if isinstance(v, (bool, int, float, str))} or None


def compile_dynamic() -> bool | None:
    """torch.compile's ``dynamic=`` of the frame being compiled (it patches
    Dynamo's config while the backend runs): True, False, or None (automatic)."""
    c = torch._dynamo.config
    if not c.assume_static_by_default:
        return True
    if not c.automatic_dynamic_shapes:
        return False
    return None


def _backend_name(wrapper) -> str:
    """The backend's name: torch's (``inductor``), a function's, or for a
    callable object its class (torch names it by its repr, with an address)."""
    name = str(getattr(wrapper, "_compiler_name", None) or getattr(wrapper, "__name__", None))
    m = _OBJECT_REPR.match(name)
    return m.group(1) if m else name


_OPTIMIZED_CALL = None


def _current_tx():
    """Dynamo's translator of the frame it is compiling now, if any."""
    from torch._dynamo.symbolic_convert import tls
    return getattr(tls, "current_tx", None)


def wrapped_entry(tx=None) -> tuple[Any, tuple[str, int, str]] | None:
    """When the frame Dynamo compiles is a decorator's wrapper (transformers'
    ``can_return_tuple`` around a model's forward, a user's ``@functools.wraps``
    decorator): the function under the decorators, and the line of its ``def``."""
    tx = tx or _current_tx()
    code = getattr(tx, "f_code", None)
    if code is None or is_internal(code.co_filename):
        return None
    wrapped = wrapped_function(code, getattr(tx, "closure", None))
    if wrapped is None:
        return None
    fn = unwrap(wrapped)
    site = def_line(fn)
    return (fn, site) if site is not None else None


def whole_compile_name(tx=None) -> tuple[str, tuple[str, int, str], Any] | None:
    """(name, user line, module or function) of the graph Dynamo is compiling
    now, when the frame it traced is torch's own (a module or function
    compiled whole) or a decorator's wrapper: the class (or function) name,
    and the user's ``torch.compile(...)`` line when the session saw it made
    (``Sequential (torch.compile)``), else the user's call that compiled it
    (``Sequential (called)``). A module whose forward runs in a decorator's
    wrapper (transformers' ``can_return_tuple``, a user's own) is named so
    too (``GPT2LMHeadModel (torch.compile)``, not ``wrapper``); a decorated
    function after the function it wraps, at its ``def``. A library's frame
    that is neither is left to Dynamo's name, and so are the user's own frames."""
    global _OPTIMIZED_CALL
    tx = tx or _current_tx()
    code = getattr(tx, "f_code", None)
    if code is None:
        return None
    f_locals = getattr(tx, "f_locals", None) or {}
    if code.co_filename == "<string>":  # exec'd (not a notebook cell's "<ipython-input-…>")
        owner = f_locals.get("self")
        site = generated_method(owner, code)
        return (site.function, tuple(site), owner) if site is not None else None
    internal = is_internal(code.co_filename)
    library = not internal and in_library(code.co_filename)
    entry = None if internal else wrapped_entry(tx)
    if entry is not None and (not isinstance(f_locals.get("self"), torch.nn.Module)
                              or getattr(entry[0], "__name__", None) != "forward"):
        fn, site = entry   # a decorated function (or method): after what it wraps
        return getattr(fn, "__qualname__", None) or site[2], site, fn
    if not internal and not library and entry is None:
        return None
    # torch's `inner(*args)` compiles `fn`; a forward's decorator wraps `self`'s
    root = f_locals.get("self") if not internal else f_locals.get("fn", f_locals.get("self"))
    if root is None:
        return None  # torch's own code (compiled autograd...): nothing of the user's to name
    if not internal and not isinstance(root, torch.nn.Module):
        return None
    if isinstance(root, torch.nn.Module):
        name = type(root).__name__
    else:
        name = getattr(root, "__qualname__", None) or getattr(root, "__name__", None) \
            or type(root).__name__
    if _OPTIMIZED_CALL is None:
        from torch._dynamo.eval_frame import OptimizedModule
        _OPTIMIZED_CALL = OptimizedModule.__call__.__code__
    def compiled_at(f):
        opt = f.f_locals.get("self")
        return creation.module_site(opt) if getattr(opt, "_orig_mod", None) is root else None

    site, called = called_from(code, library, _OPTIMIZED_CALL, compiled_at)
    if site is not None:
        return f"{name} (torch.compile)", site, root
    if called is None:
        return None  # (a library function the user's code compiled: its own name)
    return f"{name} (called)", tuple(called), root


def _real_forward(fn: Callable) -> Callable:
    """What Dynamo itself keeps of a backend's result (``OutputGraph``'s
    compile, 2.13-2.15): a ``_LazyGraphModule``'s ``_lazy_forward`` (a backend
    that returns ``gm.forward``) is recompiled at once and replaced by the real
    ``forward``, so the lazy method is freed. Our wrapper stands in front of
    it, so Dynamo no longer sees it: do the same here, or it would live as
    long as the compiled code (PyTorch's test_drop_cache_on_skip)."""
    from torch.fx._lazy_graph_module import _LazyGraphModule
    lazy = getattr(fn, "__self__", None)
    if isinstance(lazy, _LazyGraphModule) and getattr(fn, "__name__", None) == "_lazy_forward":
        _LazyGraphModule.force_recompile(lazy)
        return lazy.forward
    return fn


STATS_FIRST_CALLS = 8     # every compiled call's outputs summarised up to here,
STATS_EVERY = 64          # then every 64th: statistics cost more than a small graph's call


def summarized_call(call_idx: int) -> bool:
    """Whether a compiled call's output statistics are recorded (its time and
    output shapes always are)."""
    return call_idx < STATS_FIRST_CALLS or call_idx % STATS_EVERY == 0


class CallTotals:
    """A graph's calls that have no row of their own: how many, and their
    time (total, fastest, slowest). Written as the event
    ``graphdbg_call_totals`` (the latest per graph counts); readers add them
    to the rows' figures."""

    __slots__ = ("graph_id", "n", "calls", "total_ns", "min_ns", "max_ns", "written")

    def __init__(self, graph_id: int) -> None:
        self.graph_id = graph_id
        self.n = 0                # calls so far (the next call's index)
        self.calls = 0            # ... of them without a row
        self.total_ns = 0
        self.min_ns = 0
        self.max_ns = 0
        self.written = 0          # `calls` when last written

    def event(self, ctx: CaptureContext) -> EventRow:
        self.written = self.calls
        return EventRow(seq=ctx.next_seq(), t=ctx.now(), name="graphdbg_call_totals",
                        compile_id=None, metadata=dumps({"graphdbg_call_totals": {
                            "graph_id": self.graph_id, "calls": self.calls,
                            "total_ns": self.total_ns, "min_ns": self.min_ns,
                            "max_ns": self.max_ns}}), payload=None)


def _eager_recording(ctx: CaptureContext) -> bool:
    """Whether the eager recorder records now (on the dispatch-mode stack, not
    paused): the calls of such a step get rows, which `graphdbg diff` pairs
    with the step's eager ops."""
    mode = ctx.eager_mode
    if mode is None or ctx.eager_paused:
        return False
    n = _stack_len()
    return any(_stack_at(i) is mode for i in range(n - 1, -1, -1))


def _emit_call(p: tuple, stats: list) -> None:
    writer, seq, graph_id, call_idx, wall_ns, described = p
    outputs = [{"shape": shape, "dtype": dtype, "stats": s}
               for (shape, dtype), s in zip(described, stats)]
    writer.add(CallRow(seq=seq, graph_id=graph_id, call_idx=call_idx, wall_ns=wall_ns,
                       outputs=dumps(outputs)))


class BackendRecorder:
    def __init__(self, ctx: CaptureContext, findings: Findings, keeper: TensorKeeper) -> None:
        self.ctx = ctx
        self.findings = findings
        self.keeper = keeper
        self.checkers: dict[int, Any] = {}   # graph id -> DivergenceChecker
        self.totals: dict[int, CallTotals] = {}
        self._orig: Callable | None = None

    def install(self) -> None:
        orig = WrapBackendDebug.__call__
        self._orig = orig
        recorder = self

        @functools.wraps(orig)
        def __call__(wrapper, gm, example_inputs, **kwargs):
            return recorder.compile(orig, wrapper, gm, example_inputs, kwargs)

        __call__._graphdbg_hook = True
        WrapBackendDebug.__call__ = __call__

    def finish_checks(self) -> None:
        """Gradient checks still pending at the end (graphs not called again),
        on the checked calls' own inputs."""
        ctx = self.ctx
        for checker in self.checkers.values():
            checker.flush_node_times()   # graphs checked fewer times than --compare-first
            if checker.pending_grads is not None:
                with ctx.own_work():
                    try:
                        checker.pending_gradients()
                    except Exception as exc:
                        ctx.internal_error("gradient check", exc)

    def write_totals(self) -> None:
        """The steady calls counted since they were last written."""
        for totals in self.totals.values():
            if totals.calls != totals.written:
                self.ctx.writer.add(totals.event(self.ctx))

    def uninstall(self) -> None:
        try:
            self.write_totals()
        except Exception as exc:
            self.ctx.internal_error("call totals", exc)
        self.totals = {}
        self.checkers = {}
        if self._orig is not None:
            WrapBackendDebug.__call__ = self._orig
            self._orig = None

    # -- compile time ---------------------------------------------------------
    def compile(self, orig, wrapper, gm, example_inputs, kwargs):
        ctx = self.ctx
        if not ctx.active:
            return orig(wrapper, gm, example_inputs, **kwargs)
        graph = ctx.new_graph()
        graph_id = graph.id
        try:
            self._record_graph(graph, wrapper, gm, example_inputs)
        except Exception as exc:
            ctx.internal_error("graph recorder", exc)
        checker = None
        unsure = False
        try:
            collectives = graph_collectives(gm)
        except Exception as exc:   # not known: not re-run either (it may issue collectives)
            ctx.internal_error("graph recorder", exc)
            collectives, unsure = [], True
        if collectives:   # in order: the ranks' views compare them
            ctx.writer.add(EventRow(
                seq=ctx.next_seq(), t=ctx.now(), name="graphdbg_collectives",
                compile_id=graph.compile_id,
                metadata=dumps({"graphdbg_collectives": {
                    "graph_id": graph_id, "ops": [op for _, op in collectives],
                    "nodes": [name for name, _ in collectives]}}),
                payload=None))
            if ctx.options.compare:   # never re-run: the other ranks would wait for it
                self.findings.collectives_not_checked(graph_id, collectives)
        if ctx.options.compare and not collectives and not unsure:
            try:
                # the reference must be the graph as Dynamo made it: backends may
                # rewrite the graph they are given
                untouched = copy.deepcopy(gm)

                def compile_user(g, inputs, _orig=orig, _w=wrapper, _kw=kwargs):
                    return _orig(_w, g, inputs, **_kw)
                compile_user.backend_options = backend_options(wrapper)   # for a repro
                compile_user.dynamic = compile_dynamic()

                checker = self.checkers[graph_id] = DivergenceChecker(
                    ctx, self.findings, graph_id, untouched, compile_user, graph.backend or "")
            except Exception as exc:
                ctx.internal_error("graph checker", exc)
        self._lint(graph_id, gm, example_inputs, "dynamo graph")
        fingerprint = _fingerprint(gm)
        ctx.progress.update(
            f"graphdbg: compiling graph {graph_id} ({len(gm.graph.nodes)} nodes) with "
            f"{_backend_name(wrapper)}")
        t0 = time.perf_counter()
        try:
            compiled = orig(wrapper, gm, example_inputs, **kwargs)
        except BaseException as exc:
            graph.backend_time_s = time.perf_counter() - t0
            # Dynamo's signal to trace the frame again: torch's, not a failure
            restart = compat.is_restart(exc)
            ctx.writer.put_graph(graph_id, status="restarted" if restart else "compile_error",
                                 backend_time_s=graph.backend_time_s,
                                 error=f"{type(exc).__name__}: {exc}"[:20000])
            if isinstance(exc, Exception) and not restart:
                try:
                    # a pass inside the backend may have broken the graph it was given
                    check = None
                    if _fingerprint(gm) != fingerprint:
                        check = self._lint(graph_id, gm, example_inputs, "after backend passes")
                    self.findings.backend_failure(graph_id, wrapper, exc, check, gm)
                except Exception as inner:
                    ctx.internal_error("compile-error mapper", inner)
                try:  # what `graphdbg repro` needs: the graph as the backend had it
                    reprorecord.failure(ctx.writer, graph_id, gm, exc, graph.backend or "",
                                        len(gm.graph.nodes), backend_options(wrapper),
                                        list(example_inputs))
                except Exception as inner:
                    ctx.internal_error("repro recorder", inner)
            raise
        graph.backend_time_s = time.perf_counter() - t0
        ctx.writer.put_graph(graph_id, status="compiled", backend_time_s=graph.backend_time_s)
        if _fingerprint(gm) != fingerprint and any(creation.created_at(n) for n in gm.graph.nodes):
            # the user's own pass rewrote the graph and the backend took it
            self._lint(graph_id, gm, example_inputs, "after backend passes")
        return self._wrap_compiled(compiled, graph_id, checker, bool(collectives))

    def _lint(self, graph_id: int, gm, example_inputs, stage: str):
        """Malformed-graph check (fake tensors only), recorded as findings."""
        ctx = self.ctx
        if not ctx.options.check_graphs:
            return None
        with ctx.own_work():  # its fake ops and compiles are not the program's
            try:
                result = lint.lint_graph(
                    gm, example_inputs, dangling="none" if stage == "dynamo graph" else "created")
                self.findings.malformed_graph(graph_id, result, stage)
                return result
            except Exception as exc:
                ctx.internal_error("graph check", exc)
                return None

    def _record_graph(self, graph, wrapper, gm: torch.fx.GraphModule,
                      example_inputs: list) -> None:
        w = self.ctx.writer
        graph_id = graph.id
        cid = torch._guards.CompileContext.current_compile_id()
        graph.compile_id = str(cid) if cid is not None else None
        graph.backend = _backend_name(wrapper)
        tx = _current_tx()
        named = whole_compile_name(tx)
        if named is not None and isinstance(named[2], torch.nn.Module):
            creation.compiled_whole(named[2], named[1])  # before its nodes are placed
        # graph inputs that only a decorator's wrapper touched: at the wrapped function's def
        entry = wrapped_entry(tx)
        entry = Frame(*entry[1]) if entry is not None else None
        n_ops = 0
        for idx, node in enumerate(gm.graph.nodes):
            if node.op in ("call_function", "call_method", "call_module"):
                n_ops += 1
            value = node.meta.get("example_value", node.meta.get("val"))
            shapes, dtypes = _describe_value(value)
            user_id, stack, mpath, mcls = node_source(w, node, entry)
            if user_id is not None:
                graph.node_frames[node.name] = user_id
            w.add(NodeRow(graph_id=graph_id, idx=idx, name=node.name, op=node.op,
                          target=node_target(node, gm), shapes=dumps(shapes),
                          dtypes=dumps(dtypes), user_frame=user_id, stack=stack,
                          module_path=mpath, module_class=mcls, args=_arg_text(node)))
        try:
            # not gm.code: on a lazy GraphModule (Dynamo's) that installs the real
            # forward before the backend sees it, which changes what Dynamo keeps
            code = gm.graph.python_code(root_module="self").src
        except Exception:
            code = None
        bucket = ddp.current_bucket()
        if bucket is not None:   # one of DDPOptimizer's pieces of one compiled function
            w.add(EventRow(seq=self.ctx.next_seq(), t=self.ctx.now(), name="graphdbg_ddp_bucket",
                           compile_id=graph.compile_id,
                           metadata=dumps({"graphdbg_ddp_bucket": {"graph_id": graph_id, **bucket}}),
                           payload=None))
        w.put_graph(graph_id, compile_id=graph.compile_id, backend=graph.backend,
                    n_nodes=len(gm.graph.nodes), n_ops=n_ops, n_inputs=len(example_inputs),
                    status="compiling", graph_code=code, created_seq=self.ctx.next_seq())
        if named is not None:
            name, site, _ = named
            graph.code_name, graph.code_file, graph.code_line = name, site[0], site[1]
            w.put_graph(graph_id, code_name=name, code_file=site[0], code_line=site[1],
                        user_frame=w.frame_id(*site))

    # -- run time ---------------------------------------------------------------
    def _wrap_compiled(self, fn: Callable, graph_id: int, checker=None,
                       collective: bool = False) -> Callable:
        # Dynamo puts what the backend returned inside `disable`, which first
        # unwraps it to the innermost function: a result that is itself a
        # disabled function (inductor's) runs in one disable wrapper, not two.
        # Ours stands in between, so it calls what Dynamo would have: the
        # second wrapper cost 1-2 µs a call.
        boxed = getattr(fn, "_boxed_call", None)
        if getattr(fn, "_torchdynamo_disable", False):
            fn = _innermost(fn)
        fn = _real_forward(fn)
        totals = self.totals[graph_id] = CallTotals(graph_id)
        # Weakly: Dynamo may keep the wrapper (its __compiled_fn globals stay in
        # the program's module after a reset) long after the session ended; it
        # must not keep the session's recorder, checkers and writer alive too.
        recorder = weakref.ref(self)
        if checker is not None:
            self.checkers[graph_id] = checker

        # Pass-through wrapper: whatever calling convention the compiled
        # callable has (plain or boxed), its caller keeps using it.
        def compiled_graph(*args, **kwargs):
            r = recorder()
            if r is None or _fake_mode_set(_FAKE) is not None:
                # not a call of the program's: DDPOptimizer runs each bucket's
                # compiled graph on fake tensors while it compiles the next
                return fn(*args, **kwargs)
            call_idx = totals.n
            totals.n = call_idx + 1
            checker = r.checkers.get(graph_id)
            ctx = r.ctx
            if (call_idx >= STATS_FIRST_CALLS and call_idx % STATS_EVERY and not collective
                    and ctx.active and (checker is None or (
                        checker.pending_grads is None and not checker.wants(call_idx)))):
                mode = ctx.eager_mode
                if mode is None:
                    return r._steady(fn, totals, call_idx, args, kwargs, checker, None)
                if ctx.eager_paused:   # muted: off the stack for the call if on top
                    return r._steady(fn, totals, call_idx, args, kwargs, checker)
                n = _stack_len()
                if not n:
                    return r._steady(fn, totals, call_idx, args, kwargs, checker, None)
                if _stack_at(n - 1) is mode:
                    # on top and recording: this call gets a row (`graphdbg diff`
                    # pairs it with the step's eager ops)
                    return r._run(fn, graph_id, call_idx, args, kwargs, checker, collective)
                if not _eager_recording(ctx):
                    return r._steady(fn, totals, call_idx, args, kwargs, checker, None)
            return r._run(fn, graph_id, call_idx, args, kwargs, checker, collective)

        if boxed is not None:
            compiled_graph._boxed_call = boxed
        compiled_graph._graphdbg_graph_id = graph_id
        compiled_graph._graphdbg_inner = fn
        return compiled_graph

    def _steady(self, fn: Callable, totals: CallTotals, call_idx: int, args: tuple,
                kwargs: dict, checker=None, top=False):
        """A call with no row: the eager recorder off the stack while it runs
        (when it is on it: a muted recorder would still be called per op), its
        time added to its graph's totals. Nothing else. ``top=None``: the
        caller saw the recorder is not on top of the stack (nothing to pop)."""
        ctx = self.ctx
        graph_id = totals.graph_id
        ctx.eager_paused += 1
        mode = ctx.eager_mode
        popped = False
        if mode is not None and top is not None:
            n = _stack_len()
            if n and _stack_at(n - 1) is mode:
                _stack_pop(None)
                popped = True
        ctx.in_call = (graph_id, call_idx)
        try:
            t0 = _perf_ns()
            out = fn(*args, **kwargs)
            dt = _perf_ns() - t0
        except Exception as exc:
            _raised(ctx, graph_id, call_idx, checker, args, exc)
            raise
        finally:
            if popped:
                _stack_push(mode)
            ctx.eager_paused -= 1
        ctx.in_call = None
        ctx.last_call = (graph_id, call_idx, False)
        if totals.calls:
            totals.total_ns += dt
            if dt < totals.min_ns:
                totals.min_ns = dt
            elif dt > totals.max_ns:
                totals.max_ns = dt
        else:
            totals.total_ns = totals.min_ns = totals.max_ns = dt
        totals.calls += 1
        for listener in ctx.call_listeners:
            try:
                listener(graph_id)
            except Exception as exc:
                ctx.internal_error("call listener", exc)
        return out

    def _run(self, fn: Callable, graph_id: int, call_idx: int, args: tuple, kwargs: dict,
             checker=None, collective: bool = False):
        ctx = self.ctx
        with ctx.compiled_code():
            if collective and ctx.on_collective is not None:
                ctx.on_collective()   # a rank may wait in this call: what is held is written
            ctx.in_call = (graph_id, call_idx)
            snapshot = None
            if checker is not None and checker.pending_grads is not None and ctx.active:
                with ctx.own_work():
                    try:
                        checker.pending_gradients(call_idx, args)
                    except Exception as exc:
                        ctx.internal_error("gradient check", exc)
            if checker is not None and ctx.active and checker.wants(call_idx):
                try:
                    snapshot = checker.before_call(args)
                except Exception as exc:
                    ctx.internal_error("eager check", exc)
            t0 = _perf_ns()
            try:
                out = fn(*args, **kwargs)
            except Exception as exc:
                _raised(ctx, graph_id, call_idx, checker, args, exc)
                raise
            dt = _perf_ns() - t0
            ctx.in_call = None
            ctx.last_call = (graph_id, call_idx, False)
            try:  # still inside: the summaries' own ops are not eager work
                self._record_call(graph_id, call_idx, dt, out)
            except Exception as exc:
                ctx.internal_error("call recorder", exc)
            if snapshot is not None:
                with ctx.own_work():
                    try:
                        checker.after_call(call_idx, snapshot, args, out, fn)
                    except Exception as exc:
                        ctx.internal_error("eager check", exc)
        for listener in ctx.call_listeners:
            try:
                listener(graph_id)
            except Exception as exc:
                ctx.internal_error("call listener", exc)
        return out

    def _record_call(self, graph_id: int, call_idx: int, wall_ns: int, out: Any) -> None:
        ctx = self.ctx
        if not ctx.active:
            return
        values = ctx.options.values
        tensors = tensorstats.flat_tensors(out)
        if values == "none" or not summarized_call(call_idx):
            # steady state: every call's time and output shapes, statistics sampled
            text = "[" + ",".join(['{"shape":%s,"dtype":%s,"stats":null}' % tensorstats.describe_json(t)[:2]
                                   for t in tensors]) + "]"
            ctx.writer.add(CallRow(seq=ctx.next_seq(), graph_id=graph_id, call_idx=call_idx,
                                   wall_ns=wall_ns, outputs=text))
            self._totals_due(graph_id)
            return
        seq = ctx.next_seq()
        # the row waits for its statistics (batched, read back without waiting)
        queue = ctx.stats_queue
        queue.defer([queue.add(t) for t in tensors], _emit_call,
                    (ctx.writer, seq, graph_id, call_idx, wall_ns,
                     [tensorstats.describe(t) for t in tensors]))
        if values == "full" and call_idx < 4:
            self.keeper.keep(f"call:{seq}", tensors,
                             f"{ctx.graphs[graph_id].code_name or ''} graph {graph_id}")
        self._totals_due(graph_id)

    def _totals_due(self, graph_id: int) -> None:
        """A sampled call (one in `STATS_EVERY`) writes its graph's totals too:
        a run that ends without a stop (a crash) lacks at most that many calls."""
        totals = self.totals.get(graph_id)
        if totals is not None and totals.calls != totals.written:
            self.ctx.writer.add(totals.event(self.ctx))


def _raised(ctx, graph_id: int, call_idx: int, checker, args: tuple, exc: BaseException) -> None:
    """A compiled call raised: it is no longer running, and the checker maps
    the error to the user's line (the program gets the exception after)."""
    ctx.in_call = None
    ctx.last_call = (graph_id, call_idx, True)
    if checker is not None:
        with ctx.own_work():
            try:
                checker.locate_failure(call_idx, args, exc)
            except Exception as inner:
                ctx.internal_error("runtime-error mapper", inner)
