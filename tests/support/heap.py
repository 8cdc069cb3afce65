"""The test process's long-lived heap is frozen, so that Python's full
collections stop walking it over and over.

An xdist worker holds about 400k objects once it has collected the tests
(torch, transformers, Textual, graphdbg) and up to 1.3M later (inductor,
torch.distributed and ONNX imported by some test, Dynamo's caches). A full
collection walks all of them: 0.2-0.5 s each, and Python runs one each time
the heap has grown by a quarter. Over the suite that was 28-31 s of CPU in
the two workers, about 15 s of `make test`'s wall time, and 3-7 s more at
the end (pytest collects 5 times before it exits).

`gc.freeze()` moves every object the collector tracks to a permanent
generation that no later collection visits (the reason it exists). It is
done right after a full collection, at a test boundary (no test's objects
are alive, only what the process keeps: modules, caches, module- and
session-scoped fixtures), so nothing is frozen as garbage:
- once the tests are collected;
- after a test, once Python has made REFREEZE_AFTER full collections of its
  own since the last freeze (the heap grew again: an import, a cache).
A kept object frozen this way is never collected, even once dropped in a
cycle; the worker's peak memory stayed the same (770-790 MB). A test's own
objects are made after the last freeze, so a test that checks what is freed
(`gc.collect()`, weak references) sees what it would without this.

GRAPHDBG_TEST_GC_FREEZE=0 turns it off (to rule it out when a test about
lifetimes fails).
"""

from __future__ import annotations

import gc
import os

REFREEZE_AFTER = 3


class Freezer:
    def __init__(self) -> None:
        self.on = os.environ.get("GRAPHDBG_TEST_GC_FREEZE", "1") != "0"
        self.full_at_freeze = 0

    @staticmethod
    def _full_collections() -> int:
        return gc.get_stats()[2]["collections"]

    def freeze(self) -> None:
        if not self.on:
            return
        gc.collect()
        gc.freeze()
        self.full_at_freeze = self._full_collections()

    def after_test(self) -> None:
        if self.on and self._full_collections() - self.full_at_freeze >= REFREEZE_AFTER:
            self.freeze()


freezer = Freezer()
