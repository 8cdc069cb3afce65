"""Analysis: what the views show, worked out once from `graphdbg.runfile.query`'s
typed records, as plain frozen records (no rich, no textual, no SQL).

- `diff` — two runs aligned by what ran (`graphdbg diff A B`, the TUI's two-run view).

The report, the JSON, the TUI and the HTML page render these records, so they
never disagree. May import `graphdbg.core` and `graphdbg.runfile` only.
"""
