"""What the demo page (examples/app.py) shows of a text, computed from the model's own outputs: where the pointer
looked (its window and attention a), how far the sentinel gate g opened, and how each word's probability splits into
a vocabulary part g p_vocab(w) and a pointer part sum_{i in window, x_i = w} a_i (the paper's 2.4).

It reads a forward's `logits`, `vocab_logits`, `gate` and `pointer_attention` and nothing else, so it serves a model
loaded from this package or from a folder's remote code alike, and it imports nothing from the package.

`<unk>` and the placeholders of unseen words share `<unk>`'s vocabulary mass g p_vocab(<unk>) (`split_unknown`): their
vocabulary part is their probability less their pointer part, and those parts sum to g p_vocab(<unk>).
"""

from dataclasses import dataclass

import torch


@dataclass
class Explanation:
    """Per position t, the moment the token after t was chosen; each tensor (T, ...), probabilities in float64."""

    gate: torch.Tensor  # (T,) g, the vocabulary softmax's share
    window_ids: torch.Tensor  # (T, L) the tokens t-L+1 ... t, oldest first; -1 where none
    attention: torch.Tensor  # (T, L) a on them
    top_ids: torch.Tensor  # (T, k) the most probable next tokens, most probable first
    top_prob: torch.Tensor  # (T, k) their p(w); each p = top_vocab + top_pointer
    top_vocab: torch.Tensor
    top_pointer: torch.Tensor
    target_prob: torch.Tensor | None = None  # (T,) p(y) of the `targets`, and its two parts
    target_vocab: torch.Tensor | None = None
    target_pointer: torch.Tensor | None = None
    target_log_prob_without_pointer: torch.Tensor | None = None  # log p_vocab(y): g forced to 1, the pointer off

    @property
    def target_share(self) -> torch.Tensor:
        """The share of p(y) that came from the pointer."""
        return self.target_pointer / self.target_prob


@torch.no_grad()
def explain(out, ids, config, targets=None, top_k: int = 10) -> Explanation:
    """The pointer's view at the positions of `out`, a model output for one row (no padding) whose T positions are
    the last T of `ids` (1-D: the row's tokens so far; the earlier ones fill the window). `targets` (T,): the token
    that followed each position (its probability, parts and log p without the pointer; every target, an unseen word's
    first occurrence included, is read in its own column, as the model's loss reads it); `config` gives the
    vocabulary size and `<unk>`. The plain LSTM (use_pointer=False) reads g = 1 and a = 0."""
    logits = out.logits[0]
    # in float64: a float32 log-softmax over tens of thousands of columns is off by 1e-5 of p; the mixture is
    # normalised already, the plain model's logits are not
    log_p = torch.log_softmax(logits.double(), -1)
    log_pv = torch.log_softmax(out.vocab_logits[0].double(), -1)  # (T, V) log p_vocab
    T, L = log_p.shape[0], out.pointer_attention.shape[-1]
    V, unk = config.vocab_size, config.unk_token_id
    gate, attention = out.gate[0, -T:].double(), out.pointer_attention[0, -T:].double()
    ids = torch.as_tensor(ids).flatten()
    n = ids.numel()
    # row t holds ids t-L+1 ... t, as `sliding_window` lays the model's window out
    window_ids = torch.cat([ids.new_full((L - 1,), -1), ids])[n - T : n + L - 1].unfold(0, L, 1)

    def parts(w):  # w (T, k) -> p(w), its vocabulary part, its pointer part
        p = log_p.gather(-1, w).double().exp()
        pointer = ((window_ids[:, :, None] == w[:, None, :]) * attention[:, :, None]).sum(1)
        own = (w < V) & (w != unk)  # a word of the vocabulary other than <unk> has g p_vocab(w) to itself
        vocab = gate[:, None] * log_pv.gather(-1, w.clamp(max=V - 1)).double().exp()
        return p, torch.where(own, vocab, p - pointer), pointer

    top_ids = log_p.topk(min(top_k, log_p.shape[-1]), -1).indices
    e = Explanation(gate, window_ids, attention, top_ids, *parts(top_ids))
    if targets is not None:
        y = torch.as_tensor(targets).reshape(T, 1)  # a new unseen word's column holds its new-word share
        e.target_prob, e.target_vocab, e.target_pointer = (t[:, 0] for t in parts(y))
        e.target_log_prob_without_pointer = log_pv.gather(-1, y.masked_fill(y >= V, unk))[:, 0].double()
    return e
