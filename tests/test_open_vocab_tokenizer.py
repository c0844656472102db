"""The open-vocabulary tokenizer and the text-generation pipeline of the shipped folders. The folders spell a word
their vocabulary lacks (test_spelling_tokenizer.py, test_idioms.py); read as placeholders (`open_vocabulary`, what a
run trained without a speller saves) the same words keep their identity (a placeholder id V + k and the row's table of
surface forms) and decoding writes them back. Either way text in corpus form keeps exactly its ids, and the pipeline
keeps each prompt's words."""

import hashlib
import json
import logging
import lzma
import os
import subprocess
import sys

import pytest
import torch
from conftest import ROOT
from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline
from transformers.generation.stopping_criteria import StoppingCriteriaList, StopStringCriteria

from modeling_pointer_sentinel import PointerSentinelTokenizer
from modeling_pointer_sentinel.pipeline_pointer_sentinel import CUSTOM_PIPELINES, PointerSentinelTextGenerationPipeline
from modeling_pointer_sentinel.spelling import without_speller
from modeling_pointer_sentinel.tokenization import add_text_rules, build_word_level_tokenizer, open_vocabulary
from modeling_pointer_sentinel.training import BUNDLED, encode_lines

PRETRAINED = ROOT / "pretrained"
WT2, PTB = PRETRAINED / "wt2-pointer-sentinel-lstm-2x200", PRETRAINED / "ptb-pointer-sentinel-lstm-2x200"
NEWS = "Zelenskyy met Macron in Kyiv on Monday. Later that day, Zelenskyy told reporters that"


@pytest.fixture(scope="module")
def wt2():
    return open_vocabulary(AutoTokenizer.from_pretrained(WT2))  # the shipped words, unseen ones as placeholders


@pytest.fixture(scope="module")
def ptb():
    return open_vocabulary(AutoTokenizer.from_pretrained(PTB))


@pytest.fixture(scope="module")
def wt2_model():
    return without_speller(AutoModelForCausalLM.from_pretrained(WT2, dtype=torch.float32).eval())


def round_trip(tok, text: str) -> str:
    enc = tok(text)
    return tok.decode(enc["input_ids"], oov_words=enc.oov_words[0])


# ---- corpus form: today's ids ----

# sha256 (first 16 hex digits) of json.dumps(ids) and the token count of each split, through the shipped folders'
# closed-vocabulary tokenizers, recorded before the open vocabulary: encode_lines (the data code) and tokenizer(text of
# the file) (a client) gave the same ids. Every shipped perplexity was measured on these ids.
TODAY = {
    "wt2": {"train": ("036ff2a061b56a90", 2088628), "valid": ("27a10a1dbaef63b9", 217646),
            "test": ("c946fe671b325a3a", 245569)},
    "ptb": {"train": ("502b34712175985f", 929589), "valid": ("f7fbd717d6362d72", 73760),
            "test": ("9b7209e98f70e678", 82430)},
}  # fmt: skip


def digest(ids) -> tuple[str, int]:
    ids = [int(i) for i in ids]
    return hashlib.sha256(json.dumps(ids).encode()).hexdigest()[:16], len(ids)


def corpus(dataset: str, split: str) -> str | None:
    if dataset == "wt2":
        return lzma.open(BUNDLED / f"wiki.{split}.tokens.xz", "rt", newline="").read()
    path = ROOT.parent / "shared" / "data" / "ptb" / f"ptb.{split}.txt"
    return path.read_text() if path.is_file() else None


@pytest.mark.parametrize("dataset", ["wt2", "ptb"])
def test_corpus_text_keeps_todays_ids(dataset):
    """The data code gives exactly the ids recorded before the open vocabulary on every split, and a client's
    tokenizer(text) on the evaluation splits (the training split's 2M words once suffice: CI's time); the plain and
    pointer folders of a dataset ship the same tokenizer."""
    folder = {"wt2": WT2, "ptb": PTB}[dataset]
    twin = PRETRAINED / folder.name.replace("pointer-sentinel-lstm", "lstm")
    assert (folder / "tokenizer.json").read_bytes() == (twin / "tokenizer.json").read_bytes()
    tok = AutoTokenizer.from_pretrained(folder)
    assert isinstance(tok, PointerSentinelTokenizer) and tok.spell_unseen
    for split, want in TODAY[dataset].items():
        text = corpus(dataset, split)
        if text is None:
            pytest.skip("PTB is not beside this checkout")
        assert digest(encode_lines(tok, text.splitlines())) == want, split
        if split == "train":
            continue
        enc = tok(text)
        assert digest(enc["input_ids"]) == want, split  # every word of the corpus is in its vocabulary: none spelled


FOLDERS = sorted(f for f in PRETRAINED.iterdir() if (f / "config.json").is_file())


@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
def test_shipped_tokenizer_holds_this_packages_text_rules(folder):
    """tokenizer.json's normalizer, pre-tokenizer and decoder are the ones tokenization.py builds now (after a change
    of the rules, re-export the tokenizer files: examples/export_pretrained.py)."""
    tok = AutoTokenizer.from_pretrained(folder)
    shipped = json.loads(tok.backend_tokenizer.to_str())
    if tok.spell_unseen:  # spell mode closes the rules' decoder with ByteFallback (the spelled bytes)
        assert shipped["decoder"]["decoders"][-1] == {"type": "ByteFallback"}
        shipped["decoder"] = shipped["decoder"]["decoders"][0]
    add_text_rules(tok, tok.init_kwargs["text_rules"])
    assert json.loads(tok.backend_tokenizer.to_str()) == shipped


def test_literal_unk_keeps_its_id_and_placeholders_follow_the_words(wt2):
    V = wt2.word_vocab_size
    assert (wt2.vocab_size, len(wt2)) == (V, V + 256) and V == 33278
    assert wt2.convert_ids_to_tokens([V, V + 255]) == ["<oov-0>", "<oov-255>"]
    assert wt2.unk_token == "<unk>" and wt2.unk_token_id == wt2.backend_tokenizer.token_to_id("<unk>")
    enc = wt2("the <unk> of Zelenskyy")
    assert enc["input_ids"] == [wt2.convert_tokens_to_ids(w) for w in ("the", "<unk>", "of")] + [V]
    assert enc.oov_words == [["Zelenskyy"]]
    # a literal placeholder in the text is a word like any other, not slot 3 of the row
    enc = wt2("<oov-3> and Kyiv")
    assert enc.oov_words == [["<oov-3>", "Kyiv"]] and round_trip(wt2, "<oov-3> and Kyiv") == "<oov-3> and Kyiv"


# ---- the table: per row, first distinct word slot 0, a repeat its slot ----


def test_news_sentence_keeps_every_word(wt2):
    enc = wt2(NEWS)
    V = wt2.word_vocab_size
    assert enc.oov_words == [["Zelenskyy", "Macron", "Kyiv"]]
    ids = enc["input_ids"]
    assert [ids[0], ids[2], ids[4], ids[12]] == [V, V + 1, V + 2, V]  # the repeat reads its first slot
    assert wt2.unk_token_id not in ids
    assert wt2.decode(ids, oov_words=enc.oov_words[0]) == NEWS
    assert wt2.decode(ids, oov_words=enc.oov_words) == NEWS  # a one-row table list is that row's table
    # without a table the tokenizer finds the words it encoded (test_idioms.py); an empty table writes the tokens
    assert wt2.decode(ids) == NEWS
    assert wt2.decode(ids, oov_words=[]).startswith("<oov-0> met <oov-1> in <oov-2> on Monday.")


def test_case_is_kept_as_written_and_each_spelling_is_a_word(ptb):
    enc = ptb("Kyiv and KYIV and Kyiv")
    assert enc.oov_words == [["Kyiv", "KYIV"]]
    assert ptb.decode(enc["input_ids"], oov_words=enc.oov_words[0]) == "Kyiv and KYIV and Kyiv"


def test_a_batch_keeps_one_table_per_row(wt2):
    rows = ["Kyiv is large", "Macron met Zelenskyy in Kyiv", "the game", "Zelenskyy"]
    enc = wt2(rows, padding=True, return_tensors="pt")
    assert set(enc) == {"input_ids", "attention_mask"}  # model(**enc) and generate(**enc) get no table
    assert enc.oov_words == [["Kyiv"], ["Macron", "Zelenskyy", "Kyiv"], [], ["Zelenskyy"]]
    V = wt2.word_vocab_size
    assert enc["input_ids"][1, -1] == V + 2 and enc["input_ids"][0, -3] == V  # left padding: words at the end
    assert wt2.batch_decode(enc["input_ids"], oov_words=enc.oov_words, skip_special_tokens=True) == rows
    assert wt2.decode(enc["input_ids"].tolist(), oov_words=enc.oov_words, skip_special_tokens=True) == rows
    with pytest.raises(ValueError, match="3 tables for 4 rows"):
        wt2.batch_decode(enc["input_ids"], oov_words=enc.oov_words[:3])
    lists = wt2(rows)
    assert lists["input_ids"][3] == [V] and lists.oov_words == enc.oov_words


def test_model_takes_the_encoding_as_it_is(wt2, wt2_model):
    enc = wt2(["the game was", "released in"], padding=True, return_tensors="pt")
    with torch.no_grad():
        out = wt2_model(**enc)
    assert out.logits.shape[:2] == enc["input_ids"].shape


def test_more_words_than_slots_read_as_unk_with_one_warning(caplog):
    tok = open_vocabulary(build_word_level_tokenizer(["a b c <unk>", "b c a"]), oov_slots=2)
    V = tok.word_vocab_size
    with caplog.at_level(logging.WARNING):
        enc = tok("x y z x w")
    assert enc["input_ids"] == [V, V + 1, tok.unk_token_id, V, tok.unk_token_id]
    assert enc.oov_words == [["x", "y"]]
    assert sum("oov_slots=2" in r.getMessage() for r in caplog.records) == 1
    assert tok.decode(enc["input_ids"], oov_words=enc.oov_words[0]) == "x y <unk> x <unk>"


def test_saved_and_loaded_it_is_the_same_tokenizer(tmp_path):
    tok = open_vocabulary(build_word_level_tokenizer(["a b c <unk>", "b c a"]), oov_slots=3)
    tok.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert config["auto_map"]["AutoTokenizer"][0] == "tokenization_pointer_sentinel.PointerSentinelTokenizer"
    assert config["oov_slots"] == 3 and config["unk_token"] == "<unk>"
    assert (tmp_path / "tokenization_pointer_sentinel.py").read_text() == (
        ROOT / "modeling_pointer_sentinel" / "tokenization_pointer_sentinel.py"
    ).read_text()
    again = AutoTokenizer.from_pretrained(tmp_path)
    assert type(again) is PointerSentinelTokenizer and len(again) == len(tok) == tok.word_vocab_size + 3
    assert again("a q b\nc")["input_ids"] == tok("a q b\nc")["input_ids"]


# ---- decoding: natural text back ----

# text -> the same text, through the shipped WikiText-2 tokenizer (its words the vocabulary lacks as placeholders)
WIKITEXT_ROUND_TRIPS = [
    "9:30",
    "The train left at 9:30 and arrived at 11:05.",
    "-5.5",
    "It fell to -5.5 degrees (-3 at noon), a score of 3 - 2.",
    "d'Orsay",
    "the Musée d'Orsay",
    "rock'n'roll",
    "a--b",
    "https://www.example.com/path",
    "See https://www.example.com/path, or write to jane.doe@example.com.",
    'He was a "breakout" in the city',
    'He said "yes" and "no".',
    NEWS,
    "The company's shares rose 5% on Tuesday, analysts said.",
    "Du Fu's poems, 1,200 of them (3.5%), the highest-selling.\nNew line.",
]


@pytest.mark.parametrize("text", WIKITEXT_ROUND_TRIPS)
def test_wikitext_text_comes_back_as_written(wt2, text):
    assert round_trip(wt2, text) == text


def test_quotes_close_up_on_their_words(wt2):
    ids = wt2('He was a " breakout " in the city')["input_ids"]
    assert wt2.decode(ids) == 'He was a "breakout" in the city'
    ids = wt2('" A " and " B "\n" C "')["input_ids"]
    assert wt2.decode(ids) == '"A" and "B"\n"C"'


def test_decoded_text_starts_with_no_space(wt2, ptb):
    assert wt2.decode(wt2("The game")["input_ids"]) == "The game"
    assert ptb.decode(ptb("the company")["input_ids"]) == "the company"
    assert wt2.decode(wt2("\nThe game")["input_ids"]) == "\nThe game"


PTB_ROUND_TRIPS = ["d'Orsay", "rock'n'roll", "https://www.example.com/path", "jane.doe@example.com",
                   "the company's shares", "they don't know", "Zelenskyy met Macron in Kyiv"]  # fmt: skip


@pytest.mark.parametrize("text", PTB_ROUND_TRIPS)
def test_ptb_text_comes_back_as_written_where_ptb_keeps_it(ptb, text):
    assert round_trip(ptb, text) == text


def test_ptb_dollar_amounts_read_back_as_written(ptb):
    """PTB's decode of `$ N` is `$N`, which must read as `$ N` again (not `$ n`, a word outside the vocabulary)."""
    ids = ptb("to $ N billion")["input_ids"]
    assert ptb.decode(ids) == "to $N billion"
    assert ptb(ptb.decode(ids))["input_ids"] == ids
    assert ptb.convert_ids_to_tokens(ptb("it cost $5, then -5.5%")["input_ids"]) == ["it", "cost", "$", "N", "then",
                                                                                      "N", "N"]  # fmt: skip


def test_a_prefix_of_the_ids_decodes_to_a_prefix_of_the_text(wt2):
    """Streaming and the pipeline cut decoded text at the decoded prompt, quotes and placeholders included."""
    text = 'He said " Zelenskyy met Macron " at 9:30, -5 a--b d\'Orsay.\n" Kyiv " is https://www.example.com/path'
    enc = wt2(text)
    ids, table = enc["input_ids"], enc.oov_words[0]
    whole = wt2.decode(ids, oov_words=table)
    assert all(whole.startswith(wt2.decode(ids[:k], oov_words=table)) for k in range(len(ids)))


def test_unk_is_named_and_never_dropped(wt2):
    ids = wt2("the <unk> cat\nsat")["input_ids"]
    assert wt2.unk_token_id in wt2.all_special_ids  # declared, so counting unknown words works
    assert wt2.decode(ids, skip_special_tokens=True) == "the <unk> cat sat"  # <eos> dropped, <unk> kept
    assert wt2.convert_ids_to_tokens(ids, skip_special_tokens=True) == ["the", "<unk>", "cat", "sat"]


# ---- generate's stop_strings ----


def test_stop_strings_read_the_vocabulary(wt2):
    """StopStringCriteria reads every token's string by encoding a word outside the vocabulary ("abcdef") and reading
    its token back: it must come back as itself."""
    stop = StopStringCriteria(wt2, ["in the", "'s"])
    done = lambda text: bool(stop(torch.tensor([wt2(text)["input_ids"]]), None)[0])  # noqa: E731
    assert done("He lived in the") and done("the company's") and not done("He lived in a")


def test_generate_stops_at_a_stop_string(wt2, wt2_model):
    ids = wt2("\nThe game was released in", return_tensors="pt")["input_ids"]
    stop = StoppingCriteriaList([StopStringCriteria(wt2, [" "])])  # what stop_strings=[" "] builds
    out = wt2_model.generate(ids, max_new_tokens=8, do_sample=False, stopping_criteria=stop)
    assert out.shape[1] == ids.shape[1] + 1  # every word is written after a space


# ---- the pipeline ----


@pytest.fixture(scope="module")
def generator(wt2, wt2_model):
    own = PointerSentinelTextGenerationPipeline
    return pipeline("text-generation", model=wt2_model, tokenizer=wt2, pipeline_class=own)


def forced(tok, word: str) -> dict:
    """Generation kwargs that make `word` the only choice."""
    return {"sequence_bias": {(tok.convert_tokens_to_ids(word),): 100.0}, "do_sample": False}


def test_pipeline_joins_the_continuation_as_running_text(generator, wt2):
    assert generator("The company", max_new_tokens=1, **forced(wt2, "'s"))[0]["generated_text"] == "The company's"
    assert generator("The company", max_new_tokens=2, **forced(wt2, "game"))[0]["generated_text"] == (
        "The company game game"
    )
    new = generator("The company", max_new_tokens=1, return_full_text=False, **forced(wt2, ","))
    assert new[0]["generated_text"] == ","
    assert generator("The company ", max_new_tokens=1, **forced(wt2, "game"))[0]["generated_text"] == "The company game"


def test_pipeline_drops_the_end_of_generation_and_writes_inner_line_breaks(generator, wt2):
    # <eos> made the end token (the shipped generation_config.json names none): generation ends at the first
    eos = {**forced(wt2, "<eos>"), "eos_token_id": wt2.eos_token_id}
    assert generator("The game", max_new_tokens=3, **eos)[0]["generated_text"] == "The game"
    kept = generator("The game", max_new_tokens=3, skip_special_tokens=False, **eos)[0]["generated_text"]
    assert kept == "The game\n"
    # where <eos> does not end generation it is the line break it stands for, but for the run that ends the text
    eos_id, game = wt2.eos_token_id, wt2.convert_tokens_to_ids("game")
    bias = {(eos_id,): 100.0, (eos_id, game): 200.0}  # <eos>, then game after each <eos>
    text = generator("The game", max_new_tokens=3, eos_token_id=None, sequence_bias=bias, do_sample=False)
    assert text[0]["generated_text"] == "The game\ngame"  # <eos> game <eos>


def test_pipeline_batches_keep_each_prompts_words(generator):
    prompts = ["Zelenskyy met Macron in Kyiv on Monday . Later , Zelenskyy said", "\nThe game was released in",
               "Kyiv is the capital of", "Macron told reporters that the"]  # fmt: skip
    batched = generator(prompts, max_new_tokens=6, do_sample=False, batch_size=4)
    alone = [generator(p, max_new_tokens=6, do_sample=False) for p in prompts]
    for prompt, b, a in zip(prompts, batched, alone, strict=True):
        assert b[0]["generated_text"] == a[0]["generated_text"]
        assert b[0]["generated_text"].startswith(prompt) and len(b[0]["generated_text"]) > len(prompt)
        assert "<unk>" not in b[0]["generated_text"] and "<oov-" not in b[0]["generated_text"]


# prompts with different words outside the vocabulary, and of different lengths (left padding in a batch)
COPY_PROMPTS = ["Zelenskyy met Macron in Kyiv .", "\nThe Blorptang flows past Quenta town .", "Krillop and Snorgvald",
                "\nThe game was released in Vorlund by Mennix , who"]  # fmt: skip
SECOND = ["Macron", "Quenta", "Snorgvald", "Mennix"]  # each prompt's second such word: its placeholder <oov-1>


def test_copied_placeholders_write_each_rows_own_words(generator, wt2, wt2_model):
    """The pointer model copies a placeholder (here made the only choice): each row writes its own word, in a batch
    of 4 left-padded prompts as alone, through the pipeline and through generate + batch_decode."""
    slot1 = {(wt2.word_vocab_size + 1,): 100.0}
    batched = generator(COPY_PROMPTS, max_new_tokens=2, do_sample=False, sequence_bias=slot1, batch_size=4)
    for prompt, word, out in zip(COPY_PROMPTS, SECOND, batched, strict=True):
        assert out[0]["generated_text"] == f"{prompt} {word} {word}"
        alone = generator(prompt, max_new_tokens=2, do_sample=False, sequence_bias=slot1)
        assert alone[0]["generated_text"] == out[0]["generated_text"]
    enc = wt2(COPY_PROMPTS, padding=True, return_tensors="pt")
    ids = wt2_model.generate(**enc, max_new_tokens=2, do_sample=False, sequence_bias=slot1)
    new = wt2.batch_decode(ids[:, enc["input_ids"].shape[1] :], oov_words=enc.oov_words)
    assert new == [f"{w} {w}" for w in SECOND]


def test_a_model_without_placeholder_columns_reads_them_as_unk():
    """A model of the closed vocabulary (config.oov_slots 0) takes the open tokenizer's prompts: its pipeline reads
    the words it has no column for as <unk> instead of indexing past its embedding."""
    from modeling_pointer_sentinel import PointerSentinelConfig, PointerSentinelForCausalLM

    tok = open_vocabulary(build_word_level_tokenizer(["the cat sat on the mat <unk>", "a dog saw the cat"]))
    torch.manual_seed(0)
    config = PointerSentinelConfig(vocab_size=tok.word_vocab_size, embedding_size=8, hidden_size=8, pointer_window=4,
                                   eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id)  # fmt: skip
    model = PointerSentinelForCausalLM(config).eval()
    own = PointerSentinelTextGenerationPipeline
    generate = pipeline("text-generation", model=model, tokenizer=tok, pipeline_class=own)
    out = generate(["the Zorbex cat", "Quenta sat"], max_new_tokens=3, do_sample=False, batch_size=2)
    assert [o[0]["generated_text"][: len(p)] for o, p in zip(out, ["the Zorbex cat", "Quenta sat"], strict=True)] == [
        "the Zorbex cat", "Quenta sat"]  # fmt: skip


def test_the_folders_run_this_pipeline_by_remote_code(tmp_path):
    """A fresh interpreter where this package cannot be imported: AutoTokenizer and pipeline() on each shipped folder
    give its own classes, and the WikiText-2 tokenizer writes the news sentence back."""
    code = f"""
import json, sys

class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "modeling_pointer_sentinel":
            raise ImportError("blocked: " + name)

sys.meta_path.insert(0, Blocked())
from transformers import AutoTokenizer, pipeline
out = {{}}
for folder in sys.argv[1:]:
    tok = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    enc = tok({NEWS!r})
    pipe = pipeline("text-generation", model=folder, trust_remote_code=True)
    sample = pipe(["\\nThe company said", "Kyiv and Macron"], max_new_tokens=3, do_sample=False, batch_size=2)
    copies = pipe({COPY_PROMPTS!r}, max_new_tokens=12, do_sample=False, batch_size=4)
    out[folder] = {{"tok": type(tok).__module__ + "." + type(tok).__name__, "pipe": type(pipe).__name__,
                   "back": tok.decode(enc["input_ids"]), "spelled": tok.unseen_words({NEWS!r}),
                   "sample": [s[0]["generated_text"] for s in sample], "pointer": pipe.model.config.use_pointer,
                   "copies": [c[0]["generated_text"] for c in copies]}}
print(json.dumps(out))
"""
    folders = [str(f) for f in FOLDERS]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", code, *folders], cwd=tmp_path, env=env, capture_output=True,
                          text=True, stdin=subprocess.DEVNULL)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    for folder in folders:
        got = out[folder]
        assert got["tok"].startswith("transformers_modules.") and got["tok"].endswith(".PointerSentinelTokenizer")
        assert got["pipe"] == "PointerSentinelTextGenerationPipeline", got
        assert got["spelled"] == ["Zelenskyy", "Macron", "Kyiv"], got
        assert got["sample"][0].startswith("\nThe company said ") and got["sample"][1].startswith("Kyiv and Macron")
        assert json.loads((ROOT / folder / "config.json").read_text())["custom_pipelines"] == CUSTOM_PIPELINES
        for prompt, text in zip(COPY_PROMPTS, got["copies"], strict=True):  # each row its own words, none lost
            assert text.startswith(prompt) and not any(b in text for b in ("<unk>", "<oov-", "<0x", "</w>")), got
    assert out[str(WT2)]["back"] == NEWS
    assert "Blorptang" in out[str(WT2)]["copies"][1].removeprefix(COPY_PROMPTS[1])  # the pointer copies a spelled word
