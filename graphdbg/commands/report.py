"""`graphdbg report [RUN] [--json]`."""

from __future__ import annotations

import argparse


class ReportCommand:
    name = "report"
    order = 20

    def prepare_parser(self, subparsers: argparse._SubParsersAction) -> None:
        rep = subparsers.add_parser(
            "report", help="summarise a run file (newest in . by default)",
            description="Print a summary of a run file: problems with their source lines, "
                        "graphs, slowest eager ops.")
        rep.add_argument("run", nargs="?", help="run file (default: newest *.run here)")
        rep.add_argument("--json", action="store_true",
                         help="print the JSON document (schema: docs/report-json.md)")

    def run(self, args: argparse.Namespace) -> int:
        from ..reporters.report import main
        return main(args.run, args.json)


COMMAND = ReportCommand()
