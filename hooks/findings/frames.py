"""Where in the user's code, and in which nn.Module, the program is right now.

Used per eager op, so it walks frames directly instead of building
`traceback` objects, and `StackWalker` caches what it can per code object
(never per frame: a frame's id is reused as soon as it returns).
"""

from __future__ import annotations

import os
import sys
import weakref
from types import FrameType

import torch

from graphdbg.core.sourcemap import Frame, innermost_user, is_internal, parse_traceback

from ..record import creation

_CALL_IMPL = torch.nn.Module._call_impl.__code__
_WRAPPED_CALL_IMPL = torch.nn.Module._wrapped_call_impl.__code__
MAX_USER_FRAMES = 24


def _optimizer_step_code():
    """The code of the wrapper every optimizer's ``step`` runs in
    (``Optimizer.profile_hook_step``'s ``wrapper``), if torch has one."""
    import types
    from torch.optim import Optimizer
    fn = getattr(Optimizer, "profile_hook_step", None)
    consts = getattr(getattr(fn, "__code__", None), "co_consts", ())
    return next((c for c in consts if isinstance(c, types.CodeType) and c.co_name == "wrapper"),
                None)


_OPTIMIZER_STEP = _optimizer_step_code()
STEP = "step"  # StackWalker's mark for an optimizer's step


def _module_of(f: FrameType) -> torch.nn.Module | None:
    """``self`` of a ``Module._call_impl`` frame. Read from the calling
    ``_wrapped_call_impl`` frame when there is one (same ``self``; its three
    locals make ``f_locals`` several times cheaper than ``_call_impl``'s)."""
    b = f.f_back
    if b is not None and b.f_code is _WRAPPED_CALL_IMPL:
        return b.f_locals.get("self")
    return f.f_locals.get("self")


class StackWalker:
    """The user frames and running module of the program, for the per-op hot path.

    Per code object it remembers whether the code is internal (False),
    ``Module._call_impl`` (True) or user code (a dict: instruction offset ->
    ``(file, line, function)``; ``f_lineno`` decodes the line table on every
    access, ``f_lasti`` does not). The cache is keyed by ``id(code)`` and keeps
    each code object alive in ``_alive``, so an id cannot be reused while it
    is cached. Only the innermost module is looked up.
    """

    def __init__(self) -> None:
        self._codes: dict[int, bool | dict] = {}
        self._alive: list = []

    def _classify(self, code) -> bool | dict:
        if len(self._alive) > 50_000:
            self._codes.clear()
            self._alive.clear()
        if code is _CALL_IMPL:
            v: bool | dict | str = True
        elif code is _OPTIMIZER_STEP:
            v = STEP
        elif is_internal(code.co_filename):
            v = False
        else:
            v = {}
        self._codes[id(code)] = v
        self._alive.append(code)
        return v

    def walk(self, f: FrameType | None) -> tuple[tuple, torch.nn.Module | None, bool]:
        """From frame ``f`` outwards: the innermost ``MAX_USER_FRAMES`` user
        frames, *innermost first*, the innermost running module, and whether
        an optimizer's ``step`` is running (it is inside the user's call)."""
        get = self._codes.get
        frames: list[tuple[str, int, str]] = []
        inner = None
        stepping = False
        n = 0
        while f is not None:
            code = f.f_code
            v = get(id(code))
            if v is None:
                v = self._classify(code)
            if v is False:
                pass
            elif v is STEP:
                stepping = not frames  # no user frame inside it (a closure the step calls is)
            elif v is True:
                if inner is None:
                    inner = _module_of(f)
                    if inner is not None and n >= MAX_USER_FRAMES:
                        break
            elif n < MAX_USER_FRAMES:
                lasti = f.f_lasti
                ft = v.get(lasti)
                if ft is None:
                    ft = v[lasti] = (code.co_filename, f.f_lineno, code.co_name)
                frames.append(ft)
                n += 1
            elif inner is not None:
                break
            f = f.f_back
        return tuple(frames), inner, stepping

    @staticmethod
    def modules(f: FrameType | None) -> list[torch.nn.Module]:
        """All running modules from frame ``f`` outwards, outermost first."""
        modules = []
        while f is not None:
            if f.f_code is _CALL_IMPL:
                m = _module_of(f)
                if m is not None:
                    modules.append(m)
            f = f.f_back
        modules.reverse()
        return modules


class ModuleNames:
    """Qualified names of modules, relative to the outermost module seen
    running (named after its class, e.g. ``GPT2LMHeadModel.transformer.h.0``)."""

    def __init__(self) -> None:
        self._names: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        # id(module) -> (weakref, (path, class name)): a module's name never
        # changes once in _names, and a lookup here costs no weakref creation
        self._fast: dict[int, tuple] = {}

    def lookup(self, module: torch.nn.Module) -> tuple[str, str] | None:
        """``path([..., module])`` when ``module`` already has a name."""
        hit = self._fast.get(id(module))
        if hit is not None and hit[0]() is module:
            return hit[1]
        return None

    def _remember(self, module: torch.nn.Module, result: tuple[str, str]) -> None:
        key = id(module)
        fast = self._fast

        def drop(ref, key=key, fast=fast):
            hit = fast.get(key)
            if hit is not None and hit[0] is ref:
                del fast[key]
        try:
            fast[key] = (weakref.ref(module, drop), result)
        except TypeError:
            pass

    def path(self, modules: list[torch.nn.Module]) -> tuple[str | None, str | None]:
        if not modules:
            return None, None
        inner = modules[-1]
        try:
            name = self._names.get(inner)
            if name is None:
                root = modules[0]
                if root not in self._names:
                    base = type(root).__name__
                    for sub_name, sub in root.named_modules():
                        if sub not in self._names:
                            self._names[sub] = f"{base}.{sub_name}" if sub_name else base
                name = self._names.get(inner)
                if name is None:
                    name = ".".join(type(m).__name__ for m in modules)
                    self._names[inner] = name
        except TypeError:  # a module that cannot be weakly referenced or hashed
            return ".".join(type(m).__name__ for m in modules), type(inner).__name__
        result = (name, type(inner).__name__)
        self._remember(inner, result)
        return result


def nn_module_path(meta_stack: dict | None) -> tuple[str | None, str | None]:
    """Innermost module of an FX node's ``nn_module_stack`` as a dotted path.

    Dynamo keys look like ``L['self'].layers[0].attn`` or ``L['fn'].0``; we drop
    the ``L['...']`` root and normalise indexing to dots.
    """
    if not meta_stack:
        return None, None
    entries = list(meta_stack.values())
    path, cls = entries[-1]
    root = _class_name(entries[0][1]) if _is_root(str(entries[0][0])) else None
    p = _normalise(str(path))
    if root:
        p = f"{root}.{p}" if p else root
    return p or None, _class_name(cls)


def _is_root(path: str) -> bool:
    return path.startswith("L[") and path.endswith("]") and path.count("[") == 1


def _class_name(cls: object) -> str:
    if isinstance(cls, type):
        return cls.__name__
    return str(cls).rsplit(".", 1)[-1].rstrip("'>")


def _normalise(path: str) -> str:
    if path.startswith("L["):
        path = path[path.find("]") + 1:]
    path = path.replace("['", ".").replace("']", "").replace("[", ".").replace("]", "")
    return path.replace("._modules.", ".").strip(".")


def node_target(node: torch.fx.Node, gm: torch.fx.GraphModule | None = None) -> str:
    """What an FX node runs, as the user would name it (`torch._C._nn.linear`,
    `sin`, `fc1 (Linear)`)."""
    if node.op == "call_function":
        try:
            from torch.fx.node import _get_qualified_name
            return _get_qualified_name(node.target)
        except Exception:
            return getattr(node.target, "__name__", str(node.target))
    if node.op == "call_module" and gm is not None:
        try:
            return f"{node.target} ({type(gm.get_submodule(str(node.target))).__name__})"
        except Exception:
            pass
    return str(node.target)


def module_site(node: torch.fx.Node) -> tuple[str, int, str] | None:
    """Where the user's code made the innermost module of ``node`` whose making
    was recorded (hooks/record/creation.py): the line for nodes of modules whose
    forward lives in torch (``nn.Sequential(nn.Linear(...), nn.ReLU())``).
    Else, for a module compiled whole, the line it was compiled at."""
    stack = node.meta.get("nn_module_stack")
    if not stack:
        return None
    entries = []
    for key, entry in reversed(list(stack.items())):
        try:
            entries.append((key, entry[1]))
        except (TypeError, IndexError):
            entries.append((key, None))
    for compiled in (False, True):  # else the line its root module was compiled at
        for key, cls in entries:
            site = creation.module_site_by_id(key, cls, compiled=compiled)
            if site is not None:
                return site
    return None


def fallback_site(node: torch.fx.Node) -> tuple[str, int, str] | None:
    """The line of a node whose ``stack_trace`` names no user frame: the line
    ``symbolic_trace`` traced it from, else the line that made its module."""
    return creation.traced_at(node) or module_site(node)


def node_source(writer, node: torch.fx.Node) -> tuple[int | None, int | None, str | None, str | None]:
    """(user frame id, user stack id, module path, module class) of an FX node,
    from its ``stack_trace`` and ``nn_module_stack``, interned in ``writer``.
    Without a user frame in its ``stack_trace``: `fallback_site`."""
    parsed = parse_traceback(node.meta.get("stack_trace") or "")
    user_parsed = [(f, c) for f, c in parsed if not is_internal(f.file)]
    stack = writer.stack_id([f for f, _ in user_parsed], [c for _, c in user_parsed])
    user = innermost_user([f for f, _ in parsed])
    user_id = None
    if user is not None:
        code = next((c for f, c in parsed if f == user), None)
        user_id = writer.frame_id(user.file, user.line, user.function, code or None)
    else:
        site = fallback_site(node)
        if site is not None:
            user_id = writer.frame_id(*site)
            stack = stack or writer.stack_id([site])
    mpath, mcls = nn_module_path(node.meta.get("nn_module_stack"))
    return user_id, stack, mpath, mcls


def generated_method(owner, code) -> Frame | None:
    """A generated method that Dynamo compiles as a frame of its own (a
    dataclass's ``__init__``, exec'd: "<string>:2" to torch, which no user can
    find): named after the class of ``owner`` (its ``self``), at the program's
    line that called it, the innermost frame of the program's on the stack
    now (the frame being compiled is not linked to its caller yet)."""
    if owner is None:
        return None
    cls = owner if isinstance(owner, type) else type(owner)
    f = sys._getframe(1)
    while f is not None and (f.f_code.co_filename.startswith("<") or is_internal(f.f_code.co_filename)):
        f = f.f_back
    if f is None:
        return None
    return Frame(os.path.abspath(f.f_code.co_filename), f.f_lineno, f"{cls.__qualname__}.{code.co_name}")
