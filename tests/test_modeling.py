import math

import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_config, tiny_model
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import reference

from modeling_pointer_sentinel import (
    PointerSentinelCache,
    PointerSentinelForCausalLM,
    PointerSentinelModel,
    pointer_mixture,
)
from modeling_pointer_sentinel import modeling_pointer_sentinel as modeling
from modeling_pointer_sentinel.modeling_pointer_sentinel import sliding_window, window_scores


def repeated_ids(T=13, V=23, seed=1):
    """Random ids from a small sub-vocabulary, so targets often repeat inside the pointer window."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, min(V, 6), (2, T), generator=g)


@pytest.mark.parametrize("gate_type,tie,zoneout", [("sentinel", False, 0.0), ("switch", False, 0.0),
                                                   ("sentinel", True, 0.0), ("switch", True, 0.3),
                                                   ("sentinel", False, 0.4)])  # fmt: skip
def test_matches_loop_reference(gate_type, tie, zoneout):
    model = tiny_model(gate_type=gate_type, tie_word_embeddings=tie, zoneout=zoneout).double().eval()
    ids = repeated_ids()
    out = model(ids, labels=ids)
    nll = []
    for b in range(ids.shape[0]):
        ref = reference(model, ids[b].tolist())
        for t, (p, g, attn) in enumerate(ref):
            torch.testing.assert_close(out.logits[b, t].exp(), p, atol=1e-10, rtol=1e-8)
            assert out.gate[b, t].item() == pytest.approx(g, abs=1e-10)
            want = torch.tensor([0.0 if a is None else a for a in attn], dtype=torch.float64)
            torch.testing.assert_close(out.pointer_attention[b, t], want, atol=1e-10, rtol=1e-8)
            if t + 1 < ids.shape[1]:
                nll.append(-math.log(p[ids[b, t + 1]]))
    assert out.loss.item() == pytest.approx(sum(nll) / len(nll), rel=1e-9)
    assert -out.target_log_probs[:, :-1].mean().item() == pytest.approx(sum(nll) / len(nll), rel=1e-9)
    assert torch.all(out.target_log_probs[:, -1] == 0)  # the last position has no target
    vocab = torch.log_softmax(out.vocab_logits, -1)[:, :-1].gather(-1, ids[:, 1:, None])[..., 0]
    torch.testing.assert_close(out.vocab_target_log_probs[:, :-1], vocab)
    # the invariant g + sum(attention) = 1
    torch.testing.assert_close(out.gate + out.pointer_attention.sum(-1), torch.ones_like(out.gate))


def test_pointer_loss_matches_reference():
    model = tiny_model(pointer_loss_weight=0.5).double().eval()
    ids = repeated_ids()
    out = model(ids, labels=ids)
    aux = []
    for b in range(2):
        for t, (_p, g, attn) in enumerate(reference(model, ids[b].tolist())[:-1]):
            window = list(range(t - model.config.pointer_window + 1, t + 1))
            hit = sum(a for a, i in zip(attn, window, strict=True) if a is not None and ids[b, i] == ids[b, t + 1])
            aux.append(-math.log(g + hit))
    assert out.pointer_loss.item() == pytest.approx(sum(aux) / len(aux), rel=1e-9)
    plain = model(ids, labels=ids).loss - 0.5 * out.pointer_loss
    model.config.pointer_loss_weight = 0.0
    assert model(ids, labels=ids).loss.item() == pytest.approx(plain.item(), rel=1e-9)


def test_plain_lstm_baseline_equals_torch_lstm():
    model = tiny_model(use_pointer=False, num_layers=2, embedding_size=12).eval()
    assert model.pointer is None
    ids = repeated_ids()
    lstm = torch.nn.LSTM(12, 12, num_layers=2, batch_first=True)
    with torch.no_grad():
        for k, layer in enumerate(model.model.layers):
            for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                getattr(lstm, f"{name}_l{k}").copy_(getattr(layer, name))
    h, _ = lstm(model.model.embed_tokens(ids))
    want = F.cross_entropy(model.lm_head(h)[:, :-1].reshape(-1, 23), ids[:, 1:].reshape(-1))
    out = model(ids, labels=ids)
    torch.testing.assert_close(out.loss, want)
    assert torch.all(out.gate == 1) and torch.all(out.pointer_attention == 0)


@pytest.mark.parametrize("train", [False, True])
@pytest.mark.parametrize("split", [1, 4, 9, 12])
def test_chunked_equals_whole(train, split):
    model = tiny_model()
    model.train(train)
    ids = repeated_ids(T=13)
    whole = model(ids, use_cache=True)
    first = model(ids[:, :split], use_cache=True)
    second = model(ids[:, split:], past_key_values=first.past_key_values, use_cache=True)
    for name in ("logits", "gate", "pointer_attention"):
        joined = torch.cat([getattr(first, name), getattr(second, name)], 1)
        torch.testing.assert_close(joined, getattr(whole, name), atol=1e-5, rtol=1e-5)
    assert second.past_key_values.get_seq_length() == 13
    # loss with pre-shifted targets: chunks sum to the whole
    y = torch.cat([ids[:, 1:], torch.full((2, 1), -100)], 1)
    whole_sum = model(ids, shift_labels=y, num_items_in_batch=1).loss
    c = model(ids[:, :split], shift_labels=y[:, :split], num_items_in_batch=1, use_cache=True)
    c2 = model(ids[:, split:], shift_labels=y[:, split:], num_items_in_batch=1, past_key_values=c.past_key_values)
    torch.testing.assert_close(c.loss + c2.loss, whole_sum, atol=1e-4, rtol=1e-5)


def test_long_chunk_blocks_equal_short_chunks():
    """Queries are processed in blocks of L; a chunk many windows long equals token-by-token decoding."""
    model = tiny_model(pointer_window=3).eval()
    ids = repeated_ids(T=17)
    whole = model(ids)
    cache, steps = PointerSentinelCache(), []
    for t in range(17):
        steps.append(model(ids[:, t : t + 1], past_key_values=cache, use_cache=True).logits)
    torch.testing.assert_close(torch.cat(steps, 1), whole.logits, atol=1e-5, rtol=1e-5)


def test_left_padding_matches_unpadded_rows():
    model = tiny_model().eval()
    a, b = torch.tensor([[3, 1, 4, 1, 5, 2, 6, 5]]), torch.tensor([[2, 7, 1, 2]])
    pad = 0
    batch = torch.cat([a, torch.cat([torch.full((1, 4), pad), b], 1)])
    mask = torch.tensor([[1] * 8, [0] * 4 + [1] * 4])
    out = model(batch, attention_mask=mask, use_cache=True)
    oa, ob = model(a, use_cache=True), model(b, use_cache=True)
    torch.testing.assert_close(out.logits[0], oa.logits[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.logits[1, 4:], ob.logits[0], atol=1e-5, rtol=1e-5)
    # the states after the call match too: continue both by one token
    nxt = torch.tensor([[3], [3]])
    full_mask = torch.cat([mask, torch.ones(2, 1, dtype=mask.dtype)], 1)
    step = model(nxt, attention_mask=full_mask, past_key_values=out.past_key_values)
    torch.testing.assert_close(step.logits[0], model(nxt[:1], past_key_values=oa.past_key_values).logits[0])
    torch.testing.assert_close(step.logits[1], model(nxt[1:], past_key_values=ob.past_key_values).logits[0])


@pytest.mark.parametrize("T", [1, 5])
def test_masked_step_loop_equals_fused_kernel(T):
    layer = tiny_model().model.layers[0]
    weights = [layer.weight_ih, layer.weight_hh, layer.bias_ih, layer.bias_hh]
    x, h0, c0 = torch.randn(3, T, 8), torch.randn(3, 12), torch.randn(3, 12)
    out_f, hf, cf = layer._run(x, h0, c0, None, weights)  # the fused kernel
    mask = torch.tensor([True, False, True])[:, None].expand(3, T)  # row 1 is all padding
    for run in (layer._step_loop, layer._run):  # the step loop, and the fused kernel with a mask (T = 1 only)
        out_l, hl, cl = run(x, h0, c0, mask, weights)
        for got, want in ((out_l, out_f), (hl, hf), (cl, cf)):
            torch.testing.assert_close(got[0::2], want[0::2], atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(hl[1], h0[1])  # padding leaves the state as it was
        torch.testing.assert_close(cl[1], c0[1])
        torch.testing.assert_close(out_l[1], h0[1].expand(T, -1))


def test_logits_to_keep():
    model = tiny_model().eval()
    ids = repeated_ids()
    full = model(ids)
    last = model(ids, logits_to_keep=1)
    assert last.logits.shape == (2, 1, 23)
    torch.testing.assert_close(last.logits[:, 0], full.logits[:, -1])
    assert last.gate.shape == full.gate.shape  # gate and attention stay per position


def test_every_parameter_gets_gradient_under_all_regularisers():
    model = tiny_model(
        embedding_dropout=0.1,
        input_dropout=0.2,
        hidden_dropout=0.2,
        output_dropout=0.2,
        weight_drop=0.5,
        pointer_loss_weight=0.1,
    ).train()
    ids = repeated_ids(T=20)
    model(ids, labels=ids).loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, f"{name} gets no gradient"


def test_zoneout_trains_and_is_deterministic_at_eval():
    model = tiny_model(zoneout=0.5)
    ids = repeated_ids()
    model.train()
    model(ids, labels=ids).loss.backward()
    assert model.model.layers[0].weight_hh.grad.abs().sum() > 0
    model.eval()
    torch.testing.assert_close(model(ids).logits, model(ids).logits)
    # eval zoneout is the expectation h = p h_prev + (1-p) h_new, so it differs from the plain LSTM
    plain = tiny_model(zoneout=0.0).eval()
    assert not torch.allclose(model(ids).logits, plain(ids).logits)


def test_weight_drop_keeps_training_the_recurrent_matrix():
    model = tiny_model(weight_drop=0.5).train()
    before = model.model.layers[1].weight_hh.detach().clone()
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    ids = repeated_ids()
    model(ids, labels=ids).loss.backward()
    opt.step()
    assert not torch.equal(before, model.model.layers[1].weight_hh)


def test_gradients_finite_when_gate_vanishes_and_target_absent():
    model = tiny_model().double()
    with torch.no_grad():
        model.pointer.query.bias.fill_(30.0)
        model.pointer.sentinel.fill_(-50.0)  # q.s << q.h_i: g -> 0
    ids = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8]])  # no target ever appears in the window
    out = model(ids, labels=ids)
    assert out.gate.max() < 1e-10
    assert torch.isfinite(out.loss)
    out.loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())


def test_outputs_follow_transformers_conventions():
    model = tiny_model(num_layers=3).eval()
    ids = repeated_ids()
    out = model(ids, output_hidden_states=True)
    assert len(out.hidden_states) == 4  # embeddings + every layer
    assert out.hidden_states[0].shape == (2, 13, 8)
    torch.testing.assert_close(out.hidden_states[-1], out.last_hidden_state)
    tup = model(ids, labels=ids, return_dict=False)
    assert isinstance(tup, tuple)
    torch.testing.assert_close(tup[0], model(ids, labels=ids).loss)
    torch.testing.assert_close(tup[1], out.logits)
    base = PointerSentinelModel(model.config)
    assert base(ids, return_dict=False)[0].shape == (2, 13, 12)
    assert model.base_model is model.model
    assert model.get_input_embeddings() is model.model.embed_tokens


def test_resize_token_embeddings():
    model = tiny_model(tie_word_embeddings=True)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    model.resize_token_embeddings(30)  # 7 added tokens: words 23 ... 29 (no placeholders between)
    assert model.config.vocab_size == 23 and model.config.added_tokens == 7 and model.config.num_words == 30
    assert model.lm_head.weight.shape == (30, 8) and model.lm_head.out_features == 30
    assert model.lm_head.weight is model.model.embed_tokens.weight
    ids = torch.tensor([[29, 1, 29]])
    assert model(ids).logits.shape == (1, 3, 30)
    untied = tiny_model().eval()
    untied.resize_token_embeddings(25)
    assert untied.lm_head.bias.shape == (25,)


def test_init_weights_cover_every_parameter():
    model = tiny_model(gate_type="switch", vocab_size=50)
    for name, p in model.named_parameters():
        assert torch.isfinite(p).all(), name
        assert p.abs().max() <= 1 / math.sqrt(8) + 1e-6, name  # AWD init: U(+-0.1) or U(+-1/sqrt(fan)), fan >= 8
        assert p.numel() == 1 or p.std() > 0 or "lm_head.bias" in name, name
    emb = model.model.embed_tokens.weight
    assert emb.abs().max() <= 0.1 and emb.abs().max() > 0.09


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda m: m(torch.tensor([[1, 23]])), "must lie in"),
        (lambda m: m(torch.tensor([[-1, 2]])), "must lie in"),
        (lambda m: m(torch.zeros(1, 0, dtype=torch.long)), "empty"),
        (lambda m: m(torch.tensor([1, 2])), "batch, sequence"),
        (lambda m: m(torch.tensor([[1, 2]]), attention_mask=torch.ones(2, 2)), "attention_mask"),
        (lambda m: m(torch.tensor([[1, 2]]), labels=torch.tensor([[1, 2, 3]])), "labels shape"),
        (lambda m: m(torch.tensor([[1, 2]]), labels=torch.tensor([[1, 23]])), "labels must lie in"),
        (lambda m: m(torch.tensor([[1, 2]]), labels=torch.tensor([[1, -5]])), "labels must lie in"),
        (lambda m: m(torch.tensor([[1, 2]]), shift_labels=torch.tensor([[99, 1]])), "shift_labels must lie in"),
        (lambda m: m(torch.tensor([[1, 2]]), split_state_at=-2), "split_state_at"),
        (lambda m: m(torch.tensor([[1, 2]]), split_state_at=3), "split_state_at"),
        (lambda m: m(torch.tensor([[1, 2]]), logits_to_keep=-1), "logits_to_keep"),
        (lambda m: m(torch.tensor([[1, 2]]), inputs_embeds=torch.zeros(1, 2, 8)), "inputs_embeds"),
        (lambda m: m(torch.tensor([[1, 2]]), output_attentions=True), "output_attentions"),
        (lambda m: m(torch.tensor([[1, 2, 3, 4, 5]]), attention_mask=torch.ones(1, 7)), "attention_mask"),
        (lambda m: setattr(m.config, "pointer_window", 0) or m(torch.tensor([[1, 2]])), "pointer_window"),
        (
            lambda m: m(
                torch.tensor([[1]]), past_key_values=m(torch.tensor([[1], [2]]), use_cache=True).past_key_values
            ),
            "batch",
        ),
    ],
)
def test_bad_input_raises_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call(tiny_model())


@pytest.mark.parametrize(
    "kw",
    [
        dict(gate_type="mlp"),
        dict(pointer_window=0),
        dict(hidden_dropout=1.0),
        dict(eos_token_id=99),
        dict(zoneout=-0.1),
    ],
)
def test_bad_config_raises_value_error(kw):
    with pytest.raises(ValueError):
        tiny_config(**kw)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4), st.integers(1, 6), st.integers(2, 12), st.integers(0, 2**31 - 1))
def test_pointer_mixture_equals_dense_scatter(batch, L, V, seed):
    g = torch.Generator().manual_seed(seed)
    vocab = torch.log_softmax(torch.randn(batch, V, generator=g, dtype=torch.float64), -1)
    both = torch.softmax(torch.randn(batch, L + 1, generator=g, dtype=torch.float64), -1)
    empty = torch.rand(batch, L, generator=g) < 0.3
    a = both[:, :-1].masked_fill(empty, 0)
    gate = 1 - a.sum(-1)
    ids = torch.randint(0, V, (batch, L), generator=g)
    mixed = pointer_mixture(vocab, gate.log(), a.log(), ids)  # no-grad path; log attention -inf on empty slots
    dense = gate[:, None] * vocab.exp() + torch.zeros(batch, V, dtype=torch.float64).scatter_add(-1, ids, a)
    torch.testing.assert_close(mixed.exp(), dense)
    torch.testing.assert_close(mixed.exp().sum(-1), torch.ones(batch, dtype=torch.float64))
    with_grad = pointer_mixture(vocab.requires_grad_(), gate.log(), a.log(), ids)  # gradient-safe path: same values
    torch.testing.assert_close(with_grad.detach(), mixed)


def test_cache_reorder_and_detach():
    model = tiny_model().train()
    out = model(repeated_ids(), use_cache=True)
    cache = out.past_key_values
    assert cache.window_states.requires_grad
    cache.detach_()
    assert not cache.window_states.requires_grad and not cache.hidden[0].requires_grad
    swapped = cache.reorder_cache(torch.tensor([1, 0]))
    assert swapped.batch_size == 2
    cache.batch_repeat_interleave(3)
    assert cache.window_ids.shape[0] == 6 and cache.cell[1].shape[0] == 6


def test_auto_classes_registered():
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

    cfg = AutoConfig.for_model("pointer_sentinel_lstm", vocab_size=11, embedding_size=4, hidden_size=4)
    assert isinstance(AutoModelForCausalLM.from_config(cfg), PointerSentinelForCausalLM)
    assert isinstance(AutoModel.from_config(cfg), PointerSentinelModel)


def test_split_state_equals_state_of_a_shorter_call():
    model = tiny_model(weight_drop=0.3, zoneout=0.2).eval()
    ids = repeated_ids(T=11)
    out = model(ids, split_state_at=4)
    short = model(ids[:, :4], use_cache=True).past_key_values
    for got, want in zip(out.split_state[0] + out.split_state[1], short.hidden + short.cell, strict=True):
        torch.testing.assert_close(got, want)
    torch.testing.assert_close(out.logits, model(ids).logits)


def test_target_equal_to_empty_slot_id_keeps_gradients_finite():
    model = tiny_model()
    ids = torch.tensor([[5, 0, 0, 3, 0]])  # empty window slots hold id 0 too
    model(ids, labels=ids).loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())


def test_pointer_mixture_gradient_equals_dense_reference_with_repeated_words():
    g = torch.Generator().manual_seed(0)
    vocab = torch.randn(3, 9, generator=g, dtype=torch.float64, requires_grad=True)
    scores = torch.randn(3, 8, generator=g, dtype=torch.float64, requires_grad=True)  # 7 slots + sentinel
    ids = torch.tensor([[1, 1, 1, 2, 3, 1, 0], [4, 4, 5, 5, 6, 6, 6], [0, 1, 2, 3, 4, 5, 6]])
    weights = torch.randn(3, 9, generator=g, dtype=torch.float64)

    def both(mix):
        both = torch.softmax(scores, -1)
        a, gate = both[:, :-1], both[:, -1]
        return (mix(torch.log_softmax(vocab, -1), gate, a) * weights).sum()

    ours = torch.autograd.grad(both(lambda v, gate, a: pointer_mixture(v, gate.log(), a.log(), ids)), (vocab, scores))
    dense = torch.autograd.grad(
        both(lambda v, gate, a: (gate[:, None] * v.exp() + torch.zeros_like(v).scatter_add(-1, ids, a)).log()),
        (vocab, scores),
    )
    for x, y in zip(ours, dense, strict=True):
        torch.testing.assert_close(x, y)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6), st.integers(1, 14), st.integers(0, 2**31 - 1))
def test_window_scores_equal_the_sliding_window_definition(L, T, seed):
    g = torch.Generator().manual_seed(seed)
    q, keys = torch.randn(2, T, 3, generator=g), torch.randn(2, L + T, 3, generator=g)
    want = torch.einsum("btd,btdl->btl", q, sliding_window(keys, L))
    torch.testing.assert_close(window_scores(q, keys, L), want)
    # row t of the window is positions t-L+1 ... t, i.e. memory indices t+1 ... t+L
    positions = sliding_window(torch.arange(L + T)[None], L)[0]
    assert positions.tolist() == [list(range(t + 1, t + L + 1)) for t in range(T)]


@pytest.mark.parametrize("new_window", [2, 9])
def test_pointer_window_can_change_after_construction(new_window):
    model = tiny_model().eval()
    ids = repeated_ids(T=13)
    first = model(ids[:, :6], use_cache=True)  # a cache made with the old window of 5
    model.config.pointer_window = new_window
    fresh = tiny_model(pointer_window=new_window).eval()
    torch.testing.assert_close(model(ids).logits, fresh(ids).logits)  # T > 1 used to crash here
    assert model(ids).pointer_attention.shape == (2, 13, new_window)
    # a cache from the old window continues with the new one: its newest positions are kept
    cont = model(ids[:, 6:], past_key_values=first.past_key_values)
    if new_window <= 5:
        torch.testing.assert_close(cont.logits, fresh(ids).logits[:, 6:], atol=1e-5, rtol=1e-5)
    assert torch.isfinite(cont.logits).all()


def test_base_model_is_a_plain_lstm_and_the_lm_owns_the_pointer_memory():
    model = tiny_model().eval()
    ids = repeated_ids()
    base_out = model.model(ids, use_cache=True)
    assert base_out.past_key_values.window_states is None  # the base model keeps no pointer memory
    assert not any("pointer" in n for n, _ in model.model.named_parameters())
    torch.testing.assert_close(base_out.last_hidden_state, model(ids, output_hidden_states=True).last_hidden_state)
    lm_cache = model(ids, use_cache=True).past_key_values
    assert lm_cache.window_states.shape == (2, 5, 12) and lm_cache.window_ids.tolist() == ids[:, -5:].tolist()


def test_cache_keeps_parameter_dtype_after_autocast():
    model = tiny_model().eval()
    ids = repeated_ids()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        cache = model(ids[:, :7], use_cache=True).past_key_values
    assert {t.dtype for t in cache.hidden + cache.cell + [cache.window_states]} == {torch.float32}
    out = model(ids[:, 7:], past_key_values=cache)  # an fp32 call continuing a bf16 one used to fail
    torch.testing.assert_close(out.logits, model(ids).logits[:, 7:], atol=0.1, rtol=0.05)


def test_lstm_runs_outside_autocast_in_a_dtype_chosen_per_device():
    """CPU: the weights' dtype (oneDNN's bf16 LSTM fails on many CPUs). CUDA: autocast's own dtype, where torch's
    autocast would run cuDNN's LSTM in float16 even under bf16 (no loss scaler: gradients underflow)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class RnnDtypes(TorchDispatchMode):
        seen = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if "rnn" in str(func) or "lstm" in str(func):
                flat = [t for a in args for t in (a if isinstance(a, list | tuple) else [a])]
                self.seen |= {t.dtype for t in flat if isinstance(t, torch.Tensor) and t.is_floating_point()}
            return func(*args, **(kwargs or {}))

    model = tiny_model().train()
    ids = repeated_ids()
    with RnnDtypes() as mode, torch.autocast("cpu", dtype=torch.bfloat16):
        model(ids, labels=ids).loss.backward()
    assert mode.seen == {torch.float32}
    before = torch.get_autocast_dtype("cuda")
    try:
        for dtype in (torch.bfloat16, torch.float16):
            torch.set_autocast_dtype("cuda", dtype)
            assert modeling._lstm_dtype("cuda", torch.float32) == dtype
            assert modeling._lstm_dtype("cpu", torch.float32) == torch.float32
    finally:
        torch.set_autocast_dtype("cuda", before)


def test_with_labels_the_softmax_runs_once_and_logits_carry_no_graph():
    model = tiny_model().train()
    calls = []
    model.lm_head.register_forward_hook(lambda *a: calls.append(1))
    ids = repeated_ids()
    out = model(ids, labels=ids)
    assert len(calls) == 1 and out.loss.requires_grad
    assert out.logits is None and out.vocab_logits is None  # training with labels: no vocabulary-sized report
    model.eval()
    out = model(ids, labels=ids)
    assert len(calls) == 2  # the report reuses the loss's softmax
    assert out.loss.requires_grad and not out.logits.requires_grad
    assert out.logits.shape == (2, 13, 23)
    with torch.no_grad():
        torch.testing.assert_close(out.vocab_logits, model.lm_head(out.last_hidden_state))
        torch.testing.assert_close(out.logits, model(ids).logits)
    assert model(ids).logits.requires_grad  # without labels the mixture stays differentiable


def test_short_shift_labels_cover_the_last_positions_and_skip_the_softmax_in_front():
    model = tiny_model(pointer_loss_weight=0.3).double()
    ids = repeated_ids(T=13)
    y = torch.cat([ids[:, 1:], torch.full((2, 1), 4)], 1)
    full = model(ids, shift_labels=torch.cat([torch.full((2, 8), -100), y[:, 8:]], 1))
    rows = []
    model.lm_head.register_forward_hook(lambda mod, args, out: rows.append(args[0].shape[1]))
    short = model(ids, shift_labels=y[:, 8:], logits_to_keep=1)
    assert rows == [5]  # training: the softmax matrix ran on the 5 labelled positions only
    with torch.no_grad():
        model.eval()
        model(ids, shift_labels=y[:, 8:], logits_to_keep=1)
        model.train()
    assert rows == [5, 5, 1]  # evaluation: then on the kept one for the report
    torch.testing.assert_close(short.loss, full.loss)
    torch.testing.assert_close(short.target_log_probs, full.target_log_probs[:, 8:])
    short.loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    full.loss.backward()
    for n, p in model.named_parameters():
        torch.testing.assert_close(grads[n], p.grad, msg=n)
    for bad in (torch.zeros(2, 14, dtype=torch.long), torch.zeros(1, 3, dtype=torch.long)):
        with pytest.raises(ValueError, match="shift_labels shape"):
            model(ids, shift_labels=bad)
