"""The `graphdbg` command: parses the command line and dispatches to a module
of graphdbg/commands/. Imports neither torch nor textual at module level."""

from __future__ import annotations

import sys

from .commands import build_parser, check_command, invoke, registry


def main(argv: list[str] | None = None) -> int:
    commands = registry()
    parser = build_parser(commands)
    argv = list(sys.argv[1:] if argv is None else argv)
    check_command(argv, commands, parser)
    rest: list[str] = []
    command = commands.get(argv[0]) if argv else None
    if command is not None and hasattr(command, "split_argv"):
        argv, rest = command.split_argv(argv)
    args = parser.parse_args(argv)
    args.program_args = rest
    if args.command is None:
        parser.print_help()
        return 2
    return invoke(commands[args.command], args, parser)
