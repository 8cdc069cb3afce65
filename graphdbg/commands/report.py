"""`graphdbg report [RUN | DIR] [--full] [--json | --html OUT.html]`."""

from __future__ import annotations

import argparse
import os

from . import UsageError
from .output import check_html_path, console, print_trimmed, write_html, write_json


class ReportCommand:
    name = "report"
    order = 20

    def prepare_parser(self, subparsers: argparse._SubParsersAction) -> None:
        rep = subparsers.add_parser(
            "report", help="summarise a run file, or a distributed job's folder",
            description="Print a summary of a run file: the problems first, each at its "
                        "source line with what to do, then the graphs and the commands that "
                        "show more; --full adds every table (compile time, compiled time per "
                        "line, py-spy samples, slowest graph nodes and eager ops). `graphdbg "
                        "explain KIND` says what a kind of problem means. Lines fit the "
                        "terminal, or COLUMNS where it is set. Given a job's folder (the rank<R>.run "
                        "files that `graphdbg run` writes under torchrun or srun), first what "
                        "differs between the ranks (graphs, graph breaks, recompiles, "
                        "collectives, compile time, calls that waited), each at its source "
                        "line, then where each rank was if the job failed or hung, then one "
                        "row per rank. Another directory means its newest run file. --html OUT.html "
                        "writes the same as one self-contained page to open in a browser or "
                        "attach to an issue.")
        rep.add_argument("run", nargs="?",
                         help="run file, or a job's folder of rank files, or a directory "
                              "(its newest run; default: newest *.run here)")
        rep.add_argument("--full", action="store_true",
                         help="every table of a run file: graph columns with compile ids and "
                              "call times, "
                              "compile time, compiled time per line, py-spy samples, slowest "
                              "graph nodes and eager ops, every way out of each problem")
        how = rep.add_mutually_exclusive_group()
        how.add_argument("--json", action="store_true",
                         help="print the JSON document (schema: docs/report-json.md)")
        how.add_argument("--html", metavar="OUT.html",
                         help="write one self-contained HTML page (no network) instead: the "
                              "problems with their source, compiled time per line, graphs and "
                              "nodes (the first 200 per graph; filterable), eager vs compiled "
                              "node by node; of a job's folder, the ranks compared and one "
                              "row per rank (docs/html.md)")

    def run(self, args: argparse.Namespace) -> int:
        from ..runfile.job import is_job_folder
        if args.html:
            why = check_html_path(args.html)
            if why:
                raise UsageError(why)
            return report_html(args.html, args.run)
        if is_job_folder(args.run):
            return report_job(args.run, args.json)
        from ..reporters.report import newest_run
        path = newest_run(args.run) if args.run and os.path.isdir(args.run) else args.run
        return report_run(path or newest_run(), args.json, args.full)


def report_run(path: str, as_json: bool, full: bool = False) -> int:
    """`graphdbg report [RUN] [--full] [--json]`: one run file."""
    from ..runfile.query import Run
    from ..reporters.report import document, summary
    with Run(path) as run:
        if as_json:
            write_json(document(run))
        else:
            print_trimmed(console(), summary(run, full, path))
    return 0


def report_html(out: str, run: str | None) -> int:
    """`graphdbg report --html OUT [RUN | DIR]`: the page of a run file or a
    job's folder (another directory: its newest run file)."""
    from ..reporters.html import page
    from ..reporters.report import newest_run
    write_html(out, page(run if run else newest_run()))
    return 0


def report_job(folder: str, as_json: bool) -> int:
    """`graphdbg report DIR [--json]`: a job's folder, its ranks compared."""
    from ..analysis.ranks import compare
    from ..reporters.ranks import document, render
    from ..runfile.job import Job
    with Job.open(folder) as job:
        c = compare(job)
        if as_json:
            write_json(document(job, c))
        else:
            render(job, c, console())
    return 0


COMMAND = ReportCommand()
