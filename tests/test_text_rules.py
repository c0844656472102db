"""Text rules: raw text read the way the corpus was written, corpus text read unchanged, natural text written back."""

import json
import lzma
from collections import Counter
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer
from transformers import AutoTokenizer, pipeline

from modeling_pointer_sentinel.tokenization import (
    build_word_level_tokenizer,
    corpus_line_text,
    detect_text_rules,
    open_vocabulary,
)
from modeling_pointer_sentinel.training import BUNDLED, encode_lines

ROOT = Path(__file__).resolve().parents[1]

RAW = "The company's shares rose 5% on Tuesday, analysts said."


def bundled(split: str) -> list[str]:
    return lzma.open(BUNDLED / f"wiki.{split}.tokens.xz", "rt").read().splitlines()


@pytest.fixture(scope="module")
def wikitext():
    return build_word_level_tokenizer(bundled("train"))


def tokens(tok, text: str) -> list[str]:
    return tok.convert_ids_to_tokens(tok(text)["input_ids"])


def same_ids_as_whitespace(tok, train: list[str], splits: dict[str, list[str]]):
    plain = build_word_level_tokenizer(train, text_rules="whitespace")
    for name, lines in splits.items():
        assert encode_lines(tok, lines).tolist() == encode_lines(plain, lines).tolist(), name


def test_wikitext_rules_read_the_bundled_corpus_unchanged(wikitext):
    """Every split of the bundled WikiText-2 keeps exactly the ids a whitespace split gives (the training data and the
    shipped models' ids), though the rules split punctuation and clitics off raw words."""
    assert wikitext.init_kwargs["text_rules"] == "wikitext"  # detected from the training data
    same_ids_as_whitespace(wikitext, bundled("train"), {s: bundled(s) for s in ("train", "valid", "test")})


def test_ptb_rules_read_ptb_unchanged(shared_data):
    splits = {s: (shared_data / "ptb" / f"ptb.{s}.txt").read_text().splitlines() for s in ("train", "valid", "test")}
    tok = build_word_level_tokenizer(splits["train"])
    assert tok.init_kwargs["text_rules"] == "ptb"
    same_ids_as_whitespace(tok, splits["train"], splits)


def test_raw_text_reads_as_wikitext_wrote_it(wikitext):
    assert tokens(wikitext, RAW) == ["The", "company", "'s", "shares", "rose", "5", "%", "on", "Tuesday", ",",
                                     "analysts", "said", "."]  # fmt: skip
    assert tokens(wikitext, "Du Fu's poems, 1,200 of them (3.5%) don't rhyme; the highest-selling O'Brien.") == [
        "Du", "Fu", "'s", "poems", ",", "1", "@,@", "200", "of", "them", "(", "3", "@.@", "5", "%", ")", "don", "'t",
        "rhyme", ";", "the", "highest", "@-@", "selling", "O", "'Brien", "."]  # fmt: skip
    # the vocabulary's own words with punctuation stay whole, and a kept word is no prefix of a longer one
    assert tokens(wikitext, "the U.S. and St. Louis, e.g. you'll") == ["the", "U.S.", "and", "St.", "Louis", ",",
                                                                        "e.g.", "you", "'ll"]  # fmt: skip


def test_the_rules_live_in_tokenizer_json_and_are_recorded(wikitext, tmp_path):
    """Any client of tokenizer.json (here the Rust tokenizer alone, no Python of this package) reads raw text the same
    way, and the saved config names the rule set."""
    wikitext.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "tokenizer_config.json").read_text())["text_rules"] == "wikitext"
    assert Tokenizer.from_file(str(tmp_path / "tokenizer.json")).encode(RAW).tokens == tokens(wikitext, RAW)
    again = AutoTokenizer.from_pretrained(tmp_path)
    assert again.init_kwargs["text_rules"] == "wikitext" and again(RAW)["input_ids"] == wikitext(RAW)["input_ids"]


def test_wikitext_decodes_to_natural_text(wikitext):
    text = "Du Fu 's poems , 1 @,@ 200 of them ( 3 @.@ 5 % ) , the highest @-@ selling .\n = = Reception = = \n"
    assert wikitext.decode(wikitext(text)["input_ids"]) == (
        " Du Fu's poems, 1,200 of them (3.5%), the highest-selling.\n== Reception ==\n"
    )
    assert wikitext.decode(wikitext("the players ' union")["input_ids"]) == " the players' union"
    # the same rules on a corpus line's words alone, without a tokenizer (examples/unseen_rate_study.py's raw text)
    assert corpus_line_text(text.split("\n")[0].split()) == "Du Fu's poems, 1,200 of them (3.5%), the highest-selling."
    with pytest.raises(ValueError, match="text_rules must be one of"):
        corpus_line_text(["a"], "wiki")


@pytest.mark.parametrize("rules", ["wikitext", "ptb"])
def test_a_prefix_of_the_ids_decodes_to_a_prefix_of_the_text(wikitext, rules):
    """Streaming and pipelines cut the decoded text at the prompt's decoded length: the joins may only take out the
    space before a token, never change text already written."""
    tok = wikitext if rules == "wikitext" else build_word_level_tokenizer(PTB_STYLE)
    lines = [" 1 @,@ 200 , 3 @.@ 5 and well @-@ known ( Fu 's ) ", *bundled("test")[:60]]
    ids = encode_lines(tok, lines if rules == "wikitext" else PTB_STYLE).tolist()
    whole = tok.decode(ids)
    assert all(whole.startswith(tok.decode(ids[:k])) for k in range(len(ids)))
    assert "@-@" not in whole and " ," not in whole and " ." not in whole


# Written for these tests in the style of Mikolov's PTB (no PTB text is bundled): lower case, N, no punctuation.
PTB_STYLE = ["mr. smith said the u.s. company 's shares rose N N to $ N billion",
             "they do n't know what s&p 's index did", "the N company officials were n't available"]  # fmt: skip


def test_ptb_rules_read_raw_news_text():
    tok = build_word_level_tokenizer(PTB_STYLE)
    assert tok.init_kwargs["text_rules"] == "ptb"
    assert tokens(tok, "Mr. Smith said the U.S. company's shares rose 5.5% to $1,200 billion.") == [
        "mr.",
        "smith",
        "said",
        "the",
        "u.s.",
        "company",
        "'s",
        "shares",
        "rose",
        "N",
        "N",
        "to",
        "$",
        "N",
        "billion",
    ]
    assert tokens(tok, "They don't know (what) S&P's index did!") == ["they", "do", "n't", "know", "what", "s&p", "'s",
                                                                      "index", "did"]  # fmt: skip
    ids = tok("the company 's shares rose N N to $ N billion")["input_ids"]
    assert tok.decode(ids) == " the company's shares rose N N to $N billion"
    assert tok(tok.decode(ids))["input_ids"] == ids  # $N reads as $ N again, not $ n
    assert tokens(tok, "the -5.5% shares") == ["the", "N", "N", "shares"]  # a minus sign is no part of a word


def test_the_rule_set_is_detected_from_the_training_words():
    assert detect_text_rules(Counter("the game @-@ based , 1 @,@ 200".split())) == "wikitext"
    assert detect_text_rules(Counter("the company 's N N shares".split())) == "ptb"
    assert detect_text_rules(Counter("The company said N".split())) == "whitespace"  # upper case: not PTB
    assert detect_text_rules(Counter("Hamlet, he said, was mad.".split())) == "wikitext"  # raw prose: split it
    assert build_word_level_tokenizer(["a b c"]).init_kwargs["text_rules"] == "whitespace"
    assert tokens(build_word_level_tokenizer(["a b, c."], text_rules="whitespace"), "a b, c.") == ["a", "b,", "c."]


def test_an_unknown_rule_set_is_refused():
    with pytest.raises(ValueError, match="text_rules must be one of"):
        build_word_level_tokenizer(["a b"], text_rules="moses")


def test_the_pipeline_writes_natural_text_without_unk():
    """The shipped WikiText-2 model through its pipeline(): raw prompt in, natural text out. The prompt holds <unk>
    twice, so the pointer has <unk> to copy: by default (generation_config.json) none is generated; asked for, it is."""
    folder = ROOT / "pretrained" / "wt2-pointer-sentinel-lstm-2x200"
    generate = pipeline("text-generation", model=str(folder), trust_remote_code=True, dtype=torch.float32)
    prompt = "\nThe company's shares rose 5% on Tuesday, <unk> said. The <unk> of"
    text = generate(prompt, max_new_tokens=40, do_sample=False)[0]["generated_text"]
    new = text.removeprefix(prompt)
    assert new != text and len(new.split()) > 5 and new.startswith((" ", ",", ".", "'")), text
    assert "<unk>" not in new and "@" not in new and " ," not in new and " ." not in new, new
    allowed = generate(prompt, max_new_tokens=40, do_sample=False, suppress_tokens=None)[0]["generated_text"]
    assert "<unk>" in allowed.removeprefix(prompt), allowed


# text -> the same text: raw text read by the rules, its words outside the vocabulary kept by the open vocabulary
ROUND_TRIPS = ["9:30 and 11:05", "-5.5 (-3 at noon), 3 - 2", "the Musée d'Orsay", "rock'n'roll", "a--b",
               "See https://www.example.com/path, or jane.doe@example.com.", 'He was a "breakout" in the city',
               "Zelenskyy met Macron in Kyiv on Monday. Later that day, Zelenskyy told reporters that"]  # fmt: skip


@pytest.mark.parametrize("text", ROUND_TRIPS)
def test_wikitext_rules_give_raw_text_back(wikitext, text):
    tok = open_vocabulary(wikitext)
    enc = tok(text)
    assert tok.decode(enc["input_ids"], oov_words=enc.oov_words[0]) == text


@pytest.mark.parametrize("text", ["d'Orsay", "rock'n'roll", "https://www.example.com/path", "jane.doe@example.com"])
def test_ptb_rules_give_raw_text_back_where_ptb_keeps_it(text):
    tok = open_vocabulary(build_word_level_tokenizer(PTB_STYLE))
    enc = tok(text)
    assert tok.decode(enc["input_ids"], oov_words=enc.oov_words[0]) == text
