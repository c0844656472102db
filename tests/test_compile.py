"""The CPU proxy for GPU speed: the training and decoding forwards compile as one graph (no graph break, no
host-device sync such as .item(), bool(tensor) or boolean indexing, each of which dynamo refuses under fullgraph)."""

import pytest
import torch
from conftest import tiny_model

from modeling_pointer_sentinel import PointerSentinelCache


def compiled(fn):
    torch._dynamo.reset()
    return torch.compile(fn, fullgraph=True, backend="aot_eager")  # aot_eager: traces forward and backward


@pytest.mark.parametrize(
    "kw",
    [
        dict(weight_drop=0.2, embedding_dropout=0.1, input_dropout=0.1, pointer_loss_weight=0.1),
        dict(gate_type="switch", zoneout=0.3),
        dict(adaptive_softmax_cutoffs=[4, 10], adaptive_softmax_div_value=2.0, tie_word_embeddings=True),
    ],
)
def test_training_forward_compiles_as_one_graph(kw):
    """Compiled == eager, loss and gradients, with the same random draws, a padded row and a carried cache."""
    model = tiny_model(**kw).train()
    ids = torch.randint(0, 23, (2, 9), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[1, :3] = 0  # left padding: the masked step loop

    def step(ids, mask, cache):  # the sliding-window scheme's call: carried cache, state split, target-only loss
        out = model(ids, attention_mask=mask, shift_labels=ids, past_key_values=cache, use_cache=True,
                    logits_to_keep=1, split_state_at=4)  # fmt: skip
        return out.loss, out.past_key_values

    def run(fn):
        torch.manual_seed(7)
        cache, losses, grads = PointerSentinelCache(), [], []
        for _ in range(2):  # the second call carries the first call's (detached) state and window
            loss, cache = fn(ids, mask if not losses else torch.ones_like(mask), cache)
            loss.backward()
            cache.detach_()
            losses.append(loss.detach())
            grads.append([p.grad.clone() for p in model.parameters()])
            model.zero_grad()
        return losses, grads

    eager_losses, eager_grads = run(step)
    compiled_losses, compiled_grads = run(compiled(step))
    torch.testing.assert_close(compiled_losses, eager_losses)
    for got, want in zip(compiled_grads, eager_grads, strict=True):
        torch.testing.assert_close(got, want)
    assert all(g.abs().sum() > 0 for g in eager_grads[0])


def test_decoding_step_compiles_as_one_graph():
    model = tiny_model().eval()
    prompt = torch.tensor([[0, 3, 4, 5], [6, 7, 8, 9]])
    mask = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]])  # left padding, as generate passes it
    cache = model(prompt, attention_mask=mask, use_cache=True).past_key_values
    eager_cache = model(prompt, attention_mask=mask, use_cache=True).past_key_values

    @compiled
    def step(token, mask, cache):
        return model(token, attention_mask=mask, past_key_values=cache, use_cache=True).logits

    token, mask = torch.tensor([[3], [4]]), torch.cat([mask, torch.ones(2, 1, dtype=mask.dtype)], 1)
    with torch.no_grad():
        got = step(token, mask, cache)
        want = model(token, attention_mask=mask, past_key_values=eager_cache).logits
    torch.testing.assert_close(got, want)
