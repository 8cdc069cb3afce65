"""The Textual app that renders `tui.model`: `app` (`GraphdbgApp`, `run_tui`,
its screens, app.tcss), `diff` (the eager-against-compiled screen, key `d`),
`theme` (cell colours).
"""
