"""graphdbg.tui: the Textual terminal UI (reads run files only; not built yet)."""
