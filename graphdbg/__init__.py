"""graphdbg: debug and profile PyTorch programs that run eagerly and as graphs.

`import graphdbg` is light: torch and textual are imported only by the
functions that need them (`graphdbg --help` and the pytest plugin start fast).
"""

from __future__ import annotations

from .core.version import __version__

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


class capture:
    """Capture a region of a program into a run file.

        with graphdbg.capture("region.run") as run:
            model(x)
        print(run.path)

    Options are those of `graphdbg run` (`graphdbg.core.options.CaptureOptions`),
    given as an object or as keywords: ``capture("x.run", values="none",
    compare_first=1, localize="bisect")``. ``reset=True`` clears what Dynamo
    compiled before (``torch._dynamo.reset()``), so the functions the region
    calls compile again under the capture, with their graph breaks and
    recompiles: a notebook cell run again otherwise reuses the code compiled
    at its first run, which the capture does not see (its report says so).

    In Jupyter the object shows the report (HTML); under IPython a capture
    prints a one-line summary when it ends (nothing in scripts or tests).
    """

    def __init__(self, path: str = "graphdbg-capture.run", *, options=None, reset: bool = False,
                 **kwargs) -> None:
        from .core.options import CaptureOptions
        if options is not None and kwargs:
            raise TypeError("give capture options either as `options=` or as keywords, not both")
        self.path = path
        self.options = options or CaptureOptions.from_kwargs(**kwargs)
        self.reset = reset
        self.quiet = False   # no summary line at the end (the %%graphdbg magic shows the report)
        self._session = None
        self._ended = False

    def __enter__(self) -> "capture":
        from graphdbg.hooks import Session
        if self.reset:
            import torch._dynamo
            torch._dynamo.reset()
        self._session = Session(self.path, self.options, argv=["<capture>"])
        self._session.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._session.__exit__(exc_type, exc, tb)
        self._ended = True
        if not self.quiet:
            from .display import in_ipython, summary_line
            if in_ipython():   # like memray's magics; a script's stdout stays its own
                print(summary_line(self.path))

    def __repr__(self) -> str:
        if not self._ended:
            state = "capturing" if self._session is not None else "not started"
            return f"<graphdbg.capture {self.path}: {state}>"
        from .display import summary_line
        return summary_line(self.path)

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        if not self._ended:
            return {"text/plain": repr(self)}
        from .display import mimebundle
        return mimebundle(self.path, repr(self))
