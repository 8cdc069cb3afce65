"""The user's line of an FX node, of a stack torch wrote down as text (a
node's ``stack_trace``, a graph break's "User code traceback"), and of an
exception's traceback.

A graph input (a placeholder) sits where the compiled code first uses it,
as every node does, but never in a decorator's wrapper: Dynamo wraps an
argument when something first reads it, and a wrapper that reads its
``**kwargs`` (transformers' ``capture_outputs``) or checks its arguments
touches the input without being where it is used. Past the wrappers, the
input sits at the wrapped function's next line that uses it, else at the
``def`` of the function the wrappers wrap (`node_source`'s ``entry``)."""

from __future__ import annotations

import os
import traceback

import torch

from graphdbg.core.sourcemap import Frame, original_function, parse_traceback

from . import columns, creation
from .internal import is_internal, is_internal_frame, is_passthrough, wrapper_at
from .modules import nn_module_path


def user_frames(frames) -> list[Frame]:
    """The user's frames among ``frames`` (`Frame`s or
    ``traceback.FrameSummary``s), in order (outermost first)."""
    out = []
    for f in frames:
        if not isinstance(f, Frame):
            f = Frame(f.filename, f.lineno or 0, original_function(f.name)[0],
                      *columns.of_summary(f))
        if not is_internal_frame(f.file, f.line, f.function):
            out.append(f)
    return out


def innermost_user(frames: list[Frame]) -> Frame | None:
    for f in reversed(frames):
        if not is_internal_frame(f.file, f.line, f.function):
            return f
    return None


def user_frames_of_text(text: str | None) -> list[tuple[Frame, str]]:
    """The user's frames, with their code text, of a stack torch wrote down
    (``traceback.format_list`` text), outermost first."""
    return [(f, c) for f, c in columns.narrow(parse_traceback(text or ""))
            if not is_internal_frame(f.file, f.line, f.function)]


def raised_at(exc: BaseException) -> list[Frame]:
    """The user's frames of the traceback ``exc`` came through, outermost
    first: no generated code (inductor's output module, FX's), no decorator's
    wrapper passing the call on. A compiled call that raised inside its
    compiled code ends at the compiled function's frame."""
    return user_frames(traceback.extract_tb(exc.__traceback__))


def calls_into_torch(exc: BaseException) -> list[Frame]:
    """The program's frames of ``exc``'s traceback, outermost first, down to
    its call into torch (the user's frames torch called back are left out)."""
    outer: list[Frame] = []
    for f in traceback.extract_tb(exc.__traceback__):
        if not is_internal(f.filename):
            if is_passthrough(f.filename, f.lineno or 0, f.name):
                continue   # a decorator's wrapper passing the call on
            file = f.filename if f.filename.startswith("<") else os.path.abspath(f.filename)
            outer.append(Frame(file, f.lineno or 0, f.name, *columns.of_summary(f)))
        elif outer:
            break
    return outer


def node_line(node: torch.fx.Node) -> tuple[str, int] | None:
    """The user's (file, line) of a node, from its ``stack_trace``."""
    frames = user_frames_of_text(node.meta.get("stack_trace"))
    return (frames[-1][0].file, frames[-1][0].line) if frames else None


def node_user_frame(stack_trace: str | None) -> Frame | None:
    """The innermost user frame of a node's ``stack_trace``."""
    frames = user_frames_of_text(stack_trace)
    return frames[-1][0] if frames else None


def module_site(node: torch.fx.Node) -> tuple[str, int, str] | None:
    """Where the user's code made the innermost module of ``node`` whose making
    was recorded (`creation`): the line for nodes of modules whose forward
    lives in torch (``nn.Sequential(nn.Linear(...), nn.ReLU())``). Else, for
    a module compiled whole, the line it was compiled at."""
    stack = node.meta.get("nn_module_stack")
    if not stack:
        return None
    entries = []
    for key, entry in reversed(list(stack.items())):
        try:
            entries.append((key, entry[1]))
        except (TypeError, IndexError):
            entries.append((key, None))
    for compiled in (False, True):  # else the line its root module was compiled at
        for key, cls in entries:
            site = creation.module_site_by_id(key, cls, compiled=compiled)
            if site is not None:
                return site
    return None


def fallback_site(node: torch.fx.Node) -> tuple[str, int, str] | None:
    """The line of a node whose ``stack_trace`` names no user frame: the line
    ``symbolic_trace`` traced it from, else the line that made its module."""
    return creation.traced_at(node) or module_site(node)


def _input_frames(frames: list[tuple[Frame, str]]) -> list[tuple[Frame, str]]:
    """A graph input's user frames without a decorator's wrapper's own lines."""
    return [(f, c) for f, c in frames if wrapper_at(f.file, f.line, f.function) is None]


def _with_node_span(node: torch.fx.Node, frames: list[tuple[Frame, str]]
                    ) -> list[tuple[Frame, str]]:
    """``frames`` (a node's user frames), the innermost narrowed to the node's
    own expression on its line (`columns.of_node`)."""
    if frames:
        user, code = frames[-1]
        col, end_col = columns.of_node(node, user.file, user.line, code, user.col, user.end_col)
        frames = frames[:-1] + [(user._replace(col=col, end_col=end_col), code)]
    return frames


def node_frames(node: torch.fx.Node) -> list[Frame]:
    """The user frames of a node's ``stack_trace``, outermost first, the
    innermost at the node's own expression."""
    return [f for f, _ in _with_node_span(node, user_frames_of_text(node.meta.get("stack_trace")))]


def node_source(writer, node: torch.fx.Node, entry: Frame | None = None
                ) -> tuple[int | None, int | None, str | None, str | None]:
    """(user frame id, user stack id, module path, module class) of an FX node,
    from its ``stack_trace`` and ``nn_module_stack``, interned in ``writer``.
    A graph input's frames leave decorators' wrappers out; with nothing else,
    it sits at ``entry`` (the ``def`` of the function that the compiled
    wrapper wraps). Else without a user frame: `fallback_site`."""
    user_parsed = user_frames_of_text(node.meta.get("stack_trace"))
    if node.op == "placeholder":
        user_parsed = _input_frames(user_parsed)
        if not user_parsed and entry is not None:
            user_parsed = [(entry, None)]
    user_parsed = _with_node_span(node, user_parsed)
    stack = writer.stack_id([f for f, _ in user_parsed], [c for _, c in user_parsed])
    user_id = None
    if user_parsed:
        user, code = user_parsed[-1]
        user_id = writer.frame_id(*user, code=code or None)
    else:
        site = fallback_site(node)
        if site is not None:
            user_id = writer.frame_id(*site)
            stack = stack or writer.stack_id([site])
    mpath, mcls = nn_module_path(node.meta.get("nn_module_stack"))
    return user_id, stack, mpath, mcls
