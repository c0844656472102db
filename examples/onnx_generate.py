r"""Generate with a decode step exported by examples/export_onnx.py, on ONNX Runtime: no PyTorch, no transformers.

    python examples/onnx_generate.py onnx/ptb --prompt "the company said" --max_new_tokens 30
    python examples/onnx_generate.py onnx/ptb --int8 --prompt "the company said" --do_sample --temperature 0.8 \
        --top_k 50 --seed 0

Needs onnxruntime, numpy and tokenizers only. Greedy decoding gives the tokens `model.generate(do_sample=False)`
gives in PyTorch: the same step, the same suppressed tokens (generation_config.json's `suppress_tokens`, e.g.
<unk>), and each row ends at its first end-of-sequence token. Sampling draws from numpy's generator (temperature,
then top-k), so its samples differ from PyTorch's for the same seed.
"""

import argparse
import json
from pathlib import Path

import numpy as np


def session(path, threads: int = 1):
    """An ONNX Runtime CPU session on `threads` threads."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = threads
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def run_step(sess, names: list[str], ids: np.ndarray, state: list[np.ndarray]):
    """One decode step: ids (B,) and the state arrays, named `names` -> (log p (B, V), the new state)."""
    out = sess.run(None, {"input_ids": ids, **dict(zip(names, state, strict=True))})
    return out[0], out[1:]


class OnnxPointerSentinel:
    """The exported decode step and its state, as numpy arrays: `prefill` a prompt, then `generate`."""

    def __init__(self, folder, int8: bool = False, threads: int = 1):
        from tokenizers import Tokenizer

        folder = Path(folder)
        path = folder / ("decode_step.int8.onnx" if int8 else "decode_step.onnx")
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing: run examples/export_onnx.py{' --int8' if int8 else ''}")
        self.session = session(path, threads)
        self.inputs = self.session.get_inputs()
        self.names = [i.name for i in self.inputs[1:]]
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        config = folder / "generation_config.json"
        gen = json.loads(config.read_text()) if config.is_file() else {}
        eos = gen.get("eos_token_id")
        self.eos = set(eos if isinstance(eos, list) else [] if eos is None else [eos])
        self.pad = gen.get("pad_token_id", next(iter(self.eos), 0))
        self.suppress = list(gen.get("suppress_tokens") or [])

    def empty_state(self, batch: int) -> list[np.ndarray]:
        """Zeros for every state input, the batch dimension set: the state before the first token."""
        dtypes = {"tensor(float)": np.float32, "tensor(int64)": np.int64, "tensor(bool)": np.bool_}
        return [np.zeros([batch if not isinstance(d, int) else d for d in i.shape], dtypes[i.type])
                for i in self.inputs[1:]]  # fmt: skip

    def step(self, ids: np.ndarray, state: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
        return run_step(self.session, self.names, ids, state)

    def prefill(self, prompt: list[int]) -> tuple[np.ndarray, list[np.ndarray]]:
        """One prompt, token by token from the empty state: log p of the next token (1, V) and the state."""
        if not prompt:
            raise ValueError("The prompt is empty: give at least one token.")
        state = self.empty_state(1)
        for token in prompt:
            log_p, state = self.step(np.array([token], dtype=np.int64), state)
        return log_p, state

    def _stack(self, states: list[list[np.ndarray]]) -> list[np.ndarray]:
        """Rows prefilled apart, as one batch. Each row's window ring is rotated to start at slot 0 (the attention is
        a softmax over the slots, so their order does not matter), which lets the rows share one slot."""
        names = self.names
        if "window_slot" not in names:
            return [np.concatenate(parts) for parts in zip(*states, strict=True)]
        at = names.index("window_slot")
        rows = []
        for s in states:
            shift = -int(s[at])
            rows.append([np.roll(t, shift, axis=1) if n.startswith("window_") and t.ndim > 1 else t
                         for n, t in zip(names, s, strict=True)])  # fmt: skip
        stacked = [np.concatenate(parts) if n != "window_slot" else np.array(0, np.int64)
                   for n, parts in zip(names, zip(*rows, strict=True), strict=True)]  # fmt: skip
        return stacked

    def generate(self, prompts: list[list[int]], max_new_tokens: int, do_sample: bool = False,
                 temperature: float = 1.0, top_k: int = 0, seed: int | None = None) -> list[list[int]]:  # fmt: skip
        """The new tokens of each prompt, up to and including its first end-of-sequence token."""
        rng = np.random.default_rng(seed)
        first = [self.prefill(p) for p in prompts]
        log_p, state = np.concatenate([f[0] for f in first]), self._stack([f[1] for f in first])
        done = np.zeros(len(prompts), dtype=bool)
        new = []
        for i in range(max_new_tokens):
            scores = log_p.astype(np.float64)
            scores[:, self.suppress] = -np.inf
            if do_sample:
                scores = scores / temperature
                if top_k:
                    kth = np.sort(scores, -1)[:, -min(top_k, scores.shape[-1]), None]
                    scores = np.where(scores < kth, -np.inf, scores)
                p = np.exp(scores - scores.max(-1, keepdims=True))
                p /= p.sum(-1, keepdims=True)
                tokens = np.array([rng.choice(p.shape[-1], p=row) for row in p])
            else:
                tokens = scores.argmax(-1)
            tokens = np.where(done, self.pad, tokens).astype(np.int64)
            new.append(tokens)
            done |= np.isin(tokens, list(self.eos))
            if done.all() or i == max_new_tokens - 1:
                break
            log_p, state = self.step(tokens, state)
        out = np.stack(new, 1)
        result = []
        for row in out.tolist():
            ends = [j for j, t in enumerate(row) if t in self.eos]
            result.append(row[: ends[0] + 1] if ends else row)
        return result


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folder", help="a folder written by examples/export_onnx.py")
    p.add_argument("--prompt", action="append", required=True, help="repeat for a batch")
    p.add_argument("--int8", action="store_true", help="use decode_step.int8.onnx")
    p.add_argument("--max_new_tokens", type=int, default=30)
    p.add_argument("--do_sample", action="store_true")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top_k", type=int, default=0)
    p.add_argument("--seed", type=int)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    if args.max_new_tokens < 1 or args.temperature <= 0 or args.top_k < 0 or args.threads < 1:
        p.error("--max_new_tokens and --threads must be >= 1, --temperature > 0, --top_k >= 0")
    try:
        lm = OnnxPointerSentinel(args.folder, args.int8, args.threads)
    except (FileNotFoundError, ImportError) as e:
        p.error(str(e))
    # Every training line follows an end-of-sequence token: a prompt starts a line, as in examples/generate.py.
    eos = min(lm.eos) if lm.eos else None
    prompts = [lm.tokenizer.encode(text, add_special_tokens=False).ids for text in args.prompt]
    prompts = [ids if eos is None or ids[:1] == [eos] else [eos, *ids] for ids in prompts]
    for text, ids in zip(args.prompt, prompts, strict=True):
        if not ids:
            p.error(f"the prompt {text!r} has no tokens")
    for text, new in zip(args.prompt, lm.generate(prompts, args.max_new_tokens, args.do_sample, args.temperature,
                                                  args.top_k, args.seed), strict=True):  # fmt: skip
        print((text.strip() + lm.tokenizer.decode(new, skip_special_tokens=True).rstrip()).strip())


if __name__ == "__main__":
    main()
