"""`graphdbg diff A B [--json] [--rtol X]`, or `graphdbg diff DIR` for a job's ranks."""

from __future__ import annotations

import argparse

from . import UsageError


class DiffCommand:
    name = "diff"
    order = 10

    def prepare_parser(self, subparsers: argparse._SubParsersAction) -> None:
        dif = subparsers.add_parser(
            "diff", help="compare two runs of the same program, or a job's ranks",
            description="Compare two runs of the same program (e.g. `graphdbg run --stance "
                        "force_eager` against a compiled run). Eager ops are paired by what "
                        "ran: the same step (when both runs count the program's steps alike), "
                        "user call path, op and occurrence; lines that ran compiled in one run "
                        "and eagerly in the other are not compared op by op, and ops without a "
                        "user line are not paired. Each compiled graph output is compared with "
                        "the eager op of the other run that computed the same value (same "
                        "step, line, shape and dtype); outputs without one are counted, not "
                        "compared. Reports where shapes, values or timings part ways; exits 1 "
                        "when values or shapes differ. Given a job's folder (the rank<R>.run files of a torchrun or "
                        "srun job), rank 0 is aligned against each other rank by line, op and occurrence, "
                        "but values are not compared (each rank has its own data): only "
                        "where the op sequence or shapes part ways, the first place per pair "
                        "of ranks; exits 1 when they do.")
        dif.add_argument("run_a", help="first run file (the reference, e.g. eager), or a "
                                       "job's folder of rank files")
        dif.add_argument("run_b", nargs="?", help="second run file (not with a job's folder)")
        dif.add_argument("--json", action="store_true", help="print a JSON document")
        dif.add_argument("--rtol", type=float, default=1e-3,
                         help="relative difference of value summaries that counts (default "
                              "1e-3; two runs only)")

    def run(self, args: argparse.Namespace) -> int:
        from ..runfile.job import is_job_folder
        if is_job_folder(args.run_a):
            if args.run_b is not None:
                raise UsageError(f"{args.run_a} is a job's folder: it is compared alone "
                                 f"(rank against rank); give two run files to compare two runs")
            return diff_job_folder(args.run_a, args.json)
        if args.run_b is None:
            raise UsageError("give two run files, or a job's folder of rank<R>.run files")
        from ..analysis.diff import diff_runs
        from .output import console, write_json
        diff = diff_runs(args.run_a, args.run_b, rtol=args.rtol)
        if args.json:
            write_json(diff.as_dict())
        else:
            from ..reporters.diff import render
            render(diff, console())
        return 1 if diff.differs else 0  # values or shapes differ


def diff_job_folder(folder: str, as_json: bool) -> int:
    """`graphdbg diff DIR`: rank 0 against each other rank; exit 1 where the
    op sequence or shapes part ways."""
    from ..analysis.rankdiff import diff_job
    from ..reporters.ranks import render_diff
    from ..runfile.job import Job
    from .output import console, write_json
    with Job.open(folder) as job:
        d = diff_job(job)
        if as_json:
            write_json(d.as_dict())
        else:
            render_diff(job, d, console())
    return 1 if d.differs else 0


COMMAND = DiffCommand()
