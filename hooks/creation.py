"""Which line of the user's code created an FX node.

Nodes that Dynamo or a tracer makes carry the user's ``stack_trace``; nodes a
graph transformation adds (``graph.call_function(...)`` in a custom pass) carry
nothing. While a session runs, ``Graph.create_node`` is wrapped to remember,
for nodes created by user code, the user's line: the first frame outside
torch.fx (a pass calls FX's graph API directly, or through FX helpers such as
the subgraph rewriter or a Transformer). Nodes made by Dynamo, AOTAutograd or
inductor have torch frames there and are skipped after a few frame lookups;
nodes made by symbolically tracing the user's code are not a pass's either.
The site is kept beside the node (a weak map), never in the node's ``meta``.
"""

from __future__ import annotations

import functools
import os
import sys
import weakref

import torch.fx

from graphdbg.sourcemap import is_internal

_FX_DIR = os.path.dirname(torch.fx.__file__) + os.sep
_STDLIB = (os.path.dirname(functools.__file__) + os.sep,)
_SITES: "weakref.WeakKeyDictionary[torch.fx.Node, tuple[str, int, str]]" = weakref.WeakKeyDictionary()
_orig_create_node = None


def created_at(node: torch.fx.Node) -> tuple[str, int, str] | None:
    """(file, line, function) of the user code that created ``node``, if known."""
    try:
        return _SITES.get(node)
    except TypeError:
        return None


_TRACING = (_FX_DIR + "proxy.py", _FX_DIR + "_symbolic_trace.py")
_TRANSFORMER = _FX_DIR + "interpreter.py"


def _creator() -> tuple[str, int, str] | None:
    """The user frame behind this node creation, unless the node was made by
    tracing the user's code (symbolic_trace: the node stands for that line,
    it was not added by a pass) or by torch itself."""
    f = sys._getframe(2)
    traced = transformer = False
    while f is not None:
        file = f.f_code.co_filename
        if file.startswith(_FX_DIR):
            traced = traced or file in _TRACING
            transformer = transformer or file == _TRANSFORMER
            f = f.f_back
            continue
        if file.startswith(_STDLIB) and "site-packages" not in file:
            f = f.f_back
            continue
        if is_internal(file) or (traced and not transformer):
            return None
        return file, f.f_lineno, f.f_code.co_name
    return None


_installs = 0  # nested captures share the one wrapper


def install() -> None:
    global _orig_create_node, _installs
    _installs += 1
    if _orig_create_node is not None:
        return
    orig = _orig_create_node = torch.fx.Graph.create_node

    @functools.wraps(orig)
    def create_node(self, *args, **kwargs):
        node = orig(self, *args, **kwargs)
        try:
            site = _creator()
            if site is not None:
                _SITES[node] = site
        except Exception:
            pass
        return node

    torch.fx.Graph.create_node = create_node


def uninstall() -> None:
    """Undo one `install`; the wrapper goes when the outermost capture ends."""
    global _orig_create_node, _installs
    _installs = max(0, _installs - 1)
    if _installs == 0 and _orig_create_node is not None:
        torch.fx.Graph.create_node = _orig_create_node
        _orig_create_node = None
