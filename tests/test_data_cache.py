"""The token cache (modeling_pointer_sentinel/data.py) gives `encode_lines`' ids, id for id, and is read again only
while the tokenizer and the text files are those it was prepared from."""

import os

import pytest
import torch

from modeling_pointer_sentinel import data
from modeling_pointer_sentinel.data import (
    TextSource,
    TokenBlocks,
    cached_ids,
    cached_word_level_tokenizer,
    split_sources,
    token_file,
)
from modeling_pointer_sentinel.tokenization import build_word_level_tokenizer, open_vocabulary
from modeling_pointer_sentinel.training import encode_lines, group_lines, load_text_splits


def assert_same_ids(files: dict, cache_dir):
    """The streamed vocabulary is the one built from all lines, and each split's cached ids are encode_lines' ids
    (prepared by two workers where a file is at least twice MIN_RANGE_BYTES), with their counts."""
    splits = load_text_splits(**files)
    sources = split_sources(**files)
    reference = build_word_level_tokenizer(splits["train"])
    tok = cached_word_level_tokenizer(sources["train"], cache_dir)
    assert tok.backend_tokenizer.to_str() == reference.backend_tokenizer.to_str()
    again = cached_word_level_tokenizer(sources["train"], cache_dir)  # read back from the cache
    assert again.backend_tokenizer.to_str() == reference.backend_tokenizer.to_str()
    assert again.init_kwargs["text_rules"] == reference.init_kwargs["text_rules"]
    for split, lines in splits.items():
        ids = cached_ids(tok, sources[split], cache_dir, progress=False, num_proc=2)
        assert torch.equal(ids, encode_lines(reference, lines))
        counts = data.token_counts(token_file(tok, sources[split], cache_dir, progress=False))
        assert counts.tolist() == torch.bincount(ids, minlength=len(tok)).tolist()
    return reference, splits, sources


def test_bundled_wikitext2_ids_are_encode_lines_ids(tmp_path):
    assert_same_ids({}, tmp_path)


@pytest.mark.parametrize("corpus", ["ptb", "wikitext-2"])
def test_shared_ptb_and_wikitext2_ids_are_encode_lines_ids(corpus, shared_data, tmp_path, monkeypatch):
    monkeypatch.setattr(data, "MIN_RANGE_BYTES", 1 << 20)  # the training files (5 and 11 MB) in two workers' ranges
    folder = shared_data / corpus
    names = {"ptb": "ptb.{}.txt", "wikitext-2": "wiki.{}.tokens"}[corpus]
    files = {f"{s}_file": str(folder / names.format(n)) for s, n in
             [("train", "train"), ("validation", "valid"), ("test", "test")]}  # fmt: skip
    assert_same_ids(files, tmp_path)


ODD_LINES = (
    "The company's 1,200 well-known don't -- U.S. 3.5 <unk>\r\n\r\n  spaced\tout  \rno\x1cbreak and\xa0nbsp\n"
    "Mr. Smith's 12% 1/2 N shares\n\nlast line without a break"
)


@pytest.mark.parametrize("num_proc", [1, 3])
@pytest.mark.parametrize("rules", ["wikitext", "ptb", "whitespace"])
def test_line_breaks_odd_whitespace_and_split_words_keep_encode_lines_ids(rules, num_proc, tmp_path, monkeypatch):
    """\\r\\n and \\r cut lines as datasets' text loader does; words the rules split (several ids), whitespace other
    than spaces and tabs, a last line without a break, and chunk ends inside lines and characters all keep the ids,
    for the built tokenizer and for its open-vocabulary form, in one pass or in three workers' byte ranges."""
    monkeypatch.setattr(data, "CHUNK_BYTES", 7)  # many chunk boundaries
    monkeypatch.setattr(data, "MIN_RANGE_BYTES", 16)
    path = tmp_path / "odd.txt"
    path.write_bytes((ODD_LINES * 3 + "é ü 東京").encode())
    lines = load_text_splits(train_file=str(path))["train"]
    source = TextSource(path=str(path))
    assert [line for batch in source.line_batches() for line in batch] == lines
    train = build_word_level_tokenizer(lines[:3], text_rules=rules)  # later lines hold unseen words (<unk>)
    assert data.word_local(train)
    if num_proc > 1:
        assert len(data._byte_ranges(source, num_proc)) == num_proc
    for tok in (train, open_vocabulary(train, 8)):
        ids = cached_ids(tok, source, tmp_path / "cache", progress=False, num_proc=num_proc)
        assert ids.tolist() == encode_lines(tok, lines).tolist()


def test_a_changed_file_or_tokenizer_is_prepared_again_an_unchanged_one_is_read(tmp_path):
    path = tmp_path / "train.txt"
    path.write_text("a b c\nb c\n")
    source, cache = TextSource(path=str(path)), tmp_path / "cache"
    tok = cached_word_level_tokenizer(source, cache, text_rules="whitespace")
    first = token_file(tok, source, cache, progress=False)
    written = first.stat().st_mtime_ns
    assert token_file(tok, source, cache, progress=False) == first and first.stat().st_mtime_ns == written
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))  # same text, touched: prepared again
    assert token_file(tok, source, cache, progress=False) != first
    path.write_text("c c c d\n")  # new text, new vocabulary and new ids
    tok2 = cached_word_level_tokenizer(source, cache, text_rules="whitespace")
    assert tok2.get_vocab() != tok.get_vocab()
    assert cached_ids(tok2, source, cache, progress=False).tolist() == encode_lines(tok2, ["c c c d"]).tolist()
    other = build_word_level_tokenizer(["d c"], text_rules="whitespace")  # another tokenizer, the same file
    assert cached_ids(other, source, cache, progress=False).tolist() == encode_lines(other, ["c c c d"]).tolist()
    twin = tmp_path / "elsewhere"  # the same name in another folder is another source
    twin.mkdir()
    (twin / "train.txt").write_text("d d\n")
    assert cached_ids(other, TextSource(path=str(twin / "train.txt")), cache, progress=False).tolist() == \
        encode_lines(other, ["d d"]).tolist()  # fmt: skip


def test_undecodable_file_names_the_file_and_the_byte(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes(b"abc def\ncaf\xe9\n")
    with pytest.raises(ValueError, match=r"latin1.txt: not utf-8 text near byte 11 "):
        cached_ids(build_word_level_tokenizer(["a"]), TextSource(path=str(path)), tmp_path, progress=False)


def test_byte_ranges_end_after_line_breaks_and_cover_the_file(tmp_path, monkeypatch):
    monkeypatch.setattr(data, "MIN_RANGE_BYTES", 4)
    path = tmp_path / "t.txt"
    text = b"one two\r\nthree\n\nfour five six seven\rx\n" * 5 + b"last"
    path.write_bytes(text)
    ranges = data._byte_ranges(TextSource(path=str(path)), 4)
    assert len(ranges) == 4 and ranges[0][0] == 0 and ranges[-1][1] == len(text)
    assert all(a[1] == b[0] and text[a[1] - 1 : a[1]] == b"\n" for a, b in zip(ranges, ranges[1:], strict=False))
    assert data._byte_ranges(TextSource(path=str(path)), 1) == [(0, None)]
    assert data._byte_ranges(TextSource(path=str(path), encoding="utf-16"), 4) == [(0, None)]  # "\n" is no byte
    monkeypatch.setattr(data, "MIN_RANGE_BYTES", len(text) // 2)  # no worker gets less than its least share
    assert len(data._byte_ranges(TextSource(path=str(path)), 4)) == 2


def test_a_workers_undecodable_byte_is_named_with_its_offset_in_the_file(tmp_path, monkeypatch):
    monkeypatch.setattr(data, "MIN_RANGE_BYTES", 16)
    path = tmp_path / "latin1.txt"
    good = b"abc def ghi\n" * 40
    path.write_bytes(good + b"caf\xe9\n" + good)
    assert len(data._byte_ranges(TextSource(path=str(path)), 3)) == 3
    where = f"near byte {len(good) + 3:,} "
    with pytest.raises(ValueError, match=rf"latin1.txt: not utf-8 text {where}"):
        token_file(build_word_level_tokenizer(["a"]), TextSource(path=str(path)), tmp_path, progress=False, num_proc=3)
    assert not list(tmp_path.glob("*.bin*"))  # no part or id file left


def test_token_blocks_are_group_lines_blocks(tmp_path):
    lines = load_text_splits()["validation"]
    tok = build_word_level_tokenizer(lines)
    blocks = TokenBlocks(token_file(tok, split_sources()["validation"], tmp_path, progress=False), 128)
    reference = group_lines(lines, tok, 128)
    assert len(blocks) == len(reference)
    for i in (0, 1, len(blocks) - 1):
        assert blocks[i]["input_ids"].tolist() == reference[i]["input_ids"] == blocks[i]["labels"].tolist()
