"""The typed records a `Run` (query.py) reads from a run file: frozen
dataclasses, one per thing a view shows (run info, graphs, nodes, node values,
compile and kernel times, calls, eager ops, findings, line times, source lines,
kept tensors), and the constants they are judged by.

JSON columns come back parsed, except on `Op`, which keeps the raw text
(`shapes_json`...) and parses on access. `graphdbg.runfile.query` re-exports
every public name here.

Imports only the standard library and graphdbg's torch-free modules.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .details import FindingDetail

SEVERITIES = ("error", "warning", "info")  # the order findings are listed in
MIN_SAMPLES = 3  # steady calls a compiled time needs before it is called slower than eager


def beyond_noise(fastest: float | None, median: float | None, eager: float | None,
                 samples: int) -> bool | None:
    """Whether a compiled time (the ``fastest`` of ``samples`` steady
    measurements) is slower than ``eager`` by more than its own measured
    spread (``median`` - ``fastest``); None when it cannot be said (no
    eager time, fewer than MIN_SAMPLES measurements)."""
    if not fastest or not eager or samples < MIN_SAMPLES:
        return None
    spread = max(0.0, (median if median is not None else fastest) - fastest)
    return fastest - eager > spread


def _loads(text: str | None) -> Any:
    return json.loads(text) if text else None


# -- records --------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Frame:
    """A source location; the fields are None when no user frame is known.
    `col`/`end_col`: the caret's span, 0-based character offsets into `code`
    (the line without its indentation), end exclusive; None: the whole line.
    `cell`: a notebook cell's name as IPython gives it (``Cell In[3]``), for
    `file` (`graphdbg.core.format.at` writes ``Cell In[3], line 7``)."""
    file: str | None
    line: int | None
    function: str | None
    code: str | None
    id: int | None = None
    col: int | None = None
    end_col: int | None = None
    cell: str | None = None

    def as_dict(self) -> dict:
        return {"file": self.file, "line": self.line, "function": self.function,
                "code": self.code, "col": self.col, "end_col": self.end_col, "cell": self.cell}


NO_FRAME = Frame(None, None, None, None)


@dataclass(frozen=True, slots=True)
class RunInfo:
    """The run's `meta` table: what ran, how it ended, with what."""
    file: str                      # absolute path of the run file
    argv: list | None
    cwd: str | None
    module: bool | None
    target: str | None
    exit_status: int | None
    status: str | None             # running | complete | failed | interrupted | ended without closing
    started_at: float | None
    ended_at: float | None
    wall_s: float | None
    values: str | None             # value tier
    device: str | None
    stance: str | None
    python: str | None
    torch: str | None
    graphdbg: str | None
    torch_counters: dict | None
    counts: dict | None
    ops_dropped: int | None
    internal_errors: list
    schema_version: int
    pid: int | None = None         # the process that wrote it, on host
    host: str | None = None
    profile: dict | None = None    # --profile: {dir, traces, steps, schedule}
    # --eager-steps: {first, every, steps, recorded, by}; None: no eager recorder
    eager_steps: dict | None = None
    py_spy_error: str | None = None  # --py-spy: why it sampled nothing
    # a launcher's rank (torchrun, srun): {rank, world_size, local_rank,
    # local_world_size, group_rank, restart, job, backend}; None: one process
    rank: dict | None = None
    # where a rank was last seen (hooks/record/ranks.py): {since, call:
    # {graph_id, call_idx, running, raised}, op: {op, phase, user_frame}}
    position: dict | None = None
    # code Dynamo compiled before the capture ran in it: {graphs: how many
    # graphs the process had compiled when the capture started}; None: none ran
    compiled_before: dict | None = None

    @property
    def versions(self) -> dict:
        return {"python": self.python, "torch": self.torch, "graphdbg": self.graphdbg}


@dataclass(frozen=True, slots=True)
class Graph:
    """A compiled graph, with statistics of its calls."""
    id: int
    compile_id: str | None
    backend: str | None
    function: str | None           # the compiled function's name
    file: str | None               # ... its file and first line
    line: int | None
    user_frame: int | None
    stack_id: int | None
    status: str | None
    error: str | None
    n_nodes: int | None
    n_ops: int | None
    n_inputs: int | None
    compile_time_s: float | None
    backend_time_s: float | None
    created_seq: int | None
    calls: int
    total_call_ns: int             # 0 without calls
    min_call_ns: int | None
    max_call_ns: int | None
    eager_ref_ns: int | None = None  # its nodes' time in the eager reference run (None: not checked)
    steady_call_ns: int | None = None  # its fastest call after the first (None: called once)
    # one of DDPOptimizer's pieces of a compiled function: {index, count,
    # size_bytes, params, cap_bytes, first_cap_bytes}
    ddp_bucket: dict | None = None
    # an exported program (torch.export, torch.onnx.export), not a compiled
    # graph: {kind, via, strict, dynamic, specialized, opset, onnx_nodes,
    # onnx_ops: {FX node: [ONNX ops]}, runtime, not_checked}
    export: dict | None = None
    steady_calls: int = 0          # its calls after the first
    steady_median_ns: int | None = None  # ... their median

    @property
    def kind(self) -> str:
        """compile (a Dynamo graph given to a backend), export or onnx."""
        return self.export.get("kind", "export") if self.export is not None else "compile"

    @property
    def mean_call_ns(self) -> float | None:
        return self.total_call_ns / self.calls if self.calls else None

    @property
    def compiled_slower(self) -> bool | None:
        """Whether its fastest compiled call after the first (which warms
        up) took longer than its nodes did eagerly (the reference run's op
        times, without Python's own cost between ops) by more than the
        spread of its calls after the first (`beyond_noise`); None when
        either was not measured, or over fewer than MIN_SAMPLES calls."""
        return beyond_noise(self.steady_call_ns, self.steady_median_ns, self.eager_ref_ns,
                            self.steady_calls)


@dataclass(frozen=True, slots=True)
class Node:
    """A node of a graph at its user's line; `eager_ns` is its time in the
    eager reference run (None without one)."""
    graph_id: int
    idx: int
    name: str
    op: str
    target: str | None
    args: str | None
    shapes: list | None
    dtypes: list | None
    module_path: str | None
    module_class: str | None
    eager_ns: int | None
    user_frame: int | None
    stack_id: int | None
    file: str | None
    line: int | None
    function: str | None
    code: str | None


@dataclass(frozen=True, slots=True)
class NodeValue:
    """A node's value on one checked call, eager vs compiled (the run file's
    `node_values`). Stats: {shape, dtype, min, max, mean, std, norm, nan,
    inf} (fewer keys with `--values health`); the compiled side and the
    errors are None where the compiled value is not known. `status`: ok,
    differs, first divergent, not compared (docs/run-file.md)."""
    graph_id: int
    call_idx: int
    node: str
    idx: int | None
    op: str | None
    target: str | None
    status: str
    kind: str | None               # miscompile | precision | shape | dtype | random
    compiled_from: str | None      # "output" | "intermediate outputs (<stage>)"
    max_abs: float | None
    max_rel: float | None
    eager_vs_fp64: float | None    # rmse against the float64 judge
    compiled_vs_fp64: float | None
    eager_stats: dict | None
    compiled_stats: dict | None
    fp64_stats: dict | None
    eager_ns: int | None
    module_path: str | None
    user_frame: int | None
    file: str | None
    line: int | None
    function: str | None
    code: str | None

    @property
    def differs(self) -> bool:
        return self.status in NODE_VALUE_DIFFERING


NODE_VALUE_DIFFERING = ("differs", "first divergent")


@dataclass(frozen=True, slots=True)
class CompileTime:
    """Where one compile's time went (from torch's compilation metrics).
    `recompile`: not the first compile of its code (frame_compile_id > 0)."""
    compile_id: str
    graph_ids: tuple[int, ...]
    function: str | None
    file: str | None
    line: int | None
    total_s: float
    phases: dict          # phase -> seconds, in COMPILE_PHASES order; they add up to total_s
    fx_cache: dict        # {"hits": n, "misses": n}: inductor's FX graph cache
    aot_cache: dict       # the same for AOT autograd's cache
    failed: bool

    @property
    def recompile(self) -> bool:
        return not self.compile_id.endswith("/0")


@dataclass(frozen=True, slots=True)
class KernelTime:
    """One kernel of an inductor-compiled graph, timed over the graph's first
    calls, with the user lines of the FX nodes it computes (inductor's
    provenance). `part`: forward, backward or inference."""
    compile_id: str
    graph_id: int | None
    part: str | None
    name: str                      # e.g. cpp_fused_gelu_0, extern_kernels.addmm
    handle: int                    # inductor's provenance handle (order in the wrapper)
    ns: int | None                 # a steady call: the fastest timed call after the first
    first_ns: int | None           # the first (cold) call
    calls: int                     # calls of its graph by the program
    frames: tuple                  # Frames of the user lines it computes
    nodes: tuple[str, ...]         # Dynamo graph nodes it computes (forward/inference)
    steady: bool = True            # timed after a first call (False: `ns` is the cold first call)
    samples: int = 0               # steady calls timed (`ns` is the fastest of them)
    median_ns: int | None = None   # the median steady call (its spread against `ns`: noise)

    @property
    def total_ns(self) -> int:
        return (self.ns or 0) * self.calls


@dataclass(frozen=True, slots=True)
class SampledLine:
    """A user source line and the py-spy samples whose deepest user frame it was."""
    file: str
    line: int
    function: str
    samples: int


@dataclass(frozen=True, slots=True)
class Sampling:
    """`graphdbg run --py-spy`: samples in all, the rate, the speedscope file,
    and the sampled lines (most sampled first)."""
    samples: int
    rate: int
    file: str
    lines: tuple[SampledLine, ...]


@dataclass(frozen=True, slots=True)
class Call:
    """One call of a compiled graph; `outputs`: [{shape, dtype, stats}, ...]."""
    seq: int
    graph_id: int
    call_idx: int
    wall_ns: int | None
    outputs: list


@dataclass(frozen=True, slots=True)
class Op:
    """One recorded eager op. The JSON columns stay text until read."""
    seq: int
    op: str
    phase: str | None
    time_ns: int | None
    module_path: str | None
    module_class: str | None
    user_frame: int | None
    stack_id: int | None
    file: str | None
    line: int | None
    function: str | None
    code: str | None
    shapes_json: str | None
    dtypes_json: str | None
    stats_json: str | None

    @property
    def shapes(self) -> list:
        return json.loads(self.shapes_json) if self.shapes_json else []

    @property
    def dtypes(self) -> list:
        return json.loads(self.dtypes_json) if self.dtypes_json else []

    @property
    def stats(self) -> list | None:
        return _loads(self.stats_json)


@dataclass(frozen=True, slots=True)
class OpStat:
    """Eager ops summed per (op, phase, user line, module): every op, also
    those past `--max-ops`."""
    op: str
    phase: str | None
    count: int
    total_ns: int
    max_ns: int
    module_path: str | None
    user_frame: int | None
    file: str | None
    line: int | None
    function: str | None
    code: str | None


@dataclass(frozen=True, slots=True)
class Finding:
    """One diagnostic (docs/report-json.md lists kinds and details).
    `stack`: user frames, outermost first."""
    id: int
    kind: str
    severity: str
    message: str | None
    reason: str | None
    hint: str | None
    user_frame: int | None
    file: str | None
    line: int | None
    function: str | None
    code: str | None
    stack_id: int | None
    stack: tuple[Frame, ...]
    count: int
    compile_ids: tuple[str, ...]
    graph_id: int | None
    node: str | None
    op: str | None
    detail: FindingDetail | None  # typed per kind (details.py); None: none stored
    col: int | None = None         # the caret's span in `code` (see `Frame`)
    end_col: int | None = None
    cell: str | None = None        # a notebook cell's name ("Cell In[3]")


@dataclass(frozen=True, slots=True)
class KindCount:
    sites: int   # findings of the kind
    count: int   # times they were hit


@dataclass(frozen=True, slots=True)
class LineTime:
    """Time spent at a source line (see `Run.hot_lines`)."""
    file: str
    line: int | None
    eager_ns: int
    compiled_ns: int

    @property
    def total_ns(self) -> int:
        return self.eager_ns + self.compiled_ns


@dataclass(frozen=True, slots=True)
class SourceLine:
    """A line of a snapshotted source file with what happened there."""
    line: int
    text: str
    eager_ns: int                  # eager ops at this line (op summary)
    compiled_ns: int               # compiled time at this line (`Run.hot_lines`' ``compiled``)
    findings: tuple[int, ...]      # ids of findings reported at this line


@dataclass(frozen=True, slots=True)
class KeptTensor:
    """A tensor kept with `--values full`: raw safetensors bytes (never
    unpickled). `owner` is `op:<seq>` or `call:<seq>`."""
    id: int
    owner: str
    name: str
    data: bytes
