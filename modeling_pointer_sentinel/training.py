"""Data streams and training steps for word-level language modelling with a recurrent state.

Two schemes (see README "Training schemes"):
- `stateful`: truncated BPTT over B parallel streams; the LSTM state and the pointer window carry (detached)
  from one segment to the next.
- `window`: every segment re-runs the LSTM over the L-1 tokens before its k1 targets with the current weights, so
  each target sees a freshly computed window of L states and is back-propagated through >= L steps (paper
  Algorithm 1 with k1 targets per update, k2 = L). The LSTM state at the next segment's start carries over.
"""

import math
import os
import random
import signal
import threading
import time
from dataclasses import dataclass

import numpy as np
import torch
from accelerate.utils import send_to_device, set_seed

from .checkpointing import CheckpointError, load_checkpoint, read_manifest, resharded_stream_state, saved_weight_names
from .configuration_pointer_sentinel import PointerSentinelConfig
from .data import BUNDLED as BUNDLED  # where callers read it
from .data import SPLITS, TokenStreams, split_files
from .modeling_pointer_sentinel import (
    SPELL_END,
    Placeholders,
    PointerSentinelCache,
    PointerSentinelForCausalLM,
    SpellAnchor,
    SpelledRow,
    SpelledRows,
)
from .tokenization import ends_lines_with_eos, spelled_line_ids, spelling_vocabulary


def load_text_splits(
    dataset_name: str | None = None,
    dataset_config_name: str | None = None,
    train_file: str | None = None,
    validation_file: str | None = None,
    test_file: str | None = None,
) -> dict[str, list[str]]:
    """Lines of each split through `datasets`: a Hub dataset, local text files (the splits given), or the bundled
    WikiText-2 (when no dataset and no file is named)."""
    import datasets

    if dataset_name:
        ds = datasets.load_dataset(dataset_name, dataset_config_name)
        column = "text" if "text" in ds["train"].column_names else ds["train"].column_names[0]
        return {split: ds[split][column] for split in SPLITS if split in ds}
    files = split_files(train_file, validation_file, test_file)
    ds = datasets.load_dataset("text", data_files=files, keep_linebreaks=False)
    return {split: ds[split]["text"] for split in files}


def encode_lines(tokenizer, lines: list[str]) -> torch.Tensor:
    """One flat id stream with `<eos>` after every line (the standard word-LM convention).

    A tokenizer with the line-break rule (`tokenization.ends_lines_with_eos`) encodes each line with its line break,
    so these ids are the ones `tokenizer(text)` gives for the file's text; for one without it (a word-level tokenizer
    saved before the rule, a subword tokenizer) eos is appended after each line's ids."""
    eos = tokenizer.eos_token_id
    if eos is None:
        raise ValueError("The tokenizer has no eos_token; the line-end token is needed.")
    if not lines:
        raise ValueError("The corpus is empty.")
    backend = tokenizer.backend_tokenizer
    if getattr(tokenizer, "spell_unseen", False):
        return torch.tensor(spelled_line_ids(tokenizer, lines), dtype=torch.long)
    if ends_lines_with_eos(tokenizer):
        encodings = backend.encode_batch_fast([line + "\n" for line in lines], add_special_tokens=False)
        ids = [i for enc in encodings for i in enc.ids]
    else:
        encodings = backend.encode_batch_fast(lines, add_special_tokens=False)
        ids = [i for enc in encodings for i in (*enc.ids, eos)]
    return torch.tensor(ids, dtype=torch.long)


def group_lines(data, tokenizer, block_size: int, text_column: str = "text"):
    """`transformers.Trainer` data with examples/train.py's stream: a `datasets.Dataset` of fixed-length blocks
    (columns `input_ids` and `labels`, equal: the model shifts inside) cut from `encode_lines(tokenizer, lines)`,
    the flat stream with `<eos>` after every line that train.py and evaluate.py use. No padding: the blocks
    concatenate to the stream, whose last `len % block_size` tokens are dropped (as run_clm's `group_texts` does).

    `data`: lines of text, or one split of a `datasets.Dataset` (its `text_column`). Batch the blocks with
    `transformers.default_data_collator` (Trainer's default without a tokenizer): it keeps every `<eos>` label,
    whereas `DataCollatorForLanguageModeling(mlm=False)` turns pad-token labels into -100, and this tokenizer's pad
    token is `<eos>`, so a model trained through it never learns to end a line.
    """
    import datasets

    if isinstance(data, datasets.DatasetDict):
        raise TypeError(f"group_lines takes one split (e.g. data['train']), not a DatasetDict of {list(data)}.")
    lines = list(data[text_column]) if isinstance(data, datasets.Dataset) else list(data)
    if not all(isinstance(line, str) for line in lines):
        raise TypeError("group_lines takes lines of text (str), or a datasets.Dataset with a text column.")
    if block_size < 2:
        raise ValueError(f"block_size must be >= 2 (a block of T tokens has T - 1 targets), got {block_size}.")
    ids = encode_lines(tokenizer, lines)
    n = ids.numel() // block_size
    if n == 0:
        raise ValueError(f"{ids.numel()} tokens cannot fill one block of {block_size}.")
    blocks = ids[: n * block_size].view(n, block_size).numpy()
    return datasets.Dataset.from_dict({"input_ids": blocks, "labels": blocks.copy()})


def word_count(tokenizer) -> int:
    """The tokenizer's words: the model's vocab_size. An open-vocabulary tokenizer's placeholders come after them and
    are the model's `oov_slots`, not words."""
    return getattr(tokenizer, "word_vocab_size", len(tokenizer))


def unk_token_id(tokenizer) -> int | None:
    """The id words outside the vocabulary map to: the declared unk token, else the tokenizer model's own (the
    word-level tokenizer keeps `<unk>` an ordinary word); None for tokenizers without one (byte-level BPE)."""
    if tokenizer.unk_token_id is not None:
        return tokenizer.unk_token_id
    unk = getattr(tokenizer.backend_tokenizer.model, "unk_token", None)
    return tokenizer.backend_tokenizer.token_to_id(unk) if unk else None


def suppress_unk_in_generation(model, tokenizer) -> None:
    """Generated text shows no `<unk>`: `generate()` suppresses it by default, the pointer's copies included (the
    mixture is formed before the logits processors act; `suppress_tokens=None` in a call turns this off). Scoring keeps
    `<unk>` an ordinary target, as in the papers."""
    unk = unk_token_id(tokenizer)
    if unk is not None:
        model.generation_config.suppress_tokens = [unk]


def unk_rate(ids: torch.Tensor, unk_id: int | None) -> float:
    """Fraction of the tokens of an id stream (every one a target, `<eos>` included) that are the unk token."""
    return 0.0 if unk_id is None or ids.numel() == 0 else (ids == unk_id).double().mean().item()


def unk_rate_of_counts(counts, unk_id: int | None) -> float:
    """`unk_rate` from each id's count in the stream (`data.token_counts`)."""
    total = int(counts.sum())
    return 0.0 if unk_id is None or total == 0 or unk_id >= len(counts) else int(counts[unk_id]) / total


def check_unk_rates(counts: dict, tokenizer, max_rate: float = 1.0, say=print) -> dict[str, float]:
    """Each split's <unk> rate (split name -> `unk_rate_of_counts` of its ids' counts, `data.token_counts`), said in
    one line. Refuse (ValueError) data that the tokenizer does not fit: more than `max_rate` of a split's tokens
    <unk>, which would leave the perplexity meaning little."""
    unk_id = unk_token_id(tokenizer)
    rates = {split: unk_rate_of_counts(c, unk_id) for split, c in counts.items()}
    say("<unk> rate: " + " | ".join(f"{s} {r:.2%}" for s, r in rates.items()))
    if too_high := {s: r for s, r in rates.items() if r > max_rate}:
        raise ValueError(
            f"{', '.join(f'{r:.1%} of the {s} tokens' for s, r in too_high.items())} are <unk> (more than "
            f"--max_unk_rate {max_rate:g}): the tokenizer does not fit this data, and the perplexity would "
            "mean little. Give the data the tokenizer was built for (with no data flags the bundled WikiText-2 is "
            "used), leave out --tokenizer_name to build one from the training split, or raise --max_unk_rate."
        )
    return rates


def check_frequency_order(train_ids: torch.Tensor | None, cutoffs: list[int], vocab_size: int, counts=None):
    """The adaptive softmax's clusters are id ranges, so ids must follow training frequency at the cutoffs: raise a
    ValueError if a word after a cutoff occurs more often in `train_ids` than a word before it. `counts`: each id's
    count (`data.token_counts`) instead of the ids."""
    if counts is None:
        counts = torch.bincount(train_ids, minlength=vocab_size)
    else:  # as bincount gives it: at least vocab_size entries, none past the largest id present
        counts = torch.as_tensor(counts, dtype=torch.int64)
        present = int(counts.nonzero().max()) + 1 if counts.any() else 0
        counts = torch.nn.functional.pad(counts[: max(vocab_size, present)], (0, max(0, vocab_size - len(counts))))
    counts = counts[:vocab_size]  # the clusters are word ids: a spelled word's bytes come after them, in none
    for c in cutoffs:
        before, after = counts[:c].min(), counts[c:].max()
        if after > before:
            raise ValueError(
                f"adaptive_softmax_cutoffs needs word ids in frequency order, but id {int(counts[c:].argmax()) + c} "
                f"(after the cutoff {c}) occurs {int(after)} times in the training data and id "
                f"{int(counts[:c].argmin())} (before it) {int(before)} times. Build the tokenizer from the training "
                "split (leave out --tokenizer_name), or train without adaptive_softmax_cutoffs."
            )


def simulate_unseen_words(ids: torch.Tensor, vocab_size: int, oov_slots: int, rate: float, max_count: int = 10,
                          block: int = 1000, seed: int = 0, *, window: int) -> torch.Tensor:  # fmt: skip
    """Training text in which some rare words play words the vocabulary lacks, so the pointer learns to copy
    placeholders (`config.oov_slots`). In each block of `block` tokens, each distinct word seen at most `max_count`
    times in `ids` is chosen with probability `rate` (wherever in the block it first occurs), and its occurrences in
    the block are written as placeholders.

    Slots are given as the text runs (`placeholder_slots`), so that no `window` consecutive tokens (the pointer window
    L, `config.pointer_window`) hold one slot for two words or one word under two
    slots: a word keeps its slot (across a block boundary too) until the slot is needed for another word, and a new
    word takes the least recently used slot that no window holds. With oov_slots >= window a slot is always free, so
    every occurrence of a chosen word is renamed: `rate` of the qualifying tokens, at every block position. With
    fewer slots, an occurrence that finds none free stays itself (examples/unseen_word_simulation.py measures
    the effective rate).
    Slots are interchangeable to the model (each reads <unk>'s embedding), so their numbering is no mismatch.

    A block shorter than `window` is refused (ValueError): every window would reach into two or three blocks, each
    choosing its words afresh, so most windows would hold a word both as itself and as an unseen word."""
    if not 0 <= rate <= 1 or block < 1 or oov_slots < 2 or window < 1:
        raise ValueError(f"Need 0 <= rate <= 1, block >= 1, oov_slots >= 2 and window >= 1; got {rate}, {block}, "
                         f"{oov_slots} and {window}.")  # fmt: skip
    if block < window:
        raise ValueError(f"unseen_word_block ({block}) must be at least the pointer window ({window} tokens).")
    chosen = choose_unseen_words(ids, torch.bincount(ids, minlength=vocab_size) <= max_count, rate, block, seed)
    out, at = ids.clone(), chosen.nonzero().flatten()
    slots = placeholder_slots(at.tolist(), ids[at].tolist(), oov_slots, window)
    kept = torch.tensor([k >= 0 for k in slots], dtype=torch.bool)
    out[at[kept]] = vocab_size + torch.tensor(slots, dtype=ids.dtype)[kept]
    return out


def choose_unseen_words(ids: torch.Tensor, rare: torch.Tensor, rate: float, block: int, seed: int) -> torch.Tensor:
    """Which tokens of `ids` play unseen words: in each block of `block` tokens, each distinct word that `rare` marks
    (a bool per id) is chosen with probability `rate`, and so are its occurrences in the block."""
    g, chosen = torch.Generator().manual_seed(seed), torch.zeros(ids.shape, dtype=torch.bool)
    for s in range(0, ids.numel(), block):
        part = ids[s : s + block]
        words = torch.tensor(list(dict.fromkeys(part[rare[part]].tolist())), dtype=ids.dtype)  # first occurrence order
        chosen[s : s + block] = torch.isin(part, words[torch.rand(words.numel(), generator=g) < rate])
    return chosen


def simulate_spelled_unseen_words(ids: torch.Tensor, tokenizer, rate: float, max_count: int = 10, block: int = 1000,
                                  seed: int = 0) -> torch.Tensor:  # fmt: skip
    """Spell mode's `simulate_unseen_words`: the same choice of rare words (`choose_unseen_words`; in a spelling
    tokenizer's ids, the words below its vocabulary size, `<eos>` and `<unk>` never), each chosen occurrence written
    as the tokenizer spells a word it lacks (its bytes and `</w>`), so the speller learns to spell, and the pointer to
    copy, words as the text writes them. The stream grows by the spellings; no slots are needed (the model numbers a
    text's spelled words itself)."""
    if not 0 <= rate <= 1 or block < 1:
        raise ValueError(f"Need 0 <= rate <= 1 and block >= 1; got {rate} and {block}.")
    V = word_count(tokenizer)
    rare = torch.bincount(ids, minlength=V + SPELL_END + 2) <= max_count
    rare[V:] = False  # a byte, `</w>` or `<+w>` of a word the text already spells
    rare[[i for i in (tokenizer.eos_token_id, unk_token_id(tokenizer)) if i is not None]] = False
    chosen = choose_unseen_words(ids, rare, rate, block, seed)
    words = ids[chosen].unique().tolist()
    spelled = [tokenizer._spell(w) for w in tokenizer.convert_ids_to_tokens(words)]
    table = torch.full((V, max(map(len, spelled), default=1)), -1, dtype=ids.dtype)
    for w, spelling in zip(words, spelled, strict=True):
        table[w, : len(spelling)] = torch.tensor(spelling, dtype=ids.dtype)
    lengths = torch.ones_like(ids)
    lengths[chosen] = (table[ids[chosen]] >= 0).sum(-1)
    starts = lengths.cumsum(0) - lengths
    out = ids.new_empty(int(lengths.sum()))
    out[starts[~chosen]] = ids[~chosen]
    rows = table[ids[chosen]]  # (chosen, K): each occurrence's spelling, then -1
    at = starts[chosen].unsqueeze(1) + torch.arange(rows.shape[1])
    out[at[rows >= 0]] = rows[rows >= 0]
    return out


def number_slots_per_row(streams: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """(B, n) streams whose placeholders are numbered 0, 1, 2, ... in each row's order of first occurrence, as the
    tokenizer numbers a text's unseen words and the model's new-word share reads them (`new_word`):
    `simulate_unseen_words` numbers the whole split, and a row starts part-way through it. Renaming slots row by row
    keeps which positions share a slot, so the windows hold what they held."""
    out = streams.clone()
    for row in out:
        at = (row >= vocab_size).nonzero().squeeze(1)
        if at.numel() == 0:
            continue
        slots, which = torch.unique(row[at], return_inverse=True)
        first = torch.full((len(slots),), at.numel(), device=row.device)
        first = first.scatter_reduce(0, which, torch.arange(at.numel(), device=row.device), "amin")
        order = torch.empty_like(first)
        order[first.argsort()] = torch.arange(len(slots), device=row.device)
        row[at] = vocab_size + order[which]
    return out


def simulate_unseen_training_words(ids, config, rate: float, max_count: int, block: int, seed: int, tokenizer=None):
    """The training split's ids (a flat numpy array such as `data.token_array`'s) with `simulate_unseen_words` at
    `rate` for a model of `config` (its vocabulary, oov_slots and pointer window), as an int64 tensor in memory, and
    each id's count in them (`unk_rate_of_counts` reads it). ValueError, in train.py's flags, for a model without two
    placeholder slots or a `block` shorter than its pointer window. With a speller (`config.speller_size`) and its
    spelling `tokenizer`, the words are spelled (`simulate_spelled_unseen_words`) instead."""
    if config.speller_size:
        if not getattr(tokenizer, "spell_unseen", False):
            raise ValueError("--unseen_word_rate with a speller needs the spelling tokenizer to write words with")
        flat = torch.from_numpy(ids.astype(np.int64))
        out = simulate_spelled_unseen_words(flat, tokenizer, rate, max_count, block, seed)
        return out, torch.bincount(out).numpy()
    if config.oov_slots < 2:
        raise ValueError(
            "--unseen_word_rate needs a model with oov_slots >= 2 (placeholder ids to write unseen words as)"
        )
    if block < config.pointer_window:
        raise ValueError(f"--unseen_word_block ({block}) must be at least the model's pointer_window "
                         f"({config.pointer_window}), or one slot would stand for two words in a window")  # fmt: skip
    flat = torch.from_numpy(ids.astype(np.int64))  # in memory (int64): the simulation rewrites it
    out = simulate_unseen_words(flat, config.vocab_size, config.oov_slots, rate, max_count, block, seed,
                                window=config.pointer_window)  # fmt: skip
    return out, torch.bincount(out).numpy()


def placeholder_slots(positions: list[int], words: list[int], oov_slots: int, window: int) -> list[int]:
    """The slot of each renamed occurrence (`words[i]` at `positions[i]`, increasing), or -1 where none is free: a word
    keeps the slot it holds; a word without one takes the least recently used slot, if no `window` consecutive
    positions hold its last use and this one (the slot's previous word then loses it)."""
    last = dict.fromkeys(range(oov_slots), -window)  # slot -> its last use, least recently used first
    holder, held = {}, {}  # word -> slot, slot -> word
    found = []
    for t, w in zip(positions, words, strict=True):
        k = holder.get(w)
        if k is None:
            k = next(iter(last))
            if t - last[k] < window:  # the least recently used slot is in a window with t: so is every other
                found.append(-1)
                continue
            holder.pop(held.get(k), None)
            holder[w], held[k] = k, w
        del last[k]
        last[k] = t
        found.append(k)
    return found


def is_oov_weight(name: str) -> bool:
    """Whether a parameter's name is one of the placeholders' own weights (`config.oov_pointer`)."""
    return any(part.startswith("oov_") for part in name.split("."))


def start_oov_pointer(model):
    """`model` (a pointer model with oov_slots) with the placeholders' own embedding, pointer queries and repeat odds
    (`config.oov_pointer`), started as `<unk>`'s embedding, the pointer's query, a context query of zero and the
    pointer's own odds (a zero logit): it scores exactly as `model` did until training moves them. `model` itself is
    left as it was. A model without placeholders or without the pointer: the config's ValueError."""
    config = model.config
    if config.oov_pointer:
        return model
    grown = type(model)(type(config).from_dict({**config.to_dict(), "oov_pointer": True}))
    grown.to(model.device, model.dtype).train(model.training)
    missing = grown.load_state_dict(model.state_dict(), strict=False).missing_keys
    if unexpected := {n for n in missing if not is_oov_weight(n)}:
        raise ValueError(f"{sorted(unexpected)} missing from the model to grow.")
    with torch.no_grad():
        grown.model.oov_embedding.copy_(model.model.embed_tokens.weight[model.config.unk_token_id])
        grown.pointer.oov_query.load_state_dict(model.pointer.query.state_dict())
    grown.generation_config = model.generation_config
    return grown


def parameter_groups(model, oov_lr_scale: float = 1.0, oov_only: bool = False) -> list[dict]:
    """The optimizer's groups: the placeholders' embedding, queries and repeat odds (`config.oov_pointer`) learn at
    `oov_lr_scale` times the rate of the rest (each group's `lr_scale`). `oov_only`: the rest is frozen
    (requires_grad off), so the closed-vocabulary model keeps its exact scores."""
    oov = [p for n, p in model.named_parameters() if is_oov_weight(n)]
    if oov_only and not oov:
        raise ValueError("oov_only trains the placeholders' own weights, and the model has none (config.oov_pointer).")
    ids = {id(p) for p in oov}
    rest = [p for p in model.parameters() if id(p) not in ids]
    for p in rest if oov_only else ():
        p.requires_grad_(False)
    rest_group = [] if oov_only else [{"params": rest, "lr_scale": 1.0}]
    return rest_group + ([{"params": oov, "lr_scale": oov_lr_scale}] if oov else [])


def make_optimizer(model, name: str, lr: float, weight_decay: float = 0.0, oov_lr: float | None = None,
                   oov_only: bool = False):  # fmt: skip
    """The optimizer train.py's --optimizer names, over `parameter_groups(model)`: AdamW for "adamw", else SGD ("sgd",
    and "ntasgd", whose average is a ParameterAverager's); the placeholders' own weights (`config.oov_pointer`) learn
    at `oov_lr` (default: `lr`), through their group's `lr_scale`; `oov_only` trains nothing else."""
    groups = parameter_groups(model, (oov_lr or lr) / lr, oov_only)
    if name == "adamw":
        return torch.optim.AdamW(groups, lr=lr, weight_decay=weight_decay)
    return torch.optim.SGD(groups, lr=lr, weight_decay=weight_decay)


def rank_streams(
    ids: dict,
    batch_size: int,
    eval_batch_size: int,
    num_processes: int = 1,
    process_index: int = 0,
    device=None,
    spelled_from: int | None = None,
) -> tuple:
    """This rank's streams of each split (`ids`: split name -> flat ids, as `shard_streams` takes them, with its
    `spelled_from`) on `device`: (the "train" split's, `batch_size` streams a rank; {split: its streams} for every
    other split, `eval_batch_size` streams a rank). ValueError when a split cannot fill its streams."""
    train = shard_streams(ids["train"], batch_size, num_processes, process_index, spelled_from).to(device)
    evals = {
        s: shard_streams(t, eval_batch_size, num_processes, process_index, spelled_from).to(device)
        for s, t in ids.items()
        if s != "train"
    }
    return train, evals


def word_start(ids, at: int, spelled_from: int) -> int:
    """The first id of the word that holds position `at` of a spell-mode stream (ids from `spelled_from` on are
    bytes, `</w>` and `<+w>`: a word ends at an id below it or at `</w>`)."""
    while at > 0 and spelled_from <= int(ids[at - 1]) != spelled_from + SPELL_END:
        at -= 1
    return at


def shard_streams(ids, batch_size: int, num_processes: int = 1, process_index: int = 0,
                  spelled_from: int | None = None):  # fmt: skip
    """This rank's (batch_size, N) contiguous streams: rank r's share of a single-process batch of W*B streams,
    so W ranks with batch B train on exactly what one process with batch W*B would (and as many steps each).

    `ids`: a flat int64 tensor (gives a tensor view), or a flat numpy array such as the token cache's memory map
    (`data.token_array`; gives `data.TokenStreams`, which converts each batch as it is read). `spelled_from`: the
    ids carry spelled words from this id on (a speller's vocab_size): each stream then starts at its word's first id
    (`word_start`), a few ids before its even share, since the model reads a word's bytes only from its start; the
    streams, in memory, repeat those few ids of the stream before."""
    if batch_size < 1 or not 0 <= process_index < num_processes:
        raise ValueError(
            f"batch_size must be >= 1 and process_index in [0, num_processes), got {batch_size}, {process_index} "
            f"and {num_processes}."
        )
    total = batch_size * num_processes
    size = ids.numel() if torch.is_tensor(ids) else ids.size
    n = size // total
    if n < 2:
        raise ValueError(f"{size} tokens cannot fill {total} streams of at least 2 tokens.")
    rows = slice(process_index * batch_size, (process_index + 1) * batch_size)
    if spelled_from is not None:
        starts = [word_start(ids, g * n, spelled_from) for g in range(total)][rows]
        parts = [ids[s : s + n] for s in starts]
        return torch.stack([p.long() if torch.is_tensor(p) else torch.from_numpy(p.astype(np.int64)) for p in parts])
    if torch.is_tensor(ids):
        return ids[: n * total].view(total, n)[rows]
    return TokenStreams(ids[: n * total].reshape(total, n)[rows])


def segment_schedule(
    n: int, scheme: str, bptt: int, stride: int = 1, window: int = 1, variable_bptt: bool = False, seed: int = 0
) -> list[tuple[int, int]]:
    """(first target position, number of targets) per segment over streams of length n.

    `stateful`: segments of `bptt` targets; with `variable_bptt`, AWD-LSTM's random lengths (bptt w.p. 0.95 else
    bptt/2, then N(., 5), at least 5), drawn from a seeded RNG so every rank draws the same.
    `window`: `stride` (k1) targets per segment.
    """
    if scheme not in ("stateful", "window"):
        raise ValueError(f"scheme must be 'stateful' or 'window', got {scheme!r}.")
    length, size = ("stride", stride) if scheme == "window" else ("bptt", bptt)
    if size < 1:  # a segment of no targets would never advance
        raise ValueError(f"{length} must be >= 1, got {size}.")
    rng = random.Random(seed)
    out, p = [], 0
    while p < n - 1:
        if scheme == "window":
            k = stride
        elif variable_bptt:
            base = bptt if rng.random() < 0.95 else bptt / 2
            k = max(5, int(rng.gauss(base, 5)))
        else:
            k = bptt
        k = min(k, n - 1 - p)
        out.append((p, k))
        p += k
    return out


@dataclass
class Segment:
    input_ids: torch.Tensor
    shift_labels: torch.Tensor
    split: int | None  # window scheme: where the next segment's start state is taken


def make_segment(streams: torch.Tensor, p: int, k: int, scheme: str, window: int, stride: int) -> Segment:
    """Inputs and pre-shifted targets for targets at positions p+1 ... p+k (inputs p ... p+k-1)."""
    if scheme == "stateful":
        return Segment(streams[:, p : p + k], streams[:, p + 1 : p + k + 1].contiguous(), None)
    start = max(0, p - window + 1)  # the counted position p sees L-1 earlier positions, all recomputed here
    # Targets for the last k inputs only: the context in front feeds the window and skips the vocabulary softmax.
    y = streams[:, p + 1 : p + k + 1].contiguous()
    next_start = max(0, p + stride - window + 1)
    return Segment(streams[:, start : p + k], y, next_start - start)


def run_segment(model, seg: Segment, cache: PointerSentinelCache, scheme: str, output_hidden_states: bool = False):
    """Forward one segment; returns (summed NLL, output, the cache for the next segment)."""
    kw = dict(num_items_in_batch=1, logits_to_keep=1, output_hidden_states=output_hidden_states, use_cache=True)
    if scheme == "stateful":
        out = model(seg.input_ids, shift_labels=seg.shift_labels, past_key_values=cache, **kw)
        return out.loss, out, out.past_key_values.detach_()
    fresh = PointerSentinelCache()  # a new window each segment: every key is recomputed with the current weights
    fresh.hidden, fresh.cell, fresh.oov_used, fresh.unk_count = (
        cache.hidden,
        cache.cell,
        cache.oov_used,
        cache.unk_count,
    )
    out = model(seg.input_ids, shift_labels=seg.shift_labels, past_key_values=fresh, split_state_at=seg.split or None,
                **kw)  # fmt: skip
    nxt = PointerSentinelCache()
    if seg.split:
        nxt.hidden, nxt.cell = ([t.detach() for t in ts] for ts in out.split_state)
        if places := Placeholders.of(model.config):  # the row's history where the next segment starts (`new_word`)
            x = seg.input_ids[:, : seg.split]
            zero = x.new_zeros(x.shape[0])
            start = (t if t is not None else zero for t in (cache.oov_used, cache.unk_count))
            nxt.oov_used, nxt.unk_count = (t[:, -1] for t in places.history(x, torch.ones_like(x, dtype=torch.bool),
                                                                             *start))  # fmt: skip
    else:
        nxt.hidden, nxt.cell, nxt.oov_used, nxt.unk_count = cache.hidden, cache.cell, cache.oov_used, cache.unk_count
    return out.loss, out, nxt


def activation_penalty(out, alpha: float, beta: float) -> torch.Tensor | float:
    """AWD-LSTM's activation regularisers: AR, alpha * mean(h_t^2) on the dropped last-layer output, and TAR,
    beta * mean((h_t - h_{t-1})^2) on the raw one (`out.hidden_states[-1]`, so run with output_hidden_states)."""
    penalty = 0.0
    if alpha:
        penalty = penalty + alpha * out.last_hidden_state.pow(2).mean()
    if beta:
        h = out.hidden_states[-1]
        penalty = penalty + beta * (h[:, 1:] - h[:, :-1]).pow(2).mean()
    return penalty


class RunningLoss:
    """The mean training loss per target since it was last read, over every rank. The sum stays on the device, so
    adding a segment's loss costs the host no sync; only `read` (a collective: every rank calls it together) does."""

    def __init__(self):
        self.nll, self.count = torch.zeros((), dtype=torch.float64), 0

    def add(self, nll: torch.Tensor, count: int):
        """A segment's summed loss `nll` over its `count` targets (this rank's)."""
        self.nll = self.nll.to(nll.device) + nll.detach().double()
        self.count += count

    def read(self, accelerator) -> float:
        """The mean over all ranks since the last read (one process with their batches together reads the same)."""
        sums = accelerator.reduce(torch.stack([self.nll, self.nll.new_tensor(self.count)]), "sum")
        self.nll, self.count = torch.zeros_like(self.nll), 0
        return (sums[0] / sums[1]).item()


class ParameterAverager:
    """Polyak averaging of the weights from a trigger on: NT-ASGD (Merity et al., 2017) is SGD plus this average,
    switched on when validation has not improved on the best of all but the last `nonmono` epochs."""

    def __init__(self, params):
        self.params = list(params)
        self.average: list[torch.Tensor] | None = None
        self.count = 0

    @property
    def active(self) -> bool:
        return self.average is not None

    def start(self):
        self.average = [p.detach().clone() for p in self.params]
        self.count = 1

    @torch.no_grad()
    def update(self):
        if self.average is None:
            return
        self.count += 1
        for a, p in zip(self.average, self.params, strict=True):
            a.add_(p.detach() - a, alpha=1 / self.count)

    @torch.no_grad()
    def swap(self):
        """Exchange live and averaged weights (call twice to undo): evaluate and save with the average."""
        if self.average is None:
            return
        for a, p in zip(self.average, self.params, strict=True):
            tmp = p.detach().clone()
            p.copy_(a)
            a.copy_(tmp)

    def state_dict(self):
        return {"average": self.average, "count": self.count}

    def load_state_dict(self, state):
        self.average = (
            None
            if state["average"] is None
            else [a.to(p.device) for a, p in zip(state["average"], self.params, strict=True)]
        )
        self.count = state["count"]


def improves(val_loss: float, best_loss: float, min_improvement: float = 0.0) -> bool:
    """Whether a validation loss beats the best so far by at least `min_improvement` of its perplexity (0: any gain);
    a gain below it counts as a plateau, as ReduceLROnPlateau's relative threshold does."""
    return val_loss < best_loss + math.log1p(-min_improvement)


def nt_asgd_triggered(val_losses: list[float], nonmono: int) -> bool:
    """AWD-LSTM's non-monotone trigger, on the validation losses so far (the latest last): the latest is worse than the
    best of the earlier ones, leaving out the last `nonmono` of those, and more than `nonmono` came before it
    (AWD-LSTM's main.py checks before it appends the latest, so its history holds the earlier ones only)."""
    *earlier, latest = val_losses
    return len(earlier) > nonmono and latest > min(earlier[:-nonmono])


# ---- a run's control around its steps: the epoch-end schedule, the memory check, the time limit ----
class PlateauSchedule:
    """What a validation at an epoch end does to a run (examples/train.py's rule): a loss that does not beat the best
    so far by `min_improvement` (`improves`) multiplies the LR by `lr_decay`, and `patience` of them in a row end
    training. With NT-ASGD (`ntasgd`) a stall starts the weight average instead, at AWD-LSTM's non-monotone trigger
    (`nt_asgd_triggered` over `nonmono`) or at `patience` stalls in a row, whichever comes first; from then on the
    stalls lower the LR and the patience judges the average.

    The counters it reads and moves, `lr`, `best_val`, `bad_epochs` and `val_losses`, are the run's `state`
    (`checkpointing.TrainState`, which every checkpoint saves): the schedule holds only its settings."""

    def __init__(self, lr_decay: float = 0.5, patience: int = 3, min_improvement: float = 0.0, ntasgd: bool = False,
                 nonmono: int = 5):  # fmt: skip
        self.lr_decay, self.patience, self.min_improvement = lr_decay, patience, min_improvement
        self.ntasgd, self.nonmono = ntasgd, nonmono

    def step(self, state, val_loss: float, averager: ParameterAverager) -> tuple[bool, bool]:
        """Count one validation loss (the same on every rank): whether it improved (keep the weights it scored as the
        best) and whether `averager` started here."""
        state.val_losses.append(val_loss)
        improved = improves(val_loss, state.best_val, self.min_improvement)
        if improved:
            state.best_val, state.bad_epochs = val_loss, 0
        else:
            state.bad_epochs += 1
            if not self.ntasgd or averager.active:  # NT-ASGD's stalls start the average, then lower the LR
                state.lr *= self.lr_decay
        start = bool(
            self.ntasgd
            and not averager.active
            and (nt_asgd_triggered(state.val_losses, self.nonmono) or state.bad_epochs >= self.patience)
        )  # a stall that outlasts the patience starts the average too, rather than ending a run that never averaged
        if start:
            averager.start()
            state.bad_epochs = 0  # the patience judges the average from here
        return improved, start

    def stop_reason(self, state) -> str | None:
        """Why training ends at this validation (`patience` in a row without improvement), or None."""
        if state.bad_epochs < self.patience:
            return None
        gain = f" by {self.min_improvement:.1%}" if self.min_improvement else ""
        return f"validation did not improve{gain} for {self.patience} evaluations in a row"


def check_fits(config, streams: int, optimizer: str, available: int | None = None):
    """Refuse (ValueError), before anything is allocated, a model whose float32 weights, gradients and optimizer state
    ("sgd", "ntasgd" or "adamw"), with the recurrent state and pointer window of `streams` streams, need more memory
    than the device has (a lower bound: activations come on top). `available`: bytes (default: the GPU's if there is
    one, else the machine's)."""
    with torch.device("meta"):  # sizes only, no memory
        params = sum(p.numel() for p in PointerSentinelForCausalLM(config).parameters())
    copies = {"adamw": 4, "ntasgd": 3, "sgd": 2}[optimizer]  # weights, gradients (+ Adam's two moments / the average)
    window = streams * config.pointer_window * (4 * config.output_size + 8 + 1)  # states, ids, mask
    need = 4 * params * copies + window
    if available is None:
        if torch.cuda.is_available():
            available = torch.cuda.mem_get_info()[1]
        else:
            available = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if need > available:
        raise ValueError(
            f"the model needs at least {need / 2**30:,.1f} GiB ({params:,} parameters x {copies} float32 copies with "
            f"{optimizer}, and a pointer window of {config.pointer_window:,} x {config.output_size} per stream for "
            f"{streams} streams), more than the {available / 2**30:,.1f} GiB this device has: use a smaller "
            "hidden_size, pointer_window or batch"
        )


def accelerate_broadcast(accelerator, *flags: bool) -> tuple[bool, ...]:
    """The main process's flags, on every rank (a collective: every rank must call it at the same step)."""
    if accelerator.num_processes == 1:
        return flags
    from accelerate.utils import broadcast

    return tuple(bool(f) for f in broadcast(torch.tensor(flags, device=accelerator.device)).tolist())


class TimeLimit:
    """A training time limit (examples/train.py's --max_train_minutes): training stops at the first optimizer step that
    ends past it. `clock`: "wall" (time.perf_counter) or "cpu" (the process's CPU time, time.process_time).

    Reading the host clock costs nothing, so one process checks after every step. Ranks must stop at the same step,
    so with several processes the main process's clock decides, through a broadcast: at every log step (which all
    ranks reach together) it says whether the limit has passed and whether it is near, i.e. within two of the longest
    stretches between log steps so far; from a "near" decision on, it is broadcast after every step. Before the first
    log step the limit counts as near (a run's first log_every steps are cheap to check), so the decision is precise
    from the start and the broadcast per step (one host-device sync) is paid only close to the limit.
    """

    def __init__(self, accelerator, minutes: float | None, clock: str = "wall", earlier: float = 0.0):
        self.accelerator, self.seconds = accelerator, None if minutes is None else 60 * minutes
        self.now = time.perf_counter if clock == "wall" else time.process_time
        self.start = self.last_log = self.now() - earlier  # `earlier`: seconds trained before a resume
        self.longest_gap, self.near = 0.0, True

    def elapsed(self) -> float:
        return self.now() - self.start

    def passed(self, optimizer_step: bool, log_step: bool) -> bool:
        """Call on every rank after every segment: whether training must stop now."""
        if self.seconds is None or not (optimizer_step or log_step):
            return False
        now = self.now()
        over = now - self.start > self.seconds
        if self.accelerator.num_processes == 1:
            return over
        if log_step:
            self.longest_gap, self.last_log = max(self.longest_gap, now - self.last_log), now
            near = now - self.start + 2 * self.longest_gap > self.seconds
            over, self.near = accelerate_broadcast(self.accelerator, over, near)
            return over
        return self.near and accelerate_broadcast(self.accelerator, over)[0]


class StopSignal:
    """A signal (default SIGUSR1) that asks a run to stop at its next agreed point, an epoch end, on every rank. The
    handler only sets a flag (installed from the main thread, where Python runs handlers; elsewhere, or without the
    signal, none is); `asked` hands the flag to every rank through accelerate's trigger."""

    def __init__(self, signum: int | None = getattr(signal, "SIGUSR1", None)):
        self.received = threading.Event()
        if signum is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signum, lambda *_: self.received.set())

    def asked(self, accelerator) -> bool:
        """Whether the signal reached any rank since the last call (a collective: every rank calls it together)."""
        if self.received.is_set():
            self.received.clear()
            accelerator.set_trigger()
        return accelerator.check_trigger()


def load_resume(
    accelerator,
    folder,
    states: dict,
    layout: dict | None,
    batch_size: int,
    oov_pointer: bool,
    optimizer=None,
    seed: int | None = None,
) -> dict:
    """Load the checkpoint `folder` into a run (`checkpointing.load_checkpoint` with its `states`) and return this
    rank's stream state for its `PointerSentinelCache`: re-sharded for `batch_size` streams a rank from the layout the
    checkpoint recorded (`layout`; None, before layouts were recorded: the same batch), on the accelerator's device (a
    checkpoint saved on a GPU resumes on a CPU, and the other way round).

    `oov_pointer`: whether this run's model has the placeholders' own weights, as the checkpoint's must. `optimizer`
    keeps this run's groups' `lr_scale` (parameter_groups), not the checkpoint's. With `seed`, a resume on another
    world size reseeds every rank from seed + the checkpoint's step, since the saved RNG states were other ranks' (see
    checkpointing.stream_layout), and says so. CheckpointError in one line: a forged or damaged file (named, before
    anything of it is loaded), or a checkpoint that does not fit the run."""
    saved_oov = any(is_oov_weight(k) for k in saved_weight_names(folder))
    if saved_oov != oov_pointer:
        raise CheckpointError(f"{folder} was trained {'with' if saved_oov else 'without'} the placeholders' own "
                              f"weights: resume it {'with' if saved_oov else 'without'} --oov_pointer")  # fmt: skip
    scales = [group.get("lr_scale", 1.0) for group in optimizer.param_groups] if optimizer is not None else []
    load_checkpoint(accelerator, folder, states)
    # Another world size takes the same streams in other shares (see checkpointing.stream_layout). Read on the CPU.
    saved_batch = layout["per_device_train_batch_size"] if layout else batch_size
    stream = resharded_stream_state(folder, saved_batch, batch_size, accelerator.process_index)
    for group, scale in zip(optimizer.param_groups if scales else (), scales, strict=True):
        group["lr_scale"] = scale
    W = accelerator.num_processes
    if seed is not None and layout and layout["world_size"] != W:
        set_seed(seed + read_manifest(folder)["step"], device_specific=True)
        accelerator.print(
            f"resumed the {W * batch_size} streams of {layout['world_size']} process(es) on {W}: each continues "
            "where it stopped; the RNGs are reseeded from --seed and the step"
        )
    stream = send_to_device(stream, accelerator.device)
    if stream.get("spelled_rows") is not None:  # stream_state's lists, as the speller's forward reads them
        stream["spelled_rows"] = SpelledRows([
            SpelledRow({tuple(w): k for w, k in r["slots"]}, dict(map(tuple, r["last_seen"])),
                       [None if w is None else tuple(w) for w in r["window"]], list(r["word"]), r["clock"])
            for r in stream["spelled_rows"]])  # fmt: skip
    if stream.get("spell_anchor") is not None:
        stream["spell_anchor"] = SpellAnchor(*stream["spell_anchor"])
    return stream


# ---- a new model and its training streams, checked before any training ----
def config_for_tokenizer(tokenizer, fields: dict) -> PointerSentinelConfig:
    """The config of a new model for `tokenizer`: its word count (vocab_size) and `<eos>` (also bos and pad) from it,
    an open-vocabulary tokenizer's placeholders too (oov_slots, unk_token_id), and `fields` for the rest. `fields`
    naming one of those: a ValueError; an invalid field: the config's own error."""
    eos = tokenizer.eos_token_id
    from_tokenizer = dict(vocab_size=word_count(tokenizer), eos_token_id=eos, bos_token_id=eos, pad_token_id=eos)
    if getattr(tokenizer, "oov_slots", 0):  # an open-vocabulary tokenizer: its placeholders are the model's too
        from_tokenizer.update(oov_slots=tokenizer.oov_slots, unk_token_id=tokenizer.unk_token_id)
    if getattr(tokenizer, "spell_unseen", False):  # a spelling tokenizer: the model needs its speller
        if not fields.get("speller_size"):
            raise ValueError("the tokenizer spells the words it lacks: the model needs speller_size > 0")
        from_tokenizer.update(unk_token_id=tokenizer.unk_token_id)
    if given := sorted(set(from_tokenizer) & set(fields)):
        raise ValueError(f"{', '.join(given)} come from the tokenizer ({word_count(tokenizer)} words, <eos> id {eos}); "
                         "leave them out")  # fmt: skip
    return PointerSentinelConfig(**from_tokenizer, **fields)


SPELLER_SIZE = 256  # a raw-text run's speller (train.py's --speller_size), as the shipped folders' (add_speller.py)
SPELLED_OOV_SLOTS = 256  # the model's numbering of a text's spelled words: more than a pointer window of 100 words
# A spelling run's --unseen_word_rate when none is given: chosen on validation (results/unseen_rate/README.md)
SPELLED_UNSEEN_WORD_RATE = 0.3


def unseen_word_rate_for(config, rate: float | None) -> float:
    """train.py's --unseen_word_rate (None: not given) for a model of `config`: with a speller, SPELLED_UNSEEN_WORD_RATE
    (its rare training words spelled, so the speller learns to spell and the pointer to copy words the vocabulary
    lacks; a training split built from the text holds every word, so with none spelled neither would learn); without
    one, 0 (placeholders are a fine-tuning recipe's choice)."""
    if rate is not None:
        return rate
    return SPELLED_UNSEEN_WORD_RATE if config.speller_size else 0.0


def speller_for(tokenizer, built: bool, speller_size: int | None) -> int:
    """The speller size of a new model for `tokenizer` (train.py's --speller_size; None: not given): a tokenizer that
    train.py built from raw text (its `raw_text`, tokenization.is_raw_text) or a spelling tokenizer gets
    SPELLER_SIZE, any other none (a tokenized corpus, WikiText's or PTB's, keeps its `<unk>`). ValueError for a
    spelling tokenizer with --speller_size 0."""
    spells = getattr(tokenizer, "spell_unseen", False)
    if speller_size is None:
        return SPELLER_SIZE if spells or (built and tokenizer.init_kwargs.get("raw_text")) else 0
    if spells and not speller_size:
        raise ValueError("--speller_size 0: the tokenizer spells the words it lacks, so its model needs a speller")
    return speller_size


def spelling_fields(tokenizer, fields: dict, speller_size: int) -> tuple:
    """The tokenizer (a spelling one, `tokenization.spelling_vocabulary`) and model fields of a new model with a
    speller of `speller_size` units: the fields' oov_slots (the model's numbering of spelled words) default to
    SPELLED_OOV_SLOTS. speller_size 0: both as they are."""
    if not speller_size:
        return tokenizer, fields
    return spelling_vocabulary(tokenizer), {"oov_slots": SPELLED_OOV_SLOTS, **fields, "speller_size": speller_size}


def fit_cutoffs(cutoffs: list[int], vocab_size: int) -> list[int]:
    """A recipe's adaptive softmax cutoffs for a vocabulary of `vocab_size` words: those below it (a cutoff at or past
    it would leave its cluster no word). None left: a full softmax, which a vocabulary that small affords."""
    return [c for c in cutoffs if c < vocab_size]


def check_streams(tokens: int, streams: int, scheme: str, bptt: int, window: int, stride: int):
    """Refuse (ValueError) training streams too short for the scheme: `streams` streams (over all ranks) of `tokens`
    tokens each. The window scheme needs streams longer than the pointer `window` and than one `stride`; the stateful
    one at least two segments of `bptt`."""
    if scheme == "window" and tokens <= window:
        raise ValueError(
            f"The pointer window ({window}) is longer than each training stream ({tokens} tokens with {streams} "
            "streams); use a smaller window or batch."
        )
    if scheme == "window" and stride >= tokens - 1:
        raise ValueError(
            f"--stride {stride} is not shorter than each training stream ({tokens} tokens with {streams} streams); "
            "use a smaller stride or batch."
        )
    if tokens < 2 * bptt and scheme == "stateful":
        raise ValueError(f"Each of the {streams} streams holds {tokens} tokens, less than 2 x bptt.")


def compile_for_training(model, backend: str = "inductor"):
    """Compile `model`'s forward as one graph for its training calls only (`model.training`): evaluation, with other
    shapes, keeps the eager forward rather than compiling again."""
    eager_forward = model.forward
    compiled_forward = torch.compile(eager_forward, fullgraph=True, backend=backend)
    model.forward = lambda *a, **kw: (compiled_forward if model.training else eager_forward)(*a, **kw)
