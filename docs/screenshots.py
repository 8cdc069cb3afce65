"""The README's screenshots of the terminal UI, made from a real run.

    graphdbg run -o divergence.run samples/divergence_faulty.py --backend aot_eager
    python docs/screenshots.py divergence.run

Writes docs/img/tui-problems.svg (the problems view, the divergence selected
and its detail open) and docs/img/tui-diff.svg (eager against compiled per
node of the divergent graph) at 120x32.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent / "img"
SIZE = (120, 32)


async def shoot(run: str, keys: list[str], name: str) -> None:
    from graphdbg.tui.views.app import GraphdbgApp
    app = GraphdbgApp([run], cursor_blink=False)
    app.animation_level = "none"
    async with app.run_test(size=SIZE) as pilot:
        for key in ["", *keys]:
            if key:
                await pilot.press(key)
            for _ in range(3):
                await app.workers.wait_for_complete()
                await pilot.pause()
        OUT.mkdir(exist_ok=True)
        app.save_screenshot(str(OUT / name))
    print(OUT / name)


def main(run: str) -> None:
    asyncio.run(shoot(run, [], "tui-problems.svg"))
    asyncio.run(shoot(run, ["enter"], "tui-problem-detail.svg"))
    asyncio.run(shoot(run, ["2", "d"], "tui-diff.svg"))


if __name__ == "__main__":
    main(sys.argv[1])
