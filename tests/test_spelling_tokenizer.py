"""Spell mode of the open-vocabulary tokenizer (`spell_unseen=True`, tokenization_pointer_sentinel.py): the ids carry
the text. Every occurrence of a word the vocabulary lacks is its UTF-8 bytes (`<0x00>` … `<0xFF>` at ids V … V+255)
closed by `</w>` (V+256), a long word in pieces joined by `<+w>` (V+257); decoding is a function of the ids alone."""

import json
import lzma
import os
import subprocess
import sys
import threading

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_open_vocab_tokenizer import TODAY, WT2, digest
from test_text_rules import ROUND_TRIPS
from transformers import AutoTokenizer, TextIteratorStreamer, TextStreamer
from transformers.generation.stopping_criteria import StopStringCriteria

from modeling_pointer_sentinel import PointerSentinelTokenizer
from modeling_pointer_sentinel.tokenization import build_word_level_tokenizer, open_vocabulary, spelling_vocabulary
from modeling_pointer_sentinel.tokenization_pointer_sentinel import MAX_SPELLED_BYTES
from modeling_pointer_sentinel.training import BUNDLED

# Made up for these tests, in WikiText's form (`<unk>`, `@-@`, spaced punctuation) and as plain words.
WIKI = [" = The River = ", " The river is long and the town is old . The <unk> of the river , 1 @,@ 200 km , is",
        " well @-@ known , 3 @.@ 5 km . He said \" yes \" and the town 's people met the river 's <unk> .",
        " The cat sat on the mat and the dog saw the cat ."]  # fmt: skip
PLAIN = ["the cat sat on the mat <unk>", "a dog saw the cat"]
NAMES = ["Zorbane", "Quarrington", "Esselbrook"]
TEMPLATE = "The {} River is long. The"
BAD = ("<oov-", "<unk>", "\ufffd")


@pytest.fixture(scope="module")
def wiki():
    return spelling_vocabulary(build_word_level_tokenizer(WIKI, text_rules="wikitext"))


@pytest.fixture(scope="module")
def plain():
    return spelling_vocabulary(build_word_level_tokenizer(PLAIN, text_rules="whitespace"))


def fresh() -> PointerSentinelTokenizer:
    return spelling_vocabulary(build_word_level_tokenizer(PLAIN, text_rules="whitespace"))


def spelled(tok, word: str) -> list[int]:
    V = tok.word_vocab_size
    return [V + b for b in word.encode()] + [V + 256]


def round_trip(tok, text: str) -> str:
    return tok.decode(tok(text)["input_ids"])


# ---- the id layout ----


def test_the_ids_after_the_words_are_the_bytes_then_the_two_markers(plain):
    V = plain.word_vocab_size
    assert plain.vocab_size == V and len(plain) == V + 258 and len(plain.get_vocab()) == V + 258
    assert plain.convert_ids_to_tokens([V, V + 0x5A, V + 255, V + 256, V + 257]) == [
        "<0x00>", "<0x5A>", "<0xFF>", "</w>", "<+w>"]  # fmt: skip
    assert all(plain.get_vocab()[f"<0x{b:02X}>"] == V + b for b in range(256))
    assert not any(t.special for i, t in plain.added_tokens_decoder.items() if i >= V)
    assert plain("Zorbane")["input_ids"] == [V + b for b in (0x5A, 0x6F, 0x72, 0x62, 0x61, 0x6E, 0x65)] + [V + 256]


def test_every_occurrence_is_spelled_and_a_literal_unk_keeps_its_id(plain):
    ids = plain("the Zorbane cat Zorbane <unk>")["input_ids"]
    word = plain.convert_tokens_to_ids
    assert ids == [word("the"), *spelled(plain, "Zorbane"), word("cat"), *spelled(plain, "Zorbane"), word("<unk>")]
    assert plain.decode(ids) == "the Zorbane cat Zorbane <unk>"


def test_tokenize_gives_the_byte_tokens_names(plain):
    assert plain.tokenize("the Zoé") == ["the", "<0x5A>", "<0x6F>", "<0xC3>", "<0xA9>", "</w>"]
    assert plain.convert_tokens_to_ids(plain.tokenize("the Zoé cat")) == plain("the Zoé cat")["input_ids"]


def test_no_registry_and_no_table(plain):
    """Nothing is remembered: no `encoded_rows`, no `oov_words` on the encoding; a table passed to decode, or
    placeholders asked for with spelling, are refused."""
    enc = plain("the Zorbane cat")
    assert not hasattr(plain, "encoded_rows") and not hasattr(enc, "oov_words")
    with pytest.raises(ValueError, match="oov_words"):
        plain.decode(enc["input_ids"], oov_words=[])
    with pytest.raises(ValueError, match="oov_slots"):
        PointerSentinelTokenizer(tokenizer_object=plain.backend_tokenizer, spell_unseen=True, oov_slots=8)


# ---- text back ----

# Any text of words between single spaces, spelling tokens' names in the text included (`x</w>y`): the whitespace
# rules give it back exactly. Not generated: control characters and whitespace other than the space (the rules write
# each line break as `<eos>` and any other space as one space), and `<eos>`, which the text reads as its line break.
WORD = st.one_of(
    st.text(st.characters(blacklist_categories=("Cc", "Cs", "Zs", "Zl", "Zp")), min_size=1).filter(
        lambda w: not any(c.isspace() for c in w) and "<eos>" not in w
    ),
    st.sampled_from(["</w>", "<0x41>", "x<+w>y", "<unk>", "a<unk>b", "cat", "Zorbane", "東京", "👍🏽", "é" * 40]),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(WORD, max_size=12))
def test_whitespace_rules_give_any_text_back(plain, words):
    text = " ".join(words)
    assert round_trip(plain, text) == text


# WikiText's rules give back words of letters and digits between single spaces and line breaks (no punctuation: its
# rules split it off and join it by their own conventions, test_text_rules.py).
LETTERS = st.text(st.characters(whitelist_categories=("Lu", "Ll", "Lt", "Lm", "Lo", "Nd")), min_size=1)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(LETTERS, max_size=6), max_size=4))
def test_wikitext_rules_give_words_and_lines_back(wiki, lines):
    text = "\n".join(" ".join(line) for line in lines)
    assert round_trip(wiki, text) == text


@pytest.mark.parametrize("text", ROUND_TRIPS)
def test_wikitext_rules_give_raw_text_back(wiki, text):
    assert round_trip(wiki, text) == text


def test_a_spelling_tokens_name_in_a_word_is_spelled_with_its_word(plain):
    """The backend cuts an added token's name out of its word (`x</w>y` -> `x`, `</w>`, `y`): the whole stretch is
    spelled, so it reads back as written and not as three words."""
    assert plain("x</w>y")["input_ids"] == spelled(plain, "x</w>y")
    assert plain("the cat</w> <0x41>")["input_ids"][1:] == spelled(plain, "cat</w>") + spelled(plain, "<0x41>")


def test_a_200_byte_word_is_spelled_in_pieces(plain):
    word = "z" + "é" * 70 + "z" * 59  # 200 bytes; byte 64 is the second of an é: the first piece ends before it
    ids = plain(f"the {word} cat")["input_ids"]
    V, names = plain.word_vocab_size, plain.convert_ids_to_tokens(ids)
    assert names.count("<+w>") == 3 and names.count("</w>") == 1 and names[-2] == "</w>"
    pieces, piece = [], bytearray()
    for i in ids[1:-1]:
        if i < V + 256:
            piece.append(i - V)
        else:
            pieces.append(bytes(piece))
            piece.clear()
    assert all(len(p) <= MAX_SPELLED_BYTES for p in pieces) and b"".join(pieces) == word.encode()
    assert all(p.decode("utf-8") for p in pieces)  # cut between characters: each piece valid on its own
    assert plain.decode(ids) == f"the {word} cat"


def test_invalid_bytes_decode_as_replacement_characters(plain):
    V, word = plain.word_vocab_size, plain.convert_tokens_to_ids("the")
    assert plain.decode([word, V + 0xFF, V + 0xC3, V + 0x28, V + 256]) == "the \ufffd\ufffd("
    assert plain.decode([V + 0xC3, V + 256, word]) == "\ufffd the"  # a character cut short by its word's end
    assert plain.decode([V + 0xC3, V + 257]) == ""  # a run the ids end inside: the é may still come
    assert plain.decode([V + 256, V + 257, V + 256]) == ""


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 267), max_size=30))
def test_any_ids_decode(plain, ids):
    assert len(plain) == 268  # the ids drawn: all of them
    assert isinstance(plain.decode(ids), str) and isinstance(plain.decode(ids, skip_special_tokens=True), str)


def test_skip_special_tokens_drops_the_line_break_but_never_the_spelling(plain):
    V, eos = plain.word_vocab_size, plain.eos_token_id
    ids = [eos, eos, *plain("Zorbane cat")["input_ids"]]
    assert plain.decode(ids, skip_special_tokens=True) == "Zorbane cat"
    assert plain.convert_ids_to_tokens(ids, skip_special_tokens=True)[-2:] == ["</w>", "cat"]
    # a dropped line break inside a run still ends it: two words, as the line break kept them
    zor, bane = [V + b for b in b"Zor"], [V + b for b in b"bane"]
    assert plain.decode([*zor, eos, *bane, V + 256], skip_special_tokens=True) == "Zor bane"
    assert plain.decode([*zor, eos, *bane, V + 256]) == "Zor\n bane"


# ---- decoding is a function of the ids alone ----


def test_prompts_differing_only_in_a_name_each_decode_their_own(wiki):
    """Three prompts encoded first, then each decoded: the name its ids spell, none of another's."""
    encoded = [wiki(TEMPLATE.format(name))["input_ids"] for name in NAMES]
    for name, ids in zip(NAMES, encoded, strict=True):
        text = wiki.decode(ids)
        assert text == TEMPLATE.format(name) and not any(b in text for b in BAD)
        assert not any(other in text for other in NAMES if other != name)


def test_ids_decode_in_a_new_process(wiki, tmp_path):
    """A fresh interpreter loads the saved folder by remote code (this package blocked) and decodes the ids alone."""
    wiki.save_pretrained(tmp_path)
    texts = [TEMPLATE.format(name) for name in NAMES] + ['He met "Zoé" in 東京.']
    ids = [wiki(t)["input_ids"] for t in texts]
    code = """
import json, sys

class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "modeling_pointer_sentinel":
            raise ImportError("blocked: " + name)

sys.meta_path.insert(0, Blocked())
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1], trust_remote_code=True)
print(json.dumps(tok.batch_decode(json.loads(sys.argv[2]))))
"""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path), json.dumps(ids)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, stdin=subprocess.DEVNULL)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == texts


def test_a_slice_of_the_ids_decodes_on_its_own(wiki):
    prompt, new = TEMPLATE.format("Zorbane"), ' Zoé met the "Quarrington" river.'
    ids = wiki(prompt + new)["input_ids"]
    n = len(wiki(prompt)["input_ids"])
    assert wiki.decode(ids[n:]) == new.lstrip() and wiki.decode(ids[:n]) == prompt
    assert wiki.decode(ids[n : n + 3]) == "Zo"  # a word cut short: what its bytes spell so far, the é still to come
    whole = wiki.decode(ids)  # any prefix, cut inside a word or inside the é, decodes to a prefix of the text
    assert all(whole.startswith(wiki.decode(ids[:k])) and "\ufffd" not in wiki.decode(ids[:k]) for k in range(len(ids)))


def test_batch_decode_of_a_left_padded_batch(wiki):
    prompts = [TEMPLATE.format("Zorbane"), "Quarrington", "The Esselbrook River is long. The town is old. The"]
    enc = wiki(prompts, padding=True, return_tensors="pt")
    assert enc["attention_mask"][1, 0] == 0 and enc["input_ids"][1, 0] == wiki.pad_token_id  # left padding
    assert wiki.batch_decode(enc["input_ids"], skip_special_tokens=True) == prompts  # padding never shows as text
    pads = (enc["attention_mask"] == 0).sum(1).tolist()
    kept = wiki.batch_decode(enc["input_ids"])  # kept, the pad tokens are what they are: <eos>, the line break
    assert kept == ["\n" * k + p for k, p in zip(pads, prompts, strict=True)]


def test_two_threads_encoding_and_decoding_see_their_own_text(wiki):
    texts, failures = [TEMPLATE.format("Zorbane"), 'He met "Quarrington" in 東京.'], []

    def run(text):
        for _ in range(200):
            got = wiki.decode(wiki(text)["input_ids"])
            if got != text:
                failures.append(got)

    threads = [threading.Thread(target=run, args=(t,)) for t in texts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures


# ---- the tokenizer's other parts ----


def test_corpus_form_text_keeps_the_word_level_ids(wiki):
    word_level = build_word_level_tokenizer(WIKI, text_rules="wikitext")
    text = "\n".join(WIKI) + "\n The <unk> river 's town , 1 @,@ 200 <unk> @-@ known \n"
    assert wiki(text)["input_ids"] == word_level(text)["input_ids"]
    assert wiki.unk_token_id in wiki(text)["input_ids"]


def test_the_shipped_vocabulary_spells_and_keeps_its_corpus_ids():
    """The WikiText-2 folder's tokenizer converted: its 33,278 words keep their ids (the validation split gives the
    ids every shipped perplexity was measured on), its placeholders go, the bytes follow; the folder's own tokenizer
    is left as it was."""
    shipped = open_vocabulary(AutoTokenizer.from_pretrained(WT2))  # the folder's words read with placeholders
    tok = spelling_vocabulary(shipped)
    V = tok.word_vocab_size
    assert V == 33278 and len(tok) == V + 258 and not any(t.startswith("<oov-") for t in tok.get_vocab())
    assert len(shipped) == V + 256 and shipped.oov_slots == 256  # unchanged
    assert tok.backend_tokenizer.to_str() == AutoTokenizer.from_pretrained(WT2).backend_tokenizer.to_str()  # as shipped
    text = lzma.open(BUNDLED / "wiki.valid.tokens.xz", "rt", newline="").read()
    assert digest(tok(text)["input_ids"]) == TODAY["wt2"]["valid"]
    news = "Zelenskyy met Macron in Kyiv on Monday. Later that day, Zelenskyy told reporters that"
    assert round_trip(tok, news) == news and tok(news)["input_ids"][:8] == spelled(tok, "Zelenskyy")[:8]


def test_added_tokens_come_after_the_spelling(tmp_path):
    tok = fresh()
    V = tok.word_vocab_size
    assert tok.add_tokens(["<speaker>"]) == 1 and tok.convert_tokens_to_ids("<speaker>") == V + 258
    assert len(tok) == V + 259
    ids = tok("<speaker> Zorbane sat")["input_ids"]
    assert ids == [V + 258, *spelled(tok, "Zorbane"), tok.convert_tokens_to_ids("sat")]
    assert tok.decode(ids) == "<speaker> Zorbane sat" == tok.decode(ids, skip_special_tokens=True)


def test_saved_and_loaded_it_is_the_same_tokenizer(plain, tmp_path):
    plain.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert config["spell_unseen"] is True and "oov_slots" not in config
    again = AutoTokenizer.from_pretrained(tmp_path)
    assert type(again) is PointerSentinelTokenizer and again.spell_unseen and len(again) == len(plain)
    text = "the Zorbane cat\nsat 東京 x</w>y"
    assert again(text)["input_ids"] == plain(text)["input_ids"] and round_trip(again, text) == round_trip(plain, text)


def test_truncation_counts_spelled_ids(plain):
    ids = plain("the Zorbane cat")["input_ids"]
    assert plain("the Zorbane cat", truncation=True, max_length=4)["input_ids"] == ids[:4]
    plain.truncation_side = "left"
    try:
        assert plain("the Zorbane cat", truncation=True, max_length=4)["input_ids"] == ids[-4:]
    finally:
        plain.truncation_side = "right"
    windows = plain("the Zorbane cat", truncation=True, max_length=6, stride=2, return_overflowing_tokens=True)
    assert windows["input_ids"] == [ids[0:6], ids[4:10]] and windows["overflow_to_sample_mapping"] == [0, 0]


def test_padding_tensors_and_offsets(plain):
    texts = ["the Zoé", "cat"]
    enc = plain(texts, padding="max_length", max_length=7, return_tensors="np", return_offsets_mapping=True)
    zoe = plain("the Zoé")["input_ids"]
    assert enc["input_ids"].shape == (2, 7) and enc["input_ids"][0].tolist() == [plain.pad_token_id] + zoe
    assert enc["attention_mask"][1].tolist() == [0] * 6 + [1]
    assert enc["offset_mapping"][0].tolist() == [[0, 0], [0, 3]] + [[4, 7]] * 5  # each byte: its word's offsets
    one = plain("the Zoé", return_tensors="pt")
    assert one["input_ids"].shape == (1, 6) and plain("the Zoé")["input_ids"] == zoe  # one text: a batch of one


def test_pairs_and_words_given_split(plain):
    V = plain.word_vocab_size
    pair = plain("the Zoé", "cat Xu", return_token_type_ids=True)
    assert pair["input_ids"] == plain("the Zoé")["input_ids"] + plain("cat Xu")["input_ids"]
    assert pair["token_type_ids"] == [0] * 6 + [1] * 4
    cut = plain("the Zoé", "cat Xu", truncation="only_second", max_length=8)["input_ids"]
    assert cut == plain("the Zoé")["input_ids"] + plain.convert_tokens_to_ids(["cat"]) + [V + ord("X")]
    split = plain([["the", "Zoé"], ["Xu"]], is_split_into_words=True)
    assert split["input_ids"] == [plain("the Zoé")["input_ids"], spelled(plain, "Xu")]


# ---- generate's helpers ----


def test_stop_strings_stop_on_a_spelled_words_bytes(plain):
    """StopStringCriteria reads each byte token as its byte (the decoder's ByteFallback step): "Zor" stops on the byte
    that completes it inside a spelled word, and words still stop as text ("cat sat")."""
    stop = StopStringCriteria(plain, ["Zor", "cat sat"])
    done = lambda ids: bool(stop(torch.tensor([ids]), None)[0])  # noqa: E731
    ids = plain("the cat Zorbane")["input_ids"]
    assert [done(ids[:k]) for k in range(1, len(ids) + 1)] == [False, False, False, False, True] + [False] * 5
    assert done(plain("the cat sat")["input_ids"]) and not done(plain("the Zoo")["input_ids"])


class Captured(TextStreamer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.chunks = []

    def on_finalized_text(self, text: str, stream_end: bool = False):
        self.chunks.append(text)


def stream(streamer, tok, prompt: str, new: str) -> list[int]:
    """Feed the streamer as generate does: the prompt's ids, then each new id (as a tensor), then the end."""
    streamer.put(tok(prompt, return_tensors="pt")["input_ids"])
    ids = tok(new)["input_ids"]
    for i in ids:
        streamer.put(torch.tensor([i]))
    streamer.end()
    return ids


def test_text_streamer_writes_spelled_words(wiki):
    new = "Zoé met Macron in 東京 and the river.\nThe cat"
    streamer = Captured(wiki, skip_prompt=True)
    ids = stream(streamer, wiki, TEMPLATE.format("Zorbane"), new)
    assert "".join(streamer.chunks) == wiki.decode(ids) == new
    assert not any("\ufffd" in c for c in streamer.chunks) and "Zorbane" not in "".join(streamer.chunks)


def test_text_iterator_streamer_writes_spelled_words(plain):
    new = "Zoé met 👍🏽 and Ünal sat"
    streamer = TextIteratorStreamer(plain, skip_prompt=True)
    ids = stream(streamer, plain, "the Zorbane cat", new)
    chunks = list(streamer)
    assert "".join(chunks) == plain.decode(ids) == new and not any("\ufffd" in c for c in chunks)
