"""``%load_ext graphdbg`` and the ``%%graphdbg`` cell magic: record a cell,
then show its report in the cell's output (HTML, the terminal report as the
text/plain twin).

    %%graphdbg --backend aot_eager -o train.run --reset
    model = torch.compile(Net())
    train(model)

The cell runs in the notebook's namespace, under `graphdbg.capture`, compiled
as IPython compiles a cell (so findings sit at ``Cell In[N], line L``, the
lines of the cell's body, as IPython's own tracebacks count them). Its last
expression is displayed as a cell's is. A cell that raises shows its report,
then the exception goes on to IPython, which shows it and fails the cell.

Imported only by ``%load_ext graphdbg``: `import graphdbg` never imports IPython.
"""

from __future__ import annotations

import argparse
import ast
import shlex
import sys

from .core.options import CaptureOptions, OptionError


def load_ipython_extension(ipython) -> None:
    # a cell magic; as a line magic (``%graphdbg --help``) it says how to use it
    ipython.register_magic_function(_magic(ipython), magic_kind="line_cell",
                                    magic_name="graphdbg")


def parser() -> argparse.ArgumentParser:
    """The magic's options: `graphdbg run`'s capture options, and the cell's own."""
    from .commands.run import _arguments
    p = argparse.ArgumentParser(prog="%%graphdbg", add_help=False,
                                description="Record the cell with graphdbg and show its report.")
    p.add_argument("-o", "--output", default=None, metavar="RUN",
                   help="the run file (default: graphdbg-cell<N>.run here, N the cell's number)")
    p.add_argument("--reset", action="store_true",
                   help="torch._dynamo.reset() first: code compiled before recompiles under "
                        "the capture (a re-run cell otherwise reuses it, unseen)")
    p.add_argument("--backend", default=None, metavar="NAME",
                   help="torch.compile calls in the cell that name no backend use NAME")
    for flag, kw, _ in _arguments():
        p.add_argument(flag, **kw)
    return p


class _Usage(Exception):
    """A bad option line: said by IPython as a UsageError."""


def _options(line: str) -> argparse.Namespace:
    p = parser()
    p.exit = _exit   # argparse must not end the kernel
    p.error = lambda message: _exit(2, f"%%graphdbg: {message}\n{p.format_usage()}")
    return p.parse_args(shlex.split(line))


def _exit(status: int = 0, message: str | None = None) -> None:
    raise _Usage(message or "")


def _magic(shell):
    def graphdbg(line: str, cell: str | None = None):
        """Record this cell with graphdbg and show its report (%graphdbg --help:
        the options)."""
        __tracebackhide__ = True   # IPython shows the cell's error, not this frame
        from IPython.core.error import UsageError
        if cell is None or line.strip() in ("-h", "--help"):
            if cell is None and line.strip() not in ("", "-h", "--help"):
                raise UsageError("graphdbg records a whole cell: put %%graphdbg [options] "
                                 "on the cell's first line (%graphdbg --help: the options)")
            print(parser().format_help())
            return None
        try:
            args = _options(line)
            options = CaptureOptions.from_flags(
                {k: v for k, v in vars(args).items() if k not in ("output", "reset", "backend")})
        except (_Usage, OptionError) as exc:
            raise UsageError(str(exc)) from None
        # this cell's number: IPython counted it up before running it (Out[N] is the same)
        number = shell.displayhook.prompt_count
        run_cell(shell, cell, number, args.output or f"graphdbg-cell{number}.run",
                 options, reset=args.reset, backend=args.backend)
        return None
    return graphdbg


def run_cell(shell, cell: str, number: int, path: str, options: CaptureOptions, *,
             reset: bool = False, backend: str | None = None) -> None:
    """Run ``cell`` (cell ``number``) in ``shell``'s namespace under a capture
    into ``path``, show the report, then let the cell's exception (if any) go on."""
    __tracebackhide__ = True
    from IPython.display import display

    from .region import capture
    from .display import mimebundle, summary_line
    code = _compiled(shell, cell, number)   # a syntax error is the cell's, before any capture
    rec = capture(path, options=options, reset=reset)
    rec.quiet = True   # the report below says it all
    error = None
    try:
        with rec, _default_backend(backend):
            _execute(shell, *code)
    except BaseException as exc:   # shown in the report, then IPython's to show
        error = exc
    if rec.ended:   # (a capture that could not start has no report: its error says why)
        try:
            display(mimebundle(path, summary_line(path, "cell")), raw=True)
        except Exception as exc:   # noqa: BLE001 - the cell's own outcome comes first
            print(f"graphdbg: cannot show the report of {path}: {exc}", file=sys.stderr)
    if error is not None:
        raise error


def _compiled(shell, cell: str, number: int):
    """The cell compiled as IPython compiles a cell of this execution count
    (its file name, its source in linecache), its last expression apart."""
    body = shell.transform_cell(cell)
    name = shell.compile.cache(body, number, raw_code=cell)
    tree = shell.transform_ast(shell.compile.ast_parse(body, filename=name))
    nodes, last = tree.body, None
    if nodes and isinstance(nodes[-1], ast.Expr):
        nodes, last = nodes[:-1], nodes[-1]
    head = shell.compile(ast.Module(nodes, type_ignores=[]), name, "exec")
    tail = shell.compile(ast.Interactive([last]), name, "single") if last is not None else None
    return head, tail


def _execute(shell, head, tail) -> None:
    """The body, then its last expression through the display hook (``Out[N]``)."""
    __tracebackhide__ = True
    exec(head, shell.user_global_ns, shell.user_ns)   # noqa: S102 - the user's own cell
    if tail is not None:
        exec(tail, shell.user_global_ns, shell.user_ns)   # noqa: S102


class _default_backend:
    """``--backend NAME``: while the cell runs, `torch.compile` without a
    backend compiles with NAME (the user asked; nothing else changes)."""

    def __init__(self, backend: str | None) -> None:
        self.backend = backend
        self.real = None

    def __enter__(self):
        if self.backend is not None:
            import torch
            real = self.real = torch.compile
            backend = self.backend

            def compile(model=None, /, **kwargs):
                kwargs.setdefault("backend", backend)
                return real(model, **kwargs)
            compile.__wrapped__ = real
            torch.compile = compile
        return self

    def __exit__(self, *exc) -> None:
        if self.real is not None:
            import torch
            torch.compile = self.real
