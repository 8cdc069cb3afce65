"""`graphdbg repro`'s plan and make, run as a program (for tests/e2e/
test_repro_grad.py): `python make_repros.py RUN OUT.json FN=N ...` writes
repro-FN for finding N of RUN beside it and OUT.json with each make()'s Result
(or the refusal). Run in a child of the tests' fork server, so that with
GRAPHDBG_TEST_REPRO_FORK=1 each script is checked in a child forked from this
process (torch imported once) instead of a fresh python; a pytest worker that
has run torch ops cannot fork safely (OpenMP's threads). The folder of RUN is
put on sys.path and PYTHONPATH, as the scripts' packages lie there."""

import dataclasses
import json
import os
import sys

from graphdbg.repro.base import Refused
from graphdbg.repro.make import make
from graphdbg.repro.plan import plan
from graphdbg.runfile.query import Run

run_path, out = sys.argv[1], sys.argv[2]
folder = os.path.dirname(os.path.abspath(run_path))
sys.path.insert(1, folder)
os.environ["PYTHONPATH"] = folder
results = {}
with Run(run_path) as run:
    plans = {}
    for arg in sys.argv[3:]:
        fn, number = arg.split("=")
        try:
            plans[fn] = plan(run, int(number))
        except Refused as exc:
            results[fn] = {"refused": str(exc)}
for fn, p in plans.items():   # one at a time: each check forks this process
    results[fn] = dataclasses.asdict(make(p, run_path, os.path.join(folder, f"repro-{fn}")))
with open(out, "w") as fh:
    json.dump(results, fh)
