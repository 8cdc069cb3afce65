"""Observations turned into findings at the user's line:

- `writer` — `Findings`: every finding of a capture is written here;
- `exceptions` — the node or user line an exception names;
- `guards` — a failed guard: what changed, and the hint;
- `frames` — graphs' names, nodes' targets and sources.
"""
