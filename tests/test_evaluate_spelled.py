"""Scoring text with a spelling folder (`config.speller_size`): every word as the ids carry it, in bits per byte beside
the word perplexity, split by kind of word (vocabulary, copy, new). The figures are the model's own forward, in any
rows and chunks, and examples/evaluate.py reports them (streamed: tests/test_evaluate_streaming.py)."""

import json
import math

import pytest
import torch
from test_cli import run_script
from test_spelled_forward import L, spelling_pair

from modeling_pointer_sentinel.spelling import SpelledText, SpelledTotals, spelled_words, text_bits_per_byte
from modeling_pointer_sentinel.training import encode_lines

# "Kestrelwind" recurs inside the window (a copy), "Ambrecote" only after more than L words (new again)
TEXT = ("the Kestrelwind was sunk the Kestrelwind was saved by the crew .\n"
        "the Ambrecote was built . the ship of the line was sunk in the bay by the crew .\n"
        "a ship of the line was saved . the Ambrecote was sunk .\n")  # fmt: skip


def test_words_and_their_kinds_are_read_from_the_ids_alone(tmp_path):
    tok, m = spelling_pair(tmp_path)
    V = m.config.vocab_size
    ids = tok(TEXT, add_special_tokens=False).input_ids
    owner, kinds, spelled = spelled_words(ids, V, L)
    words = TEXT.split()  # the text's words, with "\n" read as a word of its own (<eos>)
    assert len(kinds) == len(words) + TEXT.count("\n")
    names = [(k, s) for k, s in zip(kinds, spelled, strict=True) if s]
    assert names == [("new", 11), ("copy", 11), ("new", 9), ("new", 9)]
    assert sorted(set(owner.tolist())) == list(range(len(kinds))) and owner.tolist() == sorted(owner.tolist())
    assert encode_lines(tok, TEXT.splitlines()).tolist() == ids  # the training and evaluation stream spells too
    with pytest.raises(ValueError, match="end inside a spelled word"):
        spelled_words(ids[:3], V, L)


def word_nats(model, ids: torch.Tensor, rows: int, bptt: int, byte_table: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """Each word's nats as `SpelledText.scores` gives them (NaN: a row's first word, not scored), and the figures."""
    text, totals = SpelledText(ids.numpy()[None], byte_table, len(byte_table), L, rows), SpelledTotals()
    nats = torch.full((text.words,), math.nan, dtype=torch.float64)
    for scores in text.scores(model, bptt):
        nats[scores.place] = scores.nats
        totals.add(scores)
    return nats, totals.figures()


@pytest.mark.parametrize("rows,bptt,text", [(1, 7, TEXT), (3, 5, TEXT), (2, 1000, TEXT), (2, 6, TEXT[4:])])
def test_each_words_nats_are_the_whole_forwards_in_any_rows_and_chunks(tmp_path, rows, bptt, text):
    """(The last text's first word is spelled: its bytes are targets, but a row's first word is not scored.)"""
    tok, m = spelling_pair(tmp_path)
    ids = torch.tensor(tok(text, add_special_tokens=False).input_ids)
    owner, kinds, spelled = spelled_words(ids.tolist(), m.config.vocab_size, L)
    nats, figures = word_nats(m.double(), ids, rows, bptt, torch.full((m.config.vocab_size,), 4))
    assert int(nats.isnan().sum()) == rows and math.isnan(nats[0])
    firsts = nats.isnan().nonzero()[:, 0].tolist() + [len(kinds)]
    for a, b in zip(firsts, firsts[1:], strict=False):  # each row is a forward of its own words
        span = (owner >= a) & (owner < b)
        row = ids[span][None]
        with torch.no_grad():
            whole = m(row, labels=row).target_log_probs[0, :-1]  # y_t for t = 1 ... (the last position has none)
        got = torch.zeros(b - a, dtype=torch.float64).index_add_(0, owner[span][1:] - a, -whole.double())
        torch.testing.assert_close(nats[a + 1 : b], got[1:], atol=1e-9, rtol=0)
    scored = ~nats.isnan()
    assert math.isclose(figures["bits_per_byte"] * figures["bytes"], nats[scored].sum().item() / math.log(2))
    word_bytes = torch.tensor([s + 1 if s else 4 for s in spelled])
    assert figures["bytes"] == word_bytes[scored].sum() and figures["words"] == len(kinds) - rows
    for kind in ("vocabulary", "copy", "new"):
        pick = scored & torch.tensor([k == kind for k in kinds])
        assert figures[kind]["words"] == pick.sum() and figures[kind]["bytes"] == word_bytes[pick].sum(), kind
    assert math.isclose(sum(figures[k]["bits_share"] for k in ("vocabulary", "copy", "new")), 1.0)


def test_evaluate_reports_bits_per_byte_by_kind_and_refuses_what_it_cannot_score(tmp_path):
    tok, m = spelling_pair(tmp_path)
    text = tmp_path / "text.txt"
    text.write_text(TEXT)
    out = tmp_path / "out.json"
    done = run_script("evaluate.py", tmp_path, "--test_file", text, "--batch_size", "1", "--output_json", out)
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    ids = torch.tensor(tok(TEXT, add_special_tokens=False).input_ids)
    with torch.no_grad():
        total = -m.double()(ids[None], labels=ids[None]).target_log_probs[0, :-1].sum().item()
    assert math.isclose(result["bits_per_byte"] * result["bytes"], total / math.log(2), rel_tol=1e-6)
    assert result["copy"]["words"] == 1 and result["new"]["words"] == 3 and "bits per byte" in done.stdout
    assert result["bytes"] == len(TEXT.encode()) - len("the ")  # every byte of the text but the unscored first word
    assert math.isclose(result["ppl"], math.exp(total / result["words"]), rel_tol=1e-6)
    for flag in (["--cache"], ["--unseen_as_unk"]):
        refused = run_script("evaluate.py", tmp_path, "--test_file", text, *flag)
        assert refused.returncode == 2 and "not on text that spells words" in refused.stderr, refused.stderr
        assert "Traceback" not in refused.stderr


@pytest.mark.parametrize("corpus_form", [False, True], ids=["spelled", "corpus form"])
def test_streams_shorter_than_the_window_are_noted(tmp_path, corpus_form):
    """A text read as streams shorter than the pointer's window (each without context, its first word unscored: a
    user's paragraph at the default --batch_size 10; here a short text as 20 streams) gets a note on stderr saying so
    and how to read it as one stream, on the spelled path and on the word model's; one stream gets none."""
    spelling_pair(tmp_path)
    text = tmp_path / "text.txt"
    text.write_text("the ship of the line was sunk in the bay by the crew .\n" * 4 if corpus_form else TEXT)
    short = run_script("evaluate.py", tmp_path, "--test_file", text, "--batch_size", "20")
    one = run_script("evaluate.py", tmp_path, "--test_file", text, "--batch_size", "1")
    assert short.returncode == one.returncode == 0, short.stderr + one.stderr
    assert "as 20 streams (--batch_size) of about" in short.stderr, short.stderr
    assert "fewer than the pointer's window of 5" in short.stderr, short.stderr
    assert "--batch_size 1 reads the text as one stream" in short.stderr and "note:" not in one.stderr


def test_text_in_the_corpus_form_takes_the_word_level_analyses_and_scores_as_spelled(tmp_path):
    """On text in the corpus's form (no word spelled) a spelling folder is scored by its word model alone, fast, and
    the README's --cache / --dynamic commands run: the same perplexity and bits per byte as the spelled scoring."""
    spelling_pair(tmp_path)
    text = tmp_path / "corpus.txt"
    text.write_text("the ship of the line was sunk in the bay by the crew .\n" * 3 + "a ship was saved .\n")
    out, cached = tmp_path / "spelled.json", tmp_path / "cache.json"
    common = ("--test_file", text, "--batch_size", "1")
    done = run_script("evaluate.py", tmp_path, *common, "--output_json", out)
    assert done.returncode == 0, done.stderr
    done = run_script("evaluate.py", tmp_path, *common, "--cache", "--output_json", cached)
    assert done.returncode == 0, done.stderr
    fast, word_level = json.loads(out.read_text()), json.loads(cached.read_text())
    assert "cache" in json.dumps(word_level) and math.isclose(fast["ppl"], word_level["ppl"], rel_tol=1e-9)
    tok, m = spelling_pair(tmp_path)  # the spelled scoring of the same text, every word after the first
    ids = encode_lines(tok, text.read_text().splitlines())
    figures = text_bits_per_byte(m.double(), tok, ids, batch_size=1, bptt=1000)
    assert math.isclose(fast["ppl"], figures["word_perplexity"], rel_tol=1e-5), (fast["ppl"], figures)
    assert (
        math.isclose(fast["bits_per_byte"], figures["bits_per_byte"], rel_tol=1e-5)
        and fast["bytes"] == figures["bytes"]
    )
