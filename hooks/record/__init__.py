"""What observes the program while it runs, one recorder per source of facts:

- `backend` — each Dynamo graph before its backend, and its compiled calls;
- `trace` — torch's structured trace: graph breaks, recompiles, compile times;
- `eager` — eager aten ops (a TorchDispatchMode), `tensorstats` and `tensors`
  their values;
- `kernels` — inductor's kernels timed per user line;
- `exports` — torch.export's failures; `creation` — where modules and FX
  nodes were made;
- `profiler`, `pyspy` — torch.profiler traces and py-spy samples.

Each is given the capture context and the findings writer by
`hooks/session.py`, and installs and uninstalls itself.
"""
