"""Mapping frames to the user's own code.

A *user frame* is the innermost frame outside torch, graphdbg and the Python
runtime machinery (runpy, importlib, contextlib...). Library code such as
transformers counts as user code: a break inside it is reported at the
library's line, with the user's call further up the stack.

Imports neither torch nor textual: the CLI and report use it too.
"""

from __future__ import annotations

import importlib.util
import linecache
import os
import re
import sys
import sysconfig
from typing import NamedTuple


class Frame(NamedTuple):
    file: str
    line: int
    function: str


def _package_dir(name: str) -> str | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.realpath(list(spec.submodule_search_locations)[0]) + os.sep


def _internal_prefixes() -> tuple[str, ...]:
    here = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))  # graphdbg/
    repo = os.path.dirname(here)
    prefixes = {here + os.sep}
    # hooks/ and tui/ live beside graphdbg/ in a source checkout.
    for sub in ("hooks", "tui"):
        prefixes.add(os.path.join(repo, sub) + os.sep)
    # console scripts (.venv/bin/graphdbg, pytest) are launchers, not user code
    prefixes.add(os.path.realpath(sysconfig.get_paths()["scripts"]) + os.sep)
    prefixes.add(os.path.realpath(os.path.dirname(sys.executable)) + os.sep)
    # the ONNX exporter's toolchain (graphdbg[onnx]) is torch's side too
    for pkg in ("torch", "functorch", "graphdbg", "onnx", "onnxscript", "onnx_ir", "onnxruntime"):
        d = _package_dir(pkg)
        if d:
            prefixes.add(d)
    return tuple(sorted(prefixes))


_INTERNAL = _internal_prefixes()
_STDLIB = os.path.realpath(sysconfig.get_paths()["stdlib"]) + os.sep
_cache: dict[str, bool] = {}


def in_library(filename: str) -> bool:
    """An installed package's file (site-packages): a library's code, which
    counts as user code for placement but is not the program's own."""
    return f"{os.sep}site-packages{os.sep}" in filename or f"{os.sep}dist-packages{os.sep}" in filename


def is_internal(filename: str) -> bool:
    """True for frames that are never the user's: torch, graphdbg, stdlib, generated code."""
    hit = _cache.get(filename)
    if hit is not None:
        return hit
    if not filename or filename.startswith("<"):
        # <frozen runpy>, <string>, <eval_with_key>.N (FX generated), <torch_package_...>
        result = True
    else:
        real = os.path.realpath(filename)
        result = real.startswith(_INTERNAL) or (
            real.startswith(_STDLIB)
            and "site-packages" not in real
            and "dist-packages" not in real
        )
        # Dynamo's resume functions keep the user's filename; nothing to do here.
    _cache[filename] = result
    return result


def code_line(file: str, line: int) -> str:
    return linecache.getline(file, line).strip() if line else ""


_TB_LINE = re.compile(r'^\s*File "(?P<file>.+)", line (?P<line>\d+), in (?P<func>.+)$')


def parse_traceback(text: str) -> list[tuple[Frame, str]]:
    """Frames (outermost first) with their code text from `traceback.format_list`
    output, an FX node's `stack_trace`, or the "User code traceback" of a break."""
    frames: list[tuple[Frame, str]] = []
    lines = text.splitlines()
    for i, raw in enumerate(lines):
        m = _TB_LINE.match(raw)
        if not m:
            continue
        code = ""
        if i + 1 < len(lines) and not _TB_LINE.match(lines[i + 1]):
            nxt = lines[i + 1].strip()
            if nxt and not set(nxt) <= set("^~ "):
                code = nxt
        frames.append((Frame(m["file"], int(m["line"]), m["func"].strip()), code))
    return frames


_RESUME = re.compile(r"^torch_dynamo_resume_in_(?P<func>.+)_at_(?P<line>\d+)$")


def original_function(co_name: str) -> tuple[str, int | None]:
    """Dynamo's resume functions (`torch_dynamo_resume_in_f_at_19`) name the
    user's function and the line where it resumed."""
    m = _RESUME.match(co_name or "")
    if m:
        return m["func"], int(m["line"])
    return co_name, None


def user_frames(frames) -> list[Frame]:
    """The frames outside torch, graphdbg and the runtime, in order (outermost
    first); takes `Frame`s or `traceback.FrameSummary`s."""
    out = []
    for f in frames:
        if isinstance(f, Frame):
            if not is_internal(f.file):
                out.append(f)
        elif not is_internal(f.filename):
            out.append(Frame(f.filename, f.lineno or 0, f.name))
    return out


def innermost_user(frames: list[Frame]) -> Frame | None:
    for f in reversed(frames):
        if not is_internal(f.file):
            return f
    return None
