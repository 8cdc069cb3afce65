"""conftest's fork server (tests/support/forkserver.py), warmed up further
before it forks, for the tests whose processes pay more than torch's import.

- ``WarmForkServer(log)``: torch and Dynamo imported (as conftest's), then the
  heap frozen (``gc.freeze()``). A child of a fork shares the server's memory
  until it writes a page; each full collection in the child visits, and so
  writes, every object the server made (their reference counts and GC
  headers), which copies most of the heap (measured: 2.4 s of the 3.7 s of
  a plain train_loop run under inductor).
  Frozen objects are never visited (the reason gc.freeze exists).
- ``WarmForkServer(log, inductor=True)``: inductor imported too, and its
  once-per-process set-up done: the probe of the CPU's vector ISA (a compiled
  and loaded test program) and the hash of inductor's sources that keys its
  caches (together 3-4 s of each inductor run).
- ``InductorRuns(folder)``: conftest's Runs (each run once, shared across
  xdist workers), its runs forked from an inductor-warm server.

GRAPHDBG_TEST_FORKSERVER=0 runs each in a fresh interpreter instead (as
conftest's Runs).

Nothing of graphdbg is imported and nothing is compiled (torch's counters stay
at zero), so a plain run is still a run without graphdbg; each child runs its
command as `python ARGV` would, less that set-up.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import ENV, SUPPORT, ForkServer, Runs

# Run before forkserver.py's own code, in the same `python -c` process. stdout
# is the server's reply channel: the warm-up (and the programs it starts)
# writes to stderr.
WARM_UP = '''
import os as _os
import sys as _sys

_reply = _os.dup(1)
_os.dup2(2, 1)
try:
    import torch
    import torch._dynamo
    import torch._dynamo.utils
    if {inductor}:
        import torch._inductor.compile_fx  # noqa: F401  inductor's import
        from torch._inductor import codecache as _codecache
        from torch._inductor import cpu_vec_isa as _cpu_vec_isa

        _cpu_vec_isa.pick_vec_isa()  # cached for the process: compiles and loads a probe
        _codecache.torch_key()       # cached for the process: hashes inductor's sources
    import gc as _gc

    _gc.collect()
    _gc.freeze()
finally:
    _sys.stdout.flush()
    _os.dup2(_reply, 1)
    _os.close(_reply)
'''


def forking() -> bool:
    """False where GRAPHDBG_TEST_FORKSERVER=0: a fresh interpreter each run."""
    return os.environ.get("GRAPHDBG_TEST_FORKSERVER", "1") != "0"


class WarmForkServer(ForkServer):
    """conftest's ForkServer, its process warmed up first (see above)."""

    def __init__(self, log: Path, inductor: bool = False) -> None:
        source = WARM_UP.format(inductor=inductor) + (SUPPORT / "forkserver.py").read_text()
        self.log = open(log, "a")
        self.proc = subprocess.Popen([sys.executable, "-c", source],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, text=True, env=ENV)


class InductorRuns(Runs):
    """conftest's Runs, its runs forked from an inductor-warm server."""

    def _process(self, argv: list[str], cwd: Path, timeout: int = 900) -> tuple[int, str, str]:
        if self._server is None and forking():
            self._server = WarmForkServer(self.root / f"forkserver.{os.getpid()}.log",
                                          inductor=True)
        return super()._process(argv, cwd, timeout)
