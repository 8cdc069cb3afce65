"""Workloads of `make bench` (benchmarks/bench.py).

In-process builders (each returns a zero-argument step function):
- `gpt2_forward()`: a GPT-2-like model's no-grad forward (eager_overhead.py's);
- `linear_stack()`: 64 x (Linear(32, 32), LayerNorm(32), GELU()) on a batch
  of 8, 192 tiny modules.

And ordinary scripts, run plain (`python benchmarks/workloads.py NAME ...`)
or under `graphdbg run`; each prints its own timings as JSON on its last
stdout line, so process start and compiles can be left out:

    compiled-mlp [--calls 2000] [--warmup 50]   inductor-compiled MLP, steady state
    train-gpt2 [--layers 6 --width 512 --batch 8 --seq 256 --steps 4] [--eager]
    train-llama [--steps 210 --warmup 10 --width 128 --batch 4 --seq 64]
                                                 transformers Llama (2 layers, 4 heads, vocab
                                                 1000), torch.compile (inductor), AdamW, grad
                                                 clipping: every step after --warmup timed
    gpt2-forward                                 eager and aot_eager forwards (run-file size)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

# Never touch the network: every model is built from a config with random weights.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from eager_overhead import gpt2_like  # noqa: E402


def gpt2_forward(batch: int = 4, seq: int = 128, n_layer: int = 4, n_embd: int = 256):
    return gpt2_like(batch=batch, seq=seq, n_layer=n_layer, n_embd=n_embd)


def linear_stack(blocks: int = 64, width: int = 32, batch: int = 8):
    layers = []
    for _ in range(blocks):
        layers += [torch.nn.Linear(width, width), torch.nn.LayerNorm(width), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers).eval()
    x = torch.randn(batch, width)

    def step():
        with torch.no_grad():
            return model(x)
    return step


def _emit(**figures) -> None:
    print(json.dumps(figures), flush=True)


def compiled_mlp(args) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 256)).eval()
    compiled = torch.compile(model, backend="inductor")
    x = torch.randn(64, 256)
    with torch.no_grad():
        for _ in range(args.warmup):  # compile, and graphdbg's checks of the first calls
            compiled(x)
        t0 = time.perf_counter()
        for _ in range(args.calls):
            compiled(x)
        loop = time.perf_counter() - t0
    _emit(loop_s=loop, per_call_us=loop / args.calls * 1e6, calls=args.calls)


def train_gpt2(args) -> None:
    import torch.nn.functional as F
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(n_layer=args.layers, n_embd=args.width, n_head=8, vocab_size=1000,
                     n_positions=args.seq, bos_token_id=999, eos_token_id=999,
                     attn_implementation="eager",
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(cfg).train()
    step_model = model if args.eager else torch.compile(model, backend="aot_eager")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, cfg.vocab_size, (args.batch, args.seq))
    targets = torch.roll(ids, -1, dims=1)
    steps = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        logits = step_model(ids).logits
        loss = F.cross_entropy(logits.reshape(-1, cfg.vocab_size), targets.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        steps.append(time.perf_counter() - t0)
    _emit(steps_s=steps, loss=loss.item())


def train_llama(args) -> None:
    """A real training loop: a tiny transformers Llama under torch.compile with
    inductor, AdamW, clip_grad_norm_. The first --warmup steps (compiles, and
    graphdbg's checks of the first calls) are not timed; every later step is,
    and the mean is the figure (graphdbg records eager ops on sampled steps
    only: a median would hide them, a mean amortises them)."""
    from transformers import LlamaConfig, LlamaForCausalLM
    if args.steps <= args.warmup:
        raise SystemExit("--steps must be larger than --warmup")
    cfg = LlamaConfig(num_hidden_layers=args.layers, hidden_size=args.width,
                      num_attention_heads=4, num_key_value_heads=4,
                      intermediate_size=2 * args.width, vocab_size=1000,
                      max_position_embeddings=max(128, args.seq),
                      bos_token_id=1, eos_token_id=2, pad_token_id=0)
    model = LlamaForCausalLM(cfg).train()
    compiled = torch.compile(model)  # the default backend: inductor
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, cfg.vocab_size, (args.batch, args.seq))
    step_s = []
    for i in range(args.steps):
        t0 = time.perf_counter()
        loss = compiled(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if i >= args.warmup:
            step_s.append(time.perf_counter() - t0)
    ms = [s * 1e3 for s in step_s]
    _emit(steps=len(ms), warmup=args.warmup, mean_step_ms=statistics.mean(ms),
          median_step_ms=statistics.median(ms), min_step_ms=min(ms), max_step_ms=max(ms),
          step_ms=[round(m, 3) for m in ms], loss=loss.item())


def gpt2_fwd_script(args) -> None:
    eager = gpt2_forward()  # the model of section 1's GPT-2-like forward, batch 4 x 128
    model, ids = eager.model, eager.ids
    compiled = torch.compile(model, backend="aot_eager")
    t0 = time.perf_counter()
    with torch.no_grad():
        model(ids)
        compiled(ids)
    _emit(seconds=time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    sub = ap.add_subparsers(dest="name", required=True)
    p = sub.add_parser("compiled-mlp")
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--warmup", type=int, default=50)
    p.set_defaults(run=compiled_mlp)
    p = sub.add_parser("train-gpt2")
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--eager", action="store_true", help="no torch.compile: the eager reference")
    p.set_defaults(run=train_gpt2)
    p = sub.add_parser("train-llama")
    p.add_argument("--steps", type=int, default=210, help="all steps, warm-up included")
    p.add_argument("--warmup", type=int, default=10,
                   help="first steps not timed: compiles, graphdbg's checks (default 10)")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=64)
    p.set_defaults(run=train_llama)
    p = sub.add_parser("gpt2-forward")
    p.set_defaults(run=gpt2_fwd_script)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    args.run(args)


if __name__ == "__main__":
    main()
