"""Where in the user's code, and in which nn.Module, the program is right now.

Used per eager op, so it walks frames directly instead of building
`traceback` objects.
"""

from __future__ import annotations

import sys
import weakref
from types import FrameType

import torch

from graphdbg.sourcemap import is_internal

_CALL_IMPL_CODES = {torch.nn.Module._call_impl.__code__}
MAX_USER_FRAMES = 24


def current_stack(skip: int = 2) -> tuple[list[tuple[str, int, str]], list[torch.nn.Module]]:
    """User frames (outermost first) and active modules (outermost first)."""
    frames: list[tuple[str, int, str]] = []
    modules: list[torch.nn.Module] = []
    f: FrameType | None = sys._getframe(skip)
    while f is not None:
        code = f.f_code
        if code in _CALL_IMPL_CODES:
            m = f.f_locals.get("self")
            if m is not None:
                modules.append(m)
        elif not is_internal(code.co_filename) and len(frames) < MAX_USER_FRAMES:
            frames.append((code.co_filename, f.f_lineno, code.co_name))
        f = f.f_back
    frames.reverse()
    modules.reverse()
    return frames, modules


class ModuleNames:
    """Qualified names of modules, relative to the outermost module seen
    running (named after its class, e.g. ``GPT2LMHeadModel.transformer.h.0``)."""

    def __init__(self) -> None:
        self._names: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

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
            name = ".".join(type(m).__name__ for m in modules)
        return name, type(inner).__name__


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
