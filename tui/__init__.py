"""graphdbg.tui: the Textual terminal UI (`graphdbg tui`); reads run files only.

`model/` holds the view state as plain classes (no textual: tested without a
terminal); `views/` renders it (`views.app.GraphdbgApp`, `run_tui`, and the
eager-against-compiled diff screen, key `d`). On two runs (`graphdbg tui A B`)
the problems view holds both runs' findings, each with its run.

May import `graphdbg.core`, `graphdbg.runfile` and `graphdbg.analysis` (the
wording it shares with the report: `graphdbg.analysis.wording`);
never torch or graphdbg.hooks.
"""
