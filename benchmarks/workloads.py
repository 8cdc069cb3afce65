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
    onnx-export [--model gpt2|mlp --layers 4 --width 128 --batch 2 --seq 64]
                                                 one torch.onnx.export(dynamo=True) of a tiny
                                                 transformers GPT-2 (use_cache=False, eval) or a
                                                 wide MLP: the export call's time and the peak
                                                 RSS it adds, the process's first export
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


def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _reset_peak_rss() -> bool:
    """Reset the kernel's RSS high-water mark (VmHWM) to the current RSS
    (Linux >= 4.0: ``5`` to /proc/self/clear_refs)."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


# What the first torch.onnx.export of a process imports (most of it: about 1 s
# here), and what a graphdbg session imports when it starts (torch._dynamo, ...):
# imported before the timed call in every variant, so that neither side's
# imports land in the other's figure.
_EXPORTER_MODULES = (
    "onnx", "onnxscript", "networkx", "torch._dynamo", "torch.distributed", "torch.export",
    "torch.export._trace", "torch.export.pt2_archive", "torch._export", "torch._export.passes",
    "torch._functorch.aot_autograd", "torch._functorch.partitioners",
    "torch._inductor.decomposition", "torch.onnx._internal.exporter._core",
    "torch.onnx._internal.exporter._registration", "onnxscript.function_libs.torch_lib.ops",
    "onnxscript.rewriter", "onnxscript.optimizer")


def onnx_export(args) -> None:
    """One `torch.onnx.export(..., dynamo=True)`, the process's first: its
    wall time (and CPU time, all threads), and the peak RSS it adds over the RSS just before it (the
    kernel's high-water mark, reset before the call, so ONNX Runtime's and
    torch's native allocations count as much as Python's; where it cannot be
    reset, the growth of the process's peak). The modules the exporter
    imports on its first call are imported first, in every variant
    (_EXPORTER_MODULES): the figure is the export and its first-call caches
    (the op registry), not imports. Under `graphdbg run` the call includes
    what graphdbg adds to it: the record and, unless --no-compare, the check
    against eager."""
    import gc
    import importlib
    import resource

    import torch.onnx
    for name in _EXPORTER_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    if args.model == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel
        cfg = GPT2Config(n_layer=args.layers, n_embd=args.width, n_head=4, vocab_size=1000,
                         n_positions=max(128, args.seq), bos_token_id=999, eos_token_id=999,
                         use_cache=False)
        model = GPT2LMHeadModel(cfg).eval()
        inputs = (torch.randint(0, cfg.vocab_size, (args.batch, args.seq)),)
        kwargs = {"use_cache": False}
    else:
        layers = []
        for _ in range(args.layers):
            layers += [torch.nn.Linear(args.width, 4 * args.width), torch.nn.GELU(),
                       torch.nn.Linear(4 * args.width, args.width), torch.nn.LayerNorm(args.width)]
        model = torch.nn.Sequential(*layers).eval()
        inputs = (torch.randn(args.batch, args.width),)
        kwargs = {}
    params = sum(p.numel() for p in model.parameters())
    gc.collect()
    earlier = _status_kib("VmHWM") or 0   # imports, the model: the process's peak so far
    hwm = _reset_peak_rss()
    before = _status_kib("VmRSS") if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0, c0 = time.perf_counter(), time.process_time()
    program = torch.onnx.export(model, inputs, kwargs=kwargs, dynamo=True, verbose=False)
    export_s, cpu_s = time.perf_counter() - t0, time.process_time() - c0
    peak = _status_kib("VmHWM") if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    _emit(export_s=export_s, cpu_s=cpu_s, rss_before_kib=before, peak_kib=peak,
          added_kib=peak - before, process_peak_kib=max(earlier, peak),
          peak_from="VmHWM" if hwm else "ru_maxrss (whole process)", params=params,
          fx_nodes=len(program.exported_program.graph.nodes),
          onnx_nodes=sum(1 for _ in program.model.graph))


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
    p = sub.add_parser("onnx-export")
    p.add_argument("--model", choices=("gpt2", "mlp"), default="gpt2",
                   help="gpt2: transformers GPT-2 (4 heads, vocab 1000); mlp: --layers x "
                        "(Linear(W, 4W), GELU, Linear(4W, W), LayerNorm(W))")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=64, help="gpt2 only")
    p.set_defaults(run=onnx_export)
    p = sub.add_parser("gpt2-forward")
    p.set_defaults(run=gpt2_fwd_script)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    args.run(args)


if __name__ == "__main__":
    main()
