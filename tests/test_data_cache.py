"""The token cache (modeling_pointer_sentinel/data.py) gives `encode_lines`' ids, id for id, and is read again only
while the tokenizer and the text files are those it was prepared from."""

import os
import sys

import pytest
import torch
from conftest import ROOT

from modeling_pointer_sentinel import data
from modeling_pointer_sentinel.data import (
    TextSource,
    TokenBlocks,
    TokenStreams,
    cached_ids,
    cached_word_level_tokenizer,
    split_sources,
    token_file,
)
from modeling_pointer_sentinel.tokenization import build_word_level_tokenizer, open_vocabulary
from modeling_pointer_sentinel.training import (
    check_frequency_order,
    encode_lines,
    group_lines,
    load_text_splits,
    make_segment,
    shard_streams,
    unk_rate,
    unk_rate_of_counts,
)


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


@pytest.mark.parametrize("num_proc", [1, 2])
def test_a_vocabulary_above_65536_words_keeps_its_ids(num_proc, tmp_path, monkeypatch):
    """A vocabulary whose ids do not fit uint16 (WikiText-103's has 267,735 words) is cached as uint32, so every id
    above 65,535 comes back as it was, not wrapped: 70,001 distinct words w0..w70000, in one pass or two workers'."""
    monkeypatch.setattr(data, "MIN_RANGE_BYTES", 1 << 16)
    lines = [" ".join(f"w{i}" for i in range(start, min(start + 100, 70_001))) for start in range(0, 70_001, 100)]
    path = tmp_path / "big.txt"
    path.write_text("\n".join(lines) + "\n")
    tok = build_word_level_tokenizer(lines, text_rules="whitespace")
    expected = encode_lines(tok, lines)
    assert len(tok) > 2**16 and int(expected.max()) > 2**16
    source = TextSource(path=str(path))
    assert len(data._byte_ranges(source, num_proc)) == num_proc
    ids = cached_ids(tok, source, tmp_path / "cache", progress=False, num_proc=num_proc)
    assert torch.equal(ids, expected)


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


def test_streams_of_the_memory_map_are_the_tensor_streams_a_batch_at_a_time(tmp_path):
    """shard_streams of the id file's memory map gives TokenStreams: each slice is the int64 tensor the flat
    tensor's streams give (every rank's share, both schemes' segments); the counts give encode_lines' frequency
    order check and <unk> rate."""
    lines = load_text_splits()["validation"]
    tok = build_word_level_tokenizer(lines)
    path = token_file(tok, split_sources()["validation"], tmp_path, progress=False)
    flat = encode_lines(tok, lines)
    for world, batch in ((1, 3), (2, 2)):
        for rank in range(world):
            mapped = shard_streams(data.token_array(path), batch, world, rank)
            reference = shard_streams(flat, batch, world, rank)
            assert isinstance(mapped, TokenStreams) and mapped.shape == reference.shape
            assert mapped[:, 5:17].dtype == torch.int64 and torch.equal(mapped[:, 5:17], reference[:, 5:17])
            for scheme in ("stateful", "window"):
                a, b = (make_segment(s, 40, 7, scheme, 8, 7) for s in (mapped, reference))
                assert torch.equal(a.input_ids, b.input_ids) and torch.equal(a.shift_labels, b.shift_labels)
    counts = data.token_counts(path)
    unk = tok.convert_tokens_to_ids("<unk>")
    assert unk_rate_of_counts(counts, unk) == pytest.approx(unk_rate(flat, unk))
    ranked = len(tok) // 2
    check_frequency_order(None, [ranked], len(tok), counts=counts)  # built from these lines: in order
    swapped = counts.copy()
    swapped[[1, ranked + 1]] = swapped[[ranked + 1, 1]]
    with pytest.raises(ValueError, match="frequency order"):
        check_frequency_order(None, [ranked], len(tok), counts=swapped)


def test_train_and_evaluate_convert_one_batch_at_a_time(tmp_path, monkeypatch):
    """examples/train.py and examples/evaluate.py read their streams from the token cache's memory map: no split is
    loaded whole (load_ids), and no read converts more than a batch of segments."""
    from conftest import evaluate_script

    sys.path.insert(0, str(ROOT / "examples"))
    import train

    lines = [" ".join(f"w{(i * 7 + j * 3) % 50}" for j in range(3 + i % 9)) for i in range(1500)]
    for split, part in (("train", lines), ("valid", lines[:200]), ("test", lines[200:400])):
        (tmp_path / f"{split}.txt").write_text("\n".join(part) + "\n")
    files = [f"--{s}_file={tmp_path / n}.txt" for s, n in (("train", "train"), ("validation", "valid"),
                                                           ("test", "test"))]  # fmt: skip
    files.append(f"--data_cache_dir={tmp_path / 'cache'}")

    def whole(*_):
        raise AssertionError("a split was loaded whole")

    sizes, streams = [], set()  # each read's size, and the streams read from (rows x length)
    read = TokenStreams.__getitem__

    def counted(self, index):
        ids = read(self, index)
        sizes.append(ids.numel())
        streams.add(self.numel())
        return ids

    ranges = []  # --preprocessing_num_workers reaches the cache: each file is cut into that many ranges
    cut = data._byte_ranges

    def recorded(source, workers):
        ranges.append(len(cut(source, workers)))
        return cut(source, workers)

    monkeypatch.setattr(data, "load_ids", whole)
    monkeypatch.setattr(TokenStreams, "__getitem__", counted)
    monkeypatch.setattr(data, "_byte_ranges", recorded)
    monkeypatch.setattr(data, "MIN_RANGE_BYTES", 256)
    out = tmp_path / "out"
    train.main([*files, "--config", str(ROOT / "examples/configs/tiny_test.json"), "--output_dir", str(out),
                "--max_train_steps", "4", "--eval_bptt", "50", "--per_device_eval_batch_size", "2",
                "--preprocessing_num_workers", "3"])  # fmt: skip
    assert ranges == [3, 3, 3]
    train_tokens = sum(len(line.split()) + 1 for line in lines)
    assert max(streams) > train_tokens - 2  # the training streams (2 of them, less the odd token) were among them
    assert len(sizes) > 8 and max(sizes) <= 2 * 50
    sizes.clear()
    results = evaluate_script()([str(out), *files, "--batch_size", "2", "--bptt", "50"])
    assert results["tokens"] > 1000 and len(sizes) > 8 and max(sizes) <= 2 * 50


@pytest.mark.parametrize("value", ["0", "-1", "two"])
def test_a_worker_count_below_one_is_one_error_line(value, capsys):
    sys.path.insert(0, str(ROOT / "examples"))
    import train

    with pytest.raises(SystemExit) as stop:
        train.parse_args(["--preprocessing_num_workers", value])
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and "--preprocessing_num_workers: must be a positive integer" in err[-1]
