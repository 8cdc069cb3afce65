"""The run file: one SQLite database per run, written by the hooks and read by
every view.

- `records` — one record type per table (the writer's rows, the reader's);
- `schema` — the format's tag and version, and the SQL made from the records;
- `writer` — `RunWriter`: batched, thread-safe, crash-safe writes;
- `query` — `Run`: typed, paged, thread-safe reads (the only SQL outside
  the writer), composed of `query_core` (opening, connections, frames,
  stacks, sources), `query_graphs` (graphs, nodes, node values, calls, kept
  tensors), `query_findings` and `query_time` (where the time goes);
- `readrecords` — the typed records `Run` returns (re-exported by `query`);
- `details` — a finding's detail, typed per kind, with the text views show.

May import `graphdbg.core`; never torch, rich or textual.
"""
