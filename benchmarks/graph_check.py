"""Cost of the malformed-graph check that `graphdbg run` does on every graph,
against the compile it precedes (measured in the same process, per round).

    python benchmarks/graph_check.py [--rounds 5] [--inductor]

For each workload, Dynamo's graph is captured once; then each round times
`check_graph` on it (lint + every node run on fake tensors) and a fresh
compile of the same graph with aot_eager (and inductor with --inductor, one
round: its compile is 10-40 s here). Reported: nodes, median check time,
median compile time and the ratio check/compile. Also the cost of recording
which user line created each FX node (the `Graph.create_node` wrapper a
session installs) on Dynamo's tracing: capture time with it / without it,
interleaved rounds.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def gpt2_like():
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(n_layer=4, n_embd=256, n_head=4, vocab_size=1000, n_positions=128,
                     attn_implementation="eager")
    return GPT2LMHeadModel(cfg).eval(), (torch.randint(0, cfg.vocab_size, (2, 64)),)


def mlp():
    layers = []
    for _ in range(8):
        layers += [torch.nn.Linear(256, 256), torch.nn.GELU(), torch.nn.LayerNorm(256)]
    return torch.nn.Sequential(*layers), (torch.randn(32, 256),)


def capture(model, inputs):
    seen = []

    def keep(gm, example_inputs):
        seen.append((gm, example_inputs))
        return gm.forward

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(model, backend=keep)(*inputs)
    return max(seen, key=lambda s: len(s[0].graph.nodes))


def compile_time(gm, example_inputs, backend: str) -> float:
    from torch._dynamo.backends.registry import lookup_backend
    t0 = time.perf_counter()
    with torch.no_grad():
        fn = lookup_backend(backend)(gm, example_inputs)
        fn(*example_inputs)  # aot_eager traces lazily on the first call
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--inductor", action="store_true", help="also compare with one inductor compile")
    args = ap.parse_args()
    torch.set_num_threads(1)
    from graphdbg.hooks.check.lint import lint_graph as check_graph

    print(f"{'workload':<12}{'nodes':>7}{'check':>10}{'aot_eager':>11}{'ratio':>8}"
          + (f"{'inductor':>11}{'ratio':>8}" if args.inductor else ""))
    for name, make in (("gpt2-like", gpt2_like), ("mlp-24", mlp)):
        gm, example_inputs = capture(*make())
        checks, compiles = [], []
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            result = check_graph(gm, example_inputs)
            checks.append(time.perf_counter() - t0)
            assert result.problems == [], result.problems
            compiles.append(compile_time(gm, example_inputs, "aot_eager"))
        check, comp = statistics.median(checks), statistics.median(compiles)
        line = f"{name:<12}{len(gm.graph.nodes):>7}{check * 1e3:>8.0f}ms{comp * 1e3:>9.0f}ms{check / comp:>8.2f}"
        if args.inductor:
            ind = compile_time(gm, example_inputs, "inductor")
            line += f"{ind * 1e3:>9.0f}ms{check / ind:>8.3f}"
        print(line)

    from graphdbg.hooks.placement import creation
    print(f"\n{'workload':<12}{'dynamo trace':>14}{'+ creation sites':>18}{'ratio':>8}")
    for name, make in (("gpt2-like", gpt2_like), ("mlp-24", mlp)):
        model, inputs = make()
        plain, hooked = [], []
        for _ in range(args.rounds):
            for timings, hook in ((plain, False), (hooked, True)):
                if hook:
                    creation.install()
                t0 = time.perf_counter()
                capture(model, inputs)
                timings.append(time.perf_counter() - t0)
                creation.uninstall()
        a, b = statistics.median(plain), statistics.median(hooked)
        print(f"{name:<12}{a * 1e3:>12.0f}ms{b * 1e3:>16.0f}ms{b / a:>8.2f}")


if __name__ == "__main__":
    main()
