r"""See the pointer work: a Gradio page for the shipped models.

    pip install -e ".[demo]" && python examples/app.py [--model FOLDER] [--port 7860] [--host 127.0.0.1]

Generate: a continuation streams in word by word, each word coloured by the share of its probability that came from
the pointer; copied words are underlined, unseen words (the tokenizer's placeholders) boxed and written as spelled.
Clicking a word shows the moment it was written, as the paper's Figures 5-12 draw it: the window coloured by the
pointer's attention, the gate g, and the top next words split into vocabulary and pointer parts; the plain LSTM
continues the same prompt with the same settings beside it. Score: per-word surprisal and pointer share of a pasted or
uploaded text, its perplexity, unseen-word rate and the words where the pointer helped most. Every number comes from
`modeling_pointer_sentinel.inspection.explain` over the model's own outputs. The API (`gradio_client`) has
`/generate` and `/score`, which return those numbers as JSON. Bad input gets a message, never a stack trace.
"""

import html
import math
import os
import queue
import sys
import threading
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))  # cli.py beside this script, however it is launched
from cli import ArgumentParser, check_model_folder, check_ranges, describe_ranges, fail, non_negative  # noqa: E402

PRETRAINED = ROOT / "pretrained"
DEFAULT_MODEL, DEFAULT_PLAIN = "pretrained/wt2-pointer-sentinel-lstm-2x200", "pretrained/wt2-lstm-2x200"
# Gradio binds the port it is given and names it in its URL: 0 would not mean "any free port" there
RANGES = [("--port", lambda v: 1 <= v <= 65535, "in [1, 65535]"), ("--num_threads", non_negative, ">= 0")]


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
from transformers.generation.streamers import BaseStreamer  # noqa: E402

from modeling_pointer_sentinel.inspection import Explanation, explain  # noqa: E402

PROMPT = "\nThe Quarrington River flows through Esselbrook. In 1850, the town of Esselbrook"
MODES = ["greedy", "sample", "beam"]
MAX_NEW_TOKENS, MAX_PROMPT_WORDS, MAX_SCORE_WORDS, MAX_UPLOAD_BYTES = 200, 1000, 5000, 2_000_000
TOP_K, CHUNK, COPIED = 10, 256, 0.5  # a word is copied when the pointer gave at least half its probability


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

    def plain_partner(self, folder: str) -> str:
        """The plain LSTM of the pointer model's corpus (the prefix of its folder's name)."""
        corpus = Path(folder).name.split("-")[0]
        plain = [f for f in self.folders if Path(f).name == f"{corpus}-lstm-2x200"]
        return plain[0] if plain else DEFAULT_PLAIN


def encode(model, tok, text: str) -> tuple[torch.Tensor, list[str]]:
    """The text's ids (1-D) and its table of unseen words; placeholders past the model's columns read as <unk>."""
    enc = tok(text, return_tensors="pt")
    ids = enc.input_ids[0]
    limit = tok.word_vocab_size + (getattr(model.config, "oov_slots", 0) or 0)
    return ids.masked_fill(ids >= limit, tok.unk_token_id), list(enc.oov_words[0]) if enc.oov_words else []


NEW_WORD = "(a new word)"  # a slot the text has not used: the column of a word neither it nor the vocabulary holds


def spell(tok, i: int, table: list[str]) -> str:
    """A token as the reader sees it: an unseen word in its own spelling, <eos> as a line break."""
    k = i - tok.word_vocab_size
    if k >= len(table):  # `table` holds every slot the text has used
        return NEW_WORD
    if k >= 0:
        return table[k]
    return "\n" if i == tok.eos_token_id else tok.decode([i])


def record(tok, table, e: Explanation, t: int, token: int | None) -> dict:
    """What the page shows of position t of an explanation: the word `token` written there (if any), its parts, the
    window and the top next words."""
    row = {"gate": float(e.gate[t])}
    if token is not None:
        p, pointer = float(e.target_prob[t]), float(e.target_pointer[t])
        share = pointer / p if p > 0 else 0.0
        unseen = token >= tok.word_vocab_size
        row |= {
            "word": spell(tok, token, table),
            "id": token,
            "unseen": unseen,
            "copied": unseen or share >= COPIED,
            "probability": p,
            "vocabulary": float(e.target_vocab[t]),
            "pointer": pointer,
            "pointer_share": share,
            "log_p_without_pointer": float(e.target_log_prob_without_pointer[t]),
        }
    window = zip(e.window_ids[t].tolist(), e.attention[t].tolist(), strict=True)
    row["window"] = [[spell(tok, w, table), a] for w, a in window if w >= 0]
    top = zip(*(x[t].tolist() for x in (e.top_ids, e.top_prob, e.top_vocab, e.top_pointer)), strict=True)
    row["top"] = [{"word": spell(tok, w, table), "probability": p, "vocabulary": v, "pointer": a} for w, p, v, a in top]
    return row


# ---- generate -----------------------------------------------------------------------------------------------------


def generation_kwargs(mode, max_new_tokens, temperature, top_k, top_p, num_beams) -> dict:
    """generate's settings, or InputError naming the one out of range."""

    def number(name, value, lo, hi, integer=False):
        try:
            v = float(value)
        except (TypeError, ValueError):
            raise InputError(f"{name} must be a number in [{lo}, {hi}], got {value!r}.") from None
        if not (lo <= v <= hi) or (integer and v != int(v)):
            raise InputError(
                f"{name} must be {'a whole number' if integer else 'a number'} in [{lo}, {hi}], got {value!r}."
            )
        return int(v) if integer else v

    if mode not in MODES:
        raise InputError(f"mode must be one of {', '.join(MODES)}, got {mode!r}.")
    kwargs = {"max_new_tokens": number("max_new_tokens", max_new_tokens, 1, MAX_NEW_TOKENS, integer=True)}
    if mode == "sample":
        kwargs |= {
            "do_sample": True,
            "temperature": number("temperature", temperature, 0.05, 10),
            "top_k": number("top_k", top_k, 0, 10_000, integer=True),
            "top_p": number("top_p", top_p, 0.01, 1),
        }
    else:
        kwargs |= {
            "do_sample": False,
            "num_beams": number("num_beams", num_beams, 2, 16, integer=True) if mode == "beam" else 1,
        }
    return kwargs


def check_prompt(prompt) -> str:
    if not isinstance(prompt, str) or not prompt.strip():
        raise InputError("The prompt is empty: type a few words for the model to continue.")
    if (n := len(prompt.split())) > MAX_PROMPT_WORDS:
        raise InputError(
            f"The prompt has {n:,} words; the page takes at most {MAX_PROMPT_WORDS:,} (the pointer sees "
            "the last 100 tokens)."
        )
    return prompt


class _TokenQueue(BaseStreamer):
    """generate's streamer: each new token into a queue, None at the end (the first put is the prompt)."""

    def __init__(self):
        self.queue, self.prompt = queue.Queue(), True

    def put(self, value):
        if self.prompt:
            self.prompt = False
        else:
            for t in value.flatten().tolist():
                self.queue.put(t)

    def end(self):
        self.queue.put(None)


def new_tokens(model, ids: torch.Tensor, kwargs: dict, seed: int):
    """The continuation's tokens as generate writes them (greedy, sampling), or all at its end (beam search, which
    takes no streamer)."""
    torch.manual_seed(seed)  # the queue runs one generation at a time, so the global generator is this one's
    args = dict(input_ids=ids[None], attention_mask=torch.ones_like(ids)[None], **kwargs)
    if kwargs.get("num_beams", 1) > 1:
        yield from model.generate(**args)[0, len(ids) :].tolist()
        return
    streamer, failed = _TokenQueue(), []

    def run():
        try:
            model.generate(**args, streamer=streamer)
        except Exception as e:  # handed to the page's thread, which reports it
            failed.append(e)
            streamer.end()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    while (t := streamer.queue.get()) is not None:
        yield t
    thread.join()
    if failed:
        raise failed[0]


@torch.no_grad()
def generate_words(
    models: Models,
    folder,
    prompt,
    mode="greedy",
    max_new_tokens=50,
    temperature=1.0,
    top_k=40,
    top_p=1.0,
    num_beams=4,
    seed=0,
):
    """Yields (prompt words, records so far, continuation text) as each word arrives: every record is `record`'s
    view of the moment it was written, from the model's own forward over the text so far (one token per call, the
    cache carried)."""
    kwargs = generation_kwargs(mode, max_new_tokens, temperature, top_k, top_p, num_beams)
    model, tok = models.get(folder)
    ids, table = encode(model, tok, check_prompt(prompt))
    prompt_words, words = [spell(tok, i, table) for i in ids.tolist()], []
    out = model(ids[None], use_cache=True, logits_to_keep=1)
    history = ids.tolist()
    for t in new_tokens(model, ids, kwargs, int(seed)):
        words.append(record(tok, table, explain(out, history, model.config, [t], TOP_K), 0, t))
        history.append(t)
        out = model(torch.tensor([[t]]), past_key_values=out.past_key_values, use_cache=True)
        yield prompt_words, words, continuation(tok, ids, history[len(ids) :], table)


@torch.no_grad()
def plain_continuation(
    models: Models, folder, prompt, mode, max_new_tokens, temperature, top_k, top_p, num_beams, seed
) -> str:
    """The same prompt and settings through another folder (the plain LSTM): its continuation as text."""
    kwargs = generation_kwargs(mode, max_new_tokens, temperature, top_k, top_p, num_beams)
    model, tok = models.get(folder)
    ids, table = encode(model, tok, check_prompt(prompt))
    return continuation(tok, ids, list(new_tokens(model, ids, kwargs, int(seed))), table)


def continuation(tok, ids: torch.Tensor, new: list[int], table: list[str]) -> str:
    """The text `new` adds to the prompt's, as running text (the text rules join across the boundary)."""
    prompt = ids.tolist()
    return tok.decode(prompt + new, oov_words=table)[len(tok.decode(prompt, oov_words=table)) :]


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


def _cat(parts: list[Explanation]) -> Explanation:
    return Explanation(*(torch.cat([getattr(p, f) for p in parts]) for f in Explanation.__dataclass_fields__))


@torch.no_grad()
def score_text(models: Models, folder, text) -> tuple[dict, tuple]:
    """The text's per-word surprisal (bits) and pointer share, perplexity, unseen-word rate and the words where the
    pointer helped most (log p with the pointer - log p with it switched off, g = 1). Every word is predicted: the
    text follows a line break (<eos>), as every line of the corpus does. Also returns (tokenizer, table, ids,
    explanation) for the page's word view."""
    if not isinstance(text, str) or not text.strip():
        raise InputError("The text is empty: paste some text or upload a text file.")
    if (n := len(text.split())) > MAX_SCORE_WORDS:
        raise InputError(
            f"The text has {n:,} words; the page scores at most {MAX_SCORE_WORDS:,}: score a longer file "
            "with examples/evaluate.py --test_file."
        )
    model, tok = models.get(folder)
    ids, table = encode(model, tok, text if text.startswith("\n") else "\n" + text)
    cache, parts = None, []
    for s in range(0, len(ids) - 1, CHUNK):  # chunked with the state carried (= whole), to bound the logits' memory
        e = min(s + CHUNK, len(ids) - 1)
        out = model(ids[None, s:e], past_key_values=cache, use_cache=True)
        cache = out.past_key_values
        parts.append(explain(out, ids[:e], model.config, ids[s + 1 : e + 1], TOP_K))
    ex, y = _cat(parts), ids[1:].tolist()
    log_p = ex.target_prob.log()
    gain = log_p - ex.target_log_prob_without_pointer
    words = [
        {
            "word": spell(tok, w, table),
            "surprisal_bits": float(-lp / math.log(2)),
            "pointer_share": float(s),
            "gain": float(g),
        }
        for w, lp, s, g in zip(y, log_p, ex.target_share, gain, strict=True)
    ]
    unseen = sum(w >= tok.word_vocab_size or w == tok.unk_token_id for w in y)
    helped = [
        {
            "position": t,
            "word": words[t]["word"],
            "context": " ".join(spell(tok, w, table) for w in ids[max(0, t - 5) : t + 1].tolist()).replace("\n", "↵"),
            "p_with_pointer": float(ex.target_prob[t]),
            "p_without_pointer": math.exp(float(ex.target_log_prob_without_pointer[t])),
            "gain_nats": float(gain[t]),
        }
        for t in gain.argsort(descending=True)[:10].tolist()
        if gain[t] > 0
    ]
    summary = {
        "folder": folder,
        "words": len(y),
        "perplexity": math.exp(float(-log_p.mean())),
        "unseen_word_rate": unseen / len(y),
        "words_scored": words,
        "pointer_helped_most": helped,
    }
    return summary, (tok, table, ids, ex)


# ---- the page -----------------------------------------------------------------------------------------------------

CSS = """
.ps-text { font-family: Georgia, serif; font-size: 17px; line-height: 1.9; }
.ps-text .w { padding: 1px 2px; border-radius: 3px; cursor: pointer; }
.ps-text .w.copied { text-decoration: underline 2px; font-weight: 600; }
.ps-text .w.unseen { outline: 2px dashed #7b1fa2; }
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
    '</span> … <span style="background:rgba(214,39,40,0.9)">100%</span>; <u><b>underlined</b></u>: copied; '
    '<span style="outline:2px dashed #7b1fa2">boxed</span>: unseen word; click a word for its moment</span>'
)


def _word(i, w: str, alpha: float, title: str, classes="w") -> str:
    text = "↵<br>" if w == "\n" else html.escape(w)
    return (
        f'<span class="{classes}" data-i="{i}" style="background: rgba(214,39,40,{alpha:.3f})" '
        f'title="{html.escape(title)}">{text}</span>'
    )


def words_html(prompt_words, words, selected=None, run="") -> str:
    """The prompt (grey) and the continuation, each word coloured by its pointer share."""
    head = " ".join("↵<br>" if w == "\n" else html.escape(w) for w in prompt_words)
    spans = []
    for i, r in enumerate(words):
        cls = "w" + " copied" * r["copied"] + " unseen" * r["unseen"] + " sel" * (i == selected)
        title = f"p {r['probability']:.3f}: vocabulary {r['vocabulary']:.3f} + pointer {r['pointer']:.3f}"
        spans.append(_word(i, r["word"], 0.05 + 0.85 * r["pointer_share"], title, cls))
    return f'<div class="ps-text" data-run="{run}"><span class="prompt">{head}</span> {" ".join(spans)}</div>'


def moment_html(r: dict) -> str:
    """The moment a word was written, as the paper's Figures 5-12: the window coloured by attention, the gate, and
    the top next words split into their vocabulary (blue) and pointer (red) parts."""
    top = max([a for _, a in r["window"]] or [1.0]) or 1.0
    window = " ".join(
        f'<span style="background: rgba(200,0,0,{a / top:.3f}){";color:#fff" * (a > 0.6 * top)}" title="a = {a:.4f}">'
        f"{'↵' if w == chr(10) else html.escape(w)}</span>"
        for w, a in r["window"]
    )
    g = r["gate"]
    lines = []
    if "word" in r:
        lines.append(
            f"<p><b>{html.escape(r['word'])}</b>: p = {r['probability']:.4f} = vocabulary "
            f"{r['vocabulary']:.4f} + pointer {r['pointer']:.4f} (pointer share {r['pointer_share']:.1%})</p>"
        )
    lines.append(
        f'<p class="ps-gate">gate g = {g:.3f} <span class="ps-bar" style="width:{200 * g:.0f}px;'
        f'background:#1f77b4"></span><span class="ps-bar" style="width:{200 * (1 - g):.0f}px;'
        f'background:#d62728"></span> pointer 1 − g = {1 - g:.3f}</p>'
    )
    lines.append(
        f"<p>pointer attention over the window ({len(r['window'])} words, oldest first):</p>"
        f'<p class="ps-window">{window}</p><p>top next words (blue: vocabulary, red: pointer):</p><table>'
    )
    for c in r["top"]:
        lines.append(
            f"<tr><td>{html.escape(c['word']) if c['word'] != chr(10) else '↵'}</td>"
            f'<td>{c["probability"]:.4f}</td><td><span class="ps-bar" style="width:{300 * c["vocabulary"]:.0f}px;'
            f'background:#1f77b4"></span><span class="ps-bar" style="width:{300 * c["pointer"]:.0f}px;'
            f'background:#d62728"></span></td><td>{c["vocabulary"]:.4f} + {c["pointer"]:.4f}</td></tr>'
        )
    return f'<div class="ps-moment">{"".join(lines)}</table></div>'


def compare_html(folder, text, plain, plain_text, run="") -> str:
    """The two continuations side by side (`run`: the click's stamp, once both are written)."""
    head = "".join(f"<th>{html.escape(f)}</th>" for f in (folder, plain))
    cells = "".join(f"<td>{html.escape(t)}</td>" for t in (text, plain_text))
    return f"<table class='ps-compare' data-run='{run}'><tr>{head}</tr><tr>{cells}</tr></table>"


def message(text: str) -> str:
    return f'<p class="ps-msg">⚠ {html.escape(text)}</p>'


def failure(e: Exception) -> str:
    """A message for the page: the input's fault in its own words; anything else named, its trace to the log."""
    if isinstance(e, InputError):
        return message(str(e))
    traceback.print_exc()
    return message(f"Something went wrong ({type(e).__name__}: {str(e)[:200]}); the page still works: try again.")


def score_html(summary: dict) -> str:
    words = summary["words_scored"]
    bits = [
        _word(i, w["word"], min(w["surprisal_bits"] / 20, 1), f"{w['surprisal_bits']:.1f} bits")
        for i, w in enumerate(words)
    ]
    share = [
        _word(i, w["word"], 0.05 + 0.85 * w["pointer_share"], f"pointer share {w['pointer_share']:.1%}")
        for i, w in enumerate(words)
    ]
    rows = "".join(
        f"<tr><td><b>{html.escape(h['word'])}</b></td><td>{html.escape(h['context'])}</td>"
        f"<td>{h['p_with_pointer']:.4f}</td><td>{h['p_without_pointer']:.4f}</td><td>{h['gain_nats']:+.2f}</td></tr>"
        for h in summary["pointer_helped_most"]
    )
    return (
        f'<p class="ps-stats">{summary["words"]:,} words · perplexity <b>{summary["perplexity"]:.2f}</b> · '
        f"unseen-word rate <b>{summary['unseen_word_rate']:.1%}</b></p>"
        f'<p>surprisal (white 0 → red 20 bits):</p><div class="ps-text">{" ".join(bits)}</div>'
        f'<p>pointer share (white 0% → red 100%; click a word for its moment):</p><div class="ps-text">'
        f"{' '.join(share)}</div><p>where the pointer helped most (log p with it − log p with it off):</p>"
        f"<table><tr><th>word</th><th>context</th><th>p</th><th>p, pointer off</th><th>gain (nats)</th></tr>"
        f"{rows}</table>"
    )


def build(models: Models, default_model=DEFAULT_MODEL) -> gr.Blocks:
    names = ["mode", "max_new_tokens", "temperature", "top_k", "top_p", "num_beams", "seed"]

    def on_load(folder):
        try:
            model, _ = models.get(folder)
            c = model.config
            kind = "pointer sentinel" if c.use_pointer else "plain LSTM (no pointer)"
            return f"Loaded {folder}: {kind}, window L = {c.pointer_window}, vocabulary {c.vocab_size:,}."
        except Exception as e:
            return failure(e)

    def on_generate(folder, prompt, *settings):
        t0, words, plain = time.perf_counter(), [], models.plain_partner(folder)
        run = f"{time.time():.6f}"  # marks this click's renders (benchmarks/app.py times them)
        try:
            for prompt_words, words, mine in generate_words(models, folder, prompt, *settings):
                yield (
                    words_html(prompt_words, words, run=run),
                    gr.skip(),
                    compare_html(folder, mine, plain, "…"),
                    f'<span class="ps-status" data-run="{run}">{len(words)} words…</span>',
                    words,
                )
            copied = [i for i, r in enumerate(words) if r["copied"]]
            first = copied[0] if copied else 0
            status = (
                f'<span class="ps-status" data-run="{run}">{len(words)} words in {time.perf_counter() - t0:.2f} s; '
                f"{len(copied)} copied ({sum(r['unseen'] for r in words)} unseen). Click a word.</span>"
            )
            yield words_html(prompt_words, words, first, run), moment_html(words[first]), gr.skip(), status, words
            text = plain_continuation(models, plain, prompt, *settings)
            yield gr.skip(), gr.skip(), compare_html(folder, mine, plain, text, run), status, words
        except Exception as e:
            yield gr.skip(), gr.skip(), gr.skip(), failure(e), words

    def on_select(words, evt: gr.EventData):
        i = getattr(evt, "index", None)
        if not words or i is None or not 0 <= int(i) < len(words):
            return gr.skip()
        return moment_html(words[int(i)])

    def on_score(folder, text, upload):
        try:
            summary, view = score_text(models, folder, read_upload(upload) if upload else text)
            return score_html(summary), "", view
        except Exception as e:
            return gr.skip(), failure(e), None

    def on_score_select(view, evt: gr.EventData):
        i = getattr(evt, "index", None)
        if view is None or i is None or not 0 <= int(i) < len(view[2]) - 1:
            return gr.skip()
        tok, table, ids, ex = view
        return moment_html(record(tok, table, ex, int(i), int(ids[int(i) + 1])))

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
                mode = gr.Radio(MODES, value="greedy", label="decoding", elem_id="mode")
                max_new = gr.Number(50, label=f"max_new_tokens (1-{MAX_NEW_TOKENS})", elem_id="max_new_tokens")
                temperature = gr.Number(1.0, label="temperature (sample)")
                top_k = gr.Number(40, label="top_k (sample, 0: off)")
                top_p = gr.Number(1.0, label="top_p (sample)")
                beams = gr.Number(4, label="num_beams (beam)")
                seed = gr.Number(0, label="seed")
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
        model = dict(concurrency_id="model")  # every event that runs a model: one at a time (2 cores, one global RNG)
        folder.change(on_load, folder, loaded, **private, **model)
        demo.load(on_load, folder, loaded, **private, **model)
        button.click(
            on_generate, [folder, prompt, *settings], [text, moment, compare, status, words], **private, **model
        )
        text.click(on_select, words, moment, **private)
        score_button.click(on_score, [folder, score_in, upload], [score_out, score_status, view], **private, **model)
        score_out.click(on_score_select, view, score_moment, **private)

        def generate(
            prompt: str,
            folder: str = default_model,
            mode: str = "greedy",
            max_new_tokens: int = 50,
            temperature: float = 1.0,
            top_k: int = 40,
            top_p: float = 1.0,
            num_beams: int = 4,
            seed: int = 0,
        ) -> dict:
            """Continue a prompt; each word with its probability, vocabulary and pointer parts, pointer share, gate,
            window attention and top next words (the moment it was written)."""
            try:
                steps = generate_words(
                    models, folder, prompt, mode, max_new_tokens, temperature, top_k, top_p, num_beams, seed
                )
                *_, (_, words, text) = ((), [], ""), *steps  # the last step holds every word
                settings = [mode, max_new_tokens, temperature, top_k, top_p, num_beams, seed]
                return {
                    "folder": folder,
                    "text": text,
                    "words": words,
                    "settings": dict(zip(names, settings, strict=True)),
                }
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
        models.get(models.plain_partner(default))  # loaded before the first click
    except InputError as e:
        fail(e)
    demo = build(models, default)
    demo.queue(default_concurrency_limit=1, max_size=64)
    try:
        demo.launch(server_name=args.host, server_port=args.port, css=CSS, show_error=False)
    except OSError as e:  # the port is taken, or not this user's to bind
        fail(f"cannot serve on {args.host}:{args.port}: {e}")


if __name__ == "__main__":
    main()
