"""The run file's tables: one record type per table, shared by the writer
(`RunWriter.add(OpRow(...))`) and the reader (`graphdbg.runfile.query`);
`graphdbg.runfile.schema` generates the CREATE TABLE statements from them.

Each record is a `typing.NamedTuple`: a tuple at run time, cheap on the
writer's hot path (one `OpRow` per eager op: about 0.3 us to build, given
its fields in order; keywords cost more) and read by `executemany` as is.
Its fields are the table's columns in their order (run files already
written depend on it); the annotation gives
the SQL type (int INTEGER, float REAL, str TEXT, bytes BLOB; `| None`: may
be NULL). Class attributes, unannotated so that they are not fields:
`TABLE`, the table's name; `KEY`, its primary key's columns; `UNIQUE`,
columns with a UNIQUE constraint.

Changing a record changes the run-file format: bump `SCHEMA_VERSION`
(schema.py) and keep `query.Run` able to read older files. JSON columns hold
text made with `writer.dumps`. No imports beyond the standard library.
"""

from typing import NamedTuple


class MetaRow(NamedTuple):
    """A fact about the run (docs/run-file.md lists the keys)."""
    TABLE = "meta"
    KEY = ("key",)
    key: str
    value: str | None              # JSON


class SourceRow(NamedTuple):
    """A snapshot of a user file some frame points into, taken during the run
    (a notebook cell's source, which is on no disk, from the capture)."""
    TABLE = "sources"
    KEY = ("file",)
    file: str
    sha1: str
    text: str


class FrameRow(NamedTuple):
    """A distinct (file, line, function, col, end_col), interned by `RunWriter.frame_id`."""
    TABLE = "frames"
    KEY = ("id",)
    id: int
    file: str                      # absolute, or "<...>" for generated code
    line: int
    function: str
    code: str | None               # the source line, without its indentation
    internal: int                  # 1: torch, the standard library or graphdbg
    # schema 3: the caret's span, 0-based character offsets into `code`, end
    # exclusive (code[col:end_col]); NULL: the whole line
    col: int | None = None
    end_col: int | None = None
    cell: str | None = None        # schema 3: a notebook cell's name ("Cell In[3]"); NULL: a file


class StackRow(NamedTuple):
    """A distinct stack, interned by `RunWriter.stack_id`."""
    TABLE = "stacks"
    KEY = ("id",)
    id: int
    frames: str                    # JSON list of frame ids, outermost first


class GraphRow(NamedTuple):
    """A Dynamo graph given to a backend; written whole on every change
    (`RunWriter.put_graph`), so every field but the id may be unknown yet."""
    TABLE = "graphs"
    KEY = ("id",)
    id: int
    compile_id: str | None = None  # "frame/compile", as in TORCH_LOGS
    backend: str | None = None
    code_name: str | None = None   # the compiled function (resume functions mapped back)
    code_file: str | None = None
    code_line: int | None = None
    user_frame: int | None = None
    stack: int | None = None
    n_nodes: int | None = None
    n_ops: int | None = None
    n_inputs: int | None = None
    backend_time_s: float | None = None
    compile_time_s: float | None = None  # the whole frame's compile
    status: str | None = None      # compiling | compiled | compile_error | restarted (by Dynamo)
    error: str | None = None
    graph_code: str | None = None  # the FX graph's Python
    created_seq: int | None = None  # in the seq order shared with ops and calls


class NodeRow(NamedTuple):
    """An FX node of a graph."""
    TABLE = "nodes"
    KEY = ("graph_id", "idx")
    graph_id: int
    idx: int                       # position in the graph
    name: str
    op: str                        # placeholder, call_function, ...
    target: str | None
    shapes: str | None             # JSON list per output
    dtypes: str | None             # JSON list per output
    user_frame: int | None
    stack: int | None              # from the node's stack_trace
    module_path: str | None        # e.g. TinyLM.blocks.0.attn
    module_class: str | None
    args: str | None


class CallRow(NamedTuple):
    """A call of a compiled graph."""
    TABLE = "calls"
    KEY = ("seq",)
    seq: int
    graph_id: int
    call_idx: int                  # 0 for the graph's first call
    wall_ns: int
    outputs: str                   # JSON list of {shape, dtype, stats}


class OpRow(NamedTuple):
    """An eager aten op (the first `--max-ops`; the rest only in the summary)."""
    TABLE = "ops"
    KEY = ("seq",)
    seq: int
    op: str
    phase: str                     # forward | backward | optimizer | init
    shapes: str                    # JSON list per output
    dtypes: str                    # JSON list per output
    stats: str | None              # JSON per output, per --values
    time_ns: int
    user_frame: int | None
    stack: int | None
    module_path: str | None
    module_class: str | None


class OpSummaryRow(NamedTuple):
    """Every eager op summed per (op, phase, user line, module)."""
    TABLE = "op_summary"
    KEY = ("op", "phase", "user_frame", "module_path")
    op: str
    phase: str
    user_frame: int | None         # NULL in a key: the writer deletes with IS
    module_path: str               # "" without a module (a key column)
    count: int
    total_ns: int
    max_ns: int


class DiagnosticRow(NamedTuple):
    """A finding, deduplicated per site (`key`)."""
    TABLE = "diagnostics"
    KEY = ("id",)
    UNIQUE = ("key",)
    id: int
    key: str                       # the site: a repeat only counts up
    kind: str                      # writer.DIAGNOSTIC_KINDS
    severity: str                  # error | warning | info
    message: str
    reason: str | None             # torch's full text
    hint: str | None
    user_frame: int | None
    stack: int | None
    graph_id: int | None
    node: str | None
    op: str | None
    count: int                     # times seen
    compile_ids: str               # JSON list
    detail: str | None             # JSON, per kind (docs/report-json.md)


class EventRow(NamedTuple):
    """A kept structured-trace record, or one of graphdbg's own
    (graphdbg_compile_time, graphdbg_kernel_times, py_spy_samples)."""
    TABLE = "events"
    KEY = ("seq",)
    seq: int
    t: float                       # seconds since the session started
    name: str                      # e.g. compilation_metrics, artifact:recompile_reasons
    compile_id: str | None
    metadata: str | None           # JSON: {name: {...}}
    payload: str | None


class NodeTimeRow(NamedTuple):
    """A node's fastest time in the eager reference runs of its graph's first checked calls."""
    TABLE = "node_times"
    KEY = ("graph_id", "node")
    graph_id: int
    node: str
    eager_ns: int


class TensorRow(NamedTuple):
    """A tensor kept with `--values full`."""
    TABLE = "tensors"
    KEY = ("id",)
    id: int | None                 # None: SQLite numbers it (the order kept)
    owner: str                     # op:<seq> or call:<seq>
    name: str
    safetensors: bytes


class NodeValueRow(NamedTuple):
    """A node's value eager vs compiled on one checked call (schema 2)."""
    TABLE = "node_values"
    KEY = ("graph_id", "call_idx", "node")
    graph_id: int
    call_idx: int
    node: str
    status: str                    # ok | differs | first divergent | not compared
    kind: str | None               # miscompile | precision | shape | dtype | random
    compiled_from: str | None      # output | intermediate outputs (<stage>)
    max_abs: float | None
    max_rel: float | None
    eager_vs_fp64: float | None    # rmse against the float64 judge
    compiled_vs_fp64: float | None
    eager_stats: str | None        # JSON {shape, dtype, min, max, ...}
    compiled_stats: str | None
    fp64_stats: str | None


# every table, in the order the schema creates them
RECORDS = (MetaRow, SourceRow, FrameRow, StackRow, GraphRow, NodeRow, CallRow, OpRow,
           OpSummaryRow, DiagnosticRow, EventRow, NodeTimeRow, TensorRow, NodeValueRow)
