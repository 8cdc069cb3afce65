"""Value statistics in batches, where the tensors live, read back without waiting.

The eager recorder runs once per op; reducing each output on its own costs a
dozen array calls per op, and on a GPU reading the result back is a device
synchronisation per op. Instead, per op the recorder hands its outputs to
`StatsQueue.add` and gets slots; the statistics arrive later, for many tensors
at once, and `defer` holds the op's row until they have.

- **Small tensors** (up to `SMALL_MAX` values) are copied, widened to float64
  (the copy is a snapshot: later in-place writes must not change what was
  recorded, and the program's tensor is not kept alive), and reduced together:
  min, max, sum and the corrected two-pass by segment, a few array calls for
  the whole batch. On CPU with numpy (``reduceat``), elsewhere with torch on
  the tensors' device (``segment_reduce``).
- **Large tensors**: on CPU, the exact one-at-a-time path (`tensorstats.summarize`;
  the host reads CPU memory, nothing waits). On a device, six reductions into a
  vector that stays on the device (min, max, float64 sum and sum of squares,
  the NaN and finite counts); a tensor with NaN/Inf gets its counts only.
- **Reading back**: a device batch's results are copied to pinned host memory
  with ``non_blocking`` and an event is recorded; the waiting rows are written
  once the event has completed, which is polled, never waited for, except when
  the run ends (`drain(wait=True)`). Nothing on the per-op path reads a device
  value: no synchronisation per op.
- A segment whose fast result cannot be trusted (NaN or Inf among its values,
  magnitudes whose float64 squares over- or underflow) is redone exactly from
  its snapshot when the batch is read; on a device that reads the snapshot
  back, which happens only for such tensors and only at a batch boundary.

Results agree with `tensorstats.summarize` to about 1e-12 relative (both work
in float64 for these sizes); tests check both paths against it, the device
path on CPU tensors (``device_path=True``).
"""

from __future__ import annotations

import collections
import math
from typing import Any, Callable

import numpy as np
import torch

from . import tensorstats

SMALL_MAX = 1 << 13          # values per tensor reduced in a batch (larger: one at a time)
BATCH_VALUES = 1 << 17       # a batch is reduced when it holds this many values...
BATCH_TENSORS = 1024         # ...or this many tensors

_readable_values = tensorstats.readable_values
_F64 = np.float64
_float64 = torch.float64
_isfinite = math.isfinite
_NO_VALUES = {"nan": 0, "inf": 0}
_F64_SAFE = tensorstats._F64_SAFE
_moments = tensorstats._moments
_summarize_numpy = tensorstats._summarize_numpy


def _finish(n: int, mn: float, mx: float, m1: float, sum_d: float, ss_d: float) -> dict | None:
    """A segment's statistics from its fast reductions, or None when they
    cannot be trusted (NaN/Inf among the values, squares out of range)."""
    if not (_isfinite(mn) and _isfinite(mx)):
        return None
    amax = max(-mn, mx)
    if amax != 0.0 and not _F64_SAFE[0] <= amax <= _F64_SAFE[1]:
        return None
    mean, std, norm = _moments(sum_d, ss_d, m1, n)
    return {"min": mn, "max": mx, "mean": mean, "std": std, "norm": norm, "nan": 0, "inf": 0}


class _HostBatch:
    """Small CPU tensors, as float64 numpy copies."""

    __slots__ = ("tier", "arrays", "slots", "values")

    def __init__(self, tier: str) -> None:
        self.tier = tier
        self.arrays: list[np.ndarray] = []
        self.slots: list[int] = []
        self.values = 0

    def add(self, t: torch.Tensor, n: int, slot: int) -> None:
        # a float64 copy (the snapshot), made by torch: numpy() on the program's
        # own tensor would make its storage non-resizable for good (FSDP2
        # resizes its parameters' storage between all-gathers)
        try:
            a = t.to(_float64, copy=True).numpy()
        except (RuntimeError, TypeError):  # conj/neg views and the like
            a = t.resolve_conj().resolve_neg().to(_float64, copy=True).numpy()
        self.arrays.append(a.reshape(-1))
        self.slots.append(slot)
        self.values += n

    def reduce(self) -> list[tuple[int, dict | None]]:
        arrays, slots = self.arrays, self.slots
        self.arrays, self.slots, self.values = [], [], 0
        with np.errstate(all="ignore"):
            v = np.concatenate(arrays) if len(arrays) > 1 else arrays[0]
            sizes = np.fromiter((a.size for a in arrays), dtype=np.int64, count=len(arrays))
            starts = np.zeros(len(arrays), dtype=np.int64)
            np.cumsum(sizes[:-1], out=starts[1:])
            if self.tier == "health":
                sums = np.add.reduceat(v, starts).tolist()
                return [(s, _NO_VALUES.copy() if _isfinite(total) else
                         _summarize_numpy(a, "health"))
                        for s, total, a in zip(slots, sums, arrays)]
            mn = np.minimum.reduceat(v, starts)
            mx = np.maximum.reduceat(v, starts)
            m1 = np.add.reduceat(v, starts) / sizes
            d = v - np.repeat(m1, sizes)
            sum_d = np.add.reduceat(d, starts)
            np.multiply(d, d, out=d)
            ss_d = np.add.reduceat(d, starts)
        out = []
        for s, a, n, lo, hi, mean1, sd, ssd in zip(
                slots, arrays, sizes.tolist(), mn.tolist(), mx.tolist(), m1.tolist(),
                sum_d.tolist(), ss_d.tolist()):
            stats = _finish(n, lo, hi, mean1, sd, ssd)
            out.append((s, stats if stats is not None else _summarize_numpy(a, "stats")))
        return out


class _DeviceBatch:
    """Tensors on one device: small ones as float64 copies reduced by segment,
    large ones as six device scalars each; read back asynchronously."""

    __slots__ = ("tier", "device", "small", "small_slots", "large", "large_slots",
                 "large_sizes", "values")

    def __init__(self, tier: str, device: torch.device) -> None:
        self.tier = tier
        self.device = device
        self.small: list[torch.Tensor] = []
        self.small_slots: list[int] = []
        self.large: list[torch.Tensor] = []
        self.large_slots: list[int] = []
        self.large_sizes: list[int] = []
        self.values = 0

    def add(self, t: torch.Tensor, n: int, slot: int) -> None:
        if n <= SMALL_MAX:
            self.small.append(t.to(_float64, copy=True).reshape(-1))
            self.small_slots.append(slot)
            self.values += n
        else:
            self.large.append(_large_vector(t))
            self.large_slots.append(slot)
            self.large_sizes.append(n)

    def reduce(self) -> "_InFlight":
        """Start the reductions and the copy to the host; nothing waits."""
        small, large = self.small, self.large
        parts = []
        sizes: list[int] = []
        if small:
            sizes = [t.numel() for t in small]
            parts.append(_segment_stats(small, sizes, self.tier).reshape(-1))
        if large:
            parts.append(torch.stack(large).reshape(-1))
        result = torch.cat(parts) if len(parts) > 1 else parts[0]
        flight = _InFlight(self.tier, result, small, self.small_slots, sizes,
                           self.large_slots, self.large_sizes)
        self.small, self.small_slots, self.large, self.large_slots = [], [], [], []
        self.large_sizes, self.values = [], 0
        return flight


def _segment_stats(small: list[torch.Tensor], sizes: list[int], tier: str) -> torch.Tensor:
    """(k, 5) float64 on the device: min, max, first mean, sum and sum of
    squares of the deviations, per tensor (NaN/Inf propagate into min/max)."""
    v = torch.cat(small) if len(small) > 1 else small[0]
    device = v.device
    lengths = torch.tensor(sizes, dtype=torch.int64)
    if device.type == "cuda":
        # a copy from pageable memory waits for the stream: from pinned memory it does not
        lengths = lengths.pin_memory()
    lengths = lengths.to(device, non_blocking=True)
    # unsafe: no check that the lengths add up, which reads them back (a sync)
    seg = torch.segment_reduce
    total = seg(v, "sum", lengths=lengths, unsafe=True)
    if tier == "health":
        return total.reshape(-1, 1)
    mn = seg(v, "min", lengths=lengths, unsafe=True)
    mx = seg(v, "max", lengths=lengths, unsafe=True)
    m1 = total / lengths
    d = v - torch.repeat_interleave(m1, lengths, output_size=v.numel())
    sum_d = seg(d, "sum", lengths=lengths, unsafe=True)
    ss_d = seg(d.square_(), "sum", lengths=lengths, unsafe=True)
    return torch.stack([mn, mx, m1, sum_d, ss_d], dim=1)


def _large_vector(t: torch.Tensor) -> torch.Tensor:
    """Six float64 device scalars of a large tensor: NaN count, finite count,
    min, max, sum, sum of squares (float64 accumulation, no host read)."""
    y = t if t.dtype.is_floating_point else t.to(_float64)
    mn, mx = torch.aminmax(y)
    total = y.sum(dtype=_float64)
    norm = torch.linalg.vector_norm(y, dtype=_float64)
    n_nan = torch.isnan(y).sum()
    n_fin = torch.isfinite(y).sum()
    return torch.stack([n_nan.to(_float64), n_fin.to(_float64), mn.to(_float64),
                        mx.to(_float64), total, norm * norm])


class _InFlight:
    """A device batch's results on their way to the host."""

    __slots__ = ("tier", "host", "event", "small", "small_slots", "sizes", "large_slots",
                 "large_sizes")

    def __init__(self, tier, result, small, small_slots, sizes, large_slots, large_sizes) -> None:
        self.tier = tier
        self.small = small            # the snapshots: for segments redone exactly
        self.small_slots = small_slots
        self.sizes = sizes
        self.large_slots = large_slots
        self.large_sizes = large_sizes
        self.event = None
        if result.device.type == "cpu":
            self.host = result
        elif result.device.type == "cuda":
            self.host = torch.empty(result.shape, dtype=result.dtype, pin_memory=True)
            self.host.copy_(result, non_blocking=True)
            self.event = torch.cuda.Event()
            self.event.record()
        else:  # another accelerator: read when drained (a batch boundary, not an op)
            self.host = result

    def ready(self) -> bool:
        return self.event is None or self.event.query()

    def results(self) -> list[tuple[int, dict | None]]:
        if self.event is not None:
            self.event.synchronize()  # done already when ready(); at the run's end, waits
        flat = self.host.cpu().tolist()
        out = []
        width = 1 if self.tier == "health" else 5
        k = len(self.small_slots)
        for i, (slot, n) in enumerate(zip(self.small_slots, self.sizes)):
            row = flat[i * width:(i + 1) * width]
            if self.tier == "health":
                stats = _NO_VALUES.copy() if _isfinite(row[0]) else None
            else:
                stats = _finish(n, *row)
            if stats is None:  # redone exactly from the snapshot
                stats = _summarize_numpy(self.small[i].cpu().numpy(), self.tier)
            out.append((slot, stats))
        base = k * width
        for j, (slot, n) in enumerate(zip(self.large_slots, self.large_sizes)):
            n_nan, n_fin, mn, mx, total, ss = flat[base + 6 * j: base + 6 * (j + 1)]
            out.append((slot, _large_stats(self.tier, n, int(n_nan), int(n_fin), mn, mx,
                                           total, ss)))
        self.small = []
        return out


def _large_stats(tier: str, n: int, n_nan: int, n_fin: int, mn: float, mx: float,
                 total: float, ss: float) -> dict:
    if n_fin < n or tier == "health":
        return {"nan": n_nan, "inf": n - n_fin - n_nan}
    mean = total / n
    var = max(ss - total * mean, 0.0) / (n - 1) if n > 1 else 0.0
    return {"min": mn, "max": mx, "mean": mean, "std": math.sqrt(var), "norm": math.sqrt(ss),
            "nan": 0, "inf": 0}


class StatsQueue:
    """Statistics of tensors, in batches; rows that wait for them, in order.

    ``add(t)`` returns a slot (an int) or None when there is nothing to read
    (no values, not a plain dense tensor); ``defer(slots, emit, payload)``
    calls ``emit(payload, stats)`` once every slot has its statistics, in the
    order of the calls. ``poll()`` writes what has arrived; ``drain(wait)``
    reduces what is queued and, with ``wait``, waits for it (the run's end).
    Callers run with graphdbg's eager recorder off (the reductions are not
    the program's ops). ``device_path``: CPU tensors take the device path too
    (tests: the path a GPU run takes, on these CPU-only machines)."""

    def __init__(self, tier: str, device_path: bool = False) -> None:
        self.tier = tier
        self.device_path = device_path
        self._next = 0
        self._host = _HostBatch(tier)
        self._devices: dict[torch.device, _DeviceBatch] = {}
        self._flights: collections.deque[_InFlight] = collections.deque()
        self._done: dict[int, dict | None] = {}
        self._waiting: collections.deque[tuple] = collections.deque()

    # -- the per-op side ------------------------------------------------------
    def add(self, t: Any) -> int | None:
        n = _readable_values(t)
        if n == 0:
            return None
        if t.requires_grad:
            t = t.detach()
        if t.is_complex():
            t = t.abs()
        slot = self._next
        self._next = slot + 1
        if self.tier == "health" and not t.dtype.is_floating_point:
            self._done[slot] = _NO_VALUES.copy()
            return slot
        try:
            self._add(t, n, slot)
        except Exception:  # noqa: BLE001 - a dtype with no values to read (quantized, ...)
            self._done[slot] = None
        return slot

    def _add(self, t: torch.Tensor, n: int, slot: int) -> None:
        if t.is_cpu and not self.device_path:
            if n <= SMALL_MAX:
                self._host.add(t, n, slot)
                if self._host.values >= BATCH_VALUES or len(self._host.slots) >= BATCH_TENSORS:
                    self._done.update(self._host.reduce())
            else:  # the host reads CPU memory at once: nothing waits
                self._done[slot] = tensorstats.summarize(t, self.tier)
            return
        batch = self._devices.get(t.device)
        if batch is None:
            batch = self._devices[t.device] = _DeviceBatch(self.tier, t.device)
        batch.add(t, n, slot)
        if batch.values >= BATCH_VALUES or len(batch.small_slots) + len(batch.large_slots) >= BATCH_TENSORS:
            self._flights.append(batch.reduce())

    def defer(self, slots: list, emit: Callable[[Any, list], None], payload: Any) -> None:
        """``emit(payload, [stats per slot])`` when they are known (None for a
        None slot). In order: it waits for the rows deferred before it."""
        self._waiting.append((slots, emit, payload))
        if len(self._waiting) >= BATCH_TENSORS:
            self.poll()

    # -- reading back -----------------------------------------------------------
    def poll(self) -> None:
        """Write the rows whose statistics have arrived (never waits)."""
        flights = self._flights
        while flights and flights[0].ready():
            self._done.update(flights.popleft().results())
        self._emit()

    @property
    def device_work(self) -> bool:
        """Whether tensors on a device wait to be reduced."""
        return any(b.small_slots or b.large_slots for b in self._devices.values())

    def start_device_batches(self) -> None:
        """Start reducing what is queued on devices (a step's end: the copies
        then overlap the next step), and write what has arrived. The host's
        batch keeps filling: reducing it every step would cost more than it
        saves; its rows join the next commit."""
        for batch in self._devices.values():
            if batch.small_slots or batch.large_slots:
                self._flights.append(batch.reduce())
        self.poll()

    def drain(self, wait: bool = False) -> None:
        """Reduce what is queued; with ``wait``, wait for every result and write
        every row (the run's end, a flush the reader must see)."""
        if self._host.slots:
            self._done.update(self._host.reduce())
        for batch in self._devices.values():
            if batch.small_slots or batch.large_slots:
                self._flights.append(batch.reduce())
        if wait:
            while self._flights:
                self._done.update(self._flights.popleft().results())
        self.poll()

    def _emit(self) -> None:
        done, waiting = self._done, self._waiting
        while waiting:
            slots, emit, payload = waiting[0]
            if any(s is not None and s not in done for s in slots):
                return
            waiting.popleft()
            emit(payload, [None if s is None else done.pop(s) for s in slots])

    @property
    def pending(self) -> int:
        """Rows still waiting for their statistics."""
        return len(self._waiting)
