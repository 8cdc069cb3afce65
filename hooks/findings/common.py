"""What more than one kind of finding needs: an exception's traceback as the
run file keeps it, and a divergence's severity by its kind."""

from __future__ import annotations

import traceback

_SEVERITY = {"miscompile": "error", "shape": "error", "dtype": "error",
             "precision": "info", "random": "warning", "nonfinite": "warning"}


def _format_tb(exc: BaseException | None) -> str | None:
    if exc is None:
        return None
    return "".join(traceback.format_exception(exc))[-20000:]


