"""Colours of the UI's cells, always from the current theme (never
hard-coded), so that themes and NO_COLOR apply."""

from __future__ import annotations

from rich.style import Style
from textual.app import App


def time_style(app: App, level: str | None) -> Style | None:
    """A time's colour by its share of the largest (`model.heat`): "hot" is
    the theme's error colour in bold, "warm" its warning colour."""
    if level is None:
        return None
    theme = app.current_theme
    colour = theme.error if level == "hot" else theme.warning
    return Style(color=colour, bold=level == "hot")


def level_style(app: App, level: str | None) -> Style | None:
    """A value status's colour: error (first divergent), warning (differs),
    success (ok); nothing for not compared."""
    theme = app.current_theme
    colour = {"error": theme.error, "warning": theme.warning,
              "success": theme.success}.get(level or "")
    return Style(color=colour, bold=level == "error") if colour else None
