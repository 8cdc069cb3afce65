"""`graphdbg.capture`: a region of a program captured into a run file (re-exported
by `graphdbg`; torch is imported when a capture starts, not before)."""

from __future__ import annotations


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

    @property
    def ended(self) -> bool:
        """The capture started and ended: its run file is complete."""
        return self._ended

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
