"""What to do about a finding, in graphdbg's words where torch's are generic
(plain text: no rich, no textual, no SQL).

A graph break's hint is torch's, as Dynamo wrote it: for a `print` in a
compiled forward it says "Consider using an equivalent alternative
function/method to `print`"; many breaks end in "Please report an issue to
PyTorch". `what_to_do` drops those lines and, for the breaks a newcomer
meets first (`print`, `.item()`, an `if` on a tensor), says what works
instead (each way out checked under torch.compile: tests/e2e/test_report_demo.py).
The run file keeps torch's text as it was (`graphdbg report --json`).
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

__all__ = ["Advice", "what_to_do"]


class Advice(NamedTuple):
    hint: str | None          # one line: what it is, or what to do
    fixes: list[str]          # ways out, one a line
    own: bool = False         # graphdbg's words for the cause (torch's explanation adds nothing)


# torch's hint lines that say nothing about this program (torch 2.13's graph
# break registry, torch/_dynamo/graph_break_registry.json: the most common)
_GENERIC_LINES = [re.compile(p) for p in (
    r"^Please (?:report|file) an issue (?:to|on|with) PyTorch\.?$",
    r"^Please open an issue\.?$",
    r"^This graph break is fundamental - it is unlikely that Dynamo will ever be able to trace "
    r"through your code\. Consider finding a workaround\.$",
    r"^It may be possible to write Dynamo tracing rules for this code\.",
    r"^This graph break may be difficult to debug\. Please report an issue to PyTorch",
)]
# generic sentences inside a line that has something else to say
_GENERIC_SENTENCES = [re.compile(p) for p in (
    r"\s*Consider using an equivalent alternative function/method to `[^`]*`\.",
)]
# torch's long way of saying a thing graphdbg can say with its own command
_REWORDED = [(re.compile(r"^Your code may result in an error when running in eager\..*"),
              "It may fail without torch.compile too: `graphdbg run --stance force_eager "
              "SCRIPT` runs it eagerly (torch.compiler.set_stance(\"force_eager\"))")]

_PRINT = "builtin operator `print`"
_PRINT_HINT = "print() cannot go into a graph: the graph breaks here."
_PRINT_FIXES = [
    "move it out of the compiled function (print what the function returns)",
    "or guard it: if not torch.compiler.is_compiling(): print(...)",
    "or print after the graph runs (tensors, numbers and strings only): "
    "torch._dynamo.config.reorderable_logging_functions.add(print)",
]

_OPAQUE_HINT = ("torch.compile cannot look inside this function (a Python builtin or C code): "
                "the graph breaks at the call.")
_OPAQUE_FIXES = [
    "call it outside the compiled function and pass its result in",
    "for C/C++ code that works on tensors: make it a custom op (torch.library.custom_op), "
    "which a graph can hold",
]

# torch's graph-break ids (stable across releases: gbNNNN) that get graphdbg's words
_BREAKS: dict[str, tuple[str, list[str]]] = {
    # Tensor.item() without capture_scalar_outputs
    "gb0124": ("`.item()` turns a tensor into a Python number, which a graph cannot hold: "
               "the graph breaks here.", [
                   "use the value as a tensor where you can (x.norm(), not x.norm().item())",
                   "if the number is only printed or logged, do that outside the compiled "
                   "function, or skip it while compiling (torch.compiler.is_compiling())",
                   "or torch._dynamo.config.capture_scalar_outputs = True keeps .item() in "
                   "the graph (printing or formatting the number still breaks it)"]),
    # data-dependent branching: `if x.sum() > 0:`
    "gb0170": ("A Python `if` on a tensor's value needs that value in Python, which a graph "
               "cannot give: the graph breaks here.", [
                   "compute both sides and pick with torch.where(cond, a, b)",
                   "or torch.cond(pred, true_fn, false_fn, operands) for a branch that must "
                   "stay a branch",
                   "or do the check outside the compiled function"]),
}


def what_to_do(kind: str, hint: str | None, detail: Any = None,
               fixes: list | None = None) -> Advice:
    """(hint, ways out) of a finding as the views show it: graphdbg's advice
    for the causes it knows, else the finding's hint without torch's generic
    lines (its first remaining line the hint, the others ways out, with the
    detail's own ``fixes``)."""
    if kind == "graph_break":
        own = _graph_break(hint, detail)
        if own is not None:
            return own
    if kind == "divergence":
        own = _divergence(hint, detail)
        if own is not None:
            return own
    lines = [ln for ln in (_plain(ln) for ln in (hint or "").splitlines()) if ln]
    if fixes:
        first = lines[0] if lines else None
        if first and " Ways out: " in first:
            first = first.split(" Ways out: ", 1)[0] + " Ways out:"
        return Advice(first, [str(x) for x in fixes])
    if not lines:
        if kind == "graph_break" and hint:
            return Advice("If this break costs time, move the code out of the compiled "
                          "function (graphdbg explain graph_break).", [])
        return Advice(None, [])
    return Advice(lines[0], lines[1:])


def _plain(line: str) -> str:
    line = line.strip()
    if any(p.search(line) for p in _GENERIC_LINES):
        return ""
    for p, own in _REWORDED:
        if p.search(line):
            return own
    for p in _GENERIC_SENTENCES:
        line = p.sub("", line)
    return line.strip()


def _graph_break(hint: str | None, detail: Any) -> Advice | None:
    if getattr(detail, "expected_in", None):
        return None   # DDP's or FSDP's own break: graphdbg's hint already
    gb_id = getattr(detail, "gb_id", None)
    explanation = getattr(detail, "explanation", None) or ""
    if gb_id == "gb0059" and _PRINT in explanation or "builtin `print`" in (hint or ""):
        return Advice(_PRINT_HINT, list(_PRINT_FIXES), True)
    if gb_id in _BREAKS:
        text, fixes = _BREAKS[gb_id]
        return Advice(text, list(fixes), True)
    if gb_id == "gb0007" and "either a Python builtin" in explanation:
        # a builtin or a C extension (zlib.crc32): torch's "file an issue on GitHub" first
        return Advice(_OPAQUE_HINT, list(_OPAQUE_FIXES), True)
    return None


def _divergence(hint: str | None, d: Any) -> Advice | None:
    """A miscompile placed in one stage: who to tell, and how to go on meanwhile."""
    if getattr(d, "classification", None) != "miscompile" or getattr(d, "exported", None):
        return None
    stages = list((d.compiles_by_stage or {}).keys())
    if not d.stage or d.stage not in stages:
        return None
    right = stages[:stages.index(d.stage)]
    op = d.target or "this op"
    alone = (d.isolated or {}).get("decided") and (d.isolated or {}).get("diverges")
    if d.stage == "aot_eager_decomp_partition":
        return Advice(f"A bug in torch's decomposition of {op}: report it to PyTorch with this "
                      f"line and op.", [f'meanwhile, backend="{right[0]}" was right here'] if right
                      else [], True)
    if d.stage == "aot_eager":
        return Advice(f"Torch's own tracing changes {op}, before any backend: report it to "
                      f"PyTorch with this line and op.", [], True)
    if not right:
        return None
    why = "" if alone else f" ({op} alone is right: how it was fused, or earlier rounding)"
    return Advice(f"Report it to {d.stage}'s authors{why}, with this line and op.",
                  [f'meanwhile, backend="{right[0]}" was right here; or keep this code out of '
                   f"the compiled function (torch.compiler.disable)"], True)
