"""Reporters: a run file rendered for a reader, from `graphdbg.runfile.query`'s
typed records.

- `report` — `graphdbg report`: the rich summary after a run;
- `json` — `graphdbg report --json`: the document of docs/report-json.md;
- `diff` — `graphdbg diff A B`: two runs aligned, the first place they part.

May import `graphdbg.core` and `graphdbg.runfile`; never torch or textual.
"""
