"""Side-by-side benchmarks: ratios of two variants timed alternately in one process (this machine is noisy).

    python benchmarks/run.py --quick                                # sanity run, < 2 minutes
    python benchmarks/run.py --write benchmarks/results_cpu.md      # full run, results as a markdown table

Each comparison: warm-up, then `reps` rounds that time A then B (order alternating); each round gives one paired
ratio A/B. A row reports the median of those ratios with their spread (min-max and the interquartile range), and
A and B as measured in the median round, so that the row's A / B is its ratio. A target counts as met only when the
whole spread clears it (every round), not met when no round reaches it, inconclusive otherwise. --write refuses to
overwrite a file this script did not write (BENCHMARKS.md is written by hand). Not part of the test suite: no timing
is asserted anywhere (tests/test_benchmarks.py checks the summary on given numbers).
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
from modeling_pointer_sentinel.generation_pointer_sentinel import decode_state  # noqa: E402
from modeling_pointer_sentinel.modeling_pointer_sentinel import decode_step, pack_weights  # noqa: E402
from modeling_pointer_sentinel.tokenization import build_word_level_tokenizer  # noqa: E402
from modeling_pointer_sentinel.training import (  # noqa: E402
    encode_lines,
    load_text_splits,
    make_segment,
    run_segment,
    segment_schedule,
)

ROOT = Path(__file__).resolve().parents[1]
WRITTEN_BY_US = "Command: `python benchmarks/run.py"  # first line of every file --write writes
ADAPTIVE_CUTOFFS = [2000, 10000]  # examples/quality_runs.py's WT2_CUTOFFS


def paired_summary(a: list[float], b: list[float]) -> dict:
    """The ratio of a row from paired rounds: round i measured a[i] and b[i] side by side. Returns the median of the
    per-round ratios a[i]/b[i], their min, max and quartiles (q1, q3), the number of rounds, and A and B as measured
    in the median round (for an even count, the lower of the two middle ones), so that a / b is the ratio shown.
    Each side's own median is not reported: on a noisy machine median(a) / median(b) can contradict the paired
    ratio (5784 / 5779 beside a paired 0.904)."""
    if len(a) != len(b) or not a:
        raise ValueError(f"paired rounds need as many A as B measurements (at least one), got {len(a)} and {len(b)}.")
    ratios = [x / y for x, y in zip(a, b, strict=True)]
    order = sorted(range(len(ratios)), key=ratios.__getitem__)
    mid = order[(len(order) - 1) // 2]
    q1, _, q3 = statistics.quantiles(ratios, n=4, method="inclusive") if len(ratios) > 1 else ratios * 3
    return dict(ratio=ratios[mid], min=min(ratios), max=max(ratios), q1=q1, q3=q3, rounds=len(ratios), a=a[mid],
                b=b[mid])  # fmt: skip


def verdict(summary: dict, target: tuple[str, float] | None) -> str:
    """ "met" when every round's ratio clears the target (">=" or "<=" a bound), "not met" when none does,
    "inconclusive" when the spread straddles it; "" without a target."""
    if target is None:
        return ""
    op, bound = target
    if op not in (">=", "<="):
        raise ValueError(f"a target is ('>=' or '<=', bound), got {target!r}.")
    lo, hi = summary["min"], summary["max"]
    if op == ">=":
        return "met" if lo >= bound else "not met" if hi < bound else "inconclusive"
    return "met" if hi <= bound else "not met" if lo > bound else "inconclusive"


def target_text(target: tuple[str, float] | None) -> str:
    return "" if target is None else f"{'≥' if target[0] == '>=' else '≤'} {target[1]:g}"


def row_line(row: dict) -> str:
    return (f"{row['name']:<58s} A {row['a']:>10.4g} B {row['b']:>10.4g} {row['unit']:<9s} A/B {row['ratio']:.3f} "
            f"[{row['min']:.3f}-{row['max']:.3f}] IQR {row['q1']:.3f}-{row['q3']:.3f} {target_text(row['target'])} "
            f"{row['verdict']}")  # fmt: skip


def markdown(rows: list[dict], cmd: str, header: str) -> str:
    lines = [
        f"Command: `{cmd}`",
        "",
        f"Machine: {header}",
        "",
        "Each round times A and B side by side; A/B is the median of the per-round ratios, with their min-max and",
        "interquartile range; A and B are the rates measured in that median round (so A / B is the ratio shown). A",
        "target is met only when every round clears it, not met when no round reaches it, otherwise inconclusive.",
        "",
        "| comparison | unit | A (median round) | B (median round) | A/B, median of rounds | min–max | IQR | rounds "
        "| target | verdict |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    lines += [
        f"| {r['name']} | {r['unit']} | {r['a']:.4g} | {r['b']:.4g} | {r['ratio']:.3f} | {r['min']:.3f}–{r['max']:.3f} "
        f"| {r['q1']:.3f}–{r['q3']:.3f} | {r['rounds']} | {target_text(r['target'])} | {r['verdict']} |"
        for r in rows
    ]
    return "\n".join(lines) + "\n"


def check_write_path(path: str | None) -> Path | None:
    """The --write file, or a ValueError when it would overwrite a file this script did not write."""
    if path is None:
        return None
    out = Path(path).resolve()
    if out == ROOT / "BENCHMARKS.md" or (out.is_file() and not out.read_text().startswith(WRITTEN_BY_US)):
        raise ValueError(f"--write {path}: refusing to overwrite a file benchmarks/run.py did not write "
                         "(BENCHMARKS.md is written by hand); write to a results file such as "
                         "benchmarks/results_cpu.md")  # fmt: skip
    return out


def build(vocab, hidden, layers, window, use_pointer=True, device="cpu", dtype=torch.float32, zoneout=0.0, **config):
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
        **config,
    )
    return PointerSentinelForCausalLM(cfg).to(device=device, dtype=dtype)


def sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def make_row(name, a, b, unit, target=None):
    row = dict(name=name, unit=unit, target=target, **paired_summary(a, b))
    row["verdict"] = verdict(row, target)
    print(row_line(row), flush=True)
    return row


def compare(name, fa, fb, reps, unit, device="cpu", warmup=1, target=None):
    """fa/fb() run one measured unit and return the amount of work done (tokens, targets, ...)."""
    for _ in range(warmup):
        fa(), fb()
    ta, tb = [], []
    for r in range(reps):
        order = [(fa, ta), (fb, tb)] if r % 2 == 0 else [(fb, tb), (fa, ta)]
        for f, store in order:
            gc.collect()
            sync(device)
            t0 = time.perf_counter()
            work = f()
            sync(device)
            store.append(work / (time.perf_counter() - t0))
    return make_row(name, ta, tb, unit, target)


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


def wikitext2_ids() -> torch.Tensor:
    """The bundled WikiText-2 training split as ids of a tokenizer built on it (frequency order): an adaptive
    softmax's cost depends on how the targets fall into its clusters, which random ids would misstate."""
    lines = load_text_splits()["train"]
    return encode_lines(build_word_level_tokenizer(lines), lines)


def hf_trainer(model, B, T, steps, device, stream=None):
    """The public training call a transformers user makes: model(input_ids, labels=input_ids), backward, SGD step
    (no cache between steps, as in Trainer). One unit = `steps` updates on random ids, or on consecutive blocks of
    `stream`; returns the targets trained on."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    if stream is None:
        ids = torch.randint(0, model.config.vocab_size, (steps, B, T), generator=torch.Generator().manual_seed(3))
    else:
        ids = stream[: steps * B * T].view(steps, B, T)
    ids = ids.to(device)
    model.train()

    def unit():
        for x in ids:
            model(x, labels=x).loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return steps * B * (T - 1)

    return unit


def evaluator(model, B, T, chunks, device, stream=None):
    V, n = model.config.vocab_size, T * chunks + 1
    if stream is None:
        ids = torch.randint(0, V, (B, n), generator=torch.Generator().manual_seed(1)).to(device)
    else:
        ids = stream[: B * n].view(B, n).to(device)

    @torch.no_grad()
    def unit():
        model.eval()
        cache = PointerSentinelCache()
        for i in range(chunks):
            x, y = ids[:, i * T : (i + 1) * T], ids[:, i * T + 1 : (i + 1) * T + 1]
            cache = model(x, shift_labels=y, past_key_values=cache, use_cache=True, logits_to_keep=1).past_key_values
        return B * T * chunks

    return unit


def decode_prompt(model, prompt_len, batch=1, device="cpu"):
    V = model.config.vocab_size
    return torch.randint(0, V, (batch, prompt_len), generator=torch.Generator().manual_seed(2)).to(device)


def decoder(model, prompt_len, new_tokens, device, batch=1, decode_step="fast", clock=time.perf_counter, top_k=None):
    """Per-token decode rate through generate, greedy (or top-k sampling from one seed): (time(N+1 new) - time(1
    new)) removes the prefill. The unit sets `latency` (seconds a token) and `tokens` (the longer run's sequences)."""
    prompt = decode_prompt(model, prompt_len, batch, device)
    model.eval()
    decoding = dict(do_sample=False) if top_k is None else dict(do_sample=True, top_k=top_k)

    def timed(n):
        torch.manual_seed(0)
        sync(device)
        t0 = clock()
        out = model.generate(prompt, max_new_tokens=n, min_new_tokens=n, pad_token_id=0, decode_step=decode_step,
                             **decoding)  # fmt: skip
        sync(device)
        return clock() - t0, out

    def unit():
        # returns tokens, and the harness divides by the unit's total time; report per-token latency separately
        (t1, unit.tokens), (t0, _) = timed(new_tokens + 1), timed(1)
        unit.latency = (t1 - t0) / new_tokens
        return new_tokens

    return unit


def spelling_models(V, H, L, device, dtype):
    """Three 2xH pointer models with one set of random weights: without the speller (placeholders), with it, and with
    it made to spell (its unseen-word share near 1, so nearly every token it writes is a byte)."""
    spell = dict(oov_slots=256, unk_token_id=1)
    word = build(V, H, 2, L, True, device, dtype, **spell)
    spelled = build(V, H, 2, L, True, device, dtype, speller_size=256, **spell)
    spelled.load_state_dict(word.state_dict(), strict=False)
    spelling = build(V, H, 2, L, True, device, dtype, speller_size=256, **spell)
    spelling.load_state_dict(spelled.state_dict())
    with torch.no_grad():  # the unseen-word share near 1 (the gate at 1, then p_vocab(<unk>)): bytes after bytes
        spelling.pointer.query.weight.zero_()
        spelling.pointer.query.bias.fill_(5.0)
        spelling.pointer.sentinel.fill_(10.0)
        spelling.lm_head.bias[1] = 30.0
    for m in (word, spelled, spelling):  # as the shipped folders' generation_config: never a literal <unk>
        m.generation_config.suppress_tokens = [1]
    return word, spelled, spelling


def spelled_decoding(reps: int, quick: bool, device, dtype) -> list[dict]:
    """Generate's per-token latency with the speller (ids that carry the text) against the same weights without it
    (placeholders), greedy and top-k sampling (the shipped folders' default, k = 40) from a 10-token prompt on random
    weights, which write vocabulary words, past the window's length; and the speller's own step: a model made to
    spell (its `<unk>` share raised, so nearly every token is a byte) against one writing words, both with the
    speller."""
    V, H, L, n = 10000, 200, 100, 20 if quick else 200
    tag = f"2x{H}, V={V}, L={L}, speller 256"
    word, spelled, spelling = spelling_models(V, H, L, device, dtype)
    units = [decoder(m, 10, n, device) for m in (spelled, word, spelling)]
    units += [decoder(m, 10, n, device, top_k=40) for m in (spelled, word)]
    for u, writes in zip(units, ("words", "words", "bytes", "words", "words"), strict=True):  # what each row times
        u()
        new = u.tokens[0, 10:]
        assert bool(((new < V) if writes == "words" else (new >= V)).float().mean() > 0.9), (writes, new.tolist())
    return [
        latency_compare(f"decode latency, speller / placeholders, greedy writing words ({tag})", units[0], units[1],
                        reps, device, ("<=", 1.1)),
        latency_compare(f"decode latency, speller / placeholders, top-k 40 sampling writing words ({tag})", units[3],
                        units[4], reps, device, ("<=", 1.1)),
        latency_compare(f"decode latency, a spelled byte / a word step, speller ({tag})", units[2], units[0], reps,
                        device, ("<=", 1.0)),
    ]  # fmt: skip


def latency_compare(name, ua, ub, reps, device, target=None):
    for u in (ua, ub):
        u()
    la, lb = [], []
    for r in range(reps):
        for u, store in [(ua, la), (ub, lb)] if r % 2 == 0 else [(ub, lb), (ua, la)]:
            u()
            store.append(u.latency * 1e3)
    return make_row(name, la, lb, "ms/token", target)


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


def benchmark_neural_cache(model, reps, quick, target=None):
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
                   reps, "tok/s", target=target)  # fmt: skip


# ---------------------------------------------------------------------------------------------------------------
# Decode paths: one table of every way to decode, timed in rotation, against the arithmetic floor
# ---------------------------------------------------------------------------------------------------------------


class BareLSTM(torch.nn.Module):
    """nn.Embedding + nn.LSTM + nn.Linear of the model's shape, no pointer: the plainest decode loop torch offers."""

    def __init__(self, model):
        super().__init__()
        cfg = model.config
        self.embed = torch.nn.Embedding(cfg.vocab_size, cfg.embedding_size)
        self.lstm = torch.nn.LSTM(cfg.embedding_size, cfg.hidden_size, cfg.num_hidden_layers, batch_first=True)
        self.out = torch.nn.Linear(cfg.hidden_size, cfg.vocab_size)

    def forward(self, ids, state):
        h, state = self.lstm(self.embed(ids)[:, None], state)
        return self.out(h[:, 0]), state


def machine_rates(threads: int) -> dict:
    """Measured peaks the floor is taken against: fp32 GEMM FLOP/s (1024^3) and the read bandwidth of a tensor the
    size of a model's weights read over and over (what a decode step does), for 8, 32 and 128 MB."""
    torch.set_num_threads(threads)
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    for _ in range(3):
        a @ b
    t0, n = time.perf_counter(), 10
    for _ in range(n):
        a @ b
    flops = 2 * 1024**3 * n / (time.perf_counter() - t0)
    bandwidth = {}
    for mb in (8, 32, 128):
        x = torch.ones(mb * 2**20 // 4)
        x.sum()
        t0, n = time.perf_counter(), max(3, 512 // mb)
        for _ in range(n):
            x.sum()
        bandwidth[mb] = mb * 2**20 * n / (time.perf_counter() - t0)
    return dict(flops=flops, bandwidth=bandwidth)


def step_work(model) -> tuple[float, float]:
    """(multiply-adds per token, bytes of weights read per decode step) of the mixture's step: every weight matrix
    the step multiplies by (each element once per token), the pointer's L x D scores, fp32."""
    w = pack_weights(model)
    mats = [m for m, _ in w.lstm] + ([w.query[0]] if w.query is not None else [])
    if w.output is not None:
        mats.append(w.output[0])
    else:  # the adaptive softmax computes all of p_vocab: head rows, cluster rows, every tail
        head = model.lm_head
        mats += [head.weight[: head.cutoffs[0]], head.cluster_weight, *head.tail_proj, *head.tail_weight]
    macs = sum(m.numel() for m in mats)
    if model.pointer is not None:
        macs += model.config.pointer_window * model.config.output_size
    return float(macs), 4.0 * sum(m.numel() for m in mats)


def decode_path_units(model, folder_onnx, B: int, threads: int, n: int, compile_seconds: dict, compiled: bool = True,
                      clock=time.perf_counter):  # fmt: skip
    """name -> unit(); each unit decodes n tokens per row greedily and returns the seconds the n steps took."""
    from export_onnx import state_tensors
    from onnx_generate import run_step, session

    prompt = decode_prompt(model, 10, B)

    def generate(decode):
        timed = decoder(model, 10, n, "cpu", B, decode, clock)  # the same prompt as the loops below

        def unit():
            timed()
            unit.tokens = timed.tokens
            return timed.latency * n

        return unit

    def prefilled():
        cache = PointerSentinelCache()
        with torch.no_grad():
            first = model(prompt, past_key_values=cache, use_cache=True, logits_to_keep=1).logits[:, -1].argmax(-1)
        return cache, first

    def step_loop():
        cache, tokens = prefilled()
        weights, state = model._packed_weights(), decode_state(cache)
        t0 = clock()
        with torch.no_grad():
            for _ in range(n):
                log_p, _ = decode_step(model, weights, state, tokens, True)
                tokens = log_p.argmax(-1)
        return clock() - t0

    def forward_loop():
        cache, tokens = prefilled()
        t0 = clock()
        with torch.no_grad():
            for _ in range(n):
                tokens = model(tokens[:, None], past_key_values=cache, use_cache=True).logits[:, -1].argmax(-1)
        return clock() - t0

    bare = BareLSTM(model).eval()

    def bare_loop():
        tokens, state = prompt[:, -1], None
        t0 = clock()
        with torch.no_grad():
            for _ in range(n):
                logits, state = bare(tokens, state)
                tokens = logits.argmax(-1)
        return clock() - t0

    def onnx(path):
        sess = session(path, threads)
        names = [i.name for i in sess.get_inputs()][1:]

        def unit():
            cache, tokens = prefilled()
            state, tokens = [t.numpy() for t in state_tensors(decode_state(cache))], tokens.numpy()
            t0 = clock()
            for _ in range(n):
                log_p, state = run_step(sess, names, tokens, state)
                tokens = log_p.argmax(-1)
            return clock() - t0

        return unit

    units = {
        "generate, forward each token (before this work)": generate("forward"),
        "generate, fast decode step": generate("fast"),
        "the model's decode step + argmax loop": step_loop,
        "the model's forward with its cache + argmax loop": forward_loop,
        "nn.Embedding + nn.LSTM + nn.Linear + argmax loop (no pointer)": bare_loop,
    }
    if compiled:
        units["generate, compiled decode step"] = generate("compiled")
        t0 = time.perf_counter()
        units["generate, compiled decode step"]()  # compiles for this batch size (not counted in the rounds)
        compile_seconds[B] = compile_seconds.get(B, time.perf_counter() - t0)
    if folder_onnx is not None:
        units["ONNX Runtime, fp32 step + argmax loop"] = onnx(folder_onnx / "decode_step.onnx")
        units["ONNX Runtime, int8 step + argmax loop"] = onnx(folder_onnx / "decode_step.int8.onnx")
    return units


def decode_paths(model, name: str, reps: int, quick: bool, configs=((1, 1), (1, 32), (2, 1), (2, 32)),
                 compiled: bool = True, clock: str = "wall") -> str:  # fmt: skip
    """The decode table for one model: ms per step and tokens/s of every path at each (threads, batch) of `configs`,
    the median of `reps` rounds that run the paths in rotating order, beside the arithmetic floor. Without the onnx
    extra (e.g. on a lent GPU's host) the ONNX Runtime rows are left out, and the table says so; `compiled=False`
    leaves out the compiled step (a host without a C++ compiler for torch.compile). clock="cpu" times every path in
    the process's CPU time, which other tenants of a shared machine do not inflate (one thread only)."""
    import tempfile

    sys.path.insert(0, str(ROOT / "examples"))
    import export_onnx

    if clock == "cpu" and any(threads != 1 for threads, _ in configs):
        raise ValueError("clock='cpu' counts every thread's CPU time: give one-thread configurations only")
    timer = time.process_time if clock == "cpu" else time.perf_counter

    model.eval()
    macs, weight_bytes = step_work(model)
    out = tempfile.TemporaryDirectory()
    folder = Path(out.name)
    try:
        export_onnx.export(model, folder / "decode_step.onnx")
        export_onnx.quantize(folder / "decode_step.onnx", folder / "decode_step.int8.onnx")
        folder_onnx = folder
    except ImportError as e:
        folder_onnx = None
        print(f"no ONNX Runtime rows: {e}", flush=True)
    lines = [f"#### {name}: {macs / 1e6:.2f}M multiply-adds and {weight_bytes / 2**20:.1f} MiB of fp32 weights read "
             "per step", ""]  # fmt: skip
    compile_seconds, identical = {}, []
    if folder_onnx is None:
        lines += ["No ONNX Runtime rows: the onnx extra is not installed here.", ""]
    for threads, B in configs:
        rates = machine_rates(threads)
        n = (20 if quick else 100) if B == 1 else (5 if quick else 30)
        units = decode_path_units(model, folder_onnx, B, threads, n, compile_seconds, compiled, timer)
        times = {k: [] for k in units}
        for r in range(reps):
            keys = list(units)
            for k in keys[r % len(keys) :] + keys[: r % len(keys)]:
                gc.collect()
                times[k].append(units[k]() / n)
        before_tokens = units["generate, forward each token (before this work)"].tokens
        identical.append(torch.equal(units["generate, fast decode step"].tokens, before_tokens))
        bw = min(rates["bandwidth"].items(), key=lambda kv: abs(kv[0] * 2**20 - weight_bytes))[1]
        floor = max(2 * macs * B / rates["flops"], weight_bytes / bw)
        before = statistics.median(times["generate, forward each token (before this work)"])
        lines += [f"Batch {B}, {threads} thread{'s' if threads > 1 else ''}: floor {floor * 1e3:.3f} ms/step = "
                  f"max(2·MACs·B / {rates['flops'] / 1e9:.1f} GFLOP/s, weights / {bw / 1e9:.1f} GB/s read) "
                  f"({B / floor:,.0f} tokens/s); {n} steps a round, {reps} rounds" +
                  (", timed in the process's CPU time." if clock == "cpu" else "."), "",
                  "| path | ms / step | tokens / s | × floor | speed-up over generate before |",
                  "|---|---:|---:|---:|---:|"]  # fmt: skip
        for k, ts in times.items():
            t = statistics.median(ts)
            lines.append(f"| {k} | {t * 1e3:.3f} | {B / t:,.0f} | {t / floor:.1f} | {before / t:.2f} |")
        # issue 30's "generate / the model's own step loop <= 1.1", from the rounds' own pairs
        own = paired_summary(times["generate, fast decode step"], times["the model's decode step + argmax loop"])
        lines += ["", f"generate fast / the step loop, paired rounds: median {own['ratio']:.3f} (quartiles "
                  f"{own['q1']:.3f}–{own['q3']:.3f}, range {own['min']:.3f}–{own['max']:.3f}), ≤ 1.1: "
                  f"{verdict(own, ('<=', 1.1))}.", ""]  # fmt: skip
        print("\n".join(lines[-len(times) - 7 :]), flush=True)
    took = ", ".join(f"{s:.0f} s at batch {b}" for b, s in compile_seconds.items())
    lines.append(f"Tokens of generate fast == generate before, every configuration: {all(identical)}. " + (
        f"Compiling the step took {took} (once per model and batch size, not in the timings)." if compiled
        else "No compiled step here."))  # fmt: skip
    out.cleanup()
    torch.set_num_threads(1)
    return "\n".join(lines) + "\n"


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
        "these), decode_paths (opt-in: every decode path of the shipped models against the arithmetic floor, with "
        "ONNX Runtime; needs the onnx extra), zoneout_compiled (opt-in: minutes of compilation), adaptive (opt-in: "
        "the adaptive softmax against "
        "the full one on WikiText-2's 33,278 words, 2x200 and 2x650 or 2x200 with --quick), spell (opt-in: generate's "
        "step with the speller against placeholders, greedy and top-k sampling; a spelled byte against a word step)",
    )
    ap.add_argument("--write", default=None,
                    help="write the results as a markdown table to this file, e.g. benchmarks/results_cpu.md; refuses "
                    "to overwrite a file it did not write (BENCHMARKS.md is hand-written)")  # fmt: skip
    args = ap.parse_args(argv)
    try:
        write = check_write_path(args.write)  # before the run, not after 30 minutes of it
    except ValueError as e:
        ap.error(str(e))
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

    def add(name, fa, fb, unit, target=None):
        rows.append(compare(name, fa, fb, reps, unit, dev, target=target))

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
                (">=", 0.90),
            )
        if "public" in groups:  # Trainer's call, at the batch of 32, for a short and a window-long segment
            for T in (35, 100):
                add(
                    f"train targets/s, model(ids, labels=ids) pointer / plain, B=32 T={T} ({tag})",
                    hf_trainer(ptr, 32, T, steps, dev),
                    hf_trainer(plain, 32, T, steps, dev),
                    "targets/s",
                    (">=", 0.90),
                )
        if "window" in groups:
            add(
                f"train targets/s, window k1=L / plain LSTM stateful ({tag})",
                trainer(ptr, "window", B, bptt, L, max(1, steps // 2), dev),
                trainer(plain, "stateful", B, bptt, 0, steps, dev),
                "targets/s",
                (">=", 0.45),
            )
        if "rerun" in groups:
            add(
                f"train targets/s, window k1=L / per-target re-run k1=1 ({tag})",
                trainer(ptr, "window", B, bptt, L, 1, dev),
                trainer(ptr, "window", B, bptt, 1, 3 if quick else 10, dev),
                "targets/s",
                (">=", 15.0),
            )
        if "eval" in groups:
            add(
                f"eval tokens/s, pointer / plain ({tag})",
                evaluator(ptr, 10, 200, 2 if quick else 5, dev),
                evaluator(plain, 10, 200, 2 if quick else 5, dev),
                "tok/s",
                (">=", 0.90),
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
                    ("<=", 1.2),
                )
            )
            rows.append(
                latency_compare(
                    f"decode latency, pointer, 1000- / 10-token prompt ({tag})",
                    decoder(ptr, 1000, n, dev),
                    decoder(ptr, 10, n, dev),
                    reps,
                    dev,
                    ("<=", 1.1),
                )
            )
        if "memory" in groups:
            a = saved_activation_bytes(ptr, "stateful", B, bptt, 0, dev)
            b = saved_activation_bytes(plain, "stateful", B, bptt, 0, dev)
            name = f"training memory (saved activations + params + grads), pointer / plain ({tag})"
            rows.append(make_row(name, [a / 2**20], [b / 2**20], "MiB", ("<=", 1.25)))  # deterministic: one round
        for compiled in [False] * ("zoneout" in groups) + [True] * ("zoneout_compiled" in groups):
            zoned = build(V, H, 2, L, True, dev, dtype, zoneout=0.5)
            if compiled:  # one graph per training call: the step loop's pointwise ops fuse
                zoned.forward = torch.compile(zoned.forward, fullgraph=True)
            add(
                f"train tokens/s, zoneout 0.5 step loop{' compiled' if compiled else ''} / fused LSTM ({tag})",
                trainer(zoned, "stateful", B, bptt, 0, steps, dev),
                trainer(ptr, "stateful", B, bptt, 0, steps, dev),
                "tok/s",
                None if compiled else (">=", 0.5),
            )
            del zoned
        if "cache" in groups:
            rows.append(benchmark_neural_cache(ptr, reps, quick, (">=", 20.0)))
        del ptr, plain
    if "adaptive" in groups:  # WikiText-2's vocabulary, the pointer on: what the adaptive softmax buys
        stream, steps = wikitext2_ids(), 2 if quick else 5
        for H in (200,) if quick else (200, 650):
            tag = f"2x{H} tied, V=33278, L={L}, cutoffs {ADAPTIVE_CUTOFFS}, WikiText-2 ids"
            kw = dict(tie_word_embeddings=True)
            ada = build(33278, H, 2, L, True, dev, dtype, adaptive_softmax_cutoffs=ADAPTIVE_CUTOFFS, **kw)
            full = build(33278, H, 2, L, True, dev, dtype, **kw)
            add(
                f"train targets/s, model(ids, labels=ids) adaptive / full softmax, B=32 T=35 ({tag})",
                hf_trainer(ada, 32, 35, steps, dev, stream),
                hf_trainer(full, 32, 35, steps, dev, stream),
                "targets/s",
                (">=", 3.0) if H == 200 else None,
            )
            add(
                f"eval tokens/s, adaptive / full softmax ({tag})",
                evaluator(ada, 10, 200, 2 if quick else 5, dev, stream),
                evaluator(full, 10, 200, 2 if quick else 5, dev, stream),
                "tok/s",
            )
            n = 20 if quick else 50
            rows.append(latency_compare(f"decode latency, adaptive / full softmax, 10-token prompt ({tag})",
                                        decoder(ada, 10, n, dev), decoder(full, 10, n, dev), reps, dev))  # fmt: skip
            del ada, full
    if "spell" in groups:  # the speller's cost in generate's fast step (`spelled_decode_step`)
        rows += spelled_decoding(reps, quick, dev, dtype)
    sections = []
    if "decode_paths" in groups:  # the shipped models, and the paper's width with random weights
        from modeling_pointer_sentinel.spelling import without_speller

        # the word model under each folder's speller: these paths step words (the speller's cost: --only spell)
        shipped = lambda name: without_speller(PointerSentinelForCausalLM.from_pretrained(ROOT / "pretrained" / name))  # noqa: E731
        models = [("ptb-pointer-sentinel-lstm-2x200 (V=10000, L=100)", shipped("ptb-pointer-sentinel-lstm-2x200"))]
        if not quick:
            models += [
                ("wt2-pointer-sentinel-lstm-2x200 (adaptive softmax, V=33278, L=100)",
                 shipped("wt2-pointer-sentinel-lstm-2x200")),
                ("random 2x650 pointer (V=10000, L=100)", build(10000, 650, 2, L, True)),
            ]  # fmt: skip
        for name, model in models:
            sections.append(decode_paths(model.float(), name, 3 if quick else 5, quick))
    if write:
        cmd = "python benchmarks/run.py " + " ".join(argv if argv is not None else sys.argv[1:])
        write.write_text(markdown(rows, cmd, header) + "".join("\n" + t for t in sections))
    return rows


if __name__ == "__main__":
    main()
