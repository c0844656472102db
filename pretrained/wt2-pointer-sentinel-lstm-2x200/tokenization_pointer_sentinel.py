"""The open-vocabulary word-level tokenizer of the Pointer Sentinel-LSTM: every word the vocabulary lacks keeps its
identity, so the pointer can copy it and decoding writes it back. Two modes: placeholders (`oov_slots`, below; the
shipped folders') and spelling (`spell_unseen=True`, "Spell mode" at the end), where the ids carry the text.

Ids. The word vocabulary keeps ids 0 … V-1 exactly as before (V: the WordLevel model's size); `oov_slots` = N
placeholder tokens `<oov-0>` … `<oov-{N-1}>` follow at ids V … V+N-1 (added tokens of tokenizer.json, not special).
Fixed slots rather than per-call extended ids: shapes stay static (ONNX, torch.compile, generate), every id has a
token (convert_ids_to_tokens, decode, streaming), and beam search or left padding only move ids.

Encoding. Each word the vocabulary lacks (the WordLevel model maps it to `<unk>`) takes a placeholder for its surface
form, the text it was read from (offsets into the input; case as written): a row's first distinct such word gets
`<oov-0>`, the next `<oov-1>`, a repeat the same slot. A literal `<unk>` stays the `<unk>` id, so text in corpus form
keeps exactly its ids. Past N distinct words in a row the rest read as `<unk>` (one warning per call).

The table. A row's surface forms (index k is the word of id V+k) come back in the `BatchEncoding` attribute
`oov_words`: a list with one table per row (a single text is one row), beside `encodings`. An attribute and not a key,
because `model(**enc)` and `model.generate(**enc)` pass on every key.

Decoding without a table. Slots are numbered per row (the model's "new word" column is the row's next unused slot), so
an id alone does not name a word; instead the tokenizer remembers what it encoded. `EncodedRows`, on the instance
(`tokenizer.encoded_rows`), holds the newest rows of every encoding (the real ids, leading pad/`<eos>` stripped, and
the table), at most 256 rows and 2**20 ids: when full, the oldest rows go first. `decode`, `batch_decode` and
`convert_ids_to_tokens` of ids with placeholders and no `oov_words=` look each row up there: the row it begins with
(generate's output is its prompt, left padding stripped, then the new tokens; one lookup per row of a batch, beam
search and `num_return_sequences` included), this thread's rows before other threads', then the longest, then the
newest. Ids that begin with no remembered row (a streamer's new tokens after `skip_prompt=True` or after a line break)
take the newer of the row this thread's last lookup found and this thread's newest one-text encoding, else the newest
one-text encoding of any thread (TextIteratorStreamer decodes in generate's thread). A placeholder that the table found
has no word for (none found, or the model's new word) decodes as its token text. The registry is shared by all threads
under a lock; a copy or pickle of the tokenizer starts with an empty one. Ids do not tell apart two prompts that differ
only in their unseen words (`The Quarrington River` and `The Esselbrook River`): decode one's output before encoding
the other in the same thread, or pass `oov_words=` (`decode(ids, oov_words=enc.oov_words)`, also in a streamer's
decode kwargs), which always wins. `tokenize` writes a placeholder as its word.

Decoding. `<eos>` is the corpus's line break and decodes to one; `<unk>` is a word and is never dropped, also not by
`skip_special_tokens=True` (which drops `<eos>` only). Decoded text does not start with a space, and (WikiText rules)
double quotes close up on the words they enclose: `a " breakout " hit` -> `a "breakout" hit`, a pairing that needs
the state of the text before, so it is done here rather than in tokenizer.json. The rest of the text rules
(`tokenization.py` of the `modeling_pointer_sentinel` package) live in tokenizer.json.

Spell mode (`spell_unseen=True`; `tokenization.spelling_vocabulary` builds one). The ids carry the text: no slots, no
table, no memory (no `encoded_rows`; `oov_words=` is refused). Ids, V+258 in all (added tokens of tokenizer.json, not
special; `skip_special_tokens` never drops them, they are text):
- 0 … V-1: the word vocabulary, unchanged;
- V … V+255: the byte tokens `<0x00>` … `<0xFF>` (SentencePiece's byte-fallback names);
- V+256: `</w>`, which closes a spelled word;
- V+257: `<+w>`, which closes a piece of a spelled word that goes on (no space);
- V+258 …: tokens added later (`add_tokens`), words of their own.
Every occurrence of a word the vocabulary lacks (the WordLevel model reads it as `<unk>`; a literal `<unk>` stays
`<unk>`, so text in corpus form keeps exactly its ids) is its UTF-8 bytes as the input writes them (case as written),
then `</w>`: `Zorbane` -> `<0x5A> <0x6F> <0x72> <0x62> <0x61> <0x6E> <0x65> </w>`. A word of more than
MAX_SPELLED_BYTES (64) bytes is cut into pieces of at most 64 bytes at character boundaries, each but the last closed by
`<+w>`. Text holding a spelling token's name (`x</w>y`: the backend cuts it out as an added token) is spelled as the
whole stretch between spaces around it, so it reads back as written. Truncation counts the spelled ids; each byte of a
word carries the word's offsets. `tokenize` and `convert_ids_to_tokens` give the token names (`<0x5A>`, `</w>`), as
Llama's byte fallback does.

Decoding in spell mode is a function of the ids alone: a run of byte tokens closed by `</w>` is the word its bytes
spell (UTF-8; invalid bytes as U+FFFD, never an error), placed in the text like any word (the rules above); a run the
ids end inside (a stream or a slice cut mid-word) is what its bytes spell so far, less a last character whose bytes may
still come, so a streamer never shows U+FFFD for it; a token `skip_special_tokens` drops ends a run. The backend's
decoder ends in a `ByteFallback` step, a no-op on the decoded text (which starts with a space or a line break), so that
generate's `stop_strings` (`StopStringCriteria`) read each byte token as its byte: "Zor" stops on a spelled `Zorbane`.
Its stop strings see no space before a spelled word (no token holds it).
"""

import codecs
import itertools
import json
import threading
from array import array
from collections import deque
from dataclasses import dataclass

from tokenizers import AddedToken, decoders
from transformers import BatchEncoding, TokenizersBackend
from transformers.tokenization_utils_base import TruncationStrategy
from transformers.utils import PaddingStrategy, logging, to_py_obj

logger = logging.get_logger(__name__)

UNK, EOS = "<unk>", "<eos>"
QUOTE = '"'

# Spell mode's tokens (the module's docstring), at ids V … V+257 in this order.
MAX_SPELLED_BYTES = 64
BYTE_TOKENS = [f"<0x{b:02X}>" for b in range(256)]
END_OF_WORD, WORD_GOES_ON = "</w>", "<+w>"
SPELLING = [*BYTE_TOKENS, END_OF_WORD, WORD_GOES_ON]
BYTE_OF = {token: b for b, token in enumerate(BYTE_TOKENS)}


def placeholder(k: int) -> str:
    return f"<oov-{k}>"


class PlaceholderId(int):
    """A placeholder id in a list-valued encoding, carrying the word it stands for.

    Only the single-id lookup `_convert_id_to_token` reads the word: `StopStringCriteria` (generate's
    `stop_strings=`) takes the token strings of the vocabulary by encoding a made-up word and reading the token
    strings back through that lookup, so a word outside the vocabulary has to read back as itself. Pickles and copies
    as a plain int."""

    def __new__(cls, value: int, word: str):
        obj = super().__new__(cls, value)
        obj.word = word
        return obj

    def __reduce__(self):
        return int, (int(self),)


def _strip(ids, pad: int | None) -> array:
    """The ids from the first that is not `pad` (left padding, and a prompt's own leading `<eos>`, which is the pad)."""
    start = 0
    while start < len(ids) and ids[start] == pad:
        start += 1
    return array("q", ids[start:])


@dataclass(eq=False)
class _Row:
    ids: array  # the real ids, leading pad stripped
    words: list[str]  # the row's table
    single: bool  # the only row of its encoding
    thread: int
    time: int


class EncodedRows:
    """The rows a tokenizer encoded lately (the module's docstring: "Decoding without a table"): bounded by rows and
    ids (oldest dropped first), shared by all threads under a lock; a copy or pickle starts empty."""

    def __init__(self, max_rows: int = 256, max_ids: int = 2**20):
        self.max_rows, self.max_ids = max_rows, max_ids
        self._rows: deque[_Row] = deque()
        self._size = 0
        self._found: dict[int, tuple[int, _Row]] = {}  # thread -> (when, the row its last lookup found)
        self._clock = itertools.count()
        self._lock = threading.Lock()

    def __reduce__(self):
        return type(self), (self.max_rows, self.max_ids)

    def __len__(self) -> int:
        return len(self._rows)

    def add(self, rows: list[tuple[list[int], list[str]]], pad: int | None) -> None:
        """Remember one encoding's rows: each row's real ids and its table."""
        thread, single = threading.get_ident(), len(rows) == 1
        with self._lock:
            for ids, words in rows:
                ids = _strip(ids, pad)
                if ids and len(ids) <= self.max_ids:
                    self._rows.append(_Row(ids, list(words), single, thread, next(self._clock)))
                    self._size += len(ids)
            while len(self._rows) > self.max_rows or self._size > self.max_ids:
                self._size -= len(self._rows.popleft().ids)

    def words(self, ids: list[int], pad: int | None) -> list[str] | None:
        """The table of the remembered row `ids` begin with (else the fallback), None where there is none."""
        q, thread = _strip(ids, pad), threading.get_ident()
        with self._lock:
            best, key = None, None
            for row in self._rows:
                n = len(row.ids)
                if n <= len(q) and q[:n] == row.ids and (k := (row.thread == thread, n, row.time)) > (key or ()):
                    best, key = row, k
            if best is None:  # no prompt in the ids: the row this thread last found or encoded, else any thread's
                mine = self._newest_single(thread)
                own = [f for f in (self._found.get(thread), mine and (mine.time, mine)) if f]
                best = max(own, key=lambda f: f[0])[1] if own else self._newest_single(None)
            if best is None:
                return None
            self._found[thread] = (next(self._clock), best)
            if len(self._found) > self.max_rows:  # threads that are gone
                del self._found[next(iter(self._found))]
            return best.words

    def _newest_single(self, thread: int | None) -> _Row | None:
        for row in reversed(self._rows):
            if row.single and (thread is None or row.thread == thread):
                return row
        return None


def spelled_words(tokens: list[str]) -> list[str]:
    """Spell mode's tokens as words: each run of byte tokens closed by `</w>` is the word its bytes spell (UTF-8,
    invalid bytes as U+FFFD), `<+w>` goes on with the same word; a run the tokens end inside is what its bytes spell
    so far, less a last character whose bytes may still come (a stream cut mid-word). Other tokens stay as they are."""
    words, run = [], bytearray()
    for token in tokens:
        if (byte := BYTE_OF.get(token)) is not None:
            run.append(byte)
        elif token != WORD_GOES_ON:
            if run:
                words.append(run.decode("utf-8", errors="replace"))
                run.clear()
            if token != END_OF_WORD:
                words.append(token)
    if run and (so_far := codecs.getincrementaldecoder("utf-8")(errors="replace").decode(bytes(run))):
        words.append(so_far)
    return words


class PointerSentinelTokenizer(TokenizersBackend):
    """Word-level tokenizer whose out-of-vocabulary words keep their identity: as placeholders (`oov_slots`) or, with
    `spell_unseen=True`, spelled in their bytes (see the module's docstring)."""

    padding_side = "left"
    model_input_names = ["input_ids", "attention_mask"]

    @classmethod
    def convert_to_native_format(cls, trust_remote_code=False, **kwargs):
        # The backend is tokenizer.json as saved (its text rules and placeholders): a class with its own __init__ would
        # otherwise be rebuilt from the bare vocabulary.
        return super().convert_to_native_format(trust_remote_code=True, **kwargs)

    def __init__(self, *args, oov_slots: int | None = None, spell_unseen: bool = False, **kwargs):
        # `<unk>` is declared after the backend is built, so it is not added to tokenizer.json as a special token:
        # text is split and read exactly as before, and unk_token / unk_token_id still name it.
        unk = kwargs.pop("unk_token", UNK)
        if spell_unseen and oov_slots:
            raise ValueError(f"spell_unseen=True takes no placeholders, got oov_slots={oov_slots}.")
        oov_slots = 0 if spell_unseen else 256 if oov_slots is None else oov_slots
        if not isinstance(oov_slots, int) or oov_slots < 0:
            raise ValueError(f"oov_slots must be an int >= 0, got {oov_slots!r}")
        mode = {"spell_unseen": True} if spell_unseen else {"oov_slots": oov_slots}  # saved in tokenizer_config.json
        super().__init__(*args, **mode, **kwargs)
        backend = self._tokenizer
        if backend.token_to_id(str(unk)) is None:
            raise ValueError(f"The word vocabulary has no {unk}: an open-vocabulary tokenizer needs it.")
        self.unk_token = str(unk)
        self.spell_unseen = bool(spell_unseen)
        self.oov_slots = oov_slots
        self.word_vocab_size = backend.get_vocab_size(with_added_tokens=False)
        if not spell_unseen:  # spell mode remembers nothing: its ids carry the words
            self.encoded_rows = EncodedRows()  # what this instance encoded, for decoding without a table
        missing = [placeholder(k) for k in range(oov_slots) if backend.token_to_id(placeholder(k)) is None]
        if missing:
            backend.add_tokens([AddedToken(t, special=False, normalized=False) for t in missing])
        for k in (0, oov_slots - 1) if oov_slots else ():
            if backend.token_to_id(placeholder(k)) != self.word_vocab_size + k:
                raise ValueError(f"{placeholder(k)} must have id {self.word_vocab_size + k} (V + k)")
        if spell_unseen:
            self._add_spelling_tokens()

    def _add_spelling_tokens(self) -> None:
        """Spell mode's byte tokens and markers at ids V … V+257, and the decoder's closing ByteFallback (the module's
        docstring); a backend read from a saved tokenizer.json has them already."""
        backend, V = self._tokenizer, self.word_vocab_size
        missing = [t for t in SPELLING if backend.token_to_id(t) is None]
        if missing:
            backend.add_tokens([AddedToken(t, special=False, normalized=False) for t in missing])
        if [backend.token_to_id(t) for t in SPELLING] != list(range(V, V + len(SPELLING))):
            raise ValueError(f"{SPELLING[0]} … {SPELLING[-1]} must have ids V … V+{len(SPELLING) - 1} (V = {V}): "
                             "spell mode takes a word vocabulary with no tokens added after its words.")  # fmt: skip
        if backend.decoder is None:
            raise ValueError("Spell mode places spelled words by the text rules' decoder; the backend has none.")
        state = json.loads(backend.decoder.__getstate__())
        if state.get("type") != "Sequence" or state["decoders"][-1] != {"type": "ByteFallback"}:
            backend.decoder = decoders.Sequence([backend.decoder, decoders.ByteFallback()])

    # ---- encoding ----

    def _encode_plus(self, text, text_pair=None, _remember: bool = True, **kwargs):
        if self.spell_unseen:
            return self._encode_spelled(text, text_pair, **kwargs)
        out = super()._encode_plus(text, text_pair, **kwargs)
        words = kwargs.get("is_split_into_words", False)
        batched = isinstance(text, (list, tuple)) and (not words or (text and isinstance(text[0], (list, tuple))))
        samples = list(zip(text, text_pair, strict=True)) if batched and text_pair is not None else (
            [(t, None) for t in text] if batched else [(text, text_pair)])  # fmt: skip
        rows = out.get("overflow_to_sample_mapping") or range(len(out.encodings))
        V, unk = self.word_vocab_size, self._tokenizer.token_to_id(self.unk_token)
        tables, new_rows, real, overflowed = [], [], [], False
        for enc, sample in zip(out.encodings, rows, strict=True):
            ids, table, slots = list(enc.ids), [], {}
            for i, (tid, (a, b), seq, word) in enumerate(
                zip(enc.ids, enc.offsets, enc.sequence_ids, enc.word_ids, strict=True)
            ):
                if (tid != unk and not V <= tid < V + self.oov_slots) or seq is None:
                    continue
                source = samples[sample][seq]
                surface = (source[word] if words else source)[a:b]
                if surface == UNK or not surface:  # corpus text's own <unk> keeps its id
                    ids[i] = unk
                    continue
                if surface not in slots:
                    if len(table) == self.oov_slots:
                        overflowed, ids[i] = True, unk
                        continue
                    slots[surface] = len(table)
                    table.append(surface)
                ids[i] = PlaceholderId(V + slots[surface], surface)
            tables.append(table)
            new_rows.append(ids)
            real.append([int(i) for i, m in zip(ids, enc.attention_mask, strict=True) if m])
        if overflowed:
            logger.warning(
                f"More than oov_slots={self.oov_slots} distinct words outside the vocabulary in a row: the rest read "
                f"as {self.unk_token}."
            )
        out["input_ids"] = self._like(out["input_ids"], new_rows)
        out.oov_words = tables
        if _remember:
            self.encoded_rows.add(list(zip(real, tables, strict=True)), self.pad_token_id)
        return out

    @staticmethod
    def _like(ids, rows: list[list[int]]):
        """`rows` in the container `ids` came in: a tensor or array (batch axis kept), nested lists, one flat list
        (one row; also an empty text's)."""
        if hasattr(ids, "new_tensor"):  # torch
            return ids.new_tensor([[int(i) for i in row] for row in rows], dtype=ids.dtype).reshape(ids.shape)
        if hasattr(ids, "dtype") and hasattr(ids, "reshape"):  # numpy
            import numpy as np

            return np.asarray([[int(i) for i in row] for row in rows], dtype=ids.dtype).reshape(ids.shape)
        if not ids or not isinstance(ids[0], list):
            return rows[0] if rows else ids
        return rows

    def _encode_spelled(
        self,
        text,
        text_pair=None,
        add_special_tokens: bool = True,
        padding_strategy: PaddingStrategy = PaddingStrategy.DO_NOT_PAD,
        truncation_strategy: TruncationStrategy = TruncationStrategy.DO_NOT_TRUNCATE,
        max_length: int | None = None,
        stride: int = 0,
        is_split_into_words: bool = False,
        pad_to_multiple_of: int | None = None,
        padding_side: str | None = None,
        return_tensors=None,
        return_token_type_ids: bool | None = None,
        return_attention_mask: bool | None = None,
        return_overflowing_tokens: bool = False,
        return_special_tokens_mask: bool = False,
        return_offsets_mapping: bool = False,
        return_length: bool = False,
        verbose: bool = True,
        **kwargs,
    ) -> BatchEncoding:
        """Spell mode's `__call__`: the backend reads the words (no truncation, padding or tensors), each unseen word
        is spelled, then truncation (which counts spelled ids), padding and tensors as asked."""
        read = super()._encode_plus(text, text_pair, add_special_tokens=add_special_tokens,
                                    is_split_into_words=is_split_into_words, verbose=verbose, **kwargs)  # fmt: skip
        words = is_split_into_words
        batched = isinstance(text, (list, tuple)) and (not words or (text and isinstance(text[0], (list, tuple))))
        texts = text if batched else [text]
        pairs = [None] * len(texts) if text_pair is None else text_pair if batched else [text_pair]
        if return_token_type_ids is None:
            return_token_type_ids = "token_type_ids" in self.model_input_names
        asked = {"token_type_ids": return_token_type_ids, "special_tokens_mask": return_special_tokens_mask,
                 "offset_mapping": return_offsets_mapping}  # fmt: skip
        keys = ["input_ids"] + [k for k, wanted in asked.items() if wanted]
        rows, samples = {k: [] for k in keys}, []
        for sample, (enc, sources) in enumerate(zip(read.encodings, zip(texts, pairs, strict=True), strict=True)):
            row, seqs = self._spelled_row(enc, sources, words)
            for kept in self._truncated(seqs, truncation_strategy, max_length, stride, return_overflowing_tokens):
                for k in keys:
                    rows[k].append([row[k][p] for p in kept])
                samples.append(sample)
        for ids in rows["input_ids"]:
            self._eventual_warn_about_too_long_sequence(ids, max_length, verbose)
        offsets = rows.pop("offset_mapping", None)  # `pad` leaves it as it is: padded below
        out = self.pad(rows, padding=padding_strategy, max_length=max_length, pad_to_multiple_of=pad_to_multiple_of,
                       padding_side=padding_side, return_attention_mask=return_attention_mask)  # fmt: skip
        if offsets is not None:
            left = (padding_side or self.padding_side) == "left"
            out["offset_mapping"] = [[(0, 0)] * (len(ids) - len(o)) + o if left else o + [(0, 0)] * (len(ids) - len(o))
                                     for ids, o in zip(out["input_ids"], offsets, strict=True)]  # fmt: skip
        if return_length:
            out["length"] = [len(ids) for ids in out["input_ids"]]
        if return_overflowing_tokens:
            out["overflow_to_sample_mapping"] = samples
        if not batched and return_tensors is None and not return_overflowing_tokens:  # one text: no batch axis
            return BatchEncoding({k: v[0] for k, v in out.items()})
        return BatchEncoding(dict(out), tensor_type=return_tensors)

    def _spelled_row(self, enc, sources: tuple, words: bool) -> tuple[dict[str, list], list[int | None]]:
        """One backend encoding with each unseen word spelled: its ids, and for each id the token type, special mask,
        offsets and sequence of the token it spells (`sources`: the sample's text and pair)."""
        V, unk = self.word_vocab_size, self.unk_token_id
        cols = {"input_ids": enc.ids, "token_type_ids": enc.type_ids, "special_tokens_mask": enc.special_tokens_mask,
                "offset_mapping": enc.offsets}  # fmt: skip
        ids, offsets, seqs, word_ids = enc.ids, enc.offsets, enc.sequence_ids, enc.word_ids

        def touching(p: int, q: int) -> bool:  # no space between tokens p and q of the same input text
            same_word = not words or word_ids[p] == word_ids[q]
            return seqs[q] is not None and seqs[q] == seqs[p] and offsets[p][1] == offsets[q][0] and same_word

        spans = []  # (first, last, whole): tokens to spell, whole if one holds a spelling token's name
        for k in (k for k, t in enumerate(ids) if (t == unk or V <= t < V + len(SPELLING)) and seqs[k] is not None):
            if spans and k <= spans[-1][1]:
                continue
            if ids[k] == unk:
                spans.append((k, k, False))
                continue
            first, last = k, k  # the backend cut the name out as an added token: spell the stretch around it
            while first > 0 and touching(first - 1, first):
                first -= 1
            while last + 1 < len(ids) and touching(last, last + 1):
                last += 1
            while spans and spans[-1][0] >= first:
                spans.pop()
            spans.append((first, last, True))
        row, out_seqs, done = {key: [] for key in cols}, [], 0
        for first, last, whole in spans + [(len(ids), len(ids), False)]:
            for key, col in cols.items():
                row[key] += col[done:first]
            out_seqs += seqs[done:first]
            if first == len(ids):
                break
            seq, word = seqs[first], word_ids[first]
            text = (sources[seq][word] if words else sources[seq])[offsets[first][0] : offsets[last][1]]
            spelled = self._spell(text) if whole or text not in (UNK, "") else [unk]  # a literal <unk> stays <unk>
            row["input_ids"] += spelled
            row["token_type_ids"] += [cols["token_type_ids"][first]] * len(spelled)
            row["special_tokens_mask"] += [0] * len(spelled)
            row["offset_mapping"] += [(offsets[first][0], offsets[last][1])] * len(spelled)
            out_seqs += [seq] * len(spelled)
            done = last + 1
        return row, out_seqs

    def _spell(self, word: str) -> list[int]:
        """The ids of `word` spelled: its UTF-8 bytes in pieces of at most MAX_SPELLED_BYTES (cut between characters),
        `<+w>` after each piece but the last, `</w>` after the last."""
        V, data, ids = self.word_vocab_size, word.encode("utf-8"), []
        while len(data) > MAX_SPELLED_BYTES:
            cut = MAX_SPELLED_BYTES
            while data[cut] & 0xC0 == 0x80:  # a continuation byte: cut before its character
                cut -= 1
            ids += [V + b for b in data[:cut]] + [V + SPELLING.index(WORD_GOES_ON)]
            data = data[cut:]
        return ids + [V + b for b in data] + [V + SPELLING.index(END_OF_WORD)]

    def _truncated(self, seqs: list[int | None], strategy: TruncationStrategy, max_length: int | None, stride: int,
                   overflow: bool) -> list[list[int] | range]:  # fmt: skip
        """The positions of a spelled row each output row keeps: the row truncated to max_length as `strategy` says
        (special tokens kept), or with `overflow` the row in windows of max_length overlapping by `stride`, the first
        one kept (the backend's windows)."""
        n = len(seqs)
        if strategy == TruncationStrategy.DO_NOT_TRUNCATE or max_length is None or n <= max_length:
            return [range(n)]
        left = self.truncation_side == "left"
        if overflow:
            if 1 in seqs:
                raise NotImplementedError("Spell mode returns no overflowing tokens of text pairs.")
            if not 0 <= stride < max_length:
                raise ValueError(f"stride ({stride}) must be less than max_length ({max_length}).")
            spans = []
            for start in range(0, n, max_length - stride):
                spans.append((start, min(start + max_length, n)))
                if spans[-1][1] == n:
                    break
            return [range(n - b, n - a) if left else range(a, b) for a, b in spans]
        first, second = ([p for p, s in enumerate(seqs) if s == k] for k in (0, 1))
        excess, cut = n - max_length, [0, 0]
        if strategy == TruncationStrategy.ONLY_SECOND:
            cut[1] = excess
        elif strategy == TruncationStrategy.ONLY_FIRST or not second:
            cut[0] = excess
        else:  # longest first: the longer sequence down to the other's length, then both in turn, the first first
            longer = int(len(second) > len(first))
            cut[longer] = min(excess, abs(len(first) - len(second)))
            rest = excess - cut[longer]
            cut[0], cut[1] = cut[0] + (rest + 1) // 2, cut[1] + rest // 2
        if cut[0] > len(first) or cut[1] > len(second):
            raise ValueError(f"The sequence to truncate is too short for max_length={max_length} ({strategy.value}).")
        dropped = {p for k, seq in enumerate((first, second)) if cut[k]
                   for p in (seq[: cut[k]] if left else seq[len(seq) - cut[k] :])}  # fmt: skip
        return [[p for p in range(n) if p not in dropped]]

    def _convert_id_to_token(self, index: int) -> str | None:
        word = getattr(index, "word", None)
        return word if word is not None else self._tokenizer.id_to_token(int(index))

    def tokenize(self, text, pair=None, add_special_tokens: bool = False, **kwargs) -> list[str]:
        """The tokens of `text`, a word the vocabulary lacks as itself (its id is a placeholder; not remembered); in
        spell mode as its byte tokens and `</w>`."""
        enc = self._encode_plus(text=text, text_pair=pair, add_special_tokens=add_special_tokens, _remember=False,
                                **kwargs)  # fmt: skip
        if self.spell_unseen:  # the byte tokens' names, as Llama's byte fallback writes them
            return self.convert_ids_to_tokens(enc["input_ids"])
        return [getattr(i, "word", t) for i, t in zip(enc["input_ids"], enc.tokens(), strict=True)]

    def unseen_words(self, text: str) -> list[str]:
        """The distinct words of `text` the vocabulary lacks, in order of first occurrence: those spelled (spell mode)
        or given placeholders."""
        if not self.spell_unseen:
            return self._encode_plus(text=text, add_special_tokens=False, _remember=False).oov_words[0]
        words, run = [], []
        for token in self.tokenize(text):
            if token in BYTE_OF or token == WORD_GOES_ON:
                run.append(token)
            elif token == END_OF_WORD and run:
                words += [w for w in spelled_words([*run, token]) if w not in words]
                run = []
        return words

    # ---- decoding ----

    def words_for(self, token_ids) -> list[str] | None:
        """The table of words for one row of ids without one: from what this tokenizer encoded (`encoded_rows`; the
        module's docstring), None where the ids hold no placeholder or nothing explains them."""
        ids = [int(i) for i in to_py_obj(token_ids)]
        V, N = self.word_vocab_size, self.oov_slots
        if not any(V <= i < V + N for i in ids):
            return None
        return self.encoded_rows.words(ids, self.pad_token_id)

    def convert_ids_to_tokens(self, ids, skip_special_tokens: bool = False):
        if isinstance(ids, int):
            return self._tokenizer.id_to_token(ids)
        ids = [int(i) for i in to_py_obj(ids)]
        words, V = self.words_for(ids) or [], self.word_vocab_size
        skip = self._skipped_ids() if skip_special_tokens else set()
        return [words[i - V] if 0 <= i - V < len(words) else self._tokenizer.id_to_token(i) for i in ids
                if i not in skip]  # fmt: skip

    def _skipped_ids(self) -> set[int]:
        """The ids `skip_special_tokens=True` drops: the special tokens but `<unk>`, which is a word."""
        return set(self.all_special_ids) - {self.unk_token_id}

    def decode(self, token_ids, skip_special_tokens: bool = False, oov_words=None, **kwargs):
        """Text of `token_ids` (one row, or a batch of rows); `oov_words` is the row's table (a batch: one table per
        row), e.g. `enc.oov_words[0]` (a one-row `enc.oov_words` is taken as that row's table). Without it, each
        row's words come from what this tokenizer encoded (`words_for`). Spell mode takes no table: the ids carry the
        words (`words_for` finds no placeholder in them)."""
        if self.spell_unseen and oov_words is not None:
            raise ValueError("oov_words is a table of placeholders: in spell mode the ids carry their words.")
        token_ids = to_py_obj(token_ids)
        if isinstance(token_ids, (list, tuple)) and token_ids and isinstance(token_ids[0], (list, tuple)):
            tables = [self.words_for(r) for r in token_ids] if oov_words is None else list(oov_words)
            if len(tables) != len(token_ids):
                raise ValueError(f"oov_words holds {len(tables)} tables for {len(token_ids)} rows of ids.")
            rows = zip(token_ids, tables, strict=True)
            return [self._decode(r, skip_special_tokens, oov_words=t, **kwargs) for r, t in rows]
        if oov_words and isinstance(oov_words[0], (list, tuple)):
            if len(oov_words) != 1:
                raise ValueError(f"oov_words holds {len(oov_words)} tables for one row of ids: pass its own table.")
            oov_words = oov_words[0]
        if oov_words is None and not isinstance(token_ids, int):
            oov_words = self.words_for(token_ids)
        return self._decode(token_ids, skip_special_tokens, oov_words=oov_words, **kwargs)

    def _decode(self, token_ids, skip_special_tokens: bool = False, clean_up_tokenization_spaces=None,
                oov_words=None, **kwargs) -> str:  # fmt: skip
        # clean_up_tokenization_spaces is not applied: the text rules join what they split, and the generic clean-up
        # would join words the text has apart (`don 't` is the corpus's, `'s` a word of its own)
        if isinstance(token_ids, int):
            token_ids = [token_ids]
        skip = self._skipped_ids() if skip_special_tokens else set()
        V, tokens = self.word_vocab_size, []
        for i in map(int, token_ids):
            if i in skip:
                if self.spell_unseen:  # a dropped line break still ends a spelled word
                    tokens.append(END_OF_WORD)
                continue
            k = i - V
            if 0 <= k < self.oov_slots and oov_words is not None and k < len(oov_words):
                tokens.append(oov_words[k])
            elif (token := self._tokenizer.id_to_token(i)) is not None:
                tokens.append(token)
        return self.convert_tokens_to_string(tokens)

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        """Tokens (or the words placeholders stand for: any string is written as itself) to text, by the text rules
        of tokenizer.json's decoder; then no leading space, and WikiText's double quotes paired. In spell mode each
        spelled word is first the word it spells (`spelled_words`)."""
        if self.spell_unseen:
            tokens = spelled_words(tokens)
        if self.init_kwargs.get("text_rules") == "wikitext":
            tokens = self._pair_quotes(tokens)
        text = self._tokenizer.decoder.decode(tokens) if self._tokenizer.decoder else " ".join(tokens)
        return text[1:] if text.startswith(" ") else text

    @staticmethod
    def _pair_quotes(tokens: list[str]) -> list[str]:
        """An opening `"` is written onto the word after it, a closing one onto the word before it; quotes pair within
        a line (`<eos>`). A prefix of the tokens decodes to a prefix of the text, as streaming needs."""
        out, inside, pending = [], False, False  # pending: an opening quote waiting for its word
        for tok in tokens:
            if tok == EOS:
                out += [QUOTE] * pending + [tok]
                inside = pending = False
            elif tok == QUOTE and inside:  # closing
                if pending:
                    out.append(QUOTE + QUOTE)
                elif out and out[-1] != EOS:
                    out[-1] += QUOTE
                else:
                    out.append(QUOTE)
                inside = pending = False
            elif tok == QUOTE:  # opening
                inside = pending = True
            else:
                out.append(QUOTE + tok if pending else tok)
                pending = False
        return out + [QUOTE] * pending
