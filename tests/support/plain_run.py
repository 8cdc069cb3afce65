"""Run a sample script WITHOUT graphdbg and report torch's own counts.

Usage::

    python tests/support/plain_run.py SAMPLE.py [sample args...]

The sample runs in-process exactly as ``python SAMPLE.py [sample args...]``
would run it: ``runpy.run_path(SAMPLE.py, run_name="__main__")`` with
``sys.argv = [SAMPLE.py, *args]`` and ``sys.path[0]`` set to the sample's
directory.  Nothing of graphdbg is imported.  This is the "without graphdbg"
baseline that observer-rule tests compare against.

When the sample finishes, the LAST line written to stdout is one line of JSON::

    {"unique_graphs": 4, "graph_breaks": 3, "recompiles": 1, "exit_status": 0}

where every count is read from torch's own bookkeeping (torch 2.13):

``unique_graphs``
    ``torch._dynamo.utils.counters["stats"]["unique_graphs"]``: incremented
    once per FX graph Dynamo compiles (torch/_dynamo/output_graph.py).

``graph_breaks``
    ``sum(torch._dynamo.utils.counters["graph_break"].values())``.  That
    counter maps a break message to how many times it happened; it is filled
    in ``InstructionTranslatorBase`` (torch/_dynamo/symbolic_convert.py) when
    an ``Unsupported`` exception turns into a graph break.  Note what it does
    NOT count: data-dependent branching breaks (``if tensor.sum() > 0:``)
    go through ``jump_graph_break`` and stay in ``counters["unimplemented"]``;
    and a break Dynamo reports from several frames may be counted fewer times
    than it is logged.  This is torch's number as-is, not a number of sites.

``recompiles``
    torch has no counter for recompiles in ``counters``.  Its own record is
    the compilation metrics: ``_compile`` in torch/_dynamo/convert_frame.py
    sets ``recompile_reason`` on the frame's ``CompilationMetrics`` whenever
    ``is_recompilation(cache_size)`` is true (the frame already has a cache
    entry for the same ID-matched objects, i.e. a guard failed), and leaves it
    ``None`` for a first compile.  So the count here is the number of entries
    of ``torch._dynamo.utils.get_compilation_metrics()`` whose
    ``recompile_reason`` is not ``None``.  That list is a bounded deque
    (64 entries by default), so the limit is raised with
    ``torch._dynamo.utils.set_compilation_metrics_limit`` before the sample
    runs.  ``torch._dynamo.reset()`` clears neither this list nor ``counters``.

``exit_status``
    what ``python SAMPLE.py`` would exit with: 0 on normal completion, the
    ``SystemExit`` code (``None`` -> 0, a non-int -> 1, printed to stderr as
    Python does), or 1 for an uncaught exception (traceback on stderr).

The harness itself exits with ``exit_status``.
"""

import json
import os
import runpy
import sys
import traceback


class _TrackingStream:
    """Wraps sys.stdout to remember whether the last character written was a newline."""

    def __init__(self, stream):
        self._stream = stream
        self.at_line_start = True

    def write(self, text):
        if text:
            self.at_line_start = text.endswith("\n")
        return self._stream.write(text)

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _torch_counts():
    """Read torch's own counters; all zeros if torch was never importable."""
    try:
        import torch._dynamo.utils as dynamo_utils
    except Exception:  # pragma: no cover - torch missing or broken
        return {"unique_graphs": 0, "graph_breaks": 0, "recompiles": 0}
    counters = dynamo_utils.counters
    metrics = dynamo_utils.get_compilation_metrics()
    return {
        "unique_graphs": int(counters["stats"]["unique_graphs"]),
        "graph_breaks": int(sum(counters["graph_break"].values())),
        "recompiles": sum(1 for m in metrics if m.recompile_reason is not None),
    }


def _exit_code(exc):
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def main():
    if len(sys.argv) < 2:
        print("usage: python tests/support/plain_run.py SAMPLE.py [sample args...]", file=sys.stderr)
        return 2
    sample = sys.argv[1]
    sample_args = sys.argv[2:]

    import torch._dynamo.utils as dynamo_utils

    # Keep every CompilationMetrics record so that no recompile is dropped from the count.
    dynamo_utils.set_compilation_metrics_limit(1_000_000)

    sys.argv = [sample, *sample_args]
    sys.path[0] = os.path.dirname(os.path.abspath(sample))

    real_stdout = sys.stdout
    tracked = _TrackingStream(real_stdout)
    sys.stdout = tracked
    status = 0
    try:
        runpy.run_path(sample, run_name="__main__")
    except SystemExit as exc:
        status = _exit_code(exc)
    except BaseException:
        traceback.print_exc()
        status = 1
    finally:
        if sys.stdout is tracked:
            sys.stdout = real_stdout

    sys.stderr.flush()
    counts = _torch_counts()
    counts["exit_status"] = status
    if not tracked.at_line_start:
        real_stdout.write("\n")
    real_stdout.write(json.dumps(counts, sort_keys=False) + "\n")
    real_stdout.flush()
    return status


if __name__ == "__main__":
    sys.exit(main())
