"""The suite's frozen heap (tests/support/heap.py): frozen at test
boundaries, and a test's own garbage is still freed."""

from __future__ import annotations

import gc
import weakref

import heap
import pytest


class Node:
    def __init__(self) -> None:
        self.me = self   # a cycle: only the collector frees it


def test_the_workers_heap_is_frozen_and_a_tests_own_cycles_are_still_freed():
    if not heap.freezer.on:
        pytest.skip("GRAPHDBG_TEST_GC_FREEZE=0")
    assert gc.get_freeze_count() > 10_000   # the modules and the collected tests
    node = Node()
    ref = weakref.ref(node)
    del node
    gc.collect()
    assert ref() is None


def collected(obj) -> bool:
    """Whether a collection would visit ``obj`` (frozen objects are in no
    generation that gc.get_objects lists)."""
    return any(o is obj for o in gc.get_objects())


def test_it_freezes_again_once_python_has_made_its_own_full_collections(monkeypatch):
    monkeypatch.setenv("GRAPHDBG_TEST_GC_FREEZE", "1")
    freezer = heap.Freezer()
    freezer.freeze()
    kept = Node()                                  # what a cache would keep
    freezer.after_test()                           # no full collection since: nothing to do
    assert collected(kept)
    for _ in range(heap.REFREEZE_AFTER):
        gc.collect()
    freezer.after_test()
    assert not collected(kept)
    monkeypatch.setenv("GRAPHDBG_TEST_GC_FREEZE", "0")
    more = Node()
    heap.Freezer().freeze()                        # turned off: freezes nothing
    assert collected(more)
