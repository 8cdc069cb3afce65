"""The fault-injecting backends the localisation tests rely on do what they
say: each mutation changes exactly the selected node (and a prefix or a single
sub-graph holding it, as bisection sees it), forward or backward, and an absent
node leaves the graph bitwise alone. On aot_eager (inductor: the same
`self_test(["inductor"])`, a minute more)."""

from __future__ import annotations

from faulty_backends import self_test


def test_each_fault_changes_exactly_its_node():
    assert self_test(["aot_eager"]) == []
