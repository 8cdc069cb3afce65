"""`graphdbg run [options] (script.py | -m module) [args ...]`."""

from __future__ import annotations

import argparse
import re
import sys

from ..core.errors import GraphdbgError
from ..core.options import VALUE_TIERS
from . import UsageError

# options of `graphdbg run` that take a value (the argv split must skip it)
_VALUE_OPTS = {"-o", "--output", "--values", "--max-ops", "--keep", "--tensor-budget",
               "--compare-first", "--compare-every", "--compare-memory", "--rtol", "--atol", "--localize",
               "--stance", "--py-spy-rate", "--profile-steps"}


def _steps(text: str) -> tuple[int, int, int, int]:
    parts = text.split(",")
    if len(parts) != 4 or not all(p.strip().isdigit() for p in parts) or int(parts[2]) < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give WAIT,WARMUP,ACTIVE,REPEAT as four counts, ACTIVE at least 1")
    w, u, a, r = (int(p) for p in parts)
    return w, u, a, r


class RunCommand:
    name = "run"
    order = 0

    def prepare_parser(self, subparsers: argparse._SubParsersAction) -> None:
        run = subparsers.add_parser(
            "run", help="run a script or module and capture it into a run file",
            description="Run an unmodified script (or -m module) in this process, as python "
                        "would, and capture compiled graphs, graph breaks, recompiles, errors "
                        "and eager ops into one run file. Exits with the script's own status.",
            usage="graphdbg run [options] (script.py | -m module) [args ...]",
            epilog="Supports torch 2.13 to 2.15; another version is refused in one line. "
                   "GRAPHDBG_ALLOW_ANY_TORCH=1 runs a newer torch anyway, with a warning.")
        run.add_argument("-m", dest="module", metavar="MODULE",
                         help="run a library module as a script, like python -m")
        run.add_argument("-o", "--output", metavar="PATH",
                         help="run file to write (default: graphdbg-<script>.<pid>.run)")
        run.add_argument("--values", choices=VALUE_TIERS, default="stats",
                         help="how much of each tensor to record: none (shapes, dtypes, time), "
                              "health (+NaN/Inf counts), stats (+min/max/mean/std/norm; "
                              "default), full (+tensors, within a byte budget)")
        run.add_argument("--keep", metavar="REGEX",
                         help="with --values full: keep only the tensors of eager ops whose op "
                              "name or module path matches (e.g. 'attn|aten.softmax'), and of "
                              "compiled graphs whose function name matches")
        run.add_argument("--tensor-budget", type=float, default=64, metavar="MIB",
                         help="with --values full: most tensor bytes to keep, in MiB (default 64)")
        run.add_argument("--no-compare", dest="compare", action="store_false",
                         help="do not check compiled graphs against eager")
        run.add_argument("--no-graph-check", dest="check_graphs", action="store_false",
                         help="do not check each captured graph for malformed nodes (lint and "
                              "fake-tensor shape propagation) before the backend gets it")
        run.add_argument("--compare-first", type=int, default=3, metavar="N",
                         help="check the first N calls of each compiled graph against eager, "
                              "node by node, judged in float64 (default 3)")
        run.add_argument("--compare-every", type=int, default=0, metavar="N",
                         help="also check every N-th later call (default: only the first ones)")
        run.add_argument("--compare-memory", type=float, metavar="MIB",
                         help="most memory a graph's check against eager may take (its eager "
                              "reference's values and input clones, known from the graph's "
                              "shapes before it runs); over it the graph is not checked, with a "
                              "note (default: half the free memory)")
        run.add_argument("--rtol", type=float, metavar="X",
                         help="relative tolerance of the eager check (default per dtype: "
                              "float32 1e-4, bfloat16 1.6e-2, float16 1e-3)")
        run.add_argument("--atol", type=float, metavar="X",
                         help="absolute tolerance of the eager check (default per dtype: "
                              "float32 1e-5, bfloat16 1e-2, float16 1e-3)")
        run.add_argument("--localize", choices=("auto", "bisect"), default="auto",
                         help="how to find the first divergent node: auto (one compile with "
                              "every intermediate as an output, bisection if that hides the "
                              "difference) or bisect (prefix bisection only, when fusion matters)")
        run.add_argument("--stance", choices=("default", "force_eager", "eager_on_recompile",
                                              "fail_on_recompile"),
                         help="run under torch.compiler.set_stance(STANCE); force_eager records "
                              "an eager run of a compiled program, for `graphdbg diff`")
        run.add_argument("--no-eager", dest="eager", action="store_false",
                         help="do not record eager aten ops (compiled side only)")
        run.add_argument("--no-kernel-times", dest="kernel_times", action="store_false",
                         help="do not time inductor's kernels per source line (that turns on "
                              "inductor's provenance tracking, which is part of its cache key)")
        run.add_argument("--max-ops", type=int, default=200_000, metavar="N",
                         help="eager ops recorded one row each (later ones only counted "
                              "and timed in the per-op summary; default 200000)")
        run.add_argument("--py-spy", action="store_true",
                         help="sample the program's Python stacks with py-spy (the profile "
                              "extra): a speedscope file next to the run, samples per source "
                              "line in the report; where ptrace is not allowed, one line says "
                              "so and the run goes on")
        run.add_argument("--py-spy-rate", type=int, default=100, metavar="HZ",
                         help="py-spy's samples per second (default 100)")
        run.add_argument("--profile", action="store_true",
                         help="record torch.profiler traces next to the run (RUN.profile/, "
                              "TensorBoard's layout: open them in Perfetto, or in TensorBoard "
                              "with graphdbg[tensorboard]); a step is an optimizer step, or a "
                              "call of the first compiled graph")
        run.add_argument("--profile-steps", type=_steps, default=(1, 1, 3, 1),
                         metavar="WAIT,WARMUP,ACTIVE,REPEAT",
                         help="torch.profiler's schedule in steps (default 1,1,3,1: bounded "
                              "however long the program runs)")
        run.add_argument("-q", "--quiet", action="store_true",
                         help="print nothing of graphdbg's own after the run")
        run.add_argument("--tui", action="store_true",
                         help="open the terminal UI on the run file when the program ends "
                              "(the exit status stays the program's)")
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
        if args.keep:
            try:
                re.compile(args.keep)
            except re.error as exc:
                raise UsageError(f"--keep: not a regular expression: {exc}") from None
        if args.compare_memory is not None and not args.compare_memory > 0:
            raise UsageError(f"--compare-memory: needs a positive number of MiB, not "
                             f"{args.compare_memory:g} (--no-compare turns the check off)")
        from ..core.options import CaptureOptions
        from ..runner import run_program
        options = CaptureOptions(
            values=args.values, eager=args.eager, kernel_times=args.kernel_times, max_ops=args.max_ops, keep=args.keep,
            tensor_budget=int(args.tensor_budget * 2**20), compare=args.compare,
            compare_first=args.compare_first, compare_every=args.compare_every,
            compare_memory=args.compare_memory,
            rtol=args.rtol, atol=args.atol, localize=args.localize,
            check_graphs=args.check_graphs)
        from ..runner import default_output
        target = args.module or args.script
        if not target:
            raise GraphdbgError("graphdbg run: give a script to run (or -m module)")
        output = args.output or default_output(target, bool(args.module))
        status = run_program(target, args.program_args, module=bool(args.module),
                             output=output, quiet=args.quiet, stance=args.stance,
                             options=options, py_spy_rate=args.py_spy_rate if args.py_spy else None,
                             profile_steps=args.profile_steps if args.profile else None)
        if args.tui:
            from .tui import open_ui
            try:
                open_ui([output])
            except GraphdbgError as exc:  # the program's status matters more than the UI's
                print(f"graphdbg: {exc}", file=sys.stderr)
        return status


COMMAND = RunCommand()
