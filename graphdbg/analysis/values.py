"""Value summaries ({min, max, mean, std, norm, nan, inf}, as the run file
keeps an op's or a compiled call's output): whether two are close, and how
the views write one (the report, `graphdbg diff`, the TUI say it alike)."""

from __future__ import annotations

import math

from ..core.format import num


def stats_close(a: dict | None, b: dict | None, rtol: float,
                numel: int | None = None) -> tuple[bool, float]:
    """Whether two summaries agree within `rtol`, and their relative
    difference (inf when the NaN or Inf counts differ). Each field is
    measured against its own size, but never against less than the values'
    scale: their root mean square when `numel` is known (a mean near 0 of
    values near 1 is not held to 1e-3 of itself), else a thousandth of the
    norm."""
    if not a or not b:
        return True, 0.0
    if a.get("nan", 0) != b.get("nan", 0) or a.get("inf", 0) != b.get("inf", 0):
        return False, math.inf
    norm = max(abs(a.get("norm") or 0.0), abs(b.get("norm") or 0.0))
    floor = norm / math.sqrt(numel) if numel else norm * 1e-3
    worst = 0.0
    for k in ("mean", "min", "max", "norm", "std"):
        if k in a and k in b and a[k] is not None and b[k] is not None:
            worst = max(worst, abs(a[k] - b[k]) / max(abs(a[k]), abs(b[k]), floor, 1e-12))
    return worst <= rtol, worst


def numel(shape) -> int | None:
    """Elements of a shape (a list of ints); None when not known."""
    if not isinstance(shape, (list, tuple)) or not all(isinstance(d, int) for d in shape):
        return None
    return math.prod(shape)


def stats_text(s: dict | None) -> str:
    """A value summary in one cell: mean±std [min, max], NaN/Inf counts."""
    if not s:
        return "-"
    parts = []
    if "mean" in s:
        parts.append(f"{num(s['mean'])}±{num(s.get('std'))} [{num(s.get('min'))}, {num(s.get('max'))}]")
    if s.get("nan"):
        parts.append(f"nan {s['nan']}")
    if s.get("inf"):
        parts.append(f"inf {s['inf']}")
    if not parts:
        parts.append(f"{s.get('dtype', '')}{list(s['shape']) if 'shape' in s else ''}")
    return " ".join(parts)


def full_stats(s: dict | None) -> str:
    """Every field of a value summary, on one line."""
    if not s:
        return "-"
    parts = []
    if "shape" in s:
        parts.append(f"{s.get('dtype', '')}{list(s['shape'])}")
    for k in ("min", "max", "mean", "std", "norm"):
        if k in s:
            parts.append(f"{k} {num(s[k])}")
    for k in ("nan", "inf"):
        if s.get(k):
            parts.append(f"{k} {s[k]}")
    return " ".join(parts)


# -- a divergence's figures: one source for the problem's detail and the diff ------------

def finding_value(run, finding):
    """The per-node value a divergence finding's figures are read from: its
    node on its own call (`DivergenceDetail.call`), the row the diff view and
    the nodes table show (`Run.node_values`); None when the run kept none
    for it (no per-node values, another call, an output-only finding).

    The finding's own numbers come from the stage that first diverged; the
    row's from the compile that gave every intermediate (a random op draws
    anew in each compile, so the two can differ): every view shows the row's.
    A query (``run`` is a `graphdbg.runfile.query.Run`): from a worker thread.
    """
    if finding.kind != "divergence" or finding.graph_id is None or not finding.node:
        return None
    call = getattr(finding.detail, "call", None)
    if call is not None and call not in run.node_value_calls(finding.graph_id):
        return None
    nodes = [n for n in run.node_page(finding.graph_id, 0, None, find=finding.node)
             if n.name == finding.node]
    if not nodes:
        return None
    return run.node_values_at(finding.graph_id, [nodes[0].idx], call).get(nodes[0].idx)


# labels of a value's errors, in the order the views show them
ERROR_LABELS = (("max_abs", "max abs"), ("max_rel", "max rel"),
                ("eager_vs_fp64", "eager vs float64"), ("compiled_vs_fp64", "compiled vs float64"))


def value_errors(v) -> list[tuple[str, str]]:
    """A per-node value's errors as (label, text), written as the diff view
    writes them (`num`, three digits): max abs, max rel, each side against
    float64."""
    return [(label, num(getattr(v, key))) for key, label in ERROR_LABELS]


def value_source(v) -> str:
    """Which call a per-node value is of and where its compiled side came
    from: "graph 1, call 0; compiled value from intermediate outputs (inductor)"."""
    came = (f"compiled value from {v.compiled_from}" if v.compiled_from
            else "compiled value not known")
    return f"graph {v.graph_id}, call {v.call_idx}; {came}"
