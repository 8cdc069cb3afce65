"""Where a tensor was converted to a Python value (``bool(t)``, ``int(t)``,
``float(t)``, ``t.item()``), for hooks/record/tsexport.py.

`warning_site` is the frame Python's warnings would name for a warning
raised inside the conversion (``stacklevel=1``: the conversion's caller),
given from inside graphdbg's wrapper of it, so that a TracerWarning the
wrapper's frame would otherwise own is given again at its own place;
`conversion_stack` is the user's stack at the conversion (the ``if`` line
innermost); `doc_string_stack` the user's stack an ONNX node of that
exporter was traced at (its ``doc_string``), and `symbolic_stack` that of the
traced op whose ONNX translation raised.
"""

from __future__ import annotations

import os
import re
from sys import _getframe

from graphdbg.core.sourcemap import Frame

from .nodes import user_frames
from .stack import user_stack

# one frame of a TorchScript source range's stack: "/path/model.py(12): forward"
_DOC_FRAME = re.compile(r"^(.*)\((\d+)\): (\S+)$")


def warning_site(skip: int = 0) -> tuple[str, int, str]:
    """(file, line, module) of the caller of the function calling this
    (``skip`` frames further out): where a warning it raised would be shown."""
    f = _getframe(2 + skip)
    return f.f_code.co_filename, f.f_lineno or 0, str(f.f_globals.get("__name__", "<string>"))


def conversion_stack() -> list[Frame]:
    """The user's stack, outermost first, where the conversion happens."""
    return user_stack(1)


def doc_string_stack(doc: str) -> list[Frame]:
    """The user's frames, outermost first, of the stack a TorchScript ONNX
    node was traced at (``NodeProto.doc_string``, innermost first, one
    ``file(line): function`` a line)."""
    frames = []
    for text in reversed((doc or "").splitlines()):
        m = _DOC_FRAME.match(text.strip())
        if m:
            file = m.group(1)
            frames.append(Frame(file if file.startswith("<") else os.path.abspath(file),
                                int(m.group(2)), m.group(3)))
    return user_frames(frames)


def symbolic_stack(exc: BaseException) -> list[Frame]:
    """The user's stack, outermost first, of the traced op the TorchScript
    exporter was translating when ``exc`` was raised (its
    ``_run_symbolic_function`` frame's node; [] when not in one)."""
    out: list[Frame] = []
    tb = exc.__traceback__
    while tb is not None:
        f = tb.tb_frame
        if f.f_code.co_name == "_run_symbolic_function" and "onnx" in f.f_code.co_filename:
            node = f.f_locals.get("node")
            try:
                out = doc_string_stack(str(node.sourceRange())) or out
            except Exception:
                pass
        tb = tb.tb_next
    return out
