r"""Evaluate a saved model: perplexity with and without the pointer, the neural cache, and analysis pictures.

    python examples/evaluate.py outputs/quickstart                                  # bundled WikiText-2 test split
    python examples/evaluate.py outputs/ptb_pointer --dataset_name ptb_text_only \
        --cache_grid --compare outputs/ptb_plain --plots outputs/ptb_plots --output_json outputs/ptb_pointer.eval.json

(or your copies of PTB: --train_file ptb.train.txt --validation_file ptb.valid.txt --test_file ptb.test.txt).
`--dynamic` adds Krause et al.'s dynamic evaluation (the weights adapt to the split as it is scored, at batch size 1;
gradient statistics from the training split; `--dynamic_grid` chooses lr, lambda and segment length on validation).
Standard conventions: one <eos> per line, the whole split as `--batch_size` contiguous streams, state carried.
With an open-vocabulary model folder (placeholder ids for a text's unseen words, config `oov_slots`), the unseen
words of raw text are read as placeholders, numbered per stream as the tokenizer numbers a text's, so the pointer's
copies count; text in corpus form (literal <unk>) scores as before. The summary names the measure and the split's
unseen-word rate; `--unseen_as_unk` reads unseen words as <unk> (a closed vocabulary's reading).
The split streams from the token cache a chunk at a time into running totals (a speller folder's on text that spells
words too), so memory is bounded by the model, a chunk and tables over the vocabulary, whatever the text's length
(benchmarks/results_scale_cpu.md); `--compare`, `--plots` and the cache grid keep the per-target outputs they read
(the grid: validation's), and `--dynamic` the training ids its statistics read.
Prints a short summary; `--output_json` gets every number (grid, buckets, gate statistics). Invalid input (a missing
model folder or data file, a data file that is not UTF-8 text or holds a NUL byte (binary), a cache setting out of
range, a split too short for --batch_size streams) stops the script with one `error:` line on stderr and exit status 2;
the data is checked before the model's weights load.
"""

import argparse
import hashlib
import json
import math
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))  # cli.py beside this script, however it is launched
from cli import (  # noqa: E402
    ArgumentParser,
    add_data_arguments,
    cached_split_files,
    check_model_folder,
    check_ranges,
    check_text_file,
    describe_ranges,
    fail,
    load_or_fail,
    load_saved_model,
    load_saved_tokenizer,
    load_sources,
    non_negative,
    positive,
    saved_config,
)

# a small grid around Grave et al.'s and AWD-LSTM's values (WT2: window 3785, theta 0.662, lambda 0.1279)
CACHE_GRID = dict(windows=(500, 2000, 3785), thetas=(0.3, 0.662, 1.0), lambdas=(0.05, 0.1279, 0.2, 0.3))
STATS_SEGMENT = 5  # targets per training segment for the gradient statistics (Krause et al.'s)
DYN_LR, DYN_LAMBDA, DYN_STATS_TOKENS = 5e-5, 2e-3, 100_000  # Krause et al.'s defaults at 5-token segments
DYN_GRID_LRS, DYN_GRID_LAMBDAS = [1e-5, 2e-5, 5e-5, 1e-4], [1e-3, 5e-3]  # 2e-4 diverged on PTB (sanity run)


RANGES = [  # checked by cli.check_ranges (a float must also be finite; a grid value by value) and stated in --help
    ("--cache_window", lambda w: w >= 1, ">= 1"),
    ("--cache_grid_windows", lambda w: w >= 1, ">= 1"),
    ("--cache_theta", lambda t: True, "a finite number"),
    ("--cache_grid_thetas", lambda t: True, "a finite number"),
    ("--cache_lambda", lambda lam: 0 <= lam <= 1, "in [0, 1]"),
    ("--cache_grid_lambdas", lambda lam: 0 <= lam <= 1, "in [0, 1]"),
    *((f"--dynamic_{n}", positive, ">= 1") for n in ("segment", "stats_batch_size", "grid_segments", "grid_tokens")),
    *((f"--dynamic_{n}", non_negative, ">= 0") for n in ("lr", "lambda", "stats_tokens", "grid_lrs", "grid_lambdas")),
    ("--grid_extensions", non_negative, ">= 0"),
    ("--dynamic_epsilon", positive, "> 0"),
    ("--oov_types", positive, ">= 1"),
    *((f"--{n}", positive, ">= 1") for n in ("batch_size", "bptt", "max_tokens", "num_threads")),
]


def parse_args(argv=None):
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    a = p.add_argument
    a("model", help="a directory written by save_pretrained (model and tokenizer)")
    a("--split", default="test", choices=["validation", "test"])
    add_data_arguments(p)
    a("--batch_size", type=int, default=10)
    a("--bptt", type=int, default=200)
    a("--max_tokens", type=int, default=None, help="evaluate the first N tokens only")
    a("--num_threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    a("--oov_types", type=int, default=None, help="the distinct words the split's <unk> stands for, for the "
      "unknown-penalised perplexity (default: raw text read with placeholders, its distinct unseen words; text in "
      "corpus form, each <unk> a word of its own, an upper bound)")  # fmt: skip
    a("--unseen_as_unk", action="store_true", help="read words outside the vocabulary as <unk>, not as placeholders "
      "(the closed-vocabulary reading; the default for models without oov_slots)")  # fmt: skip
    a("--cache", action="store_true", help="add Grave et al.'s neural cache")
    a("--cache_window", type=int, default=3785)
    a("--cache_theta", type=float, default=0.662)
    a("--cache_lambda", type=float, default=0.1279)
    a("--cache_grid", action="store_true", help="choose window/theta/lambda on validation, then apply them; with "
      "--dynamic the cache on the adapting model is chosen again, on its own validation outputs")  # fmt: skip
    for axis, kind in (("windows", int), ("thetas", float), ("lambdas", float)):
        a(f"--cache_grid_{axis}", type=kind, nargs="+", help=f"with --cache_grid: the grid's {axis} (default: "
          f"{' '.join(map(str, CACHE_GRID[axis]))})")  # fmt: skip
    a("--dynamic", action="store_true", help="add Krause et al.'s dynamic evaluation (batch size 1; needs the "
      "training split for its gradient statistics)")  # fmt: skip
    a("--dynamic_lr", type=float, default=DYN_LR, help="learning rate eta")
    a("--dynamic_lambda", type=float, default=DYN_LAMBDA, help="decay rate lambda towards the trained weights")
    a("--dynamic_segment", type=int, default=5, help="targets per segment: one update after each")
    a("--dynamic_epsilon", type=float, default=2e-5, help="added to the gradient RMS in the step's denominator")
    a("--dynamic_stats_tokens", type=int, default=DYN_STATS_TOKENS, help="training tokens for the gradient "
      "statistics (0: the whole training split)")  # fmt: skip
    a("--dynamic_stats_batch_size", type=int, default=100, help="streams for the gradient statistics")
    a("--dynamic_grid", action="store_true", help="choose lr, lambda and segment length on validation, then apply")
    a("--dynamic_grid_lrs", type=float, nargs="+", default=DYN_GRID_LRS, help="per 5-token segment; longer "
      "segments scale lr and lambda by length/5, as Krause et al. do")  # fmt: skip
    a("--dynamic_grid_lambdas", type=float, nargs="+", default=DYN_GRID_LAMBDAS)
    a("--dynamic_grid_segments", type=int, nargs="+", default=[5, 20])
    a("--dynamic_grid_tokens", type=int, default=10000, help="the grid scores the first N validation tokens")
    a("--dynamic_grid_memo", help="with --dynamic_grid: a JSON-lines file that keeps each scored point as it finishes; "
      "a later run reads the points scored with the same model, statistics, tokens, epsilon and code, so a stopped "
      "grid resumes (one process per file)")  # fmt: skip
    a("--grid_extensions", type=int, default=6, help="--cache_grid, --dynamic_grid: while the choice is at an edge "
      "of its grid, add a value beyond it (the grid's step continued), at most this many; 0: none")  # fmt: skip
    a("--dynamic_pointer_off", action="store_true", help="also the pointer model with its pointer switched off "
      "(g = 1; its own gradient statistics and grid)")  # fmt: skip
    a("--compare", help="a second model: per-frequency-bucket log-perplexity difference (paper Figure 4)")
    a("--buckets", type=int, default=10)
    a("--plots", help="write PNG (and HTML) pictures to this directory")
    a(
        "--picture_positions",
        type=int,
        nargs="*",
        default=None,
        help="token positions of the split for pointer pictures (default: three rare words the pointer supplies and "
        "the model predicts well, from the first stream)",
    )
    a("--output_json", help="write every result here as JSON (the terminal gets a short summary)")
    describe_ranges(p, RANGES)
    args = p.parse_args(argv)
    if args.plots:  # fail now, not after the whole evaluation
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            p.error("--plots needs matplotlib: pip install matplotlib")
    for axis, default in CACHE_GRID.items():
        if getattr(args, f"cache_grid_{axis}") is None:
            setattr(args, f"cache_grid_{axis}", list(default))
        elif not args.cache_grid:
            p.error(f"--cache_grid_{axis} needs --cache_grid")
    if args.dynamic_grid and not args.dynamic:
        p.error("--dynamic_grid needs --dynamic")
    if args.dynamic_grid_memo and not args.dynamic_grid:
        p.error("--dynamic_grid_memo needs --dynamic_grid")
    check_ranges(p, args, RANGES)
    check_model_folder(p, "", args.model)
    if args.compare:
        check_model_folder(p, "--compare", args.compare, tokenizer=False)
    for flag in ("train_file", "validation_file", "test_file"):
        check_text_file(p, f"--{flag}", getattr(args, flag), decode=True)  # a binary file is refused here
    return args


if __name__ == "__main__":  # a mistaken command line fails here, before the imports below (torch: 8-40 s)
    parse_args()

import numpy as np  # noqa: E402
import torch  # noqa: E402
from tqdm.auto import tqdm  # noqa: E402
from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402

import modeling_pointer_sentinel  # noqa: E402,F401  (registers the Auto classes)
from modeling_pointer_sentinel.data import SplitIds, TokenStreams, read_meta, token_array, token_counts  # noqa: E402
from modeling_pointer_sentinel.evaluation import (  # noqa: E402
    NeuralCache,
    PlaceholderStreams,
    ScoreTotals,
    StreamFile,
    StreamOutputs,
    bracketed_grid,
    bucket_log_ppl_difference,
    cache_grid_search,
    concat_outputs,
    dynamic_grid_search,
    dynamic_outputs,
    file_streams,
    frequency_buckets,
    gradient_statistics,
    next_new_words,
    perplexity,
    stream_outputs,
    unseen_word_batches,
    upp_of_totals,
)
from modeling_pointer_sentinel.plotting import (  # noqa: E402
    plot_bucket_differences,
    plot_gate_histogram,
    pointer_picture_positions,
    pointer_window_picture,
)
from modeling_pointer_sentinel.spelling import (  # noqa: E402
    SpelledText,
    SpelledTotals,
    vocabulary_bytes,
    without_speller,
)
from modeling_pointer_sentinel.training import shard_streams, unk_rate_of_counts, unk_token_id, word_count  # noqa: E402


def best_of(grid: list[dict], what: str) -> dict:
    """The best point of a grid sorted best first; diverged points (perplexity inf) are named in one line on stderr,
    and a grid where every point diverged stops the script."""
    diverged = [{k: v for k, v in r.items() if k not in ("ppl", "seconds")} for r in grid if math.isinf(r["ppl"])]
    if diverged:
        print(f"{what}: {len(diverged)} of {len(grid)} points diverged (perplexity inf, ranked last): {diverged}",
              file=sys.stderr)  # fmt: skip
    if math.isinf(grid[0]["ppl"]):
        fail(f"every point of the {what} diverged; try smaller values")
    return grid[0]


def bracketed(search, axes: dict, bounds: dict, extensions: int, what: str) -> tuple[list[dict], dict, dict]:
    """`bracketed_grid` on validation with a progress bar over every point it scores: (rows best first, the choice's
    place per axis, the best row). A choice left at an edge of its grid is named on stderr."""
    with tqdm(total=0, desc=f"{what} (validation)", unit="point") as bar:

        def scored(**values):
            bar.total += math.prod(map(len, values.values()))
            bar.refresh()
            return search(**values, progress=bar)

        grid, place = bracketed_grid(scored, axes, bounds, extensions)
    best = best_of(grid, what)
    if edges := sorted(k for k, where in place.items() if where == "at the edge"):
        print(f"{what}: the choice is at an edge of its grid for {', '.join(edges)} after {extensions} added values "
              "(--grid_extensions); widen the grid", file=sys.stderr)  # fmt: skip
    return grid, place, best


def first_tokens(ids, max_tokens):
    """--max_tokens: the flat id stream cut to its first N targets (the whole stream without a limit)."""
    return ids[: max_tokens + 1] if max_tokens else ids


def streams_for(ids, batch_size, max_tokens):
    return shard_streams(first_tokens(ids, max_tokens), batch_size)


def note_short_streams(ids: int, rows: int, window: int) -> None:
    """A note on stderr where the split's `rows` streams are shorter than the pointer's window: each starts without
    context and its first word is unscored, which a short text (a paragraph of the user's) feels in every figure."""
    if rows > 1 and ids // rows < window:
        print(f"note: the {ids:,} ids are read as {rows} streams (--batch_size) of about {ids // rows:,}, fewer than "
              f"the pointer's window of {window}: each starts without context and its first word is not scored; "
              "--batch_size 1 reads the text as one stream", file=sys.stderr)  # fmt: skip


class SplitReading(Mapping):
    """The evaluated splits as the model reads them, a block at a time. With an open-vocabulary tokenizer and model
    (placeholder ids V ... V+N-1, `oov_slots`), a validation or test split whose cached ids hold <unk> is read again
    through the tokenizer (`unseen_word_batches`, a batch of lines at a time, checked id for id against the cache),
    and where it holds unseen words, their ids (one numbering for the split) go to a temporary file, from which
    `PlaceholderStreams` numbers them per stream row as the tokenizer would. Otherwise (no unseen words,
    `--unseen_as_unk`, a closed model, the training split) the token cache's ids, as before. Streams are read from
    the files by positional reads (`file_streams`), so no split is ever held whole. As a mapping: each split's flat ids
    as one row, whole (the pictures); a prefix of it is the first stream's."""

    def __init__(self, args, tok, model, sources: dict, files: dict, mapped: dict, ids: SplitIds):
        self.args, self.tok, self.sources, self.files, self.mapped, self.ids = args, tok, sources, files, mapped, ids
        cfg, self.unk = model.config, unk_token_id(tok)
        self.V, self.N = cfg.vocab_size, cfg.oov_slots
        self.open = (not args.unseen_as_unk and self.N > 0 and getattr(tok, "oov_slots", 0) > 0
                     and word_count(tok) == self.V and self.unk is not None)  # fmt: skip
        self.read, self.folder = {}, None
        self.limit = args.max_tokens + 1 if args.max_tokens else None  # --max_tokens: the first N targets

    def unseen(self, split: str) -> tuple[Path, list[str]] | None:
        """(the file of the split's ids (int32), unseen words as V + their index in the spellings; the spellings),
        None where it has none or is read as cached."""
        if not self.open or split == "train":  # the training split gives frequencies and gradient statistics
            return None
        if split not in self.read:
            counts, found = token_counts(self.files[split]), None
            if self.unk < len(counts) and counts[self.unk]:  # else nothing for the tokenizer to spell
                found = self.read_unseen(split)
            self.read[split] = found
        return self.read[split]

    def read_unseen(self, split: str) -> tuple[Path, list[str]] | None:
        """The split read through the open-vocabulary tokenizer a batch of lines at a time, each batch checked
        against the cached ids; the ids are written to a file from the first unseen word on (before it they are the
        cache's); None when it has no unseen word."""
        cached, itemsize = self.files[split], self.mapped[split].dtype.itemsize
        total, index, pos, out = self.mapped[split].size, {}, 0, None

        def cache_ids(start: int, count: int) -> np.ndarray:  # read, not mapped: the pages stay out of the RSS
            return np.fromfile(cached, self.mapped[split].dtype, count=count, offset=start * itemsize)

        def check(same: bool):
            if not same:
                fail(f"the {split} split read through the open-vocabulary tokenizer differs from its cached ids "
                     "(tokenizer and token cache out of step?); --unseen_as_unk scores the cached ids")  # fmt: skip

        try:
            for flat in unseen_word_batches(self.tok, self.sources[split].line_batches(f"reading {split}"), index):
                closed = np.where(flat >= self.V, self.unk, flat)
                check(pos + len(flat) <= total and np.array_equal(closed, cache_ids(pos, len(flat))))
                if out is None and index:  # the first unseen word: the ids before it are the cache's
                    if self.folder is None:
                        self.folder = tempfile.TemporaryDirectory(prefix="evaluate-placeholders-")
                    out = open(Path(self.folder.name) / f"{split}.ids", "wb")
                    for start in range(0, pos, 1 << 22):
                        cache_ids(start, min(1 << 22, pos - start)).astype(np.int32).tofile(out)
                if out is not None:
                    flat.astype(np.int32).tofile(out)
                pos += len(flat)
        finally:
            if out is not None:
                out.close()
        check(pos == total)
        return None if out is None else (Path(out.name), list(index))

    def global_streams(self, split: str, batch_size: int) -> TokenStreams | None:
        """The split's streams with one numbering for the whole split (each unseen word its own id): what each
        target is, for the rates and the count of distinct unseen words; None when read as cached."""
        found = self.unseen(split)
        return None if found is None else file_streams(found[0], np.int32, batch_size, self.limit)

    def streams(self, split: str, batch_size: int, limit: int | None = None):
        """The split's `batch_size` streams as the model reads them, read a block at a time, each block once and in
        order (`PlaceholderStreams` numbers as it reads); `limit`: the first ids only (default: --max_tokens')."""
        found, limit = self.unseen(split), limit or self.limit
        if found is None:
            return file_streams(self.files[split], self.mapped[split].dtype, batch_size, limit)
        return PlaceholderStreams(file_streams(found[0], np.int32, batch_size, limit), self.V, self.N, self.unk)

    def __getitem__(self, split: str) -> torch.Tensor:
        return self.streams(split, 1, self.mapped[split].size)[:, :][0]

    def __iter__(self):
        return iter(self.ids)

    def __len__(self) -> int:
        return len(self.ids)


class Scored:
    """A split scored a chunk at a time (`score`): its running totals (`ScoreTotals`), the neural cache's summed NLL,
    the counts of what its targets are in the split's own numbering (placeholder reading), and, when asked for, the
    outputs kept whole."""

    def __init__(self, totals: ScoreTotals, distinct_unseen: int):
        self.totals, self.cache_nll, self.outputs = totals, 0.0, None
        self.unseen_targets = self.literal_unk = self.unseen_past_slots = 0
        self.seen_words = torch.zeros(distinct_unseen, dtype=torch.bool)  # which of the split's unseen words occur


def score(m, reading: SplitReading, split: str, args, cache: dict | None = None, keep: bool = False,
          keep_hidden: bool = False, byte_table: torch.Tensor | None = None) -> Scored:  # fmt: skip
    """The split's streams scored chunk by chunk into running totals (memory: the model, a chunk and tables over the
    ids, whatever the split's length), with the neural cache `cache` (window, theta, lam) mixed in as it streams;
    `keep`: the outputs also kept whole (`keep_hidden`: with the hidden states), for the analyses of every target;
    `byte_table`: each id's bytes (`spelling.vocabulary_bytes`), for bits per byte."""
    streams = reading.streams(split, args.batch_size)
    rows, length = streams.shape
    whole, found = reading.global_streams(split, args.batch_size), reading.unseen(split)
    V = reading.V
    totals = ScoreTotals(V + max(m.config.oov_slots, 0), length - 1, reading.unk, V, byte_table)
    scored = Scored(totals, len(found[1]) if found else 0)
    neural = NeuralCache(**cache) if cache else None
    placeholders = found is not None and reading.unk is not None
    previous, used, column, parts = streams[:, :1], torch.zeros(rows, dtype=torch.long), 0, []
    with tqdm(total=rows * (length - 1), desc=f"{split}", unit="tok") as bar:
        for out in stream_outputs(m, streams, args.bptt, keep_hidden or neural is not None, bar):
            y, T = out.targets, out.targets.shape[1]
            new = None
            if placeholders:
                x = torch.cat([previous, y[:, :-1]], 1)  # the chunk's inputs: the targets shifted by one
                new, used = next_new_words(x, y, V, reading.N, reading.unk, used)
                spelled = whole[:, column + 1 : column + T + 1]  # the targets in the split's own numbering
                unseen = spelled >= V
                scored.unseen_targets += int(unseen.sum())
                scored.literal_unk += int((spelled == reading.unk).sum())
                scored.unseen_past_slots += int((unseen & (y == reading.unk)).sum())
                scored.seen_words[spelled[unseen] - V] = True
            totals.add(out, new)
            if neural is not None:
                scored.cache_nll -= neural.stream(out.hidden, y, out.log_probs).double().sum().item()
            if keep:
                parts.append(
                    out if keep_hidden else StreamOutputs(out.targets, out.log_probs, out.vocab_log_probs, out.gate)
                )
            previous, column = y[:, -1:], column + T
    if neural is not None:
        scored.cache_nll -= neural.flush().double().sum().item()
    if keep:
        scored.outputs = concat_outputs(parts)
    return scored


def unseen_word_results(reading: SplitReading, split: str, scored: Scored) -> tuple[dict, str]:
    """What the split's targets are (placeholders: unseen words read with their identity; literal <unk>; unseen words
    past a row's slots, read as <unk>; the distinct unseen words), and the measure the perplexity is, in words."""
    t = scored.totals
    n = t.targets
    res = {"targets": n, "reading": "placeholders" if reading.unseen(split) is not None else "cached ids"}
    if reading.unseen(split) is None:  # corpus text, a closed reading or no unseen words: <unk> is all there is
        unk_targets = t.unk_targets if reading.unk is not None else 0
        res.update(placeholder_targets=0, placeholder_rate=0.0, unk_targets=unk_targets, unk_rate=unk_targets / n)
        why = " (--unseen_as_unk)" if reading.args.unseen_as_unk else ""
        what = f"<unk> ({unk_targets / n:.2%} of them) scored as a word{why}" if unk_targets else "no <unk>"
        return res, f"perplexity over all {n:,} targets; {what}"
    placeholders, literal = t.placeholder_targets, scored.literal_unk
    res.update(placeholder_targets=placeholders, placeholder_rate=placeholders / n, unk_targets=literal,
               unk_rate=literal / n, unseen_targets=scored.unseen_targets,
               distinct_unseen_words=int(scored.seen_words.sum()), unseen_past_slots=scored.unseen_past_slots,
               oov_slots=reading.N)  # fmt: skip
    measure = (f"perplexity over all {n:,} targets; unseen words scored as placeholders (first occurrence: new-word "
               "mass; repeats: copied)")  # fmt: skip
    return res, measure + ("; literal <unk> as a word" if literal else "")


def main(argv=None):
    args = parse_args(argv)
    if args.num_threads:
        torch.set_num_threads(args.num_threads)
    # Every check of the input comes before the weights load (and their progress bar): the tokenizer, the configs,
    # the data and its streams first.
    tok = load_saved_tokenizer(args.model)
    config = saved_config(args.model)
    spelling = bool(config.get("speller_size"))
    word_level = [f"--{f}" for f in SPELLED_FLAGS if getattr(args, f)]
    if args.compare:
        ours, theirs = (load_or_fail("config in", AutoConfig.from_pretrained, f) for f in (args.model, args.compare))
        if theirs.vocab_size != ours.vocab_size:
            fail("--compare needs a model with the same vocabulary.")
    splits = load_sources(args)  # each split's text, read through the token cache (data.py)
    if args.split not in splits:
        fail(f"no {args.split} split: give --{args.split}_file (or --dataset_name)")
    if args.cache_grid and "validation" not in splits:
        fail("--cache_grid chooses the cache on the validation split: give --validation_file")
    if args.dynamic and "train" not in splits:
        fail("--dynamic collects its gradient statistics on the training split: give --train_file")
    if args.dynamic_grid and "validation" not in splits:
        fail("--dynamic_grid chooses the hyperparameters on the validation split: give --validation_file")
    if args.compare and "train" not in splits:
        fail("--compare needs the training split for word frequencies: give --train_file")
    if spelling:
        # Text in the corpus's form spells no word: the word model scores it as it did before its speller was added
        # (and as fast), so the word-level analyses hold. A split that spells words is scored as spelled_main does.
        V = config["vocab_size"]
        files = cached_split_files(args, tok, splits)
        spelled = [s for s, f in files.items() if token_counts(f)[V:].any()]  # no pass over the ids
        if word_level and spelled:
            fail(f"{' '.join(word_level)}: not on text that spells words ({', '.join(spelled)} split), only on text "
                 "in the corpus's form; without these flags the spelled text is scored in bits per byte")  # fmt: skip
        if args.split in spelled:
            return spelled_main(args, tok, splits)
    files = cached_split_files(args, tok, splits)
    mapped = {s: token_array(f) for s, f in files.items()}  # the streams read a batch at a time from these
    ids = SplitIds(files)  # whole int64 splits, loaded only by the analyses that need them (--dynamic, --plots, ...)
    scored = len(first_tokens(mapped[args.split], args.max_tokens))
    try:
        streams_for(mapped[args.split], args.batch_size, args.max_tokens)
    except ValueError as e:  # an empty split, or too few tokens for the streams
        fits = scored // 2  # streams of 2 tokens it can fill
        fail(f"{e} Pass a smaller --batch_size (at most {fits} for this split)" if fits else e)
    rate = unk_rate_of_counts(token_counts(files[args.split]), unk_token_id(tok))
    if rate > 0.1:
        print(f"warning: {rate:.1%} of the {args.split} tokens are outside the vocabulary (<unk> or unseen words): is "
              "this the data the tokenizer was built for? (with no data flags the bundled WikiText-2 is used)",
              file=sys.stderr)  # fmt: skip
    tok, model = load_saved_model(args.model, tok)
    note_short_streams(scored, args.batch_size, model.config.pointer_window)
    if spelling:  # text in the corpus's form (checked above): the word model alone scores it
        model = without_speller(model)
    reading = SplitReading(args, tok, model, splits, files, mapped, ids)  # unseen words as placeholders, if open
    if args.compare and reading.unseen(args.split) is not None:
        slots = AutoConfig.from_pretrained(args.compare).oov_slots
        if slots != reading.N:
            fail(f"--compare {args.compare} has oov_slots {slots}, not {reading.N}: it cannot score this split's "
                 "unseen words as placeholders; give --unseen_as_unk to score both with them as <unk>")  # fmt: skip
    need_hidden = args.cache or args.cache_grid
    keep = bool(args.compare or args.plots)  # analyses of every target: their outputs are kept whole
    byte_table = vocabulary_bytes(tok, model.config.vocab_size) if spelling else None
    results = {}
    cache = dict(window=args.cache_window, theta=args.cache_theta, lam=args.cache_lambda)
    grid_on_split = args.cache_grid and args.split == "validation"  # the grid needs the split's outputs whole
    if args.cache_grid and not grid_on_split:  # chosen first, so that the split streams with the chosen cache
        val = score(model, reading, "validation", args, keep=True, keep_hidden=True).outputs
        cache = choose_cache(val, args, results, "cache_grid", "cache grid")
        del val
    start = time.perf_counter()
    scored = score(model, reading, args.split, args, cache if need_hidden and not grid_on_split else None,
                   keep or grid_on_split, grid_on_split, byte_table)  # fmt: skip
    totals, out = scored.totals, scored.outputs
    results = {"split": args.split, "tokens": totals.targets, "ppl": totals.perplexity(), **results,
               "seconds": round(time.perf_counter() - start, 1)}  # fmt: skip
    if spelling:  # every target a word of the vocabulary: its bytes and one separator, as spelled_main counts them
        results |= {"bits_per_byte": totals.nll / math.log(2) / totals.bytes, "bytes": totals.bytes,
                    "words": totals.targets, "word_perplexity": results["ppl"]}  # fmt: skip
    results["unseen_words"], results["measure"] = unseen_word_results(reading, args.split, scored)
    if reading.unk is not None:
        spelled = {}
        if reading.unseen(args.split) is not None:  # raw text: the unseen words' spellings are known
            u = results["unseen_words"]
            spelled = dict(unseen_types=u["distinct_unseen_words"], literal_unk_targets=u["unk_targets"])
        results["upp"] = upp_of_totals(totals.nll, totals.targets, totals.unk_targets, totals.penalised,
                                       args.oov_types, **spelled)  # fmt: skip
    if model.config.use_pointer:
        results["ppl_pointer_off"] = totals.perplexity(pointer=False)
        results.update(totals.gate_statistics(tok))
    if grid_on_split:
        cache = choose_cache(out, args, results, "cache_grid", "cache grid")
        results["ppl_with_cache"] = with_cache(out, cache)
        out.hidden = None
    elif need_hidden:
        results["ppl_with_cache"] = perplexity(scored.cache_nll / totals.targets)
    if need_hidden:
        results["cache"] = {**cache, "alignment": "h_i keys x_{i+1} (Grave et al.)"}
    if args.dynamic:
        objectives = ["mixture"] + (["vocab"] if args.dynamic_pointer_off and model.config.use_pointer else [])
        for objective in objectives:
            results.update(run_dynamic(model, reading, args, objective, cache if need_hidden else None))
    picture_positions = None
    if args.plots:
        plots = Path(args.plots)
        plots.mkdir(parents=True, exist_ok=True)
        if model.config.use_pointer:
            plot_gate_histogram(out, plots / "gate_histogram.png")
            flat = reading[args.split]  # the first stream is its prefix: stream positions are split positions
            positions = args.picture_positions
            if positions is None:
                positions = pointer_picture_positions(out, ids.get("train"), (tok.eos_token_id, unk_token_id(tok)),
                                                      min_position=model.config.pointer_window)  # fmt: skip
            picture_positions = positions
            for k, pos in enumerate(positions):
                pointer_window_picture(model, tok, flat, pos, plots / f"pointer_{k}.png", plots / f"pointer_{k}.html")
    if args.compare:
        other = AutoModelForCausalLM.from_pretrained(args.compare, dtype=torch.float32).eval()
        if other.config.speller_size:  # the split spells no word (checked above): its word model alone
            other = without_speller(other)
        out_b = score(other, reading, args.split, args, keep=True).outputs
        buckets = frequency_buckets(ids["train"], out.targets, args.buckets)
        diffs = bucket_log_ppl_difference(out.log_probs, out_b.log_probs, buckets, args.buckets)
        results["compare"] = {"model": args.compare, "ppl": out_b.perplexity(), "bucket_log_ppl_gain": diffs}
        if args.plots:
            plot_bucket_differences(diffs, Path(args.plots) / "frequency_buckets.png", Path(args.model).name,
                                    Path(args.compare).name)  # fmt: skip
    if args.output_json:
        Path(args.output_json).write_text(json.dumps(results, indent=2))
    print(summary(results, args, picture_positions))
    return results


SPELLED_FLAGS = ("cache", "cache_grid", "dynamic", "dynamic_grid", "compare", "plots", "oov_types", "unseen_as_unk")


def spelled_main(args, tok, splits) -> dict:
    """A folder with a speller (`config.speller_size`): the split's ids carry its text, every unseen word spelled, so
    every word is scored as the model writes it: bits per byte of the text (each word's bytes and one separator)
    beside the word perplexity, split by kind of word (vocabulary, copy: a spelled word the pointer's window holds,
    new: any other spelled word). A row's first word has no context and is not scored. The rows stream from the id
    file into running totals per kind (`spelling.SpelledText`, `SpelledTotals`)."""
    path = cached_split_files(args, tok, splits)[args.split]
    config = load_or_fail("config in", AutoConfig.from_pretrained, args.model)
    V, L = config.vocab_size, config.pointer_window
    try:  # the text's rows are found, or refused, before the weights load
        text = SpelledText(StreamFile(path, read_meta(path)["dtype"], 1), vocabulary_bytes(tok, V), V, L,
                           args.batch_size, args.max_tokens and args.max_tokens + 1)  # fmt: skip
    except ValueError as e:
        fail(e)
    note_short_streams(text.ids, args.batch_size, L)
    tok, model = load_saved_model(args.model, tok)
    totals, start = SpelledTotals(), time.perf_counter()
    try:  # malformed ids (a byte after no word's end, ...) stop the forward
        with tqdm(total=text.ids, desc=args.split, unit="tok") as bar:
            for scores in text.scores(model, args.bptt, progress=bar):
                totals.add(scores)
    except ValueError as e:
        fail(e)
    figures = totals.figures()
    results = {"split": args.split, "tokens": text.ids, "ppl": figures["word_perplexity"], **figures,
               "measure": "every word scored as the ids carry it (a spelled word: its bytes and `</w>`); bits per "
               "byte over each word's UTF-8 bytes and one separator",
               "seconds": round(time.perf_counter() - start, 1)}  # fmt: skip
    if args.output_json:
        Path(args.output_json).write_text(json.dumps(results, indent=2))
    lines = [
        f"{args.split} split, {figures['words']:,} words ({text.ids:,} ids), {figures['bytes']:,} bytes",
        f"bits per byte {figures['bits_per_byte']:.4f}; word perplexity {figures['word_perplexity']:.2f}",
    ]
    for kind in ("vocabulary", "copy", "new"):
        if kind in figures:
            k = figures[kind]
            lines.append(f"  {kind:10s} {k['words']:>9,} words  {k['bits_per_byte']:.3f} bits per byte  "
                         f"{k['bits_share']:.1%} of the bits")  # fmt: skip
    if args.output_json:
        lines.append(f"all results: {args.output_json}")
    print("\n".join(lines))
    return results


class GridMemo:
    """--dynamic_grid_memo: the dynamic grid's scored points, one JSON line each, under a digest of everything a
    point's score depends on (the model's config and weights, what the gradient statistics were computed from, the
    grid's tokens, epsilon, the scoring code). Points under another digest are ignored, and so is a line cut short by
    a kill: the file is only ever appended to, so a kill cannot lose the points before it. One process per memo.

    The statistics enter through their inputs (`source`: their training ids, streams and segment length), not their
    bits: those differ in the last place between machines, and a grid stopped on one machine resumes on another. A
    point's score moves with such rounding by as much as the grid's near-ties differ (measured: up to 0.5% at the
    PTB models' chosen points), so a point scored on either machine ranks as well."""

    SCORING_CODE = ("configuration_pointer_sentinel.py", "modeling_pointer_sentinel.py", "evaluation.py")

    def __init__(self, path: Path, model, stats, source: dict, tokens: torch.Tensor, epsilon: float):
        self.path, self.rows = path, {}
        config = model.config.to_diff_dict()
        config.pop("_name_or_path", None)  # where it was loaded from, not what it computes
        settings = {k: v for k, v in source.items() if k != "train_ids"}
        described = [config, stats.objective, stats.tokens, settings, epsilon]
        digest = hashlib.sha256(json.dumps(described, sort_keys=True).encode())
        for name, t in [*model.state_dict().items(), ("train_ids", source["train_ids"]), ("tokens", tokens)]:
            digest.update(f"{name} {tuple(t.shape)} {t.dtype}".encode())
            digest.update(t.detach().cpu().reshape(-1).view(torch.uint8).numpy().tobytes())
        package = Path(modeling_pointer_sentinel.__file__).parent
        for name in self.SCORING_CODE:
            digest.update((package / name).read_bytes())
        self.context = digest.hexdigest()
        text = path.read_text() if path.exists() else ""
        self.cut = not text.endswith("\n") if text else False  # the next line must not join a cut one
        for line in text.splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict) and row.pop("context", None) == self.context:
                self.rows[self.key(row)] = row
        if self.rows:
            print(f"{path}: {len(self.rows)} points of this grid scored before are kept", file=sys.stderr)

    @staticmethod
    def key(point: dict) -> tuple:
        return point["lr"], point["lam"], point["segment_length"]

    def search(self, score, points: list[dict], progress) -> list[dict]:
        """`score(points)` on the points not kept yet, each kept as it finishes; rows best first."""
        for point in points:
            if self.key(point) in self.rows:
                progress.update(1)
                continue
            (row,) = score([point])
            with self.path.open("a") as f:
                f.write("\n" * self.cut + json.dumps({**row, "context": self.context}) + "\n")
            self.cut, self.rows[self.key(point)] = False, row
        return sorted(({**self.rows[self.key(p)], **p} for p in points), key=lambda r: r["ppl"])


def choose_cache(val, args, results: dict, key: str, what: str) -> dict:
    """The neural cache's window, theta and lambda chosen on validation outputs by the bracketed grid; the grid, its
    bracket and its best row go into `results` under `key`."""
    axes = dict(window=args.cache_grid_windows, theta=args.cache_grid_thetas, lam=args.cache_grid_lambdas)
    bounds = dict(window=(1, val.targets.shape[-1], int), lam=(0.0, 1.0, float))  # a window past a stream's end
    grid, results[f"{key}_bracket"], best = bracketed(  # is the whole stream
        lambda window, theta, lam, progress: cache_grid_search(val, window, theta, lam, progress=progress),
        axes, bounds, args.grid_extensions, what,
    )  # fmt: skip
    results[key], results[f"{key}_best_on_validation"] = grid, best
    return dict(window=best["window"], theta=best["theta"], lam=best["lam"])


def with_cache(outputs, cache: dict) -> float:
    """Perplexity of the outputs with the neural cache (window, theta, lam) on top."""
    mixed = NeuralCache(**cache)(outputs.hidden, outputs.targets, outputs.log_probs)
    return perplexity(-mixed.double().mean().item())


def run_dynamic(model, reading: SplitReading, args, objective: str, cache: dict | None) -> dict:
    """Gradient statistics, the grid on validation (with --dynamic_grid), then dynamic evaluation of the split, and
    the neural cache on top (`cache`: the static model's; with --cache_grid it is chosen again on the adapting
    model's validation outputs, the model it sits on). The results' keys end in `_pointer_off` for the vocabulary
    objective (the pointer switched off). The split streams from its file into running totals, the cache mixed in
    as it goes; the grids' validation outputs are kept whole."""
    need_hidden = cache is not None
    key = "dynamic" if objective == "mixture" else "dynamic_pointer_off"
    suffix, label = ("", "") if objective == "mixture" else ("_pointer_off", ", pointer off")
    tokens = args.dynamic_stats_tokens or None
    train_size = reading.mapped["train"].size
    train_ids = reading.streams("train", 1, train_size if tokens is None else tokens + args.dynamic_stats_batch_size)
    train_ids = train_ids[:, :][0]  # what the statistics read: the whole split, or its first tokens
    with tqdm(total=min(tokens or train_size, train_size), desc=f"gradient statistics{label}", unit="tok") as bar:
        stats = gradient_statistics(model, train_ids, tokens, args.dynamic_stats_batch_size, STATS_SEGMENT,
                                    objective, progress=bar)  # fmt: skip
    out = {}
    lr, lam, segment, grid_tokens = args.dynamic_lr, args.dynamic_lambda, args.dynamic_segment, None
    if args.dynamic_grid:
        val = reading.streams("validation", 1, args.dynamic_grid_tokens + 1)[:, :][0]
        grid_tokens = val.numel() - 1
        memo = None
        if args.dynamic_grid_memo:
            source = dict(train_ids=train_ids, batch_size=args.dynamic_stats_batch_size, segment_length=STATS_SEGMENT)
            memo = GridMemo(Path(args.dynamic_grid_memo), model, stats, source, val, args.dynamic_epsilon)

        def search(grid_lr, grid_lam, segment_length, progress):  # the grid's lr and lambda are per 5 targets
            points = [dict(lr=x * s / 5, lam=y * s / 5, segment_length=s, grid_lr=x, grid_lam=y)
                      for s in segment_length for x in grid_lr for y in grid_lam]  # fmt: skip

            def score(todo):
                return dynamic_grid_search(model, val, stats, todo, args.dynamic_epsilon, progress=progress)

            return memo.search(score, points, progress) if memo else score(points)

        axes = dict(grid_lr=args.dynamic_grid_lrs, grid_lam=args.dynamic_grid_lambdas,
                    segment_length=args.dynamic_grid_segments)  # fmt: skip
        bounds = dict(grid_lr=(0.0, math.inf, float), grid_lam=(0.0, math.inf, float),
                      segment_length=(1, grid_tokens, int))  # fmt: skip
        grid, out[f"dynamic_grid_bracket{suffix}"], best = bracketed(
            search, axes, bounds, args.grid_extensions, f"dynamic grid{label}"
        )
        out[f"dynamic_grid{suffix}"] = grid
        out[f"dynamic_grid_best_on_validation{suffix}"] = best
        lr, lam, segment = best["lr"], best["lam"], best["segment_length"]
    grid_on_split = need_hidden and args.cache_grid and args.split == "validation"  # the grid needs its outputs
    if need_hidden and args.cache_grid and not grid_on_split:  # chosen first, so that the split streams with it
        val_ids = reading.streams("validation", 1)
        with tqdm(total=val_ids.shape[1] - 1, desc=f"dynamic validation{label}", unit="tok") as bar:
            val = concat_outputs(list(dynamic_outputs(model, val_ids, stats, lr, lam, segment, args.dynamic_epsilon,
                                                      True, bar)))  # fmt: skip
        cache = choose_cache(val, args, out, f"dynamic_cache_grid{suffix}", f"cache grid on dynamic evaluation{label}")
        del val
    split_ids = reading.streams(args.split, 1)
    dyn = totals_for(model, split_ids.shape[1] - 1)
    neural = NeuralCache(**cache) if need_hidden and not grid_on_split else None
    cache_nll, parts = 0.0, []
    start = time.perf_counter()
    with tqdm(total=split_ids.shape[1] - 1, desc=f"dynamic {args.split}{label}", unit="tok") as bar:
        for o in dynamic_outputs(model, split_ids, stats, lr, lam, segment, args.dynamic_epsilon, need_hidden, bar):
            dyn.add(o)
            if neural is not None:
                cache_nll -= neural.stream(o.hidden, o.targets, o.log_probs).double().sum().item()
            if grid_on_split:
                parts.append(o)
    if neural is not None:
        cache_nll -= neural.flush().double().sum().item()
    seconds = time.perf_counter() - start
    static_ids = reading.streams(args.split, 1)  # the same targets, at batch size 1
    static = totals_for(model, static_ids.shape[1] - 1)
    for o in stream_outputs(model, static_ids, args.bptt):
        static.add(o)
    out[f"ppl_dynamic{suffix}"] = dyn.perplexity()
    out[key] = dict(lr=lr, lam=lam, segment_length=segment, epsilon=args.dynamic_epsilon, objective=objective,
                    stats_tokens=stats.tokens, stats_batch_size=args.dynamic_stats_batch_size,
                    stats_segment_length=STATS_SEGMENT, grid_tokens=grid_tokens, tokens=dyn.targets,
                    seconds=round(seconds, 1),
                    static_ppl_batch_1=static.perplexity(pointer=objective == "mixture"))  # fmt: skip
    if grid_on_split:
        outputs = concat_outputs(parts)
        cache = choose_cache(outputs, args, out, f"dynamic_cache_grid{suffix}",
                             f"cache grid on dynamic evaluation{label}")  # fmt: skip
        out[f"ppl_dynamic_with_cache{suffix}"] = with_cache(outputs, cache)
    elif need_hidden:
        out[f"ppl_dynamic_with_cache{suffix}"] = perplexity(cache_nll / dyn.targets)
    if need_hidden:
        out[f"dynamic_cache{suffix}"] = cache
    return out


def totals_for(model, columns: int) -> ScoreTotals:
    """Running totals (`ScoreTotals`) of `columns` targets a row, over the model's ids (its words and placeholders)."""
    return ScoreTotals(model.config.vocab_size + model.config.oov_slots, columns)


def unseen_words_line(u: dict) -> str:
    """The split's unseen-word rate in one line (`unseen_word_results`)."""
    line = (f"unseen words: {u['placeholder_rate']:.2%} of the targets read as placeholders "
            f"({u['placeholder_targets']:,}; {u['distinct_unseen_words']:,} distinct words); literal <unk>: "
            f"{u['unk_rate']:.2%} ({u['unk_targets']:,})")  # fmt: skip
    if u["unseen_past_slots"]:
        line += f"; {u['unseen_past_slots']:,} past a stream's {u['oov_slots']} slots, read as <unk>"
    return line


def summary(results: dict, args, picture_positions=None) -> str:
    """A few lines for the terminal; the full results go to --output_json."""
    rows = [("model", results["ppl"])]
    if "upp" in results:
        u = results["upp"]
        what = "p(<unk>) and new words" if u["new_word_targets"] else "p(<unk>)"
        many = u["oov_types_from"] + (": an upper bound" if u["bound"] else "")
        rows.append((f"unknown-penalised ({what} / {u['oov_types']:,} OOV types, {many})", u["ppl"]))
    if "ppl_pointer_off" in results:
        rows.append(("pointer switched off (g = 1)", results["ppl_pointer_off"]))
    if "ppl_with_cache" in results:
        c = results["cache"]
        cache = f"window {c['window']}, θ {c['theta']}, λ {c['lam']}"
        if "cache_grid_best_on_validation" in results:
            rows.append((f"+ neural cache, chosen on validation ({cache}): validation",
                         results["cache_grid_best_on_validation"]["ppl"]))  # fmt: skip
        rows.append((f"+ neural cache ({cache}): {results['split']}", results["ppl_with_cache"]))
    for suffix, label in (("", ""), ("_pointer_off", ", pointer switched off")):
        if f"ppl_dynamic{suffix}" not in results:
            continue
        d = results[f"dynamic{suffix}"]
        dyn = f"lr {d['lr']:.3g}, λ {d['lam']:.3g}, segment {d['segment_length']}"
        if f"dynamic_grid_best_on_validation{suffix}" in results:
            rows.append((f"dynamic evaluation{label}, chosen on {args.dynamic_grid_tokens:,} validation tokens "
                         f"({dyn})", results[f"dynamic_grid_best_on_validation{suffix}"]["ppl"]))  # fmt: skip
        rows.append((f"static{label}, batch size 1: {results['split']}", d["static_ppl_batch_1"]))
        rows.append((f"dynamic evaluation{label} ({dyn}, {d['seconds']:.0f} s): {results['split']}",
                     results[f"ppl_dynamic{suffix}"]))  # fmt: skip
        if f"ppl_dynamic_with_cache{suffix}" in results:
            c = results[f"dynamic_cache{suffix}"]
            cache = f"window {c['window']}, θ {c['theta']}, λ {c['lam']}"
            if f"dynamic_cache_grid_best_on_validation{suffix}" in results:
                rows.append((f"dynamic evaluation{label} + neural cache, chosen on validation ({cache}): validation",
                             results[f"dynamic_cache_grid_best_on_validation{suffix}"]["ppl"]))  # fmt: skip
            rows.append((f"dynamic evaluation{label} + neural cache ({cache}): {results['split']}",
                         results[f"ppl_dynamic_with_cache{suffix}"]))  # fmt: skip
    if "compare" in results:
        rows.append((f"--compare {results['compare']['model']}", results["compare"]["ppl"]))
    width = max(len(label) for label, _ in rows)
    title = f"{results['split']} split, {results['tokens']:,} targets"
    width = max(width, len(title))
    lines = [f"{title:{width}s}  {'perplexity':>10s}"]
    lines += [f"{label:{width}s}  {value:10.2f}" for label, value in rows]
    lines.append(f"measure: {results['measure']}")
    if "bits_per_byte" in results:  # a spelling folder's text in the corpus's form: no word spelled
        lines.append(f"bits per byte {results['bits_per_byte']:.4f} ({results['bytes']:,} bytes: each word's UTF-8 "
                     "bytes and one separator; no word of this text is spelled)")  # fmt: skip
    if results.get("unseen_words", {}).get("reading") == "placeholders":  # else the measure's line gives the rate
        lines.append(unseen_words_line(results["unseen_words"]))
    if "mean_gate" in results:
        lines.append(f"mean gate g {results['mean_gate']:.3f}; the pointer's share of the target probability "
                     f"{results['mean_pointer_share_of_target_prob']:.3f}")  # fmt: skip
    if "compare" in results:
        gains = " ".join(f"{d:+.2f}" for d in results["compare"]["bucket_log_ppl_gain"])
        lines.append(f"log-perplexity gain over --compare by frequency bucket (frequent ... rare): {gains}")
    if args.plots:
        at = f" (pointer pictures at positions {picture_positions})" if picture_positions else ""
        lines.append(f"pictures: {args.plots}/{at}")
    if args.output_json:
        lines.append(f"all results: {args.output_json}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
