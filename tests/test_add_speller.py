"""examples/add_speller.py: a word-level folder gets a speller, chosen on validation, and its tokenizer spells. The
saved speller is the chosen setting's, text in corpus form scores exactly as the word model scored it, and a spelled
word costs its spelling."""

import json
import random

import torch
from conftest import tiny_model
from test_cli import run_script
from transformers import AutoModelForCausalLM, AutoTokenizer

from modeling_pointer_sentinel.spelling import (
    held_out,
    speller_bits_per_byte,
    speller_pairs,
    with_speller,
    word_spellings,
)
from modeling_pointer_sentinel.tokenization import build_word_level_tokenizer, open_vocabulary, spelling_vocabulary
from modeling_pointer_sentinel.training import encode_lines

COMMON = "the a of ship crew bay sank sailed was is".split()


def made_up_lines(seed: int, names: list[str], n: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(COMMON + [rng.choice(names)]) for _ in range(rng.randint(4, 9))) for _ in range(n)]


def word_folder(tmp_path):
    """A word-level pointer folder and its train / validation files: the rare names differ in spelling pattern, and
    validation reuses some training names in new sentences (different text in every split)."""
    names = [f"{a}{b}ow" for a in "kzt" for b in "aei"] + [f"mar{c}en" for c in "bdgl"]
    train, valid = made_up_lines(0, names, 120), made_up_lines(1, names, 30)
    (tmp_path / "train.txt").write_text("\n".join(train) + "\n")
    (tmp_path / "valid.txt").write_text("\n".join(valid) + "\n")
    tok = open_vocabulary(build_word_level_tokenizer(train, text_rules="whitespace"), oov_slots=8)
    V = tok.word_vocab_size
    m = tiny_model(vocab_size=V, oov_slots=8, unk_token_id=tok.unk_token_id, pointer_window=5,
                   eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id).eval()  # fmt: skip
    folder = tmp_path / "word"
    tok.save_pretrained(folder)
    m.save_pretrained(folder)
    return folder


def test_the_speller_chosen_on_validation_is_saved_and_corpus_text_scores_as_before(tmp_path):
    folder = word_folder(tmp_path)
    out, grid = tmp_path / "spelled", tmp_path / "grid.json"
    done = run_script("add_speller.py", folder, out, "--train_file", tmp_path / "train.txt", "--validation_file",
                      tmp_path / "valid.txt", "--max_train_count", "40", "4", "--speller_size", "8", "4",
                      "--epochs", "3", "--lr", "0.05", "--held_out", "3", "--output_json", grid)  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(grid.read_text())
    assert len(result["grid"]) == 2 * 2 * 3 and result["chosen"] == min(result["grid"], key=lambda r: r["valid_bits"])
    assert result["chosen"] != result["grid"][-1]  # so a script that saved its last speller would show below
    tok, m = AutoTokenizer.from_pretrained(out), AutoModelForCausalLM.from_pretrained(out).eval()
    word_tok, word = AutoTokenizer.from_pretrained(folder), AutoModelForCausalLM.from_pretrained(folder).eval()
    assert tok.spell_unseen and m.config.speller_size == result["chosen"]["speller_size"]
    # the word model's weights file kept byte for byte as the first shard, the speller's weights the second
    shards = json.loads((out / "model.safetensors.index.json").read_text())["weight_map"]
    assert not (out / "model.safetensors").exists()
    assert (out / "model-00001-of-00002.safetensors").read_bytes() == (folder / "model.safetensors").read_bytes()
    assert {k for k, f in shards.items() if f.startswith("model-00002")} == {
        f"speller.{k}" for k in m.speller.state_dict()
    }
    # the saved speller is the chosen one: its validation figure, recomputed from the saved folder
    ids = {s: encode_lines(word_tok, (tmp_path / f"{s}.txt").read_text().splitlines()) for s in ("train", "valid")}
    counts = torch.bincount(ids["train"], minlength=m.config.vocab_size)
    spellings = word_spellings(word_tok, range(m.config.vocab_size))
    rare = {w for w in range(m.config.vocab_size) if 0 < counts[w] <= 20} - {tok.unk_token_id, tok.eos_token_id}
    held = {w for w in rare if held_out(spellings[w], 3)}
    assert 0 < result["held_out_words"] == len(held) < len(rare)
    h, words = speller_pairs(m, ids["valid"], held)  # as the script reads it
    bits = speller_bits_per_byte(m.speller, h, words, spellings)
    assert abs(bits - result["chosen"]["valid_bits"]) < 1e-5
    # text in corpus form (a literal <unk> too) keeps its ids and its scores; an unseen word is spelled and pays
    corpus = "the kaow ship sank of the <unk> bay the kaow"
    x, y = tok(corpus, return_tensors="pt").input_ids, word_tok(corpus, return_tensors="pt").input_ids
    assert x.tolist() == y.tolist()
    with torch.no_grad():
        torch.testing.assert_close(m(x, labels=x).target_log_probs, word(y, labels=y).target_log_probs)
        short, long = (m(z, labels=z).loss * (z.shape[1] - 1) for z in
                       (tok(f"the {w} sank", return_tensors="pt").input_ids for w in ("qu", "quorvantyx")))  # fmt: skip
    assert long > short
    assert tok.decode(tok("the quorvantyx sank").input_ids) == "the quorvantyx sank"


def test_bad_folders_are_one_line(tmp_path):
    folder = word_folder(tmp_path)
    data = ("--train_file", tmp_path / "train.txt", "--validation_file", tmp_path / "valid.txt")
    same = run_script("add_speller.py", folder, folder, *data)
    assert same.returncode == 2 and "output_dir must differ from model" in same.stderr
    out = tmp_path / "spelled"
    none_held = run_script("add_speller.py", folder, out, *data, "--held_out", "1000")
    assert none_held.returncode == 2 and "holds none of the 0 held-out words" in none_held.stderr, none_held.stderr
    word = AutoModelForCausalLM.from_pretrained(folder)  # a folder with a speller already, made in-process
    with_speller(word, 4).save_pretrained(out)
    spelling_vocabulary(AutoTokenizer.from_pretrained(folder)).save_pretrained(out)
    again = run_script("add_speller.py", out, tmp_path / "again", *data)
    assert again.returncode == 2 and "has a speller already" in again.stderr and "Traceback" not in again.stderr
    no_valid = run_script("add_speller.py", folder, tmp_path / "x", "--train_file", tmp_path / "train.txt")
    assert no_valid.returncode == 2 and "no validation split" in no_valid.stderr, no_valid.stderr
