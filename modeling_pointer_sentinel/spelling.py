"""The open-vocabulary protocol on a word-level corpus: the words outside the K most frequent are spelled (their ids
become their UTF-8 bytes and `</w>`, `config.vocab_limit` = K folds their p_vocab into `<unk>`'s), the speller is
trained on the training split's rare words, and a text is scored in bits per byte, split by how often each word was
seen in training (Mielke & Eisner's buckets: 0, 1-100, over 100)."""

import copy
import math
import zlib
from collections import deque
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np
import torch
from tqdm.auto import tqdm

from .modeling_pointer_sentinel import (
    SPELL_END,
    SPELL_SYMBOLS,
    PointerSentinelCache,
    PointerSentinelForCausalLM,
    Speller,
)
from .training import shard_streams

FREQUENCY_BUCKETS = ((0, 0), (1, 100), (101, math.inf))


def word_spellings(tokenizer, word_ids) -> dict[int, tuple[int, ...]]:
    """Each word id's spelling: the UTF-8 bytes of its token text, then SPELL_END."""
    return {int(i): (*tokenizer.convert_ids_to_tokens(int(i)).encode(), SPELL_END) for i in word_ids}


def held_out(spelling: tuple, every: int) -> bool:
    """Whether a word is one of the one in `every` kept from the speller's training, by a checksum of its bytes (the
    same words on every machine and in every run)."""
    return zlib.crc32(bytes(spelling[:-1])) % every == 0


def spell_stream(ids: torch.Tensor, limit: int, spellings: dict, vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ids of a corpus stream with every word from `limit` on spelled (bytes at vocab_size + b, then `</w>`), and
    for each new id the index of the word it belongs to (a word's bytes and `</w>` share their word's)."""
    out, owner = [], []
    for j, w in enumerate(ids.tolist()):
        symbols = spellings[w] if w >= limit else None
        part = [vocab_size + s for s in symbols] if symbols else [w]
        out += part
        owner += [j] * len(part)
    return torch.tensor(out), torch.tensor(owner)


@torch.no_grad()
def speller_pairs(model: PointerSentinelForCausalLM, ids: torch.Tensor, rare: set[int], batch_size: int = 32,
                  bptt: int = 100) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """The word LSTM's h_t before each occurrence of a `rare` word in the training stream, and that word: (n, D) and
    (n,), what the speller learns to spell from."""
    streams = shard_streams(ids, batch_size)
    cache, hs, words = PointerSentinelCache(), [], []
    is_rare = torch.zeros(max([int(ids.max()), *rare]) + 1, dtype=torch.bool)
    is_rare[list(rare)] = True
    for start in tqdm(range(0, streams.shape[1] - 1, bptt), desc="speller pairs", leave=False):
        x, y = streams[:, start : start + bptt], streams[:, start + 1 : start + bptt + 1]
        h = model.model(x[:, : y.shape[1]], past_key_values=cache).last_hidden_state
        hit = is_rare[y]
        hs.append(h[hit])
        words.append(y[hit])
    return torch.cat(hs), torch.cat(words)


def with_speller(word_model: PointerSentinelForCausalLM, speller_size: int, **config) -> PointerSentinelForCausalLM:
    """The word model with a new, untrained speller of `speller_size` units (`config` may also set vocab_limit); every
    other weight is the word model's own."""
    settings = word_model.config.to_dict() | {"speller_size": speller_size} | config
    model = PointerSentinelForCausalLM(type(word_model.config).from_dict(settings))
    missing = model.load_state_dict(word_model.state_dict(), strict=False).missing_keys
    assert all(k.startswith("speller.") for k in missing), missing
    model.generation_config = copy.deepcopy(word_model.generation_config)
    return model.to(word_model.device)


def without_speller(model: PointerSentinelForCausalLM) -> PointerSentinelForCausalLM:
    """The word model under a folder's speller (`with_speller`'s inverse): the same weights but the speller's, its
    logits over the vocabulary and the placeholder slots. Text that spells no word scores as with the speller."""
    settings = model.config.to_dict() | {"speller_size": 0, "vocab_limit": 0}
    word = PointerSentinelForCausalLM(type(model.config).from_dict(settings))
    state = {k: v for k, v in model.state_dict().items() if not k.startswith("speller.")}
    word.load_state_dict(state)
    word.generation_config = copy.deepcopy(model.generation_config)
    return word.to(model.device, model.dtype).train(model.training)


def _spelling_table(words: torch.Tensor, spellings: dict) -> torch.Tensor:
    """(max word id + 1, K): each word's symbols, padded with -1."""
    table = torch.full((int(words.max()) + 1, max(map(len, spellings.values()))), -1, dtype=torch.long)
    for w in words.unique().tolist():
        table[w, : len(spellings[w])] = torch.tensor(spellings[w])
    return table


def _spelling_log_probs(speller: Speller, h: torch.Tensor, symbols: torch.Tensor) -> torch.Tensor:
    """log p_spell of each symbol (-1: padding, 0 there) of each row's word given its h: (N, K)."""
    symbols = symbols[:, : int((symbols >= 0).sum(-1).max())]
    log_p = speller(h, symbols).gather(-1, symbols.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return log_p.masked_fill(symbols < 0, 0)


@torch.no_grad()
def speller_bits_per_byte(speller: Speller, h: torch.Tensor, words: torch.Tensor, spellings: dict,
                          batch_size: int = 1024) -> float:  # fmt: skip
    """The speller's bits per symbol (each byte and the word's end) on (h, word) pairs: the cost of writing those
    words as new words, what the settings of `train_speller` are chosen on."""
    table, bits, symbols = _spelling_table(words, spellings), 0.0, 0
    for i in range(0, len(words), batch_size):
        spelled = table[words[i : i + batch_size]]
        bits -= _spelling_log_probs(speller, h[i : i + batch_size], spelled).sum().item() / math.log(2)
        symbols += int((spelled >= 0).sum())
    return bits / symbols


def train_speller(speller: Speller, h: torch.Tensor, words: torch.Tensor, spellings: dict, epochs: int = 3,
                  batch_size: int = 256, lr: float = 2e-3, seed: int = 0, say=print,
                  after_epoch=None) -> list[float]:  # fmt: skip
    """Maximum likelihood of each rare word's spelling given its context h_t (Adam, the mean over symbols); returns
    each epoch's bits per symbol. `after_epoch(epoch)`, if given, runs after each epoch (1, 2, ...)."""
    table = _spelling_table(words, spellings)
    optimizer = torch.optim.Adam(speller.parameters(), lr=lr)
    generator, history = torch.Generator().manual_seed(seed), []
    for epoch in range(epochs):
        order, total, count = torch.randperm(len(words), generator=generator), 0.0, 0
        for i in tqdm(range(0, len(words), batch_size), desc=f"speller epoch {epoch + 1}", leave=False):
            pick = order[i : i + batch_size]
            symbols = table[words[pick]]
            real = int((symbols >= 0).sum())
            loss = -_spelling_log_probs(speller, h[pick], symbols).sum() / real
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(speller.parameters(), 1.0)
            optimizer.step()
            total, count = total + loss.item() * real, count + real
        history.append(total / count / math.log(2))
        say(f"speller epoch {epoch + 1}: {history[-1]:.3f} bits per symbol")
        if after_epoch is not None:
            after_epoch(epoch + 1)
    return history


@torch.no_grad()
def spelled_bits_per_byte(model: PointerSentinelForCausalLM, ids: torch.Tensor, owner: torch.Tensor,
                          word_bytes: torch.Tensor, word_counts: torch.Tensor, text_bytes: int,
                          chunk: int = 512) -> dict:  # fmt: skip
    """Bits per byte of a spelled stream scored as one row in chunks with the cache (chunks = whole): the total over
    `text_bytes`, and per training-frequency bucket the bits of its words over their bytes (word_bytes: each word's
    bytes with its separator; word_counts: each word's training count). Every word after the first is a target."""
    cache, nats = PointerSentinelCache(), torch.zeros(len(word_bytes), dtype=torch.float64)
    row = ids.unsqueeze(0)
    for start in tqdm(range(0, row.shape[1], chunk), desc="bits per byte", leave=False):
        x = row[:, start : start + chunk + 1]
        out = model(x[:, :chunk], past_key_values=cache)
        targets = x[0, 1:]
        log_p = out.logits[0, : targets.shape[0]].gather(-1, targets[:, None])[:, 0]  # logits are log p
        nats.index_add_(0, owner[start + 1 : start + 1 + targets.shape[0]], -log_p.double())
    bits = nats / math.log(2)
    result = {"bits_per_byte": bits.sum().item() / text_bytes, "words": len(word_bytes) - 1, "bytes": text_bytes}
    for lo, hi in FREQUENCY_BUCKETS:
        pick = (word_counts >= lo) & (word_counts <= hi)
        pick[0] = False  # the first word is no target
        if pick.any():
            words_bits = bits[pick].sum().item() / word_bytes[pick].sum().item()
            result[f"train_count_{lo}-{hi}"] = {"words": int(pick.sum()), "bits_per_byte": words_bits}
    return result


# ---- bits per byte of any text a spelling folder reads, split by kind of word ----------------------------------------

WORD_KINDS = ("vocabulary", "copy", "new")
BLOCK = 1 << 20  # ids a pass over a text reads at once


def word_ends(ids, V: int):
    """Where a word of a spell-mode id stream ends: a vocabulary id, a spelled word's `</w>`, or an added token (an id
    after the spelling symbols: `tokenizer.add_tokens`)."""
    return (ids < V) | (ids == V + SPELL_END) | (ids >= V + SPELL_SYMBOLS)


class WordKinds:
    """The words of a spell-mode id stream fed a block at a time (`__call__`), state carried: each word's kind (a
    vocabulary word: an id below V; a copy: a spelled word that one of the last L words before it spells alike, so the
    pointer's window holds it; new: any other spelled word) and its spelled bytes (0 for a vocabulary word). Held,
    whatever the length: the word being spelled and the spelled words among the last L (each one's last place)."""

    def __init__(self, V: int, L: int, word: int = 0):
        self.V, self.L, self.word = V, L, word  # word: the place in the text of the next word
        self.symbols, self.last, self.order = [], {}, deque()

    def __call__(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(place, kind: an index into WORD_KINDS, spelled bytes) of each word that ends in `ids`."""
        ends = word_ends(ids, self.V)
        rank = np.cumsum(ends) - 1  # at a word's end: its rank among the words that end here
        place = self.word + np.arange(int(ends.sum()))
        kind, spelled = np.zeros(len(place), np.int64), np.zeros(len(place), np.int64)
        spelling = (ids >= self.V) & (ids < self.V + SPELL_SYMBOLS)
        for p in np.flatnonzero(spelling).tolist():  # the spelled words' symbols (a vocabulary word: kind 0)
            if ids[p] - self.V != SPELL_END:
                self.symbols.append(int(ids[p]) - self.V)
                continue
            j, word = int(rank[p]), tuple(self.symbols)
            w, self.symbols = int(place[j]), []
            kind[j] = 1 if word in self.last and self.last[word] >= w - self.L else 2  # copy, new
            spelled[j] = sum(s < 256 for s in word)
            self.last[word] = w
            self.order.append((w, word))
            while self.order[0][0] <= w - self.L:  # in no later word's window
                seen, gone = self.order.popleft()
                if self.last[gone] == seen:
                    del self.last[gone]
        self.word += len(place)
        return place, kind, spelled


def spelled_words(ids: list[int], V: int, L: int) -> tuple[torch.Tensor, list[str], list[int]]:
    """The words of a spell-mode id stream held whole: per id, the index of its word (a spelled word's bytes, `<+w>`
    and `</w>` share their word's); per word, its kind and its spelled bytes (`WordKinds`)."""
    ids = np.asarray(ids, dtype=np.int64)
    words = WordKinds(V, L)
    _, kind, spelled = words(ids)
    if words.symbols:
        raise ValueError("The ids end inside a spelled word: its `</w>` is missing.")
    ends = word_ends(ids, V)
    return torch.from_numpy(np.cumsum(ends) - ends), [WORD_KINDS[k] for k in kind.tolist()], spelled.tolist()


class WordScores(NamedTuple):
    """Scored words (`SpelledText.scores`): their places in the text, -log p (float64, a spelled word's the sum over
    its bytes and `</w>`), kinds (indices into WORD_KINDS) and bytes (UTF-8 bytes and one separator)."""

    place: torch.Tensor
    nats: torch.Tensor
    kind: torch.Tensor
    bytes: torch.Tensor


class SpelledText:
    """A spell-mode id stream read as `rows` rows of consecutive whole words (row b from word b * n // rows on), scored
    with the state carried across `bptt` chunks (`scores`), a chunk of each row read at a time: memory does not grow
    with the text. `flat`: the ids as (1, N), indexed [0, a:b] to a numpy array (an id file's
    `evaluation.StreamFile`, or an array in memory); `limit`: the first ids only. The text is read up to the last
    word's end (of the first `limit` ids). `byte_table`: each id's bytes (`vocabulary_bytes`); V: the vocabulary's
    words (`config.vocab_size`); L: the pointer's window. Two passes over the ids find the rows, before anything is
    scored. ValueError when the words cannot fill the rows."""

    def __init__(self, flat, byte_table: torch.Tensor, V: int, L: int, rows: int, limit: int | None = None):
        self.flat, self.byte_table, self.L, self.V = flat, byte_table, L, V
        size, n, last = min(flat.shape[1], limit or flat.shape[1]), 0, -1
        for a in range(0, size, BLOCK):
            ends = np.flatnonzero(word_ends(flat[0, a : min(a + BLOCK, size)], self.V))
            if len(ends):
                n, last = n + len(ends), a + int(ends[-1])
        self.ids, self.words = last + 1, n
        if not 0 < rows < n:
            raise ValueError(f"{n} words cannot fill {rows} rows of at least two words.")
        self.first_words = [b * n // rows for b in range(rows)]
        self.context = [max(w - L, 0) for w in self.first_words]  # the L words before a row give its kinds
        self.word_start = self._word_starts({*self.first_words, *self.context})
        self.firsts = [self.word_start[w] for w in self.first_words]
        self.ends = [*self.firsts[1:], self.ids]

    def _word_starts(self, words: set) -> dict:
        """Each word's first id (a word starts after the word end before it)."""
        start, todo, seen = {0: 0}, sorted(w for w in words if w), 0
        for a in range(0, self.ids, BLOCK):
            if not todo:
                break
            ends = np.flatnonzero(word_ends(self.flat[0, a : min(a + BLOCK, self.ids)], self.V))
            while todo and todo[0] <= seen + len(ends):
                w = todo.pop(0)
                start[w] = a + int(ends[w - seen - 1]) + 1
            seen += len(ends)
        return start

    @torch.no_grad()
    def scores(self, model: PointerSentinelForCausalLM, bptt: int = 200, progress=None) -> Iterator[WordScores]:
        """The words that end in each chunk, scored (a row's first word has no context and is not scored)."""
        rows, V = len(self.firsts), self.V
        kinds = []
        for w, s in zip(self.context, self.firsts, strict=True):
            kinds.append(WordKinds(V, self.L, w))
            kinds[-1](self.flat[0, self.word_start[w] : s + 1])  # the words before the row, and its first id (an input)
        width = max(e - s for s, e in zip(self.firsts, self.ends, strict=True))
        carry = torch.zeros(rows, dtype=torch.float64)  # each row's word in progress, its nats so far
        cache, device = PointerSentinelCache(), model.device
        for start in range(0, width - 1, bptt):
            k = min(bptt, width - 1 - start)
            chunk, mask = torch.zeros(rows, k + 1, dtype=torch.long), torch.zeros(rows, k + 1, dtype=torch.bool)
            for b, (s, e) in enumerate(zip(self.firsts, self.ends, strict=True)):
                part = torch.from_numpy(self.flat[0, min(s + start, e) : min(s + start + k + 1, e)].astype(np.int64))
                chunk[b, : len(part)], mask[b, : len(part)] = part, True
            x, y, counted = chunk[:, :k], chunk[:, 1:], mask[:, 1:]
            out = model(x.to(device), attention_mask=mask[:, :k].to(device), past_key_values=cache)
            log_p = out.logits.gather(-1, y.to(device).unsqueeze(-1)).squeeze(-1).double().cpu()
            # each target's word: the row's word in progress (slot 0 of the row's k + 1) or one that starts here
            ends = word_ends(y, V) & counted
            slot = torch.cumsum(ends, 1) - ends.long() + torch.arange(rows)[:, None] * (k + 1)
            nats = torch.zeros(rows * (k + 1), dtype=torch.float64)
            nats[:: k + 1] = carry
            nats.index_add_(0, slot[counted], -log_p[counted])
            carry = nats[slot[:, -1] + ends[:, -1]]
            words = [w(r[c].numpy()) for w, r, c in zip(kinds, y, counted, strict=True)]  # row by row, as y[ends]
            place, kind, spelled = (np.concatenate(parts) for parts in zip(*words, strict=True))
            word = y[ends]
            spelled_end = word == V + SPELL_END  # a spelled word: its spelled bytes; any other: its id's
            by_id = self.byte_table[word.masked_fill(spelled_end, 0)]
            size = torch.where(spelled_end, torch.from_numpy(spelled) + 1, by_id)
            scored = torch.from_numpy(~np.isin(place, self.first_words))
            yield WordScores(*(t[scored] for t in (torch.from_numpy(place), nats[slot[ends]],
                                                   torch.from_numpy(kind), size)))  # fmt: skip
            if progress is not None:
                progress.update(int(counted.sum()))


class SpelledTotals:
    """Running totals of scored words (`SpelledText.scores`' chunks, `add`) per kind: words, bytes and nats, whatever
    the text's length; `figures` gives bits per byte and the word perplexity, over all words and per kind."""

    def __init__(self):
        self.words = torch.zeros(len(WORD_KINDS), dtype=torch.int64)
        self.bytes = torch.zeros(len(WORD_KINDS), dtype=torch.int64)
        self.nats = torch.zeros(len(WORD_KINDS), dtype=torch.float64)

    def add(self, scores: WordScores) -> "SpelledTotals":
        self.words.index_add_(0, scores.kind, torch.ones_like(scores.kind))
        self.bytes.index_add_(0, scores.kind, scores.bytes)
        self.nats.index_add_(0, scores.kind, scores.nats)
        return self

    def figures(self) -> dict:
        """Bits per byte over the scored words, each counted with its bytes and one separator, and the same per kind
        of word, with each kind's share of the words and bits."""
        bits, words, n_bytes = self.nats / math.log(2), int(self.words.sum()), int(self.bytes.sum())
        total_bits = bits.sum().item()
        result = {"bits_per_byte": total_bits / n_bytes, "words": words, "bytes": n_bytes,
                  "word_perplexity": math.exp(self.nats.sum().item() / words)}  # fmt: skip
        for i, name in enumerate(WORD_KINDS):
            if self.words[i]:
                result[name] = {"words": int(self.words[i]), "bytes": int(self.bytes[i]),
                                "bits_per_byte": bits[i].item() / int(self.bytes[i]),
                                "bits_share": bits[i].item() / total_bits}  # fmt: skip
        return result


def vocabulary_bytes(tokenizer, V: int) -> torch.Tensor:
    """(len(tokenizer),) int64, by id: each word's bytes as bits per byte counts them, its UTF-8 bytes and one
    separator, for the V vocabulary words and the added tokens after the spelling symbols; `<eos>` 0 (the line break
    is the separator of the word before it); the spelling symbols 0: a spelled word counts its spelled bytes and one
    separator (`spelled_words`)."""
    table = torch.zeros(len(tokenizer), dtype=torch.int64)
    words = [*range(V), *range(V + SPELL_SYMBOLS, len(tokenizer))]
    table[words] = torch.tensor([len(t.encode()) + 1 for t in tokenizer.convert_ids_to_tokens(words)])
    table[tokenizer.eos_token_id] = 0
    return table


@torch.no_grad()
def text_bits_per_byte(model: PointerSentinelForCausalLM, tokenizer, ids: torch.Tensor, batch_size: int = 10,
                       bptt: int = 200) -> dict:  # fmt: skip
    """`SpelledTotals.figures` of a spell-mode id stream (examples/evaluate.py's measure, for train.py's validation
    and test): each word counted with its UTF-8 bytes and one separator (a line's `<eos>` is the separator of the
    word before it), scored by `SpelledText`. A stream cut inside a spelled word is read up to the word before."""
    V, L = model.config.vocab_size, model.config.pointer_window
    text = SpelledText(ids.numpy()[None], vocabulary_bytes(tokenizer, V), V, L, batch_size)
    training, totals = model.training, SpelledTotals()
    for scores in text.scores(model.eval(), bptt):
        totals.add(scores)
    model.train(training)
    return totals.figures()
