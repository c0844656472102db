"""Token caches: a corpus tokenised once into a flat id file, read back through a memory map (nanoGPT's prepare.py).

Preparing a split streams its text in chunks: memory stays constant whatever the corpus size (the vocabulary pass
holds one Counter over the words, O(vocabulary)). The id pass cuts a local file at line breaks into byte ranges and
encodes them in forked workers at once (`token_file`'s `num_proc`; train.py and evaluate.py:
`--preprocessing_num_workers`), each word looked up in a table of the words seen so far; one progress bar over the
bytes. Rather than `datasets`' `map(num_proc=...)`: that first copies the text into an Arrow table and writes the ids
as Arrow rows, which then still have to be joined into the flat file (benchmarks/scale.py `--datasets_map` measures
both on one file). Training and evaluation read the ids through `TokenStreams`, which converts a batch at a time.
The ids are those of `training.encode_lines(tokenizer, lines)` over the lines `training.load_text_splits` reads, id
for id: the same line cuts (`datasets`' text loader: universal newlines), the same backend tokenizer call on the same
per-line texts (or its ids for each word, where the tokenizer reads words alone), so every id stays as it was.

Where: `cache_dir` (train.py and evaluate.py: `--data_cache_dir`), by default `pointer_sentinel_tokens` under the
Hugging Face datasets cache (`datasets.config.HF_DATASETS_CACHE`, i.e. `$HF_DATASETS_CACHE` or
`~/.cache/huggingface/datasets`).
Keys (sha256, first 16 hex digits in the file names):
- an id file (`<name>-<key>.bin`, with `<name>-<key>.json` and each id's count, `<name>-<key>.counts.npy`, beside
  it): the format version, the backend tokenizer's whole JSON (vocabulary, text rules, added tokens), eos id and line
  rule, and the source: a file's resolved path, size, mtime (ns) and encoding, or a `datasets.Dataset`'s fingerprint
  and column;
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
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from .tokenization import build_word_level_tokenizer, ends_lines_with_eos, spelled_line_ids

# Whitespace but space and tab: Python's str.split and the tokenizer's whitespace differ on some of it (\x1c-\x1f)
ODD_SPACE = re.compile(r"[^\S \t]")
ODD_BLOCK = re.compile(r"[^\S \t\n]")  # the same, in a block of lines

FORMAT = 2  # 2: each id's count beside the ids (.counts.npy)
CHUNK_BYTES = 1 << 22  # text read per step: constant memory, and batches big enough for the tokenizer's threads
MIN_RANGE_BYTES = 1 << 24  # a worker's least share of a file (token_file's num_proc)
TOKENIZATION_SOURCE = Path(__file__).resolve().parent / "tokenization.py"
BUNDLED = Path(__file__).resolve().parent / "data" / "wikitext-2"
SPLITS = ("train", "validation", "test")


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
            for text in self.text_blocks(desc):
                yield text.removesuffix("\n").split("\n")
            return
        n = self.dataset.num_rows
        with tqdm(total=n, desc=desc, unit="line", disable=desc is None) as bar:
            for batch in self.dataset.iter(batch_size=10_000):
                bar.update(len(batch[self.column]))
                yield batch[self.column]

    def text_blocks(self, desc: str | None = None, start: int = 0, end: int | None = None,
                    progress=None) -> Iterator[str]:  # fmt: skip
        """A file's text in blocks of whole lines, each line ending in "\n" (universal newlines), but the file's last
        line when it has no line break; `start` and `end`: the bytes [start, end), cut after a "\n" byte."""
        yield from _file_text_blocks(Path(self.path), self.encoding, desc, start, end, progress)

    def lines(self) -> Iterator[str]:
        for batch in self.line_batches():
            yield from batch


def _file_text_blocks(path: Path, encoding: str, desc: str | None, start: int = 0, end: int | None = None,
                      progress=None) -> Iterator[str]:  # fmt: skip
    # Universal newlines as Python's text files (and so `datasets`' text loader) read them: "\r\n" and "\r" are "\n".
    # Decoding by hand rather than through a text file gives the byte offset of undecodable text.
    decoder = io.IncrementalNewlineDecoder(codecs.getincrementaldecoder(encoding)(), translate=True)
    with open(path, "rb") as raw:
        stream = lzma.LZMAFile(raw) if path.suffix == ".xz" else raw
        total = path.stat().st_size if end is None else end - start
        if start:
            raw.seek(start)
        with tqdm(total=total, desc=desc, unit="B", unit_scale=True, disable=desc is None) as bar:
            offset, rest, done = start, "", 0
            while True:
                chunk = stream.read(CHUNK_BYTES if end is None else min(CHUNK_BYTES, end - offset))
                try:
                    text = rest + decoder.decode(chunk, final=not chunk)
                except UnicodeDecodeError as e:
                    where = offset + e.start - len(e.object) + len(chunk)
                    raise ValueError(
                        f"{path}: not {encoding} text near byte {max(where, 0):,} ({e.reason}); give the file's "
                        "encoding or convert it"
                    ) from None
                offset += len(chunk)
                read = raw.tell() - start
                bar.update(read - done)
                if progress is not None:
                    progress.value += read - done
                done = read
                if not chunk:
                    if text:  # a last line without its line break
                        yield text
                    return
                cut = text.rfind("\n") + 1
                rest = text[cut:]  # the line still open at the chunk's end
                if cut:
                    yield text[:cut]


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def tokenizer_key(tokenizer) -> dict:
    backend = tokenizer.backend_tokenizer
    spelling = {"spell_unseen": True} if getattr(tokenizer, "spell_unseen", False) else {}  # its ids differ
    return {"tokenizer_json": hashlib.sha256(backend.to_str().encode()).hexdigest(),
            "eos": tokenizer.eos_token_id, "line_rule": ends_lines_with_eos(tokenizer), **spelling}  # fmt: skip


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


def default_workers() -> int:
    """The cores this process may run on (its CPU affinity)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def token_file(tokenizer, source: TextSource, cache_dir: Path | None = None, progress: bool = True,
               num_proc: int | None = None) -> Path:  # fmt: skip
    """The id file of `source` under `tokenizer` (prepared now if the cache lacks it): flat ids, uint16 when every id
    fits, else uint32; its metadata (`.json`) holds the dtype, the token count and the key's parts, and `.counts.npy`
    each id's count (`token_counts`).

    `num_proc` (default: the usable cores): a plain local file of an ASCII-compatible encoding is cut at line breaks
    into that many byte ranges (at least `MIN_RANGE_BYTES` each), encoded by forked workers at once and joined in
    order; the ids are those of one pass. One progress bar over the bytes of all workers."""
    cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
    parts = {"format": FORMAT, "tokenizer": tokenizer_key(tokenizer), "source": source.key()}
    stem = f"{source.name}-{_digest(parts)}"
    bin_path, meta_path = cache_dir / f"{stem}.bin", cache_dir / f"{stem}.json"
    counts_path = cache_dir / f"{stem}.counts.npy"
    if meta_path.is_file() and bin_path.is_file() and counts_path.is_file():
        meta = json.loads(meta_path.read_text())
        if bin_path.stat().st_size == meta["tokens"] * np.dtype(meta["dtype"]).itemsize:
            return bin_path
    cache_dir.mkdir(parents=True, exist_ok=True)
    if tokenizer.eos_token_id is None:
        raise ValueError("The tokenizer has no eos_token; the line-end token is needed.")
    dtype = np.uint16 if tokenizer.backend_tokenizer.get_vocab_size(with_added_tokens=True) <= 2**16 else np.uint32
    encoder = _Encoder(tokenizer, dtype)
    ranges = _byte_ranges(source, default_workers() if num_proc is None else num_proc)
    desc = f"tokenising {source.name}" if progress else None
    stats = {}

    def write(tmp: Path):
        if len(ranges) == 1:
            stats.update(_encode_range(encoder, source, ranges[0], tmp, desc))
        else:
            stats.update(_encode_in_workers(encoder, source, ranges, tmp, desc))

    _replace_atomically(write, bin_path)
    if not stats["lines"]:
        bin_path.unlink()
        raise ValueError("The corpus is empty.")
    counts = stats.pop("counts")

    def write_counts(tmp: Path):
        with open(tmp, "wb") as f:
            np.save(f, counts)

    _replace_atomically(write_counts, counts_path)
    meta = {**parts, "dtype": np.dtype(dtype).name, **stats}
    _replace_atomically(lambda tmp: tmp.write_text(json.dumps(meta, indent=1)), meta_path)
    return bin_path


class _Encoder:
    """A split's ids, batch by batch: `training.encode_lines`' ids of the batch's lines."""

    def __init__(self, tokenizer, dtype):
        self.backend, self.eos, self.dtype = tokenizer.backend_tokenizer, tokenizer.eos_token_id, dtype
        self.line_rule = ends_lines_with_eos(tokenizer)
        # spell mode writes an unseen word in bytes, which the backend alone reads as <unk>: its own encoding
        self.spelling = tokenizer if getattr(tokenizer, "spell_unseen", False) else None
        local = self.line_rule and word_local(tokenizer) and self.spelling is None
        self.words = WordMemo(tokenizer, dtype) if local else None
        self.vocab_size = len(tokenizer) if self.spelling else self.backend.get_vocab_size(with_added_tokens=True)

    def text(self, text: str) -> np.ndarray:
        """Ids of a block of whole lines (`TextSource.text_blocks`)."""
        if self.words:
            return self.words.encode_text(text)
        return self.lines(text.removesuffix("\n").split("\n"))

    def lines(self, lines: list[str]) -> np.ndarray:
        if self.words:
            return self.words.encode(lines)
        if self.spelling is not None:
            return np.array(spelled_line_ids(self.spelling, lines), dtype=self.dtype)
        return _encode_lines(self.backend, lines, self.line_rule, self.eos, self.dtype)


def _encode_range(encoder: _Encoder, source: TextSource, span: tuple, out: Path, desc: str | None,
                  progress=None) -> dict:  # fmt: skip
    """Writes the ids of `source`'s bytes [start, end) (a file; the whole of a dataset) to `out`; their counts."""
    stats = {"tokens": 0, "lines": 0, "words": False, "counts": np.zeros(encoder.vocab_size, np.int64)}

    def batches():
        if source.path:
            for text in source.text_blocks(desc, *span, progress):
                yield encoder.text(text), text.count("\n") + (not text.endswith("\n")), not text.isspace()
        else:
            for lines in source.line_batches(desc=desc):
                yield encoder.lines(lines), len(lines), any(line.strip() for line in lines)

    with open(out, "wb") as f:
        for ids, lines, words in batches():
            ids.tofile(f)
            stats["tokens"] += ids.size
            stats["lines"] += lines
            stats["words"] = stats["words"] or words
            stats["counts"] += np.bincount(ids, minlength=encoder.vocab_size)
        f.flush()
        os.fsync(f.fileno())
    return stats


def _cuttable(encoding: str) -> bool:
    """Whether a "\n" byte is a line break and the next byte starts a character (a range can start there)."""
    name = codecs.lookup(encoding).name
    return name in ("utf-8", "ascii", "latin-1") or name.startswith(("iso8859", "cp125"))


def _byte_ranges(source: TextSource, workers: int) -> list[tuple[int, int | None]]:
    """[start, end) byte ranges of a file, each ending after a "\n" byte (but the last), one per worker."""
    if workers < 1:
        raise ValueError(f"num_proc must be >= 1, got {workers}.")
    if not source.path or source.path.endswith(".xz") or not _cuttable(source.encoding):
        return [(0, None)]
    size = Path(source.path).stat().st_size
    workers = min(workers, max(1, size // MIN_RANGE_BYTES))
    if workers == 1:
        return [(0, None)]
    cuts = [0]
    with open(source.path, "rb") as f:
        for k in range(1, workers):
            f.seek(max(size * k // workers, cuts[-1]))
            while (piece := f.read(1 << 16)) and (i := piece.find(b"\n")) < 0:
                pass
            cuts.append(size if not piece else f.tell() - len(piece) + i + 1)
    cuts.append(size)
    return [(a, b) for a, b in zip(cuts[:-1], cuts[1:], strict=True) if b > a]


def _worker(i, encoder, source, span, out, progress, results):
    try:
        results.put((i, _encode_range(encoder, source, span, out, None, progress)))
    except BaseException as e:  # noqa: BLE001 (handed to the parent, which raises it)
        results.put((i, e))


def _encode_in_workers(encoder: _Encoder, source: TextSource, ranges: list, out: Path, desc: str | None) -> dict:
    """`_encode_range` of each byte range in a forked worker (range 0 into `out`, the others into parts appended to
    it in order); a worker's error (an undecodable byte) is raised here as it was raised there."""
    import multiprocessing
    import queue

    ctx = multiprocessing.get_context("fork")  # the workers inherit the tokenizer: nothing to pickle or import
    results, done = ctx.Queue(), [ctx.Value("q", 0, lock=False) for _ in ranges]
    outs = [out] + [out.with_name(f"{out.name}.part{i}") for i in range(1, len(ranges))]
    before = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one thread a worker (and no warning at the fork)
    procs = [ctx.Process(target=_worker, args=(i, encoder, source, span, outs[i], done[i], results), daemon=True)
             for i, span in enumerate(ranges)]  # fmt: skip
    got = {}
    try:
        with tqdm(total=Path(source.path).stat().st_size, desc=desc, unit="B", unit_scale=True,
                  disable=desc is None) as bar:  # fmt: skip
            for p in procs:
                p.start()
            if before is None:
                del os.environ["TOKENIZERS_PARALLELISM"]
            else:
                os.environ["TOKENIZERS_PARALLELISM"] = before
            while len(got) < len(procs):
                try:
                    i, result = results.get(timeout=0.5)
                    got[i] = result
                except queue.Empty:
                    if lost := [i for i, p in enumerate(procs) if i not in got and p.exitcode not in (None, 0)]:
                        code = procs[lost[0]].exitcode
                        raise RuntimeError(f"token cache worker {lost[0]} died (exit {code})") from None
                bar.update(sum(v.value for v in done) - bar.n)
            bar.update(sum(v.value for v in done) - bar.n)
        if errors := [got[i] for i in sorted(got) if isinstance(got[i], BaseException)]:
            raise errors[0]
        with open(out, "r+b") as f:  # not "ab": copy_file_range refuses a file opened to append
            f.seek(0, os.SEEK_END)
            for part in outs[1:]:
                with open(part, "rb") as src:
                    while os.copy_file_range(src.fileno(), f.fileno(), 1 << 30):
                        pass
                part.unlink()
            f.flush()
            os.fsync(f.fileno())
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
            p.join()
        for part in outs[1:]:
            part.unlink(missing_ok=True)
    stats = [got[i] for i in range(len(ranges))]
    return {"tokens": sum(s["tokens"] for s in stats), "lines": sum(s["lines"] for s in stats),
            "words": any(s["words"] for s in stats), "counts": sum(s["counts"] for s in stats)}  # fmt: skip


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


SKIP, SEVERAL, NEW = -1, -2, -3  # WordMemo's codes: no word (between two spaces), a word of none or several ids,
# a word not encoded yet


class _Codes(dict):
    """word -> code; a word it lacks reads as NEW and is noted in `new` (one pass over a block's words at C speed)."""

    def __init__(self, *args):
        super().__init__(*args)
        self.new: set[str] = set()

    def __missing__(self, word: str) -> int:
        self.new.add(word)
        return NEW


def _odd_space(text: str) -> bool:
    """Whether `text` holds whitespace besides spaces, tabs and line breaks (an ASCII text: seven searches of one
    character, each faster than one regex pass)."""
    if text.isascii():
        return any(c in text for c in "\x0b\x0c\r\x1c\x1d\x1e\x1f")
    return ODD_BLOCK.search(text) is not None


class WordMemo:
    """A `word_local` tokenizer's line ids from its words' ids, each distinct word encoded once through the backend
    (memory O(distinct words)). Lines with other whitespace than spaces and tabs go through the backend whole."""

    def __init__(self, tokenizer, dtype):
        self.backend, self.eos, self.dtype = tokenizer.backend_tokenizer, tokenizer.eos_token_id, dtype
        self.single: dict[str, int] = {}  # words of one id
        self.multi: dict[str, list[int]] = {}  # words of none or several (`company's`, PTB's dropped `--`)
        self.codes = _Codes({"": SKIP, "\n": self.eos})  # encode_text's pieces: an id, SKIP or SEVERAL

    def _learn(self, words: list[str]):
        for w, e in zip(words, self.backend.encode_batch_fast(words, add_special_tokens=False), strict=True):
            if len(e.ids) == 1:
                self.single[w] = self.codes[w] = e.ids[0]
            else:
                self.multi[w], self.codes[w] = e.ids, SEVERAL

    def encode_text(self, text: str) -> np.ndarray:
        """Ids of a block of whole lines, each ending in "\n" (the last may lack it), at C speed: the block cut at
        spaces and tabs in one `str.split`, each piece looked up in one `map` (a line break is a piece: eos)."""
        if not text.endswith("\n"):
            text += "\n"  # the file's last line, encoded with its line break as encode_lines does
        if _odd_space(text):
            return self.encode(text[:-1].split("\n"))
        if "\t" in text:
            text = text.replace("\t", " ")
        pieces = text.replace("\n", " \n ").split(" ")
        codes = self.codes
        ids = np.fromiter(map(codes.__getitem__, pieces), np.int64, len(pieces))
        if codes.new:  # words not seen before (NEW): encode each once
            self._learn(sorted(codes.new))
            codes.new.clear()
            new = np.flatnonzero(ids == NEW)
            ids[new] = [codes[pieces[i]] for i in new.tolist()]
        if self.multi and (several := np.flatnonzero(ids == SEVERAL)).size:
            parts, start = [], 0
            for i in several.tolist():
                parts += [ids[start:i], np.array(self.multi[pieces[i]], np.int64)]
                start = i + 1
            ids = np.concatenate([*parts, ids[start:]])
        return ids[ids != SKIP].astype(self.dtype)

    def encode(self, lines: list[str]) -> np.ndarray:
        if not lines:
            return np.empty(0, self.dtype)
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


def token_counts(bin_path: Path) -> np.ndarray:
    """Each id's count in an id file (int64, one per id of the tokenizer, added tokens included): written with the
    ids, so the frequency order and the <unk> rate of a split need no pass over it."""
    bin_path = Path(bin_path)
    return np.load(bin_path.with_name(bin_path.name.removesuffix(".bin") + ".counts.npy"))


def split_arrays(files: dict) -> tuple[dict, dict]:
    """Each split's id file (split name -> `token_file`'s path) as a memory map (`token_array`: 2 or 4 bytes a token
    on disk; `training.shard_streams` converts a batch at a time) and each id's count in it (`token_counts`, written
    with the ids: the frequency order and the <unk> rates without a pass over them). ValueError when the training
    split ("train") is empty."""
    ids = {s: token_array(f) for s, f in files.items()}
    counts = {s: token_counts(f) for s, f in files.items()}
    if not read_meta(files["train"])["words"]:
        raise ValueError("The training split is empty.")
    return ids, counts


def cached_ids(tokenizer, source: TextSource, cache_dir: Path | None = None, progress: bool = True,
               num_proc: int | None = None) -> torch.Tensor:  # fmt: skip
    """`encode_lines(tokenizer, lines of source)` through the cache: the flat int64 id stream."""
    return load_ids(token_file(tokenizer, source, cache_dir, progress, num_proc))


def load_ids(bin_path: Path) -> torch.Tensor:
    """An id file as the int64 tensor `encode_lines` gives (8 bytes a token in memory, read in one pass)."""
    return torch.from_numpy(token_array(bin_path).astype(np.int64))


class SplitIds(Mapping):
    """Each split's flat int64 id stream (`load_ids`), read from its id file when first asked for: the analyses that
    need a split whole (dynamic evaluation, pictures, word frequencies) load it, the others never do."""

    def __init__(self, files: dict):
        self.files, self.loaded = dict(files), {}

    def __getitem__(self, split: str) -> torch.Tensor:
        if split not in self.loaded:
            self.loaded[split] = load_ids(self.files[split])
        return self.loaded[split]

    def __iter__(self):
        return iter(self.files)

    def __len__(self) -> int:
        return len(self.files)


class TokenStreams:
    """(rows, N) id streams over a memory map (`training.shard_streams` of `token_array`), read a batch at a time:
    indexing gives the int64 tensor of just those ids (on `device`), so training and evaluation hold one segment of
    the corpus in memory, not the corpus (8 bytes a token as int64)."""

    def __init__(self, array: np.ndarray, device=None):
        if array.ndim != 2:
            raise ValueError(f"TokenStreams takes (rows, N) streams, got shape {array.shape}.")
        self.array, self.device = array, device

    @property
    def shape(self) -> torch.Size:
        return torch.Size(self.array.shape)

    def numel(self) -> int:
        return self.array.size

    def to(self, device) -> "TokenStreams":
        return TokenStreams(self.array, device)

    def __getitem__(self, index) -> torch.Tensor:
        ids = torch.from_numpy(np.asarray(self.array[index]).astype(np.int64))
        return ids if self.device is None else ids.to(self.device)

    def tensor(self) -> torch.Tensor:
        """All the streams as one int64 tensor (8 bytes a token)."""
        return self[:, :]


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


def split_files(train_file: str | None = None, validation_file: str | None = None,
                test_file: str | None = None) -> dict[str, str]:  # fmt: skip
    """Each split's text file: the local files given (only those splits: evaluation needs no train), or the bundled
    WikiText-2 when none is; each must exist and hold something."""
    if train_file or validation_file or test_file:
        files = {"train": train_file, "validation": validation_file, "test": test_file}
    else:
        files = {
            s: str(BUNDLED / f"wiki.{n}.tokens.xz") for s, n in zip(SPLITS, ("train", "valid", "test"), strict=True)
        }
    files = {k: v for k, v in files.items() if v}
    for split, path in files.items():
        if not Path(path).is_file():
            raise FileNotFoundError(f"The {split} file {path} does not exist.")
        if Path(path).stat().st_size == 0:
            raise ValueError(f"The {split} file {path} is empty.")
    return files


def split_sources(dataset_name=None, dataset_config_name=None, train_file=None, validation_file=None, test_file=None,
                  encoding: str = "utf-8") -> dict[str, TextSource]:  # fmt: skip
    """The splits `training.load_text_splits` reads, as sources to stream: a Hub dataset, the local files given,
    or the bundled WikiText-2."""
    if dataset_name:
        import datasets

        ds = datasets.load_dataset(dataset_name, dataset_config_name)
        column = "text" if "text" in ds["train"].column_names else ds["train"].column_names[0]
        return {split: TextSource(dataset=ds[split], column=column) for split in SPLITS if split in ds}
    files = split_files(train_file, validation_file, test_file)
    return {split: TextSource(path=path, encoding=encoding) for split, path in files.items()}
