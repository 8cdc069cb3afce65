"""The run file: one SQLite database per run, written by the hooks and read by
every view.

- `records` — one record type per table (the writer's rows, the reader's);
- `schema` — the format's tag and version, and the SQL made from the records;
- `writer` — `RunWriter`: batched, thread-safe, crash-safe writes;
- `query` — `Run`: typed, paged, thread-safe reads (the only SQL outside
  the writer);
- `details` — a finding's detail, typed per kind, with the text views show.

May import `graphdbg.core`; never torch, rich or textual.
"""
