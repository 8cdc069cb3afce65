"""`graphdbg tui [RUN] [RUN_B]`: the terminal UI on one run, or two aligned."""

from __future__ import annotations

import argparse
import os
import sys

from ..core.errors import GraphdbgError
from . import UsageError


def resolve_run(path: str | None) -> str:
    """A run file from what the user gave: a file, a directory (its newest
    run), or nothing (the newest run here). One-line errors otherwise."""
    from ..reporters.report import newest_run
    if path is None:
        return newest_run(".")
    if os.path.isdir(path):
        return newest_run(path)
    if not os.path.exists(path):
        raise GraphdbgError(f"no such run file: {path}")
    return path


def check_runs(paths: list[str]) -> None:
    """Open and close each run once, so that a corrupt, foreign or newer file
    is a one-line error before any terminal is taken over."""
    from ..runfile.query import Run
    for path in paths:
        Run(path).close()


def _check_terminal() -> None:
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise GraphdbgError("the terminal UI needs a terminal (stdin and stdout are not "
                            "both one); `graphdbg report` prints the same findings")


def open_ui(paths: list[str]) -> int:
    check_runs(paths)
    _check_terminal()
    from graphdbg.tui.views.app import run_tui
    return run_tui(paths)


def open_job_ui(folder: str) -> int:
    """The job screen over a job's folder (its files checked first)."""
    from ..runfile.job import Job
    Job.open(folder).close()
    _check_terminal()
    from graphdbg.tui.views.job import run_job_tui
    return run_job_tui(folder)


class TuiCommand:
    name = "tui"
    order = 15

    def prepare_parser(self, subparsers: argparse._SubParsersAction) -> None:
        tui = subparsers.add_parser(
            "tui", help="inspect a run (or two) in the terminal UI",
            description="Open the terminal UI on a run file (the newest *.run here by "
                        "default; a directory means its newest run): problems first, "
                        "graphs and nodes, eager against compiled per node, source with "
                        "annotations, hot spots, run info. With two runs (e.g. one made "
                        "with --stance force_eager and a compiled one, the reference "
                        "first), the header names both, the problems view lists both "
                        "runs' problems (marked A and B), and the diff view aligns their "
                        "ops as `graphdbg diff` does. Given a job's folder "
                        "(the rank<R>.run files of a torchrun or srun job), a job screen "
                        "lists the ranks (status, counts, where each was) and where they "
                        "differ; Enter opens a rank's run.")
        tui.add_argument("run", nargs="?",
                         help="run file, a job's folder of rank files, or a directory "
                              "(its newest run; default: newest *.run here)")
        tui.add_argument("run_b", nargs="?", metavar="RUN_B",
                         help="a second run: its problems beside the first's, and the "
                              "two aligned in the diff view")

    def run(self, args: argparse.Namespace) -> int:
        from ..runfile.job import is_job_folder
        if is_job_folder(args.run):
            if args.run_b is not None:
                raise UsageError(f"{args.run} is a job's folder: it opens alone")
            return open_job_ui(args.run)
        paths = [resolve_run(args.run)]
        if args.run_b is not None:
            paths.append(resolve_run(args.run_b))
        return open_ui(paths)


COMMAND = TuiCommand()
