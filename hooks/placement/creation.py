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

Nodes made by symbolically tracing the user's code (``torch.fx.symbolic_trace``
while a capture runs) get the traced line instead (`traced_at`): such graphs
have no ``stack_trace``, and the traced line is what it would say.

``nn.Module.__init__`` is wrapped too: each module made while a session runs
remembers where the user's code made it (`module_site`): the deepest frame
outside torch and outside the module's own ``__init__`` chain (``self.fc =
nn.Linear(...)`` in the parent's ``__init__``, the ``nn.Sequential(...)`` line,
``torch.compile(model)`` for the OptimizedModule that torch.compile makes).
Nodes of modules whose forward lives in torch (an ``nn.Sequential`` of
``nn.Linear`` compiled whole) have no user line in their ``stack_trace``; they
are placed at the line that made their module (`module_site_by_id`, keyed as
Dynamo's ``nn_module_stack`` is). Modules made before the session started
(a ``graphdbg.capture()`` block opened after the model was built) have no
site; under ``graphdbg run`` the session starts before the script, so every
module has one. Modules copied (``copy.deepcopy``) or unpickled are not made
by ``__init__`` and have none either.
"""

from __future__ import annotations

import functools
import os
import sys
import weakref

import torch.fx

from .internal import is_internal, is_stdlib

Site = tuple  # (file, line, function)

_FX_DIR = os.path.dirname(torch.fx.__file__) + os.sep
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_SITES: "weakref.WeakKeyDictionary[torch.fx.Node, Site]" = weakref.WeakKeyDictionary()
_TRACED: "weakref.WeakKeyDictionary[torch.fx.Node, Site]" = weakref.WeakKeyDictionary()
_orig_create_node = None


def created_at(node: torch.fx.Node) -> Site | None:
    """(file, line, function) of the user code that created ``node``, if known."""
    try:
        return _SITES.get(node)
    except TypeError:
        return None


def traced_at(node: torch.fx.Node) -> Site | None:
    """(file, line, function) of the user's line that ``symbolic_trace`` was
    tracing when it made ``node`` (while a session ran), if known."""
    try:
        return _TRACED.get(node)
    except TypeError:
        return None


_TRACING = (_FX_DIR + "proxy.py", _FX_DIR + "_symbolic_trace.py")
_TRANSFORMER = _FX_DIR + "interpreter.py"
# a tracer's entry points: past them, the frames are the caller of the trace
_TRACE_ENTRIES = ("trace", "symbolic_trace")
# torch frames between a traced user line and FX (torch.nn.functional,
# __torch_function__ dispatch, containers' forward) are skipped, a few at most;
# a compiler's frames mean torch itself is tracing
_COMPILERS = tuple(_TORCH_DIR + d + os.sep for d in
                   ("_dynamo", "_functorch", "_inductor", "_export", "export", "_higher_order_ops"))
_MAX_TORCH_FRAMES = 8


def _creator() -> tuple[Site, bool] | None:
    """The user frame behind this node creation and whether tracing made it
    (symbolic_trace: the node stands for that line, it was not added by a
    pass); None for nodes torch itself makes."""
    f = sys._getframe(2)
    traced = transformer = False
    skipped = 0
    while f is not None:
        code = f.f_code
        file = code.co_filename
        if file.startswith(_FX_DIR):
            if file in _TRACING:
                traced = True
                if code.co_name in _TRACE_ENTRIES:
                    return None  # tracing torch's own code, called from the user's trace call
            transformer = transformer or file == _TRANSFORMER
            f = f.f_back
            continue
        if is_stdlib(file):
            f = f.f_back
            continue
        if is_internal(file):
            if (not traced or transformer or skipped >= _MAX_TORCH_FRAMES
                    or file.startswith(_COMPILERS)):
                return None
            skipped += 1
            f = f.f_back
            continue
        return (os.path.abspath(file), f.f_lineno, code.co_name), traced and not transformer
    return None


# -- modules: where the user's code made each one ----------------------------------

# id(module) -> (weak reference, site): looked up by id, as nn_module_stack keys are
_MODULES: dict[int, tuple] = {}
_DYNAMO_DIR = _TORCH_DIR + "_dynamo" + os.sep
# Dynamo's own Module.__init__ wrapper, and torch.compile's path to OptimizedModule
_DYNAMO_PASSTHROUGH = (_DYNAMO_DIR + "mutation_guard.py", _DYNAMO_DIR + "eval_frame.py")
_optimized_module = None


def module_site(module: torch.nn.Module) -> Site | None:
    """(file, line, function) where the user's code made ``module``, if known."""
    hit = _MODULES.get(id(module))
    if hit is not None and hit[0]() is module:
        return hit[1]
    return None


def module_site_by_id(key: str | int, cls: object = None, *, compiled: bool = False) -> Site | None:
    """`module_site` of the live module whose ``id`` is ``key`` (Dynamo's
    ``nn_module_stack`` keys), when its class is ``cls`` (a class, or its name).
    With ``compiled``: the line `compiled_whole` gave the module instead."""
    try:
        hit = (_COMPILED if compiled else _MODULES).get(int(key))
    except (TypeError, ValueError):
        return None
    if hit is None:
        return None
    module = hit[0]()
    if module is None:
        return None
    if cls is not None:
        name = cls.__name__ if isinstance(cls, type) else str(cls).rsplit(".", 1)[-1].rstrip("'>")
        if type(module) is not cls and type(module).__name__ != name:
            return None
    return hit[1]


# id(module) -> (weak reference, site) of modules compiled whole: the line of
# the user's torch.compile(...) (or of the call that compiled it)
_COMPILED: dict[int, tuple] = {}


def _remember(table: dict, module, site: Site) -> None:
    key = id(module)

    def drop(ref, key=key):
        hit = table.get(key)
        if hit is not None and hit[0] is ref:
            del table[key]

    table[key] = (weakref.ref(module, drop), site)


def compiled_whole(module: torch.nn.Module, site: Site) -> None:
    """``module`` was compiled whole at ``site``: the line of its nodes that
    have no other (its modules were made before the session started)."""
    try:
        _remember(_COMPILED, module, site)
    except TypeError:
        pass


def _record_module(module: torch.nn.Module) -> None:
    if isinstance(module, torch.fx.GraphModule):
        return  # graphs, not the user's modules
    global _optimized_module
    if _optimized_module is None:
        from torch._dynamo.eval_frame import OptimizedModule
        _optimized_module = OptimizedModule
    compiled = isinstance(module, _optimized_module)
    f = sys._getframe(2)
    while f is not None:
        code = f.f_code
        file = code.co_filename
        if is_internal(file):
            if (file.startswith(_DYNAMO_DIR) and not compiled
                    and not file.startswith(_DYNAMO_PASSTHROUGH)):
                return  # made while Dynamo traces: not a line of the user's
            f = f.f_back
            continue
        if code.co_name == "__init__" and f.f_locals.get("self") is module:
            f = f.f_back  # the module's own __init__ (super().__init__()): its maker is further out
            continue
        _remember(_MODULES, module, (os.path.abspath(file), f.f_lineno, code.co_name))
        return


_installs = 0  # nested captures share the one wrapper
_init_wrapper = None  # (our nn.Module.__init__, the one it wraps, [enabled]) while installed


def _not_for_dynamo(code) -> None:
    """Dynamo never compiles a frame of ``code``, nor what it calls (as it
    never compiles torch's own ``Module.__init__``): a module made eagerly
    while compiled code runs (after a graph break) meets our wrapper as a new
    frame, which Dynamo would otherwise compile."""
    try:
        from torch._dynamo.eval_frame import set_code_exec_strategy
        from torch._dynamo.types import FrameAction, FrameExecStrategy
        set_code_exec_strategy(code, FrameExecStrategy(FrameAction.SKIP, FrameAction.SKIP))
    except Exception:
        pass


def _install_module_init() -> None:
    global _init_wrapper
    orig = torch.nn.Module.__init__
    is_compiling = torch.compiler.is_compiling
    enabled = [True]

    @functools.wraps(orig)
    def __init__(self, *args, **kwargs):
        orig(self, *args, **kwargs)
        # Dynamo inlines __init__ of modules made in compiled code: while it
        # traces, is_compiling() is a constant True and nothing here is traced
        if enabled[0] and not is_compiling():
            try:
                _record_module(self)
            except Exception:
                pass

    _not_for_dynamo(__init__.__code__)
    torch.nn.Module.__init__ = __init__
    _init_wrapper = (__init__, orig, enabled)


def _uninstall_module_init() -> None:
    global _init_wrapper
    installed, _init_wrapper = _init_wrapper, None
    if installed is None:
        return
    wrapper, orig, enabled = installed
    enabled[0] = False
    if torch.nn.Module.__init__ is wrapper:
        torch.nn.Module.__init__ = orig
    # else another wrapper went on top of ours (Dynamo tags every module on
    # its first torch.compile): ours stays under it, switched off


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
            found = _creator()
            if found is not None:
                site, traced = found
                (_TRACED if traced else _SITES)[node] = site
        except Exception:
            pass
        return node

    _not_for_dynamo(create_node.__code__)
    torch.fx.Graph.create_node = create_node
    _install_module_init()


def uninstall() -> None:
    """Undo one `install`; the wrappers go when the outermost capture ends."""
    global _orig_create_node, _installs
    _installs = max(0, _installs - 1)
    if _installs == 0 and _orig_create_node is not None:
        torch.fx.Graph.create_node = _orig_create_node
        _orig_create_node = None
        _uninstall_module_init()
