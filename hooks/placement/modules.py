"""Which nn.Module is running, and what an FX node runs, by the user's names."""

from __future__ import annotations

import weakref

import torch


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
