"""The words the report and the TUI share, as plain text (no rich, no
textual, no SQL): what a graph's backend and model are called, what an export
is in one line, a hint with its ways out, the sizes an export fixed, which
findings get a caret, the names of the compile phases. `graphdbg report`
wraps them in markup; the TUI shows them as they are, so the two never word
the same thing differently.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ..core.format import brief, num

if TYPE_CHECKING:
    from typing import Iterable

    from ..runfile.query import Graph

__all__ = ["CARET_KINDS", "PHASE_LABELS", "STAGE_WORDS", "backend_label", "divergence_sentences",
           "compiled_before_text", "export_text", "graph_name", "hint_and_fixes", "model_name",
           "says_message", "size_name",
           "specialized_lines", "specialized_text"]

# findings whose line gets a caret even without its span (the whole line's code):
# the line that failed
CARET_KINDS = ("compile_error", "runtime_error", "malformed_graph")

# a compile's phases, as `Run.compile_times()` names them
PHASE_LABELS = {"dynamo": "Dynamo", "graphdbg": "graphdbg", "backend": "backend", "aot": "AOT",
                "cache": "cache load", "lowering": "lowering", "codegen": "codegen",
                "cpp": "C++ compile"}


def hint_and_fixes(hint: str | None, fixes: list | None) -> tuple[str | None, list[str]]:
    """A hint, and the ways out a finding lists one by one (`detail.fixes`,
    an ONNX translation's): the hint's own run-on list of them left out."""
    if not fixes:
        return hint, []
    if hint and " Ways out: " in hint:
        hint = hint.split(" Ways out: ", 1)[0] + " Ways out:"
    return hint, [str(x) for x in fixes]


def compiled_before_text(compiled_before: dict | None) -> str | None:
    """A capture that ran code Dynamo compiled before it started (a notebook
    cell run again): what the run lacks, and the way out."""
    if not compiled_before:
        return None
    n = compiled_before.get("graphs") or 0
    what = (f"{n} graph{'s were' if n != 1 else ' was'} compiled before this capture" if n
            else "code compiled before this capture ran in it")
    return (f"{what}: their breaks and recompiles are not in it, nor their ops "
            f"(graphdbg.capture(reset=True), or %%graphdbg --reset, recompiles them under "
            f"the capture)")


def size_name(s: dict) -> str:
    """The name of a size an export fixed, in the program's words
    (`x.size()[0]`, from its source `L['x'].size()[0]`), else its symbol."""
    src = s.get("size") or s.get("source")
    if src:
        return re.sub(r"\bL\[['\"]([^'\"]+)['\"]\]", r"\1", str(src))
    return str(s.get("symbol") or "?")


def specialized_text(items: list | None) -> str | None:
    """"x.size()[0] = 4 at model.py:12 (Dim.AUTO)", for each size an export fixed."""
    if not items:
        return None
    parts = []
    for s in items:
        at = f" at {brief(s['file'])}:{s.get('line')}" if s.get("file") else ""
        how = f" (declared {s['declared']})" if s.get("declared") else ""
        parts.append(f"{size_name(s)} = {s.get('value')}{at}{how}")
    return ", ".join(parts)


def specialized_lines(items: list | None) -> list[str]:
    """A failed export's sizes fixed while it ran (`detail.specialized`)."""
    text = specialized_text(items)
    return [f"sizes fixed while it ran: {text}"] if text else []


# the export function a graph's name ends with: "Net (torch.onnx.export(dynamo=False))"
_VIA_SUFFIX = re.compile(r" \(torch\.[^()]*(?:\([^()]*\))?\)$")
TORCHSCRIPT = "torch.onnx.export(dynamo=False)"


def model_name(g: Graph) -> str:
    """An export's model ("Block"), without the "(torch.onnx.export)" its
    function name ends with, whichever export made it (the export line says
    it); a compiled graph's function."""
    name = g.function or "?"
    if g.export is not None:
        name = _VIA_SUFFIX.sub("", name)
    return name


def graph_name(g: Graph, with_compile_id: bool = False,
               compile_ids: Iterable[str | None] | None = None) -> str:
    """A graph's name in the graphs table: its function (`model_name`), a
    DDP bucket's place ("forward · bucket 2/3"), a recompile said plainly
    ("forward (recompile 1)": torch's "0/1", function 0's compile 1) where
    the compile id is not shown beside it (``with_compile_id``: it is).
    ``compile_ids``: the run's; a compile whose function has no earlier
    compile among them is not called a recompile (a capture that began after
    the first compile, or `compare`'s own compile of a compiled model)."""
    name = model_name(g)
    b = g.ddp_bucket
    if b is not None:
        name += f" · bucket {b['index'] + 1}/{b['count']}"
    elif not with_compile_id:
        fc = _frame_compile(g.compile_id)
        if fc is not None and fc[1] > 0 and (compile_ids is None or any(
                (o := _frame_compile(c)) is not None and o[0] == fc[0] and o[1] < fc[1]
                for c in compile_ids)):
            name += f" (recompile {fc[1]})"
    return name


def _frame_compile(compile_id: str | None) -> tuple[int, int] | None:
    """(frame, compile) of torch's compile id "0/1" ("[0/1]", "0/1_1"...)."""
    m = re.match(r"\[?(?:!\d+/)?(\d+)/(\d+)", compile_id or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def backend_label(g: Graph) -> str:
    """The backend column: the backend; for an export, what made it
    ("onnx (opset 20)", "torch.export")."""
    e = g.export
    if e is None:
        return g.backend or "?"
    if g.kind == "onnx":
        return f"onnx (opset {e['opset']})" if e.get("opset") is not None else "onnx"
    return "torch.export" + (" (strict)" if e.get("strict") else "")


def export_text(g: Graph, checked_calls: list[int] | None = None,
                divergences: int = 0) -> str | None:
    """What an exported graph is, in one line: what was exported where, with
    what, the ONNX model (opset, nodes), whether ONNX Runtime checked it
    against eager and how (``checked_calls``: the calls with per-node values,
    checked node by node; a TorchScript export's, which has no FX graph: the
    program's InferenceSession runs, by their outputs), the sizes declared
    dynamic and those the export fixed. None for a compiled graph."""
    e = g.export
    if e is None:
        return None
    via = e.get("via") or ("torch.onnx.export" if g.kind == "onnx" else "torch.export.export")
    where = f"{brief(g.file)}:{g.line}" if g.file else "?"
    took = f" in {g.backend_time_s:.2f} s" if g.backend_time_s else ""
    parts = []
    if g.kind == "onnx":
        head = f"ONNX: graph {g.id} is {model_name(g)} exported by {via} at {where}{took}"
        traced = via == TORCHSCRIPT   # no FX graph: the nodes are the ONNX file's
        nodes = e.get("onnx_nodes")
        parts.append(", ".join(p for p in (
            f"opset {e['opset']}" if e.get("opset") is not None else None,
            None if nodes is None else
            f"{_n(nodes, 'ONNX node')} in the file the trace wrote (no FX graph)" if traced else
            f"{_n(nodes, 'ONNX node')} from {_n(g.n_ops, 'FX op')}") if p))
        runtime = e.get("runtime")
        if e.get("not_checked"):
            parts.append(f"not checked against eager: {e['not_checked']}")
        elif runtime and traced:
            parts.append(
                f"its {_n(g.calls, 'call')} are the program's InferenceSession runs on its "
                f"file in {runtime}, checked against the model's eager forward output by output "
                "(line by line where they differ)"
                if g.calls else
                f"runs in {runtime}; checked only through an InferenceSession the program "
                "opens on its file (none ran)")
        elif runtime and (checked_calls or divergences):
            calls = ", by its outputs"
            if checked_calls:
                named = [f"{c} (the example inputs)" if c == 0 else str(c) for c in checked_calls]
                calls = (f", node by node on call{'s' if len(named) > 1 else ''} "
                         + (", ".join(named[:-1]) + " and " if len(named) > 1 else "") + named[-1])
            parts.append(f"checked against eager in {runtime}{calls}")
        elif runtime:
            parts.append(f"runs in {runtime}, not checked against eager")
        else:
            parts.append("no ONNX Runtime: not checked against eager")
        if g.calls and not traced:
            parts.append("its calls ran in ONNX Runtime (the ONNX program's, or an "
                         "InferenceSession's on its file, whose first runs are checked against "
                         "the model by their outputs, node by node when they differ)")
    else:
        head = (f"torch.export: graph {g.id} is {model_name(g)} exported by {via} at {where}"
                f" ({'strict' if e.get('strict') else 'non-strict'}){took}")
        parts.append(_n(g.n_nodes, "FX node"))
        if g.calls:
            parts.append("its calls ran the exported program (ep.module())")
    dynamic = e.get("dynamic") or {}
    if dynamic:
        parts.append("dynamic: " + ", ".join(f"{k} ({v})" for k, v in dynamic.items()))
    fixed = specialized_text(e.get("specialized"))
    if fixed:
        parts.append(f"specialised: {fixed}")
    return f"{head}: " + "; ".join(p for p in parts if p)


def _n(n: int | None, what: str) -> str:
    return f"{n if n is not None else '?'} {what}{'' if n == 1 else 's'}"


# -- a divergence in sentences ---------------------------------------------------------

# the stages of graphdbg's ladder before the user's backend, glossed once
STAGE_WORDS = {"aot_eager": "aot_eager (torch's own tracing, no backend)",
               "aot_eager_decomp_partition": "aot_eager_decomp_partition (torch's "
                                             "decompositions, as inductor gets them)"}


def says_message(d) -> bool:
    """Whether `divergence_sentences` says all that a compiled graph's
    divergence message says (the op, how it differs; its stage is the
    advice's): then a view may show the sentences alone."""
    return bool(d.classification in ("miscompile", "precision", "random")
                and d.direction != "backward" and not d.exported and not d.branch
                and d.target and d.max_abs is not None and d.other_side == "compiled")


def divergence_sentences(d, full: bool = False, stage: bool = True) -> list[str]:
    """A divergence (`DivergenceDetail`) in plain sentences: by how much the
    values differ and at which node (naming the op where `says_message`),
    whether the op is wrong on its own inputs, which side float64 sides
    with, and (``stage``) which stage of the ladder (aot_eager, torch's
    decompositions, the user's backend) first differs; ``full`` adds how it
    was localised. What is unknown is left out."""
    other = d.other_side
    where = f"node {d.node}" if d.node else (d.target or "the output")
    if d.module_path:
        where += f" in {d.module_path}" + (f" ({d.module_class})" if d.module_class else "")
    out = []
    iso = d.isolated or {}
    alone = ("" if not iso.get("decided") else
             ", where the op alone, on eager's inputs, is wrong too" if iso.get("diverges")
             else ", where the op alone, on eager's inputs, is right (the difference comes "
                  "from the ops before it, or from how they were fused)")
    if d.max_abs is not None and says_message(d) and d.classification == "random":
        out.append(f"Compiled {d.target} draws other random numbers than eager: up to "
                   f"{num(d.max_abs)} apart at {where}; that alone is no bug.")
    elif d.max_abs is not None:
        rel = (f" ({d.max_rel * 100:.2g}%)"
               if d.max_rel is not None and d.max_rel < 1 and d.classification != "random"
               else "")
        tail = "; that alone is no bug" if d.classification == "random" else alone
        head = (f"Compiled {d.target} differs from eager by up to" if says_message(d)
                else "Off by up to")
        out.append(f"{head} {num(d.max_abs)}{rel} at {where}{tail}.")
    elif alone:
        out.append(f"At {where}{alone}.")
    e, c = d.eager_vs_fp64, d.compiled_vs_fp64
    judge = "float64 (the same graph in double precision)"
    if d.nonfinite_side and d.fp64_finite is not None:
        out.append(f"{judge[0].upper()}{judge[1:]} is "
                   f"{'finite' if d.fp64_finite else 'NaN/Inf too'} there.")
    elif d.classification != "random" and e is not None and c is not None:
        if c > e:
            out.append(f"{judge[0].upper()}{judge[1:]} sides with eager (error {num(e)}; "
                       f"{other}: {num(c)}).")
        elif e > c:
            out.append(f"{judge[0].upper()}{judge[1:]} sides with {other} (error {num(c)}; "
                       f"eager: {num(e)}): {other} is the more exact.")
        else:
            out.append(f"Eager and {other} are as far from {judge}.")
    said = _stage_sentence(d) if stage else None
    if said:
        out.append(said)
    if full:
        if d.compiles is not None:
            how = f" ({d.method})" if d.method else ""
            out.append(f"Localised with {d.compiles} extra compile{'s' if d.compiles != 1 else ''}"
                       f"{how}.")
        if d.output_max_abs is not None:
            out.append(f"At the graph's output: up to {num(d.output_max_abs)} off.")
        if d.undecided:
            out.append(f"Not decided: {'; '.join(map(str, d.undecided))[:200]}.")
    return out


def _stage_sentence(d) -> str | None:
    if not d.stage:
        return None
    stages = list((d.compiles_by_stage or {}).keys())
    if d.exported or d.stage not in stages:
        return f"Found in {d.stage}."
    right = stages[:stages.index(d.stage)]

    def gloss(s: str) -> str:
        return STAGE_WORDS.get(s, f"the backend {s}")
    if right:
        return (f"Right with {' and '.join(gloss(s) for s in right)}; first different with "
                f"{gloss(d.stage)}.")
    return f"Already different with {gloss(d.stage)}."
