"""Open vocabulary, the model's side: placeholder ids V ... V+N-1 (`config.oov_slots`) for words outside the
vocabulary. A placeholder reads `<unk>`'s embedding, the pointer copies it, and `<unk>`'s vocabulary share is split
between the window's placeholders and a new word. Checked against the loop reference, and on every decode path."""

import json
import math

import pytest
import torch
from conftest import finite, oov_heads_counting, tiny_model
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import reference_batch
from test_fast_decode import DECODING, assert_same, run, steps_against_forward

from modeling_pointer_sentinel import PointerSentinelCache, PointerSentinelConfig, pointer_mixture
from modeling_pointer_sentinel.generation_pointer_sentinel import write_back
from modeling_pointer_sentinel.modeling_pointer_sentinel import Placeholders, sliding_window
from modeling_pointer_sentinel.training import simulate_unseen_words

V, N, UNK = 23, 4, 3  # tiny_model's vocabulary; placeholders are 23 ... 26
OPEN = dict(oov_slots=N, unk_token_id=UNK)
VARIANTS = {
    "sentinel": {},
    "adaptive": dict(adaptive_softmax_cutoffs=[4, 10], adaptive_softmax_div_value=2.0),
    "switch_zoneout": dict(gate_type="switch", zoneout=0.3, tie_word_embeddings=False, hidden_size=10),
    "plain": dict(use_pointer=False),
    "oov_pointer": dict(oov_pointer=True),  # the placeholders' own embedding and pointer query
}
# Row 0 repeats placeholders 23 and 24 and a literal <unk>; row 1 (left-padded) has its own 23 and 25.
BATCH = torch.tensor([[1, 23, 2, 24, 3, 23, 5, 24, 1], [0, 0, 0, 0, 25, 2, 23, 25, 3]])
MASK = torch.tensor([[1] * 9, [0] * 4 + [1] * 5])


def model(variant="sentinel", **kw):
    return oov_heads_counting(tiny_model(pointer_window=6, **OPEN, **VARIANTS[variant], **kw).eval())


def copying(m):
    """The pointer made to dominate: q = 0 attends uniformly, a zero sentinel leaves g = 1/(n+1)."""
    with torch.no_grad():
        m.pointer.sentinel.fill_(0.0)
        m.pointer.query.weight.zero_()
    return m


@pytest.mark.parametrize("variant", VARIANTS)
def test_mixture_with_placeholders_matches_loop_reference(variant):
    m = model(variant).double()
    out = m(BATCH[:1], labels=BATCH[:1])
    p, g, a, _, _ = reference_batch(m, BATCH[:1])
    assert out.logits.shape[-1] == V + N
    # the mixture's logits are log-probabilities; the plain LSTM's are U h + b, so compare their softmax
    torch.testing.assert_close(torch.softmax(out.logits, -1), p, atol=1e-10, rtol=1e-8)
    torch.testing.assert_close(p.sum(-1), torch.ones(1, 9, dtype=p.dtype))  # normalised over all V + N outputs
    torch.testing.assert_close(out.gate, g)
    # every target scores its own column, a first occurrence included (`new_word`)
    nll = [-math.log(p[0, t, int(BATCH[0, t + 1])]) for t in range(8)]
    assert out.loss.item() == pytest.approx(sum(nll) / len(nll), rel=1e-9)


def test_unk_share_goes_to_window_placeholders_and_new_words():
    """Row 0 position 2 holds 23 in its window: 23's probability is its pointer mass times 1 + u / (g + M); the new
    word's u g / (g + M) goes 1/4 to <unk> and 3/4 to the next unused slot, 24 (k = 1 slot used, no literal <unk>:
    (0 + 1/2) / (0 + 1 + 1)); the slots after it get nothing."""
    m = model().double()
    out = m(BATCH[:1])
    g, a = out.gate[0, 2].item(), out.pointer_attention[0, 2]
    vocab = torch.softmax(out.vocab_logits[0, 2], -1)
    u, M = g * vocab[UNK].item(), a[-2].item()  # the window's placeholder: position 1 (23)
    assert out.logits[0, 2, 23].exp().item() == pytest.approx(M * (1 + u / (g + M)), rel=1e-9)
    assert out.logits[0, 2, UNK].exp().item() == pytest.approx(u * g / (g + M) / 4, rel=1e-9)
    assert out.logits[0, 2, 24].exp().item() == pytest.approx(u * g / (g + M) * 3 / 4, rel=1e-9)
    assert out.logits[0, 2, 25:].exp().sum().item() == 0.0


@pytest.mark.parametrize("variant", VARIANTS)
def test_corpus_form_text_scores_exactly_as_closed_vocabulary(variant):
    """Ids below V (a literal <unk> included): every output but <unk> and the slots, and every target's log-probability
    but <unk>'s, are bit for bit the closed-vocabulary model's. <unk> shares its new-word mass with slot 0: at the
    (n+1)-th literal <unk> of a row it keeps (n + 1/2) / (n + 1) of it (`new_word`)."""
    ids = torch.tensor([[1, 3, 2, 3, 5, 1, 2, 3, 7], [4, 4, 3, 9, 3, 2, 1, 0, 3]])
    kw = {k: v for k, v in VARIANTS[variant].items() if k != "oov_pointer"}
    closed_model = tiny_model(pointer_window=6, unk_token_id=UNK, **kw).eval()
    open_model = model(variant)
    missing = open_model.load_state_dict(closed_model.state_dict(), strict=False).missing_keys
    own = {"model.oov_embedding", "pointer.oov_query.weight", "pointer.oov_query.bias", "pointer.oov_repeat.weight",
           "pointer.oov_repeat.bias", "pointer.oov_context.weight", "pointer.oov_context.bias"}  # fmt: skip
    assert set(missing) == (own
                            if variant == "oov_pointer" else set())  # fmt: skip
    closed, open_ = closed_model(ids, labels=ids), open_model(ids, labels=ids)
    other = torch.arange(V) != UNK
    assert torch.equal(open_.logits[..., :V][..., other], closed.logits[..., other])
    y = ids[:, 1:]
    assert torch.equal(open_.target_log_probs[:, :-1][y != UNK], closed.target_log_probs[:, :-1][y != UNK])
    assert (open_.target_log_probs[:, :-1][y == UNK] < closed.target_log_probs[:, :-1][y == UNK]).all()
    lowest = torch.finfo(open_.logits.dtype).min  # the unused slots: probability 0
    assert torch.isfinite(open_.logits[..., V]).all() and (open_.logits[..., V + 1 :] == lowest).all()


def test_mixture_without_placeholders_is_bit_exact_with_many_literal_unk():
    """A window of 100 full of literal <unk>s (corpus form): summing their mass again would round differently in a
    third of the rows, so <unk>'s entry is kept as the closed-vocabulary mixture wrote it."""
    torch.manual_seed(0)
    vocab, pointer = torch.log_softmax(torch.randn(64, V), -1), torch.log_softmax(torch.randn(64, 101), -1)
    ids = torch.randint(0, 6, (64, 100))  # a third of them <unk> (3)
    closed = pointer_mixture(vocab, pointer[:, -1], pointer[:, :100], ids)
    opened = pointer_mixture(vocab, pointer[:, -1], pointer[:, :100], ids, Placeholders(V, N, UNK))
    assert torch.equal(opened[:, :V], closed) and torch.isneginf(opened[:, V:]).all()


@pytest.mark.parametrize("variant", ["sentinel", "adaptive"])
def test_training_with_placeholder_targets_has_finite_gradients(variant):
    m = model(variant, input_dropout=0.2).train()
    out = m(BATCH, attention_mask=MASK, labels=BATCH.masked_fill(MASK == 0, -100))
    out.loss.backward()
    assert torch.isfinite(out.loss)
    assert all(torch.isfinite(p.grad).all() for p in m.parameters() if p.grad is not None)


def test_mixture_gradient_path_equals_scoring_path():
    """pointer_mixture with a gradient (per-slot word sums) equals its scatter path, and its gradient is finite."""
    m = model().double()
    with torch.no_grad():
        out = m(BATCH[:1])
    ids = sliding_window(torch.cat([BATCH[:1].new_zeros(1, 6), BATCH[:1]], 1), 6)[0]
    vocab = torch.log_softmax(out.vocab_logits[0], -1).requires_grad_()
    log_gate = out.gate[0].log().requires_grad_()
    places = Placeholders.of(m.config)
    zero = torch.zeros(1, dtype=torch.long)
    used, unk_count = places.history(BATCH[:1], torch.ones_like(BATCH[:1], dtype=torch.bool), zero, zero)
    places = places._replace(used=used[0], unk_count=unk_count[0])
    with_grad = pointer_mixture(vocab, log_gate, out.pointer_attention[0].log(), ids, places)
    torch.testing.assert_close(finite(with_grad), out.logits[0])
    with_grad[torch.isfinite(with_grad)].sum().backward()
    assert torch.isfinite(vocab.grad).all() and torch.isfinite(log_gate.grad).all()


@pytest.mark.parametrize("decoding", DECODING)
@pytest.mark.parametrize("variant", VARIANTS)
def test_fast_generate_equals_forward_with_placeholders(variant, decoding):
    m = model(variant)
    assert_same(run(m, "fast", ids=BATCH, mask=MASK, **DECODING[decoding]),
                run(m, "forward", ids=BATCH, mask=MASK, **DECODING[decoding]))  # fmt: skip


@pytest.mark.parametrize("variant", ["sentinel", "oov_pointer"])
def test_decode_step_equals_forward_with_placeholders(variant):
    cache, state = steps_against_forward(model(variant), BATCH, MASK, torch.tensor([24, 26]), 14)
    mirror = PointerSentinelCache()  # and the cache it writes back, c_i oldest first too
    write_back(state, mirror, 14)
    assert (cache.window_context is None) == (variant != "oov_pointer")
    for name in ("window_states", "window_context"):
        torch.testing.assert_close(getattr(mirror, name), getattr(cache, name), msg=name)
    assert torch.equal(mirror.oov_used, cache.oov_used) and torch.equal(mirror.unk_count, cache.unk_count)


def test_chunks_after_right_padding_score_as_the_whole_with_placeholders():
    """Each window key's c_i (the state before it) outlives its chunk: after a right-padded chunk, whose padding the
    cache sorts in front of its keys, the next chunk scores as the unpadded whole (the first word a placeholder)."""
    m = model("oov_pointer")
    whole = m(torch.tensor([[23, 1, 2, 24, 3, 23, 5, 24, 1]])).logits
    cache = PointerSentinelCache()
    m(torch.tensor([[23, 1, 2, 24, 0, 0]]), attention_mask=torch.tensor([[1, 1, 1, 1, 0, 0]]), past_key_values=cache)
    torch.testing.assert_close(m(torch.tensor([[3, 23, 5, 24, 1]]), past_key_values=cache).logits, whole[:, 4:])


@pytest.mark.parametrize("variant", ["sentinel", "oov_pointer"])
def test_compiled_generate_equals_fast_with_placeholders(variant):
    m = copying(model(variant))
    assert_same(run(m, "compiled", ids=BATCH, mask=MASK, max_new_tokens=8),
                run(m, "fast", ids=BATCH, mask=MASK, max_new_tokens=8))  # fmt: skip


@pytest.mark.parametrize("kw", [dict(do_sample=False), dict(do_sample=True, top_k=4), dict(num_beams=3)])
def test_generation_copies_each_rows_own_placeholders(kw):
    """A left-padded batch whose rows hold different placeholders: each row copies only its own, never <unk>."""
    m = copying(model())
    m.generation_config.suppress_tokens = [UNK]
    torch.manual_seed(0)
    out = m.generate(BATCH, attention_mask=MASK, max_new_tokens=12, pad_token_id=0, eos_token_id=None, **kw)
    new = out[:, BATCH.shape[1] :]
    assert (new >= V).any()  # copies happen
    for row, own in ((0, {23, 24}), (1, {23, 25})):
        assert {t for t in new[row].tolist() if t >= V} <= own
    assert not (new == UNK).any()


def test_generate_scores_are_the_mixture_and_transition_scores_index_them():
    """Two rows: transformers finds a row's scores at row * vocab_size, so a width other than V + N misreads row 1."""
    m = copying(model())
    out = m.generate(BATCH, attention_mask=MASK, max_new_tokens=5, do_sample=False, output_scores=True,
                     return_dict_in_generate=True, pad_token_id=0, eos_token_id=None)  # fmt: skip
    mask = torch.cat([MASK, torch.ones(2, 5, dtype=MASK.dtype)], 1)
    fwd = m(out.sequences[:, :-1], attention_mask=mask[:, :-1]).logits[:, BATCH.shape[1] - 1 :]
    torch.testing.assert_close(finite(torch.stack(out.scores, 1)), fwd, atol=1e-5, rtol=1e-5)
    steps = m.compute_transition_scores(out.sequences, out.scores)
    want = fwd.gather(-1, out.sequences[:, BATCH.shape[1] :, None])[..., 0]
    torch.testing.assert_close(steps, want, atol=1e-5, rtol=1e-5)


def test_ids_beyond_the_placeholders_and_a_missing_unk_are_clear_errors():
    with pytest.raises(ValueError, match=r"input_ids must lie in \[0, 27\)"):
        model()(torch.tensor([[1, 27]]))
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 27\)"):
        model()(torch.tensor([[1, 2]]), labels=torch.tensor([[1, 30]]))
    with pytest.raises(ValueError, match=r"input_ids must lie in \[0, 23\)"):
        tiny_model()(torch.tensor([[1, 23]]))
    with pytest.raises(ValueError, match="oov_slots needs unk_token_id"):
        PointerSentinelConfig(vocab_size=23, oov_slots=4)
    with pytest.raises(ValueError, match="oov_slots must be >= 0"):
        PointerSentinelConfig(vocab_size=23, oov_slots=-1, unk_token_id=3)
    for closed in (dict(), dict(oov_slots=4, unk_token_id=3, use_pointer=False)):
        with pytest.raises(ValueError, match="oov_pointer needs oov_slots > 0 and use_pointer"):
            PointerSentinelConfig(vocab_size=23, oov_pointer=True, **closed)


def simulate_reference(ids, vocab_size, oov_slots, rate, max_count, block, seed=0, window=None):
    """simulate_unseen_words as a plain loop: each block's words drawn as the library draws them (one uniform per
    distinct qualifying word, in first-occurrence order), then slots token by token: a word keeps the slot it owns,
    else takes the free slot (no use within the last window - 1 positions) used longest ago, never-used first by
    number, else stays itself."""
    window = block if window is None else window
    counts, seq = torch.bincount(ids, minlength=vocab_size).tolist(), ids.tolist()
    g, chosen = torch.Generator().manual_seed(seed), []
    for s in range(0, len(seq), block):
        part, words = seq[s : s + block], []
        for w in part:
            if counts[w] <= max_count and w not in words:
                words.append(w)
        pick = {w for w, r in zip(words, torch.rand(len(words), generator=g).tolist(), strict=True) if r < rate}
        chosen += [w in pick for w in part]
    owner, last, out = [None] * oov_slots, [None] * oov_slots, list(seq)
    for t, w in enumerate(seq):
        if not chosen[t]:
            continue
        if w in owner:
            k = owner.index(w)
        else:
            free = [k for k in range(oov_slots) if last[k] is None or t - last[k] >= window]
            if not free:
                continue
            k = min(free, key=lambda k: (-1 if last[k] is None else last[k], k))
            owner[k] = w
        last[k], out[t] = t, vocab_size + k
    return torch.tensor(out)


def zipf_ids(n, vocab_size, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.multinomial(1 / torch.arange(1, vocab_size + 1).double(), n, replacement=True, generator=g)


def window_clashes(ids, out, vocab_size, window):
    """Windows (every `window` consecutive positions) holding a word under two slots or a slot for two words."""
    bad = 0
    for s in range(max(len(ids) - window + 1, 1)):
        pairs = {(int(a), int(b)) for a, b in zip(ids[s : s + window], out[s : s + window], strict=True)
                 if b >= vocab_size}  # fmt: skip
        bad += not len({a for a, _ in pairs}) == len(pairs) == len({b for _, b in pairs})
    return bad


@pytest.mark.parametrize(
    "slots, window, block, rate, max_count",
    [(8, 5, 20, 0.5, 60), (4, 10, 10, 1.0, 200), (64, 16, 50, 0.3, 100), (3, 2, 7, 0.8, 3000)],
)
def test_simulated_unseen_words_match_the_loop_reference(slots, window, block, rate, max_count):
    ids = zipf_ids(3000, 40)
    out = simulate_unseen_words(ids, 40, slots, rate, max_count, block, seed=1, window=window)
    assert torch.equal(out, simulate_reference(ids, 40, slots, rate, max_count, block, seed=1, window=window))
    assert torch.equal(out, simulate_unseen_words(ids, 40, slots, rate, max_count, block, seed=1, window=window))
    assert torch.equal(simulate_unseen_words(ids, 40, slots, 0.0, max_count, block, window=window), ids)
    changed = out != ids
    assert changed.any() and (torch.bincount(ids)[ids[changed]] <= max_count).all()  # only rare words play unseen
    assert ((out[changed] >= 40) & (out[changed] < 40 + slots)).all() and (out[~changed] < 40).all()
    assert window_clashes(ids, out, 40, window) == 0
    with pytest.raises(TypeError):  # no silent default: the caller names the pointer window
        simulate_unseen_words(ids, 40, slots, rate, max_count, block, seed=1)


def test_simulated_unseen_words_meet_the_rate_at_every_block_position():
    """The rate is the share of qualifying tokens renamed, at the start of a block as at its end: no cap in
    first-occurrence order (the old one of oov_slots // 2 words a block renamed 60% at its start, 18% at its end)."""
    ids = zipf_ids(200_000, 3000, seed=2)
    qualifying = torch.bincount(ids)[ids] <= 200
    assert 0.3 < qualifying.double().mean() < 0.7
    where = torch.arange(ids.numel()) % 1000
    for rate in (1.0, 0.5):
        renamed = simulate_unseen_words(ids, 3000, 256, rate, 200, 1000, seed=3, window=100) >= 3000
        assert not (renamed & ~qualifying).any()
        if rate == 1:  # oov_slots >= window: a slot is always free, every qualifying token is renamed
            assert torch.equal(renamed, qualifying)
        shares = [renamed[qualifying & (where // 250 == q)].double().mean().item() for q in range(4)]
        assert all(abs(r - rate) < 0.03 for r in shares), shares


def test_simulated_unseen_words_keep_a_slot_across_a_block_boundary():
    # word 5 (ids 0, 3 | 4) in both blocks of 4 keeps slot 0; 6 takes the free slot 1; 1 is too frequent to play one
    ids = torch.tensor([5, 1, 1, 5, 5, 6, 1, 6, 1])
    out = simulate_unseen_words(ids, 10, 2, 1.0, max_count=3, block=4, window=3)
    assert out.tolist() == [10, 1, 1, 10, 10, 11, 1, 11, 1]
    # a slot whose word left the window passes to a new word (c takes a's slot 0; a comes back to b's slot 1) ...
    a, b, c = 7, 8, 9
    ids = torch.tensor([a, b, c, a])
    assert simulate_unseen_words(ids, 10, 2, 1.0, 5, 4, window=2).tolist() == [10, 11, 10, 11]
    # ... and while every slot is in a window with it, a new word stays itself (c), never sharing a slot
    assert simulate_unseen_words(ids, 10, 2, 1.0, 5, 4, window=3).tolist() == [10, 11, c, 10]


def test_simulated_unseen_words_refuse_a_block_shorter_than_the_pointer_window():
    ids = zipf_ids(500, 40)
    with pytest.raises(ValueError, match=r"^unseen_word_block \(50\) must be at least the pointer window \(100 "):
        simulate_unseen_words(ids, 40, 256, 1.0, 1000, block=50, window=100)
    simulate_unseen_words(ids, 40, 256, 1.0, 1000, block=100, window=100)  # equal is fine


@settings(max_examples=60, deadline=None)
@given(
    ids=st.lists(st.integers(0, 11), min_size=1, max_size=200),
    slots=st.integers(2, 12),
    window=st.integers(1, 15),
    extra=st.integers(0, 30),
    rate=st.sampled_from([0.0, 0.3, 1.0]),
    max_count=st.integers(0, 60),
    seed=st.integers(0, 3),
)
def test_simulated_unseen_words_never_clash_in_a_window(ids, slots, window, extra, rate, max_count, seed):
    ids = torch.tensor(ids)
    out = simulate_unseen_words(ids, 12, slots, rate, max_count, window + extra, seed, window=window)
    assert window_clashes(ids, out, 12, window) == 0
    qualifying = torch.bincount(ids, minlength=12)[ids] <= max_count
    assert not ((out >= 12) & ~qualifying).any() and torch.equal(out[out < 12], ids[out < 12])
    if rate == 1 and slots >= window:
        assert torch.equal(out >= 12, qualifying)


def test_unseen_word_simulation_measures_windows_as_a_scan_does():
    """examples/unseen_word_simulation.py: its window figures against a plain scan of every window, on the old
    simulation (which clashes across block boundaries) and the new one (which does not)."""
    import numpy as np

    sim = example("unseen_word_simulation")
    ids = zipf_ids(3000, 40)
    for out in (sim.before(ids, 40, 8, 1.0, 60, 50), simulate_unseen_words(ids, 40, 8, 0.7, 60, 50, window=5)):
        stats = sim.unseen_word_stats(ids.numpy(), out.numpy(), 40, 60, 50, 5)
        two_slots = two_words = mixed = 0
        for s in range(3000 - 5 + 1):
            a, b = ids[s : s + 5].tolist(), out[s : s + 5].tolist()
            slots_of, words_of, kinds = {}, {}, {}
            for x, y in zip(a, b, strict=True):
                if y >= 40:
                    slots_of.setdefault(x, set()).add(y)
                    words_of.setdefault(y, set()).add(x)
                if torch.bincount(ids)[x] <= 60:
                    kinds.setdefault(x, set()).add(y >= 40)
            two_slots += any(len(v) > 1 for v in slots_of.values())
            two_words += any(len(v) > 1 for v in words_of.values())
            mixed += any(len(v) > 1 for v in kinds.values())
        n = 3000 - 5 + 1
        assert np.isclose(stats["windows_with_word_under_two_slots"]["all"], two_slots / n)
        assert np.isclose(stats["windows_with_slot_for_two_words"]["all"], two_words / n)
        assert np.isclose(stats["windows_with_word_as_itself_and_placeholder"]["all"], mixed / n)
    assert stats["windows_with_word_under_two_slots"]["all"] == stats["windows_with_slot_for_two_words"]["all"] == 0
    # one pair, positions 3 and 5: of the windows of 4 (starts 0..8), those starting at 2 and 3 hold both
    assert sim.bad_windows(12, 4, np.array([3]), np.array([5])).tolist() == [s in (2, 3) for s in range(9)]


def example(name):
    """An examples/ script as a module."""
    import importlib
    import sys

    from conftest import ROOT

    sys.path.insert(0, str(ROOT / "examples"))
    return importlib.import_module(name)


def test_renamed_names_reads_the_split_asked_for():
    rn = example("renamed_names")
    valid, test = rn.documents("wt2", "validation"), rn.documents("wt2", "test")
    assert (len(valid), len(test)) == (60, 62)
    assert valid[0].split("\n")[1] == " = Homarus gammarus = " and test[0].split("\n")[1] == " = Robert <unk> = "
    assert rn.parser().parse_args(["folder"]).split == "validation"  # where choices are made


def ptb_files(d):
    """A small PTB-like folder: training counts make `kappa` rare (3) and `zeta` frequent (200); the test split is 120
    lines, segments of 100 and 20: kappa three times in the first (lines 0, 1, 60), once in the second."""
    (d / "ptb.train.txt").write_text(" zeta the a b\n" * 200 + " kappa b\n" * 3 + " sigma the\n" * 50)
    lines = [" the a b the a"] * 120
    for i, line in ((0, " the kappa zeta a"), (1, " kappa zeta the"), (60, " a kappa b zeta"), (110, " kappa the")):
        lines[i] = line
    lines[2] = " <unk> N the <unk> N"  # <unk> and N recur but are never names
    (d / "ptb.test.txt").write_text("\n".join(lines) + "\n")
    (d / "ptb.valid.txt").write_text(" the a\n" * 5)
    return d


def test_renamed_names_ptb_renames_recurring_rare_words_within_segments(tmp_path):
    from modeling_pointer_sentinel.tokenization import build_word_level_tokenizer, open_vocabulary

    rn = example("renamed_names")
    d = ptb_files(tmp_path)
    docs = rn.documents("ptb", "test", str(d))
    assert [doc.count("\n") for doc in docs] == [100, 20]
    lines = (d / "ptb.train.txt").read_text().splitlines() + ["<unk> N"]
    tok = open_vocabulary(build_word_level_tokenizer(lines), oov_slots=8)
    vocab = tok.backend_tokenizer.get_vocab()
    counts = rn.training_counts(str(d))
    assert counts["kappa"] == 3 and counts["zeta"] == 200
    first, second = (tok.backend_tokenizer.encode(doc, add_special_tokens=False).ids for doc in docs)
    assert rn.rare_words(first, vocab, counts) == [vocab["kappa"]]  # not zeta (frequent), <unk>, N, the, a, b
    assert rn.rare_words(second, vocab, counts) == []  # kappa once in the segment
    assert rn.rare_words(first, vocab, counts, max_count=200) == [vocab[w] for w in ("kappa", "zeta", "a")]
    words = rn.made_up_words(8, vocab)
    assert words == rn.made_up_words(8, vocab) and len(set(words)) == 8
    assert all(w.isalpha() and w.islower() and w not in vocab for w in words)
    ids = tok(" ".join(words))["input_ids"]
    assert sorted(set(ids)) == list(range(len(vocab) - 8, len(vocab)))  # the tokenizer gives each one a placeholder
    # end to end on a tiny pointer model: kappa's later occurrences in the first segment, the next line's in the window
    folder = tmp_path / "model"
    tiny_model(vocab_size=len(vocab) - 8, oov_slots=8, unk_token_id=tok.unk_token_id, pointer_window=10,
               eos_token_id=tok.convert_tokens_to_ids("<eos>")).save_pretrained(folder)  # fmt: skip
    tok.save_pretrained(folder)
    threads = torch.get_num_threads()
    (r,) = rn.main([str(folder), "--dataset", "ptb", "--data", str(d), "--split", "test", "--output",
                    str(tmp_path / "out.json"), "--num_threads", str(threads)])  # fmt: skip
    assert torch.is_grad_enabled() and torch.get_num_threads() == threads  # the test process as it was
    assert (r["dataset"], r["split"], r["cases"], r["in_window"]) == ("ptb", "test", 2, 1)
    for part in ("all", "in_window"):  # the paired difference is the difference of the two figures, over the same cases
        diff = r["renamed_minus_real"][part]
        for key in ("top1", "mean_log_p"):
            assert diff[key]["mean"] == pytest.approx(r["renamed"][part][key] - r["real"][part][key], abs=1e-12)
        assert diff["top1"]["n"] == diff["mean_log_p"]["n"] == (2 if part == "all" else 1)
    assert json.loads((tmp_path / "out.json").read_text()) == [r]


def test_renamed_names_paired_difference_is_the_per_case_mean_and_its_standard_error():
    rn = example("renamed_names")
    d = rn.paired_difference([1, 0, 1, 1], [0, 0, 1, 0])  # per-case differences 1, 0, 0, 1
    assert d["n"] == 4 and d["mean"] == 0.5
    assert d["se"] == pytest.approx((1 / 3) ** 0.5 / 2)  # sample sd sqrt(1/3), over sqrt(4)
    # a shift shared by both copies leaves no error: what the pairing removes (two means' own errors would not)
    same = rn.paired_difference([-5.0, -1.0, -3.0], [-5.5, -1.5, -3.5])
    assert same["mean"] == pytest.approx(0.5) and same["se"] == pytest.approx(0.0, abs=1e-12)
    assert rn.paired_difference([1.0], [0.0])["se"] is None  # one case: no error to give (and JSON has no NaN)
    assert rn.paired({"mean": 0.021, "se": 0.0051}, ".1%") == "+2.1% ± 0.5%"
    with pytest.raises(ValueError):
        rn.paired_difference([1, 0], [1])


def test_renamed_names_command_line_mistakes(tmp_path, capsys):
    rn = example("renamed_names")
    for argv, message in (
        (["--dataset", "ptb"], "--dataset ptb needs --data DIR"),
        (["--dataset", "ptb", "--data", str(tmp_path)], "no ptb.train.txt there"),
        (["--data", str(tmp_path)], "--data is for --dataset ptb"),
        (["--split", "train"], "invalid choice: 'train'"),
    ):
        with pytest.raises(SystemExit):
            rn.main([str(tmp_path), *argv])
        assert message in capsys.readouterr().err


def fine_tuning_folders(tmp_path, closed: bool = True):
    """A small corpus, an open-vocabulary tokenizer (8 placeholders) over it, and tiny models saved with it under
    tmp_path: "open" (oov_slots 8) and, with `closed`, "closed" (none). Returns the train.py flags that fine-tune
    tmp_path/NAME on that corpus into OUT: a function (name, out) -> flags."""
    from test_train import TINY, repeated_sentences

    from modeling_pointer_sentinel.tokenization import build_word_level_tokenizer, open_vocabulary

    corpus = repeated_sentences(tmp_path, 4, 40, (4, 9), (200, 20, 20))
    tok = open_vocabulary(build_word_level_tokenizer((corpus / "train.txt").read_text().splitlines()), oov_slots=8)
    for name, slots in (("open", 8), ("closed", 0))[: 2 if closed else 1]:
        tiny_model(vocab_size=len(tok) - 8, oov_slots=slots, unk_token_id=tok.unk_token_id, pointer_window=10)\
            .save_pretrained(tmp_path / name)  # fmt: skip
        tok.save_pretrained(tmp_path / name)
    return lambda name, out: ["--model_name_or_path", str(tmp_path / name), "--train_file", str(corpus / "train.txt"),
                              "--validation_file", str(corpus / "valid.txt"), "--config", str(TINY), "--output_dir",
                              str(out), "--unseen_word_block", "50"]  # fmt: skip


def test_train_py_teaches_copying_with_simulated_unseen_words(tmp_path, capsys):
    """--unseen_word_rate rewrites the training split with placeholders; a model without oov_slots is refused with one
    error line."""
    from test_train import train_module

    flags, train = fine_tuning_folders(tmp_path), train_module()

    def run(name, *extra):
        out = tmp_path / f"{name}{len(list(tmp_path.iterdir()))}"
        train.main([*flags(name, out), "--max_train_steps", "3", "--log_every", "1", *extra])
        return [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]

    plain, rewritten = run("open"), run("open", "--unseen_word_rate", "1", "--unseen_word_max_count", "1000")
    losses = lambda rows: [r["train_loss"] for r in rows if "train_loss" in r]  # noqa: E731
    assert losses(plain) != losses(rewritten)
    # every placeholder target scores finite: each row's slots numbered from 0 (`number_slots_per_row`), the window
    # scheme carrying the row's history across segments
    assert all(math.isfinite(x) for x in losses(rewritten) + losses(run("open", "--unseen_word_rate", "1",
               "--unseen_word_max_count", "1000", "--scheme", "window")))  # fmt: skip
    with pytest.raises(SystemExit):
        run("closed", "--unseen_word_rate", "0.5")
    assert "--unseen_word_rate needs a model with oov_slots >= 2" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # the tiny models' window is 10: a shorter block would share slots in a window
        run("open", "--unseen_word_rate", "1", "--unseen_word_block", "9")
    assert "--unseen_word_block (9) must be at least the model's pointer_window (10)" in capsys.readouterr().err


def test_generate_stops_at_a_stop_string_given_the_tokenizer():
    """generate(stop_strings=..., tokenizer=tok) as transformers documents it: the tokenizer reaches forward."""
    from modeling_pointer_sentinel.tokenization import build_word_level_tokenizer, open_vocabulary

    tok = open_vocabulary(build_word_level_tokenizer(["a b c d e f", "b c a d", "f e d c b a"]), oov_slots=4)
    m = tiny_model(vocab_size=tok.word_vocab_size, oov_slots=4, unk_token_id=tok.unk_token_id, pointer_window=6).eval()
    prompt = tok("a b Zorg c Zorg", return_tensors="pt").input_ids
    free = m.generate(prompt, max_new_tokens=8, do_sample=False, pad_token_id=tok.pad_token_id, eos_token_id=None)
    # stop strings match the vocabulary's token strings, so a copied unseen word stops at its placeholder's token
    # (oov_words=[] writes placeholders as tokens; plain decode would write the prompt's spelling, "Zorg")
    third = tok.decode(free[0, prompt.shape[1] + 2 : prompt.shape[1] + 3], oov_words=[]).strip()
    stopped = m.generate(prompt, max_new_tokens=8, do_sample=False, pad_token_id=tok.pad_token_id, eos_token_id=None,
                         stop_strings=[third], tokenizer=tok)  # fmt: skip
    assert stopped.shape[1] <= prompt.shape[1] + 3 < free.shape[1]


def test_a_model_built_from_an_open_vocabulary_tokenizer_has_its_words_and_its_placeholders(tmp_path):
    """train.py --tokenizer_name of a shipped-style tokenizer: vocab_size is its words, not words + placeholders, and
    the placeholders become the model's oov_slots (with <unk>'s id)."""
    from test_train import TINY, repeated_sentences, train_module

    from modeling_pointer_sentinel import PointerSentinelConfig
    from modeling_pointer_sentinel.tokenization import build_word_level_tokenizer, open_vocabulary

    corpus = repeated_sentences(tmp_path, 5, 30, (4, 9), (120, 20, 20))
    tok = open_vocabulary(build_word_level_tokenizer((corpus / "train.txt").read_text().splitlines()), oov_slots=8)
    tok.save_pretrained(tmp_path / "tok")
    out = tmp_path / "out"
    train_module().main(["--tokenizer_name", str(tmp_path / "tok"), "--train_file", str(corpus / "train.txt"),
                         "--config", str(TINY), "--output_dir", str(out), "--max_train_steps", "1"])  # fmt: skip
    config = PointerSentinelConfig.from_pretrained(out)
    assert (config.vocab_size, config.oov_slots, config.unk_token_id) == (tok.word_vocab_size, 8, tok.unk_token_id)


def test_an_added_oov_pointer_starts_from_the_loaded_models_exact_scores():
    """training.start_oov_pointer: the placeholders' own embedding and query start as <unk>'s embedding and the
    pointer's query, so the grown model scores text with placeholders exactly as before; moving them changes only
    what the placeholders touch."""
    from modeling_pointer_sentinel.training import start_oov_pointer

    closed = model()
    with pytest.raises(ValueError, match="oov_pointer needs oov_slots > 0 and use_pointer"):
        start_oov_pointer(model("plain"))
    dropped = model(input_dropout=0.3, output_dropout=0.3)  # in eval mode: the grown model must be too
    grown_dropped = start_oov_pointer(dropped)
    assert not grown_dropped.training and not dropped.config.oov_pointer  # the given model is left as it was
    assert torch.equal(grown_dropped(BATCH, attention_mask=MASK).logits, dropped(BATCH, attention_mask=MASK).logits)
    head = start_oov_pointer(model()).pointer
    for start_at_zero in (head.oov_repeat, head.oov_context):  # r's odds start as the pointer's own, M / g; c_i unread
        assert not start_at_zero.weight.any() and not start_at_zero.bias.any()
    before, before_loss = closed(BATCH, attention_mask=MASK), closed(BATCH, attention_mask=MASK, labels=BATCH).loss
    grown = start_oov_pointer(model())
    assert grown.config.oov_pointer and grown.model.oov_embedding is not None
    after = grown(BATCH, attention_mask=MASK)
    assert torch.equal(after.logits, before.logits)
    assert torch.equal(grown(BATCH, attention_mask=MASK, labels=BATCH).loss, before_loss)
    with torch.no_grad():
        grown.pointer.oov_query.weight.normal_()
        grown.model.oov_embedding.normal_()
    ids = torch.tensor([[1, 3, 2, 3, 5, 1, 2, 3, 7]])  # no placeholder: untouched
    assert torch.equal(grown(ids).logits, closed(ids).logits)
    assert not torch.equal(grown(BATCH, attention_mask=MASK).logits, before.logits)


def test_train_py_oov_pointer_learns_at_its_own_rate(tmp_path, capsys):
    """--oov_pointer grows a loaded open-vocabulary model's head for placeholders; --oov_pointer_learning_rate is
    that head's rate (the rest keep --learning_rate); a closed model is refused with one error line."""
    from test_train import train_module

    from modeling_pointer_sentinel import PointerSentinelForCausalLM

    flags = fine_tuning_folders(tmp_path)
    start = PointerSentinelForCausalLM.from_pretrained(tmp_path / "open")

    def run(name, *extra):
        out = tmp_path / f"{name}{len(list(tmp_path.iterdir()))}"
        train_module().main([*flags(name, out), "--max_train_steps", "3", "--unseen_word_rate", "1",
                             "--unseen_word_max_count", "1000", "--oov_pointer", *extra])  # fmt: skip
        return PointerSentinelForCausalLM.from_pretrained(out)

    moved, held = run("open"), run("open", "--oov_pointer_learning_rate", "1e-30")
    for m in (moved, held):
        assert m.config.oov_pointer and not torch.equal(m.pointer.query.weight, start.pointer.query.weight)
    assert not torch.equal(moved.pointer.oov_query.weight, start.pointer.query.weight)
    assert torch.equal(held.pointer.oov_query.weight, start.pointer.query.weight)
    assert torch.equal(held.model.oov_embedding, start.model.embed_tokens.weight[start.config.unk_token_id])
    assert held.pointer.oov_repeat.weight.abs().max() < 1e-20 < moved.pointer.oov_repeat.weight.abs().max()
    with pytest.raises(SystemExit):
        run("closed")
    assert "--oov_pointer needs a pointer model with oov_slots" in capsys.readouterr().err


def test_train_py_oov_pointer_only_trains_the_copy_head_alone(tmp_path):
    """--oov_pointer_only: the placeholders' own weights learn and every other weight is the loaded model's, bit for
    bit, so text without placeholders scores exactly as before."""
    from test_train import train_module

    from modeling_pointer_sentinel import PointerSentinelForCausalLM

    flags = fine_tuning_folders(tmp_path)
    start = PointerSentinelForCausalLM.from_pretrained(tmp_path / "open")
    out = tmp_path / "only"
    train_module().main([*flags("open", out), "--max_train_steps", "3", "--unseen_word_rate", "1",
                         "--unseen_word_max_count", "1000", "--oov_pointer", "--oov_pointer_only"])  # fmt: skip
    trained = PointerSentinelForCausalLM.from_pretrained(out)
    after, before = trained.state_dict(), start.state_dict()
    assert {n for n in after if "oov_" not in n} == set(before)
    assert all(torch.equal(after[n], before[n]) for n in before)
    assert not torch.equal(trained.pointer.oov_query.weight, start.pointer.query.weight)
    assert not torch.equal(trained.model.oov_embedding, start.model.embed_tokens.weight[start.config.unk_token_id])


COPY_STAGES = {  # each shipped pointer folder's copy head: train.py --config files, in the order they ran
    "wt2-pointer-sentinel-lstm-2x200": [f"wt2_copy_unseen{s}.json" for s in ("", "_head", "_head_2")],
    "ptb-pointer-sentinel-lstm-2x200": [f"ptb_copy_unseen{s}.json" for s in ("", "_2", "_3", "_4")],
}


@pytest.mark.parametrize("folder", COPY_STAGES)
def test_the_copy_fine_tuning_stages_chain_into_the_shipped_pointer_folder(folder, tmp_path, monkeypatch):
    """examples/configs' copy recipe of each shipped pointer folder: every stage's flags parse with train.py's own
    parser, the first starts from the converged run's folder (results/converged/, its weights not in git), each later
    one from the stage before's output_dir, the last trains the copy head alone; the folder's eval_results.json records
    exactly these stages in order (training.fine_tune), and train.py continuing from the folder keeps its trained head
    (not restarted as <unk>'s embedding)."""
    from pathlib import Path

    from test_train import train_module
    from transformers import AutoTokenizer

    root, train = Path(__file__).resolve().parents[1], train_module()
    configs = [root / "examples" / "configs" / name for name in COPY_STAGES[folder]]
    stages = [json.loads(c.read_text()) for c in configs]
    corpus = folder.split("-")[0]
    assert stages[0]["model_name_or_path"] == f"results/converged/{corpus}_sgd_pointer"
    monkeypatch.chdir(tmp_path)  # the paths as a checkout reads them, the converged run's folder present but empty
    (tmp_path / stages[0]["model_name_or_path"]).mkdir(parents=True)
    for config, stage, before in zip(configs, stages, [None, *stages[:-1]], strict=True):
        args = train.parse_args(["--config", str(config)])
        assert args.oov_pointer and args.unseen_word_rate > 0 and args.output_dir == stage["output_dir"]
        if before is not None:
            assert args.model_name_or_path == before["output_dir"]  # the stages chain
    assert args.oov_pointer_only  # the last stage: the copy head alone
    monkeypatch.chdir(root)

    record = json.loads((root / "pretrained" / folder / "eval_results.json").read_text())["training"]["fine_tune"]
    assert [st["training"] for st in record] == stages
    assert [st["command"].split(" --config ")[1].split()[0] for st in record] == [
        f"examples/configs/{c.name}" for c in configs
    ]
    args.model_name_or_path = str(root / "pretrained" / folder)
    shipped, _ = train.build_model(args, AutoTokenizer.from_pretrained(args.model_name_or_path, trust_remote_code=True))
    unk = shipped.config.unk_token_id
    assert shipped.config.oov_pointer
    assert not torch.equal(shipped.model.oov_embedding, shipped.model.embed_tokens.weight[unk])  # trained


def test_unseen_names_counts_whole_words_through_the_folders_pipeline():
    """examples/unseen_names.py: a word comes back only as a whole word; one prompt through the shipped WikiText-2
    pointer folder's own pipeline gives each decoding's continuations, its unseen words from the tokenizer, its real
    names counted alike, and no <unk>; a real name outside the vocabulary is refused."""
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "examples"))
    from unseen_names import DECODING, PROMPTS, continuations, names_back, words_back

    assert words_back(["Esselbrook", "Kyiv"], "the Esselbrook's town, Esselbrooke, Kyivan") == ["Esselbrook"]
    assert words_back(["Kyiv"], "in Kyiv.") == ["Kyiv"] and words_back(["Kyiv"], "Kyivs") == []
    assert words_back(["London"], "in london .") == ["London"]  # PTB writes its words in lower case
    texts = ["Zorgon went to London", "then Zorgon", "nothing"]
    assert names_back(["Zorgon"], ["London"], texts) == ([["Zorgon"], ["Zorgon"], []], [["London"], [], []])
    assert len(PROMPTS) >= 8
    folder = root / "pretrained" / "wt2-pointer-sentinel-lstm-2x200"
    out = continuations(str(folder), [("\nZorgon met Blixa in London. Zorgon said", ["London"])], 4, 2, 0)
    row = out["prompts"][0]
    assert row["unseen"] == ["Zorgon", "Blixa"] and row["real"] == ["London"] and set(DECODING) <= set(row)
    assert [len(row[k]["continuations"]) for k in DECODING] == [1, 1, 2]
    for k in DECODING:
        assert row[k]["unseen_back"] == [words_back(row["unseen"], t) for t in row[k]["continuations"]]
        assert row[k]["real_back"] == [words_back(["London"], t) for t in row[k]["continuations"]]
        assert not any("<unk>" in t for t in row[k]["continuations"])
    counted = [row[k][f] for k in ("greedy", "sample") for f in ("unseen_back", "real_back")]
    unseen, real = sum(map(bool, counted[0] + counted[2])), sum(map(bool, counted[1] + counted[3]))
    assert out["greedy_and_sampled"] == {"continuations": 3, "with_an_unseen_word": unseen, "with_a_real_name": real}
    with pytest.raises(SystemExit, match="real names in the vocabulary"):
        continuations(str(folder), [("\nZorgon met Blixa. Zorgon said", ["Blixa"])], 2, 1, 0)


def test_train_py_resumes_an_oov_pointer_run_only_as_one_and_at_this_runs_rate(tmp_path, capsys):
    """A checkpoint with the placeholders' own weights resumes only with --oov_pointer, one without them only
    without (one error line each); a resumed run's --oov_pointer_learning_rate is its own, not the checkpoint's."""
    from safetensors.torch import load_file
    from test_train import train_module

    from modeling_pointer_sentinel import PointerSentinelForCausalLM

    fine_tune = fine_tuning_folders(tmp_path, closed=False)

    def run(out, steps, *extra):
        train_module().main([*fine_tune("open", tmp_path / out), "--max_train_steps", str(steps), "--unseen_word_rate",
                             "1", "--unseen_word_max_count", "1000", "--checkpointing_steps", "2", *extra])  # fmt: skip

    run("with", 2, "--oov_pointer")
    run("without", 2)
    for out, flags, said in (("with", [], "with the placeholders' own weights: resume it with --oov_pointer"),
                             ("without", ["--oov_pointer"], "without the placeholders' own weights: resume it "
                                                            "without --oov_pointer")):  # fmt: skip
        with pytest.raises(SystemExit):
            run(out, 4, "--resume_from_checkpoint", "latest", *flags)
        assert said in capsys.readouterr().err
    saved = load_file(tmp_path / "with" / "step_2" / "model.safetensors")
    run("with", 4, "--resume_from_checkpoint", "latest", "--oov_pointer", "--oov_pointer_learning_rate", "1e-30")
    resumed = PointerSentinelForCausalLM.from_pretrained(tmp_path / "with")
    assert torch.equal(resumed.pointer.oov_query.weight, saved["pointer.oov_query.weight"])  # held at 1e-30
    assert not torch.equal(resumed.pointer.query.weight, saved["pointer.query.weight"])  # the rest trained on
    with pytest.raises(SystemExit):
        run("rate", 2, "--oov_pointer_learning_rate", "0.1")
    assert "--oov_pointer_learning_rate is about the placeholders' own weights: add --oov_pointer" in (
        capsys.readouterr().err
    )
