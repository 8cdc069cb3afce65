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
        self.compiles = 0

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
                self.compiles += 1
