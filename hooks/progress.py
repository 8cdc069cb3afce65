"""A transient status line on stderr while torch compiles (inductor on CPU can
take tens of seconds per graph; the user should see why the program paused).

Shown only on a terminal; it never redirects the program's stdout or stderr.
"""

from __future__ import annotations

import time


class _Line:
    """Re-rendered by rich's refresh thread, so the elapsed time keeps counting."""

    def __init__(self) -> None:
        self.text = ""
        self.since = time.monotonic()

    def __rich__(self) -> str:
        return f"{self.text} [dim]({time.monotonic() - self.since:.0f} s)[/]"


class CompileProgress:
    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._status = None
        self._line = _Line()

    def begin(self, text: str) -> None:
        if not self.enabled:
            return
        try:
            if self._status is None:
                from rich.console import Console
                from rich.status import Status
                console = Console(stderr=True)
                self._line = _Line()
                self._line.text = text
                self._status = Status(self._line, console=console, spinner="dots")
                # Live must not swallow the program's own output.
                self._status._live.redirect_stdout = False
                self._status._live.redirect_stderr = False
                self._status._live.transient = True
                self._status.start()
            else:
                self._line.text = text
        except Exception:
            self.enabled = False

    def update(self, text: str) -> None:
        if self._status is not None:
            self._line.text = text

    def end(self) -> None:
        if self._status is not None:
            try:
                self._status.stop()
            finally:
                self._status = None


class BisectProgress:
    """A rich progress bar for localisation (a few compiles, each possibly
    tens of seconds); silent off a terminal."""

    def __init__(self, enabled: bool, title: str) -> None:
        self.enabled = enabled
        self.title = title
        self._progress = None
        self._task = None

    def _ensure(self) -> None:
        if self._progress is None and self.enabled:
            from rich.console import Console
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn,
                                       TextColumn, TimeElapsedColumn)
            self._progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                      MofNCompleteColumn(), TimeElapsedColumn(),
                                      console=Console(stderr=True), transient=True,
                                      redirect_stdout=False, redirect_stderr=False)
            self._progress.start()
            self._task = self._progress.add_task(f"graphdbg: {self.title}", total=None)

    def step(self, text: str) -> None:
        if not self.enabled:
            return
        try:
            self._ensure()
            self._progress.update(self._task, description=f"graphdbg: {self.title}: {text}")
        except Exception:
            self.enabled = False

    def start_bar(self, total: int, text: str) -> None:
        if not self.enabled:
            return
        try:
            self._ensure()
            self._progress.update(self._task, total=total, completed=0,
                                  description=f"graphdbg: {self.title}: {text}")
        except Exception:
            self.enabled = False

    def advance(self) -> None:
        if self._progress is not None:
            self._progress.advance(self._task)

    def end(self) -> None:
        if self._progress is not None:
            try:
                self._progress.stop()
            finally:
                self._progress = None
