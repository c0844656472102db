"""Each regulariser's training-mode behaviour, and a whole training-mode forward against the loop reference fed the
same random draws. Statistical checks use fixed seeds and tolerances of about 5 binomial standard deviations."""

import dataclasses
import math

import pytest
import torch
from conftest import tiny_model
from reference import draw_masks, reference_batch

from modeling_pointer_sentinel import PointerSentinelConfig
from modeling_pointer_sentinel.modeling_pointer_sentinel import locked_dropout


def tolerance(p: float, n: int) -> float:
    return 5 * math.sqrt(p * (1 - p) / n)


def lstm_update(layer, x, h, c):
    """The un-zoned LSTM step from (h, c)."""
    i, f, g, o = (x @ layer.weight_ih.T + layer.bias_ih + h @ layer.weight_hh.T + layer.bias_hh).chunk(4, -1)
    c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c_new), c_new


@pytest.mark.parametrize("p", [0.2, 0.7])
def test_zoneout_keeps_each_unit_with_probability_p_and_steps_follow_the_formula(p):
    torch.manual_seed(0)
    layer = tiny_model(zoneout=p, hidden_size=64, num_layers=1, embedding_size=64).model.layers[0].double().train()
    B, H, calls = 64, 64, 8
    x = torch.randn(B, 1, 64, dtype=torch.float64)
    h0, c0 = torch.randn(B, H, dtype=torch.float64), torch.randn(B, H, dtype=torch.float64)
    h_new, c_new = lstm_update(layer, x[:, 0], h0, c0)
    keeps_h, keeps_c = [], []
    for _ in range(calls):  # one step per call: h and c are both visible
        _, h1, c1, _ = layer(x, h0, c0)
        keep_h, keep_c = h1 == h0, c1 == c0
        # each unit either keeps its previous value or takes the LSTM update: h = d h_prev + (1 - d) h_new
        assert torch.all(keep_h | torch.isclose(h1, h_new, rtol=0, atol=1e-12)), "h is neither kept nor updated"
        assert torch.all(keep_c | torch.isclose(c1, c_new, rtol=0, atol=1e-12)), "c is neither kept nor updated"
        keeps_h.append(keep_h.double().mean().item())
        keeps_c.append(keep_c.double().mean().item())
        # h and c draw separate masks: they agree about as often as two independent coins would
        agree = (keep_c == keep_h).double().mean().item()
        assert abs(agree - (p * p + (1 - p) ** 2)) < 1.5 * tolerance(0.5, B * H)
    n = calls * B * H
    assert abs(sum(keeps_h) / calls - p) < tolerance(p, n), (sum(keeps_h) / calls, p)
    assert abs(sum(keeps_c) / calls - p) < tolerance(p, n), (sum(keeps_c) / calls, p)
    # over a longer call each step is drawn afresh: the kept share of h per step stays near p
    out, _, _, _ = layer(torch.randn(B, 6, 64, dtype=torch.float64), h0, c0)
    prev = torch.cat([h0[:, None], out[:, :-1]], 1)
    per_step = (out == prev).double().mean((0, 2))
    assert torch.all((per_step - p).abs() < tolerance(p, B * H)), per_step


def test_zoneout_at_evaluation_is_its_expectation():
    layer = tiny_model(zoneout=0.3, num_layers=1).model.layers[0].double().eval()
    x = torch.randn(2, 1, 8, dtype=torch.float64)
    h0, c0 = torch.randn(2, 12, dtype=torch.float64), torch.randn(2, 12, dtype=torch.float64)
    _, h1, c1, _ = layer(x, h0, c0)
    plain = tiny_model(zoneout=0.0, num_layers=1).model.layers[0].double().eval()
    plain.load_state_dict(layer.state_dict())
    _, hn, cn, _ = plain(x, h0, c0)
    torch.testing.assert_close(h1, 0.3 * h0 + 0.7 * hn)
    torch.testing.assert_close(c1, 0.3 * c0 + 0.7 * cn)


def test_locked_dropout_draws_one_mask_per_sequence_shared_over_time():
    torch.manual_seed(0)
    p, B, T, D = 0.3, 32, 9, 200
    y = locked_dropout(torch.ones(B, T, D, dtype=torch.float64), p, training=True)
    assert torch.equal(y, y[:, :1].expand(B, T, D)), "the mask changes over time"
    assert set(y.unique().tolist()) <= {0.0, 1 / (1 - p)}, y.unique()
    dropped = (y[:, 0] == 0).double().mean().item()
    assert abs(dropped - p) < tolerance(p, B * D)
    assert not torch.equal(y[0, 0], y[1, 0]), "every sequence shares one mask"
    assert torch.equal(locked_dropout(torch.ones(B, T, D), p, training=False), torch.ones(B, T, D))


def test_embedding_dropout_drops_whole_words():
    torch.manual_seed(0)
    p, V = 0.25, 400
    model = tiny_model(vocab_size=V, embedding_dropout=p).train()
    ids = torch.arange(V).repeat(2)[None]  # every word twice
    emb = model(ids, output_hidden_states=True).hidden_states[0][0]  # (2V, E), before the input dropout
    first, second = emb[:V], emb[V:]
    assert torch.equal(first, second), "one word's occurrences got different masks"
    gone = (first == 0).all(-1)
    assert torch.all(gone | torch.isclose(first, model.model.embed_tokens.weight / (1 - p)).all(-1))
    assert abs(gone.double().mean().item() - p) < tolerance(p, V)


def test_weight_drop_runs_the_kernel_on_one_dropped_matrix_per_call():
    """The output equals an LSTM run with W_hh * mask, one mask for every step of the call; W_hh's gradient flows
    through the mask."""
    torch.manual_seed(0)
    layer = tiny_model(weight_drop=0.5, num_layers=1).model.layers[0].double().train()
    x = torch.randn(3, 7, 8, dtype=torch.float64)
    h0, c0 = torch.zeros(3, 12, dtype=torch.float64), torch.zeros(3, 12, dtype=torch.float64)
    torch.manual_seed(5)
    out, h, c, _ = layer(x, h0, c0)
    torch.manual_seed(5)
    mask = torch.nn.functional.dropout(torch.ones_like(layer.weight_hh), 0.5, True)
    assert 0 < (mask == 0).double().mean() < 1
    w_hh = layer.weight_hh * mask
    hs, cs, outs = h0, c0, []
    for t in range(7):
        gates = x[:, t] @ layer.weight_ih.T + layer.bias_ih + hs @ w_hh.T + layer.bias_hh
        i, f, g, o = gates.chunk(4, -1)
        cs = torch.sigmoid(f) * cs + torch.sigmoid(i) * torch.tanh(g)
        hs = torch.sigmoid(o) * torch.tanh(cs)
        outs.append(hs)
    want = torch.stack(outs, 1)
    torch.testing.assert_close(out, want)
    # the gradient reaches W_hh through the same mask: zero where the mask dropped an entry
    (out.sum()).backward()
    grad = layer.weight_hh.grad
    assert torch.all(grad[mask == 0] == 0) and grad[mask != 0].abs().sum() > 0
    ref_w = layer.weight_hh.detach().clone().requires_grad_()
    hs, cs, total = h0, c0, 0
    for t in range(7):
        gates = x[:, t] @ layer.weight_ih.T.detach() + layer.bias_ih.detach() + hs @ (ref_w * mask).T
        i, f, g, o = (gates + layer.bias_hh.detach()).chunk(4, -1)
        cs = torch.sigmoid(f) * cs + torch.sigmoid(i) * torch.tanh(g)
        hs = torch.sigmoid(o) * torch.tanh(cs)
        total = total + hs.sum()
    total.backward()
    torch.testing.assert_close(grad, ref_w.grad)
    # evaluation uses the whole matrix
    layer.eval()
    torch.testing.assert_close(layer(x, h0, c0)[0], _plain_lstm(layer, x, h0, c0))


def _plain_lstm(layer, x, h, c):
    out = torch.lstm(x, (h[None], c[None]), [layer.weight_ih, layer.weight_hh, layer.bias_ih, layer.bias_hh], True, 1,
                     0.0, False, False, True)[0]  # fmt: skip
    return out


ALL_ON = dict(embedding_dropout=0.2, input_dropout=0.3, hidden_dropout=0.25, output_dropout=0.35, weight_drop=0.4)


@pytest.mark.parametrize("zoneout,gate_type", [(0.0, "sentinel"), (0.3, "sentinel"), (0.3, "switch")])
def test_training_forward_equals_the_loop_reference_with_the_same_draws(zoneout, gate_type):
    model = tiny_model(zoneout=zoneout, gate_type=gate_type, pointer_window=4, pointer_loss_weight=0.0, **ALL_ON)
    model = model.double().train()
    ids = torch.randint(0, 6, (2, 9), generator=torch.Generator().manual_seed(3))
    torch.manual_seed(11)
    out = model(ids, labels=ids, use_cache=True)
    torch.manual_seed(11)
    p, g, a, _, _ = reference_batch(model, ids, draw_masks(model, 2, 9))
    want = p[:, :-1].gather(-1, ids[:, 1:, None])[..., 0].log()
    torch.testing.assert_close(out.target_log_probs[:, :-1], want, atol=1e-10, rtol=1e-8)
    torch.testing.assert_close(out.gate, g, atol=1e-10, rtol=1e-8)
    torch.testing.assert_close(out.pointer_attention, a, atol=1e-10, rtol=1e-8)
    assert out.loss.item() == pytest.approx(-want.mean().item(), rel=1e-9)


def test_training_chunks_carry_state_and_window_with_fresh_masks_per_call():
    """Masks are drawn per call (AWD-LSTM), so two chunks differ from one whole call; what holds is that each chunk
    equals the reference started from the previous chunk's state and window, with that chunk's own draws."""
    model = tiny_model(zoneout=0.2, pointer_window=4, **ALL_ON).double().train()
    ids = torch.randint(0, 6, (2, 11), generator=torch.Generator().manual_seed(4))
    torch.manual_seed(21)
    first = model(ids[:, :6], use_cache=True)
    second = model(ids[:, 6:], past_key_values=first.past_key_values, use_cache=True)
    torch.manual_seed(21)
    p1, _, _, state, window = reference_batch(model, ids[:, :6], draw_masks(model, 2, 6))
    p2, g2, _, _, _ = reference_batch(model, ids[:, 6:], draw_masks(model, 2, 5), state, window)
    torch.testing.assert_close(first.logits.exp(), p1, atol=1e-10, rtol=1e-8)
    torch.testing.assert_close(second.logits.exp(), p2, atol=1e-10, rtol=1e-8)
    torch.testing.assert_close(second.gate, g2, atol=1e-10, rtol=1e-8)
    torch.manual_seed(21)
    whole = model(ids)
    assert not torch.allclose(whole.logits[:, 6:], second.logits), "chunks should see fresh masks"


def test_config_round_trip_keeps_every_field(tmp_path):
    """Every declared field set to a non-default value survives save_pretrained -> from_pretrained."""
    default = PointerSentinelConfig()
    changed = {}
    for f in dataclasses.fields(PointerSentinelConfig):
        if not f.init or f.name.startswith("_"):
            continue
        value = getattr(default, f.name)
        if isinstance(value, bool):
            changed[f.name] = not value
        elif isinstance(value, int):
            changed[f.name] = value + 3
        elif isinstance(value, float):
            changed[f.name] = round(value + 0.07, 4)
        elif f.name == "gate_type":
            changed[f.name] = "switch"
        elif value is None and f.name.endswith("token_id"):
            changed[f.name] = 2
        elif isinstance(value, list):
            changed[f.name] = [3, 7]
    ours = {"vocab_size", "embedding_size", "hidden_size", "num_hidden_layers", "tie_word_embeddings",
            "pointer_window", "use_pointer", "gate_type", "pointer_loss_weight", "embedding_dropout", "input_dropout",
            "hidden_dropout", "output_dropout", "weight_drop", "zoneout", "init_range", "pad_token_id",
            "bos_token_id", "eos_token_id", "use_cache", "adaptive_softmax_cutoffs",
            "adaptive_softmax_div_value"}  # fmt: skip
    assert ours <= set(changed), sorted(ours - set(changed))
    del changed["oov_pointer"]  # needs the pointer, which the flipped use_pointer turns off: round-tripped below
    del changed["speller_size"], changed["vocab_limit"]  # need more slots than the window holds: below too
    cfg = PointerSentinelConfig(**changed)
    cfg.save_pretrained(tmp_path)
    again = PointerSentinelConfig.from_pretrained(tmp_path)
    for name, value in changed.items():
        assert getattr(again, name) == value == getattr(cfg, name), name
    assert again.num_layers == changed["num_hidden_layers"]
    PointerSentinelConfig(oov_slots=4, unk_token_id=2, oov_pointer=True).save_pretrained(tmp_path / "oov")
    assert PointerSentinelConfig.from_pretrained(tmp_path / "oov").oov_pointer is True
    spelled = dict(vocab_size=20, oov_slots=6, pointer_window=5, unk_token_id=2, eos_token_id=0, speller_size=4,
                   vocab_limit=10)  # fmt: skip
    PointerSentinelConfig(**spelled).save_pretrained(tmp_path / "spelled")
    again = PointerSentinelConfig.from_pretrained(tmp_path / "spelled")
    assert (again.speller_size, again.vocab_limit) == (4, 10)
