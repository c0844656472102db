"""The open-vocabulary protocol on a word-level corpus: the words outside the K most frequent are spelled (their ids
become their UTF-8 bytes and `</w>`, `config.vocab_limit` = K folds their p_vocab into `<unk>`'s), the speller is
trained on the training split's rare words, and a text is scored in bits per byte, split by how often each word was
seen in training (Mielke & Eisner's buckets: 0, 1-100, over 100)."""

import copy
import math
import zlib

import torch
from tqdm.auto import tqdm

from .modeling_pointer_sentinel import SPELL_END, PointerSentinelCache, PointerSentinelForCausalLM, Speller
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


def spelled_words(ids: list[int], V: int, L: int) -> tuple[torch.Tensor, list[str], list[int]]:
    """The words of a spell-mode id stream: per id, the index of its word (a spelled word's bytes, `<+w>` and `</w>`
    share their word's); per word, its kind (a vocabulary word: an id below V; a copy: a spelled word that one of the
    last L words before it spells alike, so the pointer's window holds it; new: any other spelled word) and its
    spelled bytes (0 for a vocabulary word)."""
    owner, kinds, spelled, window, word = [], [], [], [], []
    for x in ids:
        owner.append(len(kinds))
        if x < V:
            kinds.append("vocabulary")
            spelled.append(0)
            window.append(None)
        elif x - V == SPELL_END:
            kinds.append("copy" if tuple(word) in window[-L:] else "new")
            spelled.append(sum(s < 256 for s in word))
            window.append(tuple(word))
            word = []
        else:
            word.append(x - V)
    if word:
        raise ValueError("The ids end inside a spelled word: its `</w>` is missing.")
    return torch.tensor(owner), kinds, spelled


@torch.no_grad()
def word_nats(model: PointerSentinelForCausalLM, ids: torch.Tensor, owner: torch.Tensor, batch_size: int = 10,
              bptt: int = 200, progress=None) -> torch.Tensor:  # fmt: skip
    """-log p of each word of a spell-mode stream (float64, one per word; a spelled word's is the sum over its bytes
    and `</w>`), read as `batch_size` rows of consecutive whole words with the state carried across `bptt` chunks.
    A row's first word has no context: NaN."""
    n = int(owner[-1]) + 1
    if not 0 < batch_size < n:
        raise ValueError(f"{n} words cannot fill {batch_size} rows of at least two words.")
    firsts = torch.searchsorted(owner, torch.arange(batch_size) * n // batch_size)  # each row starts a word
    ends = [*firsts[1:].tolist(), len(ids)]
    width = max(e - s for s, e in zip(firsts.tolist(), ends, strict=True))
    rows = ids.new_zeros(batch_size, width)
    mask = torch.zeros(batch_size, width, dtype=torch.bool)
    who = owner.new_full((batch_size, width), -1)
    for b, (s, e) in enumerate(zip(firsts.tolist(), ends, strict=True)):
        rows[b, : e - s], mask[b, : e - s], who[b, : e - s] = ids[s:e], True, owner[s:e]
    nats = torch.zeros(n, dtype=torch.float64)
    cache, device = PointerSentinelCache(), model.device
    for start in range(0, width - 1, bptt):
        k = min(bptt, width - 1 - start)
        x, y = rows[:, start : start + k], rows[:, start + 1 : start + k + 1]
        out = model(x.to(device), attention_mask=mask[:, start : start + k].to(device), past_key_values=cache)
        log_p = out.logits.gather(-1, y.to(device).unsqueeze(-1)).squeeze(-1).double().cpu()
        counted = mask[:, start + 1 : start + k + 1]
        nats.index_add_(0, who[:, start + 1 : start + k + 1][counted], -log_p[counted])
        if progress is not None:
            progress.update(int(counted.sum()))
    nats[owner[firsts]] = math.nan
    return nats


def bits_per_byte_by_kind(nats: torch.Tensor, kinds: list[str], word_bytes: torch.Tensor) -> dict:
    """Bits per byte over the scored words (NaN nats: unscored), each word counted with its bytes and one separator
    (`word_bytes`), and the same per kind of word (`spelled_words`), with each kind's share of the words and bits."""
    scored = ~nats.isnan()
    bits = torch.where(scored, nats, 0) / math.log(2)
    total_bits, total_bytes = bits.sum().item(), word_bytes[scored].sum().item()
    result = {"bits_per_byte": total_bits / total_bytes, "words": int(scored.sum()), "bytes": int(total_bytes),
              "word_perplexity": math.exp(nats[scored].mean().item())}  # fmt: skip
    kind = torch.tensor([WORD_KINDS.index(k) for k in kinds])
    for i, name in enumerate(WORD_KINDS):
        pick = scored & (kind == i)
        if pick.any():
            b, n_bytes = bits[pick].sum().item(), word_bytes[pick].sum().item()
            result[name] = {"words": int(pick.sum()), "bytes": int(n_bytes), "bits_per_byte": b / n_bytes,
                            "bits_share": b / total_bits}  # fmt: skip
    return result


def vocabulary_bytes(tokenizer, V: int) -> torch.Tensor:
    """(V,) int64: each vocabulary word's bytes as bits per byte counts them, its UTF-8 bytes and one separator;
    `<eos>` 0 (the line break is the separator of the word before it). A spelled word counts its spelled bytes and
    one separator (`spelled_words`)."""
    table = torch.tensor([len(t.encode()) + 1 for t in tokenizer.convert_ids_to_tokens(list(range(V)))])
    table[tokenizer.eos_token_id] = 0
    return table


@torch.no_grad()
def text_bits_per_byte(model: PointerSentinelForCausalLM, tokenizer, ids: torch.Tensor, batch_size: int = 10,
                       bptt: int = 200) -> dict:  # fmt: skip
    """`bits_per_byte_by_kind` of a spell-mode id stream (examples/evaluate.py's measure, for train.py's validation
    and test): each word counted with its UTF-8 bytes and one separator (a line's `<eos>` is the separator of the
    word before it), scored by `word_nats`. A stream cut inside a spelled word is read up to the word before."""
    V, L = model.config.vocab_size, model.config.pointer_window
    ends = ((ids < V) | (ids == V + SPELL_END)).nonzero()
    ids = ids[: int(ends[-1]) + 1] if len(ends) else ids[:0]
    owner, kinds, spelled = spelled_words(ids.tolist(), V, L)
    word_ids = torch.full((len(kinds),), -1, dtype=torch.long)
    word_ids[owner[ids < V]] = ids[ids < V]
    word_bytes = torch.where(word_ids >= 0, vocabulary_bytes(tokenizer, V)[word_ids.clamp(min=0)],
                             torch.tensor(spelled) + 1)  # fmt: skip
    training = model.training
    nats = word_nats(model.eval(), ids, owner, batch_size, bptt)
    model.train(training)
    return bits_per_byte_by_kind(nats, kinds, word_bytes)
