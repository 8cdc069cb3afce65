"""What is never the user's code: torch and its exporter toolchain, graphdbg,
the standard library, launchers, and generated code (FX's ``<eval_with_key>``,
exec'd ``<string>`` methods, inductor's output modules in its cache folder);
and, line by line, a decorator's wrapper where it only calls the function it
wraps (`is_passthrough`).

A library such as transformers is the user's side: a finding inside it keeps
the library's line, with the user's call further up the stack.

The one rule every finding, recorder and check uses; decided at capture and
stored with each frame (``frames.internal``), so a reader never decides again.
Imports no torch (``RunWriter`` is handed `is_internal` by the session).
"""

from __future__ import annotations

import ast
import importlib.util
import linecache
import os
import re
import sys
import sysconfig
from typing import NamedTuple


def _package_dir(name: str) -> str | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.realpath(list(spec.submodule_search_locations)[0]) + os.sep


def _internal_prefixes() -> tuple[str, ...]:
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
    # graphdbg/, hooks/ and tui/ beside each other in a source checkout
    prefixes = {os.path.join(repo, sub) + os.sep for sub in ("graphdbg", "hooks", "tui")}
    # console scripts (.venv/bin/graphdbg, pytest) are launchers, not user code
    prefixes.add(os.path.realpath(sysconfig.get_paths()["scripts"]) + os.sep)
    prefixes.add(os.path.realpath(os.path.dirname(sys.executable)) + os.sep)
    # the ONNX exporter's toolchain (graphdbg[onnx]) is torch's side too; IPython and
    # ipykernel (on tornado's and zmq's event loop) run a notebook's cells, as runpy
    # runs a script (found, not imported)
    for pkg in ("torch", "functorch", "graphdbg", "onnx", "onnxscript", "onnx_ir", "onnxruntime",
                "IPython", "ipykernel", "tornado", "zmq", "traitlets", "jupyter_client"):
        d = _package_dir(pkg)
        if d:
            prefixes.add(d)
    try:   # the kernel's launcher, a module of one file
        spec = importlib.util.find_spec("ipykernel_launcher")
        if spec is not None and spec.origin:
            prefixes.add(os.path.realpath(spec.origin))
    except (ImportError, ValueError):
        pass
    return tuple(sorted(prefixes))


_INTERNAL = _internal_prefixes()
STDLIB = os.path.realpath(sysconfig.get_paths()["stdlib"]) + os.sep
# inductor writes each graph's code to <cache>/torchinductor_<user>/<xx>/<hash>.py
# (TORCHINDUCTOR_CACHE_DIR moves the cache): run, never written by anyone
_GENERATED = re.compile(r"[\\/]torchinductor_[^\\/]+[\\/]")
_cache: dict[str, bool] = {}


def _library_path(path: str) -> bool:
    return f"{os.sep}site-packages{os.sep}" in path or f"{os.sep}dist-packages{os.sep}" in path


def in_library(filename: str) -> bool:
    """An installed package's file (site-packages): a library's code, which
    counts as user code for placement but is not the program's own."""
    return _library_path(filename)


def is_generated(filename: str) -> bool:
    """Code that no one wrote: ``<eval_with_key>.N`` (FX), ``<string>`` (exec),
    inductor's output modules. Notebook cells are kept apart (`cells`)."""
    if filename.startswith("<"):
        return not filename.startswith("<ipython-input-")
    if _GENERATED.search(filename):
        return True
    # read when asked: a program may move the cache after graphdbg started
    cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    return bool(cache) and os.path.realpath(filename).startswith(os.path.realpath(cache) + os.sep)


_stdlib_cache: dict[str, bool] = {}


def is_stdlib(filename: str) -> bool:
    """The standard library (not a package installed under its folder)."""
    hit = _stdlib_cache.get(filename)
    if hit is None:
        real = os.path.realpath(filename)
        hit = _stdlib_cache[filename] = real.startswith(STDLIB) and not _library_path(real)
    return hit


def is_internal(filename: str) -> bool:
    """True for frames that are never the user's: torch, graphdbg, stdlib,
    launchers, generated code."""
    hit = _cache.get(filename)
    if hit is not None:
        return hit
    from . import cells
    if not filename:
        result = True
    elif cells.is_cell(filename):
        result = cells.runs_magic(filename)   # the %%graphdbg magic's own call is not
    elif filename.startswith("<"):
        # <frozen runpy>, <string>, <eval_with_key>.N, <torch_package_...>: a
        # notebook's "<ipython-input-…>" cell (IPython < 8) is the user's
        result = is_generated(filename)
    else:
        real = os.path.realpath(filename)
        result = real.startswith(_INTERNAL) or is_stdlib(filename) or is_generated(filename)
    _cache[filename] = result
    return result


def is_internal_frame(filename: str, line: int, function: str) -> bool:
    """`is_internal`, or a decorator's wrapper calling what it wraps
    (`is_passthrough`): a frame no user stack shows."""
    return is_internal(filename) or is_passthrough(filename, line, function)


# -- decorators' wrappers ---------------------------------------------------------------
# ``@functools.wraps(fn) def wrapper(*args, **kwargs): ... return fn(*args, **kwargs)``
# runs between a call and the function it wraps: transformers wraps each model's
# forward two or three times (``can_return_tuple``, ``capture_outputs``...), users
# time or log theirs. At its call of the wrapped function such a frame only passes
# the call on, and the line to show is the caller's or the wrapped function's; its
# other lines are its own work (a graph break there stays there). Found in the
# source (the same for a live frame, a traceback and a stack torch wrote as text):
# a function nested in another one that calls a name of the enclosing scope (the
# closed-over function) and is decorated with ``wraps(that name)``, or passes its
# own ``*args`` or ``**kwargs`` to it.

class Wrapper(NamedTuple):
    """A decorator's wrapper function in a file."""
    name: str
    first: int             # its first line (decorators included), as ``co_firstlineno``
    last: int
    wrapped: str           # the closed-over name it calls: the function it wraps
    forwards: frozenset    # the lines of its calls of ``wrapped``


_wrappers: dict[str, tuple[Wrapper, ...]] = {}
_passthrough: dict[tuple[str, int, str], bool] = {}
_MAX_SOURCE = 2_000_000   # characters: a generated file that large is never parsed


def _bound(fn: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> set[str]:
    """Names a function binds itself (its parameters, assignments, nested defs)."""
    a = fn.args
    names = {p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)}
    names |= {p.arg for p in (a.vararg, a.kwarg) if p is not None}
    todo = list(fn.body) if isinstance(fn.body, list) else [fn.body]
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            continue   # its own scope
        if isinstance(node, ast.Lambda):
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(al.asname or al.name).split(".")[0] for al in node.names}
        todo.extend(ast.iter_child_nodes(node))
    return names


def _own_calls(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.Call]:
    """The calls in ``fn``'s own body (not in the functions it defines)."""
    out, todo = [], list(fn.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Call):
            out.append(node)
        todo.extend(ast.iter_child_nodes(node))
    return out


def _wraps_name(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    """``x`` of a ``@wraps(x)`` / ``@functools.wraps(x)`` decorator."""
    for d in fn.decorator_list:
        if isinstance(d, ast.Call) and d.args and isinstance(d.args[0], ast.Name):
            f = d.func
            if (isinstance(f, ast.Name) and f.id == "wraps") or \
                    (isinstance(f, ast.Attribute) and f.attr == "wraps"):
                return d.args[0].id
    return None


def _forwards(call: ast.Call, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether ``call`` passes ``fn``'s own ``*args`` or ``**kwargs`` on."""
    a = fn.args
    star = a.vararg.arg if a.vararg is not None else None
    kw = a.kwarg.arg if a.kwarg is not None else None
    return any(isinstance(x, ast.Starred) and isinstance(x.value, ast.Name) and x.value.id == star
               for x in call.args) or \
        any(k.arg is None and isinstance(k.value, ast.Name) and k.value.id == kw
            for k in call.keywords)


def _find_wrappers(tree: ast.AST) -> list[Wrapper]:
    found: list[Wrapper] = []

    def visit(node: ast.AST, enclosing: set[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                own = _bound(child)
                if enclosing:
                    wraps = _wraps_name(child)
                    calls = [c for c in _own_calls(child) if isinstance(c.func, ast.Name)
                             and c.func.id in enclosing and c.func.id not in own
                             and (c.func.id == wraps or _forwards(c, child))]
                    if calls:
                        wrapped = calls[0].func.id
                        lines = frozenset(n for c in calls if c.func.id == wrapped
                                          for n in range(c.lineno, (c.end_lineno or c.lineno) + 1))
                        first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                        found.append(Wrapper(child.name, first, child.end_lineno or child.lineno,
                                             wrapped, lines))
                visit(child, enclosing | own)
            elif isinstance(child, ast.ClassDef):
                visit(child, enclosing)   # a class body's names are not closed over
            else:
                visit(child, enclosing)

    visit(tree, set())
    return found


def wrappers_in(filename: str) -> tuple[Wrapper, ...]:
    """The decorators' wrapper functions defined in a file (from its source)."""
    hit = _wrappers.get(filename)
    if hit is None:
        hit = ()
        if filename and not is_internal(filename):
            source = "".join(linecache.getlines(filename))
            if "def " in source and len(source) < _MAX_SOURCE:
                try:
                    hit = tuple(_find_wrappers(ast.parse(source)))
                except (SyntaxError, ValueError, RecursionError):
                    hit = ()
        _wrappers[filename] = hit
    return hit


def wrapper_at(filename: str, line: int, function: str) -> Wrapper | None:
    """The decorator's wrapper a frame runs in (``function`` at ``line`` of
    ``filename``), if it runs in one: the innermost such function there."""
    best = None
    for w in wrappers_in(filename):
        if w.name == function and w.first <= line <= w.last \
                and (best is None or w.first > best.first):
            best = w
    return best


def is_passthrough(filename: str, line: int, function: str) -> bool:
    """A decorator's wrapper at its call of the function it wraps: it only
    passes the call on (``return fn(*args, **kwargs)``)."""
    key = (filename, line, function)
    hit = _passthrough.get(key)
    if hit is None:
        w = wrapper_at(filename, line, function)
        hit = _passthrough[key] = w is not None and line in w.forwards
    return hit


def wrapped_function(code, closure) -> object | None:
    """The function that a decorator's wrapper wraps, from the wrapper's code
    and its closure's cells (a live function's ``__closure__``, or the cells
    of a frame Dynamo compiles); None when ``code`` is no wrapper."""
    w = wrapper_at(code.co_filename, code.co_firstlineno, code.co_name)
    if w is None or w.first != code.co_firstlineno or not closure \
            or w.wrapped not in code.co_freevars:
        return None
    try:
        return closure[code.co_freevars.index(w.wrapped)].cell_contents
    except (IndexError, ValueError):   # an empty cell
        return None


def unwrap(fn: object) -> object:
    """The function under a stack of decorators: ``__wrapped__`` followed
    (``functools.wraps``), and the closed-over function of a wrapper without it."""
    for _ in range(32):   # a cycle of __wrapped__ is not followed for ever
        inner = getattr(fn, "__wrapped__", None)
        if inner is None:
            f = getattr(fn, "__func__", fn)   # a bound method's function
            code = getattr(f, "__code__", None)
            inner = wrapped_function(code, f.__closure__) if code is not None else None
        if inner is None or inner is fn:
            return fn
        fn = inner
    return fn


def def_line(fn: object) -> tuple[str, int, str] | None:
    """(file, line, qualified name) of the ``def`` of a Python function (not
    its first decorator's line, as ``co_firstlineno`` is)."""
    f = getattr(fn, "__func__", fn)
    code = getattr(f, "__code__", None)
    if code is None:
        return None
    file, first = code.co_filename, code.co_firstlineno
    lines = linecache.getlines(file)
    line = next((n for n in range(first, min(first + 64, len(lines) + 1))
                 if lines[n - 1].lstrip().startswith(("def ", "async def "))), first)
    return file, line, getattr(f, "__qualname__", code.co_name)
