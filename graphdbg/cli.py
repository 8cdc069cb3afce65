"""The `graphdbg` command. Imports neither torch nor textual at module level."""

from __future__ import annotations

import argparse
import os
import re
import sys

from .errors import GraphdbgError
from .version import __version__

VALUE_TIERS = ("none", "health", "stats", "full")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="graphdbg",
        description="Debug and profile PyTorch programs that run eagerly and as graphs.")
    p.add_argument("--version", action="version", version=f"graphdbg {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    run = sub.add_parser(
        "run", help="run a script or module and capture it into a run file",
        description="Run an unmodified script (or -m module) in this process, as python "
                    "would, and capture compiled graphs, graph breaks, recompiles, errors "
                    "and eager ops into one run file. Exits with the script's own status.",
        usage="graphdbg run [options] (script.py | -m module) [args ...]")
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
    run.add_argument("--rtol", type=float, metavar="X",
                     help="relative tolerance of the eager check (default per dtype: "
                          "float32 1e-4, bfloat16 1.6e-2, float16 1e-3)")
    run.add_argument("--atol", type=float, metavar="X",
                     help="absolute tolerance of the eager check (default per dtype: "
                          "float32 1e-5, bfloat16 1e-2, float16 1e-3)")
    run.add_argument("--localize", choices=("auto", "bisect"), default="auto",
                     help="how to find the first divergent node: auto (one compile with every "
                          "intermediate as an output, bisection if that hides the difference) "
                          "or bisect (prefix bisection only, when fusion matters)")
    run.add_argument("--stance", choices=("default", "force_eager", "eager_on_recompile",
                                          "fail_on_recompile"),
                     help="run under torch.compiler.set_stance(STANCE); force_eager records an "
                          "eager run of a compiled program, for `graphdbg diff`")
    run.add_argument("--no-eager", dest="eager", action="store_false",
                     help="do not record eager aten ops (compiled side only)")
    run.add_argument("--max-ops", type=int, default=200_000, metavar="N",
                     help="eager ops recorded one row each (later ones only counted "
                          "and timed in the per-op summary; default 200000)")
    run.add_argument("-q", "--quiet", action="store_true",
                     help="print nothing of graphdbg's own after the run")
    run.add_argument("script", nargs="?", help=argparse.SUPPRESS)

    dif = sub.add_parser("diff", help="compare two runs of the same program",
                         description="Align two runs (e.g. `graphdbg run --stance force_eager` "
                                     "against a compiled run) by source line, op and occurrence, "
                                     "and report where shapes, values or timings part ways. "
                                     "Exits 1 when values or shapes differ.")
    dif.add_argument("run_a", help="first run file (the reference, e.g. eager)")
    dif.add_argument("run_b", help="second run file")
    dif.add_argument("--json", action="store_true", help="print a JSON document")
    dif.add_argument("--rtol", type=float, default=1e-3,
                     help="relative difference of value summaries that counts (default 1e-3)")

    rep = sub.add_parser("report", help="summarise a run file (newest in . by default)",
                         description="Print a summary of a run file: problems with their "
                                     "source lines, graphs, slowest eager ops.")
    rep.add_argument("run", nargs="?", help="run file (default: newest *.run here)")
    rep.add_argument("--json", action="store_true",
                     help="print the JSON document (schema: docs/report-json.md)")
    return p


def _cmd_run(ns: argparse.Namespace) -> int:
    from .runner import run_program
    if ns.module:
        args = ns.args
        return run_program(ns.module, args, module=True, **_run_options(ns))
    if not ns.script:
        raise GraphdbgError("graphdbg run: give a script to run (or -m module)")
    return run_program(ns.script, ns.args, **_run_options(ns))


def _run_options(ns: argparse.Namespace) -> dict:
    return {"output": ns.output, "values": ns.values, "quiet": ns.quiet, "eager": ns.eager,
            "max_ops": ns.max_ops, "keep": ns.keep, "stance": ns.stance,
            "tensor_budget": int(ns.tensor_budget * 2**20),
            "compare": {"compare": ns.compare, "compare_first": ns.compare_first,
                        "compare_every": ns.compare_every, "rtol": ns.rtol, "atol": ns.atol,
                        "localize": ns.localize, "check_graphs": ns.check_graphs}}


_RUN_VALUE_OPTS = {"-o", "--output", "--values", "--max-ops", "--keep", "--tensor-budget",
                   "--compare-first", "--compare-every", "--rtol", "--atol", "--localize",
                   "--stance"}


def _split_run_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """`graphdbg run [options] (script | -m module) [args]`: everything after the
    script or module belongs to the program, even if it looks like an option."""
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
        i += 2 if tok in _RUN_VALUE_OPTS else 1
    return argv, []


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    program_args: list[str] = []
    if argv and argv[0] == "run":
        argv, program_args = _split_run_argv(argv)
    ns = parser.parse_args(argv)
    if ns.command == "run":
        ns.args = program_args
        if ns.keep:
            try:
                re.compile(ns.keep)
            except re.error as exc:
                parser.error(f"--keep: not a regular expression: {exc}")
    try:
        if ns.command == "run":
            return _cmd_run(ns)
        if ns.command == "diff":
            from .diff import main as diff_main
            return diff_main(ns.run_a, ns.run_b, ns.json, ns.rtol)
        if ns.command == "report":
            from .report import main as report_main
            return report_main(ns.run, ns.json)
        parser.print_help()
        return 2
    except GraphdbgError as exc:
        print(f"graphdbg: {exc}" if not str(exc).startswith("graphdbg") else str(exc),
              file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:
        return 1
    except Exception as exc:  # a bug of ours: one line unless asked for more
        if os.environ.get("GRAPHDBG_DEBUG"):
            raise
        print(f"graphdbg: internal error: {type(exc).__name__}: {exc} "
              f"(GRAPHDBG_DEBUG=1 shows the traceback)", file=sys.stderr)
        return 70
    except KeyboardInterrupt:
        print("graphdbg: interrupted", file=sys.stderr)
        return 130
