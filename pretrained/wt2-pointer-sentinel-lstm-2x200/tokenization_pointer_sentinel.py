"""The open-vocabulary word-level tokenizer of the Pointer Sentinel-LSTM: every word the vocabulary lacks keeps its
identity through a placeholder, so the pointer can copy it and decoding writes it back.

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
"""

import itertools
import threading
from array import array
from collections import deque
from dataclasses import dataclass

from tokenizers import AddedToken
from transformers import TokenizersBackend
from transformers.utils import logging, to_py_obj

logger = logging.get_logger(__name__)

UNK, EOS = "<unk>", "<eos>"
QUOTE = '"'


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


class PointerSentinelTokenizer(TokenizersBackend):
    """Word-level tokenizer whose out-of-vocabulary words keep their identity (see the module's docstring)."""

    padding_side = "left"
    model_input_names = ["input_ids", "attention_mask"]

    @classmethod
    def convert_to_native_format(cls, trust_remote_code=False, **kwargs):
        # The backend is tokenizer.json as saved (its text rules and placeholders): a class with its own __init__ would
        # otherwise be rebuilt from the bare vocabulary.
        return super().convert_to_native_format(trust_remote_code=True, **kwargs)

    def __init__(self, *args, oov_slots: int = 256, **kwargs):
        # `<unk>` is declared after the backend is built, so it is not added to tokenizer.json as a special token:
        # text is split and read exactly as before, and unk_token / unk_token_id still name it.
        unk = kwargs.pop("unk_token", UNK)
        if not isinstance(oov_slots, int) or oov_slots < 0:
            raise ValueError(f"oov_slots must be an int >= 0, got {oov_slots!r}")
        super().__init__(*args, oov_slots=oov_slots, **kwargs)
        backend = self._tokenizer
        if backend.token_to_id(str(unk)) is None:
            raise ValueError(f"The word vocabulary has no {unk}: an open-vocabulary tokenizer needs it.")
        self.unk_token = str(unk)
        self.oov_slots = oov_slots
        self.word_vocab_size = backend.get_vocab_size(with_added_tokens=False)
        self.encoded_rows = EncodedRows()  # what this instance encoded, for decoding without a table
        missing = [placeholder(k) for k in range(oov_slots) if backend.token_to_id(placeholder(k)) is None]
        if missing:
            backend.add_tokens([AddedToken(t, special=False, normalized=False) for t in missing])
        for k in (0, oov_slots - 1) if oov_slots else ():
            if backend.token_to_id(placeholder(k)) != self.word_vocab_size + k:
                raise ValueError(f"{placeholder(k)} must have id {self.word_vocab_size + k} (V + k)")

    # ---- encoding ----

    def _encode_plus(self, text, text_pair=None, _remember: bool = True, **kwargs):
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

    def _convert_id_to_token(self, index: int) -> str | None:
        word = getattr(index, "word", None)
        return word if word is not None else self._tokenizer.id_to_token(int(index))

    def tokenize(self, text, pair=None, add_special_tokens: bool = False, **kwargs) -> list[str]:
        """The tokens of `text`, a word the vocabulary lacks as itself (its id is a placeholder; not remembered)."""
        enc = self._encode_plus(text=text, text_pair=pair, add_special_tokens=add_special_tokens, _remember=False,
                                **kwargs)  # fmt: skip
        return [getattr(i, "word", t) for i, t in zip(enc["input_ids"], enc.tokens(), strict=True)]

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
        row's words come from what this tokenizer encoded (`words_for`)."""
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
                continue
            k = i - V
            if 0 <= k < self.oov_slots and oov_words is not None and k < len(oov_words):
                tokens.append(oov_words[k])
            elif (token := self._tokenizer.id_to_token(i)) is not None:
                tokens.append(token)
        return self.convert_tokens_to_string(tokens)

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        """Tokens (or the words placeholders stand for: any string is written as itself) to text, by the text rules
        of tokenizer.json's decoder; then no leading space, and WikiText's double quotes paired."""
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
