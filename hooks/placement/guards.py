"""The user's line behind a shape guard and behind an exception: ShapeEnv
keeps where each guard was added (``sloc``), which names the user's line
when the program compared a size itself; a guard made inside one of torch's
ops (the fake slice of ``table[:, :n]``) is where the export's `ShapeSites`
(exports.py) saw it added. A traceback says where torch called the user's
code (a custom pass, a lowering)."""

from __future__ import annotations

import os
import re
import traceback
from typing import NamedTuple

from graphdbg.core.sourcemap import Frame

from . import columns
from .internal import is_internal


def exception_chain(exc: BaseException) -> list[BaseException]:
    """exc, then what it wraps (inner_exception, __cause__, __context__)."""
    chain, seen = [], set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        chain.append(e)
        e = getattr(e, "inner_exception", None) or e.__cause__ or e.__context__
    return chain


def raised_in_user_code(exc: BaseException):
    """The innermost user frame (file, line, function) the error was raised
    from inside torch (a custom pass, lowering or backend), if any."""
    for e in reversed(exception_chain(exc)):
        frames = traceback.extract_tb(e.__traceback__)
        for f in reversed(frames):
            if not is_internal(f.filename):
                return f.filename, f.lineno or 0, f.name
    return None


_SIZE_SOURCE = re.compile(r"L\['[^'\]]+'\](?:\.size\(\)\[\d+\])?")


class GuardSite(NamedTuple):
    """A guard on a size the program declared dynamic, at the user's line that
    made it: ``guard`` in the program's words, ``stack`` the user's stack there
    (outermost first; empty when only the line is known)."""
    file: str
    line: int
    function: str
    guard: str
    stack: list


_FLAT_ARG = re.compile(r"L\['flat_args'\]\[(\d+)\]")


def named_inputs(text: str, names) -> str:
    """A strict export's sources (Dynamo traces the flattened inputs:
    ``L['flat_args'][0]``) by the inputs' names (``L['x']``)."""
    return _FLAT_ARG.sub(lambda m: f"L['{names[int(m[1])]}']" if int(m[1]) < len(names)
                         else m[0], text)


def in_program_words(text: str, said: dict[str, str]) -> str:
    """A guard with its symbols named as the program names the sizes
    (``x.size()[0] > 4``, not ``s77 > 4``)."""
    return re.sub(r"\b[su]\d+\b", lambda m: said.get(m[0], m[0]), text)


def _shape_envs(chain: list[BaseException]) -> list:
    envs: list = []
    for e in chain:
        tb = e.__traceback__
        while tb is not None:
            for v in list(tb.tb_frame.f_locals.values()):
                if type(v).__name__ == "ShapeEnv" and not any(v is x for x in envs):
                    envs.append(v)
            tb = tb.tb_next
    return envs


def _site(guard, sites) -> tuple[Frame | None, list[Frame], bool]:
    """The user's line that added ``guard``, the user's stack there, and
    whether ShapeEnv names that line itself: its ``sloc`` names the user's
    file when the program compared a size (``if x.shape[0] > 8``); a guard
    made inside one of torch's ops (the fake slice of ``table[:, :n]``) is
    where `ShapeSites` saw it added."""
    stack = sites.guard_stack(guard.expr) if sites is not None else []
    loc = getattr(getattr(guard, "sloc", None), "framework_loc", None)
    if loc is not None and not isinstance(loc, str) and not is_internal(loc.filename):
        file = loc.filename if loc.filename.startswith("<") else os.path.abspath(loc.filename)
        site = Frame(file, loc.lineno or 0, loc.name, *columns.of_summary(loc))
        if stack and tuple(stack[-1])[:2] == site[:2]:
            return site, stack[:-1] + [site], True
        return site, [site], True
    return (Frame(*stack[-1]), stack, False) if stack else (None, [], False)


def constraint_guards(exc: BaseException, sites=None, names=()) -> list[GuardSite]:
    """For a violated shape constraint (an export ``Dim`` range, a
    ``mark_dynamic`` the code specialises): the guards torch added on the
    sizes it names, at the user's line that made each (``sites``, a
    `ShapeSites` of the export, for the guards ShapeEnv places in torch), in
    the order they were added, those of the program's own comparisons (a
    branch on a size) first; ``names``: the inputs' names (a strict
    export's sizes are its flattened inputs'). The error itself is raised
    after tracing, at no line of the program."""
    chain = exception_chain(exc)
    if not any(type(e).__name__ == "ConstraintViolationError"
               or str(e).startswith("Constraints violated") for e in chain):
        return []
    named = set(_SIZE_SOURCE.findall("\n".join(str(e) for e in chain)))
    out: list[tuple[bool, GuardSite]] = []
    for env in _shape_envs(chain):
        symbols, said = set(), {}
        for sym, sources in getattr(env, "var_to_sources", {}).items():
            for src in sources:
                name = src.name() if callable(src.name) else src.name
                name = named_inputs(str(name), names)
                said.setdefault(str(sym), re.sub(r"^L\['([^']+)'\]", r"\1", str(name)))
                if name in named:
                    symbols.add(sym)
        for g in getattr(env, "guards", ()):
            if not symbols & set(getattr(g.expr, "free_symbols", ())):
                continue
            site, stack, own = _site(g, sites)
            if site is None:
                continue
            found = GuardSite(site.file, site.line, site.function,
                              in_program_words(str(g.expr), said), stack)
            if not any(o[:4] == found[:4] for _, o in out):
                out.append((own, found))
    return [g for own, g in out if own] + [g for own, g in out if not own]
