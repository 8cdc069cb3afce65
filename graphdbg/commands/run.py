"""`graphdbg run [options] (script.py | -m module) [args ...]`."""

from __future__ import annotations

import argparse
import sys

from ..core.errors import GraphdbgError
from ..core.options import CaptureOptions, OptionError, flags
from . import UsageError


def _arguments() -> list[tuple[str, dict, str]]:
    """`graphdbg run`'s capture options, made from CaptureOptions' fields:
    (flag, argparse keywords, group) each."""
    out = []
    for name, default, flag in flags(CaptureOptions):
        kw: dict = {"dest": name, "help": flag.help}
        if isinstance(default, bool):   # a switch: --no-X turns off what is on by default
            kw["action"] = "store_false" if default else "store_true"
        else:
            kw.update(default=flag.default(default), type=_typed(flag.type or type(default)),
                      metavar=flag.metavar, choices=flag.choices)
        out.append((flag.name, {k: v for k, v in kw.items() if v is not None}, flag.group))
    return out


def _typed(parse):
    """A parser's ValueError as argparse's one-line error (int and float keep argparse's own)."""
    if parse in (int, float, str):
        return parse

    def typed(text: str):
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    typed.__name__ = parse.__name__
    return typed


# options of `graphdbg run` that take a value (the argv split must skip it)
_VALUE_OPTS = {"-o", "--output", "--html"} | {name for name, kw, _ in _arguments() if "action" not in kw}


# `graphdbg run --help`'s groups: (key, title, description); each capture
# option names its key (core/options.py), run's own options are placed below
GROUPS = (
    ("program", "the program", None),
    ("output", "output", None),
    ("record", "what to record", None),
    ("check", "checks against eager",
     "Each compiled graph's first calls are run again eagerly, node by node, and\n"
     "judged in float64; a divergence is found at its node and source line."),
    ("profile", "profiling", None),
    ("launcher", "under a launcher",
     "graphdbg goes inside the launcher; each rank writes rank<R>.run into one\n"
     "folder per job, graphdbg-<script>-<job id>/ (-o names it):\n"
     "  torchrun --nproc-per-node 8 --no-python graphdbg run train.py\n"
     "  accelerate launch -m graphdbg run train.py   (or: --no_python graphdbg run)\n"
     "  srun -n 16 graphdbg run train.py"),
)


class RunCommand:
    name = "run"
    order = 0

    def prepare_parser(self, subparsers: argparse._SubParsersAction) -> None:
        run = subparsers.add_parser(
            "run", help="run a script or module and capture it into a run file",
            description="Run an unmodified script (or -m module) in this process, as python "
                        "would, and\ncapture its compiled graphs, graph breaks, recompiles, "
                        "errors and eager ops\ninto one run file. Exits with the script's own "
                        "status.",
            usage="graphdbg run [options] (script.py | -m module) [args ...]",
            formatter_class=argparse.RawDescriptionHelpFormatter,
            epilog="Every option in full: docs/options.md. Supports torch 2.11 to 2.15\n"
                   "(GRAPHDBG_ALLOW_ANY_TORCH=1 runs a newer one, with a warning).")
        group = {key: run.add_argument_group(title, text) for key, title, text in GROUPS}
        group["program"].add_argument("-m", dest="module", metavar="MODULE",
                                      help="run a module as a script, like python -m")
        group["output"].add_argument(
            "-o", "--output", metavar="PATH",
            help="the run file (under a launcher: the job's folder)")
        group["output"].add_argument("-q", "--quiet", action="store_true",
                                     help="print nothing of graphdbg's own after the run")
        group["output"].add_argument("--tui", action="store_true",
                                     help="open the terminal UI when the program ends")
        group["output"].add_argument(
            "--html", metavar="OUT.html",
            help="then write the run's HTML page (docs/html.md)")
        for name, kw, key in _arguments():
            group[key].add_argument(name, **kw)
        run.add_argument("script", nargs="?", help=argparse.SUPPRESS)

    def split_argv(self, argv: list[str]) -> tuple[list[str], list[str]]:
        """Everything after the script or module belongs to the program, even
        if it looks like an option."""
        i = 1  # argv[0] == "run"
        while i < len(argv):
            tok = argv[i]
            if tok == "-m":
                return argv[:i + 2], argv[i + 2:]
            if tok.startswith("-m") and not tok.startswith("--"):
                return argv[:i + 1], argv[i + 1:]
            if tok == "--":
                return argv[:i] + argv[i + 1:i + 2], argv[i + 2:]
            if not tok.startswith("-"):
                return argv[:i + 1], argv[i + 1:]
            i += 2 if tok in _VALUE_OPTS else 1
        return argv, []

    def run(self, args: argparse.Namespace) -> int:
        from ..runner import check_not_a_launcher, check_target, output_path, run_program
        try:
            options = CaptureOptions.from_flags(vars(args))
        except OptionError as exc:   # the options' own checks, said of the flag
            flag = {name: f.name for name, _, f in flags(CaptureOptions)}[exc.name]
            raise UsageError(f"{flag}: {exc.reason}") from None
        target = args.module or args.script
        if not target:
            raise GraphdbgError("graphdbg run: give a script to run (or -m module)")
        check_not_a_launcher(target, bool(args.module), args.program_args)
        check_target(target, bool(args.module))   # before a rank's folder is made
        if args.html:   # said before the program runs, not after
            _check_html(args.html)
        output = output_path(args.output, target, bool(args.module))
        status = run_program(target, args.program_args, module=bool(args.module),
                             output=output, quiet=args.quiet, options=options)
        if args.html:
            from ..reporters.html import page
            from .output import write_html
            try:
                write_html(args.html, page(output), quiet=args.quiet)
            except GraphdbgError as exc:  # the program's status matters more than the page's
                print(f"graphdbg: {exc}", file=sys.stderr)
        if args.tui:
            from .tui import open_ui
            try:
                open_ui([output])
            except GraphdbgError as exc:  # the program's status matters more than the UI's
                print(f"graphdbg: {exc}", file=sys.stderr)
        return status


def _check_html(out: str) -> None:
    """--html's page can be written; under a launcher, refused (each rank
    would write the same file before the others end): the job's page is made
    from its folder afterwards."""
    from ..core import ranks
    from .output import check_html_path
    why = check_html_path(out)
    if why:
        raise UsageError(why)
    if ranks.from_env() is not None:
        raise UsageError("--html under a launcher: each rank writes its own run file; after "
                         "the job, graphdbg report --html OUT.html JOB_FOLDER makes the "
                         "job's page")


COMMAND = RunCommand()
