"""The Textual app that renders `tui.model`: `app` (`GraphdbgApp`, `run_tui`,
app.tcss), `tabs` (the main screen's views, the command palette), `screens`
(problem and node detail, a graph's nodes, help), `widgets` (find tables,
find bar, the workers' messages), `diff` (the diff screen, key `d`), `theme`
(cell colours).
"""
