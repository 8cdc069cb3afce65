"""A distributed job's rank files written by hand with RunWriter, every record
known: what a real 2-rank job cannot easily show (a straggler, a call that
waited, a missing rank, a stale file, a rank that never closed its file),
without torch. Shared by tests/e2e/test_rank_views.py and tests/unit/test_analysis_ranks.py."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

from graphdbg.runfile.records import CallRow, EventRow, NodeRow, OpRow
from graphdbg.runfile.writer import RunWriter

SOURCE = """\
import torch


def step(x):
    y = x.relu()
    y = all_reduce(y)
    return y.sum()


for i in range(3):
    step(torch.randn(8))
"""

# graph nodes of `step`: (target, line)
RELU, AR, SUM = ("relu", 5), ("all_reduce", 6), ("sum", 7)


class Rank:
    """A rank's run file of train.py (SOURCE) in `folder`, written with RunWriter."""

    def __init__(self, folder: Path, rank: int, *, world: int = 2, job: str = "j1",
                 status: str = "complete", name: str | None = None, restart: int = 0,
                 host: str = "node0") -> None:
        self.src = folder / "train.py"
        if not self.src.exists():
            self.src.write_text(SOURCE)
        self.path = folder / (name or f"rank{rank}.run")
        self.w = RunWriter(str(self.path), durable=False)
        self.w.set_meta(argv=["train.py"], cwd=str(folder), module=False, rank=rank,
                        world_size=world, local_rank=rank, local_world_size=world,
                        group_rank=0, restart=restart, job=job, dist_backend="gloo",
                        host=host)
        self.status = status
        self.seq = 0
        s = str(self.src)
        self.frames = {ln: self.w.frame_id(s, ln, "step" if ln < 8 else "<module>")
                       for ln in (4, 5, 6, 7, 11)}

    def next(self) -> int:
        self.seq += 1
        return self.seq

    def graph(self, gid: int, cid: str, nodes: list[tuple[str, int]], *,
              collectives: list[str] = (), compile_s: float = 0.5, calls: list[int] = (),
              fx_cache: dict | None = None):
        """A graph of `step` with nodes (target, line); `collectives`: its
        nodes that are collectives; `calls`: wall ns of each call."""
        code = "\n".join(f"    {n} = {t}()" for t, n in
                         [(t, f"n{i}") for i, (t, _) in enumerate(nodes)])
        self.w.put_graph(gid, compile_id=cid, backend="eager", code_name="step",
                         code_file=str(self.src), code_line=4, n_nodes=len(nodes),
                         status="compiled", compile_time_s=compile_s, graph_code=code)
        for i, (target, line) in enumerate(nodes):
            self.w.add(NodeRow(gid, i, f"n{i}", "call_function", target, "[[8]]", '["float32"]',
                               self.frames[line], None, None, None, ""))
        ops = [(f"n{i}", t) for i, (t, _) in enumerate(nodes) if t in collectives]
        if ops:
            self.w.add(EventRow(self.next(), 0.0, "graphdbg_collectives", cid, json.dumps(
                {"graphdbg_collectives": {"graph_id": gid, "ops": [t for _, t in ops],
                                          "nodes": [n for n, _ in ops]}}), None))
        timing = {"total": compile_s, "dynamo": compile_s}
        if fx_cache is not None:
            timing["fx_cache"] = fx_cache
        self.w.add(EventRow(self.next(), 0.0, "graphdbg_compile_time", cid, json.dumps(
            {"graphdbg_compile_time": timing}), None))
        for k, ns in enumerate(calls):
            self.call(gid, k, ns)
        return self

    def call(self, gid: int, k: int, ns: int, shapes: list = ((),)):
        """The k-th call of graph `gid`, its outputs of `shapes`."""
        outputs = [{"shape": list(s), "dtype": "float32"} for s in shapes]
        self.w.add(CallRow(self.next(), gid, k, ns, json.dumps(outputs)))
        return self

    def op(self, op: str, line: int, shape=(8,), phase: str = "forward"):
        self.w.add(OpRow(self.next(), op, phase, json.dumps([list(shape)]),
                         '["float32"]', None, 1000, self.frames[line], None, None, None))
        self.w.add_op_summary(op, phase, self.frames[line], None, 1000)
        return self

    def finding(self, kind: str, line: int, message: str, **kw):
        self.w.diagnostic(f"{kind}{line}{message}", kind=kind,
                          severity=kw.pop("severity", "warning"), message=message,
                          user_frame=self.frames[line], **kw)
        return self

    def close(self, position: dict | None = None) -> None:
        if position is not None:
            self.w.set_meta(position=position)
        self.w.close(exit_status=0 if self.status == "complete" else None, status=self.status)

    def killed(self, position: dict | None = None) -> None:
        """The file as a killed rank leaves it: still marked running, by a
        process of this host that is gone (read as "ended without closing")."""
        gone = subprocess.Popen([sys.executable, "-c", "pass"])
        gone.wait()
        self.w.close(status="running", pid=gone.pid, host=socket.gethostname(),
                     **({"position": position} if position is not None else {}))


def two_ranks(folder: Path, **kw) -> tuple[Rank, Rank]:
    return Rank(folder, 0, **kw), Rank(folder, 1, **kw)
