"""A capture session: owns the run-file writer and installs the recorders.

    session = CaptureSession(RunWriter("x.run"), values="stats")
    session.start()
    ...   # the program runs
    session.stop(exit_status=0)
"""

from __future__ import annotations

import collections
import itertools
import os
import re
import sys
import threading
import time
from typing import Any

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode, _pop_mode, _push_mode

from graphdbg.runfile import RunWriter, dumps

from . import creation, tensorstats
from .backend import BackendRecorder
from .eager import EagerRecorder
from .exports import ExportRecorder
from .failure_findings import FailureFindings
from .frames import node_source, node_target
from .progress import CompileProgress
from .trace import TraceCapture


SUPPORTED_TORCH = ((2, 13), (2, 15))  # [low, high), as pyproject.toml declares

_current: "CaptureSession | None" = None


def current() -> "CaptureSession | None":
    """The session capturing this process, if any (`graphdbg.check_graph` records into it)."""
    return _current if _current is not None and _current.active else None


def check_torch_version() -> None:
    """graphdbg relies on dispatch modes Dynamo can ignore and on the structured
    trace of torch 2.13/2.14; other versions are refused up front."""
    from graphdbg.errors import GraphdbgError
    from torch.utils._python_dispatch import TorchDispatchMode
    try:
        major, minor = (int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
    except ValueError:
        major, minor = 0, 0
    (lo, hi) = SUPPORTED_TORCH
    if not (lo <= (major, minor) < hi) or not hasattr(TorchDispatchMode, "ignore_compile_internals"):
        raise GraphdbgError(
            f"torch {torch.__version__} is not supported: graphdbg needs torch>={lo[0]}.{lo[1]},"
            f"<{hi[0]}.{hi[1]}")


class CaptureSession(FailureFindings):
    def __init__(self, writer: RunWriter, *, values: str = "stats", eager: bool = True,
                 max_ops: int = 200_000, tensor_budget: int = 64 * 1024 * 1024,
                 progress: bool = False, keep: str | None = None, compare: bool = True,
                 compare_first: int = 3, compare_every: int = 0,
                 rtol: float | None = None, atol: float | None = None,
                 localize: str = "auto", check_graphs: bool = True) -> None:
        if values not in tensorstats.TIERS:
            raise ValueError(f"values must be one of {tensorstats.TIERS}")
        self.writer = writer
        self.values = values
        self.record_eager = eager
        self.max_ops = max_ops
        self.tensor_budget = tensor_budget
        self.keep = re.compile(keep) if keep else None
        self.compare = compare
        self.compare_first = compare_first
        self.compare_every = compare_every
        self.rtol, self.atol = rtol, atol
        self.localize = localize
        self.check_graphs = check_graphs
        self.checking = False
        self._compile_error_cids: set = set()
        # exceptions already recorded as compile errors, by id (with their
        # type and text to rule out a reused id): not recorded again when the
        # program dies of one of them
        self._recorded_excs: dict[int, tuple[str, str, str]] = {}
        self.active = False
        self.ops_dropped = 0
        self.counts: collections.Counter = collections.Counter()
        self.internal_errors: list[str] = []
        self._seq = itertools.count(1)
        self._graph_ids = itertools.count(1)
        self._t0 = time.monotonic()
        self._in_compiled = 0
        self._lock = threading.Lock()
        self.backend = BackendRecorder(self)
        self.trace = TraceCapture(self)
        self.exports = ExportRecorder(self)
        self.eager_mode: EagerRecorder | None = None
        self.progress = CompileProgress(progress)
        self._pid = os.getpid()

    # -- ids and time --------------------------------------------------------
    def next_seq(self) -> int:
        return next(self._seq)

    def new_graph_id(self) -> int:
        return next(self._graph_ids)

    def now(self) -> float:
        return time.monotonic() - self._t0

    # -- lifecycle -------------------------------------------------------------
    def start(self) -> None:
        check_torch_version()
        self.writer.set_meta(
            torch=torch.__version__, python=sys.version.split()[0], values=self.values,
            device=_device_description(), pid=os.getpid())
        self.trace.install()
        self.backend.install()
        creation.install()
        self.exports.install()
        self.active = True
        global _current
        _current = self
        if self.record_eager:
            self.eager_mode = EagerRecorder(self)
            self.eager_mode.__enter__()
        os.register_at_fork(after_in_child=self._after_fork_child)

    def stop(self, **final_meta: Any) -> None:
        if not self.active:
            return
        self.active = False
        self.progress.end()
        if self.eager_mode is not None:
            mode, self.eager_mode = self.eager_mode, None
            try:
                if _get_current_dispatch_mode() is mode:
                    mode.__exit__(None, None, None)
            except Exception as exc:
                self.internal_error("stopping eager recorder", exc)
        self.backend.uninstall()
        self.trace.uninstall()
        creation.uninstall()
        self.exports.uninstall()
        global _current
        if _current is self:
            _current = None
        if os.getpid() != self._pid:
            return
        from torch._dynamo.utils import counters
        torch_counters = {
            "unique_graphs": counters["stats"].get("unique_graphs", 0),
            "calls_captured": counters["stats"].get("calls_captured", 0),
            "graph_breaks": sum(counters["graph_break"].values()),
        }
        self.writer.close(
            torch_counters=torch_counters, counts=dict(self.counts),
            ops_dropped=self.ops_dropped, internal_errors=self.internal_errors[:50],
            **final_meta)

    def _after_fork_child(self) -> None:
        # A forked child (DataLoader workers) must never write to the parent's file.
        if os.getpid() != self._pid:
            self.active = False
            self.writer.abandon()

    # -- compiled regions ------------------------------------------------------------
    def enter_compiled(self):
        """Switch the eager recorder off while a compiled graph runs."""
        self._in_compiled += 1
        mode = self.eager_mode
        try:
            if mode is not None and _get_current_dispatch_mode() is mode:
                _pop_mode()
                return mode
        except Exception as exc:
            self.internal_error("pausing eager recorder", exc)
        return None

    def exit_compiled(self, popped) -> None:
        self._in_compiled -= 1
        if popped is not None:
            _push_mode(popped)

    @property
    def in_compiled(self) -> bool:
        return self._in_compiled > 0

    def record_call(self, graph_id: int, call_idx: int, wall_ns: int, out: Any) -> None:
        if not self.active:
            return
        outputs = []
        tensors = tensorstats.flat_tensors(out)
        for t in tensors:
            shape, dtype = tensorstats.describe(t)
            outputs.append({"shape": shape, "dtype": dtype,
                            "stats": tensorstats.summarize(t, self.values)})
        seq = self.next_seq()
        self.writer.add("calls", (seq, graph_id, call_idx, wall_ns, dumps(outputs)))
        if self.values == "full" and call_idx < 4:
            g = self.writer.graph(graph_id)
            self.keep_tensors(f"call:{seq}", tensors, f"{g.get('code_name') or ''} graph {graph_id}")

    def keep_tensors(self, owner: str, tensors: list, label: str = "") -> None:
        """`--values full`: keep tensors as safetensors blobs within the budget,
        only for what `--keep` selects (op name, module path, graph function)."""
        if self.keep is not None and not self.keep.search(label):
            return
        from safetensors.torch import save
        for i, t in enumerate(tensors):
            if not tensorstats._plain(t):
                continue
            size = t.numel() * t.element_size()
            if size > self.tensor_budget:
                self.counts["tensors_over_budget"] += 1
                continue
            self.tensor_budget -= size
            with torch.no_grad():
                blob = save({"value": t.detach().to("cpu").contiguous().clone()})
            self.writer.add("tensors", (owner, str(i), blob))

    # -- findings from the eager-vs-compiled check ------------------------------------
    def bisect_progress(self, title: str):
        from .progress import BisectProgress
        return BisectProgress(self.progress.enabled, title)

    def record_node_times(self, graph_id: int, times_ns: dict[str, int]) -> None:
        for name, ns in times_ns.items():
            self.writer.add("node_times", (graph_id, name, ns))

    def report_divergence(self, checker, call_idx: int, index: int, final, loc,
                          direction: str = "forward") -> None:
        from .compare import is_random
        w = self.writer
        name = loc.node
        node = checker.nodes.get(name) if name else None
        user_id, stack, mpath, mcls = node_source(w, node) if node is not None else (None,) * 4
        d = loc.diff or final
        kind = d.kind
        if node is not None and is_random(node) and kind != "precision":
            kind = "random"
        severity = {"miscompile": "error", "shape": "error", "dtype": "error",
                    "precision": "info", "random": "warning"}.get(kind, "error")
        stage = {"user": w.graph(checker.graph_id).get("backend")}.get(loc.stage, loc.stage)
        what = f"{loc.target or name}" if name else "an output"
        if kind == "random":
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
        detail = {
            "classification": kind, "call": call_idx, "direction": direction,
            "output": index if index >= 0 else None,
            "mutated_input": (-1 - index) if index < 0 else None,
            "node": name, "target": loc.target, "module_path": mpath, "module_class": mcls,
            "stage": stage, "method": loc.method, "compiles": loc.compiles,
            "stage_compiles": loc.by_stage.get(loc.stage, 0), "seconds": round(loc.seconds, 3),
            "compiles_by_stage": {({"user": stage}.get(k, k)): v for k, v in loc.by_stage.items()},
            "max_abs": _finite(d.max_abs), "max_rel": _finite(d.max_rel),
            "eager_vs_fp64": d.eager_vs_fp64, "compiled_vs_fp64": d.compiled_vs_fp64,
            "dtype": d.dtype, "isolated": loc.isolated, "undecided": loc.undecided,
            "output_max_abs": _finite(final.max_abs), "output_max_rel": _finite(final.max_rel),
        }
        w.diagnostic(f"divergence|{checker.graph_id}|{name}|{kind}|{direction}", kind="divergence",
                     severity=severity, message=message, hint=hint, user_frame=user_id,
                     stack=stack, graph_id=checker.graph_id, node=name, op=loc.target,
                     detail=detail)

    def report_aliasing(self, checker, call_idx: int, output: int, compiled: int | None,
                        eager: int | None) -> None:
        def says(a):
            return "a copy" if a is None else f"a view of input {a}"
        g = self.writer.graph(checker.graph_id)
        user_id = self.writer.frame_id(g["code_file"], g["code_line"], g.get("code_name") or "?") \
            if g.get("code_file") else None
        self.writer.diagnostic(
            f"aliasing|{checker.graph_id}|{output}", kind="divergence", severity="warning",
            message=f"output {output} is {says(compiled)} compiled but {says(eager)} in eager",
            hint="In-place changes through this output reach the input in one mode and not in "
                 "the other.",
            user_frame=user_id, graph_id=checker.graph_id,
            detail={"classification": "aliasing", "call": call_idx, "output": output,
                    "compiled_aliases_input": compiled, "eager_aliases_input": eager})

    def report_nonfinite(self, checker, name: str, where: str, call_idx: int) -> None:
        user_id, stack, mpath, mcls = node_source(self.writer, checker.nodes[name])
        target = node_target(checker.nodes[name])
        self.writer.diagnostic(
            f"nan_inf|{checker.graph_id}|{name}|{where}", kind="nan_inf", severity="warning",
            message=f"first NaN/Inf in {where} appears at {target} (node {name})",
            hint="Its inputs are finite: this op creates the non-finite values.",
            user_frame=user_id, stack=stack, graph_id=checker.graph_id, node=name, op=target,
            detail={"where": where, "call": call_idx, "module_path": mpath, "module_class": mcls})

    def internal_error(self, where: str, exc: BaseException) -> None:
        self.counts["internal_errors"] += 1
        if len(self.internal_errors) < 50:
            self.internal_errors.append(f"{where}: {type(exc).__name__}: {exc}")


def _finite(x: float | None) -> float | None:
    import math
    return x if x is None or math.isfinite(x) else None


def _device_description() -> str:
    if torch.cuda.is_available():
        return f"cuda: {torch.cuda.get_device_name(0)}"
    return "cpu"
