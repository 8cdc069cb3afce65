"""graphdbg's own cost per compiled call, in one process, interleaved.

`compiled_probe.py`'s MLP is compiled under a capture session (the options
`graphdbg run` takes by default), warmed up past the checked, timed and
sampled calls, and then called in rounds, alternately:

- as the program runs it under graphdbg (the recording wrapper Dynamo calls,
  the kernels' module globals as graphdbg left them), and
- bypassed: Dynamo's ``__compiled_fn`` global pointed at the compiled
  callable itself, inside the ``torch._dynamo.disable`` wrapper Dynamo puts
  around every compiled graph, and the kernels' globals at inductor's
  originals, so the same compiled code runs as without graphdbg.

The difference of the medians is graphdbg's own cost per call; the ratio is
what the probe pays for it. Times are the thread's CPU time (on a busy
machine, wall time also counts the waits for a core); the rounds' spread
says how far the figure can be trusted. ``--cprofile FILE`` profiles the recorded
calls instead.

    python benchmarks/hotpath.py [--rounds 15] [--calls 200] [--batch 64] [--without-steps]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode as _top_mode
from torch.utils._python_dispatch import _pop_mode, _push_mode

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compiled_probe import probe_model  # noqa: E402


def _wrappers() -> list[tuple[dict, str, object]]:
    """(globals, name, graphdbg's wrapper) of every compiled graph Dynamo calls."""
    out = []
    for mod in list(sys.modules.values()):
        g = getattr(mod, "__dict__", None)
        if not isinstance(g, dict):
            continue
        for k, v in list(g.items()):
            if k.startswith("__compiled_fn") and hasattr(v, "_graphdbg_inner"):
                out.append((g, k, v))
    return out


class Bypass:
    """Swap graphdbg's wrappers and kernel shims out, and back in."""

    def __init__(self, session) -> None:
        self.wrappers = _wrappers()
        # The global holds graphdbg's wrapper inside the `torch._dynamo.disable`
        # wrapper Dynamo puts around every compiled graph (output_graph.py);
        # plain is the compiled callable inside the same wrapper, as a run
        # without graphdbg has it (the wrapper alone costs a few µs a call).
        self.plain_fns = {k: torch._dynamo.disable(w._graphdbg_inner,
                                                   reason="do not trace Dynamo-compiled graph")
                          for _, k, w in self.wrappers}
        self.mode = session._ctx.eager_mode   # off the stack when plain: no mode at all
        self.popped = False
        kernels = session._core[0]
        self.kernel_globals = []   # (globals, name, graphdbg's value, inductor's)
        for mk in kernels.modules:
            if mk.module is None:
                continue
            g = mk.module.__dict__
            for base, orig in mk.patched.items():
                self.kernel_globals.append((g, base, g[base], orig))

    def plain(self) -> None:
        for g, k, w in self.wrappers:
            g[k] = self.plain_fns[k]
        for g, k, _, orig in self.kernel_globals:
            g[k] = orig
        if self.mode is not None and _top_mode() is self.mode:
            _pop_mode()
            self.popped = True

    def graphdbg(self) -> None:
        for g, k, w in self.wrappers:
            g[k] = w
        for g, k, ours, _ in self.kernel_globals:
            g[k] = ours
        if self.popped:
            _push_mode(self.mode)
            self.popped = False


# CPU time of this thread: on a machine shared with other work, time spent
# waiting for a core is not the program's (wall time here swung x0.6-x3)
_clock = time.thread_time


def measure(rounds: int, calls: int, batch: int, warmup: int, cprofile: str | None,
            without_steps: bool = False) -> dict:
    from graphdbg.core.options import CaptureOptions
    from graphdbg.hooks import Session

    torch.set_num_threads(1)
    torch.manual_seed(0)
    tmp = tempfile.mkdtemp(prefix="graphdbg-hotpath-")
    session = Session(str(Path(tmp) / "hotpath.run"), CaptureOptions())
    session.start()
    try:
        compiled = torch.compile(probe_model(), backend="inductor")
        x = torch.randn(batch, 256)
        with torch.no_grad():
            for _ in range(warmup):
                compiled(x)
            if without_steps:   # the step events' share (hooks/record/steps.py) left out
                session._ctx.call_listeners.clear()
            bypass = Bypass(session)
            if not bypass.wrappers:
                raise SystemExit("no graphdbg wrapper found: is the session recording?")
            if cprofile:
                prof = cProfile.Profile()
                prof.enable()
                for _ in range(calls * rounds):
                    compiled(x)
                prof.disable()
                prof.dump_stats(cprofile)
                return {"cprofile": cprofile, "calls": calls * rounds}
            times = {"plain": [], "graphdbg": []}
            for r in range(rounds + 1):   # round 0 warms both up, not counted
                order = ("plain", "graphdbg") if r % 2 else ("graphdbg", "plain")
                for which in order:
                    getattr(bypass, which)()
                    t0 = _clock()
                    for _ in range(calls):
                        compiled(x)
                    dt = (_clock() - t0) / calls
                    if r:
                        times[which].append(dt)
            bypass.graphdbg()
    finally:
        session.stop()
    own = [(g - p) * 1e6 for g, p in zip(times["graphdbg"], times["plain"])]
    ratios = [g / p for g, p in zip(times["graphdbg"], times["plain"])]
    return {"plain_us": statistics.median(times["plain"]) * 1e6,
            "graphdbg_us": statistics.median(times["graphdbg"]) * 1e6,
            "own_us_median": statistics.median(own),
            "own_us_range": [min(own), max(own)],
            "ratio_median": statistics.median(ratios),
            "ratio_range": [min(ratios), max(ratios)],
            "own_us_of_fastest": (min(times["graphdbg"]) - min(times["plain"])) * 1e6,
            "rounds": rounds, "calls": calls, "batch": batch, "without_steps": without_steps}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=200, help="calls per round and variant")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=300,
                    help="calls before timing: the compile, checks, kernel timing, sampled calls")
    ap.add_argument("--cprofile", default=None)
    ap.add_argument("--without-steps", action="store_true",
                    help="no step events after the warm-up: the backend's own share alone")
    args = ap.parse_args()
    print(json.dumps(measure(args.rounds, args.calls, args.batch, args.warmup, args.cprofile,
                             args.without_steps)))


if __name__ == "__main__":
    main()
