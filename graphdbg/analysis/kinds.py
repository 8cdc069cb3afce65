"""What each kind of finding means and what to do about it, for
`graphdbg explain KIND` (plain text: no rich, no textual, no SQL).

One entry per kind a run file can hold (`graphdbg.runfile.details.KINDS`; a
test holds the two lists together) and one per kind of divergence (its
`classification`). The report names a finding by its kind
(``▲ graph_break model.py:12``), so what it prints is what `explain` takes.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

__all__ = ["CLASSIFICATIONS", "KINDS", "Explanation", "lookup", "suggest"]


@dataclass(frozen=True)
class Explanation:
    name: str
    title: str              # one line
    what: str               # what happened, in a paragraph
    todo: tuple[str, ...]   # what to do, one way a line
    where: str              # the line graphdbg puts it at


KINDS: dict[str, Explanation] = {e.name: e for e in (
    Explanation(
        "graph_break", "torch.compile stopped its graph at a line it cannot compile",
        "torch.compile turns a function into graphs: the tensor operations it can follow, "
        "compiled as one piece. At code it cannot put into a graph (a print, `.item()`, a "
        "Python `if` on a tensor's value, a call into C code) it ends the graph, runs that "
        "code as ordinary Python, and starts a new graph after it. The program's results "
        "do not change; every call pays for the break, and the compiler cannot optimise "
        "across it.",
        ("each finding's hint names a way out for its cause: print and log outside the "
         "compiled function, keep values as tensors instead of `.item()`, choose with "
         "torch.where or torch.cond instead of an `if` on a tensor",
         "a break outside the hot path may be fine as it is",
         "once they are gone, torch.compile(..., fullgraph=True) makes a new break an error"),
        "the line that broke the graph, with the calls that led there; ×N: how often "
        "torch.compile met it (again for each recompile)"),
    Explanation(
        "recompile", "torch.compile compiled the same function again",
        "A compiled function keeps guards: the things it assumed about its inputs (shapes, "
        "dtypes, Python numbers, a module's `training` flag, ...). A call that breaks a "
        "guard compiles the function again. A few recompiles are normal (train, then eval; "
        "a size that changes once is then compiled for any size); many cost compile time, "
        "and past torch._dynamo.config.recompile_limit (8) the function runs uncompiled.",
        ("the finding says what changed (was, now) and its hint how to keep it from "
         "changing: a size that varies marked dynamic (torch._dynamo.mark_dynamic(x, 0)), a "
         "Python number that varies passed as a tensor",
         "one compile per train()/eval() mode is expected"),
        "the line that made the failed guard where torch records it (the line that reads "
        "the value), else the call of the compiled function"),
    Explanation(
        "compile_error", "a compile failed",
        "torch.compile, torch.export or torch.onnx.export raised while it compiled: an "
        "unsupported construct under fullgraph=True, a shape that contradicts a dynamic "
        "size, a backend that failed on a graph, an op the ONNX exporter cannot translate, "
        "or the recompile limit refusing one more compile.",
        ("read the message and the hint: graphdbg names the line and, for a backend's "
         "failure, the graph node it was working on",
         "`graphdbg report --json` keeps torch's full text and traceback"),
        "the user's line the failure points to (for a backend's failure, the line of the "
        "node it was compiling)"),
    Explanation(
        "malformed_graph", "an FX graph that is not valid",
        "A graph pass (yours, or a custom backend's) left the FX graph broken: a node used "
        "before it is defined, a node erased while still used, a shape or dtype that does "
        "not fit its op. Such graphs fail later with errors that name only FX nodes.",
        ("fix the pass that made the node: the finding names it, and the model line it "
         "came from",
         "graphdbg.check_graph(gm, *inputs) checks a graph in a test"),
        "the line in the pass that made the bad node, the model's line in the hint"),
    Explanation(
        "divergence", "compiled code computed a different value than eager",
        "graphdbg runs each compiled graph's first calls again, eagerly (plain PyTorch, op "
        "by op), and in float64 as a judge. Where compiled and eager differ by more than "
        "the dtype's rounding, it finds the first node that differs, whether that op alone "
        "is wrong on eager's inputs, and the first stage that differs: aot_eager (torch's "
        "own tracing), aot_eager_decomp_partition (torch's decompositions), then your "
        "backend. Its classification says how much it matters: "
        + ", ".join(f"{k} ({v})" for k, v in (
            ("miscompile", "wrong"), ("precision", "rounding, as close to float64"),
            ("random", "different random numbers"), ("nonfinite", "NaN/Inf on one side"),
            ("aliasing", "memory shared on one side"), ("shape", "another shape"),
            ("dtype", "another dtype"))) + " (`graphdbg explain miscompile`, ...).",
        ("a miscompile is a bug of the stage named: report it with the line and op; "
         "meanwhile use a backend that was right, or keep the code out of the compiled "
         "function (torch.compiler.disable)",
         "`graphdbg tui RUN` shows the node's values side by side"),
        "the line of the first node whose value differs (a gradient's: the forward line)"),
    Explanation(
        "nan_inf", "NaN or Inf reached an output, a loss, a parameter or a gradient",
        "NaN/Inf values that arrive somewhere that matters, traced back to the op that "
        "first made them. Infinities that are used up on the way (a mask's -inf before "
        "softmax) are not findings.",
        ("look at the op's inputs at that line: a log or division of 0, an overflow in "
         "float16, a softmax of a fully masked row",
         "a NaN only in gradients: torch.where(x > 0, x.log(), 0) still sends NaN back"),
        "the line of the op that first made them"),
    Explanation(
        "runtime_error", "the program raised an exception",
        "The program's uncaught exception, or a compiled call that raised (then graphdbg "
        "replays the graph node by node and names the node). A Ctrl-C is noted as info, "
        "where the program was stopped.",
        ("read the message at the line; for a compiled call, the node's line is where "
         "eager would have failed",),
        "the raising line in your code (a library keeps its own line, your call in the "
        "stack)"),
    Explanation(
        "check_skipped", "a graph graphdbg did not compare with eager",
        "The comparison would have needed more memory than its budget (--compare-memory, "
        "half the free memory by default), or the graph issues collectives that a second "
        "run would issue again on one rank only.",
        ("raise the budget with --compare-memory, or check a smaller input",
         "graphdbg.compare(model, x) checks one model on one input"),
        "the compiled function's line, or its first collective's"),
    Explanation(
        "export_specialized", "an export fixed a value the program meant to vary",
        "torch.export or torch.onnx.export made a constant of something: a size you "
        "declared dynamic, a branch the trace took (`if x.mean() > 0.5`), an assumption of "
        "draft_export, an assertion the ONNX program dropped. The exported program then "
        "accepts, or computes right, only what the example inputs showed.",
        ("keep sizes symbolic: -1 or x.shape[0] in view/reshape, not a number",
         "a branch on a tensor: torch.cond, or torch.where for both sides"),
        "the line that fixed it"),
)}

CLASSIFICATIONS: dict[str, Explanation] = {e.name: e for e in (
    Explanation(
        "miscompile", "a divergence: compiled code is wrong",
        "Compiled differs from eager beyond rounding, and float64 sides with eager. If the "
        "op alone is wrong on eager's inputs, the backend (or the stage named) computes it "
        "wrongly; if it is right alone, the error comes from how ops were fused or from "
        "earlier nodes.",
        ("report it with the line and op to the stage's authors (torch for aot_eager and "
         "the decompositions)",
         "meanwhile compile with a backend that was right, or keep the code out of the "
         "compiled function (torch.compiler.disable)"),
        "the first node whose value differs"),
    Explanation(
        "precision", "a divergence from rounding, not an error",
        "Compiled and eager differ, but compiled is as close to float64 as eager or "
        "closer: inductor keeps low-precision intermediates in float32 where eager rounds "
        "each op to bfloat16 or float16.",
        ("nothing to fix; torch._inductor.config.emulate_precision_casts = True rounds "
         "like eager",),
        "the first node beyond its dtype's tolerance"),
    Explanation(
        "random", "a divergence of random numbers, not an error",
        "A random op (dropout in training, torch.rand) draws other numbers compiled than "
        "eager: the compiled graph has its own random stream. graphdbg checks the rest of "
        "the graph with the compiled draws replayed.",
        ("nothing to fix; torch._inductor.config.fallback_random = True makes inductor "
         "draw as eager does",),
        "the random op's line"),
    Explanation(
        "nonfinite", "a divergence where one side is NaN/Inf",
        "NaN or Inf on one side only. Made by compiled code: an error. Made by eager where "
        "float64 is finite (a float16 overflow that compiled code avoids): the program's "
        "own, a warning.",
        ("see the side named; `graphdbg explain nan_inf` for where NaNs come from",),
        "the node where that side first made them"),
    Explanation(
        "aliasing", "an output shares memory with an input on one side only",
        "In eager an output is a view of an input (or not) and the compiled graph differs: "
        "writing to one then changes the other on one side only.",
        ("return x.clone() where the output must not alias the input",),
        "the compiled function's line"),
    Explanation(
        "shape", "compiled and eager give outputs of different shapes",
        "A real error of the compiled code or an export: the same node's value has another "
        "shape.", ("report it with the line and op",), "the first node that differs"),
    Explanation(
        "dtype", "compiled and eager give outputs of different dtypes",
        "A real error of the compiled code or an export: the same node's value has another "
        "dtype.", ("report it with the line and op",), "the first node that differs"),
)}


def lookup(name: str) -> Explanation | None:
    """The explanation of a kind or a classification, as the user may type it
    ("graph break", "graph-break", "Graph_Break")."""
    key = "_".join(name.strip().lower().replace("-", " ").split())
    return KINDS.get(key) or CLASSIFICATIONS.get(key)


def suggest(name: str) -> str | None:
    """The known name nearest to a misspelt one, if any is near."""
    key = "_".join(name.strip().lower().replace("-", " ").split())
    near = difflib.get_close_matches(key, [*KINDS, *CLASSIFICATIONS], n=1, cutoff=0.6)
    return near[0] if near else None
