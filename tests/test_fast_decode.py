"""generate's fast decode step (`decode_step`, packed weights, a ring window) against the forward path: the same
tokens, scores, logits and final cache, for every model variant and decoding option the loop handles."""

import pytest
import torch
from conftest import finite, tiny_model
from transformers.generation.streamers import BaseStreamer

from modeling_pointer_sentinel import PointerSentinelCache
from modeling_pointer_sentinel.generation_pointer_sentinel import decode_state, write_back
from modeling_pointer_sentinel.modeling_pointer_sentinel import decode_step

VARIANTS = {
    "sentinel": {},
    "adaptive": dict(adaptive_softmax_cutoffs=[4, 10], adaptive_softmax_div_value=2.0),
    "switch_zoneout": dict(gate_type="switch", zoneout=0.3, tie_word_embeddings=False, hidden_size=10),
    "plain": dict(use_pointer=False),
}
BATCH = torch.tensor([[1, 2, 3, 1, 2, 4, 1], [0, 0, 0, 0, 5, 3, 5]])
MASK = torch.tensor([[1] * 7, [0] * 4 + [1] * 3])  # left padding
DECODING = {
    "greedy": dict(do_sample=False),
    "sampling": dict(do_sample=True, top_k=6, temperature=0.8),
    "penalty_suppress_min_new": dict(
        do_sample=False, repetition_penalty=1.7, suppress_tokens=[4, 7, 99], min_new_tokens=9
    ),  # fmt: skip
    "no_pointer_mix": dict(do_sample=False, pointer_mix=False),
    "suppress_unmixed": dict(do_sample=False, suppress_tokens=[4], pointer_mix=False),  # masks the raw scores
}


def model(variant):
    return tiny_model(pointer_window=6, **VARIANTS[variant]).eval()


def run(m, decode, ids=BATCH, mask=MASK, seed=0, **kw):
    """15 new tokens: the window of 6 wraps twice."""
    kw = dict(max_new_tokens=15, pad_token_id=0, eos_token_id=None, output_scores=True, output_logits=True,
              return_dict_in_generate=True) | kw  # fmt: skip
    torch.manual_seed(seed)
    return m.generate(ids, attention_mask=mask, decode_step=decode, **kw)


def assert_same(fast, slow):
    assert torch.equal(fast.sequences, slow.sequences)
    for got, want in [(fast.scores, slow.scores), (fast.logits, slow.logits)]:
        torch.testing.assert_close(torch.stack(got), torch.stack(want), atol=1e-5, rtol=1e-5)
    a, b = fast.past_key_values, slow.past_key_values
    assert a.seen_tokens == b.seen_tokens
    for x, y in [(a.hidden, b.hidden), (a.cell, b.cell)]:
        torch.testing.assert_close(x, y, atol=1e-6, rtol=1e-5)
    if b.window_states is not None:
        assert torch.equal(a.window_ids, b.window_ids) and torch.equal(a.window_mask, b.window_mask)
        torch.testing.assert_close(a.window_states, b.window_states, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("decoding", DECODING)
@pytest.mark.parametrize("variant", VARIANTS)
def test_fast_generate_equals_forward_generate(variant, decoding):
    m = model(variant)
    assert_same(run(m, "fast", **DECODING[decoding]), run(m, "forward", **DECODING[decoding]))


def test_suppressed_and_early_eos_tokens_get_no_mass():
    m = model("sentinel")
    out = run(m, "fast", suppress_tokens=[4, 7, 99], min_new_tokens=9, eos_token_id=3)
    for i, s in enumerate(out.scores):
        assert torch.isinf(s[:, [4, 7]]).all()
        assert torch.isinf(s[:, 3]).all() == (i < 9)


def test_min_length_and_min_new_tokens_lift_eos_masks_at_their_own_lengths():
    m = model("sentinel")
    # a 7-token prompt; transformers drops min_length when min_new_tokens is given
    for kw, masked in [(dict(min_length=11), 4), (dict(min_length=11, min_new_tokens=6), 6),
                       (dict(min_length=13, suppress_tokens=[5]), 6)]:  # fmt: skip
        out = run(m, "fast", eos_token_id=3, **kw)
        assert_same(out, run(m, "forward", eos_token_id=3, **kw))
        assert [bool(torch.isinf(s[:, 3]).all()) for s in out.scores] == [i < masked for i in range(len(out.scores))]
        assert all(torch.isinf(s[:, kw.get("suppress_tokens", [])]).all() for s in out.scores)


def test_a_single_row_stops_at_eos():
    m = model("sentinel")
    free = run(m, "forward", ids=BATCH[:1], mask=None).sequences
    eos = int(free[0, 9])
    n = free[0, 7:].tolist().index(eos) + 8  # the prompt, then the new tokens up to the first eos
    one = dict(ids=BATCH[:1], mask=None, eos_token_id=eos)
    fast, slow = run(m, "fast", **one), run(m, "forward", **one)
    assert_same(fast, slow)
    assert torch.equal(fast.sequences, free[:, :n])
    absent = next(t for t in range(m.config.vocab_size) if t not in free[0].tolist())
    either = run(m, "fast", ids=BATCH[:1], mask=None, eos_token_id=[absent, eos])  # any of several ids stops it
    assert torch.equal(either.sequences, free[:, :n])


def test_eos_rows_continue_with_padding_and_generation_stops():
    m = model("sentinel")
    free = run(m, "forward").sequences
    eos = int(free[0, 7])  # the first row's first new token, which differs from the token before it
    assert eos != free[0, 6] and eos not in free[1].tolist()
    fast, slow = run(m, "fast", eos_token_id=eos), run(m, "forward", eos_token_id=eos)
    assert_same(fast, slow)
    assert (fast.sequences[0, 8:] == 0).all() and torch.equal(fast.sequences[1], free[1])  # padding after EOS
    absent = next(t for t in range(m.config.vocab_size) if t not in free.tolist()[0] + free.tolist()[1])
    either = run(m, "fast", eos_token_id=[absent, eos])  # any of several ids ends a row
    assert torch.equal(either.sequences, fast.sequences)


def test_the_sequence_buffer_grows_past_its_first_block():
    """The sequences' buffer starts 1,024 tokens past the prompt and doubles when full: the same run as forward's."""
    m = model("sentinel")
    kw = dict(max_new_tokens=1100, do_sample=True)
    assert_same(run(m, "fast", **kw), run(m, "forward", **kw))


def test_a_huge_max_new_tokens_holds_memory_only_for_the_tokens_made():
    """max_new_tokens=10**12 once asked for an 8 TB buffer up front; now the run goes until another criterion stops
    it."""
    out = run(model("sentinel"), "fast", max_new_tokens=10**12, max_time=0.5, return_dict_in_generate=False)
    assert 7 < out.shape[1] < 10**6
    with pytest.raises(ValueError, match="max_new_tokens: beam search keeps 2 x"):  # its buffer is transformers'
        run(model("sentinel"), "fast", max_new_tokens=10**12, num_beams=2, return_dict_in_generate=False)


@pytest.mark.parametrize("variant", VARIANTS)
def test_continuing_from_the_fast_cache_equals_one_run(variant):
    m = model(variant)
    whole = run(m, "forward", mask=None, ids=BATCH[:1], max_new_tokens=20).sequences
    first = run(m, "fast", mask=None, ids=BATCH[:1], max_new_tokens=9)
    rest = run(m, "fast", mask=None, ids=first.sequences, max_new_tokens=11, past_key_values=first.past_key_values)
    assert torch.equal(rest.sequences, whole)


def steps_against_forward(m, batch, mask, tokens, steps):
    """`steps` decode steps after a prompt, each against forward at T = 1 with its cache; the next tokens run through
    every id. Returns forward's cache and the step's state."""
    cache = PointerSentinelCache()
    with torch.no_grad():
        m(batch, attention_mask=mask, past_key_values=cache, use_cache=True)
        state, weights = decode_state(cache), m._packed_weights()
        for step in range(steps):
            want = m(tokens[:, None], past_key_values=cache, use_cache=True)
            log_p, vocab = decode_step(m, weights, state, tokens, True)
            torch.testing.assert_close(finite(log_p), want.logits[:, -1], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(vocab, want.vocab_logits[:, -1], atol=1e-5, rtol=1e-5)
            tokens = (tokens * 7 + step) % (m.config.vocab_size + m.config.oov_slots)
    return cache, state


@pytest.mark.parametrize("variant", ["sentinel", "adaptive", "switch_zoneout"])
def test_decode_step_equals_forward_one_token_at_a_time(variant):
    """The step itself, over three turns of the ring, against forward at T = 1 with its cache."""
    m = model(variant)
    cache, state = steps_against_forward(m, BATCH, MASK, torch.tensor([3, 9]), 18)
    mirror = PointerSentinelCache()
    mirror.seen_tokens = cache.seen_tokens - 18
    write_back(state, mirror, 18)
    assert mirror.seen_tokens == cache.seen_tokens and torch.equal(mirror.window_ids, cache.window_ids)
    torch.testing.assert_close(mirror.window_states, cache.window_states)


def test_changed_weights_are_repacked():
    m = model("sentinel")
    before = run(m, "fast")
    with torch.no_grad():
        m.lm_head.bias[9] += 10.0  # in place: same tensor, new version
        m.model.layers[1].weight_hh.mul_(1.5)
    after, slow = run(m, "fast"), run(m, "forward")
    assert_same(after, slow)
    assert not torch.allclose(torch.stack(after.scores), torch.stack(before.scores))


def test_streamer_gets_each_fast_token_once():
    class Collect(BaseStreamer):
        def __init__(self):
            self.puts, self.ended = [], False

        def put(self, value):
            self.puts.append(value.tolist())

        def end(self):
            self.ended = True

    m, streamer = model("sentinel"), Collect()
    out = run(m, "fast", ids=BATCH[:1], mask=None, streamer=streamer)
    assert streamer.ended and streamer.puts[0] == [BATCH[0].tolist()]
    assert [t for p in streamer.puts[1:] for t in p] == out.sequences[0, 7:].tolist()


def test_fallbacks_and_bad_choice():
    m = model("sentinel")
    hidden = run(m, "fast", output_hidden_states=True)  # per-step hidden states: forward's loop
    assert len(hidden.hidden_states) == 15
    assert_same(hidden, run(m, "forward", output_hidden_states=True))
    with pytest.raises(ValueError, match='decode_step must be "fast", "compiled" or "forward"'):
        run(m, "quick")


def test_decode_step_compiles_as_one_graph():
    """`nn.LSTM` graph-breaks under dynamo; the step's cell is plain ops. fullgraph refuses any break."""
    m = model("sentinel")
    cache = PointerSentinelCache()
    with torch.no_grad():
        m(BATCH, attention_mask=MASK, past_key_values=cache, use_cache=True)
        weights, eager, compiled = m._packed_weights(), decode_state(cache), decode_state(cache)
        torch._dynamo.reset()
        step = torch.compile(decode_step, fullgraph=True, backend="aot_eager")
        tokens = torch.tensor([3, 9])
        for _ in range(8):
            want, got = decode_step(m, weights, eager, tokens, True), step(m, weights, compiled, tokens, True)
            torch.testing.assert_close(got, want)
            tokens = want[0].argmax(-1)


def test_compiled_generate_equals_fast():
    m = model("sentinel")
    assert_same(run(m, "compiled", max_new_tokens=8), run(m, "fast", max_new_tokens=8))
