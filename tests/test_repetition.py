"""examples/repetition.py's measure and the decoding settings chosen from it: the share of repeated 4-grams against a
slow reference, words counted as words (a spelled word is one, however many ids), prompts chosen the same way every
run; the shipped generation_config.json of every folder and the page's defaults carry the setting the table chose,
and `generate` honours it."""

import importlib
import itertools
import json
import math
import os
import random
import sys

import pytest
import torch
from conftest import ROOT
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

sys.path.insert(0, str(ROOT / "examples"))
import repetition  # noqa: E402

FOLDERS = sorted(p.name for p in (ROOT / "pretrained").iterdir() if (p / "config.json").is_file())


def slow_share(words, n=4):
    """The definition, spelled out: of the positions i with a whole n-gram, those where some earlier position j < i
    starts the same n-gram."""
    starts = range(len(words) - n + 1)
    if not starts:
        return 0.0
    repeats = [i for i in starts if any(words[j : j + n] == words[i : i + n] for j in range(i))]
    return len(repeats) / len(starts)


@pytest.mark.parametrize(
    "text, share",
    [
        ("", 0.0),
        ("a b c", 0.0),  # no whole 4-gram
        ("a b c d", 0.0),
        ("a b c d a b c d", 1 / 5),  # abcd bcda cdab dabc abcd: the last repeats the first
        ("a a a a a a", 2 / 3),  # aaaa three times: the second and third repeat
        ("the cat of the cat of the cat", 2 / 5),
        ("a b c d e f g h", 0.0),
    ],
)
def test_the_share_by_hand(text, share):
    assert repetition.repeated_ngram_share(text.split()) == pytest.approx(share)
    assert slow_share(text.split()) == pytest.approx(share)


def test_the_share_against_the_slow_reference():
    """Random texts over small alphabets (many repeats) and n from 1 to 5."""
    rng = random.Random(0)
    for _ in range(300):
        words = [rng.choice("abc"[: rng.randint(1, 3)]) for _ in range(rng.randint(0, 30))]
        for n in range(1, 6):
            assert repetition.repeated_ngram_share(words, n) == pytest.approx(slow_share(words, n)), (words, n)


def test_prompts_are_evenly_spaced_and_leave_room():
    ends = repetition.choose_prompts(10_000, 50, 100, 200)
    assert ends == repetition.choose_prompts(10_000, 50, 100, 200) and len(ends) == 50
    assert ends[0] == 100 and ends[-1] + 200 <= 10_000
    assert len({b - a for a, b in itertools.pairwise(ends)}) == 1
    with pytest.raises(ValueError, match="too few"):
        repetition.choose_prompts(250, 5, 100, 200)


@torch.no_grad()
def test_a_spelled_word_is_one_word():
    """The words of a spelled text: a word the vocabulary lacks is one word (its bytes and `</w>`); the stopping
    criterion ends generation at whole words, never inside a spelled one."""
    folder = ROOT / "pretrained" / "wt2-pointer-sentinel-lstm-2x200"
    tok = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True, dtype=torch.float32).eval()
    V, end = model.config.vocab_size, model.config.vocab_size + 256
    ids = tok("\nThe Zorbane river met the Zorbane")["input_ids"]
    assert len(ids) > 7
    assert repetition.words_of(tok, ids, V) == ["<eos>", "The", "Zorbane", "river", "met", "the", "Zorbane"]
    assert repetition.words_of(tok, ids[:-2], V) == ["<eos>", "The", "Zorbane", "river", "met", "the"]
    # "Zorbane" as the first new word: its bytes are no word until its `</w>`
    zorbane = tok("\nZorbane")["input_ids"][1:]
    assert len(zorbane) == 8 and zorbane[-1] == end
    for n in range(1, 9):
        row = torch.tensor([ids + zorbane[:n]])
        assert bool(repetition.WordsDone(len(ids), 1, V)(row, None)[0]) == (n == 8)
    prompt = torch.tensor([ids])
    for words in (1, 5):
        stop = [repetition.WordsDone(len(ids), words, V)]
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=400, do_sample=False,
                             stopping_criteria=stop)[0, len(ids) :]  # fmt: skip
        assert len(repetition.words_of(tok, out.tolist(), V)) == words
        assert out[-1] < V or out[-1] == end  # it ends on a word's end


def test_the_table_chose_the_shipped_setting():
    """results/repetition/wt2.json names the setting it chose (by its rule, on validation prompts) and the
    script's CHOSEN is that setting."""
    result = json.loads((ROOT / "results" / "repetition" / "wt2.json").read_text())
    assert result["chosen"] == repetition.CHOSEN
    rows = result["rows"]["pretrained/wt2-pointer-sentinel-lstm-2x200"]
    assert repetition.choose(rows, result["human"]) == repetition.CHOSEN


@pytest.mark.parametrize("folder", FOLDERS)
def test_the_shipped_generation_config_carries_the_chosen_setting(folder):
    """Every folder's generation_config.json: the chosen setting's values (what `generate` does with no arguments)."""
    gen = GenerationConfig.from_pretrained(ROOT / "pretrained" / folder)
    defaults = GenerationConfig._get_default_generation_params()  # what generate puts in a field left unset
    for key, value in {**repetition.OFF, **repetition.SETTINGS[repetition.CHOSEN]}.items():
        got = getattr(gen, key)
        assert (defaults[key] if got is None else got) == value, (key, got, value)


@torch.no_grad()
def test_generate_honours_the_shipped_setting():
    """`generate` with no decoding arguments on a shipped folder decodes as its generation_config.json says: each step's
    scores keep the top_k likeliest ids at the model's own log p over the temperature (the rest -inf), the token drawn
    is one of them, and the draw follows the seed."""
    setting = {**repetition.OFF, **repetition.SETTINGS[repetition.CHOSEN]}
    assert setting["do_sample"] and setting["top_k"]  # what the checks below read
    folder = ROOT / "pretrained" / "wt2-pointer-sentinel-lstm-2x200"
    tok = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True, dtype=torch.float32).eval()
    ids = torch.tensor([tok("\nThe Quarrington River flows through Esselbrook. In 1850, the town of")["input_ids"]])

    def run(seed):
        torch.manual_seed(seed)
        return model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=16, output_scores=True,
                              output_logits=True, return_dict_in_generate=True)  # fmt: skip

    out = run(0)
    new = out.sequences[0, ids.shape[1] :]
    suppressed = torch.zeros(out.scores[0].shape[-1], dtype=torch.bool)
    suppressed[model.generation_config.suppress_tokens] = True  # <unk>: never written, whatever its share
    for token, scores, logits in zip(new, out.scores, out.logits, strict=True):
        kept = scores[0].isfinite()
        assert 1 < int(kept.sum()) <= setting["top_k"] and kept[token]
        torch.testing.assert_close(scores[0][kept], logits[0][kept] / setting["temperature"])
        # the ids dropped are the less likely ones
        assert logits[0][~kept & ~suppressed].max() <= logits[0][kept].min()
    assert torch.equal(run(0).sequences, out.sequences) and not torch.equal(run(1).sequences, out.sequences)


def require(module: str):
    """The module, or a skip; under CI a missing one fails (as tests/test_app.py)."""
    if os.environ.get("CI") == "true":
        return importlib.import_module(module)
    return pytest.importorskip(module)


def test_the_demo_defaults_to_the_chosen_setting():
    """The page's and its API's default decoding is the shipped one."""
    require("gradio")
    import app

    setting = {**repetition.OFF, **repetition.SETTINGS[repetition.CHOSEN]}
    assert app.DEFAULT_MODE == ("sample" if setting["do_sample"] else "greedy")
    assert (app.DEFAULT_TEMPERATURE, app.DEFAULT_TOP_K, app.DEFAULT_TOP_P) == (
        setting["temperature"], setting["top_k"], setting["top_p"])  # fmt: skip
    kwargs, _ = app.generation_settings(app.DEFAULT_MODE, 50, app.DEFAULT_TEMPERATURE, app.DEFAULT_TOP_K,
                                        app.DEFAULT_TOP_P, 4, 0)  # fmt: skip
    assert kwargs["do_sample"] == setting["do_sample"]


def test_the_judge_scores_a_continuations_bytes_after_its_prompt():
    """`judge_bits_per_byte` against the text written out by hand: one forward of a byte model over the corpus text
    of prompt and continuation, the nats of the continuation's bytes (its words, their separators and line breaks)
    over their number; the prompt's bytes are context. Two rows: the figure pools their bits and bytes."""
    from conftest import tiny_config

    from modeling_pointer_sentinel import PointerSentinelForCausalLM
    from modeling_pointer_sentinel.baselines import byte_tokenizer

    tok = byte_tokenizer()
    judge = PointerSentinelForCausalLM(tiny_config(vocab_size=len(tok), use_pointer=False)).double().eval()
    prompt = ["the", "ship", "<eos>", "a", "crew"]
    rows = [{"prompt": 0, "words": ["was", "sunk", "<eos>", "in", "Zorbane"]}, {"prompt": 0, "words": ["é", "!"]}]
    texts = [(prompt, [])]
    bits = n_bytes = 0.0
    for text, continuation in (("the ship\na crew was sunk\nin Zorbane\n", 20), ("the ship\na crew é !\n", 5)):
        ids = torch.tensor([tok.eos_token_id if b == 10 else b for b in text.encode()])  # a byte an id, "\n" eos
        with torch.no_grad():
            log_p = judge(ids[None]).logits[0, :-1].log_softmax(-1).gather(-1, ids[1:, None])[:, 0]
        bits += -log_p[-continuation:].sum().item() / math.log(2)
        n_bytes += continuation
    assert abs(repetition.judge_bits_per_byte(judge, tok, texts, rows) - bits / n_bytes) < 1e-9
