"""Token caches: a corpus tokenised once into a flat id file, read back through a memory map (nanoGPT's prepare.py).

Preparing a split streams its text in chunks: memory stays constant whatever the corpus size (the vocabulary pass
holds one Counter over the words, O(vocabulary)). The ids are those of `training.encode_lines(tokenizer, lines)`
over the lines `training.load_text_splits` reads, id for id: the same line cuts (`datasets`' text loader: universal
newlines), the same backend tokenizer call on the same per-line texts, so every closed-vocabulary id stays as it was.

Where: `cache_dir` (train.py and evaluate.py: `--data_cache_dir`), by default `pointer_sentinel_tokens` under the
Hugging Face datasets cache (`datasets.config.HF_DATASETS_CACHE`, i.e. `$HF_DATASETS_CACHE` or
`~/.cache/huggingface/datasets`).
Keys (sha256, first 16 hex digits in the file names):
- an id file (`<name>-<key>.bin`, with `<name>-<key>.json` beside it): the format version, the backend tokenizer's
  whole JSON (vocabulary, text rules, added tokens), eos id and line rule, and the source: a file's resolved path,
  size, mtime (ns) and encoding, or a `datasets.Dataset`'s fingerprint and column;
- a built vocabulary (`vocab-<name>-<key>/`, a saved tokenizer): the training source's key, the build options and
  the bytes of tokenization.py (its text rules).
A changed file, tokenizer or rule gets a new key, so a new entry; old entries are left for the user to delete (runs
with other tokenizers may still read them). Entries are written under temporary names and renamed when whole, the
metadata last, so a killed preparation is prepared again, never read.
"""

import codecs
import hashlib
import io
import json
import lzma
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from .tokenization import build_word_level_tokenizer, ends_lines_with_eos

# Whitespace but space and tab: Python's str.split and the tokenizer's whitespace differ on some of it (\x1c-\x1f)
ODD_SPACE = re.compile(r"[^\S \t]")

FORMAT = 1
CHUNK_BYTES = 1 << 22  # text read per step: constant memory, and batches big enough for the tokenizer's threads
TOKENIZATION_SOURCE = Path(__file__).resolve().parent / "tokenization.py"


def default_cache_dir() -> Path:
    import datasets

    return Path(datasets.config.HF_DATASETS_CACHE) / "pointer_sentinel_tokens"


@dataclass(frozen=True)
class TextSource:
    """One split's text: a local file (plain or .xz), or a column of a `datasets.Dataset` (`dataset`)."""

    path: str | None = None
    dataset: object = None
    column: str = "text"
    encoding: str = "utf-8"

    @property
    def name(self) -> str:
        if self.path:
            return Path(self.path).name.removesuffix(".xz")
        return f"dataset-{self.column}"

    def key(self) -> dict:
        if self.path:
            p = Path(self.path).resolve()
            st = p.stat()
            return {"path": str(p), "size": st.st_size, "mtime_ns": st.st_mtime_ns, "encoding": self.encoding}
        return {"fingerprint": self.dataset._fingerprint, "column": self.column, "rows": self.dataset.num_rows}

    def line_batches(self, desc: str | None = None) -> Iterator[list[str]]:
        """The lines, in batches (no line breaks), as `datasets`' text loader cuts them; a progress bar when `desc`."""
        if self.path:
            yield from _file_line_batches(Path(self.path), self.encoding, desc)
            return
        n = self.dataset.num_rows
        with tqdm(total=n, desc=desc, unit="line", disable=desc is None) as bar:
            for batch in self.dataset.iter(batch_size=10_000):
                bar.update(len(batch[self.column]))
                yield batch[self.column]

    def lines(self) -> Iterator[str]:
        for batch in self.line_batches():
            yield from batch


def _file_line_batches(path: Path, encoding: str, desc: str | None) -> Iterator[list[str]]:
    # Universal newlines as Python's text files (and so `datasets`' text loader) read them: "\r\n" and "\r" are "\n".
    # Decoding by hand rather than through a text file gives the byte offset of undecodable text.
    decoder = io.IncrementalNewlineDecoder(codecs.getincrementaldecoder(encoding)(), translate=True)
    with open(path, "rb") as raw:
        stream = lzma.LZMAFile(raw) if path.suffix == ".xz" else raw
        total = path.stat().st_size
        with tqdm(total=total, desc=desc, unit="B", unit_scale=True, disable=desc is None) as bar:
            offset, rest = 0, ""
            while True:
                chunk = stream.read(CHUNK_BYTES)
                try:
                    text = rest + decoder.decode(chunk, final=not chunk)
                except UnicodeDecodeError as e:
                    where = offset + e.start - len(e.object) + len(chunk)
                    raise ValueError(
                        f"{path}: not {encoding} text near byte {max(where, 0):,} ({e.reason}); give the file's "
                        "encoding or convert it"
                    ) from None
                offset += len(chunk)
                bar.update(raw.tell() - bar.n)
                if not chunk:
                    if text:  # a last line without its line break
                        yield [text]
                    return
                lines = text.split("\n")
                rest = lines.pop()  # the line still open at the chunk's end
                if lines:
                    yield lines


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def tokenizer_key(tokenizer) -> dict:
    backend = tokenizer.backend_tokenizer
    return {"tokenizer_json": hashlib.sha256(backend.to_str().encode()).hexdigest(),
            "eos": tokenizer.eos_token_id, "line_rule": ends_lines_with_eos(tokenizer)}  # fmt: skip


def _replace_atomically(write, target: Path):
    tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    try:
        write(tmp)
        os.replace(tmp, target)
    finally:
        if tmp.is_file():
            tmp.unlink()


def cached_word_level_tokenizer(source: TextSource, cache_dir: Path | None = None, **build_kwargs):
    """`build_word_level_tokenizer` over `source`'s lines, streamed (one Counter of the words), saved in the cache so a
    second start reads it back instead of counting again. `build_kwargs` go to `build_word_level_tokenizer` and
    into the key."""
    cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
    key = _digest({"format": FORMAT, "source": source.key(), "build": build_kwargs,
                   "rules": hashlib.sha256(TOKENIZATION_SOURCE.read_bytes()).hexdigest()})  # fmt: skip
    folder = cache_dir / f"vocab-{source.name}-{key}"
    if (folder / "tokenizer.json").is_file():
        from transformers import PreTrainedTokenizerFast

        return PreTrainedTokenizerFast.from_pretrained(folder)
    lines = (line for batch in source.line_batches(desc=f"vocabulary of {source.name}") for line in batch)
    tokenizer = build_word_level_tokenizer(lines, **build_kwargs)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = folder.with_name(f"{folder.name}.tmp-{os.getpid()}")
    tokenizer.save_pretrained(tmp)
    try:
        os.replace(tmp, folder)
    except OSError:  # another process put it there first: theirs is the same tokenizer
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return tokenizer


def token_file(tokenizer, source: TextSource, cache_dir: Path | None = None, progress: bool = True) -> Path:
    """The id file of `source` under `tokenizer` (prepared now if the cache lacks it): flat ids, uint16 when every id
    fits, else uint32; its metadata (`.json`) holds the dtype, the token count and the key's parts."""
    cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
    parts = {"format": FORMAT, "tokenizer": tokenizer_key(tokenizer), "source": source.key()}
    stem = f"{source.name}-{_digest(parts)}"
    bin_path, meta_path = cache_dir / f"{stem}.bin", cache_dir / f"{stem}.json"
    if meta_path.is_file() and bin_path.is_file():
        meta = json.loads(meta_path.read_text())
        if bin_path.stat().st_size == meta["tokens"] * np.dtype(meta["dtype"]).itemsize:
            return bin_path
    cache_dir.mkdir(parents=True, exist_ok=True)
    backend = tokenizer.backend_tokenizer
    eos = tokenizer.eos_token_id
    if eos is None:
        raise ValueError("The tokenizer has no eos_token; the line-end token is needed.")
    dtype = np.uint16 if backend.get_vocab_size(with_added_tokens=True) <= 2**16 else np.uint32
    line_rule = ends_lines_with_eos(tokenizer)
    words = WordMemo(tokenizer, dtype) if line_rule and word_local(tokenizer) else None
    counts = {"tokens": 0, "lines": 0, "words": False}

    def write(tmp: Path):
        with open(tmp, "wb") as f:
            desc = f"tokenising {source.name}" if progress else None
            for lines in source.line_batches(desc=desc):
                ids = words.encode(lines) if words else _encode_lines(backend, lines, line_rule, eos, dtype)
                ids.tofile(f)
                counts["tokens"] += ids.size
                counts["lines"] += len(lines)
                counts["words"] = counts["words"] or any(line.strip() for line in lines)
            f.flush()
            os.fsync(f.fileno())

    _replace_atomically(write, bin_path)
    if not counts["lines"]:
        bin_path.unlink()
        raise ValueError("The corpus is empty.")
    meta = {**parts, "dtype": np.dtype(dtype).name, **counts}
    _replace_atomically(lambda tmp: tmp.write_text(json.dumps(meta, indent=1)), meta_path)
    return bin_path


def _encode_lines(backend, lines: list[str], line_rule: bool, eos: int, dtype) -> np.ndarray:
    """`training.encode_lines`' ids of a batch of lines: each line with its line break (the tokenizer's eos), or eos
    appended."""
    texts = [line + "\n" for line in lines] if line_rule else lines
    encodings = backend.encode_batch_fast(texts, add_special_tokens=False)
    lengths = [len(e.ids) + (not line_rule) for e in encodings]
    ids = np.empty(sum(lengths), dtype=dtype)
    pos = 0
    for e, n in zip(encodings, lengths, strict=True):
        ids[pos : pos + len(e.ids)] = e.ids
        pos += n
        if not line_rule:
            ids[pos - 1] = eos
    return ids


def word_local(tokenizer) -> bool:
    """Whether the tokenizer reads each whitespace-separated word on its own: a word-level tokenizer whose normalizer
    and pre-tokenizer are exactly one of tokenization.py's rule sets (their regexes look no further than the
    whitespace around a word), no padding or truncation, and no added token holding whitespace. Then a line's ids are
    its words' ids, each word's encoded once (`WordMemo`): tokenization.py's rules encode ~50k tokens/s, a lookup
    millions."""
    from tokenizers import Tokenizer, models

    from .tokenization import EOS, TEXT_RULES, _install_line_rule, _normalizer, _pre_tokenizer

    backend = tokenizer.backend_tokenizer
    if not isinstance(backend.model, models.WordLevel) or backend.padding or backend.truncation:
        return False
    if any(ODD_SPACE.search(t.content) or " " in t.content for t in backend.get_added_tokens_decoder().values()):
        return False
    rules = tokenizer.init_kwargs.get("text_rules", "whitespace")
    if rules not in TEXT_RULES:
        return False
    ref = Tokenizer(models.WordLevel({EOS: 0}, unk_token=EOS))
    ref.normalizer = _normalizer(rules)
    ref.pre_tokenizer = _pre_tokenizer(rules, backend.get_vocab(with_added_tokens=False))
    _install_line_rule(ref, rules)
    ours, theirs = json.loads(backend.to_str()), json.loads(ref.to_str())
    return all(ours[k] == theirs[k] for k in ("normalizer", "pre_tokenizer"))


class WordMemo:
    """A `word_local` tokenizer's line ids from its words' ids, each distinct word encoded once through the backend
    (memory O(distinct words)). Lines with other whitespace than spaces and tabs go through the backend whole."""

    def __init__(self, tokenizer, dtype):
        self.backend, self.eos, self.dtype = tokenizer.backend_tokenizer, tokenizer.eos_token_id, dtype
        self.single: dict[str, int] = {}  # words of one id
        self.multi: dict[str, list[int]] = {}  # words of none or several (`company's`, PTB's dropped `--`)

    def _learn(self, words: list[str]):
        for w, e in zip(words, self.backend.encode_batch_fast(words, add_special_tokens=False), strict=True):
            if len(e.ids) == 1:
                self.single[w] = e.ids[0]
            else:
                self.multi[w] = e.ids

    def encode(self, lines: list[str]) -> np.ndarray:
        if ODD_SPACE.search("".join(lines)):
            return np.concatenate([self.encode([line]) if not ODD_SPACE.search(line)
                                   else _encode_lines(self.backend, [line], True, self.eos, self.dtype)
                                   for line in lines])  # fmt: skip
        words, ends = [], []
        for line in lines:
            words += line.split()
            ends.append(len(words))
        single = self.single
        if new := {w for w in words if w not in single and w not in self.multi}:
            self._learn(sorted(new))
        if any(w in self.multi for w in words) if self.multi else False:
            ids, start = [], 0
            for end in ends:
                for w in words[start:end]:
                    if w in single:
                        ids.append(single[w])
                    else:
                        ids += self.multi[w]
                ids.append(self.eos)
                start = end
            return np.array(ids, dtype=self.dtype)
        ids = np.empty(len(words) + len(ends), dtype=self.dtype)
        positions = np.arange(len(ends)) + np.array(ends)  # each line's eos after its words
        ids[positions] = self.eos
        mask = np.ones(ids.size, bool)
        mask[positions] = False
        ids[mask] = [single[w] for w in words]
        return ids


def read_meta(bin_path: Path) -> dict:
    bin_path = Path(bin_path)
    return json.loads(bin_path.with_name(bin_path.name.removesuffix(".bin") + ".json").read_text())


def token_array(bin_path: Path) -> np.memmap:
    """The id file as a read-only memory map (pages are read as they are touched)."""
    return np.memmap(bin_path, dtype=read_meta(bin_path)["dtype"], mode="r")


def cached_ids(tokenizer, source: TextSource, cache_dir: Path | None = None, progress: bool = True) -> torch.Tensor:
    """`encode_lines(tokenizer, lines of source)` through the cache: the flat int64 id stream."""
    return load_ids(token_file(tokenizer, source, cache_dir, progress))


def load_ids(bin_path: Path) -> torch.Tensor:
    """An id file as the int64 tensor `encode_lines` gives (8 bytes a token in memory, read in one pass)."""
    return torch.from_numpy(token_array(bin_path).astype(np.int64))


class TokenBlocks(torch.utils.data.Dataset):
    """`transformers.Trainer` data read from an id file: the blocks `training.group_lines` cuts (`input_ids` and
    `labels`, equal; the last `len % block_size` tokens dropped), each read from the memory map when asked for, so
    the corpus never sits in memory. Batch with `transformers.default_data_collator`."""

    def __init__(self, bin_path: Path, block_size: int):
        if block_size < 2:
            raise ValueError(f"block_size must be >= 2 (a block of T tokens has T - 1 targets), got {block_size}.")
        self.ids, self.block_size = token_array(bin_path), block_size
        if len(self) == 0:
            raise ValueError(f"{self.ids.size} tokens cannot fill one block of {block_size}.")

    def __len__(self) -> int:
        return self.ids.size // self.block_size

    def __getitem__(self, i: int) -> dict:
        if not 0 <= i < len(self):
            raise IndexError(i)
        block = torch.from_numpy(self.ids[i * self.block_size : (i + 1) * self.block_size].astype(np.int64))
        return {"input_ids": block, "labels": block.clone()}


def split_sources(dataset_name=None, dataset_config_name=None, train_file=None, validation_file=None, test_file=None,
                  encoding: str = "utf-8") -> dict[str, TextSource]:  # fmt: skip
    """The splits `training.load_text_splits` reads, as sources to stream: a Hub dataset, the local files given,
    or the bundled WikiText-2."""
    from .training import SPLITS, split_files

    if dataset_name:
        import datasets

        ds = datasets.load_dataset(dataset_name, dataset_config_name)
        column = "text" if "text" in ds["train"].column_names else ds["train"].column_names[0]
        return {split: TextSource(dataset=ds[split], column=column) for split in SPLITS if split in ds}
    files = split_files(train_file, validation_file, test_file)
    return {split: TextSource(path=path, encoding=encoding) for split, path in files.items()}
