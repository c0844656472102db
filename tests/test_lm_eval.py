"""lm-evaluation-harness (the dev extra installs it): the tokenizer on lm-eval's detokenised WikiText-2, and lm-eval's
own `wikitext` task run offline on the bundled split, checked against the model's own scoring."""

import math
import sys

import pytest
import torch
from conftest import ROOT
from lm_eval.tasks.wikitext.preprocess_wikitext import wikitext_detokenizer
from transformers import AutoModelForCausalLM, AutoTokenizer

sys.path.insert(0, str(ROOT / "examples"))
import lm_eval_wikitext  # noqa: E402

FOLDER = lm_eval_wikitext.DEFAULT_MODEL


def test_lm_evals_detokenised_wikitext_reads_back_as_the_corpus():
    """Every bundled test article through lm-eval's detokeniser and back: >= 99% of the original tokens return and
    the <unk> rate moves by less than 0.3 points (a whitespace tokenizer gives back far fewer: the check can fail)."""
    tok = AutoTokenizer.from_pretrained(FOLDER)
    docs = lm_eval_wikitext.articles()
    titles = [[line for line in d.splitlines() if lm_eval_wikitext.HEADING.match(line)] for d in docs]
    assert len(docs) == 62 and all(len(t) == 1 for t in titles)
    result = lm_eval_wikitext.roundtrip(tok, docs)
    assert result["given_back"] >= 0.99 and abs(result["unk_rate_detokenised"] - result["unk_rate"]) < 0.003, result
    from modeling_pointer_sentinel.tokenization import add_text_rules

    whitespace = lm_eval_wikitext.roundtrip(add_text_rules(tok, "whitespace"), docs[:5])
    assert whitespace["given_back"] < 0.95, whitespace


def test_lm_evals_wikitext_task_runs_offline_and_agrees_with_the_model(monkeypatch):
    """lm-eval's task on the first articles, from the local file: its word perplexity, put in per-token units, is the
    model's own perplexity of those detokenised articles, each read from an <eos> start as lm-eval's rolling windows
    do."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    result = lm_eval_wikitext.main(["task", "--limit", "3"])
    tok = AutoTokenizer.from_pretrained(FOLDER)
    model = AutoModelForCausalLM.from_pretrained(FOLDER, dtype=torch.float32).eval()
    nll, n = 0.0, 0
    for doc in lm_eval_wikitext.articles()[:3]:
        ids = torch.tensor([[tok.eos_token_id, *tok(wikitext_detokenizer({"page": doc}))["input_ids"]]])
        with torch.no_grad():  # the model's own scoring: its loss (a word the vocabulary lacks included)
            nll -= model(ids[:, :-1], shift_labels=ids[:, 1:]).target_log_probs.sum().item()
        n += ids.shape[1] - 1
    assert result["tokens_scored"] == n
    assert result["token_perplexity"] == pytest.approx(math.exp(nll / n), rel=1e-4)


def test_the_round_trip_counts_aligned_tokens_only():
    """One line through the detokeniser, read back by a whitespace tokenizer: `Fu's`, `poems,` and `1,200` are unknown
    words, so of the 8 original tokens only the line end comes back (an aligned match, not a count of tokens)."""
    from modeling_pointer_sentinel.tokenization import build_word_level_tokenizer

    doc = " Fu 's poems , 1 @,@ 200 \n"
    tok = build_word_level_tokenizer([doc.strip()], text_rules="whitespace")
    result = lm_eval_wikitext.roundtrip(tok, [doc])
    assert result["tokens"] == 8 and result["given_back"] == 1 / 8
    assert result["unk_rate"] == 0 and result["unk_rate_detokenised"] == 3 / 4


@pytest.mark.parametrize("use_pointer", [True, False])
def test_lm_eval_scores_words_the_vocabulary_lacks_as_the_models_loss_does(use_pointer):
    """First occurrences, repeats inside the pointer's window and beyond it, literal <unk>: lm-eval's gather of the
    next token from `logits` is forward's target log-probability, and the distribution stays normalised."""
    from conftest import tiny_model

    m = tiny_model(oov_slots=4, unk_token_id=3, pointer_window=4, use_pointer=use_pointer).eval()
    ids = torch.tensor([[1, 23, 2, 23, 5, 24, 3, 6, 7, 8, 9, 23, 24, 25, 25]])  # 23 leaves the window, comes back
    with torch.no_grad():  # lm-eval reads the positions of all but the last input, the targets from the inputs
        out, logits = m(ids[:, :-1], shift_labels=ids[:, 1:]), m(ids).logits
    log_p = logits[:, :-1].log_softmax(-1)
    torch.testing.assert_close(log_p.gather(-1, ids[:, 1:, None])[..., 0], out.target_log_probs)
    torch.testing.assert_close(log_p.exp().sum(-1), torch.ones(1, 14))


def test_lm_evals_task_on_a_spelling_folder_is_finite_and_a_longer_new_word_costs_more(tmp_path, monkeypatch):
    """A folder whose ids carry the text (`config.speller_size`): lm-eval's own wikitext task scores every byte of a
    document, its unseen words spelled, finite and as the model's loss does; and that loss charges a longer made-up
    name more (with placeholders every name cost the same)."""
    from test_spelled_forward import spelling_pair

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    tok, model = spelling_pair(tmp_path)
    nll = {}
    for name in ("Qu", "Quorvantyxelmandribostequilan"):
        doc = f" = The {name} = \n\n the ship was sunk in the bay . the {name} was saved by the crew . \n"
        ids = torch.tensor([[tok.eos_token_id, *tok(wikitext_detokenizer({"page": doc}))["input_ids"]]])
        with torch.no_grad():
            nll[name] = -model(ids[:, :-1], shift_labels=ids[:, 1:]).target_log_probs.sum().item()
    assert nll["Quorvantyxelmandribostequilan"] > nll["Qu"] + 10
    result = lm_eval_wikitext.run_task(str(tmp_path), [doc], None, 512)  # lm-eval's reading of the long one
    assert math.isfinite(result["byte_perplexity"]) and result["tokens_scored"] == ids.shape[1] - 1
    lm_eval_nll = math.log(result["token_perplexity"]) * result["tokens_scored"]
    assert lm_eval_nll == pytest.approx(nll["Quorvantyxelmandribostequilan"], rel=1e-4)
