"""examples/coining.py: the words a spell-mode model coins in its continuations, counted on the ids alone (a coined
word: spelled, and neither a vocabulary word nor the prompt's), whether they recur, and whether the pointer's window
held the previous occurrence; a folder without a speller is refused in one line, before torch loads."""

import json
import subprocess
import sys

import pytest
import torch
from conftest import ROOT, tiny_model
from test_cli import IMPORTS_OF, run_script, script_env
from test_spelled_forward import spell as spell_with
from test_spelled_forward import spelling_pair

sys.path.insert(0, str(ROOT / "examples"))
from coining import count_coined  # noqa: E402

V, L = 10, 3
WORDS = ["<eos>", "the", "ship", "was", "a", "<unk>", "crew", "bay", "sunk", "of"]  # ids 0 … V-1
VOCABULARY = {w.encode() for w in WORDS}


def spell(word: str) -> list[int]:
    return spell_with(word, V)


def ids(*parts) -> list[int]:
    """Ids from vocabulary words (in WORDS), other words (spelled) and lists of ids (as they are)."""
    return sum((p if isinstance(p, list) else [WORDS.index(p)] if p in WORDS else spell(p) for p in parts), [])


def test_coined_words_their_recurrences_and_the_window_counted_on_hand_written_ids():
    prompt = ids("<eos>", "the", "Zor", "ship")
    # word steps: 0 the, 1 Zor (the prompt's), 2 ship spelled (a vocabulary word), 3 Kelp (coined), 4 a, 5 crew,
    # 6 Kelp (3 steps on: within the window of 3), 7 Vorn (coined), 8 bay, 9 of, 10 sunk, 11 Kelp (5 steps on: beyond
    # it), 12 Zor, 13 a word of 70 bytes in two pieces (coined), 14 <eos>; then bytes of a word the ids end inside
    new = ids("the", "Zor", spell("ship"), "Kelp", "a", "crew", "Kelp", "Vorn", "bay", "of", "sunk", "Kelp", "Zor",
              "x" * 70, "<eos>", spell("Vorn")[:-1])  # fmt: skip
    counts = count_coined(prompt, new, V, VOCABULARY, L)
    assert counts == {"words": 15, "spelled_words": 8, "coined_words": 3, "coined_recurring": 1, "recurrences": 2,
                      "recurrences_within_window": 1, "coined": [b"Kelp", b"Vorn", b"x" * 70]}  # fmt: skip
    # the window is the pointer's: with one of 5, the last Kelp (5 steps on) is within it too
    assert count_coined(prompt, new, V, VOCABULARY, 5)["recurrences_within_window"] == 2
    # without the prompt, Zor is coined (and recurs, 11 steps on); nothing the vocabulary spells ever is
    alone = count_coined([0], new, V, VOCABULARY, L)
    assert alone["coined"] == [b"Zor", b"Kelp", b"Vorn", b"x" * 70] and alone["recurrences"] == 3


def prompts_file(tmp_path):
    f = tmp_path / "prompts.txt"
    f.write_text("the Zorbane ship was sunk in the bay\n\na crew of the line\n")
    return f


def test_the_script_counts_every_continuation_of_a_spelling_folder(tmp_path):
    """A tiny eager spell-mode folder (it coins words), 2 prompts x 3 samples: every continuation is counted, and its
    counts are those of its ids; the totals are the continuations' sums, the rates their quotients."""
    folder = tmp_path / "spelled"
    tok, model = spelling_pair(folder)
    with torch.no_grad():  # short words of letters, so that 40 new tokens hold a few
        model.speller.out.bias[[ord(c) for c in "aeiklmnorstvz"]] += 4.0
        model.speller.out.bias[256] += 3.0  # `</w>`
        model.lm_head.bias[tok.eos_token_id] += 6.0  # line ends, which a continuation runs past
    model.save_pretrained(folder)
    out = tmp_path / "coining.json"
    done = run_script("coining.py", folder, "--prompts_file", prompts_file(tmp_path), "--samples", "3",
                      "--max_new_tokens", "40", "--top_k", "40", "--seed", "0", "--output_json", out)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["continuations"] == 6 and result["prompts"] == 2 and result["samples"] == 3
    rows, V, window = result["per_continuation"], model.config.vocab_size, model.config.pointer_window
    assert [(r["prompt"], r["sample"]) for r in rows] == [(i, j) for i in range(2) for j in range(3)]
    vocabulary = {w.encode() for w in tok.convert_ids_to_tokens(list(range(V)))}
    prompts = [tok(p, add_special_tokens=False)["input_ids"] for p in ("the Zorbane ship was sunk in the bay",
                                                                       "a crew of the line")]  # fmt: skip
    keys = ["words", "spelled_words", "coined_words", "coined_recurring", "recurrences", "recurrences_within_window"]
    assert any(tok.eos_token_id in r["ids"][:-1] for r in rows)
    for r in rows:
        assert len(r["ids"]) == 40  # on past line ends
        counts = count_coined([tok.eos_token_id, *prompts[r["prompt"]]], r["ids"], V, vocabulary, window)
        assert {k: r[k] for k in keys} == {k: counts[k] for k in keys}
        assert r["coined"] == [w.decode(errors="replace") for w in counts["coined"]]
        assert all(r[k] >= 0 for k in keys) and r["recurrences_within_window"] <= r["recurrences"]
        assert r["coined_recurring"] <= r["coined_words"] <= r["spelled_words"] <= r["words"]
    assert {k: result[k] for k in keys} == {k: sum(r[k] for r in rows) for k in keys}
    assert result["coined_words"] > 0 and result["pointer_window"] == window  # the eager model does coin
    assert result["coined_per_1000_words"] == pytest.approx(1000 * result["coined_words"] / result["words"])
    assert result["share_of_coined_recurring"] == pytest.approx(result["coined_recurring"] / result["coined_words"])
    assert "Zorbane" not in sum((r["coined"] for r in rows), [])  # the prompt's word is not coined
    assert result["examples"] and all(w in sum((r["coined"] for r in rows), []) for w in result["examples"])
    assert "coined" in done.stdout and "per 1,000 words" in done.stdout


def run_checked(*args, cwd):
    """coining.py as `python coining.py ARGS` would run, and the heavy modules it imported, from stderr's last line."""
    cmd = [sys.executable, "-c", IMPORTS_OF, str(ROOT / "examples" / "coining.py"), *map(str, args)]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=script_env())
    *errors, heavy = done.stderr.strip().splitlines()
    return done, errors, heavy


def test_a_folder_without_a_speller_is_refused_in_one_line_before_torch_loads(tmp_path):
    from modeling_pointer_sentinel.tokenization import build_word_level_tokenizer

    folder = tmp_path / "plain"
    tok = build_word_level_tokenizer(["the ship was sunk", "a crew of the line"], text_rules="whitespace")
    model = tiny_model(vocab_size=len(tok), eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id)
    tok.save_pretrained(folder)
    model.save_pretrained(folder)
    done, errors, heavy = run_checked(folder, "--prompts_file", prompts_file(tmp_path), cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr and heavy == "heavy imports: []", done.stderr
    assert errors == [f"coining.py: error: {folder} has no speller: it cannot write new words; give it one with "
                      "examples/add_speller.py"]  # fmt: skip


@pytest.mark.parametrize("args, message", [(["--help"], ""), (["x", "--prompts_file", "p.txt", "--samples", "0"],
                                           "coining.py: error: --samples must be >= 1, got 0")])  # fmt: skip
def test_the_command_line_is_checked_before_torch_loads(args, message, tmp_path):
    done, errors, heavy = run_checked(*args, cwd=tmp_path)
    assert heavy == "heavy imports: []", done.stderr
    if message:
        assert done.returncode == 2 and errors == [message], done.stderr
    else:
        assert done.returncode == 0 and done.stdout.startswith("usage: ") and not errors
