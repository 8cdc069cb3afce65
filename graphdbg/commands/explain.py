"""`graphdbg explain [KIND]`: what a kind of finding means and what to do."""

from __future__ import annotations

import argparse

from ..core.errors import GraphdbgError
from .output import console, print_trimmed


class ExplainCommand:
    name = "explain"
    order = 25

    def prepare_parser(self, subparsers: argparse._SubParsersAction) -> None:
        p = subparsers.add_parser(
            "explain", help="what a kind of problem means and what to do about it",
            description="Explain a kind of finding, as `graphdbg report` names it (graph_break, "
                        "recompile, compile_error, malformed_graph, divergence, nan_inf, "
                        "runtime_error, check_skipped, export_specialized), or a kind of "
                        "divergence (miscompile, precision, random, nonfinite, aliasing, "
                        "shape, dtype): what happened, what to do, where graphdbg puts it. "
                        "Without KIND, lists them.",
            epilog="examples: graphdbg explain graph_break · graphdbg explain miscompile")
        p.add_argument("kind", nargs="?", metavar="KIND",
                       help="a finding's kind or a divergence's classification")

    def run(self, args: argparse.Namespace) -> int:
        from ..analysis.kinds import CLASSIFICATIONS, KINDS, lookup, suggest
        from rich.console import Group
        from rich.markup import escape
        if args.kind is None:
            lines = ["[bold]Kinds of finding[/] (graphdbg explain KIND):"]
            lines += [f"  [bold]{k}[/]: {escape(e.title)}" for k, e in KINDS.items()]
            lines += ["", "[bold]Kinds of divergence[/] (graphdbg explain KIND):"]
            lines += [f"  [bold]{k}[/]: {escape(e.title)}" for k, e in CLASSIFICATIONS.items()]
            print_trimmed(console(), Group(*lines))
            return 0
        e = lookup(args.kind)
        if e is None:
            near = suggest(args.kind)
            raise GraphdbgError(
                f"no kind {args.kind!r}" + (f"; did you mean {near}?" if near else "")
                + " (`graphdbg explain` lists them)", exit_code=2)
        print_trimmed(console(), _page(e))
        return 0


def _page(e):
    """An explanation as the terminal shows it: title, what, what to do, where."""
    from rich.console import Group
    from rich.markup import escape
    from rich.padding import Padding
    from rich.table import Table
    from rich.text import Text
    todo = Table.grid(padding=(0, 1, 0, 0))
    todo.add_column(no_wrap=True)
    todo.add_column()
    for way in e.todo:
        todo.add_row(Text("-", style="green"), Text(way))
    return Group(f"[bold]{escape(e.name)}[/]: {escape(e.title)}", "",
                 Padding(Text(e.what), (0, 0, 0, 2)), "",
                 "[green]what to do:[/]", Padding(todo, (0, 0, 0, 2)), "",
                 f"[cyan]where graphdbg puts it:[/] {escape(e.where)}")


COMMAND = ExplainCommand()
