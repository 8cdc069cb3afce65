"""graphdbg: debug and profile PyTorch programs that run eagerly and as graphs.

`import graphdbg` is light: torch and textual are imported only by the
functions that need them (`graphdbg --help` and the pytest plugin start fast).
"""

from __future__ import annotations

from .core.version import __version__
from .region import capture

__all__ = ["OnnxUnavailable", "__version__", "capture", "check_export", "check_graph", "compare",
           "open_run"]


def compare(fn, *inputs, **kwargs):
    """Eager vs compiled for one call: see `graphdbg.api.compare`."""
    from .api import compare as _compare
    return _compare(fn, *inputs, **kwargs)


def check_graph(gm, *example_inputs):
    """Malformed FX graph -> node -> line: see `graphdbg.api.check_graph`."""
    from .api import check_graph as _check_graph
    return _check_graph(gm, *example_inputs)


def check_export(model, args=(), kwargs=None, **options):
    """Export a model (torch.export, or ONNX with ``onnx=True``) and check it
    against eager: see `graphdbg.api.check_export`."""
    from .api import check_export as _check_export
    return _check_export(model, args, kwargs, **options)


def __getattr__(name: str):
    # graphdbg.OnnxUnavailable without importing graphdbg.testing (and its
    # run-file reader) at `import graphdbg`
    if name == "OnnxUnavailable":
        from .testing import OnnxUnavailable
        return OnnxUnavailable
    raise AttributeError(f"module 'graphdbg' has no attribute {name!r}")


def open_run(path: str):
    """Open a run file for reading: a `graphdbg.runfile.query.Run` (typed records,
    paged, usable from any thread; close it, or use it as a context manager)."""
    from .runfile.query import Run
    return Run(path)


def load_ipython_extension(ipython) -> None:
    """``%load_ext graphdbg``: the ``%%graphdbg`` cell magic (graphdbg/notebook.py)."""
    from .notebook import load_ipython_extension as _load
    _load(ipython)
