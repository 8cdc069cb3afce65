"""`graphdbg repro RUN [FINDING]`: a small standalone script that reproduces
a finding, checked in a fresh process before it is offered (docs/repro.md)."""

from __future__ import annotations

import argparse
import os

from ..core.errors import GraphdbgError
from .output import console


class ReproCommand:
    name = "repro"
    order = 22

    def prepare_parser(self, subparsers: argparse._SubParsersAction) -> None:
        p = subparsers.add_parser(
            "repro", help="write a small standalone script that reproduces a finding",
            description="Write repro.py, its inputs (safetensors) and a two-line README.md for "
                        "a finding of RUN: a divergence (the smallest subgraph that still "
                        "diverges, run eager, compiled and in float64), a compile error or a "
                        "malformed graph (the graph with inputs of the recorded shapes, "
                        "raising the same exception), a graph break or a recompile (the "
                        "function with the break or the guard cut out of your file's snapshot "
                        "when it is self-contained, called with arguments rebuilt from "
                        "Dynamo's guards). The script imports only torch, "
                        "safetensors and the standard library. It is run in a fresh python "
                        "before it is offered; one that does not reproduce is kept in "
                        "attempt/ and graphdbg says why (exit 1).",
            epilog="examples: graphdbg repro app.run · graphdbg repro app.run 2 -o bug/")
        p.add_argument("run", metavar="RUN", help="a run file")
        p.add_argument("finding", nargs="?", type=int, metavar="FINDING",
                       help="the finding's number, as `graphdbg report` lists them from 1 "
                            "(default: the first error)")
        p.add_argument("-o", "--output", metavar="DIR",
                       help="the folder to write (default: repro-<kind>-<n>/ beside RUN)")
        p.add_argument("--timeout", type=float, default=60.0, metavar="S",
                       help="seconds the check run of the script may take (default: 60)")

    def run(self, args: argparse.Namespace) -> int:
        from ..repro.make import default_folder, make
        from ..repro.plan import plan
        from ..runfile.query import Run
        if os.path.isdir(args.run):
            raise GraphdbgError(f"{args.run} is a folder: name a run file in it "
                                f"(graphdbg report {args.run} lists its newest)", exit_code=2)
        if not os.path.isfile(args.run):
            raise GraphdbgError(f"no run file {args.run!r}", exit_code=2)
        if args.output and os.path.exists(args.output) and not os.path.isdir(args.output):
            raise GraphdbgError(f"-o {args.output}: a file is there, not a folder", exit_code=2)
        with Run(args.run) as run:
            p = plan(run, args.finding)
        out = console()
        folder = args.output or default_folder(args.run, p)
        if p.note:
            out.print(f"[yellow]note:[/] {_esc(p.note)}")
        with out.status(f"checking the repro of finding {p.number} ({p.kind}) in a fresh python…"):
            r = make(p, args.run, folder, args.timeout)
        if not r.ok:
            out.print(f"[red]did not reproduce:[/] {_esc(r.why or '')}")
            if r.output:
                out.print(_esc("\n".join("  " + ln for ln in r.output.splitlines()[-12:])))
            out.print(f"the attempt is kept in {_esc(_short(r.folder))}")
            return 1
        out.print(_esc(r.output))
        out.print(f"[green]reproduced[/] in {r.seconds:.1f} s: {_esc(p.what)}")
        shown = _short(folder)
        out.print(f"wrote {_esc(shown)}/ (repro.py, README.md"
                  + (", inputs.safetensors" if p.blob else "") + ")")
        out.print(f"run it: cd {_esc(shown)} && python repro.py")
        return 0


def _short(path: str) -> str:
    """A folder as the user would type it: relative when under the working directory."""
    rel = os.path.relpath(path)
    return rel if not rel.startswith("..") else os.path.abspath(path)


def _esc(text: str) -> str:
    from rich.markup import escape
    return escape(text)


COMMAND = ReproCommand()
