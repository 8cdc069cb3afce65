"""What a capture records and checks: one dataclass from the command line (or
`graphdbg.capture(...)`, `graphdbg.compare(...)`) down to the recorders.

Each field says once how it appears on `graphdbg run`'s command line (its
flag, help, metavar, choices): commands/run.py makes its arguments from them,
and the pytest plugin declares its own options the same way.

Imports neither torch nor textual: the CLI builds it before torch is loaded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Iterator

VALUE_TIERS = ("none", "health", "stats", "full")
LOCALIZE_MODES = ("auto", "bisect")
STANCES = ("default", "force_eager", "eager_on_recompile", "fail_on_recompile")
MIB = 2**20


class OptionError(ValueError):
    """An option's value refused: ``name`` is its field, ``reason`` says why
    (the CLI writes it after the option's flag, the API after its name)."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"{name}: {reason}")
        self.name, self.reason = name, reason


@dataclass(frozen=True)
class Flag:
    """An option as a command line shows it. A bool is a switch: ``--no-X``
    for one that is on by default, ``--X`` for one that is off."""
    name: str                              # "--values"
    help: str                              # may name the default as %(default)s
    group: str = ""                        # its group in `graphdbg run --help`
    metavar: str | None = None
    choices: tuple | None = None
    type: Callable[[str], Any] | None = None   # None: the type of the default
    show: Callable[[Any], Any] | None = None   # the default as the command line gives it
    convert: Callable[[Any], Any] | None = None  # the command line's value -> the option's

    def default(self, value: Any) -> Any:
        """A field's default as the command line gives it."""
        return self.show(value) if self.show else value


def option(default: Any, flag: str | None = None, help: str = "", **how: Any) -> Any:
    """A dataclass field with its command-line flag (none: not on the command line)."""
    return field(default=default, metadata={"flag": Flag(flag, help, **how)} if flag else {})


def flags(cls: type) -> Iterator[tuple[str, Any, Flag]]:
    """(field name, default, Flag) of each field of ``cls`` that has a flag, in field order."""
    for f in fields(cls):
        if "flag" in f.metadata:
            yield f.name, f.default, f.metadata["flag"]


def steps(text: str) -> tuple[int, int, int, int]:
    """`--profile-steps WAIT,WARMUP,ACTIVE,REPEAT`."""
    parts = text.split(",")
    if len(parts) != 4 or not all(p.strip().isdigit() for p in parts) or int(parts[2]) < 1:
        raise ValueError(f"{text!r}: give WAIT,WARMUP,ACTIVE,REPEAT as four counts, "
                         f"ACTIVE at least 1")
    w, u, a, r = (int(p) for p in parts)
    return w, u, a, r


def eager_steps(text: str) -> tuple[int, int]:
    """`--eager-steps FIRST[,EVERY]`, or `all`."""
    if text.strip() == "all":
        return (0, 1)
    parts = text.split(",")
    if len(parts) not in (1, 2) or not all(p.strip().isdigit() for p in parts):
        raise ValueError(f"{text!r}: give FIRST,EVERY as two counts (EVERY 0: no later "
                         f"step), or all")
    first = int(parts[0])
    return (first, int(parts[1]) if len(parts) == 2 else 0)


def show_eager_steps(s: tuple[int, int]) -> str:
    return "all" if s[1] == 1 else f"{s[0]},{s[1]}"


# Fields in the order `graphdbg run --help` lists them, each in its group
# (commands/run.py: GROUPS). A help is one short line of what the option does;
# docs/options.md says each in full.
@dataclass(frozen=True)
class CaptureOptions:
    values: str = option(
        "stats", "--values", group="record", choices=VALUE_TIERS,
        help="how much of each tensor to record (default %(default)s)")
    keep: str | None = option(
        None, "--keep", group="record", metavar="REGEX", type=str,
        help="with --values full: keep tensors of matching ops only")
    tensor_budget: int = option(  # bytes; MiB on the command line
        64 * MIB, "--tensor-budget", group="record", metavar="MIB", type=float,
        show=lambda b: f"{b / MIB:g}", convert=lambda mib: int(mib * MIB),
        help="with --values full: most MiB kept (default %(default)s)")
    compare: bool = option(True, "--no-compare", group="check",
                           help="do not check compiled graphs and exports against eager")
    check_graphs: bool = option(True, "--no-graph-check", group="check",
                                help="do not lint captured graphs before their backend")
    compare_first: int = option(
        3, "--compare-first", group="check", metavar="N",
        help="check the first N calls of each graph (default %(default)s)")
    compare_every: int = option(
        0, "--compare-every", group="check", metavar="N",
        help="and every N-th later call (default: none)")
    compare_memory: float | None = option(  # None: half the free memory
        None, "--compare-memory", group="check", metavar="MIB", type=float,
        help="most MiB one check may take (default: half the free)")
    rtol: float | None = option(  # None: per dtype
        None, "--rtol", group="check", metavar="X", type=float,
        help="relative tolerance (default: per dtype)")
    atol: float | None = option(
        None, "--atol", group="check", metavar="X", type=float,
        help="absolute tolerance (default: per dtype)")
    localize: str = option(
        "auto", "--localize", group="check", choices=LOCALIZE_MODES,
        help="how to find the first wrong node (default %(default)s)")
    stance: str | None = option(
        None, "--stance", group="program", choices=STANCES, type=str,
        help="run under torch.compiler.set_stance(STANCE)")
    eager: bool = option(True, "--no-eager", group="record",
                         help="record the compiled side only, no eager ops")
    eager_steps: tuple[int, int] = option(
        (10, 100), "--eager-steps", group="record", metavar="FIRST,EVERY", type=eager_steps,
        show=show_eager_steps,
        help="record FIRST steps, then 1 in EVERY (default %(default)s)")
    kernel_times: bool = option(
        True, "--no-kernel-times", group="profile",
        help="do not time inductor's kernels per source line")
    max_ops: int = option(
        200_000, "--max-ops", group="record", metavar="N",
        help="eager ops kept one row each (default %(default)s)")
    py_spy: bool = option(
        False, "--py-spy", group="profile",
        help="sample Python stacks with py-spy (a speedscope file)")
    py_spy_rate: int = option(100, "--py-spy-rate", group="profile", metavar="HZ",
                              help="py-spy's samples per second (default %(default)s)")
    profile: bool = option(
        False, "--profile", group="profile",
        help="write torch.profiler traces next to the run file")
    profile_steps: tuple[int, int, int, int] = option(
        (1, 1, 3, 1), "--profile-steps", group="profile", metavar="WAIT,WARMUP,ACTIVE,REPEAT",
        type=steps, show=lambda s: ",".join(map(str, s)),
        help="the profiler's schedule in steps (default %(default)s)")
    progress: bool = False            # rich status line and progress bars on stderr (a terminal)

    def __post_init__(self) -> None:
        # every entry point gets the same checks, before anything runs
        for name, default, flag in flags(CaptureOptions):
            allowed = (flag.choices or ()) + ((None,) if default is None else ())
            if flag.choices and getattr(self, name) not in allowed:
                raise OptionError(name, f"must be one of {', '.join(flag.choices)}, "
                                        f"not {getattr(self, name)!r}")
        if self.keep is not None:
            try:
                re.compile(self.keep)
            except re.error as exc:
                raise OptionError("keep", f"not a regular expression: {exc}") from None
        if self.compare_memory is not None and not self.compare_memory > 0:
            raise OptionError("compare_memory", f"needs a positive number of MiB, not "
                                                f"{self.compare_memory:g} (no check: compare off)")
        e = self.eager_steps
        if len(e) != 2 or not all(isinstance(n, int) and n >= 0 for n in e):
            raise OptionError("eager_steps", f"must be (first, every) counts, not {e!r}")
        s = self.profile_steps
        if len(s) != 4 or not all(isinstance(n, int) and n >= 0 for n in s) or s[2] < 1:
            raise OptionError("profile_steps", "must be (wait, warmup, active, repeat) counts, "
                                               f"active at least 1, not {s!r}")

    @classmethod
    def from_kwargs(cls, **kwargs) -> "CaptureOptions":
        """Options from keyword arguments; an unknown name is a TypeError
        that lists the known ones."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise TypeError(f"unknown capture option(s) {unknown}; known: {sorted(known)}")
        return cls(**kwargs)

    @classmethod
    def from_flags(cls, parsed: dict[str, Any], **more: Any) -> "CaptureOptions":
        """Options from a parsed command line (by field name, in the command
        line's units) and ``more`` options that are not on it."""
        return cls(**{name: flag.convert(parsed[name]) if flag.convert else parsed[name]
                      for name, _, flag in flags(cls)}, **more)

