"""`graphdbg diff A B` as text: renders what `graphdbg.analysis.diff` found."""

from __future__ import annotations

from ..analysis.diff import RAN, ExportPair, RunDiff, RunSide
from ..analysis.values import stats_text
from ..core.format import at, brief, ms, num


def export_pair_line(e: ExportPair) -> str:
    """An exported graph against its counterpart, as rich markup on one line."""
    from rich.markup import escape
    what = "ONNX" if e.kind == "onnx" else "torch.export"
    where = f"{brief(e.file)}:{e.line}" if e.file else "?"
    head = f"{what} {escape(e.function or '?')} at [cyan]{escape(where)}[/]"
    if e.a is None or e.b is None:
        return (f"[yellow]▲ {head}: only in run {'A' if e.b is None else 'B'} "
                f"(graph {e.a if e.b is None else e.b})[/]")
    parts = [f"graph {e.a} in A, {e.b} in B"]
    if e.nodes[0] != e.nodes[1]:
        parts.append(f"FX nodes {e.nodes[0]} → {e.nodes[1]}")
    if e.kind == "onnx":
        if e.opset[0] != e.opset[1]:
            parts.append(f"opset {e.opset[0]} → {e.opset[1]}")
        if e.onnx_nodes[0] != e.onnx_nodes[1]:
            parts.append(f"ONNX nodes {e.onnx_nodes[0]} → {e.onnx_nodes[1]}")
        for c in e.ops_changed[:3]:
            a, b = (", ".join(c[side] or ["-"]) for side in ("a", "b"))
            parts.append(f"{c['node']}: {a} → {b}")
        if len(e.ops_changed) > 3:
            parts.append(f"{len(e.ops_changed) - 3} more nodes translated otherwise")
        fa, fb = e.first_divergent
        if fa != fb:
            parts.append(f"diverges from eager at {fa or 'no node'} in A, {fb or 'no node'} in B")
    text = escape("; ".join(parts))
    if e.value is not None:
        v = e.value
        why = (" (eager differs there too: other inputs or model)" if v["eager_differs"]
               else " (eager agrees: the translation)")
        return (f"[red]✖ {head}: ONNX Runtime values differ first at node {escape(v['node'])} "
                f"(call {v['call']}, rel {v['rel_diff']:.3g}){escape(why)}[/]; {text}")
    same = " (same ONNX Runtime values)" if e.kind == "onnx" and not e.ops_changed else ""
    return f"[green]●[/] {head}: {text}{same}"


def _side(name: str, s: RunSide) -> str:
    from rich.markup import escape
    # a program that failed is said first: its run holds what it did before
    failed = f"[red]its program exited {s.exit_status}[/], " if s.exit_status else ""
    return (f"{name}={escape(s.file)} ({failed}stance {s.stance or 'default'}, "
            f"{s.graphs} graph{'' if s.graphs == 1 else 's'}, {s.ops} eager ops)")


def _code(console, line: int | None, code: str | None) -> None:
    from rich.markup import escape
    if code and line is not None:
        console.print(f"    [dim]{line:>5} │[/] {escape(code.strip())}")


def render(diff: RunDiff, console) -> None:
    """`graphdbg diff` as text on a rich console."""
    from rich.markup import escape
    from rich.table import Table

    console.print(f"[bold]graphdbg diff[/] {_side('A', diff.a)}  {_side('B', diff.b)}")
    steps = (f"in the same step ({diff.steps} steps)" if diff.steps is not None
             else "over the whole run (the runs do not count steps alike)")
    console.print(f"paired {diff.aligned_ops} eager ops by user call path, op and occurrence "
                  f"{steps}; {diff.only_in_a} only in A, {diff.only_in_b} only in B")
    first = diff.first_divergence
    console.print()
    if first:
        step = f" in step {first.step}" if first.step is not None else ""
        console.print(f"[red]✖ first divergence ({first.what})[/] at "
                      f"[cyan]{escape(at(first.file, first.line))}[/]: {escape(first.op)} "
                      f"({first.phase or '-'}, occurrence {first.occurrence}{step})")
        _code(console, first.line, first.code)
        if first.what == "shape":
            a, b = str(first.a), str(first.b)
        else:
            a, b = stats_text(first.a), stats_text(first.b)
            console.print(f"    output {first.output}, relative difference {num(first.rel_diff)}")
        console.print(f"    A: {escape(a)}\n    B: {escape(b)}")
    else:
        console.print("[green]● no value or shape difference among paired eager ops[/]")
    for g in diff.graph_boundaries:
        what = {"onnx": "ONNX program of graph", "export": "exported program of graph"}.get(
            g.kind, "compiled graph")
        step = f" in step {g.step}" if g.step is not None else ""
        console.print(f"[red]✖ {what} {g.graph} (run {g.compiled_in}) output {g.output} "
                      f"differs[/] at [cyan]{escape(at(g.file, g.line))}[/], call {g.call}{step}")
        _code(console, g.line, g.code)
        side = {"onnx": "ONNX RT:", "export": "exported:"}.get(g.kind, "compiled:")
        eager = f"eager ({g.eager_op}):" if g.eager_op else "eager:"
        width = max(len(side), len(eager))
        console.print(f"    {side:<{width}} {escape(stats_text(g.compiled))}\n"
                      f"    {escape(eager):<{width}} {escape(stats_text(g.eager))}   "
                      f"relative difference {num(g.rel_diff)}")
        o = g.origin
        if o is not None:
            verdict = f" ({o['classification']})" if o.get("classification") else ""
            console.print(f"    run {g.compiled_in}'s own check places it at "
                          f"[cyan]{escape(at(o['file'], o['line']))}[/]{escape(verdict)}"
                          + (f", node {escape(o['node'])}" if o.get("node") else ""))
            _code(console, o["line"], o.get("code"))
    if diff.compared_outputs or diff.unpaired_outputs:
        n = diff.compared_outputs
        console.print(f"[dim]{n} compiled output{'s' if n != 1 else ''} compared with the eager "
                      f"op that computed {'them' if n != 1 else 'it'}"
                      + (f"; {diff.unpaired_outputs} without one to pair with (not compared)"
                         if diff.unpaired_outputs else "") + "[/]")
    if diff.compiled_in_one_run:
        c = diff.compiled_in_one_run[0]
        how = " or ".join(RAN[k] for k in RAN if any(x.kind == k for x in diff.compiled_in_one_run))
        console.print(f"{len(diff.compiled_in_one_run)} lines ran {how} in one run and eagerly "
                      f"in the other (e.g. {escape(brief(c.file))}:{c.line}): not compared op "
                      f"by op")
    for e in diff.exports:
        console.print(export_pair_line(e))
    if diff.timing:
        console.print()
        console.rule("Time per source line (eager ops + compiled calls)", align="left")
        t = Table(box=None, header_style="bold", pad_edge=False)
        for col, just in (("where", "left"), ("A", "right"), ("B", "right"), ("B-A", "right")):
            t.add_column(col, justify=just)
        for r in diff.timing[:10]:
            sign = "+" if r.delta_ns >= 0 else "-"
            t.add_row(escape(f"{brief(r.file)}:{r.line}"), ms(r.a_ns), ms(r.b_ns),
                      sign + ms(abs(r.delta_ns)))
        console.print(t)
