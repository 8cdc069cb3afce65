"""`graphdbg run`: run a program in-process, exactly as `python script.py` or
`python -m module` would, with the capture session around it."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import runpy
import signal
import sys
import time
import traceback

from .core.errors import GraphdbgError
from .core.options import CaptureOptions


def default_output(target: str, module: bool) -> str:
    stem = target.rsplit(".", 1)[-1] if module else os.path.splitext(os.path.basename(target))[0]
    return f"graphdbg-{stem}.{os.getpid()}.run"


def _check_target(target: str, module: bool) -> None:
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


def _keep_traces(profiler, writer) -> None:
    """Stop torch.profiler; the traces' paths go into the run's meta."""
    traces = profiler.stop()
    writer.set_meta(profile={"dir": profiler.out_dir, "traces": traces,
                             "steps": profiler.taken, "schedule": list(profiler.steps)})
    if not traces:
        print(f"graphdbg run: --profile wrote no trace: the program took {profiler.taken} "
              f"step(s) (optimizer steps, or calls of its first compiled graph) and the "
              f"schedule {','.join(map(str, profiler.steps))} records none of them; "
              f"--profile-steps 0,0,1,1 records a program without steps whole", file=sys.stderr)


def _keep_samples(spy, session, writer) -> None:
    """py-spy's samples per user line into the run file (an event row)."""
    from graphdbg.hooks.record.pyspy import line_samples
    from .runfile.writer import dumps
    path, why = spy.stop()
    if path is None:
        if why:
            print(f"graphdbg run: {why}", file=sys.stderr)
            writer.set_meta(py_spy_error=why)
        return
    try:
        total, lines = line_samples(path)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"graphdbg run: cannot read py-spy's {path}: {exc}", file=sys.stderr)
        return
    ctx = session.ctx
    writer.add("events", (ctx.next_seq(), ctx.now(), "py_spy_samples", None,
                          dumps({"py_spy_samples": {"samples": total, "rate": spy.rate,
                                                    "file": path}}),
                          dumps([list(r) for r in lines[:5000]])))


def run_program(target: str, args: list[str], *, module: bool = False,
                output: str | None = None, options: CaptureOptions | None = None,
                quiet: bool = False, stance: str | None = None,
                py_spy_rate: int | None = None,
                profile_steps: tuple[int, int, int, int] | None = None) -> int:
    """Run ``target`` as ``python [-m] target args`` would, captured with
    ``options`` (sampled by py-spy at ``py_spy_rate`` Hz, and profiled by
    torch.profiler with the schedule ``profile_steps``, when given);
    returns the program's exit status."""
    options = options or CaptureOptions()
    _check_target(target, module)
    output = output or default_output(target, module)
    out_dir = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(out_dir):
        raise GraphdbgError(f"graphdbg run: output directory does not exist: {out_dir}")

    from .runfile.writer import RunWriter
    from .core.version import __version__

    try:
        from graphdbg.hooks import CaptureSession, check_torch
    except ImportError as exc:
        raise GraphdbgError(f"graphdbg run: cannot import torch ({exc})") from None
    check_torch(warn=lambda text: print(f"graphdbg: warning: {text}", file=sys.stderr))

    writer = RunWriter(output)
    argv = [target, *args]
    writer.set_meta(argv=(["-m"] if module else []) + argv, cwd=os.getcwd(),
                    target=os.path.abspath(target) if not module else target,
                    module=module, graphdbg=__version__)
    if not quiet and sys.stderr.isatty():
        options = dataclasses.replace(options, progress=True)
    session = CaptureSession(writer, options)

    saved_argv, saved_path0 = sys.argv[:], sys.path[0] if sys.path else None
    sys.argv = argv[:]
    path0 = os.getcwd() if module else os.path.dirname(os.path.abspath(target))
    if sys.path:
        sys.path[0] = path0
    else:
        sys.path.insert(0, path0)

    spy = None
    if py_spy_rate is not None:
        from graphdbg.hooks.record.pyspy import PySpy, speedscope_path
        spy = PySpy(speedscope_path(os.path.abspath(output)), py_spy_rate)
        why = spy.start()
        if why is not None:
            print(f"graphdbg run: {why}; the run goes on without it", file=sys.stderr)
            writer.set_meta(py_spy_error=why)
            spy = None

    status, state = 0, "complete"
    t0 = time.time()
    session.start()
    profiler = None
    if profile_steps is not None:
        from graphdbg.hooks.record.profiler import ProfileRecorder, profile_dir
        profiler = ProfileRecorder(session.ctx, profile_dir(os.path.abspath(output)),
                                   profile_steps)
        try:
            profiler.start()
        except Exception as exc:  # noqa: BLE001 - the program runs with or without traces
            print(f"graphdbg run: torch.profiler did not start ({type(exc).__name__}: {exc}); "
                  f"the run goes on without --profile", file=sys.stderr)
            try:
                profiler.stop()
            except Exception:  # noqa: BLE001, S110 - it never started
                pass
            profiler = None
    if stance:
        import torch
        torch.compiler.set_stance(stance)
        writer.set_meta(stance=stance)
    try:
        if module:
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(target, run_name="__main__")
    except SystemExit as exc:
        status = _exit_code(exc)
    except KeyboardInterrupt as exc:
        _print_user_traceback(exc)
        session.runtime_error(exc)
        status, state = 130, "interrupted"
    except BaseException as exc:  # the program's own error: report it as Python would
        _print_user_traceback(exc)
        session.runtime_error(exc)
        status, state = 1, "failed"
    finally:
        # A second Ctrl-C must not cut the run file short.
        old = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            if profiler is not None:
                _keep_traces(profiler, writer)
            if spy is not None:
                _keep_samples(spy, session, writer)
            session.stop(exit_status=status, status=state, wall_s=time.time() - t0)
        finally:
            signal.signal(signal.SIGINT, old)
            sys.argv = saved_argv
            if saved_path0 is not None and sys.path:
                sys.path[0] = saved_path0
    if not quiet:
        from .reporters.report import print_run_summary
        print_run_summary(output)
    return status
