"""Analysis: what the views show, worked out once from `graphdbg.runfile.query`'s
typed records, as plain frozen records (no rich, no textual, no SQL).

- `diff` — two runs aligned by what ran (`graphdbg diff A B`, the TUI's two-run view).
  `align` pairs their eager ops (step, user call path, op, occurrence),
  `outputs` each compiled output with the eager op that computed it, `values`
  compares and words value summaries.
- `ranks` — a distributed job's ranks compared (`graphdbg report DIR`, the
  TUI's job screen); `rankdiff` — rank 0 against each other rank op by op
  (`graphdbg diff DIR`); `jobtext` — the job's header, rank lists and where a
  rank was, in the words every view of a job uses.
- `wording` — the words `graphdbg report` and the TUI share about one run (backend
  labels, an export's line, a hint's ways out, fixed sizes, compile phases, a
  divergence in plain sentences); `advice` — what to do about a finding, in
  graphdbg's words where torch's hint is generic; `kinds` — what each kind of
  finding means (`graphdbg explain`); `problemtext` — a problem's words top
  to bottom, as the report and the HTML page show them.
- `lines` — compiled time per user line (a fused kernel split between its
  lines, never more than the graph's time), for the report, JSON and TUI;
  `compiletime` — what the caches gave a compile, agreeing with its phases.

The report, the JSON, the TUI and the HTML page render these records, so they
never disagree. May import `graphdbg.core` and `graphdbg.runfile` only.
"""
