"""Side-by-side benchmarks: ratios of two variants timed alternately in one process (this machine is noisy).

    python benchmarks/run.py --quick                 # sanity run, < 2 minutes
    python benchmarks/run.py --write BENCHMARKS.md   # full run, results written as a markdown table

Each comparison: warm-up, then `reps` rounds that time A then B (order alternating), report each side's median and
the median of the per-round ratios. Not part of the test suite: no timing is asserted anywhere.
"""

import argparse
import gc
import math
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from modeling_pointer_sentinel import PointerSentinelCache, PointerSentinelConfig, PointerSentinelForCausalLM  # noqa: E402
from modeling_pointer_sentinel.evaluation import NeuralCache, neural_cache_loop_reference  # noqa: E402
from modeling_pointer_sentinel.training import make_segment, run_segment, segment_schedule  # noqa: E402


def build(vocab, hidden, layers, window, use_pointer=True, device="cpu", dtype=torch.float32, zoneout=0.0):
    torch.manual_seed(0)
    cfg = PointerSentinelConfig(
        vocab_size=vocab,
        embedding_size=hidden,
        hidden_size=hidden,
        num_layers=layers,
        pointer_window=window,
        use_pointer=use_pointer,
        zoneout=zoneout,
        eos_token_id=0,
    )
    return PointerSentinelForCausalLM(cfg).to(device=device, dtype=dtype)


def sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def compare(name, fa, fb, reps, unit, device="cpu", warmup=1):
    """fa/fb() run one measured unit and return the amount of work done (tokens, targets, ...)."""
    for _ in range(warmup):
        fa(), fb()
    ta, tb, ratios = [], [], []
    for r in range(reps):
        order = [(fa, ta), (fb, tb)] if r % 2 == 0 else [(fb, tb), (fa, ta)]
        for f, store in order:
            gc.collect()
            sync(device)
            t0 = time.perf_counter()
            work = f()
            sync(device)
            store.append(work / (time.perf_counter() - t0))
        ratios.append(ta[-1] / tb[-1])
    row = dict(name=name, a=statistics.median(ta), b=statistics.median(tb), ratio=statistics.median(ratios), unit=unit)
    print(f"{name:<58s} A {row['a']:>10.1f} {unit:<9s} B {row['b']:>10.1f}   A/B {row['ratio']:.3f}", flush=True)
    return row


def trainer(model, scheme, B, bptt, stride, steps, device):
    """One unit = `steps` optimizer updates of the given scheme on random ids; returns targets trained on."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    V, L = model.config.vocab_size, model.config.pointer_window
    g = torch.Generator().manual_seed(0)
    per_step = bptt if scheme == "stateful" else stride
    streams = torch.randint(0, V, (B, (steps + 1) * per_step + L + 2), generator=g).to(device)
    # full-length segments whose windows are full (past the stream's first L positions)
    schedule = [(p, k) for p, k in segment_schedule(streams.shape[1], scheme, bptt, stride, L) if p >= L - 1]
    schedule = [(p, k) for p, k in schedule if k == per_step][:steps]
    assert len(schedule) == steps
    model.train()

    def unit():
        cache = PointerSentinelCache()
        n = 0
        for p, k in schedule:
            seg = make_segment(streams, p, k, scheme, L, stride)
            nll, _, cache = run_segment(model, seg, cache, scheme)
            (nll / (k * B)).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            n += k * B
        return n

    return unit


def hf_trainer(model, B, T, steps, device):
    """The public training call a transformers user makes: model(input_ids, labels=input_ids), backward, SGD step
    (no cache between steps, as in Trainer). One unit = `steps` updates; returns the targets trained on."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ids = torch.randint(0, model.config.vocab_size, (steps, B, T), generator=torch.Generator().manual_seed(3))
    ids = ids.to(device)
    model.train()

    def unit():
        for x in ids:
            model(x, labels=x).loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return steps * B * (T - 1)

    return unit


def evaluator(model, B, T, chunks, device):
    V = model.config.vocab_size
    ids = torch.randint(0, V, (B, T * chunks + 1), generator=torch.Generator().manual_seed(1)).to(device)

    @torch.no_grad()
    def unit():
        model.eval()
        cache = PointerSentinelCache()
        for i in range(chunks):
            x, y = ids[:, i * T : (i + 1) * T], ids[:, i * T + 1 : (i + 1) * T + 1]
            cache = model(x, shift_labels=y, past_key_values=cache, use_cache=True, logits_to_keep=1).past_key_values
        return B * T * chunks

    return unit


def decoder(model, prompt_len, new_tokens, device):
    """Per-token decode rate through generate: (time(N+1 new) - time(1 new)) removes the prefill."""
    V = model.config.vocab_size
    prompt = torch.randint(0, V, (1, prompt_len), generator=torch.Generator().manual_seed(2)).to(device)
    model.eval()

    def timed(n):
        sync(device)
        t0 = time.perf_counter()
        model.generate(prompt, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0)
        sync(device)
        return time.perf_counter() - t0

    def unit():
        # returns tokens, and the harness divides by the unit's total time; report per-token latency separately
        extra = timed(new_tokens + 1) - timed(1)
        unit.latency = extra / new_tokens
        return new_tokens

    return unit


def latency_compare(name, ua, ub, reps, device):
    for u in (ua, ub):
        u()
    la, lb, ratios = [], [], []
    for r in range(reps):
        for u, store in [(ua, la), (ub, lb)] if r % 2 == 0 else [(ub, lb), (ua, la)]:
            u()
            store.append(u.latency * 1e3)
        ratios.append(la[-1] / lb[-1])
    row = dict(
        name=name, a=statistics.median(la), b=statistics.median(lb), ratio=statistics.median(ratios), unit="ms/token"
    )
    print(f"{name:<58s} A {row['a']:>10.3f} ms/token  B {row['b']:>10.3f}   A/B {row['ratio']:.3f}", flush=True)
    return row


def saved_activation_bytes(model, scheme, B, bptt, stride, device):
    """Bytes autograd keeps for backward during one training step (the part of peak training memory that differs
    between the models), plus parameters + gradients."""
    total = 0

    def pack(t):
        nonlocal total
        total += t.numel() * t.element_size()
        return t

    unit = trainer(model, scheme, B, bptt, stride, 1, device)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        unit()
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    return total + 2 * params


def benchmark_neural_cache(model, reps, quick):
    """Vectorised neural cache vs the per-token loop reference, same outputs."""
    g = torch.Generator().manual_seed(0)
    B, N, D, W = 1, 300 if quick else 1000, model.config.output_size, 500
    h = torch.randn(B, N, D, generator=g) / math.sqrt(D)
    y = torch.randint(0, 50, (B, N), generator=g)
    lp = torch.full((B, N), -4.0)
    fast = NeuralCache(W, 0.662, 0.1279)(h, y, lp)
    torch.testing.assert_close(fast, neural_cache_loop_reference(h, y, lp, W, 0.662, 0.1279), atol=1e-4, rtol=1e-4)

    def vec():
        NeuralCache(W, 0.662, 0.1279)(h, y, lp)
        return B * N

    def loop():
        neural_cache_loop_reference(h, y, lp, W, 0.662, 0.1279)
        return B * N

    return compare(f"neural cache eval tokens/s, vectorised / per-token loop (window {W}, D={D})", vec, loop,
                   reps, "tok/s")  # fmt: skip


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--sizes", default=None, help="comma list of VOCAB:HIDDEN (default 10000:200, full adds 33278:650)")
    ap.add_argument(
        "--only",
        default=None,
        help="comma list of row groups: train,public,window,rerun,eval,decode,memory,cache,zoneout (default all of "
        "these), "
        "zoneout_compiled (opt-in: minutes of compilation)",
    )
    ap.add_argument("--write", default=None, help="write the results as markdown to this file")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    dev, dtype = args.device, getattr(torch, args.dtype)
    quick = args.quick
    reps = 3 if quick else 7
    sizes = args.sizes or ("10000:200" if quick else "10000:200,33278:650")
    groups = set((args.only or "train,public,window,rerun,eval,decode,memory,cache,zoneout").split(","))
    L, B, bptt = 100, 20 if not quick else 8, 35
    rows = []
    header = (
        f"{platform.processor() or platform.machine()} | torch {torch.__version__} | threads "
        f"{torch.get_num_threads()} | device {dev if dev == 'cpu' else torch.cuda.get_device_name()} | {args.dtype}"
    )
    print(header)

    def add(name, fa, fb, unit):
        rows.append(compare(name, fa, fb, reps, unit, dev))

    for size in sizes.split(","):
        V, H = map(int, size.split(":"))
        tag = f"2x{H}, V={V}, L={L}"
        ptr, plain = build(V, H, 2, L, True, dev, dtype), build(V, H, 2, L, False, dev, dtype)
        steps = 2 if quick else 5
        if "train" in groups:
            add(
                f"train tokens/s, pointer stateful / plain LSTM ({tag})",
                trainer(ptr, "stateful", B, bptt, 0, steps, dev),
                trainer(plain, "stateful", B, bptt, 0, steps, dev),
                "tok/s",
            )
        if "public" in groups:  # Trainer's call, at the batch of 32, for a short and a window-long segment
            for T in (35, 100):
                add(
                    f"train targets/s, model(ids, labels=ids) pointer / plain, B=32 T={T} ({tag})",
                    hf_trainer(ptr, 32, T, steps, dev),
                    hf_trainer(plain, 32, T, steps, dev),
                    "targets/s",
                )
        if "window" in groups:
            add(
                f"train targets/s, window k1=L / plain LSTM stateful ({tag})",
                trainer(ptr, "window", B, bptt, L, max(1, steps // 2), dev),
                trainer(plain, "stateful", B, bptt, 0, steps, dev),
                "targets/s",
            )
        if "rerun" in groups:
            add(
                f"train targets/s, window k1=L / per-target re-run k1=1 ({tag})",
                trainer(ptr, "window", B, bptt, L, 1, dev),
                trainer(ptr, "window", B, bptt, 1, 3 if quick else 10, dev),
                "targets/s",
            )
        if "eval" in groups:
            add(
                f"eval tokens/s, pointer / plain ({tag})",
                evaluator(ptr, 10, 200, 2 if quick else 5, dev),
                evaluator(plain, 10, 200, 2 if quick else 5, dev),
                "tok/s",
            )
        if "decode" in groups:
            n = 20 if quick else 50
            rows.append(
                latency_compare(
                    f"decode latency, pointer / plain, 10-token prompt ({tag})",
                    decoder(ptr, 10, n, dev),
                    decoder(plain, 10, n, dev),
                    reps,
                    dev,
                )
            )
            rows.append(
                latency_compare(
                    f"decode latency, pointer, 1000- / 10-token prompt ({tag})",
                    decoder(ptr, 1000, n, dev),
                    decoder(ptr, 10, n, dev),
                    reps,
                    dev,
                )
            )
        if "memory" in groups:
            a = saved_activation_bytes(ptr, "stateful", B, bptt, 0, dev)
            b = saved_activation_bytes(plain, "stateful", B, bptt, 0, dev)
            rows.append(
                dict(
                    name=f"training memory (saved activations + params + grads), pointer / plain ({tag})",
                    a=a / 2**20,
                    b=b / 2**20,
                    ratio=a / b,
                    unit="MiB",
                )
            )
            print(f"{rows[-1]['name']:<58s} A {a / 2**20:>10.1f} MiB       B {b / 2**20:>10.1f}   A/B {a / b:.3f}")
        for compiled in [False] * ("zoneout" in groups) + [True] * ("zoneout_compiled" in groups):
            zoned = build(V, H, 2, L, True, dev, dtype, zoneout=0.5)
            if compiled:  # one graph per training call: the step loop's pointwise ops fuse
                zoned.forward = torch.compile(zoned.forward, fullgraph=True)
            add(
                f"train tokens/s, zoneout 0.5 step loop{' compiled' if compiled else ''} / fused LSTM ({tag})",
                trainer(zoned, "stateful", B, bptt, 0, steps, dev),
                trainer(ptr, "stateful", B, bptt, 0, steps, dev),
                "tok/s",
            )
            del zoned
        if "cache" in groups:
            rows.append(benchmark_neural_cache(ptr, reps, quick))
        del ptr, plain
    if args.write:
        cmd = "python benchmarks/run.py " + " ".join(argv if argv is not None else sys.argv[1:])
        lines = [
            f"Command: `{cmd}`",
            "",
            f"Machine: {header}",
            "",
            "| comparison | A | B | unit | A/B (median of paired rounds) |",
            "|---|---:|---:|---|---:|",
        ]
        lines += [f"| {r['name']} | {r['a']:.4g} | {r['b']:.4g} | {r['unit']} | {r['ratio']:.3f} |" for r in rows]
        Path(args.write).write_text("\n".join(lines) + "\n")
    return rows


if __name__ == "__main__":
    main()
