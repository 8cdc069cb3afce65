"""`graphdbg run`: run a program in-process, exactly as `python script.py` or
`python -m module` would, with the capture session around it."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import runpy
import shlex
import signal
import sys
import traceback

from .core.errors import GraphdbgError
from .core import ranks
from .core.options import CaptureOptions


def _stem(target: str, module: bool) -> str:
    return target.rsplit(".", 1)[-1] if module else os.path.splitext(os.path.basename(target))[0]


def default_output(target: str, module: bool) -> str:
    return f"graphdbg-{_stem(target, module)}.{os.getpid()}.run"


def output_path(output: str | None, target: str, module: bool) -> str:
    """The run file this process writes: ``output``, or the default name; one
    of a launcher's ranks (torchrun, srun) writes ``rank<R>.run`` in the
    job's folder, which ``-o`` then names (see `graphdbg.core.ranks`)."""
    info = ranks.from_env()
    if info is None:
        return output or default_output(target, module)
    path = ranks.rank_path(output, _stem(target, module), info)
    folder = os.path.dirname(path)
    parent = os.path.dirname(os.path.abspath(folder))
    if not os.path.isdir(parent):
        raise GraphdbgError(f"graphdbg run: output directory does not exist: {parent}")
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise GraphdbgError(
            f"graphdbg run: {folder} is a file; under a launcher (rank {info.rank} of "
            f"{info.world_size}) -o names the job's folder, one run file per rank")
    try:
        os.makedirs(folder, exist_ok=True)   # every rank may: none waits for another
    except OSError as exc:
        raise GraphdbgError(f"graphdbg run: cannot create {folder} ({exc.strerror})") from None
    return path


# Launchers that start each rank as a process of its own (what graphdbg sees
# from outside is the launcher alone), by script name or module, and how each
# starts `graphdbg run` inside it instead.
_LAUNCHERS = {"torchrun": "torchrun", "torch.distributed.run": "torchrun",
              "torch.distributed.launch": "torchrun", "accelerate": "accelerate",
              "accelerate.commands.launch": "accelerate",
              "accelerate.commands.accelerate_cli": "accelerate"}


def check_not_a_launcher(target: str, module: bool, args: list[str]) -> None:
    """`graphdbg run torchrun ...` (or accelerate, or -m torch.distributed.run)
    would capture the launcher and none of its ranks: refused, with the
    command line that puts graphdbg inside the launcher."""
    name = target if module else os.path.basename(target)
    launcher = _LAUNCHERS.get(name)
    if launcher is None:
        return
    at = next((i for i, a in enumerate(args) if a.endswith(".py")), None)
    before, after = (args[:at], args[at:]) if at is not None else (args, ["train.py"])
    if launcher == "accelerate":
        before = before[1:] if before[:1] == ["launch"] else before
        inside = ["accelerate", "launch", *before, "-m", "graphdbg", "run", *after]
    else:
        inside = ["torchrun", *before, "--no-python", "graphdbg", "run", *after]
    raise GraphdbgError(f"graphdbg run: {name} starts each rank as a process of its own, "
                        f"which graphdbg cannot see from outside; put graphdbg inside it: "
                        f"{shlex.join(inside)}")


def check_target(target: str, module: bool) -> None:
    if module:
        try:
            spec = importlib.util.find_spec(target)
        except (ImportError, ValueError) as exc:
            raise GraphdbgError(f"graphdbg run: cannot find module {target!r} ({exc})") from None
        if spec is None:
            raise GraphdbgError(f"graphdbg run: no module named {target!r}")
        return
    if not os.path.exists(target):
        raise GraphdbgError(f"graphdbg run: no such file: {target}")
    if os.path.isdir(target) and not os.path.exists(os.path.join(target, "__main__.py")):
        raise GraphdbgError(f"graphdbg run: {target} is a directory without __main__.py")
    if not os.access(target, os.R_OK):
        raise GraphdbgError(f"graphdbg run: cannot read {target}")


def _print_user_traceback(exc: BaseException) -> None:
    """Print the traceback as Python would: starting at the program's own frames."""
    tb = exc.__traceback__
    here = os.path.dirname(os.path.abspath(__file__))
    while tb is not None:
        fn = tb.tb_frame.f_code.co_filename
        if fn.startswith(here) or "runpy" in fn:
            tb = tb.tb_next
            continue
        break
    traceback.print_exception(type(exc), exc, tb, file=sys.stderr)


def _exit_code(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def run_program(target: str, args: list[str], *, module: bool = False,
                output: str | None = None, options: CaptureOptions | None = None,
                quiet: bool = False) -> int:
    """Run ``target`` as ``python [-m] target args`` would, captured with
    ``options``; returns the program's exit status."""
    options = options or CaptureOptions()
    check_target(target, module)
    output = output or output_path(None, target, module)
    out_dir = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(out_dir):
        raise GraphdbgError(f"graphdbg run: output directory does not exist: {out_dir}")

    try:
        from graphdbg.hooks import Session
    except ImportError as exc:
        raise GraphdbgError(f"graphdbg run: cannot import torch ({exc})") from None

    argv = [target, *args]
    if not quiet and sys.stderr.isatty():
        options = dataclasses.replace(options, progress=True)
    session = Session(
        output, options, argv=(["-m"] if module else []) + argv, module=module, cwd=os.getcwd(),
        target=os.path.abspath(target) if not module else target,
        warn=lambda text: print(f"graphdbg: warning: {text}", file=sys.stderr),
        say=lambda text: print(f"graphdbg run: {text}", file=sys.stderr))

    saved_argv, saved_path0 = sys.argv[:], sys.path[0] if sys.path else None
    sys.argv = argv[:]
    path0 = os.getcwd() if module else os.path.dirname(os.path.abspath(target))
    if sys.path:
        sys.path[0] = path0
    else:
        sys.path.insert(0, path0)

    status, sigint = 0, None
    try:
        with session:
            try:
                if module:
                    runpy.run_module(target, run_name="__main__", alter_sys=True)
                else:
                    runpy.run_path(target, run_name="__main__")
            except SystemExit as exc:
                status = _exit_code(exc)
                session.set_exit(status)
            except KeyboardInterrupt as exc:
                _print_user_traceback(exc)
                status = 130
                session.runtime_error(exc, status, "interrupted")
            except BaseException as exc:  # the program's own error: report it as Python would
                _print_user_traceback(exc)
                status = 1
                session.runtime_error(exc)
            finally:
                # A second Ctrl-C must not cut the run file short: ignored until
                # the session has stopped (leaving the `with`).
                sigint = signal.signal(signal.SIGINT, signal.SIG_IGN)
    finally:
        if sigint is not None:
            signal.signal(signal.SIGINT, sigint)
        sys.argv = saved_argv
        if saved_path0 is not None and sys.path:
            sys.path[0] = saved_path0
    info = ranks.from_env()
    if not quiet and (info is None or not info.local_rank):
        # one summary per machine under a launcher, not one per rank
        print_run_summary(output, info)
    return status


def print_run_summary(path: str, rank: ranks.RankInfo | None = None) -> None:
    """The short summary after `graphdbg run`, with the next command to type,
    on stderr (stdout is the program's)."""
    from .commands.output import console
    from .reporters.report import summary_lines
    from .runfile.query import Run
    out = console(stderr=True)
    try:
        with Run(path) as run:
            lines = summary_lines(run, path, rank)
    except GraphdbgError as exc:   # the run file unreadable: one line, the status stays
        out.print(f"graphdbg: {exc}", markup=False)
        return
    for line in lines:
        out.print(line)
