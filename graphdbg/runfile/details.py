"""A finding's `detail`, typed: one frozen record per finding kind.

The run file stores each finding's detail as JSON whose keys depend on its
kind (docs/report-json.md lists them; hooks/findings/writer.py writes them).
`parse(kind, raw)` reads it into the kind's record, and `as_dict()` gives
back the JSON as stored, key order included (`graphdbg report --json` prints
it byte for byte). Reading is tolerant: a key missing from an older run file
is None, a key this graphdbg does not know is kept in `extra`.

The text a view shows of a detail is made here, once: `summary()` (the line
under a finding in the report), `numbers()` (the TUI's labelled numbers),
the same `summary()` in the pytest plugin's failure text.

Writing is strict: hooks/findings/writer.py makes a detail with `of(...)` and
changes it with `updated(...)`, which store exactly the keys given, in the
order given, and refuse (TypeError) a key the kind's record has no field for:
what is written is what the reader knows.

Standard library only (the floor: no torch, rich or textual).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from functools import cache
from typing import Any, ClassVar, TypeVar

from ..core.format import num


_D = TypeVar("_D", bound="Detail")


@dataclass(frozen=True, slots=True, kw_only=True)
class Detail:
    """What every kind's detail has: the keys graphdbg does not know (kept
    so that they survive into the JSON report) and the stored key order."""
    kind: ClassVar[str] = ""
    extra: dict = field(default_factory=dict)
    # the keys as stored, in order (None: made here, not read: every field)
    _keys: tuple[str, ...] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_dict(cls, raw: dict) -> Detail:
        names = _names(cls)
        return cls(**{k: v for k, v in raw.items() if k in names},
                   extra={k: v for k, v in raw.items() if k not in names}, _keys=tuple(raw))

    @classmethod
    def of(cls: type[_D], **given: Any) -> _D:
        """The detail as the writer stores it: the keys given, in their order,
        None values included; the keys of fields not given are not stored."""
        _check_known(cls, given)
        return cls(**given, _keys=tuple(given))

    def updated(self: _D, **changes: Any) -> _D:
        """This detail with ``changes``, keyed as ``{**d, **changes}`` would
        be: a key already stored keeps its place, a new one goes last."""
        _check_known(type(self), changes)
        keys = self._keys
        if keys is not None:
            keys = (*keys, *(k for k in changes if k not in keys))
        return replace(self, **changes, _keys=keys)

    def as_dict(self) -> dict:
        """The JSON as stored (or, for a record made by its constructor, every field)."""
        keys = self._keys if self._keys is not None else (*_names(type(self)), *self.extra)
        return {k: self.extra[k] if k in self.extra else getattr(self, k) for k in keys}

    def summary(self) -> str | None:
        """The report's line under the finding's message, if the kind has one."""
        return None

    def numbers(self) -> list[tuple[str, str]]:
        """(label, value) pairs of the finding's numbers, for the TUI."""
        return []


@cache
def _names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls)) - {"extra", "_keys"}


def _check_known(cls: type, keys) -> None:
    unknown = [k for k in keys if k not in _names(cls)]
    if unknown:
        raise TypeError(f"{cls.__name__} has no field {', '.join(unknown)} (add it to "
                        f"graphdbg/runfile/details.py)")


# (field, label) of what `numbers()` shows, where a kind has the field and it is set
_NUMBERS = (("classification", "classification"), ("node", "node"), ("target", "target"),
            ("stage", "stage"), ("max_abs", "max abs"), ("max_rel", "max rel"),
            ("eager_vs_fp64", "eager vs float64"), ("compiled_vs_fp64", "compiled vs float64"),
            ("module_path", "module"), ("module_class", "module class"),
            ("method", "localised by"), ("compiles", "compiles"))
_FLOATS = ("max_abs", "max_rel", "eager_vs_fp64", "compiled_vs_fp64")


def _numbers(d: DivergenceDetail | NanInfDetail) -> list[tuple[str, str]]:
    out = []
    for key, label in _NUMBERS:
        val = getattr(d, key, None)
        if val is not None:
            out.append((label, num(val, 4) if key in _FLOATS else str(val)))
    iso = getattr(d, "isolated", None) or {}
    if iso.get("decided"):
        out.append(("on its own inputs", "wrong" if iso.get("diverges") else "right"))
    if d.undecided:
        out.append(("undecided", "; ".join(map(str, d.undecided))))
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class GraphBreakDetail(Detail):
    kind: ClassVar[str] = "graph_break"
    gb_id: str | None = None           # torch's graph-break id, e.g. gb0170
    gb_type: str | None = None
    explanation: str | None = None
    frame_skipped: bool | None = None  # torch could not resume: the function runs eagerly
    skipped_function: str | None = None
    expected_in: str | None = None     # "ddp" | "fsdp": in DDP's forward or FSDP2's hooks (info)

    def summary(self) -> str | None:
        return self.explanation[:300] if self.explanation else None


@dataclass(frozen=True, slots=True, kw_only=True)
class RecompileDetail(Detail):
    kind: ClassVar[str] = "recompile"
    function: str | None = None        # the code object recompiled, where it is defined
    def_file: str | None = None
    def_line: int | None = None
    guard: str | None = None           # torch's text of the failed guard
    guard_kind: str | None = None      # size, stride, value, training, ... (docs/report-json.md)
    subject: str | None = None
    guard_located: bool | None = None  # torch named the line that installed the guard
    changes: list | None = None        # [{expected, actual}] per failure
    events: list | None = None         # [{compile_id, reasons}], the last 20
    frames: list | None = None         # [{function, file, line, name, guard, recompiles}]
    frame_recompiles: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CompileErrorDetail(Detail):
    """A failed compile: a backend's error, a frame's (Dynamo, fake tensors),
    torch.export's, or the recompile limit's refusal; each sets its own keys."""
    kind: ClassVar[str] = "compile_error"
    exception: str | None = None       # the exception's type name
    traceback: str | None = None
    uncaught: bool | None = None       # the program died of it
    # a backend that raised on a graph
    backend: str | None = None
    raised_at: list | None = None      # [file, line, function] of user code inside torch
    compiler_error: str | None = None  # the C++ compiler's error line
    # a frame's compile (fail_type, explanation, hints) and torch.export
    fail_type: str | None = None
    explanation: str | None = None
    hints: list | None = None
    fake_mismatch: list | None = None  # a custom op's fake against its real outputs
    export: bool | None = None
    strict: bool | None = None
    data_dependent: bool | None = None
    unbacked: list | None = None       # [{symbol, node, op, file, line, code}]
    guards: list | None = None         # [{file, line, function, guard}]
    via: str | None = None             # torch.onnx.export: its torch.export step failed
    specialized: list | None = None    # [{size, value, reason, file, line}] sizes fixed while it ran
    strategies: list | None = None     # [{strategy, exception, message}] an exporter's tries, in order
    # torch.onnx.export's translation
    onnx: bool | None = None
    legacy_exporter: bool | None = None  # the TorchScript exporter (dynamo=False)
    onnx_op: str | None = None         # the op with no ONNX translation
    node: str | None = None            # the exported graph's node being translated
    fixes: list | None = None          # the ways out, one sentence each
    # the recompile limit
    recompile_limit: bool | None = None
    limit_type: str | None = None
    limit: int | None = None
    function: str | None = None
    last_reason: str | None = None
    refused: dict | None = None        # {compile_id, guard, change, reasons}
    guard_finding: str | None = None
    guard: str | None = None
    compiled_for: list | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class MalformedGraphDetail(Detail):
    kind: ClassVar[str] = "malformed_graph"
    check: str | None = None           # use_before_def, erased_node, ... (docs/report-json.md)
    stage: str | None = None           # dynamo graph, after backend passes, check_graph
    created_by_pass: bool | None = None
    created_at: list | None = None
    nodes_checked: int | None = None
    unchecked: list | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class DivergenceDetail(Detail):
    """Compiled against eager at a node (localised), or an output that
    aliases an input in one mode only (`classification` aliasing)."""
    kind: ClassVar[str] = "divergence"
    classification: str | None = None  # miscompile, precision, nonfinite, random, aliasing, shape, dtype
    call: int | None = None
    direction: str | None = None       # forward, backward
    output: int | None = None
    mutated_input: int | None = None
    node: str | None = None
    target: str | None = None
    module_path: str | None = None
    module_class: str | None = None
    stage: str | None = None
    method: str | None = None
    compiles: int | None = None
    stage_compiles: int | None = None
    seconds: float | None = None
    compiles_by_stage: dict | None = None
    max_abs: float | None = None
    max_rel: float | None = None
    eager_vs_fp64: float | None = None
    compiled_vs_fp64: float | None = None
    dtype: str | None = None
    isolated: dict | None = None       # {decided, diverges, max_abs, max_rel}
    undecided: list | None = None
    output_max_abs: float | None = None
    output_max_rel: float | None = None
    compiled_aliases_input: int | None = None
    eager_aliases_input: int | None = None
    # an export against eager (stage: the runtime, or torch.export)
    exported: str | None = None        # export | onnx
    onnx_ops: list | None = None       # the ONNX ops translated from the node
    opset: int | None = None
    eager_ops: list | None = None      # what each side ran at the line (an exported program)
    graph_ops: list | None = None
    # nonfinite: the side NaN/Inf where the other is finite (eager, compiled, both),
    # NaN or Inf, whether float64 is finite there, the node that made eager's finite again
    nonfinite_side: str | None = None
    nonfinite_value: str | None = None
    fp64_finite: bool | None = None
    made_finite_at: dict | None = None  # {node, op, file, line}
    graphs: list | None = None         # the graphs this cause was found in (one finding per cause)
    # the Python branch a traced export froze that these inputs take otherwise:
    # {file, line, code, converted, traced, now} (the program's InferenceSession)
    branch: dict | None = None

    @property
    def other_side(self) -> str:
        """What eager is set against: compiled code, ONNX Runtime (an ONNX
        export's node by node check) or an exported program."""
        if self.method in ("onnx intermediates", "onnx lines"):
            return "ONNX Runtime"
        return "exported" if self.exported else "compiled"

    def summary(self) -> str:
        """The divergence in one line, as the report and a test's failure show
        it: what kind, which node and op, where it was localised, the errors,
        the float64 verdict, how it was found; what is unknown is left out."""
        parts = [self.classification or "divergence"]
        if self.node:
            parts.append(f"node {self.node}" + (f" ({self.target})" if self.target else ""))
        if self.module_path:
            parts.append(f"module {self.module_path} ({self.module_class})")
        if self.stage:
            parts.append(f"stage {self.stage}")
        if self.max_abs is not None or self.max_rel is not None:
            parts.append(f"max abs {num(self.max_abs)}, rel {num(self.max_rel)}")
        e, c = self.eager_vs_fp64, self.compiled_vs_fp64
        if self.nonfinite_side and self.fp64_finite is not None:
            parts.append(f"float64 is {'finite' if self.fp64_finite else 'NaN/Inf too'} there")
        elif e is not None and c is not None:
            other = self.other_side
            verdict = (f"{other} is further from float64" if c > e
                       else "eager is further from float64" if e > c else "both as far from float64")
            parts.append(f"vs float64: eager {num(e)}, {other} {num(c)} ({verdict})")
        iso = self.isolated or {}
        if iso.get("decided"):
            parts.append("wrong on its own inputs" if iso.get("diverges")
                         else "right on its own inputs")
        if self.compiles is not None:
            parts.append(f"{self.compiles} compiles" + (f" ({self.method})" if self.method else ""))
        if self.undecided:
            parts.append(f"undecided: {'; '.join(map(str, self.undecided))[:200]}")
        return " · ".join(parts)

    def numbers(self) -> list[tuple[str, str]]:
        return _numbers(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class NanInfDetail(Detail):
    kind: ClassVar[str] = "nan_inf"
    where: str | None = None           # eager, compiled
    direction: str | None = None       # forward, backward (gradients)
    call: int | None = None
    module_path: str | None = None
    module_class: str | None = None
    value: str | None = None           # NaN, Inf
    reaches: str | None = None         # forward: the output or written input they reach
    from_inf: dict | None = None       # forward: {node, op, file, line} that made the infinities
    gradient_of: list | None = None    # backward: the inputs and parameters
    compiled_too: bool | None = None
    masked_by: dict | None = None      # {node, op} of the where-trap's mask
    method: str | None = None
    compiles: int | None = None
    seconds: float | None = None
    undecided: list | None = None

    def numbers(self) -> list[tuple[str, str]]:
        return _numbers(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class RuntimeErrorDetail(Detail):
    """The program's uncaught error, or a compiled call that raised (`call`)."""
    kind: ClassVar[str] = "runtime_error"
    exception: str | None = None
    traceback: str | None = None
    call: int | None = None
    eager_replay: str | None = None    # the eager replay's error, None when it ran
    fake_mismatch: list | None = None
    uncaught: bool | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckSkippedDetail(Detail):
    kind: ClassVar[str] = "check_skipped"
    need_bytes: int | None = None
    budget_bytes: int | None = None
    budget: str | None = None          # where the budget came from
    collectives: list | None = None    # the graph's collectives: not run again by a check


@dataclass(frozen=True, slots=True, kw_only=True)
class SpecializedDetail(Detail):
    """A size declared dynamic that an export fixed to a number."""
    kind: ClassVar[str] = "export_specialized"
    size: str | None = None            # x.size()[0]
    value: int | None = None
    declared: str | None = None        # Dim.AUTO, Dim('batch'), dynamic_axes
    symbol: str | None = None
    reason: str | None = None          # torch's reason for the replacement
    exported: str | None = None        # export | onnx
    # a tensor converted to a Python value while the TorchScript exporter traced:
    # {file, line, code, converted, value}
    branch: dict | None = None

    def summary(self) -> str:
        if self.branch:
            b = self.branch
            return (f"the trace converted a tensor to a Python {b.get('converted')} "
                    f"({b.get('value')}) and froze it; {self.reason}")
        return f"{self.size} = {self.value} (declared {self.declared}; {self.reason})"


@dataclass(frozen=True, slots=True, kw_only=True)
class OtherDetail(Detail):
    """The detail of a kind this graphdbg does not know (a newer run file):
    every key in `extra`."""


FindingDetail = (GraphBreakDetail | RecompileDetail | CompileErrorDetail | MalformedGraphDetail
                 | DivergenceDetail | NanInfDetail | RuntimeErrorDetail | CheckSkippedDetail
                 | SpecializedDetail | OtherDetail)

KINDS: dict[str, type[Detail]] = {c.kind: c for c in (
    GraphBreakDetail, RecompileDetail, CompileErrorDetail, MalformedGraphDetail,
    DivergenceDetail, NanInfDetail, RuntimeErrorDetail, CheckSkippedDetail, SpecializedDetail)}


def parse(kind: str, raw: Any) -> FindingDetail | None:
    """The typed detail of a finding of ``kind`` from its stored JSON; None
    when none is stored (graphdbg always writes a dict; anything else is
    not a detail it can read)."""
    if not isinstance(raw, dict):
        return None
    return KINDS.get(kind, OtherDetail).from_dict(raw)
