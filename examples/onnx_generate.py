r"""Generate with a decode step exported by examples/export_onnx.py, on ONNX Runtime: no PyTorch.

    python examples/onnx_generate.py onnx/wt2 --prompt "Zelenskyy met Macron in Kyiv. Later, Zelenskyy said" \
        --max_new_tokens 30
    python examples/onnx_generate.py onnx/ptb --int8 --prompt "the company said" --do_sample --temperature 0.8 \
        --top_k 50 --seed 0

Needs onnxruntime, numpy and transformers' tokenizer side (it runs without PyTorch). A prompt is read by the folder's
own tokenizer, as `pipeline("text-generation")` reads it, and nothing is put before it: each word the vocabulary lacks
gets a placeholder id, which the exported step can copy, and the output writes the copied words back from the prompt's
table (`BatchEncoding.oov_words`; one table per prompt, so a batch never mixes them up). The folder's tokenizer is
remote code (exported beside the graph), so it is loaded with `trust_remote_code=True`.

A folder with a speller (`config.speller_size`: its tokenizer spells each word the vocabulary lacks in bytes,
closed by `</w>`) has two graphs, the word step (decode_step.onnx) and the byte step inside a word (spell_step.onnx),
and each row steps on its own (`SpelledSteps`): its words in progress and its slots are Python state, as in PyTorch's
one-row spelled step. Such a folder writes new words in bytes and copies the prompt's, and its ids carry them (no
table).

Greedy decoding gives the tokens `model.generate(do_sample=False)` gives in PyTorch, and the text that
`pipeline("text-generation")` gives: the same step, the same suppressed tokens (generation_config.json's
`suppress_tokens`, e.g. <unk>), the same end (generation_config.json's `eos_token_id`; the shipped folders name none,
so only --max_new_tokens ends a sample, and an <eos> inside one is a line break), and the same text for the new tokens
(the pipeline's: what decoding prompt + new adds to the prompt). Sampling draws from numpy's generator (temperature,
then top-k), so its samples differ from PyTorch's for the same seed.
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # cli.py beside this script, however it is launched
from cli import ArgumentParser, check_ranges, describe_ranges  # noqa: E402

RANGES = [  # checked by cli.check_ranges (a float must also be finite), one error line naming the flag
    ("--max_new_tokens", lambda v: v >= 1, ">= 1"),
    ("--temperature", lambda v: v > 0, "a number > 0"),
    ("--top_k", lambda v: v >= 0, ">= 0 (0: off)"),
    ("--seed", lambda v: v >= 0, ">= 0"),
    ("--threads", lambda v: v >= 1, ">= 1"),
]


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


# The model's spelling symbols after the V words (modeling_pointer_sentinel.py's SPELL_END, SPELL_CONT, SPELL_SYMBOLS)
SPELL_END, SPELL_CONT, SPELL_SYMBOLS = 256, 257, 258


class SpelledWords:
    """One row's spelled words, as the model's `SpelledRow` keeps them (tests/test_onnx_spelled.py holds the two
    alike): the word in progress, and each distinct word's slot, reused once its word is the least recent."""

    def __init__(self):
        self.slots, self.last_seen, self.word, self.clock = {}, {}, [], 0

    def slot(self, spelling: tuple, n: int) -> int:
        k = self.slots.get(spelling)
        if k is None:
            if len(self.slots) < n:
                k = len(self.slots)
            else:
                k = min(self.last_seen, key=self.last_seen.get)
                del self.slots[next(w for w, j in self.slots.items() if j == k)]
            self.slots[spelling] = k
        self.last_seen[k], self.clock = self.clock, self.clock + 1
        return k


class SpelledSteps:
    """The two graphs of a folder with a speller, one row at a time: a byte (or `<+w>`) is the byte step, a word (a
    vocabulary id, or `</w>` read as its word's slot V + k) the word step, as the model's `spelled_decode_step` reads
    them. A row's state is a dict of arrays (batch 1) and its `SpelledWords`; the state before the first token is
    spell_start.npz (the speller started from a zero h_t, as forward starts), zeros for the rest."""

    def __init__(self, word, byte, vocab_size: int, oov_slots: int, start: dict):
        self.word, self.byte, self.V, self.n, self.start = word, byte, vocab_size, oov_slots, start
        self.word_in = [i.name for i in word.get_inputs()]
        self.byte_in = [i.name for i in byte.get_inputs()]
        self.word_out = [o.name.removesuffix(".out") for o in word.get_outputs()]
        self.byte_out = [o.name.removesuffix(".out") for o in byte.get_outputs()]
        self.K = word.get_inputs()[1].shape[-1]  # a copied word's places: `spelling` (B, K)

    def empty(self) -> dict:
        dtypes = {"tensor(float)": np.float32, "tensor(int64)": np.int64, "tensor(bool)": np.bool_}
        state = {i.name: np.zeros([1 if not isinstance(d, int) else d for d in i.shape], dtypes[i.type])
                 for i in self.word.get_inputs()[2:]}  # fmt: skip
        return {**state, **{k: v.copy() for k, v in self.start.items()}, "words": SpelledWords()}

    def step(self, token: int, state: dict) -> np.ndarray:
        """One token of one row: log p (1, V + SPELL_SYMBOLS) of the next; `state` updated."""
        row, s = state["words"], token - self.V
        if 0 <= s < SPELL_SYMBOLS and s != SPELL_END:  # inside a word
            if s == SPELL_CONT and (not row.word or row.word[-1] == SPELL_CONT):
                raise ValueError("`<+w>` must follow a spelled byte.")
            row.word.append(s)
            sess, names, feed = self.byte, self.byte_out, {}
        else:
            if s == SPELL_END:
                if not row.word or row.word[-1] == SPELL_CONT:
                    raise ValueError("`</w>` must close a spelled word: it follows no byte here.")
                spelling, row.word = (*row.word, SPELL_END), []
                token = self.V + row.slot(spelling, self.n)
            elif row.word:
                raise ValueError("A spelled word must end with `</w>` before the next word.")
            else:
                spelling = ()
            kept = np.full((1, self.K), -1, np.int64)  # a word too long to copy is spelled, never copied
            if len(spelling) <= self.K:
                kept[0, : len(spelling)] = spelling
            sess, names, feed = self.word, self.word_out, {"spelling": kept}
            if "held_slots" in self.word_in:  # the slots whose ids are spelled words, the word's own included
                ids = state["window_ids"][0].copy() if "window_ids" in state else np.zeros(1, np.int64)
                ids[int(state.get("window_slot", 0))] = token
                held = np.flatnonzero(ids >= self.V)
                feed["held_slots"] = held if held.size else np.zeros(1, np.int64)
        inputs = self.byte_in if sess is self.byte else self.word_in
        feed |= {n: state[n] for n in inputs if n not in ("input_ids", "spelling", "held_slots")}
        out = sess.run(None, {"input_ids": np.array([token], np.int64), **feed})
        state.update(zip(names[1:], out[1:], strict=True))
        return out[0]


class OnnxPointerSentinel:
    """The exported decode step and its state, as numpy arrays: `prefill` a prompt, then `generate`."""

    def __init__(self, folder, int8: bool = False, threads: int = 1):
        from transformers import AutoTokenizer

        folder = Path(folder)
        path = folder / ("decode_step.int8.onnx" if int8 else "decode_step.onnx")
        spell = folder / ("spell_step.int8.onnx" if int8 else "spell_step.onnx")
        for p in (path, spell) if (folder / "spell_start.npz").is_file() else (path,):
            if not p.is_file():
                raise FileNotFoundError(f"{p} is missing: run examples/export_onnx.py{' --int8' if int8 else ''}")
        self.session = session(path, threads)
        self.inputs = self.session.get_inputs()
        self.names = [i.name for i in self.inputs[1:]]
        self.width = self.session.get_outputs()[0].shape[-1]  # V + the placeholders the graph scores
        self.tokenizer = AutoTokenizer.from_pretrained(str(folder), trust_remote_code=True)
        config = folder / "generation_config.json"
        gen = json.loads(config.read_text()) if config.is_file() else {}
        eos = gen.get("eos_token_id")
        self.eos = set(eos if isinstance(eos, list) else [] if eos is None else [eos])
        self.pad = gen.get("pad_token_id", next(iter(self.eos), 0))
        self.suppress = list(gen.get("suppress_tokens") or [])
        # With <unk>, each row's next unused slot V + k (state oov_used = k): a new word, with no spelling to write
        model = json.loads((folder / "config.json").read_text())
        self.vocab_size, self.oov_slots = model["vocab_size"], model.get("oov_slots", 0)
        self.spelled = None  # with a speller: its columns after V are spelling symbols, no slots
        if (folder / "spell_start.npz").is_file():
            start = dict(np.load(folder / "spell_start.npz"))
            self.spelled = SpelledSteps(self.session, session(spell, threads), self.vocab_size, self.oov_slots, start)
        new_slot = "oov_used" in self.names and model.get("unk_token_id") in self.suppress and not self.spelled
        self.new_slot = self.names.index("oov_used") if new_slot else None

    def encode(self, text: str) -> tuple[list[int], list[str]]:
        """A prompt's ids and its table of out-of-vocabulary words (index k: the word of id V + k), as the pipeline
        reads it; a placeholder the graph has no column for reads as <unk>, as the pipeline reads it."""
        enc = self.tokenizer(text, add_special_tokens=False)
        tables = getattr(enc, "oov_words", None)
        unk = self.tokenizer.unk_token_id
        ids = [unk if int(i) >= self.width else int(i) for i in enc["input_ids"]]
        return ids, list(tables[0]) if tables else []

    def text(self, prompt: str, prompt_ids: list[int], new: list[int], table: list[str]) -> str:
        """The prompt and its continuation, as `pipeline("text-generation")` writes them: the continuation is what
        decoding prompt + new adds to decoding the prompt (the text rules' joins come out as in running text), with
        the prompt's table for the copied words; the run of end and padding tokens that closes it is dropped."""
        ends = {self.tokenizer.eos_token_id, self.tokenizer.pad_token_id}
        new = list(new)
        while new and new[-1] in ends:
            new.pop()
        kw = {} if self.spelled else {"oov_words": table}  # the prompt's own table, also when empty (the ids carry
        # a spelled folder's words)
        head, whole = self.tokenizer.decode(prompt_ids, **kw), self.tokenizer.decode(prompt_ids + new, **kw)
        more = whole[len(head) :] if whole.startswith(head) else " " + self.tokenizer.decode(new, **kw)
        return prompt + (more.removeprefix(" ") if prompt[-1:].isspace() else more)

    def empty_state(self, batch: int) -> list:
        """Zeros for every state input, the batch dimension set: the state before the first token (with a speller,
        each row's own state, `SpelledSteps.empty`)."""
        if self.spelled:
            return [self.spelled.empty() for _ in range(batch)]
        dtypes = {"tensor(float)": np.float32, "tensor(int64)": np.int64, "tensor(bool)": np.bool_}
        return [np.zeros([batch if not isinstance(d, int) else d for d in i.shape], dtypes[i.type])
                for i in self.inputs[1:]]  # fmt: skip

    def step(self, ids: np.ndarray, state: list) -> tuple[np.ndarray, list]:
        if self.spelled:  # row by row: each row's words and bytes interleave differently
            return np.concatenate([self.spelled.step(int(i), row) for i, row in zip(ids, state, strict=True)]), state
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
        if self.spelled:
            return [row for s in states for row in s]
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
            if self.new_slot is not None:
                k = state[self.new_slot]
                rows = np.flatnonzero(k < self.oov_slots)
                scores[rows, self.vocab_size + k[rows]] = -np.inf
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
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folder", help="a folder written by examples/export_onnx.py")
    p.add_argument("--prompt", action="append", required=True, help="repeat for a batch")
    p.add_argument("--int8", action="store_true", help="use decode_step.int8.onnx")
    p.add_argument("--max_new_tokens", type=int, default=30)
    p.add_argument("--do_sample", action="store_true")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top_k", type=int, default=0)
    p.add_argument("--seed", type=int)
    p.add_argument("--threads", type=int, default=1)
    describe_ranges(p, RANGES)
    args = p.parse_args(argv)
    check_ranges(p, args, RANGES)
    if not Path(args.folder).is_dir():
        p.error(f"{args.folder}: no such folder (give a folder written by examples/export_onnx.py)")
    try:
        lm = OnnxPointerSentinel(args.folder, args.int8, args.threads)
    except (FileNotFoundError, ImportError) as e:
        p.error(str(e))
    # The prompt as the pipeline reads it, nothing before it: the same prompt gives the same text through both (start
    # it with a line break to start a line, as every training line does).
    prompts = [lm.encode(text) for text in args.prompt]
    for n, (ids, _) in enumerate(prompts, 1):
        if not ids:
            which = f"--prompt number {n}" if len(prompts) > 1 else "--prompt"
            p.error(f"{which} has no words to continue: give text, e.g. a line break and a few words")
    new = lm.generate([ids for ids, _ in prompts], args.max_new_tokens, args.do_sample, args.temperature, args.top_k,
                      args.seed)  # fmt: skip
    for text, (ids, table), row in zip(args.prompt, prompts, new, strict=True):
        print(lm.text(text, ids, row, table))


if __name__ == "__main__":
    main()
