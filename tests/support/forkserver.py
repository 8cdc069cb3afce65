"""A warm interpreter that runs commands in forked children, for the tests'
sample runs.

    python -c "$(cat tests/support/forkserver.py)"   # then one JSON request a line on stdin

Starting python and importing torch and Dynamo takes about 4 s, most of what a
small sample's run costs. This process pays it once; each request forks a
child that runs one command as `python ARGV...` would: ``-m MODULE`` or a
script, with ``sys.argv`` and ``sys.path[0]`` set as python sets them, in its
own folder, stdin from /dev/null, stdout and stderr to files, and its exit
status the command's. The server imports nothing of graphdbg, so a child that
runs a sample without graphdbg is a run without graphdbg. Run with `-c`, its
frames are "<string>" frames, which graphdbg never takes for the user's code
(as python's own "<frozen runpy>"): findings' stacks start at the program.

Request: {"argv": [python, ...], "cwd": DIR, "out": PATH, "err": PATH, "timeout": S}
Reply:   {"returncode": N}     (-signal when the child was killed)
"""

import atexit
import json
import os
import runpy
import signal
import sys
import threading
import traceback

import gc

import importlib

import torch  # noqa: F401  the point: imported once, before any fork
import torch._dynamo  # noqa: F401
import torch._dynamo.utils  # noqa: F401

# What a first compile with a cheap backend (eager, aot_eager) imports lazily
# (AOTAutograd, its partitioner's networkx, inductor's decompositions and
# lowerings, the export passes), and what a graphdbg run imports besides
# itself: about 0.7 s of each forked run's 2 s of CPU. Importing is all: no
# graph is compiled and no counter moves. A name one torch lacks is skipped.
PRELOAD = (
    "torch._functorch.aot_autograd", "torch._functorch.partitioners", "networkx",
    "torch._inductor.compile_fx", "torch._inductor.select_algorithm", "torch._inductor.lowering",
    "torch._inductor.compiler_bisector", "torch._dynamo.backends.inductor",
    "torch._dynamo.repro.after_dynamo", "torch._subclasses.schema_check_mode",
    "torch._functorch._aot_autograd.subclass_codegen", "torch._higher_order_ops.passes",
    "torch.export", "torch._export", "torch._export.db", "sympy.combinatorics",
    "sympy.tensor.tensor", "filelock", "sqlite3", "multiprocessing.synchronize",
    "safetensors.torch", "rich.console", "rich.table",
)
for _name in PRELOAD:
    try:
        importlib.import_module(_name)
    except ImportError:
        pass

# A child's full collections would visit (and so write, and so copy) every
# object imported above: frozen, they are never visited (seconds per run)
gc.collect()
gc.freeze()


def _run(argv: list[str]) -> int:
    try:
        if argv[1] == "-m":
            sys.argv = [argv[2], *argv[3:]]
            sys.path[0] = os.getcwd()
            runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
        else:
            sys.argv = argv[1:]
            sys.path[0] = os.path.dirname(os.path.abspath(argv[1]))
            runpy.run_path(argv[1], run_name="__main__")
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


def _child(req: dict) -> None:
    os.chdir(req["cwd"])
    for fd, path, mode in ((0, os.devnull, os.O_RDONLY), (1, req["out"], os.O_WRONLY | os.O_CREAT),
                           (2, req["err"], os.O_WRONLY | os.O_CREAT)):
        f = os.open(path, mode, 0o644)
        os.dup2(f, fd)
        os.close(f)
    signal.alarm(int(req.get("timeout", 900)))
    code = _run(req["argv"])
    # The end of `python ARGV`, as Py_FinalizeEx begins it: wait for the
    # program's non-daemon threads, run its atexit handlers (weakref finalizers
    # among them), flush the streams; then exit without tearing down modules.
    # That teardown frees what the server imported, so it writes to, and so
    # copies, a quarter of the pages the child shares with the server (26k page
    # faults, 0.17 s of CPU a run). What a program could see of it: a file
    # object left open in a module's globals is not flushed by its __del__
    # (none of the tests' programs does that; a fresh python would flush it).
    threading._shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code & 0xFF)


def main() -> None:
    for line in sys.stdin:
        req = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(req)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}), flush=True)


if __name__ == "__main__":
    main()
