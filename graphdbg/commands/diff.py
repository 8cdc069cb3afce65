"""`graphdbg diff A B [--json] [--rtol X]`."""

from __future__ import annotations

import argparse


class DiffCommand:
    name = "diff"
    order = 10

    def prepare_parser(self, subparsers: argparse._SubParsersAction) -> None:
        dif = subparsers.add_parser(
            "diff", help="compare two runs of the same program",
            description="Align two runs (e.g. `graphdbg run --stance force_eager` against a "
                        "compiled run) by source line, op and occurrence, and report where "
                        "shapes, values or timings part ways. Exits 1 when values or shapes "
                        "differ.")
        dif.add_argument("run_a", help="first run file (the reference, e.g. eager)")
        dif.add_argument("run_b", help="second run file")
        dif.add_argument("--json", action="store_true", help="print a JSON document")
        dif.add_argument("--rtol", type=float, default=1e-3,
                         help="relative difference of value summaries that counts (default 1e-3)")

    def run(self, args: argparse.Namespace) -> int:
        from ..reporters.diff import main
        return main(args.run_a, args.run_b, args.json, args.rtol)


COMMAND = DiffCommand()
