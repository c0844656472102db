"""Bad data gets one clear error line (the file and the byte offset, not the datasets library's traceback), and the
built vocabulary can be capped for large corpora (--max_vocab_size, --min_frequency)."""

import json

import pytest
import torch
from conftest import evaluate_script, tiny_model
from test_train import corpus, data_args, train_module  # noqa: F401 (corpus: a fixture)

from modeling_pointer_sentinel.tokenization import build_word_level_tokenizer
from modeling_pointer_sentinel.training import check_frequency_order, encode_lines


def error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len([line for line in err if "error" in line.lower()]) == 1 and "error" in err[-1], err
    return err[-1]


LATIN1 = "the café is open\nsome more words\n".encode("latin-1")  # é (0xe9) at byte 7
BINARY = bytes(range(1, 128)) * 3 + b"\x80\x81"  # ASCII, then a stray continuation byte at 381


@pytest.mark.parametrize("data, offset", [(LATIN1, 7), (BINARY, 381)], ids=["latin-1", "binary"])
def test_train_py_names_a_file_that_is_not_utf8_and_the_byte(corpus, tmp_path, capsys, data, offset):  # noqa: F811
    bad = tmp_path / "bad.txt"
    bad.write_bytes(data)
    args = data_args(corpus)
    args[args.index("--train_file") + 1] = str(bad)
    with pytest.raises(SystemExit) as stop:
        train_module().main(args + ["--output_dir", str(tmp_path / "out"), "--num_threads", "1"])
    line = error_line(capsys)
    assert stop.value.code == 2 and f"{bad}: not utf-8 text near byte {offset} " in line, line


def test_evaluate_py_names_a_test_file_that_is_not_utf8_and_the_byte(corpus, tmp_path, capsys):  # noqa: F811
    tok = build_word_level_tokenizer((corpus / "train.txt").read_text().splitlines())
    tiny_model(vocab_size=len(tok)).save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    bad = tmp_path / "bad.txt"
    bad.write_bytes(LATIN1)
    with pytest.raises(SystemExit) as stop:
        evaluate_script()([str(tmp_path / "m"), "--test_file", str(bad)])
    line = error_line(capsys)  # refused with its command line, before the model loads (examples/cli.py)
    assert stop.value.code == 2 and f"--test_file {bad}: not UTF-8 text (byte 7: " in line, line


def test_vocabulary_caps_send_cut_words_to_unk_in_frequency_order():
    """Words beyond --max_vocab_size ids, or seen fewer than --min_frequency times, read as <unk>, which takes their
    count for its place: the ids stay in training-frequency order, as the adaptive softmax needs."""
    lines = ["a a a a b b b c d", "a b e f g h", "a c i j k l", "m n o p"]
    full = build_word_level_tokenizer(lines, text_rules="whitespace")
    for caps, size in [
        ({"max_vocab_size": 5}, 5),
        ({"min_frequency": 2}, 5),
        ({"min_frequency": 2, "max_vocab_size": 4}, 4),
    ]:
        tok = build_word_level_tokenizer(lines, text_rules="whitespace", **caps)
        vocab = tok.get_vocab()
        assert len(vocab) == size and {"<eos>", "<unk>"} <= set(vocab), (caps, vocab)
        ids = encode_lines(tok, lines)
        unk = vocab["<unk>"]
        cut = [w for w in full.get_vocab() if w not in vocab]
        assert (ids == unk).sum().item() == sum(line.split().count(w) for line in lines for w in cut), caps
        counts = torch.bincount(ids, minlength=len(vocab))
        assert all(counts[i] >= counts[i + 1] for i in range(len(vocab) - 1)), (caps, counts)
        check_frequency_order(ids, list(range(1, len(vocab))), len(vocab))
    assert sorted(build_word_level_tokenizer(lines, min_frequency=2, text_rules="whitespace").get_vocab()) == [
        "<eos>", "<unk>", "a", "b", "c"]  # fmt: skip
    with pytest.raises(ValueError, match="max_vocab_size must be >= 2"):
        build_word_level_tokenizer(lines, max_vocab_size=1)


def test_train_py_caps_the_built_vocabulary(corpus, tmp_path, capsys):  # noqa: F811
    """--max_vocab_size reaches the built tokenizer (and the model's vocabulary); with a saved tokenizer it is refused
    rather than silently unused."""
    train = train_module()
    out = tmp_path / "out"
    common = data_args(corpus) + ["--num_threads", "1", "--max_unk_rate", "1", "--num_train_epochs", "1"]
    train.main(common + ["--output_dir", str(out), "--max_vocab_size", "20", "--max_train_steps", "1"])
    assert json.loads((out / "config.json").read_text())["vocab_size"] == 20
    assert json.loads((out / "results.json").read_text())["unk_rate"]["train"] > 0.3  # 40 words, 18 kept
    with pytest.raises(SystemExit) as stop:
        train.main(common + ["--output_dir", str(tmp_path / "b"), "--tokenizer_name", str(out), "--min_frequency", "3"])
    assert stop.value.code == 2 and "--min_frequency caps a tokenizer built from the training split" in error_line(
        capsys
    )
