"""Observations turned into findings at the user's line:

- `writer` — `Findings`: every finding of a capture is written here (the sink,
  with one mixin per kind: `recompiles`, `failures`, `checks`, `exported`);
- `common` — what several kinds need (the user's stack now, a traceback);
- `exceptions` — the node or user line an exception names;
- `guards` — a failed guard: what changed, and the hint;
- `frames` — graphs' names, nodes' targets and sources.
"""
