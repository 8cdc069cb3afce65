"""Shared helpers.

- `runs`: the samples under `graphdbg run` (and without it), each run once per
  session and shared by every test that reads it, across xdist workers too.
- `report_doc` / `report_text`: the report of a run file built in-process (the
  same JSON as `graphdbg report --json`); `graphdbg(...)` runs the real CLI in
  a subprocess for the tests where the process is the point.
- `clean_torch`: Dynamo reset around an in-process test, which must leave
  torch's hooks, logging and configs as it found them.
- markers: `# graphdbg-expect: KIND` in samples and programs, `# MARK name` in
  test files, instead of hard-coded line numbers.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
SUPPORT = ROOT / "tests" / "support"
PLAIN_RUN = SUPPORT / "plain_run.py"
sys.path.insert(0, str(SUPPORT))
import heap  # noqa: E402
import pilot_waits  # noqa: E402
# Subprocesses and in-process tests keep torch single-threaded: these
# machines have 2 cores, and xdist runs two workers (set before torch loads).
os.environ.setdefault("OMP_NUM_THREADS", "1")
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
       "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
ENV.pop("GRAPHDBG_DEBUG", None)
# `graphdbg repro` run by the tests checks its scripts in a child forked from
# itself (torch imported) rather than a fresh python (graphdbg/repro/make.py);
# the repros the tests make in process still run in a fresh one
ENV["GRAPHDBG_TEST_REPRO_FORK"] = "1"
# Textual's Pilot in this process waits until the app is done, not until the
# CPU looks idle (tests/support/pilot_waits.py: faster, and safe under load)
pilot_waits.install()
AOT = ("--backend", "aot_eager")
GOLDEN_SAVE = ("--save", "observed.safetensors")  # tests/support/golden.py passes the same


# -- the CLI in a subprocess, reports in-process ----------------------------------

def graphdbg(*args: str, cwd: Path | str, timeout: int = 600, env: dict | None = None,
             check: bool = False) -> subprocess.CompletedProcess:
    """`python -m graphdbg ARGS` in ``cwd``: forked from this worker's warm
    interpreter (`CliServer`; torch and Dynamo imported once, about 2.5 s of CPU
    saved a call) unless ``env`` is the test's own (a fresh interpreter then,
    as GRAPHDBG_TEST_FORKSERVER=0 asks for every call)."""
    if env is None or env is ENV:
        proc = python("-m", "graphdbg", *args, cwd=cwd, timeout=timeout)
    else:
        proc = subprocess.run([sys.executable, "-m", "graphdbg", *map(str, args)], cwd=cwd,
                              capture_output=True, text=True, timeout=timeout, env=env)
    if check and proc.returncode != 0:
        raise AssertionError(f"graphdbg {args} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def python(*args: str, cwd: Path | str, timeout: int = 600) -> subprocess.CompletedProcess:
    """`python ARGS` in ``cwd`` (ENV), forked from this worker's warm
    interpreter as `graphdbg()` is; a fresh one where GRAPHDBG_TEST_FORKSERVER=0."""
    argv = [sys.executable, *map(str, args)]
    if os.environ.get("GRAPHDBG_TEST_FORKSERVER", "1") != "0":
        return subprocess.CompletedProcess(argv, *CliServer.get().run(argv, Path(cwd), timeout))
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=ENV)


def report_json(run: Path | str, cwd: Path | str) -> dict:
    """`graphdbg report --json RUN` in a subprocess: for the CLI tests only."""
    doc = json.loads(graphdbg("report", "--json", run, cwd=cwd, check=True).stdout)
    assert_every_finding_has_a_line(doc)
    return doc


def report_doc(run: Path | str) -> dict:
    """The `report --json` document, built in-process (JSON round trip included).
    Every document is checked: each finding has a file and a line."""
    import graphdbg as api
    from graphdbg.reporters.report import document
    reader = api.open_run(str(run))
    try:
        doc = json.loads(json.dumps(document(reader), default=str))
    finally:
        reader.close()
    assert_every_finding_has_a_line(doc)
    return doc


def findings_without_a_line(doc: dict) -> list[dict]:
    """The diagnostics of a report document with no file or no line > 0."""
    return [d for d in doc["diagnostics"]
            if not d.get("file") or not isinstance(d.get("line"), int) or d["line"] <= 0]


def assert_every_finding_has_a_line(doc: dict) -> None:
    """A finding without a file and a line is a bug (issue 9): raise an
    AssertionError that lists each one."""
    missing = findings_without_a_line(doc)
    if missing:
        raise AssertionError(
            f"{len(missing)} finding(s) without a file and line in {doc['run'].get('file')}:\n"
            + "\n".join(f"  #{d['id']} {d['kind']} ({d['severity']}) node={d.get('node')!r} "
                        f"graph={d.get('graph')!r} stage={(d.get('detail') or {}).get('stage')!r} "
                        f"file={d.get('file')!r} line={d.get('line')!r}: {str(d['message'])[:200]}"
                        for d in missing))


def report_text(run: Path | str, *flags: str, width: int = 120) -> str:
    """`graphdbg report [FLAGS] RUN` (the rich summary), in-process, ``width``
    columns wide (the report honours COLUMNS, which xdist's workers set to 80)."""
    from graphdbg.cli import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
            pytest.MonkeyPatch.context() as mp:
        mp.setenv("COLUMNS", str(width))
        rc = main(["report", *flags, str(run)])
    assert rc == 0, err.getvalue()
    return out.getvalue()


def query(run: Path | str, sql: str, args: tuple = ()) -> list[dict]:
    import graphdbg as api
    reader = api.open_run(str(run))
    try:
        return [dict(r) for r in reader.query(sql, args)]
    finally:
        reader.close()


# -- markers ------------------------------------------------------------------------

def markers(path: Path | str, kind: str) -> set[tuple[str, int]]:
    """(file, line) of every `# graphdbg-expect: KIND [KIND...]` marker in a file."""
    out = set()
    for i, line in enumerate(Path(path).read_text().splitlines(), 1):
        m = re.search(r"#\s*graphdbg-expect:\s*([\w ]+)", line)
        if m and kind in m[1].split():
            out.add((str(path), i))
    return out


def marked(path: Path | str, kind: str) -> int:
    """The line of the one `graphdbg-expect: KIND` marker in a file."""
    (site,) = markers(path, kind)
    return site[1]


_MARK = re.compile(r"#\s*MARK\s+(.+?)\s*$")


def line_of(path: Path | str, mark: str) -> int:
    """The line that ends with `# MARK <mark>` (exactly one in the file)."""
    lines = [i for i, ln in enumerate(Path(path).read_text().splitlines(), 1)
             if (m := _MARK.search(ln)) and m[1] == mark]
    assert len(lines) == 1, (path, mark, lines)
    return lines[0]


def code_at(path: Path | str, line: int) -> str:
    """The stripped source line, as graphdbg reports `code`."""
    return Path(path).read_text().splitlines()[line - 1].strip()


def at(path: Path | str, mark: str) -> tuple[int, str]:
    """(line, code) of the line marked `# MARK <mark>`."""
    line = line_of(path, mark)
    return line, code_at(path, line)


def sites(doc: dict, kind: str) -> set[tuple[str, int]]:
    return {(d["file"], d["line"]) for d in doc["diagnostics"] if d["kind"] == kind}


def stack(d: dict) -> list[tuple[str, int]]:
    return [(f["file"], f["line"]) for f in d["stack"]]


def exception_of(program, run_file: Path | str | None = None) -> BaseException:
    """The exception `program()` dies of: without graphdbg, or under a capture
    (then a finding's stack starts at the call below)."""
    import graphdbg as api
    import torch._dynamo
    torch._dynamo.reset()
    with pytest.raises(Exception) as info:
        if run_file is None:
            program()
        else:
            with api.capture(str(run_file)):
                program()  # MARK captured program
    return info.value


CAPTURED_AT = (__file__, line_of(__file__, "captured program"))


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path


# -- sample runs, once per session --------------------------------------------------

@dataclass
class Result:
    """One cached process: its exit status and output, and its folder."""
    dir: Path
    returncode: int
    stdout: str
    stderr: str
    run: Path | None = None
    counts: dict | None = None  # plain runs: torch's own counters
    _doc: dict | None = field(default=None, repr=False)

    @property
    def doc(self) -> dict:
        if self._doc is None:
            self._doc = report_doc(self.run)
        return self._doc

    def ok(self) -> "Result":
        assert self.returncode == 0, self.stderr[-3000:]
        return self


class ForkServer:
    """tests/support/forkserver.py: runs commands in children forked from a
    process that has imported torch and Dynamo once (4 s saved per run)."""

    def __init__(self, log: Path) -> None:
        # `python -c`: its frames are "<string>", not user code to graphdbg
        # (as python's own <frozen runpy> frames), so stacks start at the program
        source = (SUPPORT / "forkserver.py").read_text()
        self.log = open(log, "a")
        self.proc = subprocess.Popen([sys.executable, "-c", source],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, text=True, env=ENV)

    # one request at a time (a test's threads too): a worker's runs and CLI
    # calls share one server
    _lock = threading.Lock()

    def run(self, argv: list[str], cwd: Path, timeout: int,
            out: Path | None = None, err: Path | None = None) -> tuple[int, str, str]:
        out, err = out or cwd / "stdout.txt", err or cwd / "stderr.txt"
        with self._lock:
            self.proc.stdin.write(json.dumps({"argv": argv, "cwd": str(cwd), "out": str(out),
                                              "err": str(err), "timeout": timeout}) + "\n")
            self.proc.stdin.flush()
            reply = self.proc.stdout.readline()
        assert reply, f"the fork server died (exit {self.proc.poll()})"
        return json.loads(reply)["returncode"], out.read_text(), _no_leak_report(err.read_text())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)
        self.log.close()


_NANOBIND = re.compile(r"^(nanobind: .*| - leaked .*| - \.\.\. skipped remainder|See https://nanobind\.readthedocs\.io/\S*)\n?",
                       re.M)


def _no_leak_report(err: str) -> str:
    """A forked child's stderr less nanobind's report of leaked objects at exit
    (triton's, on a CUDA build of torch): the server froze what it imported
    (gc.freeze), so the child's last collections never free it. A fresh
    interpreter, as the user runs graphdbg, collects it and says nothing."""
    return _NANOBIND.sub("", err) if "nanobind: " in err else err


class CliServer:
    """This worker's fork server: `graphdbg()`'s and `python()`'s commands,
    their output in a folder of its own (not the command's cwd, which tests
    list), and Runs' runs."""

    _this: "CliServer | None" = None

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="graphdbg-cli-"))
        self.server = ForkServer(self.dir / "forkserver.log")
        self.n = 0

    @classmethod
    def get(cls) -> "CliServer":
        if cls._this is None:
            cls._this = cls()
        return cls._this

    def run(self, argv: list[str], cwd: Path, timeout: int) -> tuple[int, str, str]:
        self.n += 1
        return self.server.run(argv, cwd, timeout, self.dir / f"{self.n}.out",
                               self.dir / f"{self.n}.err")

    @classmethod
    def close(cls) -> None:
        if cls._this is not None:
            cls._this.server.close()
            shutil.rmtree(cls._this.dir, ignore_errors=True)
            cls._this = None


def pytest_sessionfinish(session, exitstatus) -> None:
    CliServer.close()


# The worker's long-lived heap is frozen at test boundaries, so that Python's
# full collections stop walking torch's modules and caches (tests/support/heap.py)
def pytest_collection_finish(session) -> None:
    heap.freezer.freeze()


def pytest_runtest_logfinish(nodeid, location) -> None:
    heap.freezer.after_test()


class Runs:
    """Each (kind, sample, options, args) is run once: the first test that asks
    runs it under a file lock, the others (in any xdist worker) read its result.
    GRAPHDBG_TEST_FORKSERVER=0 runs each in a fresh interpreter instead."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self._mem: dict[str, Result] = {}
        self._server: ForkServer | None = None

    def _process(self, argv: list[str], cwd: Path, timeout: int = 900) -> tuple[int, str, str]:
        if os.environ.get("GRAPHDBG_TEST_FORKSERVER", "1") == "0":
            p = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, env=ENV,
                               timeout=timeout)
            return p.returncode, p.stdout, p.stderr
        # this worker's one fork server, shared with `graphdbg()` (CliServer):
        # each server costs about 3 s of CPU to start
        return (self._server or CliServer.get().server).run(argv, cwd, timeout)

    def close(self) -> None:
        if self._server is not None:   # a subclass's own (InductorRuns)
            self._server.close()

    def spawn(self, *argv: str, cwd: Path) -> Result:
        """`python ARGV` in `cwd`, in a fresh process (not cached): for the
        observer checks of programs the tests write."""
        return Result(cwd, *self._process([sys.executable, *map(str, argv)], cwd))

    def _once(self, key: str, make) -> tuple[Path, int, str, str]:
        """``make(folder)`` -> (returncode, stdout, stderr), made once per
        session in its own folder under a file lock (any xdist worker)."""
        d = self.root / re.sub(r"[^\w.-]+", "_", key)
        with open(f"{d}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            done = d / "result.json"
            if not done.exists():
                shutil.rmtree(d, ignore_errors=True)
                d.mkdir()
                done.write_text(json.dumps(make(d)))
            rc, out, err = json.loads(done.read_text())
        return d, rc, out, err

    def _cached(self, key: str, argv: list[str]) -> Result:
        if key not in self._mem:
            d, rc, out, err = self._once(key, lambda d: self._process(argv, d))
            runs = sorted(d.glob("*.run"))
            self._mem[key] = Result(d, rc, out, err, runs[0] if runs else None)
        return self._mem[key]

    def graphdbg(self, name: str, *args: str, opts: tuple[str, ...] = (),
                 quiet: bool = True) -> Result:
        """`graphdbg run [-q] -o NAME.run OPTS samples/NAME.py ARGS`."""
        argv = [sys.executable, "-m", "graphdbg", "run", *(["-q"] if quiet else []),
                "-o", f"{name}.run", *opts, str(SAMPLES / f"{name}.py"), *args]
        return self._cached(" ".join(["graphdbg", name, *opts, *args, "" if quiet else "-v"]),
                            argv)

    def program(self, path: Path, *opts: str) -> Result:
        """`graphdbg run -q -o NAME.run OPTS PATH` of a program the tests wrote
        (tests/support/...), once per session."""
        argv = [sys.executable, "-m", "graphdbg", "run", "-q", "-o", f"{path.stem}.run", *opts,
                str(path)]
        return self._cached(" ".join(["program", str(path), *opts]), argv)

    def golden(self, name: str) -> Result:
        """The run the golden documents were made from (tests/support/golden.py):
        aot_eager, final outputs saved to `observed.safetensors` for the
        observer rule (one run serves both)."""
        return self.graphdbg(name, *AOT, *GOLDEN_SAVE)

    def plain(self, name: str, *args: str) -> Result:
        """The sample without graphdbg (tests/support/plain_run.py): torch's
        own counters in `.counts`."""
        r = self._cached(" ".join(["plain", name, *args]),
                         [sys.executable, str(PLAIN_RUN), str(SAMPLES / f"{name}.py"), *args])
        r.counts = json.loads(r.stdout.strip().splitlines()[-1])
        return r

    def python(self, name: str, *args: str) -> Result:
        """`python samples/NAME.py ARGS`, as the user would run it."""
        return self._cached(" ".join(["python", name, *args]),
                            [sys.executable, str(SAMPLES / f"{name}.py"), *args])


    def job(self, name: str, program: str, *opts: str, plain: bool = False,
            hang_until=None) -> Result:
        """A real 2-rank torchrun job (tests/support/jobs.py), once per
        session: `.run` is its job folder (`job/`, rank0.run and rank1.run)."""
        from jobs import run_job
        key = f"job {name}"
        if key not in self._mem:
            d, rc, out, err = self._once(key, lambda d: run_job(
                d, program, *opts, plain=plain, env=ENV, hang_until=hang_until))
            self._mem[key] = Result(d, rc, out, err, None if plain else d / "job")
        return self._mem[key]


@pytest.fixture(scope="session")
def runs(tmp_path_factory) -> Runs:
    # xdist workers share the folder above their own basetemp (pytest-xdist's
    # recipe for session data); without xdist the session's own basetemp
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    runs = Runs(shared / "sample-runs")
    yield runs
    runs.close()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items) -> None:
    """Tests that share a module- or class-scoped fixture of their own module
    (one program run, read by several tests) go to one xdist worker: else
    each worker that gets one of them makes the fixture again (an inductor
    run twice over). Before xdist names the groups (tryfirst)."""
    for item in items:
        if item.get_closest_marker("xdist_group"):
            continue
        info = getattr(item, "_fixtureinfo", None)
        module = item.nodeid.split("::", 1)[0]
        for name in getattr(info, "names_closure", ()):
            defs = info.name2fixturedefs.get(name) or ()
            d = defs[-1] if defs else None
            if d is not None and d.scope in ("module", "class") and d.baseid.startswith(module):
                item.add_marker(pytest.mark.xdist_group(f"{module}::{name}"))
                break
    _order_longest_first(items)


def _order_longest_first(items) -> None:
    """Longest work first, so that two xdist workers end together: the
    real-inductor tests, then the tests of shared runs (grouped), then the
    rest in collection order (a stable sort: groups stay together); last the
    comparison across torch versions, which reads every sample's golden run."""
    def rank(item) -> int:
        if item.path.name == "test_torch_versions.py":
            return 3
        if item.get_closest_marker("inductor"):
            return 0
        return 1 if item.get_closest_marker("xdist_group") else 2
    items.sort(key=rank)


def group(name: str):
    """Tests that read the same sample runs go to the same xdist worker
    (`--dist loadgroup`), so no worker waits on another's run."""
    return pytest.mark.xdist_group(f"sample-{name}")


# -- in-process tests leave torch as they found it ----------------------------------

def torch_state() -> dict:
    """What a capture session patches or pushes, and the configs tests touch."""
    import torch
    import torch._dynamo
    import torch._inductor.config
    from torch._dynamo.repro.after_dynamo import WrapBackendDebug
    import torch.onnx
    from torch._logging import _internal as tlog
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    return {
        "WrapBackendDebug.__call__": WrapBackendDebug.__call__,
        "Graph.create_node": torch.fx.Graph.create_node,
        "torch.export.export": torch.export.export,
        "ExportedProgram.module": torch.export.ExportedProgram.module,
        "torch.onnx.export": torch.onnx.export,
        "ONNXProgram.__call__": torch.onnx.ONNXProgram.__call__,
        "ShapeEnv._set_replacement": ShapeEnv._set_replacement,
        "_init_logs": tlog._init_logs,
        # torch's LazyTraceHandler removes itself at the first trace record
        "trace_log handlers": [h for h in tlog.trace_log.handlers
                               if not isinstance(h, tlog.LazyTraceHandler)],
        "trace_log level": tlog.trace_log.level,
        "convert_frame handlers": list(logging.getLogger("torch._dynamo.convert_frame").handlers),
        "dispatch modes": list(_get_current_dispatch_mode_stack()),
        "grad enabled": torch.is_grad_enabled(),
        "dynamo config": torch._dynamo.config.get_config_copy(),
        "inductor config": torch._inductor.config.get_config_copy(),
    }


def state_changes(before: dict, after: dict) -> list[str]:
    return [k for k in before if before[k] != after[k]]


@pytest.fixture
def site_package(tmp_path):
    """``install(name, source)``: a third-party package made from source text
    in a ``site-packages`` folder on sys.path, as pip would install it, and
    imported; gone again after the test."""
    root = tmp_path / "lib" / "site-packages"
    made: list[str] = []

    def install(name: str, source: str):
        import importlib
        import textwrap
        (root / name).mkdir(parents=True)
        (root / name / "__init__.py").write_text(textwrap.dedent(source))
        if str(root) not in sys.path:
            sys.path.insert(0, str(root))
        made.append(name)
        return importlib.import_module(name)

    yield install
    if str(root) in sys.path:
        sys.path.remove(str(root))
    for name in made:
        sys.modules.pop(name, None)


@pytest.fixture
def clean_torch():
    """Dynamo reset around an in-process compile test; the test must leave
    graphdbg's hooks uninstalled and torch's configs unchanged."""
    import torch._dynamo
    torch._dynamo.reset()
    before = torch_state()
    yield
    torch._dynamo.reset()
    changed = state_changes(before, torch_state())
    assert not changed, f"the test left torch changed: {changed}"


def program_fixtures(path: Path, plain_folder: str):
    """Module-scoped `traced` (the program run under `graphdbg run`) and
    `plain` (run without graphdbg, in a folder of its own) fixtures of one
    program, for a test module to bind: ``traced, plain = program_fixtures(...)``."""
    @pytest.fixture(scope="module")
    def traced(runs):
        return runs.program(path).ok()

    @pytest.fixture(scope="module")
    def plain(runs, tmp_path_factory):
        return runs.spawn(path, cwd=tmp_path_factory.mktemp(plain_folder)).ok()

    return traced, plain
