"""The adaptive softmax (Grave et al., 2017) as p_vocab, for the plain LSTM and the pointer mixture."""

import logging
import math

import pytest
import torch
from conftest import tiny_config, tiny_model
from reference import reference, vocab_probs
from safetensors.torch import load_file

from modeling_pointer_sentinel import PointerSentinelForCausalLM
from modeling_pointer_sentinel.training import check_frequency_order

# V = 23: the head holds words 0-3 and two cluster tokens; tail 0 holds words 4-9 (6 units), tail 1 words 10-22 (3).
ADAPTIVE = dict(adaptive_softmax_cutoffs=[4, 10], adaptive_softmax_div_value=2.0)
BOTH = pytest.mark.parametrize("use_pointer,tie", [(True, False), (True, True), (False, False), (False, True)])


def adaptive_model(**kw):
    return tiny_model(**ADAPTIVE, **kw)


def ids_over_all_clusters(T=13):
    """Words from the head and both tails, with repeats so the pointer finds targets in its window."""
    g = torch.Generator().manual_seed(3)
    words = torch.tensor([1, 2, 5, 8, 12, 20])
    return torch.cat([words[torch.randint(0, 6, (2, T // 2), generator=g)], torch.randint(0, 23, (2, T - T // 2),
                                                                                         generator=g)], 1)  # fmt: skip


# Recorded by running these calls on the code before the adaptive softmax (commit 4e4f72b), float32, CPU: per
# (use_pointer, tie) the eval loss, logits[1, 7, :4], logits[0, -1, -1], vocab_logits[0, 3, 5]; then the
# training-mode loss (seed 5, output dropout 0.3), target_log_probs[1, 4] and embed_tokens.weight.grad[3, 2].
BEFORE = {
    (True, False): (["0x1.8fc3460000000p+1", "-0x1.0c7a3c0000000p+0", "-0x1.47183a0000000p+2", "-0x1.ba1a260000000p+0",
                     "-0x1.b920c80000000p+0", "-0x1.44f3820000000p+2", "0x1.1d0dce0000000p-5"],
                    ["0x1.918c500000000p+1", "-0x1.4a94e00000000p+2", "0x1.6e8f1c0000000p-13"]),
    (True, True): (["0x1.87d2220000000p+1", "-0x1.13579e0000000p+0", "-0x1.3be01c0000000p+2", "-0x1.c011ce0000000p+0",
                    "-0x1.bf8f580000000p+0", "-0x1.3d006c0000000p+2", "-0x1.3714c40000000p-6"],
                   ["0x1.8717ea0000000p+1", "-0x1.3fac0c0000000p+2", "0x1.8f7dcc0000000p-7"]),
    (False, False): (["0x1.9123ca0000000p+1", "0x1.afec480000000p-7", "-0x1.0082480000000p-5", "-0x1.19d16a0000000p-6",
                      "0x1.df35ee0000000p-7", "-0x1.60fd360000000p-6", "-0x1.c987b20000000p-10"],
                     ["0x1.910e560000000p+1", "-0x1.9344ae0000000p+1", "0x1.a0130c0000000p-14"]),
    (False, True): (["0x1.9206760000000p+1", "0x1.ab9f4e0000000p-6", "-0x1.4231f40000000p-9", "-0x1.bcb9f80000000p-6",
                     "0x1.3bbe0c0000000p-8", "-0x1.2026640000000p-6", "-0x1.3714c40000000p-6"],
                    ["0x1.9294a80000000p+1", "-0x1.95e5ea0000000p+1", "0x1.84b5460000000p-6"]),
}  # fmt: skip
KEYS = ["model.embed_tokens.weight"] + [f"model.layers.{i}.{n}" for i in (0, 1) for n in
        ("weight_ih", "weight_hh", "bias_ih", "bias_hh")] + ["lm_head.weight", "lm_head.bias"]  # fmt: skip


@BOTH
def test_empty_cutoffs_equal_the_full_softmax_model(use_pointer, tie):
    ids = torch.randint(0, 6, (2, 13), generator=torch.Generator().manual_seed(1))
    m = tiny_model(use_pointer=use_pointer, tie_word_embeddings=tie, output_dropout=0.3, adaptive_softmax_cutoffs=[])
    pointer = ["pointer.sentinel", "pointer.query.weight", "pointer.query.bias"] if use_pointer else []
    assert list(m.state_dict()) == KEYS + pointer
    m.eval()
    out = m(ids, labels=ids)
    got = [
        out.loss.item(),
        *out.logits[1, 7, :4].tolist(),
        out.logits[0, -1, -1].item(),
        out.vocab_logits[0, 3, 5].item(),
    ]
    m.train()
    torch.manual_seed(5)
    out = m(ids, labels=ids)
    out.loss.backward()
    got_train = [out.loss.item(), out.target_log_probs[1, 4].item(), m.model.embed_tokens.weight.grad[3, 2].item()]
    # Same parameters, same random draws, same formulas: equal to float32 rounding. Not bit for bit, because CPUs with
    # other SIMD widths sum in another order (CI's differed from the recording machine's by one ulp).
    for values, recorded in zip((got, got_train), BEFORE[use_pointer, tie], strict=True):
        want = torch.tensor([float.fromhex(h) for h in recorded], dtype=torch.float64)
        torch.testing.assert_close(torch.tensor(values, dtype=torch.float64), want, rtol=1e-5, atol=1e-8)


@BOTH
def test_logits_are_normalised_log_probabilities(use_pointer, tie):
    m = adaptive_model(use_pointer=use_pointer, tie_word_embeddings=tie).double()
    ids = ids_over_all_clusters()
    for train in (False, True):
        out = m.train(train)(ids)
        for x in (out.logits, out.vocab_logits):
            torch.testing.assert_close(x.exp().sum(-1), torch.ones(2, 13, dtype=torch.float64), rtol=0, atol=1e-12)
    if not use_pointer:
        torch.testing.assert_close(out.logits, out.vocab_logits)


@BOTH
def test_training_target_log_probs_equal_evaluation_logits_at_the_target(use_pointer, tie):
    m = adaptive_model(use_pointer=use_pointer, tie_word_embeddings=tie, pointer_window=4).double()
    ids = ids_over_all_clusters()
    train = m.train()(ids, labels=ids)
    assert train.logits is None  # the targets alone: no vocabulary-sized tensor in training
    evaluated = m.eval()(ids, labels=ids)
    at = ids[:, 1:, None]
    torch.testing.assert_close(train.target_log_probs[:, :-1], evaluated.logits[:, :-1].gather(-1, at)[..., 0])
    torch.testing.assert_close(
        train.vocab_target_log_probs[:, :-1], evaluated.vocab_logits[:, :-1].gather(-1, at)[..., 0]
    )
    torch.testing.assert_close(train.loss, -evaluated.logits[:, :-1].gather(-1, at).mean())
    torch.testing.assert_close(evaluated.loss, train.loss)


@pytest.mark.parametrize("use_pointer,tie,gate_type", [(True, False, "sentinel"), (True, True, "switch"),
                                                       (False, True, "sentinel")])  # fmt: skip
def test_tail_words_match_the_slow_reference(use_pointer, tie, gate_type):
    """p_vocab(w) = p_head(cluster) p_cluster(w), word by word, and the mixture and loss built on it."""
    m = adaptive_model(use_pointer=use_pointer, tie_word_embeddings=tie, gate_type=gate_type).double().eval()
    ids = ids_over_all_clusters()
    assert (ids[:, 1:] >= 10).any() and ((ids[:, 1:] >= 4) & (ids[:, 1:] < 10)).any()  # targets in both tails
    out = m(ids, labels=ids)
    nll = []
    for b in range(2):
        for t, (p, _g, _) in enumerate(reference(m, ids[b].tolist())):
            want = vocab_probs(m, out.last_hidden_state[b, t])
            torch.testing.assert_close(out.vocab_logits[b, t].exp(), want, rtol=1e-10, atol=1e-12)
            torch.testing.assert_close(out.logits[b, t].exp(), p, rtol=1e-10, atol=1e-12)
            if t + 1 < ids.shape[1]:
                nll.append(-math.log(p[ids[b, t + 1]]))
    assert out.loss.item() == pytest.approx(sum(nll) / len(nll), rel=1e-10)
    m.train()
    assert m(ids, labels=ids).loss.item() == pytest.approx(sum(nll) / len(nll), rel=1e-10)


def test_tied_head_rows_are_the_embedding_rows_and_train_them(tmp_path):
    m = adaptive_model(tie_word_embeddings=True)
    emb = m.model.embed_tokens.weight
    assert m.lm_head.weight is emb and m.get_output_embeddings() is None
    h = torch.randn(2, 5, 8)
    y = torch.tensor([[0, 3, 4, 11, 22], [1, 2, 9, 10, 3]])
    m.lm_head.target_log_prob(h, y).sum().backward()
    assert emb.grad[:4].abs().sum(-1).gt(0).all() and emb.grad[4:].eq(0).all()  # the head reads rows 0..c_0-1
    m.save_pretrained(tmp_path)
    assert "lm_head.weight" not in load_file(tmp_path / "model.safetensors")  # stored once, as the embedding


@pytest.mark.parametrize("tie", [False, True])
def test_save_and_load_give_the_same_outputs_and_report_nothing(tie, tmp_path, capsys, caplog):
    m = adaptive_model(tie_word_embeddings=tie).eval()
    ids = ids_over_all_clusters()
    m.save_pretrained(tmp_path)
    with caplog.at_level(logging.INFO):
        again, info = PointerSentinelForCausalLM.from_pretrained(tmp_path, output_loading_info=True)
    assert info == {"missing_keys": set(), "unexpected_keys": set(), "mismatched_keys": set(), "error_msgs": []}
    shown = capsys.readouterr().out + capsys.readouterr().err + caplog.text
    assert "MISSING" not in shown and "UNEXPECTED" not in shown and "newly initialized" not in shown, shown
    assert (
        again.config.adaptive_softmax_cutoffs == [4, 10]
        and (again.lm_head.weight is again.model.embed_tokens.weight) == tie
    )
    assert torch.equal(again.eval()(ids).logits, m(ids).logits)


@pytest.mark.parametrize("tie", [False, True])
def test_init_draws_output_rows_like_the_softmax_and_projections_by_fan_in(tie):
    head = tiny_model(
        tie_word_embeddings=tie, vocab_size=200, adaptive_softmax_cutoffs=[20, 60], adaptive_softmax_div_value=2.0
    ).lm_head
    d = 8 if tie else 12
    for w in (head.weight, head.cluster_weight, *head.tail_weight):
        assert 0.05 < w.abs().max() <= 0.1
    for p in head.tail_proj:
        assert 0.7 / math.sqrt(d) < p.abs().max() <= 1 / math.sqrt(d)
    assert all(b.eq(0).all() for b in (head.head_bias, *head.tail_bias))
    assert [tuple(p.shape) for p in head.tail_proj] == [(d // 2, d), (d // 4, d)]


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(adaptive_softmax_cutoffs=[10, 4]), "increase strictly"),
        (dict(adaptive_softmax_cutoffs=[4, 4]), "increase strictly"),
        (dict(adaptive_softmax_cutoffs=[0, 4]), r"each in \(0, vocab_size=23\)"),
        (dict(adaptive_softmax_cutoffs=[4, 23]), r"each in \(0, vocab_size=23\)"),
        (dict(adaptive_softmax_cutoffs=[-3]), r"each in \(0, vocab_size=23\)"),
        (dict(adaptive_softmax_div_value=0.5), "must be >= 1"),
        (dict(adaptive_softmax_div_value=float("nan")), "must be >= 1"),
        (dict(adaptive_softmax_cutoffs=[2, 4, 8, 16], adaptive_softmax_div_value=2.0), "no units"),
    ],
)
def test_bad_settings_raise_one_clear_error(kw, match):
    with pytest.raises(ValueError, match=match):
        tiny_config(**kw)


def test_added_tokens_join_the_last_cluster():
    """The head and the other clusters keep their shapes; the last cluster's output rows and biases grow, and the
    adaptive softmax still normalises over every word."""
    model = adaptive_model().eval()
    head = model.lm_head
    shapes = [p.shape for p in (head.head_bias, head.cluster_weight, *head.tail_proj, *head.tail_weight[:-1])]
    last = head.tail_weight[-1].shape[0]
    model.resize_token_embeddings(30)
    assert head.cutoffs[-1] == 30 and head.tail_weight[-1].shape[0] == head.tail_bias[-1].shape[0] == last + 7
    assert [p.shape for p in (head.head_bias, head.cluster_weight, *head.tail_proj, *head.tail_weight[:-1])] == shapes
    with torch.no_grad():
        log_p = head(torch.randn(4, model.config.output_size))
    assert log_p.shape == (4, 30)
    torch.testing.assert_close(log_p.logsumexp(-1), torch.zeros(4), atol=1e-6, rtol=0)


def test_frequency_order_check():
    ids = torch.tensor([0, 0, 0, 1, 1, 2, 2, 3])  # counts 3, 2, 2, 1
    check_frequency_order(ids, [1, 3], 4)
    check_frequency_order(ids, [], 4)
    with pytest.raises(ValueError, match=r"id 2 \(after the cutoff 2\) occurs 3 times .* id 1 \(before it\) 2 times"):
        check_frequency_order(torch.cat([ids, torch.tensor([2])]), [2], 4)


def test_word_level_tokenizer_numbers_words_by_training_frequency(shared_data):
    from modeling_pointer_sentinel.tokenization import build_word_level_tokenizer
    from modeling_pointer_sentinel.training import encode_lines

    lines = (shared_data / "wikitext-2" / "wiki.train.tokens").read_text().splitlines()
    counts = torch.bincount(encode_lines(build_word_level_tokenizer(lines), lines))
    assert len(counts) == 33_278 and (counts[1:] <= counts[:-1]).all()
