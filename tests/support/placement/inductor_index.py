"""A runtime error raised inside inductor's generated module: a table lookup
compiled with inductor (C++ on CPU) and called with an index past the
table's end. The kernel's bounds check raises a RuntimeError from inductor's
output module in its cache folder (torchinductor_<user>/xx/<hash>.py), which
no user wrote: the finding sits at the compiled function, with the user's call
(tests/e2e/test_placement_generated.py, under `graphdbg run --no-compare`, so
that only the traceback places it)."""
import torch


def lookup(table, idx):                        # MARK lookup def
    return table[idx] * 2                      # MARK lookup body


fast_lookup = torch.compile(lookup, backend="inductor")
table = torch.randn(8, 4)
print(fast_lookup(table, torch.tensor([1, 2])).shape)
fast_lookup(table, torch.tensor([1, 9]))       # MARK bad call
