"""The terminal UI's view state as plain classes, tested without a terminal:
`run` (problems, graphs and their node pages, source, hot spots, run info)
and `diff` (eager against compiled rows). No textual here.
"""
