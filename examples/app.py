r"""See the pointer work: a Gradio page for the shipped models.

    pip install -e ".[demo]" && python examples/app.py [--model FOLDER] [--port 7860] [--host 127.0.0.1]

Generate: a continuation streams in word by word (a word the vocabulary lacks is spelled in bytes by a folder with a
speller, shown in italics as its bytes arrive, then as one word), each word coloured by the share of its probability
that came from the pointer; a word is underlined as copied when the pointer gave at least half of it, boxed when the
vocabulary lacks it, solid-boxed when the model coined it (new to the text). Clicking a word shows the moment it was
written, as the paper's Figures 5-12 draw it: the window coloured by the pointer's attention, the gate g, and the top
next words split into vocabulary, pointer and speller (new-word) parts; the folder's twin with or without the pointer
continues the same prompt with the same settings beside it. Score: per-word surprisal and pointer share of a pasted
or uploaded text, its word perplexity, unseen-word rate and the words where the pointer helped most (against the same
model with the pointer off). Every number comes from `modeling_pointer_sentinel.inspection` over the model's own
outputs. The API (`gradio_client`) has `/generate` and `/score`, which return those numbers as JSON, and
`/generate_stream`, which yields each whole word as it is written, then /generate's answer (`max_new_words` ends a
continuation at that many words). Decoding defaults to top-k 40 sampling (seed 0), the shipped generation_config.json's
choice (examples/repetition.py). Up to --concurrency requests (default 4) run at once, each sampling from a generator
of its own; the rest wait in Gradio's queue. Bad input gets a message, never a stack trace.
"""

import html
import math
import os
import queue
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))  # cli.py beside this script, however it is launched
from cli import ArgumentParser, check_model_folder, check_ranges, describe_ranges, fail, non_negative  # noqa: E402

PRETRAINED = ROOT / "pretrained"
DEFAULT_MODEL, DEFAULT_PLAIN = "pretrained/wt2-pointer-sentinel-lstm-2x200", "pretrained/wt2-lstm-2x200"
# Gradio binds the port it is given and names it in its URL: 0 would not mean "any free port" there
RANGES = [("--port", lambda v: 1 <= v <= 65535, "in [1, 65535]"), ("--num_threads", non_negative, ">= 0"),
          ("--concurrency", lambda v: 1 <= v <= 64, "in [1, 64]")]  # fmt: skip
# Requests that run the model at once (Gradio's queue; the rest wait their turn): a request's work is many small
# steps that hold the GIL, so on 2 cores more at once share the same CPU; several at once let each start at once
# (its first word) rather than after every request before it (benchmarks/load.py)
CONCURRENCY = 4


def parse_args(argv=None):
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help=f"the folder shown first (any model folder; default: this checkout's "
                        f"{DEFAULT_MODEL}, wherever the app is started)")  # fmt: skip
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=7860)
    parser.add_argument(
        "--num_threads",
        type=int,
        default=1 if (os.cpu_count() or 1) <= 4 else 0,
        help="torch threads (0: torch's default; 1 on a machine of up to 4 cores)",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=CONCURRENCY,
        help="requests that run the model at once; the rest wait in Gradio's queue (default %(default)s)",
    )
    describe_ranges(parser, RANGES)
    args = parser.parse_args(argv)
    check_ranges(parser, args, RANGES)
    if args.model is None:  # the checkout's folder: a default relative to the working directory fails elsewhere
        args.model = str(ROOT / DEFAULT_MODEL)
    check_model_folder(parser, "--model", args.model)  # a folder the user names: relative to the working directory
    return args


if __name__ == "__main__":  # a mistaken command line fails here, before the imports below (gradio, torch: seconds)
    parse_args()

import gradio as gr  # noqa: E402
import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402
from transformers.generation.logits_process import (  # noqa: E402
    LogitsProcessor,
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)
from transformers.generation.streamers import BaseStreamer  # noqa: E402

from modeling_pointer_sentinel.inspection import (  # noqa: E402
    Explanation,
    explain,
    new_word_mass,
    spelled_parts,
    spelled_top,
    spelling_log_prob,
    top_words,
    word_model,
    word_steps,
)

PROMPT = "\nThe Quarrington River flows through Esselbrook. In 1850, the town of Esselbrook"
MODES = ["greedy", "sample", "beam"]
# The default decoding, the shipped generation_config.json's: chosen by examples/repetition.py on validation prompts
# (results/repetition/): greedy loops ("the Quarrington of the Quarrington of ..."); top-k 40 sampling repeats 4-grams
# about as often as the human text does, and the pointer still copies names
DEFAULT_MODE, DEFAULT_TEMPERATURE, DEFAULT_TOP_K, DEFAULT_TOP_P = "sample", 1.0, 40, 1.0
MAX_NEW_TOKENS, MAX_PROMPT_WORDS, MAX_SCORE_WORDS, MAX_UPLOAD_BYTES = 200, 1000, 5000, 2_000_000
TOP_K, CHUNK, COPIED = 10, 256, 0.5  # a word is copied when the pointer gave at least half its probability
MAX_SEED = 2**32 - 1


class InputError(ValueError):
    """Input the page answers with a message (the message is the exception's text)."""


# ---- models -----------------------------------------------------------------------------------------------------


class Models:
    """The folders the page serves, pretrained/'s and --model's, each loaded once by remote code. Only these: a
    folder's remote code runs on load, so a typed path must not reach `from_pretrained`."""

    def __init__(self, extra=()):
        found = [p for p in sorted(PRETRAINED.iterdir()) if (p / "config.json").is_file()]
        self.folders = {self.name(p): p for p in [*found, *map(Path, extra)]}
        self.loaded, self.lock = {}, threading.Lock()

    @staticmethod
    def name(path: Path) -> str:
        path = path.resolve()
        return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)

    def get(self, folder: str):
        folder = (folder or "").strip()
        if folder not in self.folders:
            raise InputError(
                f"`{folder}` is not a model folder this page serves: pick one of pretrained/ (or start "
                "the app with --model FOLDER)."
            )
        with self.lock:
            if folder not in self.loaded:
                path = self.folders[folder]
                try:
                    model = AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True, dtype=torch.float32)
                    tok = AutoTokenizer.from_pretrained(path, trust_remote_code=True)
                except (OSError, ValueError, KeyError) as e:
                    raise InputError(f"`{folder}` is not a model folder: {str(e).splitlines()[0][:200]}") from e
                self.loaded[folder] = model.eval(), tok
            return self.loaded[folder]

    def partner(self, folder: str) -> str:
        """The twin the page compares a folder with: a pointer model's plain LSTM of the same corpus (the prefix of
        its folder's name), a plain LSTM's pointer model."""
        corpus = Path(folder).name.split("-")[0]
        plain = self.get(folder)[0].config.use_pointer
        twin = f"{corpus}-lstm-2x200" if plain else f"{corpus}-pointer-sentinel-lstm-2x200"
        found = [f for f in self.folders if Path(f).name == twin]
        return found[0] if found else DEFAULT_PLAIN if plain else DEFAULT_MODEL


def encode(model, tok, text: str) -> tuple[list[int], list[str]]:
    """The text's ids and, for a placeholder folder, its table of unseen words (placeholders past the model's columns
    read as <unk>); a spelling folder's ids carry its words (no table)."""
    enc = tok(text)
    ids = [int(i) for i in enc["input_ids"]]
    if getattr(tok, "spell_unseen", False):
        return ids, []
    limit = tok.word_vocab_size + (getattr(model.config, "oov_slots", 0) or 0)
    table = list(enc.oov_words[0]) if getattr(enc, "oov_words", None) else []
    return [i if i < limit else tok.unk_token_id for i in ids], table


NEW_WORD = "(a new word)"  # the new-word mass: a word neither the vocabulary nor the text so far holds
UNK_WORD = "<unk> (the corpus's mark for a rare word it left out)"
CONTEXT = 100  # words of the line before a word that decoding it as running text reads (quotes pair within a line)
KINDS = ("vocabulary", "copy", "new")  # a vocabulary word; an unseen word the window holds; any other unseen word


@dataclass
class Moments:
    """The moments of a row's word positions: the word-level explanation (`explain`) and, for a spelling folder,
    the copies c_j of the window's spelled words and the speller's new-word mass N (`new_word_mass`), and N with the
    pointer off, each per position."""

    e: Explanation
    log_copy: torch.Tensor | None = None  # (T, L)
    log_new: torch.Tensor | None = None  # (T,)
    log_new_without_pointer: torch.Tensor | None = None  # (T,)


class Reading:
    """One row of a folder's ids read word by word: its word steps (`word_steps`, the model's own reading: a spelled
    word's bytes and `</w>` are one word), where each word's tokens end, and each word as the running text writes it
    (`pieces`: its leading space, or none)."""

    def __init__(self, model, tok, table: list[str]):
        self.model, self.tok, self.table, self.twin = model, tok, table, word_model(model)
        self.spelled = bool(getattr(model.config, "speller_size", 0))
        self.pointer = bool(model.config.use_pointer)
        self.V, self.L = model.config.vocab_size, model.config.pointer_window
        self.ids, self.steps, self.ends, self.copyable, self.pieces = [], [], [], [], []
        self.state, self.context = None, (0, 0, "")  # read_spelled's state; (word, token, text) of the line so far

    def add(self, ids: list[int]) -> int:
        """Read on through `ids`; returns the number of words they completed."""
        steps, ends, copyable, self.state = word_steps(self.model, ids, self.state)
        base, first = len(self.ids), len(self.steps)
        self.ids += ids
        self.steps += steps
        self.ends += [base + e for e in ends]
        self.copyable += copyable
        self.pieces += [self._piece(k) for k in range(first, len(self.steps))]
        return len(steps)

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids) if self.spelled else self.tok.decode(ids, oov_words=self.table)

    def span(self, k: int) -> list[int]:
        """The token ids of word k."""
        return self.ids[self.ends[k - 1] + 1 if k else 0 : self.ends[k] + 1]

    def _line_start(self, k: int) -> bool:
        return k == 0 or self.ids[self.ends[k - 1]] == self.tok.eos_token_id

    def _piece(self, k: int) -> str:
        """Word k as the running text writes it: the text the line so far decodes to, less the text before it (a
        prefix of the tokens decodes to a prefix of the text), CONTEXT words back at most."""
        c, a, before = self.context
        if self._line_start(k) or k - c >= CONTEXT:
            c, a, before = k, self.ends[k - 1] + 1 if k else 0, ""
        whole = self.decode(self.ids[a : self.ends[k] + 1])
        piece = whole[len(before) :] if whole.startswith(before) else " " + self.decode(self.span(k)).strip(" ")
        if k == c and not self._line_start(k):  # decoding drops a text's leading space
            piece = " " + piece
        self.context = (c, a, whole)
        return piece

    def pending(self) -> str:
        """The word being spelled (its bytes so far, no `</w>` yet) as running text, or ''."""
        rest = self.ids[(self.ends[-1] + 1) if self.ends else 0 :]
        if not rest:
            return ""
        return ("" if self._line_start(len(self.steps)) else " ") + self.decode(rest).strip(" ")

    def word(self, k: int) -> str:
        """Word k as the page names it: its text (a line break as itself)."""
        return "\n" if self.pieces[k] == "\n" else self.pieces[k].strip(" ")

    def key(self, k: int):
        """What makes an unseen word the same word again: its spelling, or its placeholder."""
        return tuple(self.span(k)) if self.spelled else self.steps[k]

    def spelling(self, k: int) -> tuple | None:
        """Word k's symbols (bytes, then `</w>`) for a spelled word, else None."""
        return tuple(i - self.V for i in self.span(k)) if self.spelled and self.steps[k] >= self.V else None

    def unseen(self, k: int) -> bool:
        return self.steps[k] >= self.V

    def in_vocabulary(self, k: int) -> bool:
        """Whether word k's text is a word of the vocabulary (a spelling folder may spell one)."""
        w = self.tok.convert_tokens_to_ids(self.word(k))
        return w is not None and w < self.V and w != self.tok.unk_token_id

    def windowed(self, values: list, positions: range, fill) -> list[list]:
        """Per position t, the values of the window's L words t-L+1 ... t (fill before the row's start)."""
        return [[values[j] if j >= 0 else fill for j in range(t - self.L + 1, t + 1)] for t in positions]

    @torch.no_grad()
    def moments(self, out, positions: range, targets=None) -> Moments:
        """`explain` at word positions `positions` (the last of `self.steps`' prefix the twin's output `out` covers)
        with the spelling folder's copies and new-word mass; the vocabulary-sized fields are dropped."""
        e = explain(out, self.steps[: positions.stop], self.twin, targets, TOP_K)
        m = Moments(e)
        if self.spelled:
            e.top_ids, e.top_prob, e.top_vocab, e.top_pointer = top_words(e, TOP_K, self.V)  # spelled words apart
            copyable = torch.tensor(self.windowed(self.copyable, positions, False))
            m.log_copy, m.log_new = new_word_mass(self.model, e, copyable)
            m.log_new_without_pointer = e.log_p_without_pointer[:, self.V :].logsumexp(-1)
        e.log_p = e.log_p_vocab = e.log_p_without_pointer = None
        return m

    def name(self, w: int, t: int) -> str:
        """A word-level id as the top next words at word position t name it: never a word the text has not shown by
        then (a slot it has not used yet is the new word)."""
        if w == self.tok.unk_token_id:
            return UNK_WORD
        if w == self.tok.eos_token_id:
            return "\n"
        if w < self.V:
            return self.tok.decode([w])
        used = max((s - self.V + 1 for s in self.steps[: t + 1] if s >= self.V), default=0)
        return self.table[w - self.V] if w - self.V < min(used, len(self.table)) else NEW_WORD

    def moment(self, m: Moments, r: int, t: int) -> dict:
        """What the page shows of word position t (row r of `m`): the gate, the window with its attention, the top
        next words with their vocabulary, pointer and speller parts."""
        e = m.e
        window = [[self.pieces[j], float(a)] for j, a in zip(range(t - self.L + 1, t + 1), e.attention[r].tolist(),
                                                            strict=True) if j >= 0]  # fmt: skip
        top = [{"word": self.name(w, t), "probability": p, "vocabulary": v, "pointer": a, "speller": 0.0}
               for w, p, v, a in zip(*(x[r].tolist() for x in (e.top_ids, e.top_prob, e.top_vocab, e.top_pointer)),
                                     strict=True)]  # fmt: skip
        if self.spelled:
            spellings = self.windowed([self.spelling(k) for k in range(t + 1)], range(t, t + 1), None)[0]
            for c in spelled_top(self.model, e, r, m.log_copy, m.log_new, spellings):
                c.pop("slot")
                s = c.pop("spelling")
                word = bytes(x for x in s if x < 256).decode("utf-8", "replace") if s else NEW_WORD
                top.append({"word": word, **c})
            top = sorted(top, key=lambda c: -c["probability"])[:TOP_K]
        return {"gate": float(e.gate[r]), "has_pointer": self.pointer, "window": window if self.pointer else [],
                "top": top}  # fmt: skip

    def record(
        self,
        m: Moments,
        r: int,
        k: int,
        log_p: float,
        log_spell: float | None,
        seen: set | None = None,
        moment: bool = True,
    ) -> dict:
        """Word k written at word position k - 1 (row r of `m`) as the page shows it: its text, kind, probability (the
        model's own: its tokens' log p summed, `log_p`), the parts (vocabulary, pointer, speller), the pointer share,
        log p with the pointer off, and the moment it was written. `log_spell`: log p_spell(word) of a spelled word;
        `seen`: the unseen words shown before (an unseen word neither they nor the vocabulary hold is coined);
        `moment`: with the moment."""
        e, t, p = m.e, k - 1, math.exp(log_p)
        if self.spelled and self.unseen(k):
            hold = (e.window_ids[r] == self.steps[k]) & (m.log_copy[r] > -torch.inf)
            kind = "copy" if bool(hold.any()) else "new"
            parts = spelled_parts(e, r, m.log_copy, m.log_new, self.steps[k] if kind == "copy" else None, log_spell)
            parts.pop("probability")
            log_off = float(m.log_new_without_pointer[r]) + log_spell
        else:
            held = self.pointer and bool((e.window_ids[r] == self.steps[k]).any())
            kind = "vocabulary" if not self.unseen(k) else "copy" if held else "new"
            parts = {"vocabulary": float(e.target_vocab[r]), "pointer": float(e.target_pointer[r]), "speller": 0.0}
            log_off = float(e.target_log_prob_without_pointer[r])
        share = parts["pointer"] / p if p > 0 else 0.0
        return {
            "word": self.word(k),
            "text": self.pieces[k],
            "ids": self.span(k),
            "kind": kind,
            "unseen": self.unseen(k),
            "coined": seen is not None and self.unseen(k) and self.key(k) not in seen and not self.in_vocabulary(k),
            "copied": share >= COPIED,
            "probability": p,
            **parts,
            "pointer_share": share,
            "log_p_without_pointer": log_off,
            **(self.moment(m, r, t) if moment else {}),
        }


def log_spell_of(reading: Reading, m: Moments, rows: list[int], words: list[int]) -> list[float | None]:
    """log p_spell of each spelled word k of `words` after its position's h_t (row of `m`), None for the others."""
    pick = [(r, k) for r, k in zip(rows, words, strict=True) if reading.spelled and reading.unseen(k)]
    got = spelling_log_prob(reading.model, m.e.hidden[[r for r, _ in pick]], [reading.spelling(k) for _, k in pick])
    found = dict(zip([k for _, k in pick], got.tolist(), strict=True))
    return [found.get(k) for k in words]


# ---- generate -----------------------------------------------------------------------------------------------------


def number(name, value, lo, hi, integer=False):
    """A field's value in [lo, hi] (a whole number with `integer`), or InputError: an empty field (None), a fraction
    where a whole number belongs or a number out of range is a message, never cut to fit."""
    kind = "a whole number" if integer else "a number"
    if value is None or (isinstance(value, str) and not value.strip()):
        raise InputError(f"{name} is empty: give {kind} in [{lo:,}, {hi:,}].")
    try:
        v = float(value)
    except (TypeError, ValueError, OverflowError):
        raise InputError(f"{name} must be {kind} in [{lo:,}, {hi:,}], got {value!r}.") from None
    if not (lo <= v <= hi) or (integer and v != int(v)):
        raise InputError(f"{name} must be {kind} in [{lo:,}, {hi:,}], got {value!r}.")
    return int(v) if integer else v


def generation_settings(mode, max_new_tokens, temperature, top_k, top_p, num_beams, seed) -> tuple[dict, int]:
    """generate's settings and the seed, or InputError naming the first out of range (`number`). Every field is
    checked, the ones the mode does not read too."""

    if mode not in MODES:
        raise InputError(f"mode must be one of {', '.join(MODES)}, got {mode!r}.")
    kwargs = {"max_new_tokens": number("max_new_tokens", max_new_tokens, 1, MAX_NEW_TOKENS, integer=True)}
    sampling = {
        "temperature": number("temperature", temperature, 0.05, 10),
        "top_k": number("top_k", top_k, 0, 10_000, integer=True),
        "top_p": number("top_p", top_p, 0.01, 1),
    }
    beams = number("num_beams", num_beams, 2, 16, integer=True)
    seed = number("seed", seed, 0, MAX_SEED, integer=True)  # a torch.Generator's seed is at most 2**64 - 1
    if mode == "sample":
        kwargs |= {"do_sample": True, **sampling}
    else:
        kwargs |= {"do_sample": False, "num_beams": beams if mode == "beam" else 1}
    return kwargs, seed


def check_prompt(prompt) -> str:
    if not isinstance(prompt, str) or not prompt.strip():
        raise InputError("The prompt is empty: type a few words for the model to continue.")
    if (n := len(prompt.split())) > MAX_PROMPT_WORDS:
        raise InputError(
            f"The prompt has {n:,} words; the page takes at most {MAX_PROMPT_WORDS:,} (the pointer sees "
            "the last 100 tokens)."
        )
    return prompt


class _Closed(Exception):
    """Raised in generate's thread once its tokens' reader has gone: generate stops at its next token."""


class _TokenQueue(BaseStreamer):
    """generate's streamer: each new token into a queue, None at the end (the first put is the prompt); once `closed`
    is set, the next token ends generate (`_Closed`)."""

    def __init__(self):
        self.queue, self.prompt, self.closed = queue.Queue(), True, threading.Event()

    def put(self, value):
        if self.closed.is_set():
            raise _Closed
        if self.prompt:
            self.prompt = False
        else:
            for t in value.flatten().tolist():
                self.queue.put(t)

    def end(self):
        self.queue.put(None)


class _Draw(LogitsProcessor):
    """Sampling from a generator of the request's own, last among the processors: the token drawn from the softmax of
    the scores so far (as generate's sampling draws it), every other -inf, so that generate's greedy step takes it.
    The queue runs requests at once, and torch's global generator would mix their draws: each request's own gives the
    tokens that `torch.manual_seed(seed)` and `do_sample=True` give alone."""

    def __init__(self, seed: int):
        self.generator = torch.Generator().manual_seed(seed)

    def __call__(self, input_ids, scores):
        token = torch.multinomial(torch.softmax(scores, -1), num_samples=1, generator=self.generator)
        return torch.full_like(scores, -torch.inf).scatter_(-1, token, 0.0)


def seeded(kwargs: dict, seed: int) -> dict:
    """generate's settings with sampling drawn from a generator seeded with `seed` (`_Draw`): its warpers, in the
    order and with the off values of transformers' own, before the draw."""
    if not kwargs.get("do_sample"):
        return kwargs
    kwargs = dict(kwargs)
    temperature, top_k, top_p = (kwargs.pop(k) for k in ("temperature", "top_k", "top_p"))
    warpers = [TemperatureLogitsWarper(temperature)] if temperature != 1.0 else []
    warpers += [TopKLogitsWarper(top_k)] if top_k else []
    warpers += [TopPLogitsWarper(top_p)] if top_p < 1.0 else []
    return {**kwargs, "do_sample": False, "logits_processor": LogitsProcessorList([*warpers, _Draw(seed)])}


def new_tokens(model, ids: torch.Tensor, kwargs: dict, seed: int):
    """The continuation's tokens as generate writes them (greedy, sampling), or all at its end (beam search, which
    takes no streamer)."""
    args = dict(input_ids=ids[None], attention_mask=torch.ones_like(ids)[None], **seeded(kwargs, seed))
    if kwargs.get("num_beams", 1) > 1:
        yield from model.generate(**args)[0, len(ids) :].tolist()
        return
    streamer, failed = _TokenQueue(), []

    def run():
        try:
            model.generate(**args, streamer=streamer)
        except _Closed:
            streamer.end()
        except Exception as e:  # handed to the page's thread, which reports it
            failed.append(e)
            streamer.end()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        while (t := streamer.queue.get()) is not None:
            yield t
    finally:  # read to the end, or left early (a word limit, a closed request): no work for nobody
        streamer.closed.set()
    thread.join()
    if failed:
        raise failed[0]


@torch.no_grad()
def generate_words(
    models: Models,
    folder,
    prompt,
    mode=DEFAULT_MODE,
    max_new_tokens=50,
    temperature=DEFAULT_TEMPERATURE,
    top_k=DEFAULT_TOP_K,
    top_p=DEFAULT_TOP_P,
    num_beams=4,
    seed=0,
    max_new_words=0,
):
    """Yields (the prompt's words as running text, records so far, continuation text, the word being spelled) as each
    token arrives: every record is `Reading.record`'s view of the moment its word was written, from the model's own
    forwards over the text so far (one token per call, the cache carried): the folder's model for each token's log p,
    its word-level twin (`word_model`) at each word step for the gate, the window and the parts. `max_new_words`
    (0: none) ends it at that many whole words, if max_new_tokens has not ended it before."""
    kwargs, seed = generation_settings(mode, max_new_tokens, temperature, top_k, top_p, num_beams, seed)
    max_new_words = number("max_new_words", max_new_words, 0, MAX_NEW_TOKENS, integer=True)
    model, tok = models.get(folder)
    ids, table = encode(model, tok, check_prompt(prompt))
    reading = Reading(model, tok, table)
    reading.add(ids)
    n = len(reading.steps)
    seen = {reading.key(k) for k in range(n) if reading.unseen(k)}
    twin, words, log_p = reading.twin, [], 0.0
    out_w = twin(torch.tensor([reading.steps]), use_cache=True, logits_to_keep=1)
    out_t = out_w if twin is model else model(torch.tensor([ids]), use_cache=True, logits_to_keep=1)
    tokens = new_tokens(model, torch.tensor(ids), kwargs, seed)
    for t in tokens:
        log_p += float(torch.log_softmax(out_t.logits[0, -1].double(), -1)[t])
        if twin is not model:
            out_t = model(torch.tensor([[t]]), past_key_values=out_t.past_key_values, use_cache=True)
        if reading.add([t]):
            k = len(reading.steps) - 1
            m = reading.moments(out_w, range(k - 1, k), [reading.steps[k]])
            words.append(reading.record(m, 0, k, log_p, log_spell_of(reading, m, [0], [k])[0], seen))
            if reading.unseen(k):
                seen.add(reading.key(k))
            log_p = 0.0
            out_w = twin(torch.tensor([[reading.steps[k]]]), past_key_values=out_w.past_key_values, use_cache=True)
            if twin is model:
                out_t = out_w
        yield reading.pieces[:n], words, continuation(reading, ids), reading.pending()
        if max_new_words and len(words) >= max_new_words:
            tokens.close()  # generate stops at its next token
            return


@torch.no_grad()
def plain_continuation(
    models: Models, folder, prompt, mode, max_new_tokens, temperature, top_k, top_p, num_beams, seed
) -> str:
    """The same prompt and settings through another folder (the twin with or without the pointer): its continuation
    as running text."""
    kwargs, seed = generation_settings(mode, max_new_tokens, temperature, top_k, top_p, num_beams, seed)
    model, tok = models.get(folder)
    ids, table = encode(model, tok, check_prompt(prompt))
    reading = Reading(model, tok, table)
    reading.add(ids + list(new_tokens(model, torch.tensor(ids), kwargs, seed)))
    return continuation(reading, ids)


def continuation(reading: Reading, prompt: list[int]) -> str:
    """The text the tokens after `prompt` add to the prompt's, as running text (the text rules join across the
    boundary)."""
    return reading.decode(reading.ids)[len(reading.decode(prompt)) :]


# ---- score --------------------------------------------------------------------------------------------------------


def read_upload(path) -> str:
    """An uploaded file's text, or InputError for a binary or an over-large file."""
    data = Path(path).read_bytes()
    if len(data) > MAX_UPLOAD_BYTES:
        raise InputError(f"The file has {len(data):,} bytes; the page takes text files up to {MAX_UPLOAD_BYTES:,}.")
    try:
        if b"\x00" in data:
            raise UnicodeDecodeError("utf-8", data, 0, 1, "NUL byte")
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(
            f"`{Path(path).name}` is not a text file (UTF-8 without NUL bytes): upload plain text."
        ) from None


def _cat(parts: list[Moments]) -> Moments:
    def cat(xs):
        return None if xs[0] is None else torch.cat(xs) if isinstance(xs[0], torch.Tensor) else xs[0]

    e = Explanation(**{f: cat([getattr(p.e, f) for p in parts]) for f in Explanation.__dataclass_fields__})
    return Moments(
        e, *(cat([getattr(p, f) for p in parts]) for f in ("log_copy", "log_new", "log_new_without_pointer"))
    )


@torch.no_grad()
def token_log_probs(model, ids: list[int]) -> torch.Tensor:
    """log p of each token after the first, from the model's own logits, read in chunks with the state carried."""
    x, cache, out = torch.tensor([ids]), None, []
    for s in range(0, len(ids) - 1, CHUNK):
        e = min(s + CHUNK, len(ids) - 1)
        o = model(x[:, s:e], past_key_values=cache, use_cache=True)
        cache = o.past_key_values
        out.append(torch.log_softmax(o.logits[0].double(), -1).gather(-1, x[0, s + 1 : e + 1, None])[:, 0])
    return torch.cat(out)


@torch.no_grad()
def score_text(models: Models, folder, text) -> tuple[dict, tuple]:
    """The text's per-word surprisal (bits), kind and pointer share, its word perplexity, unseen-word rate and the
    words where the pointer helped most (log p with the pointer - log p of the same model with it off, g = 1 and an
    empty window). A spelled word is one word: its bytes' log p summed. Every word is predicted: the text follows a
    line break (<eos>), as every line of the corpus does. Also returns (reading, moments, log p, log p_spell) for the
    page's word view."""
    if not isinstance(text, str) or not text.strip():
        raise InputError("The text is empty: paste some text or upload a text file.")
    if (n := len(text.split())) > MAX_SCORE_WORDS:
        raise InputError(
            f"The text has {n:,} words; the page scores at most {MAX_SCORE_WORDS:,}: score a longer file "
            "with examples/evaluate.py --test_file."
        )
    model, tok = models.get(folder)
    ids, table = encode(model, tok, text if text.startswith("\n") else "\n" + text)
    reading = Reading(model, tok, table)
    reading.add(ids)
    steps, twin = reading.steps, reading.twin
    # the model's own log p of each word: its tokens' summed
    owner = torch.tensor([k for k in range(len(steps)) for _ in reading.span(k)])
    log_p = torch.zeros(len(steps), dtype=torch.float64).index_add_(0, owner[1:], token_log_probs(model, ids))[1:]
    cache, parts = None, []
    for s in range(0, len(steps) - 1, CHUNK):  # chunked with the state carried (= whole), to bound the memory
        e = min(s + CHUNK, len(steps) - 1)
        out = twin(torch.tensor([steps[s:e]]), past_key_values=cache, use_cache=True)
        cache = out.past_key_values
        parts.append(reading.moments(out, range(s, e), steps[s + 1 : e + 1]))
    m = _cat(parts)
    log_spell = log_spell_of(reading, m, list(range(len(steps) - 1)), list(range(1, len(steps))))
    records = [reading.record(m, t, t + 1, float(log_p[t]), log_spell[t], moment=False) for t in range(len(steps) - 1)]
    gain = torch.tensor([r["probability"] for r in records]).log() - torch.tensor(
        [r["log_p_without_pointer"] for r in records]
    )
    words = [
        {
            "word": r["word"],
            "text": r["text"],
            "kind": r["kind"],
            "surprisal_bits": -float(lp) / math.log(2),
            "pointer_share": r["pointer_share"],
            "speller_share": r["speller"] / r["probability"] if r["probability"] > 0 else 0.0,
            "gain": float(g),
        }
        for r, lp, g in zip(records, log_p, gain, strict=True)
    ]
    helped = [
        {
            "position": t,
            "word": words[t]["word"],
            "context": "".join(reading.pieces[max(0, t - 5) : t + 2]).strip(" ").replace("\n", "↵"),
            "p_with_pointer": records[t]["probability"],
            "p_without_pointer": math.exp(records[t]["log_p_without_pointer"]),
            "gain_nats": float(gain[t]),
        }
        for t in gain.argsort(descending=True)[:10].tolist()
        if gain[t] > 0 and reading.pointer
    ]
    summary = {
        "folder": folder,
        "words": len(words),
        "perplexity": math.exp(float(-log_p.mean())),
        "unseen_word_rate": sum(s >= reading.V or s == tok.unk_token_id for s in steps[1:]) / len(words),
        "words_scored": words,
        "pointer_helped_most": helped,
    }
    return summary, (reading, m, log_p.tolist(), log_spell)


# ---- the page -----------------------------------------------------------------------------------------------------

CSS = """
.ps-text { font-family: Georgia, serif; font-size: 17px; line-height: 1.9; }
.ps-text .w { padding: 1px 2px; border-radius: 3px; cursor: pointer; }
.ps-text .w.copied { text-decoration: underline 2px; font-weight: 600; }
.ps-text .w.unseen { outline: 2px dashed #7b1fa2; }
.ps-text .w.coined { outline: 2px solid #7b1fa2; }
.ps-text .spelling { color: #7b1fa2; font-style: italic; }
.ps-text .w.sel { outline: 3px solid #111; }
.ps-text .prompt { color: #666; }
.ps-window span { padding: 1px 2px; border-radius: 2px; }
.ps-bar { display: inline-block; height: 12px; vertical-align: middle; }
.ps-msg { color: #b00020; font-weight: 600; }
"""
CLICK = """element.addEventListener('click', (ev) => {
  const w = ev.target.closest('[data-i]'); if (w) trigger('click', {index: Number(w.dataset.i)}); });"""
LEGEND = (
    '<span class="ps-legend">colour: share from the pointer, <span style="background:rgba(214,39,40,0.1)">0%'
    '</span> … <span style="background:rgba(214,39,40,0.9)">100%</span>; <u><b>underlined</b></u>: copied (the '
    'pointer gave at least half its probability); <span style="outline:2px dashed #7b1fa2">boxed</span>: a word '
    'the vocabulary lacks (spelled, or a placeholder), <span style="outline:2px solid #7b1fa2">solid box</span>: '
    'coined (new to the text); <i style="color:#7b1fa2">italic</i>: being spelled; click a word for its moment</span>'
)
BARS = (("vocabulary", "#1f77b4"), ("pointer", "#d62728"), ("speller", "#9467bd"))


def _text(s: str) -> str:
    """Running text as HTML: a line break shown (↵) and kept."""
    return html.escape(s).replace("\n", "↵<br>")


def _word(i, piece: str, alpha: float, title: str, classes="w") -> str:
    """A word of running text: its leading space outside the span, the word inside."""
    word = piece.lstrip(" ")
    return (
        f'{piece[: len(piece) - len(word)]}<span class="{classes}" data-i="{i}" style="background: '
        f'rgba(214,39,40,{alpha:.3f})" title="{html.escape(title)}">{_text(word)}</span>'
    )


def _parts(r: dict) -> str:
    shown = [f"{name} {r[name]:.4g}" for name, _ in BARS if name != "pointer" or r.get("has_pointer", True)]
    return " + ".join(shown)


def words_html(prompt_pieces, words, selected=None, run="", pending="") -> str:
    """The prompt (grey) and the continuation as running text, each word coloured by its pointer share; a word being
    spelled in italics."""
    spans = []
    for i, r in enumerate(words):
        cls = "w" + " copied" * r["copied"] + " unseen" * r["unseen"] + " coined" * r.get("coined", False)
        cls += " sel" * (i == selected)
        title = f"{r['kind']}; p {r['probability']:.3g} = {_parts(r)}"
        spans.append(_word(i, r["text"], 0.05 + 0.85 * r["pointer_share"], title, cls))
    tail = f'<span class="spelling">{_text(pending)}</span>' if pending else ""
    return (
        f'<div class="ps-text" data-run="{run}"><span class="prompt">{_text("".join(prompt_pieces))}</span>'
        f"{''.join(spans)}{tail}</div>"
    )


def _bars(c: dict, width=300) -> str:
    return "".join(
        f'<span class="ps-bar" style="width:{width * c[name]:.0f}px;background:{colour}"></span>'
        for name, colour in BARS
    )


def moment_html(r: dict) -> str:
    """The moment a word was written, as the paper's Figures 5-12: the window coloured by attention, the gate, and
    the top next words split into their vocabulary (blue), pointer (red) and speller (purple: a new word spelled)
    parts. A model without a pointer says so, and shows neither gate nor window."""
    lines = []
    if "word" in r:
        share = f" (pointer share {r['pointer_share']:.1%})" if r["has_pointer"] else ""
        lines.append(f"<p><b>{_text(r['word'])}</b> ({r['kind']}): p = {r['probability']:.4g} = {_parts(r)}{share}</p>")
    if r["has_pointer"]:
        g = r["gate"]
        top = max([a for _, a in r["window"]] or [1.0]) or 1.0
        window = "".join(  # running text: each word's leading space outside its span
            f'{w[: len(w) - len(w.lstrip(" "))]}<span style="background: rgba(200,0,0,{a / top:.3f})'
            f'{";color:#fff" * (a > 0.6 * top)}" title="a = {a:.4f}">{"↵" if w == chr(10) else html.escape(w.lstrip())}'
            "</span>"
            for w, a in r["window"]
        )
        lines.append(
            f'<p class="ps-gate">gate g = {g:.3f} <span class="ps-bar" style="width:{200 * g:.0f}px;'
            f'background:#1f77b4"></span><span class="ps-bar" style="width:{200 * (1 - g):.0f}px;'
            f'background:#d62728"></span> pointer 1 − g = {1 - g:.3f}</p>'
            f"<p>pointer attention over the window ({len(r['window'])} words, oldest first):</p>"
            f'<p class="ps-window">{window}</p>'
        )
    else:
        lines.append(
            '<p class="ps-gate">This model has no pointer: every word comes from its vocabulary softmax (or its '
            "speller), and nothing is copied. Its pointer twin's continuation is beside it.</p>"
        )
    lines.append("<p>top next words (blue: vocabulary, red: pointer, purple: speller, a new word spelled):</p><table>")
    for c in r["top"]:
        lines.append(
            f"<tr><td>{'↵' if c['word'] == chr(10) else html.escape(c['word'])}</td><td>{c['probability']:.4f}</td>"
            f"<td>{_bars(c)}</td><td>{_parts({**c, 'has_pointer': r['has_pointer']})}</td></tr>"
        )
    return f'<div class="ps-moment">{"".join(lines)}</table></div>'


def compare_html(folder, text, twin, twin_text, run="", has_pointer=True) -> str:
    """The two continuations side by side, the pointer model's and its plain twin's (`run`: the click's stamp, once
    both are written)."""
    kinds = ("with the pointer", "plain LSTM, no pointer")
    names = (folder, twin) if has_pointer else (twin, folder)
    texts = (text, twin_text) if has_pointer else (twin_text, text)
    head = "".join(f"<th>{html.escape(f)} ({k})</th>" for f, k in zip(names, kinds, strict=True))
    cells = "".join(f"<td>{_text(t)}</td>" for t in texts)
    return f"<table class='ps-compare' data-run='{run}'><tr>{head}</tr><tr>{cells}</tr></table>"


def message(text: str) -> str:
    return f'<p class="ps-msg">⚠ {html.escape(text)}</p>'


def failure(e: Exception) -> str:
    """A message for the page: the input's fault in its own words; anything else named, its trace to the log."""
    if isinstance(e, InputError):
        return message(str(e))
    traceback.print_exc()
    return message(f"Something went wrong ({type(e).__name__}: {str(e)[:200]}); the page still works: try again.")


def score_html(summary: dict, has_pointer: bool = True) -> str:
    words = summary["words_scored"]
    bits = [
        _word(i, w["text"], min(w["surprisal_bits"] / 20, 1), f"{w['kind']}; {w['surprisal_bits']:.1f} bits")
        for i, w in enumerate(words)
    ]
    share = [
        _word(
            i,
            w["text"],
            0.05 + 0.85 * w["pointer_share"],
            f"{w['kind']}; pointer share {w['pointer_share']:.1%}",
            "w" + " unseen" * (w["kind"] != "vocabulary"),
        )  # fmt: skip
        for i, w in enumerate(words)
    ]
    rows = "".join(
        f"<tr><td><b>{html.escape(h['word'])}</b></td><td>{html.escape(h['context'])}</td>"
        f"<td>{h['p_with_pointer']:.4g}</td><td>{h['p_without_pointer']:.4g}</td><td>{h['gain_nats']:+.2f}</td></tr>"
        for h in summary["pointer_helped_most"]
    )
    helped = (
        "<p>where the pointer helped most (log p with it − log p of the same model with it off):</p>"
        "<table class='ps-helped'><tr><th>word</th><th>context</th><th>p</th><th>p, pointer off</th>"
        f"<th>gain (nats)</th></tr>{rows}</table>"
        if has_pointer
        else "<p>This model has no pointer: nothing is copied (score the text with its pointer twin to compare).</p>"
    )
    return (
        f'<p class="ps-stats">{summary["words"]:,} words · word perplexity <b>{summary["perplexity"]:.2f}</b> · '
        f"unseen-word rate <b>{summary['unseen_word_rate']:.1%}</b></p>"
        f'<p>surprisal (white 0 → red 20 bits):</p><div class="ps-text">{"".join(bits)}</div>'
        f'<p>pointer share (white 0% → red 100%; click a word for its moment):</p><div class="ps-text" '
        f'id="score-words">{"".join(share)}</div>{helped}'
    )


def describe(models: Models, folder: str) -> str:
    """What the page says of a folder once loaded: a pointer model's window, or that a plain LSTM has no pointer (and
    which twin Generate compares it with); how it writes the words its vocabulary lacks."""
    model, _ = models.get(folder)
    c = model.config
    speller = (", a speller (a word the vocabulary lacks is spelled in bytes)" if getattr(c, "speller_size", 0)
               else ", placeholders for the words the vocabulary lacks")  # fmt: skip
    if not c.use_pointer:
        return (
            f"Loaded {folder}: a plain LSTM, no pointer{speller}, vocabulary {c.vocab_size:,}. It copies nothing; "
            f"Generate shows its pointer twin {models.partner(folder)} beside it."
        )
    return f"Loaded {folder}: pointer sentinel, window L = {c.pointer_window}{speller}, vocabulary {c.vocab_size:,}."


def build(models: Models, default_model=DEFAULT_MODEL) -> gr.Blocks:
    names = ["mode", "max_new_tokens", "temperature", "top_k", "top_p", "num_beams", "seed", "max_new_words"]

    def on_load(folder):
        try:
            return describe(models, folder)
        except Exception as e:
            return failure(e)

    def on_generate(folder, prompt, *settings):
        t0, words, cleared = time.perf_counter(), [], ("", "", "")
        run = f"{time.time():.6f}"  # marks this click's renders (benchmarks/app.py times them)
        try:
            twin, has_pointer = models.partner(folder), models.get(folder)[0].config.use_pointer
            for prompt_pieces, words, mine, pending in generate_words(models, folder, prompt, *settings):
                yield (
                    words_html(prompt_pieces, words, run=run, pending=pending),
                    "",
                    compare_html(folder, mine, twin, "…", has_pointer=has_pointer),
                    f'<span class="ps-status" data-run="{run}">{len(words)} words…</span>',
                    words,
                )
            if not words:
                raise InputError("The model wrote no whole word: raise max_new_tokens (a spelled word is its bytes).")
            copied = [i for i, r in enumerate(words) if r["copied"]]
            first = copied[0] if copied else 0
            coined = sum(r["coined"] for r in words)
            status = (
                f'<span class="ps-status" data-run="{run}">{len(words)} words in {time.perf_counter() - t0:.2f} s; '
                f"{len(copied)} copied, {sum(r['unseen'] for r in words)} the vocabulary lacks, {coined} coined. "
                "Click a word.</span>"
            )
            yield (words_html(prompt_pieces, words, first, run, pending), moment_html(words[first]), gr.skip(), status,
                   words)  # fmt: skip
            text = plain_continuation(models, twin, prompt, *settings)
            yield gr.skip(), gr.skip(), compare_html(folder, mine, twin, text, run, has_pointer), status, words
        except Exception as e:  # the message alone: the last click's output would read as this one's
            yield *cleared, failure(e), []

    def on_select(words, evt: gr.EventData):
        i = getattr(evt, "index", None)
        if not words or i is None or not 0 <= int(i) < len(words):
            return gr.skip()
        return moment_html(words[int(i)])

    def on_score(folder, text, upload):
        try:
            summary, view = score_text(models, folder, read_upload(upload) if upload else text)
            return score_html(summary, view[0].pointer), "", "", view
        except Exception as e:
            return "", failure(e), "", None

    def on_score_select(view, evt: gr.EventData):
        i = getattr(evt, "index", None)
        if view is None or i is None or not 0 <= int(i) < len(view[2]):
            return gr.skip()
        reading, m, log_p, log_spell = view
        t = int(i)
        return moment_html(reading.record(m, t, t + 1, log_p[t], log_spell[t]))

    with gr.Blocks(title="Pointer Sentinel-LSTM") as demo:
        gr.Markdown(
            "## Pointer Sentinel-LSTM: see the pointer work\nThe model mixes a vocabulary softmax with a "
            "pointer over its last 100 words; the sentinel gate g sets the vocabulary's share."
        )
        with gr.Row():
            folder = gr.Dropdown(
                list(models.folders),
                value=default_model,
                label="model folder",
                allow_custom_value=True,
                elem_id="folder",
                scale=3,
            )
            loaded = gr.Markdown(elem_id="loaded")
        with gr.Tab("Generate"):
            prompt = gr.Textbox(
                PROMPT, label="prompt (start with a line break, as the corpus's lines do)", lines=2, elem_id="prompt"
            )
            with gr.Row():
                mode = gr.Radio(MODES, value=DEFAULT_MODE, label="decoding", elem_id="mode")
                max_new = gr.Number(50, label=f"max_new_tokens (1-{MAX_NEW_TOKENS})", elem_id="max_new_tokens")
                temperature = gr.Number(DEFAULT_TEMPERATURE, label="temperature (sample)")
                top_k = gr.Number(DEFAULT_TOP_K, label="top_k (sample, 0: off)")
                top_p = gr.Number(DEFAULT_TOP_P, label="top_p (sample)")
                beams = gr.Number(4, label="num_beams (beam)")
                seed = gr.Number(0, label=f"seed (0-{MAX_SEED:,})", elem_id="seed")
            button = gr.Button("Generate", variant="primary", elem_id="generate")
            status = gr.HTML(elem_id="gen-status")
            gr.HTML(LEGEND)
            text = gr.HTML(elem_id="continuation", js_on_load=CLICK)
            with gr.Row():
                moment = gr.HTML(elem_id="moment")
                compare = gr.HTML(elem_id="compare")
            words = gr.State([])
        with gr.Tab("Score"):
            score_in = gr.Textbox(label="text", lines=6, elem_id="score-text")
            upload = gr.File(label="or upload a text file", type="filepath", elem_id="score-file")
            score_button = gr.Button("Score", variant="primary", elem_id="score")
            score_status = gr.HTML(elem_id="score-status")
            score_out = gr.HTML(elem_id="score-out", js_on_load=CLICK)
            score_moment = gr.HTML(elem_id="score-moment")
            view = gr.State(None)
        settings = [mode, max_new, temperature, top_k, top_p, beams, seed]
        private = dict(api_visibility="private")
        model = dict(concurrency_id="model")  # every event that runs a model: --concurrency at once, all together
        folder.change(on_load, folder, loaded, **private, **model)
        demo.load(on_load, folder, loaded, **private, **model)
        # a click while a run streams is not dropped (Gradio's default for a click): it runs when that run ends
        last = dict(trigger_mode="always_last")
        button.click(
            on_generate, [folder, prompt, *settings], [text, moment, compare, status, words], **private, **model, **last
        )
        text.click(on_select, words, moment, **private)
        scored = [score_out, score_status, score_moment, view]
        score_button.click(on_score, [folder, score_in, upload], scored, **private, **model, **last)
        score_out.click(on_score_select, view, score_moment, **private)

        def generate(
            prompt: str,
            folder: str = default_model,
            mode: str = DEFAULT_MODE,
            max_new_tokens: int = 50,
            temperature: float = DEFAULT_TEMPERATURE,
            top_k: int = DEFAULT_TOP_K,
            top_p: float = DEFAULT_TOP_P,
            num_beams: int = 4,
            seed: int = 0,
            max_new_words: int = 0,
        ) -> dict:
            """Continue a prompt; each word (a spelled word is one) with its kind, probability, vocabulary, pointer and
            speller parts, pointer share, gate, window attention and top next words (the moment it was written).
            max_new_words (0: none) ends it at that many whole words, if max_new_tokens has not ended it before."""
            settings = [mode, max_new_tokens, temperature, top_k, top_p, num_beams, seed, max_new_words]
            *_, last = generate_stream(prompt, folder, *settings)
            return {k: v for k, v in last.items() if k != "done"}

        def generate_stream(
            prompt: str,
            folder: str = default_model,
            mode: str = DEFAULT_MODE,
            max_new_tokens: int = 50,
            temperature: float = DEFAULT_TEMPERATURE,
            top_k: int = DEFAULT_TOP_K,
            top_p: float = DEFAULT_TOP_P,
            num_beams: int = 4,
            seed: int = 0,
            max_new_words: int = 0,
        ) -> Iterator[dict]:
            """/generate as the words come: at each new whole word {"text": the continuation so far, "words": how many
            whole words, "done": false}, then /generate's answer with "done": true."""
            settings = [mode, max_new_tokens, temperature, top_k, top_p, num_beams, seed, max_new_words]
            try:
                shown, words, text = 0, [], ""
                for _, words, text, _ in generate_words(models, folder, prompt, *settings):
                    if len(words) > shown:  # a word's bytes are not news: the word they end is
                        shown = len(words)
                        yield {"text": text, "words": shown, "done": False}
                named = dict(zip(names, settings, strict=True))
                yield {"folder": folder, "text": text, "words": words, "settings": named, "done": True}
            except InputError as e:
                raise gr.Error(str(e)) from None

        def score(text: str, folder: str = default_model) -> dict:
            """Score a text: per-word surprisal (bits) and pointer share, perplexity, unseen-word rate, and the words
            where the pointer helped most."""
            try:
                return score_text(models, folder, text)[0]
            except InputError as e:
                raise gr.Error(str(e)) from None

        gr.api(generate, api_name="generate", **model)
        gr.api(generate_stream, api_name="generate_stream", **model)
        gr.api(score, api_name="score", **model)
    return demo


def main(argv=None):
    args = parse_args(argv)
    if args.num_threads:
        torch.set_num_threads(args.num_threads)
    models = Models([args.model])
    default = Models.name(Path(args.model))
    try:
        models.get(default)
        models.get(models.partner(default))  # loaded before the first click
    except InputError as e:
        fail(e)
    demo = build(models, default)
    demo.queue(default_concurrency_limit=args.concurrency, max_size=64)
    try:
        demo.launch(server_name=args.host, server_port=args.port, css=CSS, show_error=False)
    except OSError as e:  # the port is taken, or not this user's to bind
        fail(f"cannot serve on {args.host}:{args.port}: {e}")


if __name__ == "__main__":
    main()
