"""train.py on a user's raw prose ("ids that carry the text", part 4): text rules that split punctuation off, recipe
cutoffs that fit a small vocabulary, an open-vocabulary (spelling) run out of the box that spells rare training words
at the rate chosen on validation, fine-tuning a shipped folder, and spell-mode resumes (one process, a 2-rank launch
killed) that are exact."""

import json
import random
from types import SimpleNamespace

import pytest
import torch
from conftest import ROOT
from test_train import TINY, losses, train_module

from modeling_pointer_sentinel.modeling_pointer_sentinel import SPELL_END
from modeling_pointer_sentinel.tokenization import build_word_level_tokenizer, spelling_vocabulary
from modeling_pointer_sentinel.training import (
    SPELLED_UNSEEN_WORD_RATE,
    check_frequency_order,
    encode_lines,
    fit_cutoffs,
    shard_streams,
    simulate_spelled_unseen_words,
    unseen_word_rate_for,
)

NOUNS = "play poem king queen house river city letter ship garden".split()
ADJECTIVES = "old quiet famous bright long dark strange small".split()
VERBS = "wrote saw loved left found read".split()
WRITERS = ["Shakespeare", "Marlowe", "Jonson", "Kyd", "Greene", "Nashe", "Dekker", "Peele"]


def prose(seed: int, lines: int, names: list[str]) -> list[str]:
    """Ordinary English prose: punctuation written on to the words, quotes, clitics, numbers, names repeated."""
    rng = random.Random(seed)
    out = []
    for _ in range(lines):
        a, b = rng.choice(names), rng.choice(names)
        sentences = [f"{a}, who {rng.choice(VERBS)} the {rng.choice(ADJECTIVES)} {rng.choice(NOUNS)}, met {b}.",
                     f"\"The {rng.choice(NOUNS)} is {rng.choice(ADJECTIVES)},\" {b} said; {a} didn't agree.",
                     f"In {rng.randint(1500, 1700)}, {a}'s {rng.choice(NOUNS)} was "
                     f"{rng.choice(ADJECTIVES)}!"]  # fmt: skip
        out.append(" ".join(rng.sample(sentences, rng.randint(1, 3))))
    return out


@pytest.fixture(scope="module")
def raw_corpus(tmp_path_factory):
    """Training, validation and test prose with other text: validation and test name writers training never saw."""
    d = tmp_path_factory.mktemp("raw")
    splits = {"train": prose(0, 160, WRITERS), "valid": prose(1, 20, WRITERS[:4] + ["Fletcher", "Middleton"]),
              "test": prose(2, 20, WRITERS[4:] + ["Webster", "Heywood"])}  # fmt: skip
    for split, lines in splits.items():
        (d / f"{split}.txt").write_text("\n".join(lines) + "\n")
    return d


def raw_args(corpus, out, *extra):
    return ["--train_file", str(corpus / "train.txt"), "--validation_file", str(corpus / "valid.txt"),
            "--test_file", str(corpus / "test.txt"), "--config", str(TINY), "--output_dir", str(out),
            "--data_cache_dir", str(out.parent / "cache"), *extra]  # fmt: skip


# ---- 1. text rules: auto splits punctuation off raw prose ----
def test_auto_reads_raw_prose_with_punctuation_split_off(raw_corpus):
    lines = (raw_corpus / "train.txt").read_text().splitlines()
    tok = build_word_level_tokenizer(lines)
    assert tok.init_kwargs["text_rules"] == "wikitext" and tok.init_kwargs["raw_text"]
    vocab = tok.get_vocab()
    assert {"Shakespeare", ",", ".", "'s", "didn", "'t", '"', "!"} <= set(vocab)
    assert not [w for w in vocab if w[-1] in ",.;!" and len(w) > 1], "a word with its punctuation on"
    ids = tok('Shakespeare, who wrote the play, said: "Don\'t!"')["input_ids"]
    assert tok.convert_ids_to_tokens(ids)[:3] == ["Shakespeare", ",", "who"]
    # a tokenized corpus keeps its whitespace words (WikiText's and PTB's: tests/test_text_rules.py)
    tokenized = build_word_level_tokenizer(["the game , said he ."] * 20 + ["a U.S. play"])  # its marks apart
    assert tokenized.init_kwargs["text_rules"] == "whitespace" and not tokenized.init_kwargs["raw_text"]


# ---- 2. a recipe's adaptive softmax cutoffs fit a small vocabulary ----
def test_recipe_cutoffs_fit_the_vocabulary(raw_corpus, tmp_path, capsys):
    assert fit_cutoffs([2000, 10000], 4535) == [2000]
    assert fit_cutoffs([2000, 10000], 33278) == [2000, 10000]
    assert fit_cutoffs([2000, 10000], 1500) == []
    cfg = json.loads(TINY.read_text())
    cfg["model"]["adaptive_softmax_cutoffs"] = [50, 10000]
    (tmp_path / "cfg.json").write_text(json.dumps(cfg))
    out = tmp_path / "run"
    train_module().main(raw_args(raw_corpus, out, "--max_train_steps", "1", "--config", str(tmp_path / "cfg.json"),
                                 "--speller_size", "0"))  # fmt: skip
    assert "adaptive_softmax_cutoffs [50, 10000] -> [50]: the vocabulary has" in capsys.readouterr().out
    assert json.loads((out / "config.json").read_text())["adaptive_softmax_cutoffs"] == [50]


# ---- 3. a raw-text run is open-vocabulary ----
def test_simulated_unseen_words_are_spelled_as_the_tokenizer_spells_them(raw_corpus):
    lines = (raw_corpus / "train.txt").read_text().splitlines()
    tok = spelling_vocabulary(build_word_level_tokenizer(lines))
    V = tok.word_vocab_size
    ids = encode_lines(tok, lines)
    assert int((ids >= V).sum()) == 0  # every training word is in the vocabulary
    out = simulate_spelled_unseen_words(ids, tok, 0.5, max_count=10, block=200, seed=0)
    assert tok.decode(out) == tok.decode(ids)  # the same text, some words of it spelled
    spelled = out[out >= V]
    assert int((spelled == V + SPELL_END).sum()) > 10
    counts = torch.bincount(ids, minlength=V)
    kept = out[out < V]
    dropped = counts - torch.bincount(kept, minlength=V)
    assert int(dropped.sum()) > 0 and bool((counts[dropped > 0] <= 10).all())  # rare words only
    assert int(dropped[tok.eos_token_id]) == 0
    assert torch.equal(simulate_spelled_unseen_words(ids, tok, 0.0, 10, 200, 0), ids)


@pytest.mark.parametrize("cut, starts", [(6, [0, 13, 30, 45]), (7, [0, 15, 29, 45])], ids=["at </w>", "in a word"])
def test_spelled_streams_start_at_a_word(cut, starts):
    """A stream's even share may start at a spelled word's `</w>` (which the model refuses after no byte) or inside
    it: it starts at the word's first id instead."""
    V = 5
    word = [V + 104, V + 105, V + SPELL_END]  # "hi" spelled
    ids = torch.tensor([0, 1, *word, 2, *word, 3, *word, *word, 1] * 4)[cut:]
    n = len(ids) // 4
    assert [ids[s : s + n].tolist() for s in starts] == shard_streams(ids, 4, spelled_from=V).tolist()
    assert torch.equal(shard_streams(ids, 4), ids[: 4 * n].view(4, n))  # word-level streams: as before


def test_the_frequency_order_counts_words_not_spelled_bytes():
    counts = torch.tensor([9, 5, 3, 1, 0, 0, 50, 40])  # 6 words, then two bytes' counts
    check_frequency_order(None, [2, 4], 6, counts=counts)  # the bytes are no word after a cutoff


def test_a_raw_text_run_spells_copies_and_reports_bits_per_byte(raw_corpus, tmp_path, capsys):
    out = tmp_path / "run"
    train_module().main(raw_args(raw_corpus, out, "--max_train_steps", "30", "--unseen_word_rate", "0.3",
                                 "--learning_rate", "0.003", "--optimizer", "adamw"))  # fmt: skip
    said = capsys.readouterr().out
    assert "speller of 256 units" in said and "<unk> rate: train 0.00% | validation 0.00% | test 0.00%" in said
    results = json.loads((out / "results.json").read_text())
    for split in ("validation", "test"):
        assert 0 < results[f"{split}_bits_per_byte"] < 8 and results[f"{split}_word_ppl"] > 1
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok, model = AutoTokenizer.from_pretrained(out), AutoModelForCausalLM.from_pretrained(out).eval()
    assert tok.spell_unseen and model.config.speller_size == 256
    text = "Webster, who wrote the play, met Webster."  # a writer training never saw, twice
    ids = tok(text, return_tensors="pt").input_ids
    assert int((ids == tok.word_vocab_size + SPELL_END).sum()) == 2 and tok.decode(ids[0]).strip() == text
    with torch.no_grad():
        log_p = model(ids).logits[0, :-1].gather(-1, ids[0, 1:, None])[:, 0]
    ends = (ids[0, 1:] >= tok.word_vocab_size).nonzero()[:, 0]
    first, second = ends[ends < 10], ends[ends >= 10]  # the bytes of each spelling of Webster
    assert log_p[first].sum() < log_p[second].sum()  # the second is copied from the window: far cheaper


def test_a_word_level_corpus_keeps_its_unk_and_the_speller_flag_turns_spelling_on(raw_corpus, tmp_path):
    d = tmp_path / "plain"
    d.mkdir()
    rng = random.Random(0)
    for split in ("train", "valid", "test"):
        (d / f"{split}.txt").write_text("\n".join(" ".join(rng.choice(["a", "b", "c", "d"]) for _ in range(8))
                                                  for _ in range(60)) + "\n")  # fmt: skip
    train = train_module()
    train.main(raw_args(d, tmp_path / "word", "--max_train_steps", "1"))
    assert json.loads((tmp_path / "word" / "config.json").read_text())["speller_size"] == 0
    train.main(raw_args(d, tmp_path / "spell", "--max_train_steps", "1", "--speller_size", "32"))
    assert json.loads((tmp_path / "spell" / "config.json").read_text())["speller_size"] == 32


class Stopped(Exception):
    """Raised where a test has seen what it wanted of a run, before its training."""


def test_a_run_that_spells_simulates_unseen_words_at_the_rate_chosen_on_validation(
    raw_corpus, tmp_path, monkeypatch, capsys
):
    """Without --unseen_word_rate a run with a speller spells its rare training words at the rate the study chose
    (results/unseen_rate), so the speller learns to spell and the pointer to copy; a run without one has none; a rate
    given is used as given."""
    study = json.loads((ROOT / "results" / "unseen_rate" / "study.json").read_text())
    train = train_module()
    assert train.SPELLED_UNSEEN_WORD_RATE == SPELLED_UNSEEN_WORD_RATE == study["chosen_rate"] > 0
    spelling, word_level = SimpleNamespace(speller_size=32), SimpleNamespace(speller_size=0)  # the configs' field
    assert unseen_word_rate_for(spelling, None) == SPELLED_UNSEEN_WORD_RATE and unseen_word_rate_for(spelling, 0) == 0
    assert unseen_word_rate_for(word_level, None) == 0 and unseen_word_rate_for(word_level, 0.2) == 0.2
    rates, simulate = [], train.simulate_unseen_training_words

    def simulated(ids, config, rate, *args):
        rates.append(rate)
        return simulate(ids, config, rate, *args)

    def stop(*_):  # the rate is chosen by then
        raise Stopped

    monkeypatch.setattr(train, "simulate_unseen_training_words", simulated)
    monkeypatch.setattr(train, "rank_streams", stop)
    for extra, expected in [((), [SPELLED_UNSEEN_WORD_RATE]), (("--speller_size", "0"), []),
                            (("--unseen_word_rate", "0.1"), [0.1]), (("--unseen_word_rate", "0"), [])]:  # fmt: skip
        rates.clear()
        with pytest.raises(Stopped):
            train.main(raw_args(raw_corpus, tmp_path / "run", *extra))
        assert rates == expected, extra
        said = f"spelled at rate {SPELLED_UNSEEN_WORD_RATE:g}, the default with a speller"
        assert (said in capsys.readouterr().out) == (not extra), extra


# ---- 4. fine-tuning a shipped folder on raw text ----
@pytest.mark.parametrize("folder", ["wt2-pointer-sentinel-lstm-2x200", "ptb-pointer-sentinel-lstm-2x200"])
def test_a_shipped_folder_fine_tunes_on_raw_text(folder, raw_corpus, tmp_path):
    out = tmp_path / "run"
    train_module().main(raw_args(raw_corpus, out, "--model_name_or_path", str(ROOT / "pretrained" / folder),
                                 "--max_train_steps", "2", "--eval_max_tokens", "200"))  # fmt: skip
    shipped = json.loads((ROOT / "pretrained" / folder / "config.json").read_text())
    saved = json.loads((out / "config.json").read_text())
    assert saved["vocab_size"] == shipped["vocab_size"] and saved["speller_size"] == shipped["speller_size"] > 0
    assert json.loads((out / "tokenizer_config.json").read_text())["spell_unseen"]
    assert json.loads((out / "results.json").read_text())["unk_rate"]["train"] == 0


# ---- 5. a spell-mode resume is exact ----
def test_a_spell_mode_resume_reproduces_the_uninterrupted_losses(raw_corpus, tmp_path):
    common = ["--max_train_steps", "8", "--checkpointing_steps", "4", "--unseen_word_rate", "0.3", "--seed", "3"]
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    train = train_module()
    train.main(raw_args(raw_corpus, full, *common))
    train.main(raw_args(raw_corpus, resumed, *common, "--resume_from_checkpoint", str(full / "step_4")))
    a, b = losses(full), losses(resumed)
    assert sorted(b) == [5, 6, 7, 8] and all(b[s] == a[s] for s in b), (a, b)


def test_a_two_process_spell_mode_run_killed_and_resumed_is_bit_exact(raw_corpus, tmp_path):
    """`accelerate launch` with 2 gloo ranks of a spelling run (a speller, rare words spelled, dropout): both ranks
    SIGKILL themselves right after optimizer step 6 (before its log), past the checkpoint at step 4
    (tests/kill_during_save.py), and the run
    is resumed with --resume_from_checkpoint latest: every loss logged, the final weights and the final figures are
    those of the 2-rank run never killed, bit for bit."""
    from safetensors.torch import load_file
    from test_checkpoints import KILLER
    from test_train import launch

    cfg = json.loads(TINY.read_text())
    cfg["model"].update(input_dropout=0.3, weight_drop=0.3, embedding_dropout=0.1)  # the RNGs must resume too
    (tmp_path / "cfg.json").write_text(json.dumps(cfg))
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    # any word may be spelled (not only the rare): every row's window holds spelled words when the checkpoint is saved
    args = ["--max_train_steps", "8", "--checkpointing_steps", "4", "--unseen_word_rate", "0.3", "--seed", "3",
            "--unseen_word_max_count", "1000", "--num_threads", "1", "--eval_max_tokens", "200",
            "--resume_from_checkpoint", "latest"]  # fmt: skip
    run = [*raw_args(raw_corpus, whole, *args), "--config", str(tmp_path / "cfg.json")]
    launch(run, processes=2, port=29657)
    run[run.index(str(whole))] = str(killed)
    done = launch(run, processes=2, port=29657, check=False, script=KILLER, KILL_AT_STEP="6")
    assert done.returncode != 0 and "Signal 9 (SIGKILL)" in done.stderr, done.stderr[-3000:]
    assert (killed / "step_4").is_dir() and not (killed / "results.json").exists()
    done = launch(run, processes=2, port=29657)
    assert "resuming from" in done.stdout and "2 process(es) x batch 2" in done.stdout
    reference = losses(whole)
    rows = [json.loads(line) for line in (killed / "log.jsonl").read_text().splitlines()]
    logged = [(r["step"], r["train_loss"]) for r in rows if "train_loss" in r]
    assert sorted(reference) == list(range(1, 9)) and [s for s, _ in logged] == [*range(1, 6), *range(5, 9)]
    assert all(loss == reference[s] for s, loss in logged), (logged, reference)
    a, b = load_file(whole / "model.safetensors"), load_file(killed / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    ra, rb = (json.loads((d / "results.json").read_text()) for d in (whole, killed))
    assert all(ra[k] == rb[k] for k in ("validation_ppl", "validation_bits_per_byte", "test_ppl", "test_bits_per_byte"))
