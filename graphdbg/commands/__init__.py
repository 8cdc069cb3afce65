"""The `graphdbg` subcommands, one module each (as memray's commands/).

A module here defines ``COMMAND``, an object with

- ``name``, ``order`` (its place in ``graphdbg --help``);
- ``prepare_parser(subparsers)``: adds its parser and options;
- ``run(args) -> int``: does the work and returns the exit status;
- optionally ``split_argv(argv) -> (argv, rest)``, when what follows some
  argument belongs to someone else (``graphdbg run script.py --its-flag``);
  ``rest`` reaches ``run`` as ``args.program_args``.

Adding a command is adding a module. None of them imports torch, rich or
textual at import time: ``graphdbg --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
from typing import Protocol

from ..core.errors import GraphdbgError
from ..core.version import __version__
from .parser import EXAMPLES, Parser, unknown_command


class UsageError(Exception):
    """A bad command line found after parsing: usage line, message, exit 2."""


class Command(Protocol):
    name: str
    order: int

    def prepare_parser(self, subparsers: argparse._SubParsersAction) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


def registry() -> dict[str, Command]:
    """Every command module of this package, in help order."""
    found = []
    for info in pkgutil.iter_modules(__path__):
        command = getattr(importlib.import_module(f"{__name__}.{info.name}"), "COMMAND", None)
        if command is not None:
            found.append(command)
    return {c.name: c for c in sorted(found, key=lambda c: (c.order, c.name))}


def build_parser(commands: dict[str, Command]) -> argparse.ArgumentParser:
    parser = Parser(
        prog="graphdbg", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Debug and profile PyTorch programs that run eagerly and as graphs.",
        epilog=EXAMPLES)
    parser.add_argument("--version", action="version", version=f"graphdbg {__version__}")
    # subcommands' parsers are Parsers too: each says its own mistakes
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for command in commands.values():
        command.prepare_parser(sub)
    parser.command_parsers = dict(sub.choices)   # a command's usage errors are its own
    return parser


def check_command(argv: list[str], commands: dict[str, Command],
                  parser: argparse.ArgumentParser) -> None:
    """A first word that is no command: said with the nearest one (exit 2)."""
    if argv and not argv[0].startswith("-") and argv[0] not in commands:
        parser.error(unknown_command(argv[0], commands))


def invoke(command: Command, args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Run a command; its failures become one line on stderr and an exit status."""
    try:
        return command.run(args)
    except UsageError as exc:   # said with the command's own usage line; exits 2
        getattr(parser, "command_parsers", {}).get(command.name, parser).error(str(exc))
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
