"""Textual's Pilot waits for the app to be done, not for the CPU to look idle.

Pilot (textual.pilot, textual.app._press_keys) waits after each key, pause and
animation wait with `textual._wait.wait_for_idle`: 20 ms sleeps until one
passes with under 1 ms of the process's CPU. On these two cores that is both
slow and unsafe: most of a wait is spent asleep (about 40 s of the suite's
idle core time went to it), and a process starved by the other xdist worker
looks idle while its work is still queued.

`install()` puts `settled` in its place in the two modules that call it. A
wait ends when the app's own state says everything that was asked of it is
done:
- no worker (thread or task) is pending or running;
- the app and every node of its current screen have handled each message
  posted to them (Pilot's own `_wait_for_screen`: a callback queued behind
  them) and nothing new is queued or being handled;
- the screen has no layout, repaint, recompose or after-refresh callback left
  (it is made to do them now, as `Pilot.pause` does at its end);
- no one-shot timer of the app's is due within a second (Textual handles a
  resize on one).

Two such checks in a row must pass. Without an active app (outside
`run_test`) Textual's own wait is used.
"""

from __future__ import annotations

import asyncio
import time

# a wait that never settles (an app that animates forever) ends here, as
# Textual's own ends at its max_sleep, and the test asserts what it sees
LIMIT_S = 10.0


def _pumps(app) -> list:
    screen = app.screen
    return [app, *app.screen_stack, *screen.walk_children(with_self=False)]


# a one-shot timer this soon is work already asked for (the app's resize is
# handled on one, 1/120 s after the event); interval timers (a cursor's
# blink, the screen's refresh) never end and are not waited for
SOON_S = 1.0


def _timers_due(app) -> list:
    return [t._task for p in _pumps(app) for t in list(p._timers)
            if t._repeat == 0 and t._interval <= SOON_S and t._task is not None
            and not t._task.done() and t._active.is_set()]


def _busy(app) -> bool:
    from textual.worker import WorkerState
    if any(w.state in (WorkerState.PENDING, WorkerState.RUNNING) for w in app.workers):
        return True
    # (a message being handled is waited for by _wait_for_screen before this)
    if any(p._message_queue.qsize() for p in _pumps(app)):
        return True
    screen = app.screen
    return bool(screen._layout_required or screen._scroll_required or screen._repaint_required
                or screen._dirty_widgets or screen._recompose_required or screen._callbacks)


async def _yield_loop(n: int = 4) -> None:
    # a key from the headless driver arrives through run_coroutine_threadsafe,
    # a thread worker's result through call_soon_threadsafe: a few turns of
    # the loop put them in their queues
    for _ in range(n):
        await asyncio.sleep(0)


async def settled(min_sleep: float = 0.0, max_sleep: float = 1.0) -> None:
    """A drop-in for `textual._wait.wait_for_idle` (its times are ignored)."""
    from textual._context import active_app
    from textual.pilot import Pilot

    app = active_app.get(None)
    if app is None:
        return await _textual_wait(min_sleep, max_sleep)
    pilot = Pilot(app)
    deadline = time.monotonic() + LIMIT_S
    quiet = 0
    while quiet < 2 and time.monotonic() < deadline:
        await _yield_loop()
        if app._closed or app._closing:
            return
        await app.workers.wait_for_complete()
        try:
            screen = app.screen
        except Exception:  # the app is between screens or shutting down
            return
        await pilot._wait_for_screen()
        if due := _timers_due(app):
            quiet = 0
            await asyncio.wait(due, timeout=SOON_S)
            continue
        if _busy(app):
            quiet = 0
            if screen.is_current and not app._batch_count:
                screen._on_timer_update()
            continue
        quiet += 1


_textual_wait = None


def install() -> None:
    """Replace Textual's CPU-clock wait in this process (the tests only)."""
    global _textual_wait
    import textual._wait
    import textual.app
    import textual.pilot
    if _textual_wait is None:
        _textual_wait = textual._wait.wait_for_idle
    textual.pilot.wait_for_idle = settled
    textual.app.wait_for_idle = settled
