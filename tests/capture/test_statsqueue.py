"""Value statistics in batches (hooks/record/statsqueue.py): the same numbers
as the one-at-a-time reference (`tensorstats.summarize`), on the host path
and on the device path (the path a GPU run takes, run here on CPU tensors),
snapshots taken when the op ran, rows written in order, and, where CUDA is
present, no device synchronisation on the per-op path."""

from __future__ import annotations

import math

import pytest
import torch

from graphdbg.hooks.record import statsqueue, tensorstats
from graphdbg.hooks.record.statsqueue import SMALL_MAX, StatsQueue


def _tensors() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    r = lambda *s, dt=torch.float32: torch.randn(*s, generator=g).to(dt)  # noqa: E731
    with_nan = r(50)
    with_nan[3] = float("nan")
    with_nan[7] = float("inf")
    all_nan = torch.full((6,), float("nan"))
    return [
        r(1), r(7), r(8, 32), r(300, dt=torch.float64), r(40, dt=torch.float16),
        r(40, dt=torch.bfloat16), torch.arange(20), torch.tensor([True, False, True]),
        torch.full((9,), 3.25), r(64) + 1e4, with_nan, all_nan,
        r(30, dt=torch.float64) * 1e200, r(30, dt=torch.float64) * 1e-200,
        r(2, 3, 4).transpose(0, 2), r(SMALL_MAX + 5), (r(SMALL_MAX * 3) * 10 + 2),
    ]


def _close(got: dict | None, want: dict | None, values: torch.Tensor, rel: float) -> None:
    assert (got is None) == (want is None)
    if want is None:
        return
    assert got.keys() == want.keys(), (got, want)
    scale = values.double().abs()
    scale = scale[torch.isfinite(scale)]
    scale = float(scale.mean()) if scale.numel() else 1.0
    for k, w in want.items():
        g = got[k]
        if k in ("nan", "inf"):
            assert g == w
        else:
            assert math.isclose(g, w, rel_tol=rel, abs_tol=rel * scale), (k, g, w)


def _run(queue: StatsQueue, tensors: list) -> list:
    out: list = []
    slots = [queue.add(t) for t in tensors]
    queue.defer(slots, lambda payload, stats: out.append((payload, stats)), "row")
    queue.drain(wait=True)
    ((payload, stats),) = out
    assert payload == "row"
    return stats


@pytest.mark.parametrize("tier", ["stats", "health"])
def test_host_batches_agree_with_the_one_at_a_time_reference(tier):
    tensors = _tensors()
    stats = _run(StatsQueue(tier), tensors)
    for t, got in zip(tensors, stats):
        _close(got, tensorstats.summarize(t, tier), t, 1e-9)


@pytest.mark.parametrize("tier", ["stats", "health"])
def test_the_device_path_agrees_too(tier):
    """What a GPU run computes (segment reductions on the device, large tensors
    as six device scalars), on CPU tensors. A large tensor with NaN/Inf gets its
    counts only there; none of these has one."""
    tensors = [t for t in _tensors() if t.numel() <= SMALL_MAX or torch.isfinite(t).all()]
    stats = _run(StatsQueue(tier, device_path=True), tensors)
    for t, got in zip(tensors, stats):
        # float32 large tensors: float64 sums of float32 values
        _close(got, tensorstats.summarize(t, tier), t, 1e-9 if t.numel() <= SMALL_MAX else 1e-6)


def test_the_device_path_counts_nan_and_inf_in_large_tensors():
    t = torch.randn(SMALL_MAX * 2)
    t[5], t[6], t[100] = float("nan"), float("inf"), float("-inf")
    (got,) = _run(StatsQueue("stats", device_path=True), [t])
    assert got == {"nan": 1, "inf": 2}


@pytest.mark.parametrize("device_path", [False, True])
def test_statistics_are_of_the_values_when_the_op_ran(device_path):
    queue = StatsQueue("stats", device_path=device_path)
    t = torch.ones(16)
    out: list = []
    queue.defer([queue.add(t)], lambda p, s: out.append(s[0]), None)
    t.mul_(5)  # a later in-place write: not what the op produced
    queue.drain(wait=True)
    assert out[0]["max"] == 1.0 and out[0]["mean"] == 1.0


def test_rows_are_written_in_order_and_polling_never_waits():
    queue = StatsQueue("stats")
    got: list = []
    emit = lambda p, s: got.append((p, s))  # noqa: E731
    queue.defer([queue.add(torch.ones(3))], emit, 1)
    queue.defer([None], emit, 2)                      # nothing to read: waits for row 1 still
    queue.defer([queue.add(torch.zeros(2)), queue.add(torch.empty(0))], emit, 3)
    queue.poll()
    assert got == [] and queue.pending == 3            # the batch is not full: nothing reduced
    queue.drain()
    assert [p for p, _ in got] == [1, 2, 3] and queue.pending == 0
    assert got[1][1] == [None] and got[2][1][1] is None  # an empty tensor has no statistics
    assert got[2][1][0]["max"] == 0.0


def test_a_full_batch_is_reduced_without_being_asked():
    queue = StatsQueue("stats")
    got: list = []
    for i in range(statsqueue.BATCH_TENSORS + 1):
        queue.defer([queue.add(torch.full((4,), float(i)))], lambda p, s: got.append(s), i)
    assert len(got) >= statsqueue.BATCH_TENSORS - 1  # written with no drain
    assert got[10][0]["mean"] == 10.0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (CI has none)")
def test_no_device_synchronisation_per_op_on_cuda():
    """The rule this module exists for: adding tensors, deferring rows and
    polling never make the host wait for the GPU."""
    queue = StatsQueue("stats")
    got: list = []
    xs = [torch.randn(n, device="cuda") for n in (5, 300, SMALL_MAX * 4)]
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            for x in xs:
                y = x * 2  # an op, as the recorder sees one
                queue.defer([queue.add(y)], lambda p, s: got.append(s[0]), None)
            queue.drain()        # reduces and starts the copies: no wait
            queue.poll()
    finally:
        torch.cuda.set_sync_debug_mode(0)
    queue.drain(wait=True)
    assert len(got) == 9
    for x, s in zip(xs * 3, got):
        _close(s, tensorstats.summarize((x * 2).cpu(), "stats"), x, 1e-6)


def test_a_tensor_without_readable_values_gets_none_and_the_row_is_still_written():
    q = torch.quantize_per_tensor(torch.randn(6), 0.1, 0, torch.qint8)
    stats = _run(StatsQueue("stats"), [q, torch.ones(2)])
    assert stats[0] is None and stats[1]["mean"] == 1.0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (CI has none)")
def test_a_captured_cuda_program_runs_without_a_sync_per_op(tmp_path):
    """The same rule through the whole recorder: eager ops and compiled calls
    on CUDA under a capture (after its first compile and checks)."""
    import graphdbg
    f = torch.compile(lambda t: (t.sin() * 2).sum(0), backend="aot_eager")
    x = torch.randn(64, 300, device="cuda")
    with graphdbg.capture(str(tmp_path / "cuda.run"), compare_first=1):
        f(x)
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            for _ in range(5):
                y = f(x.relu() + 1)
                x = x * 0.5 + y.mean()
        finally:
            torch.cuda.set_sync_debug_mode(0)
    from conftest import query
    rows = query(tmp_path / "cuda.run", "SELECT stats FROM ops WHERE op = 'aten.relu.default'")
    assert len(rows) == 5 and all(r["stats"] and '"max"' in r["stats"] for r in rows)


def test_a_step_end_starts_device_batches_and_leaves_the_host_batch_filling():
    host, device = StatsQueue("stats"), StatsQueue("stats", device_path=True)
    got: list = []
    for q in (host, device):
        q.defer([q.add(torch.ones(4))], lambda p, s: got.append(p), q)
        q.start_device_batches()
    assert got == [device]  # the CPU "device" batch is read at once; the host's waits
    host.drain()
    assert got == [device, host]


def test_the_programs_storage_stays_resizable():
    # numpy() on the program's own tensor marks its storage non-resizable for
    # good; FSDP2 resizes its parameters' storage between all-gathers, and
    # failed with "Trying to resize storage that is not resizable"
    small, large, ints = torch.randn(64), torch.randn(3 * SMALL_MAX), torch.arange(100)
    q = StatsQueue("stats")
    out = []
    for t in (small, large, ints):
        q.defer([q.add(t)], lambda p, stats: out.append(stats), None)
    q.drain(wait=True)
    assert len(out) == 3 and all(s[0] is not None for s in out)
    for t in (small, large, ints):
        assert tensorstats.summarize(t, "stats") is not None
        t.untyped_storage().resize_(0)   # raises when graphdbg made it non-resizable
