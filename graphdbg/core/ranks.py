"""Which rank of which job this process is, from the launcher's environment
(torchrun / torch.distributed.elastic, SLURM's srun, or anything that sets
RANK and WORLD_SIZE), and where its run file goes.

Each rank writes its own file, ``rank<R>.run``, in one folder per job; no
rank talks to another (graphdbg issues no collectives), so the folder name
must come from what every rank of the job already shares, the launcher's own
ids, in this order:

- the elastic run id (``torchrun --rdzv-id``; a fresh UUID under
  ``--standalone`` and on one machine without ``--master-port``);
- SLURM's job id (and step);
- the folder torchrun's agent made for this launch's logs, which it names in
  each rank's TORCHELASTIC_ERROR_FILE: the one launch id there is when the run
  id is torchrun's default "none", as under ``accelerate launch`` (its
  multi-GPU launcher starts torchrun's agent with a fixed port and no run id;
  accelerate sets no job id of its own);
- last, the launcher's pid (torchrun's agent or mpirun is every local rank's
  parent).

On several machines without a shared id the folders differ per machine:
``-o DIR`` names one. A world of one process is no job: its run file is
named as any other.

No torch import here.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
RANK_FILE = re.compile(r"^rank(\d+)(?:-restart(\d+))?\.run$")


@dataclass(frozen=True)
class RankInfo:
    rank: int
    world_size: int
    local_rank: int | None
    local_world_size: int | None
    group_rank: int | None      # the machine's (node's) index
    restart: int                # torchrun's restart count (elastic restarts)
    job: str                    # the id every rank of the job shares

    def meta(self) -> dict:
        """What the run file's meta records of the rank."""
        return {"rank": self.rank, "world_size": self.world_size,
                "local_rank": self.local_rank, "local_world_size": self.local_world_size,
                "group_rank": self.group_rank, "restart": self.restart, "job": self.job}

    @property
    def file_name(self) -> str:
        return f"rank{self.rank}" + (f"-restart{self.restart}" if self.restart else "") + ".run"


def _int(env, name: str) -> int | None:
    try:
        return int(env[name])
    except (KeyError, ValueError):
        return None


def from_env(env=None) -> RankInfo | None:
    """The rank this process is, or None outside a multi-process launch.
    RANK/WORLD_SIZE win (torchrun, and what most launchers set); SLURM's own
    variables count when the program runs under srun without them."""
    env = os.environ if env is None else env
    rank, world = _int(env, "RANK"), _int(env, "WORLD_SIZE")
    local, local_world = _int(env, "LOCAL_RANK"), _int(env, "LOCAL_WORLD_SIZE")
    if rank is None or world is None:
        rank, world = _int(env, "SLURM_PROCID"), _int(env, "SLURM_NTASKS")
        local = _int(env, "SLURM_LOCALID") if local is None else local
    if rank is None or world is None or world < 2:
        return None   # one process (RANK=0 WORLD_SIZE=1 too): a run file of its own
    run_id = env.get("TORCHELASTIC_RUN_ID")
    if run_id in (None, "", "none"):   # torchrun's default --rdzv-id
        run_id = None
    if run_id and _UUID.match(run_id):
        run_id = run_id[:8]   # torchrun's own id: its first 8 hex digits name the job
    job = run_id or env.get("SLURM_JOB_ID")
    if job and env.get("SLURM_STEP_ID") and not run_id:
        job = f"{job}.{env['SLURM_STEP_ID']}"
    job = job or _agent_launch(env)
    if job is None:   # the launcher (torchrun's agent, mpirun): every local rank's parent
        job = f"pid{os.getppid()}"
    return RankInfo(rank=rank, world_size=world, local_rank=local, local_world_size=local_world,
                    group_rank=_int(env, "GROUP_RANK"),
                    restart=_int(env, "TORCHELASTIC_RESTART_COUNT") or 0,
                    job=re.sub(r"[^\w.-]", "_", job))


def _agent_launch(env) -> str | None:
    """The id torchrun's agent gave this launch's log folder, from the
    rank's error file ``<log dir>/<run id>_<id>/attempt_<n>/<local rank>/
    error.json`` (torch.distributed.elastic's DefaultLogsSpecs; a temporary
    folder's random name, the same for every rank the agent started). None
    where the path is not of that form (``--log-dir /dev/null``: empty)."""
    parts = re.split(r"[/\\]", env.get("TORCHELASTIC_ERROR_FILE") or "")
    if len(parts) < 5 or parts[-1] != "error.json" or not parts[-3].startswith("attempt_"):
        return None
    prefix = f"{env.get('TORCHELASTIC_RUN_ID') or 'none'}_"
    folder = parts[-4]
    if not folder.startswith(prefix):
        return None
    return folder[len(prefix):] or None


def job_folder(stem: str, info: RankInfo) -> str:
    """The default folder of a job's run files (relative to the working directory)."""
    return f"graphdbg-{stem}-{info.job}"


def rank_path(output: str | None, stem: str, info: RankInfo) -> str:
    """This rank's run file: ``<folder>/rank<R>.run``, the folder being
    ``-o``'s path (`-o ddp.run` names the folder `ddp.run`, which the views
    open as they would a file) or the job's default folder."""
    folder = output or job_folder(stem, info)
    return os.path.join(folder, info.file_name)


def is_rank_file(name: str) -> bool:
    return RANK_FILE.match(os.path.basename(name)) is not None
