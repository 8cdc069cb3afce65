"""graphdbg.tui: the Textual terminal UI (`graphdbg tui`); reads run files only.

`model` holds the view state as plain classes (no textual: tested without a
terminal); `app` renders it (`GraphdbgApp`, `run_tui`); `diff_model` and
`diff_view` are the eager-against-compiled diff view (key `d`).
"""
