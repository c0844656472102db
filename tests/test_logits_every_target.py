"""`logits` carry the model's own probability of every target (issue 54, part 0): cross-entropy of `logits` is the
`labels=` loss at every position, first occurrences of unseen words, repeats beyond the window and literal `<unk>`
included, and the mixture stays normalised over all V + N outputs (`new_word`)."""

import sys

import pytest
import torch
from conftest import ROOT, tiny_model
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoModelForCausalLM, AutoTokenizer

from modeling_pointer_sentinel import PointerSentinelCache, pointer_mixture, pointer_target_log_prob
from modeling_pointer_sentinel.modeling_pointer_sentinel import Placeholders

sys.path.insert(0, str(ROOT / "examples"))
import lm_eval_wikitext  # noqa: E402

V, N, UNK = 23, 4, 3


def agree(model, ids, chunks=(None,)):
    """CE of logits == the labels loss per target, logits normalised, and chunked (cache carried) == whole."""
    with torch.no_grad():
        out = model(ids, labels=ids)
        from_logits = out.logits[:, :-1].log_softmax(-1).gather(-1, ids[:, 1:, None])[..., 0]
        assert torch.isfinite(from_logits).all()
        torch.testing.assert_close(from_logits, out.target_log_probs[:, :-1], atol=1e-5, rtol=0)
        if model.pointer is not None:
            torch.testing.assert_close(out.logits.logsumexp(-1), out.logits.new_zeros(ids.shape), atol=1e-5, rtol=0)
        for at in chunks:
            if at is None:
                continue
            cache = PointerSentinelCache()
            first = model(ids[:, :at], past_key_values=cache).logits
            torch.testing.assert_close(torch.cat([first, model(ids[:, at:], past_key_values=cache).logits], 1),
                                       out.logits, atol=1e-5, rtol=1e-5)  # fmt: skip
    return out


def raw_articles(n: int) -> list[str]:
    """The first n WikiText-2 test articles as raw text (lm-eval's detokeniser), each <unk> a made-up word, so the
    open-vocabulary tokenizer writes placeholders for them and for the words the detokeniser joins."""
    from lm_eval.tasks.wikitext.preprocess_wikitext import wikitext_detokenizer

    docs = []
    for doc in lm_eval_wikitext.articles()[:n]:  # every other <unk> one of seven made-up names (they recur)
        parts = doc.split("<unk>")
        doc = parts[0] + "".join(("<unk>" if i % 2 else f"Zor{chr(97 + i // 2 % 7)}dane") + part
                                 for i, part in enumerate(parts[1:]))  # fmt: skip
        docs.append(wikitext_detokenizer({"page": doc}))
    return docs


def test_wikitext_raw_text_with_unseen_words_scores_the_same_through_logits_and_labels():
    """Three test articles as raw text on the shipped WikiText-2 pointer folder: first occurrences, repeats in and out
    of the window, literal <unk> beside placeholders; the distribution normalised; two chunks equal the whole."""
    folder = ROOT / "pretrained" / "wt2-pointer-sentinel-lstm-2x200"
    tok, model = AutoTokenizer.from_pretrained(folder), AutoModelForCausalLM.from_pretrained(folder).double().eval()
    for doc in raw_articles(3):
        ids = torch.tensor([tok(doc)["input_ids"][:1500]])
        slots = ids[ids >= model.config.vocab_size]
        assert slots.unique().numel() >= 3 and (ids == model.config.unk_token_id).any()
        agree(model, ids, chunks=(ids.shape[1] // 2,))


def test_ptb_like_lower_case_raw_text_fills_the_slots_and_scores_the_same():
    """Lower-case raw text on the PTB pointer folder: many of a WikiText article's words are unseen in PTB's 10k (the
    slots filling up is the random test's)."""
    folder = ROOT / "pretrained" / "ptb-pointer-sentinel-lstm-2x200"
    tok, model = AutoTokenizer.from_pretrained(folder), AutoModelForCausalLM.from_pretrained(folder).double().eval()
    text = " ".join(raw_articles(2)).lower()
    ids = torch.tensor([tok(text)["input_ids"][:6000]])
    assert ids[ids >= model.config.vocab_size].unique().numel() >= 20
    agree(model, ids, chunks=(ids.shape[1] // 2,))


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_random_placeholder_heavy_text_scores_the_same(data):
    """Random text, half placeholders numbered in order of first occurrence (new words past the N slots read as
    <unk>, as the tokenizer writes them), with literal <unk>; every variant, chunked == whole."""
    T = data.draw(st.integers(2, 40))
    ids, used = [], 0
    for _ in range(T):
        kind = data.draw(st.sampled_from(["word", "unk", "new", "again"]))
        if kind == "new" and used < N:
            ids, used = ids + [V + used], used + 1
        elif kind == "again" and used:
            ids.append(V + data.draw(st.integers(0, used - 1)))
        else:
            ids.append(UNK if kind in ("unk", "new") else data.draw(st.integers(0, V - 1)))
    variant = data.draw(st.sampled_from([{}, {"use_pointer": False}, {"oov_pointer": True}, {"gate_type": "switch"}]))
    torch.manual_seed(data.draw(st.integers(0, 3)))
    model = tiny_model(oov_slots=N, unk_token_id=UNK, pointer_window=5, **variant).eval()
    agree(model, torch.tensor([ids]), chunks=(data.draw(st.integers(1, T - 1)),))


def test_generate_never_writes_a_new_slot_which_has_no_spelling():
    """<unk> made the likeliest word: generate suppresses it, and with it each row's next unused slot V + k (the new
    word's other surface), on every decode path; the row's used slots stay open to it."""
    model = tiny_model(oov_slots=N, unk_token_id=UNK, pointer_window=5).eval()
    with torch.no_grad():  # the sentinel takes g ~ 1 (q = 1, q.s large) and p_vocab(<unk>) ~ 1: P_new ~ 1
        model.lm_head.bias[UNK] = 30.0
        model.pointer.query.weight.zero_()
        model.pointer.query.bias.fill_(10.0)
        model.pointer.sentinel.fill_(10.0)
    model.generation_config.suppress_tokens = [UNK]
    prompt = torch.tensor([[1, 2, 5, 6], [1, 23, 2, 24]])
    for step in ("fast", "forward"):
        new = model.generate(prompt, max_new_tokens=6, do_sample=False, decode_step=step, pad_token_id=0)[:, 4:]
        assert (new[0] < V).all() and ((new[1] < V) | (new[1] == 23) | (new[1] == 24)).all(), (step, new)


@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("places", [None, Placeholders(V, N, UNK)])
def test_attention_that_underflows_in_float32_counts_in_logits_as_in_the_loss(grad, places):
    """float32 window slots whose log attention lies below exp()'s range (about -104) while the gate is smaller
    still: `pointer_mixture` (logits) and `pointer_target_log_prob` (the loss) decide "in the window" by one predicate
    (`in_window`) and sum the pointer's mass in log space, so every target scores the same through both, on the
    no-gradient (scatter) and the gradient (pairwise) paths, with and without placeholders."""
    torch.manual_seed(0)
    vocab = torch.randn(2, 5, V).log_softmax(-1).requires_grad_(grad)
    log_gate = torch.full((2, 5), -400.0)
    window = torch.tensor([0, 0, 5, 7, 7, 12]).expand(2, 5, 6).clone()  # a word can fill several slots
    window[..., :2] = torch.tensor([V, V + 1]) if places else window[..., :2]  # placeholders, or words
    log_attention = torch.tensor([-130.0, -160.0, -120.0, -140.0, -1e-3, -150.0]).log_softmax(-1).expand(2, 5, 6)
    log_attention = log_attention.masked_fill(torch.arange(6) == 3, -torch.inf)  # one empty slot
    assert (log_attention.exp()[..., :4] == 0).all()  # every slot but the last two underflows in probabilities
    logits = pointer_mixture(vocab, log_gate, log_attention, window, places)
    if places is not None:  # each target read as the loss reads it: a placeholder or <unk> sees <unk>'s p_vocab
        vocab = torch.cat([vocab, vocab[..., UNK : UNK + 1].expand(2, 5, N)], -1)
    for target in window[log_attention > -torch.inf].unique():  # the words the window holds
        targets = target.expand(2, 5)
        loss_side, _ = pointer_target_log_prob(vocab.gather(-1, targets[..., None])[..., 0], log_gate, log_attention,
                                               window, targets, places)  # fmt: skip
        torch.testing.assert_close(logits[..., target], loss_side, atol=1e-5, rtol=1e-6)
        assert (loss_side > -170).all()  # the pointer's underflowing mass, not the gate's e^-400, is what counts


ENTROPY_MODELS = {
    "placeholders": dict(oov_slots=N, unk_token_id=UNK, pointer_window=5),
    "plain, placeholders": dict(oov_slots=N, unk_token_id=UNK, use_pointer=False),
    "spelled": dict(oov_slots=8, unk_token_id=UNK, pointer_window=5, speller_size=6),
    "spelled, vocab_limit": dict(oov_slots=8, unk_token_id=UNK, pointer_window=5, speller_size=6, vocab_limit=13),
}


@pytest.mark.parametrize("kw", ENTROPY_MODELS.values(), ids=ENTROPY_MODELS.keys())
def test_a_hand_written_entropy_of_logits_is_finite_and_cross_entropy_still_equals_the_loss(kw):
    """Columns that cannot occur (unused placeholders, words inside a spelled word, cut words) hold the dtype's lowest
    value, not -inf, so -(p * log p).sum() is finite in float32 at every position; their probability stays 0."""
    model = tiny_model(**kw).eval()
    ids = torch.tensor([[1, 2, V, 5, V + 1, 6, V, 7]]) if "speller_size" not in kw else torch.tensor(
        [[1, 2, V + 97, V + 98, V + 256, 5, 6, V + 97, V + 98, V + 256, 7]])  # fmt: skip
    with torch.no_grad():
        out = model(ids, labels=ids)
    logits = out.logits
    assert logits.dtype == torch.float32
    p, log_p = logits.softmax(-1), logits.log_softmax(-1)
    entropy = -(p * log_p).sum(-1)
    assert torch.isfinite(entropy).all() and (entropy >= 0).all(), entropy
    assert (p == 0).any(), "no column that cannot occur: the case is not exercised"
    ce = torch.nn.functional.cross_entropy(logits[0, :-1], ids[0, 1:])
    torch.testing.assert_close(ce, out.loss, atol=1e-5, rtol=0)
