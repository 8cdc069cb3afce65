"""The user's own decorators (functools.wraps) around compiled code, in two
shapes: a module whose forward is decorated, compiled whole (Dynamo compiles
the decorator's wrapper as the frame), and a decorator applied over a
compiled function (its wrapper runs between each call and the compiled code).
A wrapper that only passes the call on is never the user's line: the graph
is named after the module, its input sits at the forward's ``def``, and a
recompile sits at the user's call, not at ``return fn(*args, **kwargs)``
(tests/e2e/test_placement_wrappers.py)."""
import functools

import torch


def logged(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)                 # MARK logged forwards
    return wrapper


def checked(fn):
    @functools.wraps(fn)
    def wrapper(self, ids):
        assert ids.dim() == 2                      # MARK checked work
        return fn(self, ids)
    return wrapper


class Tagger(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(16, 8)
        self.out = torch.nn.Linear(8, 4)

    @checked
    def forward(self, ids):                        # MARK tagger def
        return self.out(self.emb(ids)).relu()      # MARK tagger body


@logged
@torch.compile(backend="aot_eager", dynamic=False)
def step(x, n):
    return (x * n).sum()                           # MARK step body


tagger = torch.compile(Tagger(), backend="aot_eager")   # MARK compile tagger
tagger(torch.randint(0, 16, (2, 3)))                # MARK call tagger
step(torch.ones(3), 2)
step(torch.ones(4), 2)                             # MARK step recompile
print("done")
