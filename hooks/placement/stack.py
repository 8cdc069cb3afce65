"""The live stack: the user's frames and line right now.

Every recorder, check and finding that asks "where is the program" asks here;
no other module reads live frames (tests/unit/test_structure.py checks it). Frames
are walked with ``f_back`` from ``sys._getframe``, never through ``traceback``
objects: the eager recorder asks once per op (`StackWalker`).
"""

from __future__ import annotations

import os
import sys
from types import CodeType, FrameType
from typing import Callable, Iterator

import torch

from graphdbg.core.sourcemap import Frame, original_function

from . import columns
from .internal import in_library, is_generated, is_internal, is_passthrough

_getframe = sys._getframe
_CALL_IMPL = torch.nn.Module._call_impl.__code__
_WRAPPED_CALL_IMPL = torch.nn.Module._wrapped_call_impl.__code__
MAX_USER_FRAMES = 24


def outward(skip: int = 0) -> Iterator[FrameType]:
    """The live frames from the caller of the caller (``skip`` more out)
    outwards: for the searches that look for one of torch's own frames (the
    frame Dynamo recompiles, DDPOptimizer's bucket, torch.compile's wrapper)."""
    f = _getframe(2 + skip)
    while f is not None:
        yield f
        f = f.f_back


def when_returns(is_exit: Callable[[CodeType], bool], then: Callable[[], None],
                 skip_dynamo: Callable) -> bool:
    """Call ``then`` as the outermost running frame whose code ``is_exit``
    holds returns (after its own ``with`` and ``finally`` blocks ran): a
    profile function on this thread until then. False, and nothing done,
    where the program has a profile function of its own. ``skip_dynamo``
    marks the profile function for Dynamo to skip (compat.skip_dynamo)."""
    if sys.getprofile() is not None:
        return False

    def watch(frame, event, _arg) -> None:
        if event != "return" or not is_exit(frame.f_code):
            return
        f = frame.f_back
        while f is not None:
            if is_exit(f.f_code):
                return   # an outer one still runs
            f = f.f_back
        sys.setprofile(None)
        then()

    sys.setprofile(skip_dynamo(watch))
    return True


def _passes_on(f: FrameType) -> bool:
    """A user frame that is a decorator's wrapper passing the call on."""
    c = f.f_code
    return is_passthrough(c.co_filename, f.f_lineno or 0, c.co_name)


def _as_frame(f: FrameType) -> Frame:
    """A live frame as a `Frame`, with the span of the call it is in (`columns`)."""
    c = f.f_code
    file = c.co_filename
    return Frame(file if file.startswith("<") else os.path.abspath(file), f.f_lineno or 0,
                 original_function(c.co_name)[0], *columns.of_frame(f))


def user_frame(skip: int = 0) -> Frame | None:
    """The innermost user frame of the caller's stack (``skip`` frames out)."""
    f = _getframe(1 + skip)
    while f is not None and (is_internal(f.f_code.co_filename) or _passes_on(f)):
        f = f.f_back
    return None if f is None else _as_frame(f)


def user_stack(skip: int = 0, limit: int | None = None) -> list[Frame]:
    """The user frames of the caller's stack, outermost first (the innermost
    ``limit`` of them)."""
    out = []
    f = _getframe(1 + skip)
    while f is not None and (limit is None or len(out) < limit):
        if not is_internal(f.f_code.co_filename) and not _passes_on(f):
            out.append(_as_frame(f))
        f = f.f_back
    out.reverse()
    return out


def call_into(is_entry: Callable[[CodeType], bool], skip: int = 0
              ) -> tuple[Frame | None, list[Frame]]:
    """The user's call into torch that is running now: the innermost user
    frame outside the outermost frame for which ``is_entry(code)`` holds
    (Dynamo's eval_frame: the call being recompiled), and the user stack up to
    it, outermost first. Without an entry frame: the innermost user frame."""
    frames: list[tuple[Frame, bool]] = []   # innermost first: (frame, is it the entry)
    f = _getframe(1 + skip)
    while f is not None:
        code = f.f_code
        user = not is_internal(code.co_filename) and not _passes_on(f)
        frames.append((_as_frame(f) if user else None, is_entry(code)))
        f = f.f_back
    frames.reverse()   # outermost first
    site = None
    for i, (_, entry) in enumerate(frames):
        if entry:
            site = next((fr for fr, _ in reversed(frames[:i]) if fr is not None), None)
            break
    users = [fr for fr, _ in frames if fr is not None]
    if site is None and users:
        site = users[-1]
    if site is not None and site in users:
        users = users[:users.index(site) + 1]
    return site, users


def generated_method(owner, code: CodeType, skip: int = 0) -> Frame | None:
    """A generated method that Dynamo compiles as a frame of its own (a
    dataclass's ``__init__``, exec'd: "<string>:2" to torch, which no user can
    find): named after the class of ``owner`` (its ``self``), at the program's
    line that called it, the innermost frame of the program's on the stack
    now (the frame being compiled is not linked to its caller yet)."""
    if owner is None:
        return None
    cls = owner if isinstance(owner, type) else type(owner)
    user = user_frame(1 + skip)
    return None if user is None else user._replace(function=f"{cls.__qualname__}.{code.co_name}")


def called_from(code: CodeType, library: bool, stop: CodeType, at_stop: Callable, skip: int = 0
                ) -> tuple[object, Frame | None]:
    """Where the program called the compiled frame of ``code``: outwards from
    the caller, at each frame of ``stop`` (torch.compile's OptimizedModule
    ``__call__``) what ``at_stop(frame)`` says, if anything (there a library's
    search ends); else the first user frame (the call, as a `Frame`). For a
    library's frame (``library``), the library's own frames around the call
    are passed over, and a user frame means a library function the program
    compiled itself: ``(None, None)``."""
    f = _getframe(2 + skip)
    while f is not None:
        c = f.f_code
        if c is stop:
            found = at_stop(f)
            if found is not None or library:
                return found, None
        if library and c is not code and in_library(c.co_filename):
            pass  # the library's own frames around the call
        elif not is_internal(c.co_filename) and not _passes_on(f):
            return None, (None if library else _as_frame(f))
        f = f.f_back
    return None, None


def _module_of(f: FrameType) -> torch.nn.Module | None:
    """``self`` of a ``Module._call_impl`` frame. Read from the calling
    ``_wrapped_call_impl`` frame when there is one (same ``self``; its three
    locals make ``f_locals`` several times cheaper than ``_call_impl``'s)."""
    b = f.f_back
    if b is not None and b.f_code is _WRAPPED_CALL_IMPL:
        return b.f_locals.get("self")
    return f.f_locals.get("self")


def _optimizer_step_code():
    """The code of the wrapper every optimizer's ``step`` runs in
    (``Optimizer.profile_hook_step``'s ``wrapper``), if torch has one."""
    import types
    from torch.optim import Optimizer
    fn = getattr(Optimizer, "profile_hook_step", None)
    consts = getattr(getattr(fn, "__code__", None), "co_consts", ())
    return next((c for c in consts if isinstance(c, types.CodeType) and c.co_name == "wrapper"),
                None)


def _unwrapped_code(fn) -> object:
    while hasattr(fn, "__wrapped__"):
        fn = fn.__wrapped__
    return getattr(fn, "__code__", None)


def _optimizer_codes() -> set:
    """The code whose ops are the optimizer's work although outside its
    ``step``: ``zero_grad`` (an optimizer's, a module's)."""
    from torch.optim import Optimizer
    codes = {_optimizer_step_code(), _unwrapped_code(Optimizer.zero_grad),
             _unwrapped_code(torch.nn.Module.zero_grad)}
    codes.discard(None)
    return codes


def _file_of(module_name: str) -> str | None:
    import importlib
    try:
        return os.path.abspath(importlib.import_module(module_name).__file__)
    except Exception:
        return None


_OPTIMIZER_CODES = _optimizer_codes()
_CLIP_FILE = _file_of("torch.nn.utils.clip_grad")   # clip_grad_norm_, clip_grad_value_, ...
_INIT_FILE = _file_of("torch.nn.init")
_MODULES_DIR = os.path.dirname(torch.nn.modules.__file__)
# a module's methods whose ops initialise it (weight init by convention,
# transformers' ``_init_weights`` included)
_INIT_METHODS = {"__init__", "reset_parameters", "_reset_parameters", "_init_weights",
                 "init_weights", "_initialize_weights"}
STEP = "step"  # StackWalker's mark: an optimizer's step, gradient clipping, zero_grad
INIT = "init"  # StackWalker's mark: torch.nn.init, a module's __init__ or weight init
BACKWARD = "backward"  # StackWalker's mark: torch.autograd.backward/grad before the engine runs
COMPILED = "compiled"  # StackWalker's mark: compiled code graphdbg did not wrap (see `_is_compiled`)
# AOTAutograd's runtime wrappers call every graph an aot backend (inductor,
# aot_eager) compiled; a graph compiled under the capture runs with the eager
# recorder paused, so one seen here was compiled before the capture started
_AOT_RUNTIME = os.path.dirname(torch.__file__) + os.sep + os.path.join(
    "_functorch", "_aot_autograd", "runtime_wrappers.py")


def _is_compiled(file: str) -> bool:
    """Code that runs a compiled graph: inductor's output modules (files in
    its cache folder; FX's ``<eval_with_key>`` is a user's traced module run
    eagerly too, so not it) and AOTAutograd's runtime wrappers."""
    return file == _AOT_RUNTIME or (not file.startswith("<") and is_generated(file))


def _backward_codes() -> set:
    """torch.autograd's ``backward`` and ``grad``: the ops they run on the
    caller's thread (the seed gradient ``ones_like``, shape checks) are the
    backward's, though no autograd node runs them."""
    import torch.autograd as ag
    codes = {_unwrapped_code(ag.backward), _unwrapped_code(ag.grad)}
    codes.discard(None)
    return codes


_BACKWARD_CODES = _backward_codes()


class _InitLines(dict):
    """A user code's line cache (see `StackWalker`) that also marks it as a
    module's initialisation (its ``__init__``, ``reset_parameters``...)."""
    __slots__ = ()


def _initialises_module(code, f: FrameType | None) -> bool:
    """A module's __init__ or weight-init method, running on a module."""
    if code.co_name not in _INIT_METHODS or f is None:
        return False
    if os.path.dirname(code.co_filename) == _MODULES_DIR:
        return True   # torch's own modules (Linear.__init__ -> reset_parameters)
    try:
        return isinstance(f.f_locals.get("self"), torch.nn.Module)
    except Exception:
        return False


class StackWalker:
    """The user frames and running module of the program, for the per-op hot path.

    Per code object it remembers whether the code is internal (False),
    ``Module._call_impl`` (True) or user code (a dict: instruction offset ->
    ``(file, line, function)``, or False where a decorator's wrapper passes
    the call on; ``f_lineno`` decodes the line table on every access,
    ``f_lasti`` does not). The cache is keyed by ``id(code)`` and keeps
    each code object alive in ``_alive``, so an id cannot be reused while it
    is cached. Only the innermost module is looked up.
    """

    def __init__(self) -> None:
        self._codes: dict[int, bool | dict] = {}
        self._alive: list = []

    def _classify(self, code, f: FrameType | None = None) -> bool | dict:
        """Once per code object (``f``: a frame running it, for ``self``)."""
        if len(self._alive) > 50_000:
            self._codes.clear()
            self._alive.clear()
        file = code.co_filename
        if code is _CALL_IMPL:
            v: bool | dict | str = True
        elif code in _OPTIMIZER_CODES or file == _CLIP_FILE:
            v = STEP
        elif file == _INIT_FILE:
            v = INIT
        elif code in _BACKWARD_CODES:
            v = BACKWARD
        elif _is_compiled(file):
            v = COMPILED
        elif is_internal(file):
            v = INIT if _initialises_module(code, f) else False
        else:
            v = _InitLines() if _initialises_module(code, f) else {}
        self._codes[id(code)] = v
        self._alive.append(code)
        return v

    def walk(self, skip: int = 0) -> tuple[tuple, torch.nn.Module | None, str]:
        """From the caller's caller (``skip`` frames further out) outwards:
        the innermost ``MAX_USER_FRAMES`` user frames, *innermost first*, the
        innermost running module, and the phase the frames it passes say:
        ``optimizer`` (torch's own code of an optimizer's ``step``, gradient
        clipping or ``zero_grad`` is running the op: no user frame inside
        it), ``init`` (inside torch.nn.init or a module's ``__init__`` or
        weight-init method), ``backward`` (torch.autograd.backward or grad,
        before its engine runs: the seed gradient), ``compiled`` (inside a
        compiled graph's code: inductor's output module, AOTAutograd's
        runtime; compiled work, not eager), else ``forward``. The phase costs
        nothing more: the marks are cached per code object with the rest."""
        f = _getframe(2 + skip)
        get = self._codes.get
        frames: list[tuple[str, int, str]] = []
        inner = None
        phase = None
        n = 0
        while f is not None:
            code = f.f_code
            v = get(id(code))
            if v is None:
                v = self._classify(code, f)
            if v is False:
                pass
            elif v is STEP:
                if not frames and phase is None:  # a closure the step calls is the user's
                    phase = "optimizer"
            elif v is INIT:
                if phase is None:
                    phase = "init"
            elif v is BACKWARD:
                if phase is None:
                    phase = "backward"
            elif v is COMPILED:
                return (), None, COMPILED   # whatever is outside it: compiled work
            elif v is True:
                if inner is None:
                    inner = _module_of(f)
                    if inner is not None and n >= MAX_USER_FRAMES:
                        break
            elif n < MAX_USER_FRAMES:
                if phase is None and v.__class__ is _InitLines:
                    phase = "init"
                lasti = f.f_lasti
                ft = v.get(lasti)
                if ft is None:
                    line = f.f_lineno
                    # a decorator's wrapper passing the call on: False, not shown
                    ft = v[lasti] = not is_passthrough(code.co_filename, line, code.co_name) and \
                        (code.co_filename, line, code.co_name)
                if ft is not False:
                    frames.append(ft)
                    n += 1
            elif inner is not None:
                break
            f = f.f_back
        return tuple(frames), inner, phase or "forward"

    @staticmethod
    def modules(skip: int = 0) -> list[torch.nn.Module]:
        """All running modules from the caller's caller outwards, outermost first."""
        f = _getframe(2 + skip)
        modules = []
        while f is not None:
            if f.f_code is _CALL_IMPL:
                m = _module_of(f)
                if m is not None:
                    modules.append(m)
            f = f.f_back
        modules.reverse()
        return modules
