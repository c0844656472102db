"""Checks that need an NVIDIA GPU (CI has none; run on a lent machine, results recorded in BENCHMARKS.md).

    python benchmarks/cuda_checks.py              # every check, about a minute on an H100/H200

1. Which dtype cuDNN's LSTM really runs in under `torch.autocast("cuda", torch.bfloat16)`: the dtypes that reach
   aten's RNN ops (a dispatch mode sits below autocast, so it sees the casts autocast made) and the CUDA kernels
   they launch (from the profiler), for a training step and for the eval forward.
2. The fast decode step on CUDA gives generate's forward tokens (greedy, fp32 and under bf16 weights).
3. A training step's targets/s, fp32 weights against bf16 autocast, side by side (the public call:
   model(ids, labels=ids), backward, SGD step) at 2x200 and 2x650.
4. A train.py checkpoint saved on the GPU resumes on the CPU (--cpu), and one saved on the CPU resumes on the GPU,
   best weights included, and saves again there.
5. The speller on CUDA: a shipped folder scores a raw-text prompt whose made-up name is spelled as it does on the
   CPU, cross-entropy of its logits equals its loss there, greedy decoding through the fast step gives forward's
   tokens while it spells (fp32 and bf16 weights), sampling coins words, and two runs of the prompt's forward and
   backward are bit-equal (the spelled mixture sums copies by scatter_add, atomics on CUDA).
"""

import argparse
import collections
import itertools
import sys
import time
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import build, compare, hf_trainer, spelling_models  # noqa: E402


class OpDtypes(TorchDispatchMode):
    """Records the input/output dtypes of every aten op whose name matches one of `words`."""

    def __init__(self, words):
        super().__init__()
        self.words, self.seen = words, collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = str(func)
        if any(w in name for w in self.words):
            dt = lambda xs: ",".join(sorted({str(x.dtype)[6:] for x in xs if isinstance(x, torch.Tensor)}))  # noqa: E731
            flat_in = [a for x in args for a in (x if isinstance(x, list | tuple) else [x])]
            flat_out = out if isinstance(out, list | tuple) else [out]
            self.seen[(name, dt(flat_in), dt(flat_out))] += 1
        return out


def lstm_dtypes(model, ids, train: bool) -> str:
    words = ("rnn", "lstm", "mm", "addmm", "linear")
    model.train(train)
    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA])
    with prof, OpDtypes(words) as mode, torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(ids, labels=ids)
        if train:
            out.loss.backward()
        torch.cuda.synchronize()
    lines = [f"#### {'training step' if train else 'eval forward'} under bf16 autocast, fp32 weights", "",
             "| aten op | input dtypes | output dtypes | calls |", "|---|---|---|---:|"]  # fmt: skip
    lines += [f"| {n} | {i} | {o} | {c} |" for (n, i, o), c in sorted(mode.seen.items())]
    kernels = collections.Counter()
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA and any(w in e.name.lower() for w in ("rnn", "lstm")):
            kernels[e.name[:140]] += 1
    lines += ["", "| CUDA kernels whose name says rnn/lstm | launches |", "|---|---:|"]
    lines += [f"| `{k}` | {c} |" for k, c in kernels.most_common(12)]
    model.zero_grad(set_to_none=True)
    return "\n".join(lines) + "\n"


def lstm_precision(model, ids, steps=10) -> str:
    """One training step's gradients against fp32 weights without autocast, and its time: bf16 autocast as the
    model runs it, then with the LSTM taken out of autocast in bf16 or in fp32 (the rest in bf16)."""
    mod = sys.modules[type(model).__module__]
    fused, chunk = mod._fused_lstm, mod._one_chunk
    names = [n for n, _ in model.named_parameters()]
    is_lstm = [".layers." in n for n in names]

    def lstm_in(dtype):
        def run(x, h0, c0, weights, training):
            with torch.autocast("cuda", enabled=False):
                return fused(x.to(dtype), h0.to(dtype), c0.to(dtype), [w.to(dtype) for w in weights], training)

        return run

    def step(autocast):
        model.zero_grad(set_to_none=True)
        torch.manual_seed(0)  # the same dropout masks in every variant
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            loss = model(ids, labels=ids).loss
        loss.backward()
        return loss.detach(), [p.grad.detach().float().clone() for p in model.parameters()]

    def rel_error(g, ref, lstm_only):
        pairs = [(a, b) for a, b, m in zip(g, ref, is_lstm, strict=True) if m or not lstm_only]
        return (sum(float((a - b).norm() ** 2) for a, b in pairs) / sum(float(b.norm() ** 2) for _, b in pairs)) ** 0.5

    model.train()
    ref_loss, ref = step(False)
    zeros = lambda g: sum(int((a == 0).sum()) for a, m in zip(g, is_lstm, strict=True) if m)  # noqa: E731
    lines = [f"#### The LSTM's precision in a training step (B={ids.shape[0]}, T={ids.shape[1]})", "",
             f"| LSTM runs in | loss - fp32 loss | grad rel. error, all | grad rel. error, LSTM | zero LSTM grads "
             f"(fp32: "
             f"{zeros(ref)}) | ms / step |", "|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    variants = {"fp32, no autocast": None, "bf16 autocast, as the model runs it": "model",
                "bf16, autocast off around it": torch.bfloat16, "fp32 inside autocast": torch.float32}  # fmt: skip
    for label, patch in variants.items():
        try:
            if isinstance(patch, torch.dtype):
                mod._fused_lstm, mod._one_chunk = lstm_in(patch), (lambda w, x: w)
            loss, g = step(patch is not None)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(steps):
                step(patch is not None)
            torch.cuda.synchronize()
            ms = (time.perf_counter() - t0) / steps * 1e3
            lines.append(f"| {label} | {float(loss - ref_loss):+.2e} | {rel_error(g, ref, False):.2e} | "
                         f"{rel_error(g, ref, True):.2e} | {zeros(g)} | {ms:.2f} |")  # fmt: skip
        except RuntimeError as e:
            lines.append(f"| {label} | failed: {' '.join(str(e).split())[:120]} | | | | |")
        finally:
            mod._fused_lstm, mod._one_chunk = fused, chunk
    model.zero_grad(set_to_none=True)
    return "\n".join(lines) + "\n"


def greedy_paths(model, paths, device="cuda") -> tuple[torch.Tensor, dict]:
    """Batch 4, 40 greedy tokens after a random 12-token prompt, through forward at every token and through each
    decode step of `paths`: forward's sequences and, per path, whether its tokens are forward's."""
    prompt = torch.randint(0, model.config.vocab_size, (4, 12), generator=torch.Generator().manual_seed(1)).to(device)
    kw = dict(max_new_tokens=40, min_new_tokens=40, do_sample=False, pad_token_id=0)
    ref = model.generate(prompt, decode_step="forward", **kw)
    return ref, {p: torch.equal(model.generate(prompt, decode_step=p, **kw), ref) for p in paths}


def decode_parity(model, dtype) -> str:
    model = model.to(dtype).eval()
    _, same = greedy_paths(model, ("fast", "compiled"))
    model.float()
    return f"- generate on CUDA, {str(dtype)[6:]} weights, batch 4, 40 greedy tokens: " + ", ".join(
        f"{p} == forward: {s}" for p, s in same.items()
    )


def speller_on_cuda(folder: Path, device: str = "cuda") -> str:
    """Check 5 (`device` "cpu" tries the check itself on a machine without a GPU)."""
    from transformers import AutoTokenizer

    from modeling_pointer_sentinel import PointerSentinelForCausalLM
    from modeling_pointer_sentinel.spelling import WORD_KINDS, WordKinds, word_ends

    tok = AutoTokenizer.from_pretrained(folder)
    cpu = PointerSentinelForCausalLM.from_pretrained(folder).eval()
    gpu = PointerSentinelForCausalLM.from_pretrained(folder).to(device).eval()
    V = tok.word_vocab_size
    text = "the zorblaxian company said zorblaxian shares rose and the zorblaxian board met"
    ids = tok(text, return_tensors="pt").input_ids
    with torch.no_grad():
        ref, out = cpu(ids, labels=ids), gpu(ids.to(device), labels=ids.to(device))
    logits = out.logits.float().cpu()
    ce = torch.nn.functional.cross_entropy(logits[0, :-1], ids[0, 1:]).item()
    gap, loss = (logits - ref.logits).abs().max().item(), out.loss.item()
    lines = [f"#### the speller on {device} ({folder.name}, fp32)", "",
             f"- a prompt of {ids.shape[1]} ids, {int((ids >= V).sum())} of them spelled bytes: max |logits GPU - "
             f"CPU| {gap:.2e}, loss GPU {loss:.6f} / CPU {ref.loss.item():.6f}, cross-entropy of the GPU's logits - "
             f"its loss {ce - loss:.1e}"]  # fmt: skip
    kw = dict(max_new_tokens=60, min_new_tokens=60, do_sample=False)
    for dtype in (torch.float32, torch.bfloat16):
        gpu.to(dtype)
        same = torch.equal(gpu.generate(ids.to(device), decode_step="fast", **kw),
                           gpu.generate(ids.to(device), decode_step="forward", **kw))  # fmt: skip
        lines.append(f"- greedy from the prompt, 60 tokens, {str(dtype)[6:]} weights: fast == forward: {same}")
    gpu.float()
    runs = []  # the spelled mixture sums copies by scatter_add, which CUDA does with atomics: are two runs one?
    for _ in range(2):
        out = gpu(ids.to(device), labels=ids.to(device))
        out.loss.backward()
        runs.append([out.logits.detach().clone(), *(p.grad.clone() for p in gpu.parameters() if p.grad is not None)])
        gpu.zero_grad(set_to_none=True)
    same = all(torch.equal(a, b) for a, b in zip(*runs, strict=True))
    lines.append(f"- the prompt's forward and backward twice (fp32, eval mode): logits and {len(runs[0]) - 1} "
                 f"gradients bit-equal: {same}")  # fmt: skip
    torch.manual_seed(0)
    rows = gpu.generate(ids.to(device).repeat(8, 1), do_sample=True, top_k=40, max_new_tokens=100)[:, ids.shape[1] :]
    counts = collections.Counter()
    for row in torch.cat([ids.repeat(8, 1), rows.cpu()], 1).numpy():  # each word's kind, the prompt's words skipped
        kinds = WordKinds(V, gpu.config.pointer_window)
        _, kind, _ = kinds(row)
        counts.update(WORD_KINDS[k] for k in kind[int(word_ends(ids[0].numpy(), V).sum()) :].tolist())
    first = " ".join(tok.decode(rows[0], skip_special_tokens=True).split())[:160]
    lines.append(f"- sampled (top-k 40, 8 rows x 100 tokens): {int((rows >= V).sum())} byte ids; words by kind "
                 f"{dict(counts)}; row 0: {first}")  # fmt: skip
    for dtype in (torch.float32, torch.bfloat16):
        forward, same = greedy_paths(spelling_models(10000, 200, 100, device, dtype)[2].eval(), ("fast",), device)
        share = (forward[:, 12:] >= 10000).float().mean().item()
        lines.append(f"- a random 2x200 made to spell, batch 4, 40 greedy tokens, {str(dtype)[6:]} weights: "
                     f"{share:.0%} byte ids, fast == forward: {same['fast']}")  # fmt: skip
    return "\n".join(lines) + "\n"


def cross_device_resume() -> str:
    """examples/train.py: 30 updates on one device with a checkpoint every 2, across an epoch end (so the checkpoint
    holds best weights of its own, which accelerate loads on the CPU), then `--resume_from_checkpoint latest` for 4
    more on the other device, saving twice there (each save compares the best weights with the model's); without a
    speller and with one (whose LSTM cuDNN would pack into one buffer if it were an `nn.LSTM`)."""
    import random
    import subprocess
    import tempfile

    root = Path(__file__).resolve().parents[1]
    lines = []
    for speller, (first, then) in itertools.product((["--speller_size", "0"], ["--speller_size", "16"]),
                                                    ((["--cpu"], []), ([], ["--cpu"]))):  # fmt: skip
        with tempfile.TemporaryDirectory() as out:
            rng, files = random.Random(0), {}
            for split, n in (("train", 60), ("valid", 15), ("test", 15)):  # an epoch of 24 updates
                files[split] = Path(out) / f"{split}.txt"
                files[split].write_text("\n".join(" ".join(f"w{rng.randrange(30)}" for _ in range(8)) for _ in
                                                  range(n)) + "\n")  # fmt: skip
            train = [sys.executable, str(root / "examples" / "train.py"), "--config", str(root / "examples" /
                     "configs" / "tiny_test.json"), "--checkpointing_steps", "2", "--resume_from_checkpoint", "latest",
                     "--train_file", str(files["train"]), "--validation_file", str(files["valid"]), "--test_file",
                     str(files["test"]), "--output_dir", str(Path(out) / "run"), *speller]  # fmt: skip
            runs = [subprocess.run([*train, "--max_train_steps", str(n), *flags], capture_output=True, text=True)
                    for n, flags in ((30, first), (34, then))]  # fmt: skip
            where = lambda flags: "CPU" if flags else "GPU"  # noqa: E731
            ok = all(r.returncode == 0 for r in runs) and "resuming from" in runs[1].stdout + runs[1].stderr
            tail = "" if ok else ": " + " ".join((runs[1].stderr or runs[0].stderr).split())[-300:]
            lines.append(f"- a checkpoint {'with' if speller[1] != '0' else 'without'} a speller saved on the "
                         f"{where(first)} (best weights in it) resumes on the "
                         f"{where(then)} and saves again: {ok}{tail}")  # fmt: skip
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--only", choices=["dtypes", "precision", "decode", "resume", "speller"], default=None)
    ap.add_argument("--speller_folder", default=str(Path(__file__).resolve().parents[1] / "pretrained" /
                    "ptb-pointer-sentinel-lstm-2x200"))  # fmt: skip
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        ap.error("needs a CUDA GPU")
    print(f"{torch.cuda.get_device_name()} | torch {torch.__version__} | cuDNN {torch.backends.cudnn.version()} | "
          f"cudnn enabled {torch.backends.cudnn.enabled}\n")  # fmt: skip
    model = build(10000, 650, 2, 100, True, "cuda")
    ids = torch.randint(0, 10000, (20, 35), generator=torch.Generator().manual_seed(0)).cuda()
    if args.only in (None, "dtypes"):
        for train in (True, False):
            print(lstm_dtypes(model, ids, train), flush=True)
    if args.only in (None, "precision"):
        print(lstm_precision(model, ids), flush=True)
    if args.only in (None, "speller"):
        print(speller_on_cuda(Path(args.speller_folder)), flush=True)
    if args.only in (None, "resume"):
        print(cross_device_resume(), flush=True)
    if args.only not in (None, "decode"):
        return
    for dtype in (torch.float32, torch.bfloat16):
        print(decode_parity(model, dtype), flush=True)
    print()
    for H in (200, 650):
        m = build(10000, H, 2, 100, True, "cuda")
        fp32 = hf_trainer(m, 32, 35, 10, "cuda")

        def bf16(fp32=fp32):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                return fp32()

        compare(f"train targets/s, bf16 autocast / fp32, B=32 T=35 (2x{H}, V=10000, L=100)", bf16, fp32,
                args.reps, "targets/s", "cuda")  # fmt: skip


if __name__ == "__main__":
    main()
