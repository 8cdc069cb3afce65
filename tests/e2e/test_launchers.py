"""graphdbg under the launchers users start jobs with (torchrun, accelerate,
srun): the job folder named from the launcher's own ids, and graphdbg put
outside a launcher refused with the command line that puts it inside.

accelerate is not installed here: its multi-GPU launcher starts torchrun's
agent in-process with a fixed port and no run id (accelerate/commands/
launch.py, multi_gpu_launcher), which is what the real torchrun below is
started as (`--master-port`): the environment its ranks get is the one
accelerate's ranks get."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ENV, graphdbg
from graphdbg.core import ranks

DUMP_ENV = """\
import json, os, sys
with open(os.path.join(sys.argv[1], f"env{os.environ['RANK']}.json"), "w") as f:
    json.dump(dict(os.environ), f)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def static_envs(tmp_path_factory) -> list[dict]:
    """The environment of each of 2 ranks of a real torchrun started as
    `accelerate launch --multi_gpu` starts it: a fixed port, no run id."""
    folder = tmp_path_factory.mktemp("static")
    (folder / "dump_env.py").write_text(DUMP_ENV)
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                           "--master-port", str(_free_port()), "--monitor-interval", "0.2",
                           str(folder / "dump_env.py"), str(folder)],
                          cwd=folder, capture_output=True, text=True, env=ENV, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads((folder / f"env{r}.json").read_text()) for r in (0, 1)]


def test_a_job_without_a_run_id_is_named_by_the_launch_not_a_pid(static_envs, tmp_path,
                                                                 monkeypatch):
    assert {e["TORCHELASTIC_RUN_ID"] for e in static_envs} == {"none"}
    infos = [ranks.from_env(e) for e in static_envs]
    assert [i.rank for i in infos] == [0, 1]
    # the agent's folder for this launch's logs: one id for both ranks
    (job,) = {i.job for i in infos}
    logs = {Path(e["TORCHELASTIC_ERROR_FILE"]).parts[-4] for e in static_envs}
    assert logs == {f"none_{job}"} and not job.startswith("pid")
    monkeypatch.chdir(tmp_path)
    from graphdbg.runner import output_path
    for r, env in enumerate(static_envs):
        with monkeypatch.context() as m:
            for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RUN_ID",
                      "TORCHELASTIC_ERROR_FILE", "TORCHELASTIC_RESTART_COUNT"):
                m.setenv(k, env[k])
            assert output_path(None, "train.py", False) == f"graphdbg-train-{job}/rank{r}.run"
    # inside a SLURM allocation the job's id wins (the same on every machine)
    assert ranks.from_env({**static_envs[1], "SLURM_JOB_ID": "4242"}).job == "4242"


@pytest.mark.parametrize("outside,inside", [
    (["accelerate", "launch", "--num_processes", "2", "train.py", "--lr", "1"],
     "accelerate launch --num_processes 2 -m graphdbg run train.py --lr 1"),
    (["-m", "accelerate.commands.launch", "train.py"], "accelerate launch -m graphdbg run train.py"),
    (["torchrun", "--nproc-per-node", "2", "train.py"],
     "torchrun --nproc-per-node 2 --no-python graphdbg run train.py"),
    (["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "train.py", "-x"],
     "torchrun --standalone --nproc-per-node 2 --no-python graphdbg run train.py -x"),
], ids=["accelerate", "accelerate-module", "torchrun", "torch.distributed.run"])
def test_graphdbg_outside_a_launcher_says_how_to_go_inside(workdir, outside, inside):
    (workdir / "train.py").write_text("print('ran')\n")
    proc = graphdbg("run", *outside, cwd=workdir)
    assert proc.returncode == 2 and proc.stdout == "" and "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    name = outside[1] if outside[0] == "-m" else outside[0]
    assert line == (f"graphdbg run: {name} starts each rank as a process of its own, which "
                    f"graphdbg cannot see from outside; put graphdbg inside it: {inside}")
    assert not list(workdir.glob("graphdbg-*"))
