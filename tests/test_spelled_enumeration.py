"""Spell mode as a distribution over texts, by enumeration: on a tiny model whose words use a four-letter alphabet,
every string of at most MAX_LENGTH characters over the alphabet and a space is scored as the ids a saved and loaded
tokenizer gives it (after an `<eos>`, closed by one), from the model's `logits`. Distinct texts have distinct ids, so
their probabilities sum to at most 1; and, exactly, the enumerated texts plus the mass that leaves the enumeration
through well-formed ids at each prefix add up to 1 (none goes to malformed ids, and no prefix reads the ids after
it)."""

import itertools
import math

import pytest
import torch
from conftest import tiny_model

ALPHABET, MAX_LENGTH = "abcd", 3
# single letters a, b, d are spelled (and copied through their bytes when repeated); ab, ba, c, cab are words
LINES = ["ab c ba", "c ab c", "ba cab ab"]
N, L = 8, 3  # oov_slots > pointer_window: a window word keeps its slot
VARIANTS = {"pointer": {"oov_pointer": True}, "plain": {"use_pointer": False}}


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    from transformers import AutoTokenizer

    from modeling_pointer_sentinel.tokenization import build_word_level_tokenizer, spelling_vocabulary

    folder = tmp_path_factory.mktemp("spelling")
    spelling_vocabulary(build_word_level_tokenizer(LINES, text_rules="whitespace")).save_pretrained(folder)
    return AutoTokenizer.from_pretrained(folder)


def spell_model(tok, **overrides):
    """A tiny spell-mode model over `tok`'s words with much of its mass on the enumerated texts: a large unseen-word
    share and `<eos>`, a keen pointer, a speller that writes the alphabet's letters and ends words early. Otherwise
    random, so no term of the mixture is negligible."""
    kw = dict(vocab_size=tok.word_vocab_size, oov_slots=N, unk_token_id=tok.unk_token_id, pointer_window=L,
              speller_size=6, eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id)  # fmt: skip
    m = tiny_model(**{**kw, **overrides}).double().eval()
    with torch.no_grad():
        m.lm_head.bias[tok.unk_token_id] = 3.0
        m.lm_head.bias[tok.eos_token_id] = 2.0
        if m.pointer is not None:
            m.pointer.sentinel.fill_(-1.0)
        m.speller.out.bias.fill_(-3.0)
        m.speller.out.bias[[ord(c) for c in ALPHABET] + [256]] = 3.0  # 256: `</w>`
    return m


def every_text(tok) -> dict[tuple, str]:
    """Every string of at most MAX_LENGTH characters over ALPHABET and a space, the empty one included, by its ids."""
    strings = ["".join(s) for n in range(MAX_LENGTH + 1) for s in itertools.product(ALPHABET + " ", repeat=n)]
    texts = {}
    for s, ids in zip(strings, tok(strings)["input_ids"], strict=True):
        canonical = " ".join(s.split())
        if s == canonical:
            assert tok.decode(ids) == s
            assert texts.setdefault(tuple(ids), s) == s, "two texts share their ids"
        else:  # spaces at the ends or doubled read as the text without them
            assert ids == tok(canonical)["input_ids"], repr(s)
    return texts


def test_every_text_has_ids_of_its_own_that_decode_back(tok):
    """The tokenizer is injective on the enumerated texts (`every_text` asserts it), a word in the vocabulary is its id
    and any other word its bytes then `</w>`."""
    V = tok.word_vocab_size
    texts = every_text(tok)
    assert len(texts) == 101  # the empty text; 4 + 16 + 64 one-word texts; 16 of two one-letter words
    ab, c = tok.convert_tokens_to_ids(["ab", "c"])
    assert texts[(ab,)] == "ab" and texts[(V + ord("d"), V + 256, c)] == "d c"
    assert texts[(V + ord("a"), V + ord("c"), V + 256)] == "ac"


def log_probs(m, tok, texts: dict[tuple, str]):
    """Each text's log p(ids, `<eos>` | `<eos>`), and each prefix's next-id log probs (the prefix from the start's
    `<eos>`, as a tuple of ids). A row at a time would do; rows of one length go in one batch."""
    eos = tok.eos_token_id
    rows = [(eos, *ids, eos) for ids in texts]
    scores, after = {}, {}
    with torch.no_grad():
        for _, group in itertools.groupby(sorted(rows, key=len), key=len):
            x = torch.tensor(list(group))
            logits = m(x).logits
            picked = logits[:, :-1].gather(-1, x[:, 1:, None])[..., 0]
            for row, each, lp in zip(x.tolist(), logits, picked.sum(-1).tolist(), strict=True):
                scores[tuple(row[1:-1])] = lp
                for t in range(len(row) - 1):
                    prefix = tuple(row[: t + 1])
                    if prefix in after:  # the past never reads the future: one prefix, one distribution
                        torch.testing.assert_close(each[t], after[prefix], atol=1e-12, rtol=0)
                    after[prefix] = each[t]
    return scores, after


@pytest.mark.parametrize("variant", VARIANTS.values(), ids=VARIANTS.keys())
def test_the_texts_probabilities_sum_to_at_most_one(tok, variant):
    """Each text's ids end at their `<eos>`, so no text's ids begin another's: the texts are disjoint events."""
    scores, _ = log_probs(spell_model(tok, **variant), tok, every_text(tok))
    total = math.fsum(math.exp(s) for s in scores.values())
    assert 0.1 < total <= 1 + 1e-9, total  # 0.67 with the pointer, 0.29 without: not an empty enumeration


@pytest.mark.parametrize("variant", VARIANTS.values(), ids=VARIANTS.keys())
def test_the_texts_and_the_mass_leaving_the_enumeration_add_up_to_one(tok, variant):
    """At each prefix, the next ids that no enumerated text takes carry mass out of the enumeration: words or bytes
    after a word (or the start), bytes, `</w>` or `<+w>` after a byte; any other id is malformed and must get none.
    Leaves (texts) plus the leaving mass, each times its prefix's probability, is then exactly 1."""
    V, eos = tok.word_vocab_size, tok.eos_token_id
    scores, after = log_probs(spell_model(tok, **variant), tok, every_text(tok))
    prefix_log_p, taken = {}, {}
    for prefix in sorted(after, key=len):
        prefix_log_p[prefix] = 0.0 if len(prefix) == 1 else prefix_log_p[prefix[:-1]] + after[prefix[:-1]][prefix[-1]]
        taken.setdefault(prefix[:-1], set()).add(prefix[-1])
    for ids, s in scores.items():  # the chain of next-id log probs gives each text's score
        assert math.isclose(prefix_log_p[(eos, *ids)] + after[(eos, *ids)][eos].item(), s, abs_tol=1e-9)
        taken.setdefault((eos, *ids), set()).add(eos)
    parts = [math.exp(s) for s in scores.values()]
    for prefix, log_p in after.items():
        well_formed = torch.ones(V + 258, dtype=torch.bool)
        if V <= prefix[-1] < V + 256:  # inside a word: no word id, `<eos>` included
            well_formed[:V] = False
        else:  # at a word boundary: no `</w>` or `<+w>`
            well_formed[V + 256 :] = False
        assert (log_p[~well_formed] == torch.finfo(log_p.dtype).min).all(), f"mass on malformed ids after {prefix}"
        well_formed[list(taken[prefix])] = False
        parts.append(math.exp(prefix_log_p[prefix] + log_p[well_formed].logsumexp(-1).item()))
    assert math.isclose(math.fsum(parts), 1.0, abs_tol=1e-9), math.fsum(parts)
