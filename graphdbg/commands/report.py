"""`graphdbg report [RUN | DIR] [--json]`."""

from __future__ import annotations

import argparse
import os


class ReportCommand:
    name = "report"
    order = 20

    def prepare_parser(self, subparsers: argparse._SubParsersAction) -> None:
        rep = subparsers.add_parser(
            "report", help="summarise a run file, or a distributed job's folder",
            description="Print a summary of a run file: problems with their source lines, "
                        "graphs, slowest eager ops. Given a job's folder (the rank<R>.run "
                        "files that `graphdbg run` writes under torchrun or srun), first what "
                        "differs between the ranks (graphs, graph breaks, recompiles, "
                        "collectives, compile time, calls that waited), each at its source "
                        "line, then where each rank was if the job failed or hung, then one "
                        "row per rank. Another directory means its newest run file.")
        rep.add_argument("run", nargs="?",
                         help="run file, or a job's folder of rank files, or a directory "
                              "(its newest run; default: newest *.run here)")
        rep.add_argument("--json", action="store_true",
                         help="print the JSON document (schema: docs/report-json.md)")

    def run(self, args: argparse.Namespace) -> int:
        from ..runfile.job import is_job_folder
        if is_job_folder(args.run):
            from ..reporters.ranks import main as job_main
            return job_main(args.run, args.json)
        from ..reporters.report import main, newest_run
        path = newest_run(args.run) if args.run and os.path.isdir(args.run) else args.run
        return main(path, args.json)


COMMAND = ReportCommand()
