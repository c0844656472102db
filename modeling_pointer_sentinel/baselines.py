"""Baselines that spell everything (issue 59, part 7): a byte-level and a BPE tokenizer for the same LSTM, and the
bits per byte of any tokenization of a word-level corpus on exactly the bytes the word models count.

The text a word-level corpus stands for is its words joined by one space, each line ended by a line break (what the
word tokenizer's ids decode to). Every model pays for all of it; the bytes counted are the word models' (each word's
UTF-8 bytes and one separator, `<eos>` none: examples/evaluate.py's `word_bytes`), so the figures of a word model, a
byte model and a BPE model divide by the same number. Each token's bits go to the word that holds its last byte (a
word holds its bytes and the space or line break after it; a blank line's line break is its `<eos>`'s), which splits
the figure by each word's training count as the word models' is split."""

import math

import torch
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from tqdm.auto import tqdm
from transformers import PreTrainedTokenizerFast

from .modeling_pointer_sentinel import PointerSentinelCache

EOS = "<eos>"
# The line break is the eos token itself (special, matched before normalisation), so `tokenizer(text)` of a whole
# file gives the stream train.py builds line by line (tokenization.ends_lines_with_eos), and decode writes "\n".
LINE_BREAK = AddedToken("\n", special=True, normalized=False)
FREQUENCY_BUCKETS = ((0, 0), (1, 100), (101, math.inf))  # spelling.FREQUENCY_BUCKETS: Mielke & Eisner's


def byte_chars() -> list[str]:
    """GPT-2's printable stand-in for each byte 0..255 (the ByteLevel pre-tokenizer's alphabet), in byte order."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b], extra = chr(256 + extra), extra + 1
    return [chars[b] for b in range(256)]


def _text_rules(tk: Tokenizer, use_regex: bool) -> Tokenizer:
    # each line as the word corpus writes it: runs of white space one space, none at either end
    tk.normalizer = normalizers.Sequence([normalizers.Replace(Regex(r"\s+"), " "), normalizers.Strip()])
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=use_regex)
    tk.decoder = decoders.ByteLevel()
    return tk


def _wrap(tk: Tokenizer) -> PreTrainedTokenizerFast:
    return PreTrainedTokenizerFast(tokenizer_object=tk, eos_token=LINE_BREAK, pad_token=LINE_BREAK,
                                   model_max_length=int(1e12))  # fmt: skip


def byte_tokenizer() -> PreTrainedTokenizerFast:
    """Ids 0..255 the UTF-8 bytes (id = byte value), 256 the line break (eos): any text, no unknown token."""
    tk = Tokenizer(models.BPE(vocab={c: b for b, c in enumerate(byte_chars())}, merges=[]))
    _text_rules(tk, use_regex=False)
    tk.add_special_tokens([LINE_BREAK])
    return _wrap(tk)


def bpe_tokenizer(lines, vocab_size: int) -> PreTrainedTokenizerFast:
    """A byte-level BPE of `vocab_size` ids (the line break, the 256 bytes, then merges) learnt from `lines`: any
    text, no unknown token."""
    if vocab_size < 257:
        raise ValueError(f"a byte-level BPE needs at least 257 ids (256 bytes and the line break), got {vocab_size}")
    tk = _text_rules(Tokenizer(models.BPE()), use_regex=True)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=byte_chars(), special_tokens=[LINE_BREAK],
                                  show_progress=False)  # fmt: skip
    tk.train_from_iterator(lines, trainer)
    return _wrap(tk)


def corpus_text(lines) -> str:
    """The text a word-level corpus's lines stand for: each line's words joined by one space, then a line break."""
    return "".join(" ".join(line.split()) + "\n" for line in lines)


def corpus_words(lines) -> list[str]:
    """The word stream of a word-level corpus (the word models' targets): each line's words, then `<eos>`."""
    return [w for line in lines for w in (*line.split(), EOS)]


def word_bytes(words: list[str]) -> torch.Tensor:
    """Each word's UTF-8 bytes and one separator; `<eos>` none (the line break is the separator of the word before)."""
    return torch.tensor([0 if w == EOS else len(w.encode()) + 1 for w in words])


def byte_owners(lines) -> torch.Tensor:
    """For each byte of `corpus_text(lines)`, the index of its word in `corpus_words(lines)`: a word holds its bytes
    and the separator after it; a blank line's line break is its `<eos>`'s."""
    owner, j = [], 0
    for line in lines:
        words = line.split()
        for w in words:
            owner += [j] * (len(w.encode()) + 1)
            j += 1
        if not words:
            owner.append(j)
        j += 1  # <eos>
    return torch.tensor(owner)


def token_bytes(tokenizer, ids: list[int]) -> list[int]:
    """Each token's length in UTF-8 bytes of the text: one per character of its byte-level form (the line break: 1)."""
    eos = tokenizer.eos_token_id
    return [1 if i == eos else len(t) for i, t in zip(ids, tokenizer.convert_ids_to_tokens(ids), strict=True)]


def encode_corpus(tokenizer, lines) -> tuple[torch.Tensor, torch.Tensor]:
    """The ids of `corpus_text(lines)` (train.py's stream) and, per id, the word (`corpus_words`) holding its last
    byte. ValueError if the tokens do not spell the text byte for byte."""
    from .training import encode_lines

    ids = encode_lines(tokenizer, list(lines))
    lengths = token_bytes(tokenizer, ids.tolist())
    owners = byte_owners(lines)
    if len(lengths) != len(ids) or sum(lengths) != len(owners):
        raise ValueError("the tokens do not spell the corpus text byte for byte (a token outside the byte alphabet)")
    ends = torch.tensor(lengths).cumsum(0) - 1
    return ids, owners[ends]


@torch.no_grad()
def token_nats(model, ids: torch.Tensor, chunk: int = 2048, progress: bool = True) -> torch.Tensor:
    """-log p (float64) of each id of one row given every id before it, the state carried across chunks; the first
    id has no context: NaN."""
    cache, nats = PointerSentinelCache(), torch.full((len(ids),), math.nan, dtype=torch.float64)
    row = ids.unsqueeze(0).to(model.device)
    for start in tqdm(range(0, len(ids) - 1, chunk), desc="scoring", leave=False, disable=not progress):
        x = row[:, start : start + chunk + 1]
        out = model(x[:, :-1], past_key_values=cache)
        log_p = torch.log_softmax(out.logits[0].double(), -1).gather(-1, x[0, 1:, None])[:, 0]
        nats[start + 1 : start + x.shape[1]] = -log_p.cpu()
    return nats


def word_nats_of_tokens(nats: torch.Tensor, owners: torch.Tensor, n_words: int) -> torch.Tensor:
    """Each word's nats: the sum over the tokens it owns (0 for a word that owns none, such as a line's `<eos>`, whose
    line break goes with the word before). The first word is context (a word model's first word is no target), and
    so is any word that owns an unscored (NaN) token: NaN."""
    scored = ~nats.isnan()
    out = torch.zeros(n_words, dtype=torch.float64).index_add_(0, owners[scored], nats[scored])
    out[owners[~scored]] = math.nan  # the first word owns the first token, which has no context
    return out


def frequency_figures(nats: torch.Tensor, nbytes: torch.Tensor, counts: torch.Tensor, unk: torch.Tensor | None = None,
                      buckets=FREQUENCY_BUCKETS) -> dict:  # fmt: skip
    """Bits per byte over the scored words (NaN nats: unscored), and per training-count bucket the bits of its words
    over their bytes (`word_bytes`); `unk` (a mask) also gives the corpus's `<unk>` words their own line."""
    scored = ~nats.isnan()
    bits = torch.where(scored, nats, 0) / math.log(2)
    total = int(nbytes[scored].sum())
    out = {"bits_per_byte": bits.sum().item() / total, "words": int(scored.sum()), "bytes": total}
    picks = {f"train_count_{lo}-{hi}": (counts >= lo) & (counts <= hi) for lo, hi in buckets}
    if unk is not None:
        picks["unk"] = unk
    for name, pick in picks.items():
        pick = pick & scored
        n = int(nbytes[pick].sum())
        out[name] = {"words": int(pick.sum()), "bytes": n, "bits_per_byte": bits[pick].sum().item() / n if n else None}
    return out
