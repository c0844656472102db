"""The open-vocabulary protocol on a word-level corpus: the words outside the K most frequent are spelled (their ids
become their UTF-8 bytes and `</w>`, `config.vocab_limit` = K folds their p_vocab into `<unk>`'s), the speller is
trained on the training split's rare words, and a text is scored in bits per byte, split by how often each word was
seen in training (Mielke & Eisner's buckets: 0, 1-100, over 100)."""

import copy
import math

import torch
from tqdm.auto import tqdm

from .modeling_pointer_sentinel import SPELL_END, PointerSentinelCache, PointerSentinelForCausalLM, Speller
from .training import shard_streams

FREQUENCY_BUCKETS = ((0, 0), (1, 100), (101, math.inf))


def word_spellings(tokenizer, word_ids) -> dict[int, tuple[int, ...]]:
    """Each word id's spelling: the UTF-8 bytes of its token text, then SPELL_END."""
    return {int(i): (*tokenizer.convert_ids_to_tokens(int(i)).encode(), SPELL_END) for i in word_ids}


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
    is_rare = torch.zeros(int(ids.max()) + 1, dtype=torch.bool)
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
