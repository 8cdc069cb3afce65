"""A table that fits the terminal it is printed on (rich only inside
functions).

Rich squeezes every column of a table that is too wide alike: at 80 columns
the numbers of the report's tables were cut ("27.5…") or their column lost
altogether while a source line kept its width. `FitTable` decides at print
time, knowing the width: the numbers keep theirs (a header wraps at its
spaces rather), and the names, paths and code share what is left, cut with
"…".
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Col", "FitTable"]

# the narrowest a flexible column is cut to (its header's first word, at least)
_FLOOR = 6


@dataclass(frozen=True)
class Col:
    header: str
    justify: str = "left"
    flex: bool = False          # gives way when the terminal is narrow (names, paths, code)
    cap: int | None = None      # a flexible column's widest
    wrap: bool = False          # a flexible column that wraps at its spaces instead of a cut
    optional: bool = False      # left out where even the narrowest layout is too wide


@dataclass
class FitTable:
    """Rows of rich markup under ``cols``, laid out at print time."""
    cols: list[Col]
    rows: list[tuple[str, ...]] = field(default_factory=list)

    def add_row(self, *cells: str) -> None:
        self.rows.append(tuple(cells))

    def widths(self, width: int) -> list[int | None]:
        """Each column's width within ``width`` cells (two between columns):
        every column as wide as its cells and header where that fits; else
        the numbers' headers wrap at their spaces; else the flexible columns
        share what is left, in proportion to what each wants, none under its
        floor (a wrapping one: its longest word); else without the optional
        columns (None)."""
        out = self._widths(width, self.cols)
        if sum(out) + 2 * (len(out) - 1) <= width or not any(c.optional for c in self.cols):
            return out
        kept = [c for c in self.cols if not c.optional]
        it = iter(self._widths(width, kept))
        return [None if c.optional else next(it) for c in self.cols]

    def _widths(self, width: int, cols: list[Col]) -> list[int]:
        from rich.text import Text
        index = [self.cols.index(c) for c in cols]
        room = width - 2 * (len(cols) - 1)
        cells, full, words = [], [], []
        for i, c in zip(index, cols):
            texts = [Text.from_markup(r[i], emoji=False).plain for r in self.rows]
            n = max([0, *(Text(t).cell_len for t in texts)])
            if c.flex and c.cap:
                n = min(n, c.cap)
            cells.append(n)
            full.append(max(n, len(c.header)))
            words.append(max([n if not c.wrap else 0,
                              *(len(w) for t in texts for w in t.split()),
                              *(len(w) for w in c.header.split())]))
        if sum(full) <= room:
            return full
        out = [w if not c.flex else f for c, w, f in zip(cols, words, full)]
        if sum(out) <= room:
            # what is left goes back to the headers that wrapped
            spare = room - sum(out)
            for i in range(len(out)):
                give = min(spare, full[i] - out[i])
                out[i] += give
                spare -= give
            return out
        flex = [i for i, c in enumerate(cols) if c.flex]
        left = room - sum(out[i] for i, c in enumerate(cols) if not c.flex)
        floors = {i: min(full[i], words[i] if cols[i].wrap else
                         max(_FLOOR, len(cols[i].header.split()[0]))) for i in flex}
        spare = max(0, left - sum(floors.values()))
        extra = {i: full[i] - floors[i] for i in flex}
        total = sum(extra.values()) or 1
        for i in flex:
            out[i] = floors[i] + extra[i] * spare // total
        return out

    def __rich_console__(self, console, options):
        from rich.table import Table
        from rich.text import Text
        t = Table(box=None, header_style="bold", pad_edge=False)
        widths = self.widths(options.max_width)
        for c, w in zip(self.cols, widths):
            if w is not None:
                # a number's header wraps at its spaces; a name is cut with "…"
                t.add_column(c.header, justify=c.justify, width=w,
                             no_wrap=c.flex and not c.wrap, overflow="ellipsis")
        for r in self.rows:
            t.add_row(*(Text.from_markup(cell, emoji=False)
                        for cell, w in zip(r, widths) if w is not None))
        yield t
