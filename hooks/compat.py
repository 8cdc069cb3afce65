"""The torch internals that differ between the releases graphdbg supports.

graphdbg reaches deep into torch.compile (Dynamo's exceptions and trace
artifacts, fake tensors, inductor's config), and each release moves some of
it. Every such difference is handled here, once, entry by entry: each names
the torch versions and the torch function it stands for, and detects the
feature rather than testing the version wherever it can. The rest of graphdbg
calls these and never asks which torch it runs on.

Adding a release: pin it in constraints/latest.txt, widen ``SUPPORTED`` and
pyproject.toml's range, run ``make test-torch-latest``; an older one is
pinned in constraints/floor.txt and tested by ``make test-torch-floor``.
What broke gets an entry here (tests/capture/test_compat.py checks each entry on the torch it runs on).
"""

from __future__ import annotations

import os
import re
import warnings
from typing import Callable

import torch

from graphdbg.core.errors import GraphdbgError

SUPPORTED = ((2, 11), (2, 15))  # oldest and newest minor release, both tested in CI
# (2.11: the GPU machines' torch, constraints/floor.txt; 2.13: `make test`'s; 2.15: the newest)
ALLOW_ENV = "GRAPHDBG_ALLOW_ANY_TORCH"  # =1: run on a torch outside SUPPORTED, with a warning


# -- the start-up check ---------------------------------------------------------------

def torch_release(version: str | None = None) -> tuple[int, int] | None:
    """(major, minor) of a torch version string ("2.15.0+cu130", "2.16.0a0+git..."),
    None when it does not parse."""
    m = re.match(r"(\d+)\.(\d+)", version if version is not None else str(torch.__version__))
    return (int(m[1]), int(m[2])) if m else None


def _features() -> dict[str, bool]:
    """What graphdbg cannot work without, by name (checked whatever the version)."""
    from torch.utils._python_dispatch import TorchDispatchMode
    import torch._logging._internal as tlog

    def has(module: str, name: str) -> bool:
        try:
            mod = __import__(module, fromlist=[name])
        except Exception:
            return False
        return hasattr(mod, name)

    return {
        # the eager recorder is a dispatch mode that torch.compile must not see
        # (2.13 added it; without it every compiled call would run eager)
        "TorchDispatchMode.ignore_compile_internals":
            hasattr(TorchDispatchMode, "ignore_compile_internals"),
        # compile events come from the structured trace, received in-process
        "torch._logging structured trace": hasattr(tlog, "trace_log")
            and hasattr(tlog, "_init_logs"),
        # every backend is wrapped in WrapBackendDebug; the recorder hooks its __call__
        "torch._dynamo WrapBackendDebug": has("torch._dynamo.repro.after_dynamo",
                                              "WrapBackendDebug"),
    }


_warned = False


def check_torch(warn: Callable[[str], None] | None = None) -> None:
    """Refuse a torch graphdbg cannot work with, in one line (GraphdbgError).
    A release newer than ``SUPPORTED`` is refused unless ``GRAPHDBG_ALLOW_ANY_TORCH=1``;
    then ``warn(text)`` (a RuntimeWarning by default) says so, once a process."""
    global _warned
    version = str(torch.__version__)
    (lo, hi) = SUPPORTED
    wanted = f"torch>={lo[0]}.{lo[1]},<{hi[0]}.{hi[1] + 1}"
    missing = [name for name, ok in _features().items() if not ok]
    release = torch_release(version)
    if release is None or release < lo:
        raise GraphdbgError(f"torch {version} is not supported: graphdbg needs {wanted}")
    if missing:
        raise GraphdbgError(f"torch {version} is not supported: it lacks {missing[0]}, "
                            f"which graphdbg needs ({wanted})")
    if release <= hi:
        return
    if os.environ.get(ALLOW_ENV, "") != "1":
        raise GraphdbgError(f"torch {version} is not supported: graphdbg needs {wanted} "
                            f"(set {ALLOW_ENV}=1 to try it at your own risk)")
    if not _warned:
        _warned = True
        text = (f"torch {version} is newer than graphdbg supports ({wanted}); running because "
                f"{ALLOW_ENV}=1: findings may be missing or misplaced")
        if warn is not None:
            warn(text)
        else:
            warnings.warn(text, RuntimeWarning, stacklevel=2)


# -- Dynamo ----------------------------------------------------------------------------

def dynamo_disable(fn: Callable) -> Callable:
    """``torch._dynamo.disable(fn, recursive=True)`` built as the lazy shim
    ``TorchDispatchMode.__init_subclass__`` builds it: ``wrapping=False``
    (2.13-2.15); a torch without the argument gets the plain form."""
    try:
        return torch._dynamo.disable(fn, recursive=True, wrapping=False)
    except TypeError:
        return torch._dynamo.disable(fn, recursive=True)


def skip_dynamo(fn: Callable) -> Callable:
    """``fn`` with its code marked for Dynamo's C frame hook to skip, and every
    frame it calls (``FrameExecStrategy(SKIP, SKIP)``: the strategy
    ``torch._dynamo.eval_frame.skip_code`` sets, made recursive): what
    ``torch._dynamo.disable(fn, recursive=True)`` does, without a Python
    wrapper around each call. A torch without it gets that wrapper."""
    try:
        from torch._C._dynamo.eval_frame import (_FrameAction, _FrameExecStrategy,
                                                 set_code_exec_strategy)
        set_code_exec_strategy(fn.__code__, _FrameExecStrategy(_FrameAction.SKIP,
                                                                _FrameAction.SKIP))
    except (ImportError, AttributeError, TypeError):
        return dynamo_disable(fn)
    return fn


def compiled_graphs() -> int:
    """How many graphs Dynamo holds compiled now (since the last
    ``torch._dynamo.reset()``): its cached versions of each frame it
    compiled (``convert_frame.input_codes``) whose code calls a compiled
    graph (``__compiled_fn_N``). 0 where a torch lacks these internals."""
    try:
        from torch._C._dynamo.eval_frame import _debug_get_cache_entry_list
        from torch._dynamo.convert_frame import input_codes
        codes = [c for c in (ref() for ref in list(input_codes.seen)) if c is not None]
        return sum(any(n.startswith("__compiled_fn") for n in entry.code.co_names)
                   for code in codes for entry in _debug_get_cache_entry_list(code))
    except Exception:   # noqa: BLE001 - a count for the report, never a failure
        return 0


def interned_filenames() -> dict[int, str]:
    """index -> file name of torch's structured-trace intern table
    (torch._logging.structured.INTERN_TABLE). A draft_export report's
    ``str_to_filename`` holds only the names interned during the export: a
    file interned before (by an earlier torch.compile) is named here only."""
    try:
        from torch._logging import structured
        return {i: name for name, i in getattr(structured, "INTERN_TABLE", {}).items()}
    except Exception:
        return {}


def is_restart(exc: BaseException) -> bool:
    """Whether ``exc`` is Dynamo's own signal to trace the frame again
    (``RestartAnalysis`` and its kinds: a backend that finds a scalar it can
    make a tensor raises ``TensorifyScalarRestartAnalysis``): torch catches it
    and compiles the frame anew, so it is never the program's error.
    2.13–2.15 have it in ``torch._dynamo.exc``."""
    try:
        from torch._dynamo.exc import RestartAnalysis
    except ImportError:
        return False
    return isinstance(exc, RestartAnalysis)


def unwrap_cleanup_error(exc: BaseException) -> BaseException:
    """The compile error that ``exc`` hides, when ``exc`` was raised by torch
    while it cleaned up after that error.

    2.15: ``OutputGraph._cleanup_output_graph`` (called from
    ``convert_frame``'s error path) walks the failed graph; a graph a user's
    pass left malformed makes it raise a RuntimeError, and the
    BackendCompilerFailed that caused it survives only as ``__context__``.
    2.13 and 2.14 raise the BackendCompilerFailed itself. Detected from the
    traceback (the raise came from ``_cleanup_output_graph``), not the version.
    """
    seen = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        inner = e.__context__
        if inner is None or not _raised_in(e, "_cleanup_output_graph"):
            return e
        e = inner
    return exc


def _raised_in(exc: BaseException, function: str) -> bool:
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_name == function:
            return True
        tb = tb.tb_next
    return False


DYNAMO_ERROR_ARTIFACT = "dynamo_error"
"""The structured-trace artifact ``convert_frame._compile`` emits in its
``except`` block for a failed frame, with the exception in flight (2.13-2.15).
It is the last moment the failed ``OutputGraph`` is whole: 2.15 empties its
graph and ``tracked_fakes`` (``_cleanup_output_graph``) before the frame's
``compilation_metrics`` arrive, where graphdbg records the failure."""


def failed_fake_node(exc: BaseException) -> "tuple[torch.fx.Node, list[torch.fx.Node]] | None":
    """The FX node whose fake-tensor run raised ``exc`` while Dynamo traced,
    and the nodes it takes as inputs.

    2.13: ``torch._dynamo.utils.get_fake_value`` raises with the node in its
    frame, its args intact. 2.14, 2.15: ``_get_fake_value_impl`` erases a
    failing node that has no users (``graph.erase_node`` sets its args to
    None) and raises ``FakeTensorObservedException``. The fake values it was
    run on are still in the frame that ran it (``run_node(tracer, node, args,
    kwargs, ...)``, all three versions): each is the ``example_value`` of the
    input node that made it. Detected by the node being erased."""
    from .findings.exceptions import failing_node
    node = failing_node(exc)
    if node is None:
        return None
    if node.all_input_nodes or not getattr(node, "_erased", False):
        return node, node.all_input_nodes
    return node, _inputs_from_fakes(exc, node)


def _inputs_from_fakes(exc: BaseException, node: "torch.fx.Node") -> "list[torch.fx.Node]":
    from torch.utils._pytree import tree_leaves
    from .placement.guards import exception_chain
    by_value = {id(n.meta["example_value"]): n for n in node.graph.nodes
                if "example_value" in n.meta}
    for e in exception_chain(exc):
        tb = e.__traceback__
        while tb is not None:
            loc = tb.tb_frame.f_locals
            tb = tb.tb_next
            if loc.get("node") is not node or "args" not in loc:
                continue
            found: list = []
            for v in tree_leaves((loc.get("args"), loc.get("kwargs") or {})):
                n = by_value.get(id(v))
                if n is not None and n not in found:
                    found.append(n)
            if found:
                return found
    return []
