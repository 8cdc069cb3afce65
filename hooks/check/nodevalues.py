"""Per-node values of one checked call, eager vs compiled, for the run
file's ``node_values`` table (the TUI's diff view reads it).

For every compute node whose eager-reference value is a tensor: the
reference's value summary and, when the float64 judge ran (only when
compiled and eager differed somewhere), the judge's and the eager-vs-float64
distance (rmse). Compiled values are known only for the graph's outputs
(the compiled call returned them) and, after a divergence, for the
intermediates that localisation compiled as extra outputs; for those the
compiled summary, the max abs/rel error against eager, the compiled-vs-float64
distance and a status:

- ``ok``: compiled matches eager (or, for a node whose compiled value is not
  known, every compiled output matched: nothing to examine);
- ``differs``: compiled and eager differ beyond tolerance at this node
  (``kind`` says how: miscompile, precision, nonfinite, shape, dtype, random);
- ``first divergent``: the node localisation named;
- ``not compared``: outputs diverged and this node's compiled value is not
  known (bisection, or a stage that failed).

Reads values only (summaries never keep a tensor alive, nothing is
written): the observer rule holds. Runs in the checker's own-work scope.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.fx

from graphdbg.runfile.records import NodeValueRow

from .numerics import DEFAULT_TOLERANCES, Tolerance, compare_values, is_finding, rmse
from .subgraphs import COMPUTE_OPS, is_random, output_names
from . import streamed, verdicts
from ..record.tensorstats import describe, summarize

OK, DIFFERS, FIRST, NOT_COMPARED = "ok", "differs", "first divergent", "not compared"



def _has_data(value: Any) -> bool:
    """A tensor whose values can be read (not meta, fake or a storage-less wrapper)."""
    if not isinstance(value, torch.Tensor) or value.is_meta:
        return False
    try:
        value.untyped_storage()
    except (RuntimeError, NotImplementedError):
        return False
    return True


def value_summary(value: Any, tier: str) -> dict | None:
    """A node value's summary for the table (None: a value without data)."""
    return _stats(value, tier)


def _stats(value: Any, tier: str) -> dict | None:
    if not _has_data(value):
        return None
    shape, dtype = describe(value)
    out = {"shape": shape, "dtype": dtype}
    s = summarize(value, tier)
    if s:
        out.update(s)
    return out


def errors(compiled: Any, eager: Any) -> tuple[float | None, float | None]:
    """Max abs and max rel error of ``compiled`` against ``eager`` over the
    values finite in both (rel: against |eager| clamped at the dtype's atol);
    inf where NaN/Inf do not match; None when not comparable."""
    if not (_has_data(compiled) and _has_data(eager)):
        return None, None
    if compiled.shape != eager.shape:
        return math.inf, math.inf
    if compiled.numel() == 0:
        return 0.0, 0.0
    atol = DEFAULT_TOLERANCES.get(eager.dtype, (1e-4, 1e-5))[1]
    a = streamed.apart(compiled, eager, atol)  # float64 a piece at a time
    if a.nan_mismatch or a.inf_mismatch:
        return math.inf, math.inf
    return a.max_abs, a.max_rel


def _distance(judge: Any, value: Any) -> float | None:
    """rmse(judge, value) as `numerics.rmse` (over finite differences)."""
    if (_has_data(judge) and _has_data(value)
            and judge.shape == value.shape and value.is_floating_point()
            and judge.is_floating_point()):
        if value.numel() == 0:
            return 0.0
        return rmse(judge, value)
    return None


def node_value_rows(graph_id: int, call_idx: int, gm: torch.fx.GraphModule, ref, judge,
                    compiled_out: list, ref_out: list, judge_out: list | None,
                    tol: Tolerance, tier: str, loc=None,
                    backend: str | None = None) -> list[tuple]:
    """The run file's `node_values` rows for one checked call (stats as dicts).
    ``ref``: the reference (interpreter.LeanPass or EagerReference);
    ``judge``: the Float64Judge (may be None);
    ``loc``: the forward Localization when outputs diverged, else None;
    ``backend``: the user's backend's name (for the "user" stage)."""
    # compiled values known: outputs (as the call returned them, against the
    # reference's outputs), then localisation's intermediates
    nodes = {n.name: n for n in gm.graph.nodes}
    known: dict[str, tuple[Any, Any, Any, str]] = {}
    judged = judge_out if judge_out is not None else [None] * len(ref_out)
    replayed = getattr(loc, "replayed", None) if loc is not None else None
    if not replayed:
        # with random draws replayed, the intermediates' compile is the consistent
        # source for every node (outputs included): it drew what was replayed
        for name, c, e, j in zip(output_names(gm), compiled_out, ref_out, judged):
            if name is not None and name not in known:
                known[name] = (c, e, j, "output")
    if loc is not None and loc.values:
        stage = loc.values_stage or loc.stage or "user"
        if stage == "user" and backend:
            stage = backend
        r_vals, j_vals = ref.values, judge.values if judge is not None else {}
        note = ""
        if replayed:
            r_vals, j_vals = replayed[0], replayed[1] or {}
            note = ", random draws replayed"
        for name, c in loc.values.items():
            if name not in known:
                if replayed and is_random(nodes[name]):
                    # the random op itself: its own draws against eager's
                    known[name] = (c, ref.values.get(name),
                                   judge.values.get(name) if judge is not None else None,
                                   f"intermediate outputs ({stage})")
                else:
                    known[name] = (c, r_vals.get(name), j_vals.get(name),
                                   f"intermediate outputs ({stage}{note})")
    diverged = loc is not None
    first = getattr(loc, "node", None) if loc is not None else None
    rows = []
    summaries = ref.summaries  # a lean reference kept summaries, not values
    for node in gm.graph.nodes:
        if node.op not in COMPUTE_OPS:
            continue
        name = node.name
        e = ref.values.get(name)
        if summaries is not None and name in summaries:
            eager_stats = summaries[name]
        elif _has_data(e):
            eager_stats = _stats(e, tier)
        else:
            continue  # non-tensor values (sizes, tuples picked apart by getitem), and
            # tensors without storage (functional wrappers inside higher-order ops)
        j = judge.values.get(name) if judge is not None else None
        fp64_stats = _stats(j, tier)
        e_vs_j = _distance(j, e)
        status, kind, source = (NOT_COMPARED if diverged else OK), None, None
        max_abs = max_rel = c_vs_j = None
        compiled_stats = None
        if name in known:
            c, e2, j2, source = known[name]
            compiled_stats = _stats(c, tier)
            max_abs, max_rel = errors(c, e2)
            c_vs_j = _distance(j2, c)
            if e2 is not e and isinstance(e2, torch.Tensor):
                # compared against the reference with the compiled draws replayed
                # (or an output as returned): show that side
                if replayed and "replayed" in source:
                    eager_stats, fp64_stats = _stats(e2, tier), _stats(j2, tier)
                e_vs_j = _distance(j2, e2) if j2 is not None else e_vs_j
            d = compare_values(c, e2, j2, tol)
            if is_finding(d):
                status, kind = DIFFERS, verdicts.kind(d.kind, node)
            else:
                status = OK
                kind = d.kind if d is not None else None  # a benign precision difference
        if name == first:
            status = FIRST
            d = loc.diff
            if d is not None:
                kind = kind or d.kind
                if max_abs is None:
                    max_abs, max_rel = d.max_abs, d.max_rel
                if c_vs_j is None:
                    c_vs_j = d.compiled_vs_fp64
        rows.append(NodeValueRow(
            graph_id=graph_id, call_idx=call_idx, node=name, status=status, kind=kind,
            compiled_from=source, max_abs=max_abs, max_rel=max_rel, eager_vs_fp64=e_vs_j,
            compiled_vs_fp64=c_vs_j, eager_stats=eager_stats, compiled_stats=compiled_stats,
            fp64_stats=fp64_stats))
    return rows
