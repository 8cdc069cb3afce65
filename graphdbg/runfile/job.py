"""A distributed job's folder, opened whole: the run file of each rank.

Under torchrun or srun, `graphdbg run` writes one run file per rank,
``<folder>/rank<R>.run`` (`graphdbg.core.ranks`); a `Job` opens them
together, by rank, and says what the folder lacks or holds too much of:
ranks of ``0..world_size-1`` without a file, files of another job (their
job id differs from the one most ranks share: stale files left in the
folder), earlier restarts of a rank superseded by a later one, and files
that do not open (one line each, instead of failing the whole job).

    with Job.open("graphdbg-train-5abc2788") as job:
        for rank, run in job.runs.items(): ...

No torch, no rich: the views (graphdbg/reporters/ranks.py, the TUI) render it.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass

from ..core.errors import GraphdbgError
from ..core.ranks import RANK_FILE
from .query import Run


@dataclass(frozen=True, slots=True)
class RankFile:
    """A rank file of the folder that is not one of the job's runs: it did
    not open (``error``), or a later restart of its rank replaced it."""
    path: str
    rank: int
    restart: int
    error: str | None = None


def rank_files(folder: str) -> list[tuple[str, int, int]]:
    """(path, rank, restart) of each ``rank<R>[-restart<N>].run`` file in
    ``folder``, by rank then restart."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    out = []
    for name in names:
        m = RANK_FILE.match(name)
        path = os.path.join(folder, name)
        if m and os.path.isfile(path):
            out.append((path, int(m[1]), int(m[2] or 0)))
    return sorted(out, key=lambda f: (f[1], f[2]))


def is_job_folder(path: str | None) -> bool:
    """Whether ``path`` is a folder holding rank files (a job's folder)."""
    return bool(path) and os.path.isdir(path) and bool(rank_files(path))


class Job:
    """The runs of a job's ranks (`runs`, by rank, each a `query.Run`),
    with what the folder says of the job. A context manager; `close()`
    closes every run."""

    def __init__(self, folder: str, runs: dict[int, Run], unreadable: list[RankFile],
                 superseded: list[RankFile]) -> None:
        self.folder = folder
        self.runs = dict(sorted(runs.items()))
        self.unreadable = unreadable
        self.superseded = superseded
        infos = {r: run.info.rank or {} for r, run in self.runs.items()}
        # what most ranks say (a stale file of another job must not decide it)
        jobs = Counter(i.get("job") for i in infos.values() if i.get("job"))
        self.id: str | None = _most_common(jobs, infos, "job")
        worlds = Counter(i.get("world_size") for i in infos.values()
                         if isinstance(i.get("world_size"), int))
        self.world_size: int | None = _most_common(worlds, infos, "world_size")
        backends = Counter(i.get("backend") for i in infos.values() if i.get("backend"))
        self.backend: str | None = _most_common(backends, infos, "backend")
        # rank -> its job id, for files whose job differs from the job's
        self.stale: dict[int, str | None] = {
            r: i.get("job") for r, i in infos.items()
            if self.id is not None and i.get("job") != self.id}
        have = set(self.runs) | {f.rank for f in unreadable}
        self.missing: list[int] = [r for r in range(self.world_size or 0) if r not in have]
        self.hosts: list[str] = sorted({run.info.host for run in self.runs.values()
                                        if run.info.host})

    @classmethod
    def open(cls, folder: str) -> Job:
        """Open every rank file of ``folder``. The latest restart of a rank
        wins; a file that does not open is listed in `unreadable`. A folder
        without any readable rank file is a one-line `GraphdbgError`."""
        if not os.path.isdir(folder):
            raise GraphdbgError(f"no such job folder: {folder}")
        files = rank_files(folder)
        if not files:
            raise GraphdbgError(f"{folder} holds no rank files (rank<R>.run): not a job's folder")
        runs: dict[int, Run] = {}
        restarts: dict[int, int] = {}
        unreadable, superseded = [], []
        try:
            for path, rank, restart in files:
                try:
                    run = Run(path)
                except GraphdbgError as exc:
                    unreadable.append(RankFile(path, rank, restart, str(exc)))
                    continue
                # the rank the file says it is (a renamed file keeps its rank)
                meta = run.info.rank or {}
                rank = meta["rank"] if isinstance(meta.get("rank"), int) else rank
                restart = meta["restart"] if isinstance(meta.get("restart"), int) else restart
                if rank in runs:
                    if restart < restarts[rank]:
                        superseded.append(RankFile(path, rank, restart))
                        run.close()
                        continue
                    old = runs[rank]
                    superseded.append(RankFile(old.path, rank, restarts[rank]))
                    old.close()
                runs[rank], restarts[rank] = run, restart
        except BaseException:
            for run in runs.values():
                run.close()
            raise
        if not runs:
            raise GraphdbgError(f"no rank file of {folder} could be read: "
                                f"{unreadable[0].error}")
        return cls(folder, runs, unreadable, superseded)

    def path(self, rank: int) -> str:
        return self.runs[rank].path

    def close(self) -> None:
        for run in self.runs.values():
            run.close()

    def __enter__(self) -> Job:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<graphdbg.runfile.job.Job {self.folder!r} ranks {sorted(self.runs)}>"


def _most_common(counts: Counter, infos: dict[int, dict], key: str):
    """The value most ranks share; on a tie, the lowest rank's."""
    if not counts:
        return None
    top = max(counts.values())
    tied = {v for v, n in counts.items() if n == top}
    return next(i.get(key) for _, i in sorted(infos.items()) if i.get(key) in tied)
