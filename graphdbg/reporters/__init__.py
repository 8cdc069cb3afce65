"""Reporters: a run file, or what graphdbg.analysis made of it, rendered for a
reader. They only render: the analysis (alignment, rank comparison, the
words shared with the TUI) is in graphdbg.analysis, the SQL in
graphdbg.runfile, and the commands (graphdbg/commands/) make the console,
print the JSON and choose the exit status.

- `report` — `graphdbg report`: the rich summary of a run (`summary_lines`:
  the lines after `graphdbg run`): `problems` first (each with what to do),
  a short graphs table, the next commands; with --full the `tables` (compile
  time, per line, py-spy, slowest nodes and ops); `fit` lays a table out at
  the terminal's width;
- `json` — `graphdbg report --json`: the document of docs/report-json.md;
- `diff` — `graphdbg diff A B`: two runs aligned, the first place they part;
- `ranks` — `graphdbg report DIR` (text and `--json`) and `graphdbg diff DIR`:
  a distributed job's ranks compared.

May import `graphdbg.core`, `graphdbg.runfile` and `graphdbg.analysis`; never
torch, textual or sqlite3; rich only inside functions.
"""
