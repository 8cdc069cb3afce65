"""Where a tensor was converted to a Python value (``bool(t)``, ``int(t)``,
``float(t)``, ``t.item()``), for hooks/record/tsexport.py.

`warning_site` is the frame Python's warnings would name for a warning
raised inside the conversion (``stacklevel=1``: the conversion's caller),
given from inside graphdbg's wrapper of it, so that a TracerWarning the
wrapper's frame would otherwise own is given again at its own place;
`conversion_stack` is the user's stack at the conversion (the ``if`` line
innermost).
"""

from __future__ import annotations

from sys import _getframe

from graphdbg.core.sourcemap import Frame

from .stack import user_stack


def warning_site(skip: int = 0) -> tuple[str, int, str]:
    """(file, line, module) of the caller of the function calling this
    (``skip`` frames further out): where a warning it raised would be shown."""
    f = _getframe(2 + skip)
    return f.f_code.co_filename, f.f_lineno or 0, str(f.f_globals.get("__name__", "<string>"))


def conversion_stack() -> list[Frame]:
    """The user's stack, outermost first, where the conversion happens."""
    return user_stack(1)
