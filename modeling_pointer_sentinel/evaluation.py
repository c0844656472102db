"""Evaluation measures: perplexity with and without the pointer, Grave et al.'s neural cache, Krause et al.'s dynamic
evaluation, rare-word buckets and gate statistics. Everything works on per-target outputs of the model's own
forward (one implementation of the mixture). The pictures (gate histogram, bucket bars, pointer windows) are in
`plotting.py`."""

import copy
import math
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

from .data import TokenStreams
from .modeling_pointer_sentinel import Placeholders, PointerSentinelCache, _logsumexp_where
from .tokenization import ends_lines_with_eos
from .training import number_slots_per_row, shard_streams, word_count


@dataclass
class StreamOutputs:
    """Per-target results over (B, N) streams, in stream order: position t predicts targets[:, t]."""

    targets: torch.Tensor  # (B, N)
    log_probs: torch.Tensor  # (B, N) log p(y) of the model (the mixture; the softmax alone for plain models)
    vocab_log_probs: torch.Tensor  # (B, N) log p_vocab(y): pointer switched off (g forced to 1)
    gate: torch.Tensor  # (B, N) g
    hidden: torch.Tensor | None = None  # (B, N, D) last-layer outputs, for the neural cache

    def perplexity(self, pointer: bool = True) -> float:
        return perplexity(-(self.log_probs if pointer else self.vocab_log_probs).double().mean().item())


def perplexity(mean_nll: float) -> float:
    """exp(mean NLL); inf where that overflows or is NaN, so a diverged run ranks last instead of raising
    OverflowError or, as NaN, breaking a sort."""
    if math.isnan(mean_nll) or mean_nll > 709.0:  # exp(709.8) overflows a double
        return math.inf
    return math.exp(mean_nll)


def unknown_penalised_perplexity(outputs: StreamOutputs, unk_id: int, oov_types: int | None = None,
                                 new_words: torch.Tensor | None = None, unseen_types: int | None = None,
                                 literal_unk_targets: int | None = None) -> dict:  # fmt: skip
    """Ahn et al.'s (2016) unknown-penalised perplexity: p(<unk>) is shared by the `oov_types` distinct words it stands
    for, so each <unk> target scores p(<unk>) / oov_types. Text in corpus form no longer holds those words; without
    `oov_types` every <unk> target counts as a word of its own, the most there can be, which makes the figure an upper
    bound of the true UPP.

    Raw text read through the open-vocabulary tokenizer (`placeholder_streams`) keeps its unseen words' spellings:
    `new_words` (B, N) marks the targets scored by the new-word mass besides <unk> (a row's first occurrence of a
    placeholder, `new_word_targets`), divided by K as <unk> is; `unseen_types`, the text's distinct unseen words, is
    then K (plus one per literal <unk> target, `literal_unk_targets`, default every <unk> target: those words have
    no spelling, so each is a word of its own and K an upper bound again). `oov_types` overrides both."""
    is_unk = outputs.targets == unk_id
    penalised = is_unk if new_words is None else is_unk | new_words
    nll = -outputs.log_probs.double().sum().item()
    return upp_of_totals(nll, outputs.targets.numel(), int(is_unk.sum()), int(penalised.sum()), oov_types,
                         unseen_types, literal_unk_targets)  # fmt: skip


def upp_of_totals(nll: float, targets: int, unk_targets: int, penalised_targets: int, oov_types: int | None = None,
                  unseen_types: int | None = None, literal_unk_targets: int | None = None) -> dict:  # fmt: skip
    """`unknown_penalised_perplexity` from running totals (`ScoreTotals`): the summed NLL over `targets`, the <unk>
    targets, and the targets the new-word mass scores (<unk> and first occurrences of placeholders)."""
    literal = unk_targets if literal_unk_targets is None else literal_unk_targets
    if oov_types is not None:
        k, source, bound = oov_types, "--oov_types", False
    elif unseen_types is not None:
        k, bound = max(unseen_types + literal, 1), literal > 0
        source = "the text's distinct unseen words" + (" + each literal <unk> a word of its own" if literal else "")
    else:
        k, source, bound = max(unk_targets, 1), "each <unk> a word of its own", True
    if k < 1:
        raise ValueError(f"oov_types must be >= 1, got {k}.")
    mean_nll = (nll + penalised_targets * math.log(k)) / targets
    return {"ppl": perplexity(mean_nll), "oov_types": k, "unk_targets": unk_targets, "bound": bound,
            "oov_types_from": source, "new_word_targets": penalised_targets - unk_targets}  # fmt: skip


def read_unseen_words(tokenizer, line_batches) -> tuple[torch.Tensor, list[str]]:
    """A split's flat ids as the token cache writes them (`training.encode_lines`: each line with its line break), read
    through the open-vocabulary tokenizer (tokenization_pointer_sentinel), each word the vocabulary lacks written as
    V + i, i its index in the returned spellings (the split's distinct unseen words in order of first occurrence):
    one numbering for the whole split, which `placeholder_streams` renumbers row by row. A literal `<unk>` stays
    `<unk>`, so text in corpus form keeps its ids. `line_batches`: the lines in batches (`data.TextSource`). In memory
    whole; `unseen_word_batches` gives the same ids a batch at a time."""
    index = {}
    parts = list(unseen_word_batches(tokenizer, line_batches, index))
    return torch.from_numpy(np.concatenate(parts) if parts else np.empty(0, np.int64)), list(index)


def unseen_word_batches(tokenizer, line_batches, index: dict) -> Iterator[np.ndarray]:
    """`read_unseen_words`' ids a batch of lines at a time (int64), for a split of any length: `index` (word -> i,
    the split's numbering) grows as unseen words come, one entry per distinct unseen word."""
    V, line_rule, eos = word_count(tokenizer), ends_lines_with_eos(tokenizer), tokenizer.eos_token_id
    for lines in line_batches:
        enc = tokenizer([line + "\n" for line in lines] if line_rule else lines, add_special_tokens=False)
        parts = []
        for row, table in zip(enc["input_ids"], enc.oov_words, strict=True):
            ids = np.array([*row, *([] if line_rule else [eos])], dtype=np.int64)
            if table:  # the line's own slots (0, 1, ... in the line) to the split's numbering
                split_slot = np.array([index.setdefault(w, len(index)) for w in table], dtype=np.int64)
                at = ids >= V
                ids[at] = V + split_slot[ids[at] - V]
            parts.append(ids)
        if parts:
            yield np.concatenate(parts)


def placeholder_streams(ids: torch.Tensor, batch_size: int, vocab_size: int, oov_slots: int, unk_id: int):
    """`training.shard_streams` of ids from `read_unseen_words`, each row's unseen words numbered as the tokenizer
    numbers a text's and the model reads them (`training.number_slots_per_row`: the row's first V, its next V+1, ...);
    a row's words past its `oov_slots` read as `<unk>`, as the tokenizer reads them."""
    streams = number_slots_per_row(shard_streams(ids, batch_size), vocab_size)
    return streams.masked_fill(streams >= vocab_size + oov_slots, unk_id)


def new_word_targets(streams: torch.Tensor, vocab_size: int, oov_slots: int, unk_id: int) -> torch.Tensor:
    """(B, N) bool over the targets of (B, N+1) `placeholder_streams`: a placeholder its row has not held before (the
    row's next unused slot), which the model scores with the new-word mass (`modeling_pointer_sentinel.new_word`)."""
    used = streams.new_zeros(streams.shape[0])
    return next_new_words(streams[:, :-1], streams[:, 1:], vocab_size, oov_slots, unk_id, used)[0]


def next_new_words(x: torch.Tensor, y: torch.Tensor, vocab_size: int, oov_slots: int, unk_id: int,
                   used: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """`new_word_targets` of one chunk of the streams (inputs x, targets y, (B, T)), each row having held `used` (B,)
    placeholders before it: (the chunk's new-word targets, `used` after it, for the next chunk)."""
    history = Placeholders(vocab_size, oov_slots, unk_id).history
    k, _ = history(x, torch.ones_like(x, dtype=torch.bool), used, torch.zeros_like(used))
    return (y >= vocab_size) & (y - vocab_size == k), k[:, -1]


class StreamFile:
    """(rows, N) contiguous streams of a flat id file (`data.token_file`'s, or any file of ids of one dtype) as an array
    for `data.TokenStreams` to index (`[rows, a:b]`, a numpy array of those ids), cut as `training.shard_streams` cuts
    its first `limit` ids (default: all), and read with positional reads. A memory map's pages stay in the process's
    resident memory once read (until the kernel wants them back), so a long split scored through one grows the peak
    RSS by its id file's size; read here, they stay in the page cache, outside the process."""

    ndim = 2

    def __init__(self, path, dtype, rows: int, limit: int | None = None):
        self.path, self.dtype = str(path), np.dtype(dtype)
        size = os.path.getsize(path) // self.dtype.itemsize
        size = min(size, limit) if limit else size
        n = size // rows if rows >= 1 else 0
        if n < 2:
            raise ValueError(f"{size} tokens cannot fill {rows} streams of at least 2 tokens.")
        self.shape, self.size = (rows, n), rows * n
        self._fd = os.open(self.path, os.O_RDONLY)

    def __del__(self):
        if getattr(self, "_fd", None) is not None:
            os.close(self._fd)
            self._fd = None

    def __getitem__(self, index) -> np.ndarray:
        rows, cols = index if isinstance(index, tuple) else (index, slice(None))
        picked = range(self.shape[0])[rows]
        one = isinstance(picked, int)
        start, stop, step = cols.indices(self.shape[1])
        if step != 1:
            raise IndexError("StreamFile reads contiguous columns only.")
        width, item = max(stop - start, 0), self.dtype.itemsize
        out = np.empty((1 if one else len(picked), width), dtype=self.dtype)
        for i, r in enumerate([picked] if one else picked):
            out[i] = np.frombuffer(os.pread(self._fd, width * item, (r * self.shape[1] + start) * item), self.dtype)
        return out[0] if one else out


def file_streams(path, dtype, rows: int, limit: int | None = None) -> TokenStreams:
    """`data.TokenStreams` over a `StreamFile`: the int64 streams of an id file, read a block at a time."""
    return TokenStreams(StreamFile(path, dtype, rows, limit))


class PlaceholderStreams:
    """`placeholder_streams` of (B, N+1) streams read a block at a time (`file_streams` of `read_unseen_words`' ids, one
    numbering for the split): each row's unseen words numbered V, V+1, ... in its order of first occurrence, those
    past its `oov_slots` read as `<unk>`, the numbering made as the columns are first read (in order; a block may
    start inside the last one read, as `bptt` chunks overlap by one id). Memory: at most `oov_slots` words a row,
    whatever the length."""

    def __init__(self, streams, vocab_size: int, oov_slots: int, unk_id: int):
        self.streams, self.V, self.N, self.unk = streams, vocab_size, oov_slots, unk_id
        self.shape, self.device = streams.shape, None
        self.slots = [{} for _ in range(streams.shape[0])]  # per row: the split's id -> the row's placeholder id
        self.numbered = 0  # columns whose first occurrences are numbered

    def numel(self) -> int:
        return self.shape[0] * self.shape[1]

    def to(self, device) -> "PlaceholderStreams":
        self.device = device
        return self

    def __getitem__(self, index) -> torch.Tensor:
        rows, cols = index
        if rows != slice(None):
            raise IndexError("PlaceholderStreams reads every row at once.")
        start, stop, _ = cols.indices(self.shape[1])
        if start > self.numbered:
            raise IndexError(f"PlaceholderStreams reads its columns in order: {start} after {self.numbered}.")
        ids = self.streams[:, start:stop].clone()  # renumbered here, never in the streams read (a view of them)
        unseen, fresh = ids >= self.V, max(self.numbered - start, 0)
        for b in unseen.any(1).nonzero().flatten().tolist():
            slots = self.slots[b]
            for w in ids[b, fresh:][unseen[b, fresh:]].tolist():  # the columns not numbered yet, in order
                if w not in slots and len(slots) < self.N:
                    slots[w] = self.V + len(slots)
            ids[b, unseen[b]] = torch.tensor([slots.get(w, self.unk) for w in ids[b, unseen[b]].tolist()])
        self.numbered = max(self.numbered, stop)
        return ids if self.device is None else ids.to(self.device)


def _segments(streams: torch.Tensor, length: int):
    """(inputs, targets) of consecutive segments of `length` targets over (B, N+1) streams (the last may be shorter)."""
    for p in range(0, streams.shape[1] - 1, length):
        k = min(length, streams.shape[1] - 1 - p)
        yield streams[:, p : p + k], streams[:, p + 1 : p + k + 1]


def _forward(model, x, y, cache):
    return model(x, shift_labels=y, past_key_values=cache, use_cache=True, logits_to_keep=1)


def _record(out, y, keep_hidden: bool) -> tuple:
    hidden = out.last_hidden_state.detach().float().cpu() if keep_hidden else None
    # with the speller (config.speller_size) the forward gives no vocabulary share or gate: every id is its text's
    vocab = None if out.vocab_target_log_probs is None else out.vocab_target_log_probs.cpu()
    gate = None if out.gate is None else out.gate.detach().cpu()
    return y.cpu(), out.target_log_probs.cpu(), vocab, gate, hidden


def concat_outputs(parts: list[StreamOutputs]) -> StreamOutputs:
    """Chunks' outputs (`stream_outputs`) joined along the streams."""
    fields = [[getattr(p, f) for p in parts] for f in ("targets", "log_probs", "vocab_log_probs", "gate", "hidden")]
    return StreamOutputs(*[torch.cat(xs, 1) if xs[0] is not None else None for xs in fields])


@torch.no_grad()
def stream_outputs(
    model, streams, bptt: int = 200, keep_hidden: bool = False, progress=None
) -> Iterator[StreamOutputs]:
    """The (B, k) outputs of each `bptt` chunk of (B, N+1) streams as it is scored, the model's state carried across
    chunks (the standard word-LM evaluation): a consumer that keeps running totals (`ScoreTotals`) holds one chunk,
    never the split. `streams`: a tensor, or streams read a chunk at a time (`data.TokenStreams`: `file_streams`)."""
    model.eval()
    cache = PointerSentinelCache()
    for x, y in _segments(streams, bptt):
        out = _forward(model, x, y, cache)
        cache = out.past_key_values
        yield StreamOutputs(*_record(out, y, keep_hidden))
        if progress is not None:
            progress.update(y.numel())


def collect_outputs(model, streams: torch.Tensor, bptt: int = 200, keep_hidden: bool = False, progress=None):
    """`stream_outputs` of (B, N+1) streams kept whole: per-target outputs, for the analyses that need every target
    (the cache grid, the frequency buckets, the pictures)."""
    return concat_outputs(list(stream_outputs(model, streams, bptt, keep_hidden, progress)))


class ScoreTotals:
    """Running totals of a split's per-target outputs, added a chunk at a time (`add`, e.g. `stream_outputs`' chunks):
    the sums and counts behind the figures of the outputs (perplexity with and without the pointer, the gate's
    statistics, the <unk>, placeholder and new-word counts of UPP, the bytes of bits per byte), in memory O(`num_ids`),
    never O(the targets). `columns`: targets per row, so that each target's place in the (B, N) outputs (b * N + t,
    the order `gate_statistics` breaks ties in) is known chunk by chunk."""

    def __init__(self, num_ids: int, columns: int, unk_id: int | None = None, vocab_size: int | None = None,
                 byte_table: torch.Tensor | None = None):  # fmt: skip
        self.columns, self.unk, self.V, self.byte_table = columns, unk_id, vocab_size, byte_table
        self.targets = self.unk_targets = self.penalised = self.placeholder_targets = self.bytes = self.column = 0
        self.nll = self.vocab_nll = self.gate = self.pointer_share = 0.0
        self.share_by_id = torch.zeros(num_ids, dtype=torch.float64)
        self.count_by_id = torch.zeros(num_ids, dtype=torch.int64)
        self.first_by_id = torch.full((num_ids,), torch.iinfo(torch.int64).max)

    def add(self, out: StreamOutputs, new_words: torch.Tensor | None = None) -> None:
        """One chunk's outputs (B, T): the next T targets of every row. `new_words` (B, T): the targets the new-word
        mass scores besides <unk> (`next_new_words`)."""
        y = out.targets
        B, T = y.shape
        self.targets += y.numel()
        self.nll -= out.log_probs.double().sum().item()
        if out.vocab_log_probs is not None:
            self.vocab_nll -= out.vocab_log_probs.double().sum().item()
        if out.gate is not None:
            lp, vlp, g = out.log_probs.double(), out.vocab_log_probs.double(), out.gate.double()
            share = (1 - torch.exp(g.clamp_min(1e-300).log() + vlp - lp)).clamp(0, 1)  # the pointer's share of p(y)
            self.gate += g.sum().item()
            self.pointer_share += share.sum().item()
            flat = y.flatten()
            self.share_by_id.index_add_(0, flat, share.flatten())
            self.count_by_id.index_add_(0, flat, torch.ones_like(flat))
            place = torch.arange(B)[:, None] * self.columns + self.column + torch.arange(T)[None]
            self.first_by_id.scatter_reduce_(0, flat, place.flatten(), "amin")
        if self.unk is not None:
            is_unk = y == self.unk
            self.unk_targets += int(is_unk.sum())
            self.penalised += int((is_unk if new_words is None else is_unk | new_words).sum())
        if self.V is not None:
            self.placeholder_targets += int((y >= self.V).sum())
        if self.byte_table is not None:
            self.bytes += int(self.byte_table[y].sum())
        self.column += T

    def perplexity(self, pointer: bool = True) -> float:
        return perplexity((self.nll if pointer else self.vocab_nll) / self.targets)

    def gate_statistics(self, tokenizer=None, top: int = 20, min_count: int = 20) -> dict:
        """Mean gate, the share of the targets' probability that came from the pointer, and the words whose
        probability came mostly from the pointer (those of at least `min_count` targets; ties in order of first
        occurrence)."""
        ids = (self.count_by_id >= min_count).nonzero().flatten()
        ids = ids[self.first_by_id[ids].argsort()]
        means = self.share_by_id[ids] / self.count_by_id[ids]
        order = torch.sort(-means, stable=True).indices[:top]
        name = (lambda i: tokenizer.convert_ids_to_tokens(i)) if tokenizer is not None else str
        return {
            "mean_gate": self.gate / self.targets,
            "mean_pointer_share_of_target_prob": self.pointer_share / self.targets,
            "top_pointer_words": [
                (name(int(ids[i])), round(means[i].item(), 3), int(self.count_by_id[ids[i]])) for i in order.tolist()
            ],  # fmt: skip
        }


def mean_nll(accelerator, model, streams: torch.Tensor, bptt: int = 200, averager=None, desc: str | None = None):
    """The mean next-token negative log-likelihood over every rank's `streams` (each rank's share, as
    `training.shard_streams` gives it), summed over the ranks (a collective: every rank calls it together). With an
    `averager` (`training.ParameterAverager`), its averaged weights while it averages (NT-ASGD evaluates and saves
    them), swapped back after. `model`: as `accelerator.prepare` returned it; its training mode is kept. `desc`: the
    progress bar's label, shown on each machine's first process."""
    training = model.training
    model.eval()
    if averager is not None:
        averager.swap()
    rows, length = streams.shape
    bar = tqdm(total=rows * (length - 1), desc=desc, unit="tok", leave=False,
               disable=not accelerator.is_local_main_process)  # fmt: skip
    outputs = collect_outputs(accelerator.unwrap_model(model), streams, bptt, progress=bar)
    nll, count = -outputs.log_probs.double().sum().item(), outputs.targets.numel()
    bar.close()
    if averager is not None:
        averager.swap()
    model.train(training)
    totals = accelerator.reduce(torch.tensor([nll, count], dtype=torch.float64, device=accelerator.device), "sum")
    return totals[0].item() / totals[1].item()


def validate(accelerator, model, streams: torch.Tensor, bptt: int, averager) -> tuple[float, str, dict]:
    """An epoch end's validation (`mean_nll` over `streams`) for `training.PlateauSchedule`: (the loss, the weights
    that scored it: "average" or "model", the source `checkpointing.BestWeights.keep` copies, and while `averager`
    averages both perplexities, {"valid_ppl_average", "valid_ppl_live"}, else {}). While it averages, the average and
    the live weights are both scored and the lower counts: once its LR has decayed, the live model can pass its
    lagging average."""
    val, source, both = mean_nll(accelerator, model, streams, bptt, averager, desc="validation"), "model", {}
    if averager.active:
        source = "average"
        live = mean_nll(accelerator, model, streams, bptt, desc="validation")
        both = {"valid_ppl_average": math.exp(val), "valid_ppl_live": math.exp(live)}
        val, source = min((val, source), (live, "model"))
    return val, source, both


# ---------------------------------------------------------------------------------------------------------------
# Neural cache (Grave, Joulin & Usunier, 2017)
# ---------------------------------------------------------------------------------------------------------------


class NeuralCache:
    """Continuous cache over the last `window` hidden states of each stream, vectorised over chunks and batch.

    p(w) = (1 - lam) p_model(w) + lam p_cache(w),  p_cache(w) ∝ Σ_{i in window, x_{i+1} = w} exp(theta h_t·h_i)

    Alignment (Grave's): the state h_i is the key of the token that followed it, x_{i+1}; query t sees the states of
    positions t-window ... t-1, whose next tokens are all known. The cache applies from the first token on (positions
    with an empty cache keep p_model). Only the targets' probabilities are computed: no vocabulary-sized tensor.
    """

    def __init__(self, window: int = 3785, theta: float = 0.662, lam: float = 0.1279, chunk: int = 256):
        if window < 1 or not 0 <= lam <= 1 or chunk < 1:
            raise ValueError(f"Need window >= 1, 0 <= lambda <= 1, chunk >= 1; got {window}, {lam}, {chunk}.")
        self.window, self.theta, self.lam, self.chunk = window, theta, lam, chunk
        self.keys = self.values = None  # rolling memory (B, <= window, D), (B, <= window)
        self.pending = None  # `stream`'s positions held back until they fill a chunk

    def reset(self):
        self.keys = self.values = None
        self.pending = None

    def stream(self, hidden: torch.Tensor, targets: torch.Tensor, model_log_probs: torch.Tensor) -> torch.Tensor:
        """`__call__` over a stream given a chunk at a time, in order: the mixed log p(y) (B, k) of the positions up to
        the last whole `chunk` from the stream's start, the others held back (at most `chunk` - 1) until they fill
        one or `flush` gives them at the end: the cache's chunks are those of `__call__` on the whole stream, in
        memory bounded by the window."""
        held = new = (hidden, targets, model_log_probs)
        if self.pending is not None:
            held = tuple(torch.cat(pair, 1) for pair in zip(self.pending, new, strict=True))
        whole = held[1].shape[1] // self.chunk * self.chunk
        self.pending = tuple(t[:, whole:] for t in held)
        return self._mixed(*(t[:, :whole] for t in held))

    def flush(self) -> torch.Tensor:
        """The positions `stream` holds back, mixed (the stream's last, shorter chunk)."""
        held, self.pending = self.pending, None
        return held[2][:, :0] if held is None else self._mixed(*held)

    def _mixed(self, hidden, targets, model_log_probs):
        if targets.shape[1] == 0:
            return model_log_probs
        return self(hidden, targets, model_log_probs)

    def __call__(self, hidden: torch.Tensor, targets: torch.Tensor, model_log_probs: torch.Tensor) -> torch.Tensor:
        """hidden (B, T, D), targets (B, T) (the token after each position), model log p(y) (B, T) -> mixed (B, T)."""
        return self.mix(model_log_probs, *self.log_cache(hidden, targets), self.lam)

    def log_cache(self, hidden: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """log p_cache(y) (B, T) and whether position t has any key (B, T); independent of lambda, so a grid over
        lambda computes it once."""
        parts = [self._chunk(hidden[:, s : s + self.chunk], targets[:, s : s + self.chunk])
                 for s in range(0, hidden.shape[1], self.chunk)]  # fmt: skip
        return torch.cat([p[0] for p in parts], 1), torch.cat([p[1] for p in parts], 1)

    @staticmethod
    def mix(model_lp: torch.Tensor, log_cache: torch.Tensor, any_key: torch.Tensor, lam: float) -> torch.Tensor:
        """log((1 - lam) p_model + lam p_cache), p_model alone where the cache is empty."""
        if not 0 <= lam <= 1:
            raise ValueError(f"Need 0 <= lambda <= 1, got {lam}.")
        if lam == 0:
            return model_lp
        keep = math.log1p(-lam) if lam < 1 else -math.inf
        return torch.where(any_key, torch.logaddexp(keep + model_lp, math.log(lam) + log_cache), model_lp)

    def _chunk(self, h, y):
        B, T, _ = h.shape
        mem_k = h.new_zeros(B, 0, h.shape[-1]) if self.keys is None else self.keys
        mem_v = y.new_zeros(B, 0) if self.values is None else self.values
        keys, values, M = torch.cat([mem_k, h], 1), torch.cat([mem_v, y], 1), mem_k.shape[1]
        scores = self.theta * (h @ keys.transpose(1, 2))  # (B, T, M+T)
        t = torch.arange(T, device=h.device)[:, None] + M  # query positions in key coordinates
        j = torch.arange(M + T, device=h.device)[None]
        valid = (j < t) & (j >= t - self.window)  # strictly earlier keys: h_t's own next token is the target
        scores = scores.masked_fill(~valid, -torch.inf)
        hit = valid & (values[:, None, :] == y[:, :, None])
        any_key = valid.any(-1).expand(B, -1)
        lse_all = torch.logsumexp(scores.masked_fill(~any_key[..., None], 0), -1)
        log_cache = _logsumexp_where(scores, hit) - lse_all  # -inf where no key holds y
        self.keys, self.values = keys[:, -self.window :], values[:, -self.window :]
        return log_cache, any_key


def neural_cache_loop_reference(hidden, targets, model_log_probs, window, theta, lam):
    """Per-token loop, as the public cache code does it (one stream at a time, Python loop): the slow reference."""
    B, N, _ = hidden.shape
    out = model_log_probs.clone()
    for b in range(B):
        for t in range(N):
            lo = max(0, t - window)
            if t == lo:
                continue
            weights = torch.softmax(theta * (hidden[b, lo:t] @ hidden[b, t]), 0)
            p_cache = sum(
                w for w, v in zip(weights.tolist(), targets[b, lo:t].tolist(), strict=True) if v == targets[b, t]
            )
            p = (1 - lam) * math.exp(model_log_probs[b, t]) + lam * p_cache
            out[b, t] = math.log(p)
    return out


def bracketed_grid(search, axes: dict[str, list], bounds: dict[str, tuple] | None = None, extensions: int = 6):
    """A grid search whose choice lies inside its grid. `search(**axes)` scores the product of the axes' values (rows
    with `ppl` and a key per axis). While the best row sits on an axis's lowest or highest value, the axis gains one
    value beyond it, the grid's own step continued (geometrically, v0**2 / v1, for positive values), clipped to the
    axis's `bounds` (lo, hi, int or float), and that value is scored against the other axes' values. Returns the rows
    best first and, per axis, where the choice lies: "inside", "at its bound", "at the edge" (the `extensions` ran out)
    or "fixed" (one value: not searched)."""
    axes, bounds = {k: sorted(set(v)) for k, v in axes.items()}, bounds or {}
    rows, stuck, grown = search(**axes), set(), 0
    while grown < extensions:
        best = min(rows, key=lambda r: r["ppl"])
        if math.isinf(best["ppl"]):
            break
        edges = [(k, -1 if best[k] == v[0] else 1) for k, v in axes.items() if len(v) > 1 and best[k] in (v[0], v[-1])]
        side = next((e for e in edges if e not in stuck), None)
        if side is None:
            break
        k, d = side
        v, (lo, hi, kind) = axes[k], bounds.get(k, (-math.inf, math.inf, float))
        edge, inner = (v[0], v[1]) if d < 0 else (v[-1], v[-2])
        new = edge * edge / inner if edge > 0 and inner > 0 else 2 * edge - inner  # geometric, else arithmetic
        new = min(max(round(new) if kind is int else new, lo), hi)
        if new == edge or new in v:
            stuck.add(side)
            continue
        axes[k], grown = sorted([*v, new]), grown + 1
        rows += search(**{**axes, k: [new]})
    best = min(rows, key=lambda r: r["ppl"])

    def where(k, v):
        if len(v) == 1:
            return "fixed"
        if v[0] < best[k] < v[-1]:
            return "inside"
        return "at its bound" if (k, -1 if best[k] == v[0] else 1) in stuck else "at the edge"

    return sorted(rows, key=lambda r: r["ppl"]), {k: where(k, v) for k, v in axes.items()}


def cache_grid_search(outputs: StreamOutputs, windows, thetas, lambdas, base: str = "mixture", progress=None):
    """Perplexity of the model + cache for every (window, theta, lambda) on stored outputs; rows sorted best first,
    a diverged point (inf) last. The cache is scored once per (window, theta) and mixed for each lambda. `progress`
    (e.g. a tqdm bar) gets `update(1)` after each grid point."""
    lp = outputs.log_probs if base == "mixture" else outputs.vocab_log_probs
    rows = []
    for w in windows:
        for th in thetas:
            log_cache, any_key = NeuralCache(w, th).log_cache(outputs.hidden, outputs.targets)
            for lam in lambdas:
                mixed = NeuralCache.mix(lp, log_cache, any_key, lam)
                rows.append(dict(window=w, theta=th, lam=lam, ppl=perplexity(-mixed.double().mean().item())))
                if progress is not None:
                    progress.update(1)
    return sorted(rows, key=lambda r: r["ppl"])


# ---------------------------------------------------------------------------------------------------------------
# Dynamic evaluation (Krause, Kahembwe, Murray & Renals, 2018)
# ---------------------------------------------------------------------------------------------------------------

OBJECTIVES = ("mixture", "vocab")


def adaptable_copy(model, objective: str = "mixture"):
    """A copy of the model to adapt (the caller's model is never touched), in eval mode (no dropout), whose forward
    loss is the log-loss being scored, so one forward both scores a segment and gives the gradient to learn from it.

    `mixture`: -log p(y) of the model's own distribution (the pointer's mixture; the softmax for a plain model). The
    auxiliary pointer loss is a training aid, not what is scored: its weight is set to 0.
    `vocab`: the pointer switched off (g = 1), -log p_vocab(y). The copy drops its pointer head, so the model's plain
    path scores and trains the softmax alone; adapting the mixture instead would let the pointer absorb what the
    ablation should show, and would not be the distribution being scored."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}.")
    m = copy.deepcopy(model).eval()
    m.config.pointer_loss_weight = 0.0
    if objective == "vocab":
        m.pointer = None
    return m


@dataclass
class GradientStatistics:
    """Per-parameter root mean square of the gradient of the mean segment loss over training segments (Krause et
    al.'s MS, square-rooted), for the parameters of `adaptable_copy(model, objective)`."""

    rms: dict[str, torch.Tensor]
    objective: str
    tokens: int

    def decay_rates(self) -> dict[str, torch.Tensor]:
        """RMS over its mean (the mean of the parameter tensors' means, as Krause et al.'s code): weights that move a
        lot on training data decay back faster; the mean decay rate is 1, so lambda sets it. A tensor the training
        text never moves (RMS 0: the copy head on text without placeholders) takes no part in the mean, so adding
        one leaves every other weight's rate as it was."""
        mean = torch.stack([r.mean() for r in self.rms.values() if r.any()]).mean()
        return {n: r / mean for n, r in self.rms.items()}


def gradient_statistics(
    model,
    train_ids: torch.Tensor,
    tokens: int | None = None,
    batch_size: int = 100,
    segment_length: int = 5,
    objective: str = "mixture",
    progress=None,
) -> GradientStatistics:
    """Krause et al.'s gradient statistics on (the first `tokens` of) the flat training ids, as `batch_size` streams
    cut into segments of `segment_length` targets with the state carried: RMS = sqrt(mean over segments of grad²).
    `progress` gets `update(targets)` per segment."""
    if tokens is not None and tokens < 1 or batch_size < 1 or segment_length < 1:
        raise ValueError(f"Need tokens >= 1 (or None), batch_size >= 1, segment_length >= 1; got {tokens}, "
                         f"{batch_size}, {segment_length}.")  # fmt: skip
    m = adaptable_copy(model, objective)
    params = dict(m.named_parameters())
    streams = shard_streams(train_ids if tokens is None else train_ids[: tokens + batch_size], batch_size)
    streams = streams.to(next(m.parameters()).device)
    squares = {n: torch.zeros_like(p) for n, p in params.items()}
    cache, count = PointerSentinelCache(), 0
    for x, y in _segments(streams, segment_length):
        out = _forward(m, x, y, cache)
        m.zero_grad()
        out.loss.backward()
        for n, p in params.items():
            if p.grad is not None:
                squares[n] += p.grad.square()
        cache, count = out.past_key_values.detach_(), count + 1
        if progress is not None:
            progress.update(y.numel())
    rms = {n: (s / count).sqrt() for n, s in squares.items()}
    return GradientStatistics(rms, objective, streams[:, 1:].numel())


class DynamicUpdate:
    """Krause et al.'s RMS-normalised step with a decay back to the trained weights θ0, applied in place:

        θ ← θ + min(λ·decrate, 1)·(θ0 − θ) − η·∇θL / (RMS + ε)

    both terms taken at the current θ; L is a segment's mean log-loss. The decay factor is clipped at 1 (Krause et
    al. clip decrate at 1/λ) so the decay never overshoots θ0."""

    def __init__(self, model, stats: GradientStatistics, lr: float, lam: float, epsilon: float = 2e-5):
        if not (lr >= 0 and lam >= 0 and epsilon > 0 and math.isfinite(lr) and math.isfinite(lam)):
            raise ValueError(f"Need a finite lr >= 0, lambda >= 0 and epsilon > 0; got {lr}, {lam}, {epsilon}.")
        params = dict(model.named_parameters())
        if {n: p.shape for n, p in params.items()} != {n: r.shape for n, r in stats.rms.items()}:
            raise ValueError("The gradient statistics were collected for other parameters: collect them with the "
                             "same model and objective.")  # fmt: skip
        rates = stats.decay_rates()
        self.params = list(params.values())
        self.theta0 = [p.detach().clone() for p in self.params]
        self.decay = [(lam * rates[n]).clamp(max=1) for n in params]
        self.scale = [lr / (stats.rms[n] + epsilon) for n in params]
        self.steps = [torch.empty_like(p) for p in self.params]  # reused: fresh tensors the size of the softmax cost
        # more than the arithmetic on CPU

    @torch.no_grad()
    def __call__(self):
        for p, p0, decay, scale, step in zip(self.params, self.theta0, self.decay, self.scale, self.steps, strict=True):
            torch.sub(p0, p, out=step).mul_(decay)
            if p.grad is not None:
                step.addcmul_(scale, p.grad, value=-1)
            p.add_(step)


def dynamic_evaluate(
    model,
    ids: torch.Tensor,
    stats: GradientStatistics,
    lr: float,
    lam: float,
    segment_length: int = 5,
    epsilon: float = 2e-5,
    keep_hidden: bool = False,
    progress=None,
) -> StreamOutputs:
    """Dynamic evaluation of one flat id stream (N+1,) at batch size 1, as in the paper: each segment of
    `segment_length` targets is scored, then its loss (`stats.objective`) updates a copy of the model by
    `DynamicUpdate`. The LSTM state and pointer window carry across segments (detached). `model` is left unchanged.
    Returns the (1, N) outputs of the adapting model (`hidden` for the neural cache with `keep_hidden`)."""
    if ids.dim() != 1 or ids.numel() < 2:
        raise ValueError(f"Need one flat stream of at least 2 ids, got shape {tuple(ids.shape)}.")
    if segment_length < 1:
        raise ValueError(f"segment_length must be >= 1, got {segment_length}.")
    return concat_outputs(list(dynamic_outputs(model, ids[None], stats, lr, lam, segment_length, epsilon, keep_hidden,
                                               progress)))  # fmt: skip


def dynamic_outputs(model, streams, stats: GradientStatistics, lr: float, lam: float, segment_length: int = 5,
                    epsilon: float = 2e-5, keep_hidden: bool = False,
                    progress=None) -> Iterator[StreamOutputs]:  # fmt: skip
    """`dynamic_evaluate`'s (1, k) outputs segment by segment as they are scored, of one (1, N+1) stream (a tensor, or
    streams read a block at a time: `file_streams`, `PlaceholderStreams`), for running totals (`ScoreTotals`)."""
    if segment_length < 1:
        raise ValueError(f"segment_length must be >= 1, got {segment_length}.")
    m = adaptable_copy(model, stats.objective)
    update = DynamicUpdate(m, stats, lr, lam, epsilon)
    cache = PointerSentinelCache()
    for x, y in _segments(streams.to(next(m.parameters()).device), segment_length):
        out = _forward(m, x, y, cache)
        yield StreamOutputs(*_record(out, y, keep_hidden))  # scored before the update that learns from it
        m.zero_grad(set_to_none=False)  # reuse the gradient buffers
        out.loss.backward()
        update()
        cache = out.past_key_values.detach_()
        if progress is not None:
            progress.update(y.numel())


def dynamic_grid_search(
    model, ids: torch.Tensor, stats: GradientStatistics, points: list[dict], epsilon: float = 2e-5, progress=None
) -> list[dict]:
    """Perplexity of dynamic evaluation on `ids` for every point (a dict of lr, lam, segment_length, and any keys of the
    caller's, kept in its row), with the seconds each took; rows sorted best first, a diverged point (inf) last.
    `progress` gets `update(1)` after each point."""
    rows = []
    for point in points:
        start = time.perf_counter()
        out = dynamic_evaluate(model, ids, stats, point["lr"], point["lam"], point["segment_length"], epsilon)
        rows.append(dict(point, ppl=out.perplexity(), seconds=round(time.perf_counter() - start, 2)))
        if progress is not None:
            progress.update(1)
    return sorted(rows, key=lambda r: r["ppl"])


# ---------------------------------------------------------------------------------------------------------------
# Analyses
# ---------------------------------------------------------------------------------------------------------------


def frequency_buckets(train_ids: torch.Tensor, targets: torch.Tensor, n_buckets: int = 10) -> torch.Tensor:
    """Bucket of each target (0 = most frequent words): targets sorted by their training frequency and cut into
    `n_buckets` groups of equal size, as in the paper's Figure 4. Ties keep the targets' order (stable sort)."""
    counts = torch.bincount(train_ids.flatten(), minlength=int(max(train_ids.max(), targets.max())) + 1)
    flat = targets.flatten()
    order = torch.sort(counts[flat], descending=True, stable=True).indices
    buckets = torch.empty_like(flat)
    buckets[order] = torch.arange(flat.numel()) * n_buckets // flat.numel()
    return buckets.view_as(targets)


def bucket_log_ppl_difference(log_probs_a, log_probs_b, buckets, n_buckets: int = 10) -> list[float]:
    """Mean of log p_a(y) - log p_b(y) per bucket (positive: model A better on those words)."""
    diff = (log_probs_a - log_probs_b).double().flatten()
    b = buckets.flatten()
    return [diff[b == k].mean().item() for k in range(n_buckets)]


def gate_statistics(outputs: StreamOutputs, tokenizer=None, top: int = 20, min_count: int = 20) -> dict:
    """Mean gate, the share of the targets' probability that came from the pointer, and the words whose probability
    came mostly from the pointer (`ScoreTotals.gate_statistics` of the outputs)."""
    totals = ScoreTotals(int(outputs.targets.max()) + 1, outputs.targets.shape[1])
    totals.add(outputs)
    return totals.gate_statistics(tokenizer, top, min_count)
